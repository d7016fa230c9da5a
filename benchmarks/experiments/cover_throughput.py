"""Issue 46's examples row: the tutorial's game Cover-v0 (docs/examples/cover) in env-steps/s, CUDA C
against Numba, through ``step_groups`` with actions already on the device: 50 steps of warm-up, then
the median of 3 repeats of 2,000 steps bracketed by ``torch.cuda.synchronize()``, the backends in
turns, at 4,096 and 65,536 games. (Puck-v0, the single-agent example, runs through
``benchmarks/throughput.py --envs puck/Puck-v0``.) The example packages on the path, as an editable
install would put them:

    PYTHONPATH=docs/examples/cover python benchmarks/experiments/cover_throughput.py cover.json
"""

import json
import statistics
import sys
import time

import torch

import gpu_marl_envs

rows = []
for n in (4096, 65536):
    runs = {}
    for backend in ("pycuda", "numba"):
        game = gpu_marl_envs.make_parallel("cover/Cover-v0", n, device="cuda", backend=backend, validate_actions=False)
        game.reset_groups(seed=0)
        g = torch.Generator(device="cuda").manual_seed(0)
        pool = [
            {k: torch.randint(0, 5, (n, len(a)), device="cuda", generator=g) for k, a in game.groups.items()}
            for _ in range(8)
        ]
        for i in range(50):
            game.step_groups(pool[i % 8])
        runs[backend] = (game, pool, [])
    # The backends in turns, so that both rows of a size share the machine's moments (at 4,096 games a
    # step is host time, which drifts by whole µs from one second to the next).
    for _ in range(3):
        for game, pool, times in runs.values():
            steps = 2000
            torch.cuda.synchronize()
            t = time.perf_counter()
            for i in range(steps):
                game.step_groups(pool[i % 8])
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) / steps)
    for backend, (_, _, times) in runs.items():
        us = 1e6 * statistics.median(times)
        rows.append({"env": "cover/Cover-v0", "backend": backend, "num_envs": n, "us_per_step": us})
        print(f"| cover/Cover-v0 | {backend} | {n:,} | {us:.1f} | {n / us:.1f} M |", flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
