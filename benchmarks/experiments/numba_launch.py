"""The host time of one Numba kernel launch, by how it is made (issue 46's small batches).

CartPole's Numba step kernel at 4,096 envs (its GPU time is about 2.5 µs, below every launch's host
time), launched the ways ``kernels/numba_api.PreparedLaunch`` could: the driver's ``cuLaunchKernel``
through cuda-bindings or through ctypes (``CDLL``, which releases the GIL around the call, or
``PyDLL``, which keeps it), with a pointer per parameter (``kernelParams``) or every parameter
packed in one buffer (``extra``, as the CUDA C backend's launch), the call's arguments converted at each call
(argtypes) or built once as ctypes objects, on the CUkernel handle Numba holds (which the driver
resolves to the context's function at each launch) or on that function resolved once
(``cuKernelGetFunction``); beside it, the launch of CUDA C's CartPole step alone and both
backends' ``step``. ``PreparedLaunch`` launches the fastest way measured (cuda-bindings, the
function resolved once: issue 46's notes in docs/benchmarks/history.md). Variants are timed in
turns (``--rounds`` of ``--launches`` each, bracketed by synchronize), median µs a launch. Each
variant first steps its own copy of the envs from one state; their observations must agree bitwise.

    python benchmarks/experiments/numba_launch.py
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import torch
from gpu_marl_envs.kernels import numba_api

from gpu_marl_envs import GpuVectorEnv
from gpu_marl_envs.backends import current_stream_getter

ARGTYPES = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]


def driver(kind):
    launch = kind("libcuda.so.1").cuLaunchKernel
    launch.argtypes, launch.restype = ARGTYPES, ctypes.c_int
    return launch


def packed_parameters(values):
    """``extra`` for cuLaunchKernel: the parameters in one buffer, each at an offset of a multiple of
    its size (CU_LAUNCH_PARAM_BUFFER_POINTER, the buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, its size,
    CU_LAUNCH_PARAM_END), and the objects that must outlive the launches."""
    offsets, size = [], 0
    for value in values:
        size += -size % ctypes.sizeof(value)
        offsets.append(size)
        size += ctypes.sizeof(value)
    buffer = (ctypes.c_uint64 * max(1, -(-size // 8)))()
    for value, offset in zip(values, offsets):
        ctypes.memmove(ctypes.addressof(buffer) + offset, ctypes.addressof(value), ctypes.sizeof(value))
    length = ctypes.c_size_t(size)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(length), 0)
    return ctypes.addressof(extra), (buffer, length, extra)


def unprototyped(kind):
    """The driver's ``cuLaunchKernel`` from a library instance of its own, without argtypes: its
    arguments are passed as the ctypes objects they are, converted by nothing in the call."""
    launch = kind("libcuda.so.1").cuLaunchKernel
    launch.restype = ctypes.c_int
    return launch


def launches(kernel, args, blocks, threads, stream):
    """name -> launch(stream) of the compiled ``kernel`` on ``args`` (no pointer patched), the number
    of its parameters, and the objects the launches read (to be kept alive while they run)."""
    from numba.cuda.cudadrv.driver import binding

    compiled = numba_api._compiled(kernel, args)
    compiled.bind()
    values = []
    for kind, value in zip(compiled.argument_types, args):
        compiled._prepare_args(kind, value, 0, [], values)
    values = [v if isinstance(v, ctypes._SimpleCData) else ctypes.c_ssize_t(v) for v in values]
    pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
    address = ctypes.addressof(pointers)
    extra, keep = packed_parameters(values)
    # Numba loads its kernels as a library (cuLibraryLoadData): its handle is a CUkernel, which the
    # driver resolves to the current context's function at every launch; cuKernelGetFunction
    # resolves it once.
    handle = int(compiled._codelibrary.get_cufunc().handle)
    function = binding.CUfunction(handle)
    error, resolved = binding.cuKernelGetFunction(binding.CUkernel(handle))
    assert error == binding.CUresult.CUDA_SUCCESS, error
    resolved_handle = int(resolved)
    cdll, pydll = driver(ctypes.CDLL), driver(ctypes.PyDLL)
    raw_cdll, raw_pydll = unprototyped(ctypes.CDLL), unprototyped(ctypes.PyDLL)
    one, zero = ctypes.c_uint(1), ctypes.c_uint(0)
    # Every argument built once (the stream's too: a launch on another stream would rebuild it).
    built = (
        ctypes.c_void_p(handle),
        ctypes.c_uint(blocks),
        one,
        one,
        ctypes.c_uint(threads),
        one,
        one,
        zero,
        ctypes.c_void_p(stream),
        ctypes.c_void_p(address),
        ctypes.c_void_p(0),
    )

    def bindings_pointers(stream):
        binding.cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, 0, stream, address, 0)

    def bindings_resolved(stream):
        binding.cuLaunchKernel(resolved, blocks, 1, 1, threads, 1, 1, 0, stream, address, 0)

    stream_object = binding.CUstream(stream)

    def bindings_resolved_stream(stream):
        binding.cuLaunchKernel(resolved, blocks, 1, 1, threads, 1, 1, 0, stream_object, address, 0)

    resolved_built = (ctypes.c_void_p(resolved_handle), *built[1:])

    def pydll_resolved_built(stream):
        raw_pydll(*resolved_built)

    def cdll_pointers(stream):
        cdll(handle, blocks, 1, 1, threads, 1, 1, 0, stream, address, None)

    def cdll_packed(stream):
        cdll(handle, blocks, 1, 1, threads, 1, 1, 0, stream, None, extra)

    def pydll_packed(stream):
        pydll(handle, blocks, 1, 1, threads, 1, 1, 0, stream, None, extra)

    def cdll_built(stream):
        raw_cdll(*built)

    def pydll_built(stream):
        raw_pydll(*built)

    made = {
        "cuda-bindings, the CUkernel handle Numba holds, a pointer per parameter": bindings_pointers,
        "ctypes CDLL, a pointer per parameter": cdll_pointers,
        "ctypes CDLL, packed": cdll_packed,
        "ctypes PyDLL, packed": pydll_packed,
        "ctypes CDLL, a pointer per parameter, arguments built once": cdll_built,
        "ctypes PyDLL, a pointer per parameter, arguments built once": pydll_built,
        "cuda-bindings, the CUfunction resolved once (PreparedLaunch's)": bindings_resolved,
        "ctypes PyDLL, arguments built once, the CUfunction resolved once": pydll_resolved_built,
        "cuda-bindings, the CUfunction resolved once, the stream a CUstream built once": bindings_resolved_stream,
    }
    return made, len(values), (values, pointers, keep)  # the last: what the launches read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    n = args.num_envs
    captured = []
    original = numba_api.PreparedLaunch

    class Capture(original):
        def __init__(self, kernel, launch_args, blocks, threads, shared_bytes=0, patched=(), stream=lambda: 0):
            super().__init__(kernel, launch_args, blocks, threads, shared_bytes, patched, stream)
            captured.append((kernel, launch_args, blocks, threads))

    # One env per variant, each stepped by its own launches; an env's first prepared launch is its step.
    numba_api.PreparedLaunch = Capture
    envs, steps = [], []
    try:
        for _ in range(10):
            captured.clear()
            envs.append(GpuVectorEnv("CartPole-v1", n, device="cuda", backend="numba", validate_actions=False))
            steps.append(captured[0])
    finally:
        numba_api.PreparedLaunch = original
    pycuda_env = GpuVectorEnv("CartPole-v1", n, device="cuda", backend="pycuda", validate_actions=False)
    actions = torch.zeros(n, dtype=torch.int64, device="cuda")  # the backends' own buffers hold zeros too
    stream = current_stream_getter(torch.cuda.current_device())()
    variants, parameters, alive = {}, 0, []
    for index in range(9):
        made, parameters, read = launches(*steps[index], stream)
        alive.append(read)
        name = list(made)[index]
        variants[name] = (envs[index], made[name])
    variants["numba backend.step (PreparedLaunch)"] = (envs[9], lambda s: envs[9]._backend.step(actions))
    variants["pycuda backend.step"] = (pycuda_env, lambda s: pycuda_env._backend.step(actions))
    bare = GpuVectorEnv("CartPole-v1", n, device="cuda", backend="pycuda", validate_actions=False)
    bare._backend.step(actions)  # its actions pointer packed once
    variants["CUDA C's launch alone (cuda_driver.PreparedLaunch)"] = (bare, lambda s: bare._backend._step())
    for env, _ in variants.values():
        env.reset(seed=0)
    for _, launch in variants.values():
        for _ in range(50):
            launch(stream)
    torch.cuda.synchronize()
    first = next(iter(variants.values()))[0]._buffers.observations
    differ = [name for name, (env, _) in variants.items() if not torch.equal(env._buffers.observations, first)]
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (_, launch) in variants.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.launches):
                launch(stream)
            torch.cuda.synchronize()
            times[name].append(1e6 * (time.perf_counter() - start) / args.launches)
    print(torch.cuda.get_device_name(), torch.__version__, f"CartPole-v1 x {n}, {parameters} Numba kernel parameters")
    print(
        f"observations after 50 launches of each, bitwise equal: {not differ}"
        + (f" (differ: {differ})" if differ else "")
    )
    print("| launch | µs (median) | min | max |\n|---|---:|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")


if __name__ == "__main__":
    main()
