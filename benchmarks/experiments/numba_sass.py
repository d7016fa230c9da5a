"""Issue 46 without a GPU: an env's step kernel as Numba and as nvcc compile it for sm_90, side by
side in the machine code each runs (SASS): registers, local memory (spills and the stack frame),
instructions by kind. Where Numba's kernel runs more instructions of a kind than its CUDA C twin, its
source is what to change (``docs/custom_env.md``, "Numba as fast as CUDA C").

Needs the CUDA toolkit's ``nvcc`` and ``ptxas`` on the PATH and NVVM's libdevice, NVIDIA's
``cuobjdump`` (``--cuobjdump``; the ``nvidia-cuda-cuobjdump`` wheel ships one) and no GPU: Numba's
questions to the driver are answered here (sm_90), which is why this is a development tool and not
part of the package.

    python benchmarks/experiments/numba_sass.py                      # the five classic-control envs
    python benchmarks/experiments/numba_sass.py --env CovidEconomy-v0 TagGridworld-v0
    python benchmarks/experiments/numba_sass.py --env CartPole-v1 --dump /tmp/sass   # the SASS, to read
    python benchmarks/experiments/numba_sass.py --import cover --env cover/Cover-v0   # your own game
    python benchmarks/experiments/numba_sass.py --env TagContinuous-v0 --set num_runners=990   # other params
    python benchmarks/experiments/numba_sass.py --env SimpleSpread-v3 --warp-stores   # a wide grid's build

A count of instructions is not a time: a memory-bound kernel spends its time waiting on loads and
stores whatever it computes in between. But the kinds the Numba kernel has in excess (local loads
and stores, 64-bit integer arithmetic, loads of its arguments) are what it pays per env on top of
the same memory traffic.
"""

import argparse
import ast
import collections
import importlib
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numba
import numba.cuda.cudadrv.libs as libs
import numba.cuda.cudadrv.nvrtc as nvrtc
import numba.cuda.cudadrv.nvvm as nvvm
import numba.cuda.dispatcher as dispatcher
import numpy as np
import torch
from numba import cuda

from gpu_marl_envs import registration
from gpu_marl_envs.backends import multi_agent_pycuda, pycuda_backend
from gpu_marl_envs.buffers import STEP_ARGUMENTS, ClassicBuffers
from gpu_marl_envs.validation import zero_actions

SM_90 = (9, 0)


def without_a_driver(libdevice: str) -> None:
    """Answer Numba's questions to the driver and NVRTC: the target is sm_90."""
    nvrtc.get_supported_ccs = lambda: (SM_90,)
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=SM_90)
    libs.get_libdevice = nvvm.get_libdevice = lambda: libdevice


# SASS opcodes by what they cost a Numba kernel more than its twin (the opcode's first word).
KINDS = {
    "local": ("LDL", "STL"),
    "global": ("LDG", "STG", "LD", "ST"),
    "constant": ("LDC", "ULDC"),
    "shared": ("LDS", "STS"),
    "64-bit int": ("IMAD.WIDE", "IMAD.WIDE.U32", "IADD3.X", "LEA.HI.X", "IMAD.X", "SHF.R.S64", "SHF.L.U64.HI"),
    "branch": ("BRA", "BSSY", "BSYNC", "CALL.REL.NOINC", "RET.REL.NODEC"),
}


def numba_step_ptx(spec, params, bounds=None, warp_stores=False) -> str:
    """The PTX of the env's Numba step kernel for the argument types its backend launches it with,
    compiled for ``bounds`` (threads per block, blocks per SM) or else the kernel's own."""
    if registration.is_game(spec.id):
        from gpu_marl_envs.backends.multi_agent_numba import _action_layout, _kernels
        from gpu_marl_envs.multi_agent_buffers import GROUP_ARGUMENTS, MultiAgentBuffers
        from gpu_marl_envs.multi_agent_buffers import STEP_ARGUMENTS as GAME_STEP_ARGUMENTS

        buffers = MultiAgentBuffers.allocate(spec.definition, params, 2, torch.device("cpu"))
        step, *_ = _kernels(spec, params, warp_stores)
        views = {name: tensor.numpy() for name, tensor in buffers.tensors().items()}
        views["state"] = tuple(tensor.numpy() for tensor in buffers.state_arrays())
        views["action_masks"] = np.zeros((1, 1), bool)
        views.setdefault("episode_totals", np.zeros((1, 1), np.float32))
        definition = spec.definition
        shape = (2, params.num_agents, *definition.action_shape(params))
        views["actions"] = torch.zeros(shape, dtype=definition.action_dtype(params)).numpy()
        views["group_actions"] = tuple(
            np.zeros((2, agents * width), views["actions"].dtype)
            for _, agents, width in _action_layout(definition, params).groups
        )
        views["from_groups"] = np.int32(0)
        names = GAME_STEP_ARGUMENTS + GROUP_ARGUMENTS
    else:
        from gpu_marl_envs.backends.numba_backend import _kernels

        definition = spec.definition
        buffers = ClassicBuffers.allocate(2, len(definition.state_fields), definition.obs_dim, torch.device("cpu"))
        step, _ = _kernels(spec)
        views = {name: tensor.numpy() for name, tensor in buffers.tensors().items()}
        views["state"] = buffers.state.view(-1).numpy()
        views["actions"] = zero_actions(definition.action_space(params), 2, torch.device("cpu")).numpy()
        views["params"] = definition.params_record(params)
        names = STEP_ARGUMENTS
    views["num_envs"] = views["autoreset_mode"] = np.int32(0)
    signature = tuple(numba.typeof(views[name]) for name in names)
    bounds = bounds or step.targetoptions.get("launch_bounds")
    ptx, _ = cuda.compile_ptx(step.py_func, signature, cc=SM_90, launch_bounds=bounds)
    return ptx


def cuda_c_source(spec, params, warp_stores=False) -> str:
    if registration.is_game(spec.id):
        return multi_agent_pycuda.kernel_source(spec, params, warp_stores)
    return pycuda_backend.kernel_source(spec)


def compile_cubin(command: list[str], source: str, folder: Path, name: str) -> tuple[Path, str]:
    """``command`` run on ``source`` written to ``folder/name``: the cubin and ptxas's -v report."""
    path = folder / name
    path.write_text(source)
    cubin = path.with_suffix(".cubin")
    result = subprocess.run([*command, str(path), "-o", str(cubin)], capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{' '.join(command)} {path} failed:\n{result.stderr}")
    return cubin, result.stderr


def numba_cubin(ptx: str, folder: Path, name: str) -> tuple[Path, str]:
    """The kernel as Numba links it on a GPU: with the helpers it calls from its own CUDA C library
    (``reshape_funcs.cu``: an array's ``reshape`` inside a kernel), compiled apart and linked, so
    that calls into them stay calls."""
    helpers = [f for f in ("numba_attempt_nocopy_reshape", "nocopy_empty_reshape") if f in ptx]
    if not helpers:
        return compile_cubin(["ptxas", "-arch=sm_90", "-v"], ptx, folder, f"{name}-numba.ptx")
    kernel, report = compile_cubin(["ptxas", "-arch=sm_90", "-v", "-c"], ptx, folder, f"{name}-numba.ptx")
    library = Path(cuda.__file__).parent / "reshape_funcs.cu"
    helper, _ = compile_cubin(["nvcc", "-cubin", "-rdc=true", "-arch=sm_90"], library.read_text(), folder, "reshape.cu")
    linked = folder / f"{name}-linked.cubin"
    subprocess.run(["nvlink", "-arch=sm_90", str(kernel), str(helper), "-o", str(linked)], check=True)
    return linked, report + f"\n(calls {', '.join(helpers)} of Numba's reshape_funcs.cu)"


def step_sass(cubin: Path, cuobjdump: str) -> tuple[list[str], list[str]]:
    """The opcodes of the cubin's step kernel, one per instruction (NOPs left out), and its
    instructions with their operands (to read)."""
    text = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    functions = re.split(r"\n\s*Function : ", text)[1:]
    body = next(f for f in functions if "_step" in f.split("\n", 1)[0])
    opcodes, lines = [], []
    for line in body.splitlines():
        match = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if match and match.group(1) != "NOP":
            opcodes.append(match.group(1))
            lines.append(line.strip().split(" ;")[0])
    return opcodes, lines


def summary(opcodes: list[str], report: str) -> dict[str, object]:
    """``report``: ptxas's -v lines, of which the step kernel's are read."""
    report = next(part for part in report.split("Compiling entry function")[1:] if "_step" in part.split("\n", 1)[0])
    words = collections.Counter(opcodes)
    row = {"instructions": len(opcodes)}
    for kind, names in KINDS.items():
        row[kind] = sum(count for op, count in words.items() if op in names or op.split(".")[0] in names)
    registers = re.findall(r"Used (\d+) registers", report)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    stack = re.findall(r"(\d+) bytes stack frame", report)
    row["registers"] = registers[0] if registers else "?"
    row["spill bytes (st/ld)"] = "/".join(spills[0]) if spills else "?"
    row["stack bytes"] = stack[0] if stack else "?"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    classic = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]
    parser.add_argument("--env", nargs="+", default=classic, help="registered envs or games (default: classic control)")
    parser.add_argument("--import", dest="imports", nargs="*", default=[], help="packages that register your envs")
    parser.add_argument("--cuobjdump", default="cuobjdump")
    parser.add_argument("--libdevice", default="/usr/local/cuda/nvvm/libdevice/libdevice.10.bc")
    parser.add_argument("--dump", type=Path, help="a folder for each kernel's SASS, an instruction a line")
    parser.add_argument(
        "--warp-stores",
        action="store_true",
        help="games: the build of a grid wider than the GPU (multi_agent_buffers.stores_by_warp; staged games only)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="a params field (a literal), every env"
    )
    args = parser.parse_args()
    settings = {key: ast.literal_eval(value) for key, value in (item.split("=", 1) for item in args.set)}
    without_a_driver(args.libdevice)
    for package in args.imports:
        importlib.import_module(package)
    columns = ["instructions", *KINDS, "registers", "spill bytes (st/ld)", "stack bytes"]
    print("| env | compiler | " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * len(columns))
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for env_id in args.env:
            game = registration.is_game(env_id)
            spec = registration.game_spec(env_id) if game else registration.env_spec(env_id)
            params = spec.definition.make_params(**settings)
            kernels = {
                "nvcc": compile_cubin(
                    ["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", f"-I{pycuda_backend.kernel_dir()}"]
                    + [f"-I{d}" for d in pycuda_backend.include_dirs(spec.kernels.cuda)[1:]],
                    cuda_c_source(spec, params, args.warp_stores),
                    folder,
                    f"{spec.kernel_name}.cu",
                ),
                "Numba": numba_cubin(
                    numba_step_ptx(spec, params, warp_stores=args.warp_stores), folder, spec.kernel_name
                ),
            }
            for compiler, (cubin, report) in kernels.items():
                opcodes, lines = step_sass(cubin, args.cuobjdump)
                if args.dump:
                    args.dump.mkdir(parents=True, exist_ok=True)
                    # A package's id (cover/Cover-v0) names no sub-folder.
                    name = env_id.replace("/", "_")
                    (args.dump / f"{name}-{compiler}.sass").write_text("\n".join(lines) + "\n")
                row = summary(opcodes, report)
                print(f"| {env_id} | {compiler} | " + " | ".join(str(row[c]) for c in columns) + " |", flush=True)


if __name__ == "__main__":
    main()
