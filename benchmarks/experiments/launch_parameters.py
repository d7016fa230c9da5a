"""The host time of one kernel launch by the number of the kernel's parameters (issue 46's small batches).

A Numba array is 7 kernel parameters or more (its data model's fields), and CartPole's Numba step
kernel has 97 where its CUDA C twin has 15. This times ``numba_api.PreparedLaunch`` (the Numba
backends' launch: one ``cuLaunchKernel`` through cuda-bindings, the arguments packed once) on kernels
that do nothing, with a tuple of 1 to 14 one-dimensional arrays (7 to 98 parameters) or of 1 to 97
``uint64`` scalars, so that what a parameter costs the launch is measured apart from the kernel's work.
Variants are timed in turns (``--rounds`` of ``--launches`` each, bracketed by synchronize), median µs
a launch.

    python benchmarks/experiments/launch_parameters.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from gpu_marl_envs.kernels.numba_api import PreparedLaunch, cuda

from gpu_marl_envs.backends import current_stream_getter


@cuda.jit
def arrays_kernel(arrays):
    pass


@cuda.jit
def scalars_kernel(values):
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--blocks", type=int, default=16, help="CartPole's grid at 4,096 envs")
    args = parser.parse_args()
    tensors = [torch.zeros(4096, device="cuda") for _ in range(14)]
    views = tuple(cuda.as_cuda_array(t, sync=False) for t in tensors)
    stream = current_stream_getter(torch.cuda.current_device())
    variants = {}
    for count in (1, 2, 4, 8, 14):
        variants[f"{count} arrays"] = PreparedLaunch(arrays_kernel, (views[:count],), args.blocks, 256, stream=stream)
    for count in (1, 16, 32, 64, 97):
        values = tuple(np.uint64(k) for k in range(count))
        variants[f"{count} uint64 scalars"] = PreparedLaunch(scalars_kernel, (values,), args.blocks, 256, stream=stream)
    for launch in variants.values():
        for _ in range(100):
            launch()
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, launch in variants.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.launches):
                launch()
            torch.cuda.synchronize()
            times[name].append(1e6 * (time.perf_counter() - start) / args.launches)
    print(torch.cuda.get_device_name(), torch.__version__, f"empty kernels, {args.blocks} blocks of 256")
    print("| kernel's parameters | count | µs a launch (median) | min | max |\n|---|---:|---:|---:|---:|")
    for name, values in times.items():
        parameters = int(name.split()[0]) * (7 if "arrays" in name else 1)
        print(f"| {name} | {parameters} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")


if __name__ == "__main__":
    main()
