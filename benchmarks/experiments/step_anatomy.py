"""Where a step's microseconds go at small batches (issue 46): the host or the GPU.

For each case (env, backend, num_envs) it times steps in a loop bracketed by synchronize (the
benchmarks' µs a step), then traces 500 more under ``torch.profiler`` and prints, per step, the
GPU kernels that ran (their count and summed device time; a graph replay's kernels included), and
the host functions that took the most time under ``cProfile`` (tottime per step). A step whose wall
time is well above its kernels' time is bound by the host (launches, Python); one near it, by the
GPU.

    python benchmarks/experiments/step_anatomy.py                       # the default cases
    python benchmarks/experiments/step_anatomy.py --case cover/Cover-v0:numba:4096
(``cover/Cover-v0`` and ``puck/Puck-v0`` need docs/examples/cover and puck on the path.)
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import gpu_marl_envs
from gpu_marl_envs import GpuVectorEnv
from gpu_marl_envs.registration import is_game

# The suite's throughput.py sits one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from throughput import random_actions  # noqa: E402

DEFAULT_CASES = [
    f"{env}:{backend}:{n}"
    for env, n in (
        ("CartPole-v1", 4096),
        ("puck/Puck-v0", 4096),
        ("cover/Cover-v0", 4096),
        ("SimpleSpeakerListener-v4+box", 2000),
        ("SimpleSpread-v3", 2000),
    )
    for backend in ("pycuda", "numba")
]
POOL = 8


def build(env_id: str, backend: str, n: int):
    """(step function of one argument, action pool) for a classic env or a game (``+box``: Box actions)."""
    box = env_id.endswith("+box")
    env_id = env_id.removesuffix("+box")
    g = torch.Generator(device="cuda").manual_seed(0)
    if is_game(env_id):
        kwargs = {"continuous_actions": True} if box else {}
        game = gpu_marl_envs.make_parallel(env_id, n, device="cuda", backend=backend, validate_actions=False, **kwargs)
        game.reset_groups(seed=0)
        pool = []
        for _ in range(POOL):
            actions = {}
            for name, agents in game.groups.items():
                space = game.action_space(agents[0])
                if hasattr(space, "n"):
                    actions[name] = torch.randint(0, int(space.n), (n, len(agents)), device="cuda", generator=g)
                else:
                    actions[name] = torch.rand((n, len(agents), *space.shape), device="cuda", generator=g)
            pool.append(actions)
        return game.step_groups, pool
    env = GpuVectorEnv(env_id, n, device="cuda", backend=backend, validate_actions=False)
    env.reset(seed=0)
    return env.step, random_actions(env, 0)[:POOL]


def anatomy(case: str, steps: int) -> None:
    env_id, backend, n = case.rsplit(":", 2)
    step, pool = build(env_id, backend, int(n))
    for i in range(200):
        step(pool[i % POOL])
    torch.cuda.synchronize()
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        for i in range(steps):
            step(pool[i % POOL])
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) / steps)
    traced = 500
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(traced):
            step(pool[i % POOL])
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        by_name.setdefault(e.name, []).append(e.device_time)
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(2000):
        step(pool[i % POOL])
    torch.cuda.synchronize()
    profiler.disable()
    wall = 1e6 * statistics.median(walls)
    gpu = sum(sum(v) for v in by_name.values()) / traced
    print(f"\n## {case}: {wall:.2f} µs a step (wall), kernels {gpu:.2f} µs a step on the GPU")
    for name, times in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {len(times) / traced:5.2f}/step  {sum(times) / len(times):8.2f} µs  {name[:100]}")
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:12]
    print("  host (cProfile, µs a step, tottime / cumtime):")
    for (file, line, function), (_, calls, tottime, cumtime, _) in rows:
        where = f"{function} ({file.rsplit('/', 1)[-1]}:{line})"
        print(f"    {1e6 * tottime / 2000:7.2f} {1e6 * cumtime / 2000:7.2f}  {calls / 2000:5.2f}x  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="ENV:BACKEND:NUM_ENVS (repeatable; default: a set)")
    parser.add_argument("--steps", type=int, default=2000, help="steps per timed repeat")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__)
    for case in args.case or DEFAULT_CASES:
        anatomy(case, args.steps)


if __name__ == "__main__":
    main()
