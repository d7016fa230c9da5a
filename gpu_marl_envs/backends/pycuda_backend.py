"""CUDA C backend: an env's .cu file compiled (``compile_module``) and loaded by the CUDA driver on the
primary context (the one torch uses), launched on torch's current stream (``cuda_driver``).

The launch is one driver call on an argument buffer packed once at construction; only the actions
pointer is rewritten per step.
"""

from __future__ import annotations

import functools
import re
import struct
from importlib import resources

import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs import float32, rng
from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.backends import cuda_driver, current_stream_getter, nvrtc
from gpu_marl_envs.buffers import RESET_ARGUMENTS, STEP_ARGUMENTS, THREADS_PER_BLOCK, ClassicBuffers
from gpu_marl_envs.registration import RegisteredEnv


def availability(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "the pycuda backend needs a CUDA device"
    try:
        import cuda.bindings.driver  # noqa: F401  (the kernels' loads and launches: cuda_driver)
        import pycuda.driver  # noqa: F401  (nvcc's compile where NVRTC cannot be loaded)
    except ImportError as error:
        return (
            f"the pycuda backend needs pycuda, cuda-bindings and a CUDA driver ({error}): "
            "pip install 'gpu_marl_envs[cuda]'"
        )
    return None


def runtime_definitions() -> dict[str, str]:
    """The runtime's constants every .cu file is compiled with (RNG, float32 division, autoreset codes)."""
    return {
        "GME_MIX_MUL_1": f"{rng.MIX_MUL_1:#x}u",
        "GME_MIX_MUL_2": f"{rng.MIX_MUL_2:#x}u",
        "GME_SEED_SALT": f"{rng.SEED_SALT:#x}u",
        "GME_CORRECTED_LOW": f"{float32.CORRECTED_DIVIDENDS[0].hex()}f",
        "GME_CORRECTED_HIGH": f"{float32.CORRECTED_DIVIDENDS[1].hex()}f",
        **{f"GME_AUTORESET_{mode.name}": str(code) for mode, code in AUTORESET_CODES.items()},
    }


# The C type of a kernel array of each torch dtype.
C_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.int8: "signed char",
    torch.uint8: "unsigned char",
    torch.int16: "short",
    torch.int32: "int",
    torch.int64: "long long",
    torch.bool: "bool",
}


def c_type(dtype: torch.dtype, what: str) -> str:
    if dtype not in C_TYPES:
        raise ValueError(
            f"{what} has dtype {dtype}, which the kernels cannot take; use one of {', '.join(map(str, C_TYPES))}"
        )
    return C_TYPES[dtype]


def kernel_dir() -> str:
    return str(resources.files("gpu_marl_envs.kernels"))


def code_of(text: str) -> str:
    """C source ``text`` less its comments (what the compiler reads of it)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


# What the framework wraps around a rules file of each kind: the header it includes, the base of the
# rules' struct and the macro declaring the kernels. The file holds only its rules; one that writes
# the include or a macro of that family itself (GME_MULTI_AGENT_KERNELS_BOUNDED's launch bounds, or
# a file written before the framework added them) keeps its own, so it compiles as it did.
SHELLS = {
    True: ("multi_agent.cuh", "GmeGame", "GME_MULTI_AGENT_KERNELS"),
    False: ("classic.cuh", "GmeEnv", "GME_CLASSIC_KERNELS"),
}


def rules_source(cuda_file, multi_agent: bool) -> str:
    """``cuda_file``'s text as it is compiled: the framework's header included first where the file
    does not include it, and the kernels' macro for the file's one struct deriving from ``GmeGame``
    (``GmeEnv`` for a single-agent env) appended where the file uses no macro of that family.
    ``#line`` keeps the compiler's messages at the file's own line numbers."""
    header, base, macro = SHELLS[multi_agent]
    text = cuda_file.read_text()
    code = code_of(text)
    included = re.search(rf'^\s*#\s*include\s*["<]{re.escape(header)}[">]', code, re.M)
    source = ("" if included else f'#include "{header}"\n') + f'#line 1 "{cuda_file.name}"\n{text}'
    if re.search(rf"\b{macro}\w*\s*\(", code):
        return source
    rules = re.findall(rf"\bstruct\s+(\w+)\s*(?:final\s*)?:\s*(?:public\s+)?{base}\b", code)
    if len(rules) != 1:
        found = f"{len(rules)} ({', '.join(rules)})" if rules else "none"
        raise ValueError(
            f"{cuda_file}: the framework declares the kernels of the one struct deriving from {base} "
            f"(struct YourRules : {base} {{ ... }};), and this file has {found}: end it with {macro}(YourRules)"
        )
    # Past the file's last line: a message about the kernels names the macro, not a line the file lacks.
    return f'{source}\n#line 1 "{macro}({rules[0]}), added after {cuda_file.name}"\n{macro}({rules[0]})\n'


def with_header(cuda_file, defines: dict[str, str], declarations: str = "", *, multi_agent: bool) -> str:
    """``cuda_file``'s source (:func:`rules_source`) preceded by ``#define`` lines and declarations built
    in Python."""
    header = "".join(f"#define {name} {value}\n" for name, value in defines.items()) + declarations
    return header + rules_source(cuda_file, multi_agent)


def include_dirs(cuda_file) -> list[str]:
    """The framework's headers, then the folder of the env's own .cu file (its own headers)."""
    folder = getattr(cuda_file, "parent", None)
    return [kernel_dir()] + ([str(folder)] if folder is not None else [])


def compile_module(source: str, cuda_file, device_index: int) -> cuda_driver.Module:
    """A module of ``source`` for CUDA device ``device_index``, on the primary context torch uses:
    compiled by NVRTC and cached on disk (``backends/nvrtc.py``); by nvcc, through pycuda (and its
    cache), where NVRTC cannot be loaded (cuda-bindings of another CUDA major version than the NVRTC
    installed, say)."""
    capability = torch.cuda.get_device_capability(device_index)
    if nvrtc.unavailable_reason() is not None:
        from pycuda.compiler import compile as nvcc

        arch = f"sm_{capability[0]}{capability[1]}"
        image = nvcc(source, no_extern_c=True, arch=arch, include_dirs=include_dirs(cuda_file))
    else:
        image = nvrtc.binary(source, cuda_file.name, include_dirs(cuda_file), capability)
    return cuda_driver.Module(image, device_index)


def kernel_source(spec: RegisteredEnv) -> str:
    """A single-agent env's .cu source preceded by what Python knows: the runtime's constants, the
    kernels' name, the params struct ``GmeParams`` (``kernel_params`` in order) and the action type
    ``GmeAction``."""
    definition = spec.definition
    defines = {
        **runtime_definitions(),
        "GME_KERNEL_NAME": spec.kernel_name,
        "GME_OBS_DIM": str(definition.obs_dim),
        "GME_THREADS_PER_BLOCK": str(THREADS_PER_BLOCK),
    }
    fields = " ".join(
        f"{'int' if value.dtype.kind == 'i' else 'float'} {name};"
        for name, value in definition.kernel_values(definition.params_type()).items()
    )
    discrete = isinstance(definition.action_space(definition.params_type()), spaces.Discrete)
    declarations = f"struct GmeParams {{ {fields} }};\ntypedef {'long long' if discrete else 'float'} GmeAction;\n"
    return with_header(spec.kernels.cuda, defines, declarations, multi_agent=False)


@functools.cache
def _module(spec: RegisteredEnv, device_index: int):
    """One compiled module per env kind and device, shared by every env instance."""
    return compile_module(kernel_source(spec), spec.kernels.cuda, device_index)


_POINTER = struct.Struct("P")


def _pack(names, values, actions_layout: struct.Struct = _POINTER) -> tuple[bytearray, int | None]:
    """Pack kernel arguments with the C ABI's natural alignment. The ``actions`` argument, rewritten
    at each step, gets ``actions_layout.size`` zero bytes, pointer-aligned; returns the buffer and that
    argument's byte offset (None if absent)."""
    fmt, data, actions_offset = "", [], None
    for name in names:
        if name == "actions":
            fmt += "0P"
            actions_offset = struct.calcsize(fmt)
            fmt += f"{actions_layout.size}s"
            data.append(bytes(actions_layout.size))
            continue
        value = values.get(name)
        if value is None:  # a buffer the env does not have: a null pointer
            fmt += "P"
            data.append(0)
        elif isinstance(value, torch.Tensor):
            fmt += "P"
            data.append(value.data_ptr())
        elif isinstance(value, tuple):  # a struct of pointers (a game's state)
            fmt += "P" * len(value)
            data += [tensor.data_ptr() for tensor in value]
        elif isinstance(value, bytes):  # the params struct, 4-byte fields
            fmt += f"0i{len(value)}s"
            data.append(value)
        else:
            fmt += "i"
            data.append(int(value))
    return bytearray(struct.pack(fmt, *data)), actions_offset


class PycudaBackend:
    name = "pycuda"
    # No CUDA graph by default: the prepared launch costs less than a graph replay plus the copy
    # of the actions into the graph's input buffer.
    graph_by_default = False

    def __init__(
        self, spec: RegisteredEnv, params, buffers: ClassicBuffers, autoreset_mode: AutoresetMode, action_space
    ):
        definition = spec.definition
        device = buffers.state.device
        module = _module(spec, device.index)  # resolve_device always names the index
        num_envs = buffers.state.shape[1]

        values = dict(vars(buffers))
        values["num_envs"] = num_envs
        values["autoreset_mode"] = AUTORESET_CODES[autoreset_mode]
        values["params"] = definition.params_record(params).tobytes()
        self._step_buffer, self._actions_offset = _pack(STEP_ARGUMENTS, values)
        reset_buffer, _ = _pack(RESET_ARGUMENTS, values)
        blocks, stream = -(-num_envs // THREADS_PER_BLOCK), current_stream_getter(device.index)
        self._step = cuda_driver.PreparedLaunch(
            module.get_function(f"{spec.kernel_name}_step"), blocks, THREADS_PER_BLOCK, self._step_buffer, 0, stream
        )
        self.reset = cuda_driver.PreparedLaunch(
            module.get_function(f"{spec.kernel_name}_reset"), blocks, THREADS_PER_BLOCK, reset_buffer, 0, stream
        )

    def step(self, actions: torch.Tensor) -> None:
        struct.pack_into("P", self._step_buffer, self._actions_offset, actions.data_ptr())
        self._step()
