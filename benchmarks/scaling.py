"""Env-steps/s and device memory against num_envs, for every env and backend: one PNG per env.

For each env x backend, num_envs doubles from ``--min-envs`` until ``--max-envs`` or until the
next size would pass the memory budget (predicted from the last size's memory, which grows
linearly). Each point: construct, reset, warm up, then repeats of a timed loop of ``step`` (the
batched ``step_groups`` for multi-agent games) bracketed by synchronisation, the median repeat
reported; memory is the peak that torch's allocator held for the env (its buffers, its graph),
measured from before its construction. Actions come from a small pool made beforehand, so the loop
times the env alone. The curves show where throughput saturates, which is where
``num_envs = "auto"`` of the trainer looks for its knee (there with the policy and the update).

    python benchmarks/scaling.py --out docs/scaling          # docs/scaling/<env>.png and scaling.json
    python benchmarks/scaling.py --device cpu --max-envs 256 --out /tmp/scaling   # a quick look on the CPU
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import torch
from gymnasium import spaces
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter

import gpu_marl_envs
from gpu_marl_envs import GpuParallelEnv, GpuVectorEnv
from gpu_marl_envs.registration import is_game

ACTION_POOL = 8


def sample(space: spaces.Space, shape: tuple, device, generator) -> torch.Tensor:
    """A random batch of actions of ``space`` with leading dimensions ``shape``."""
    if isinstance(space, spaces.Discrete):
        return torch.randint(int(space.n), shape, generator=generator, device=device) + int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        return torch.stack(
            [torch.randint(int(n), shape, generator=generator, device=device) for n in space.nvec.ravel()], dim=-1
        ).view(*shape, *space.shape)
    if isinstance(space, spaces.Box):
        low = torch.as_tensor(space.low, device=device)
        high = torch.as_tensor(space.high, device=device)
        return low + (high - low) * torch.rand((*shape, *space.shape), generator=generator, device=device)
    raise TypeError(f"no random actions for {space}")


def make(env_id: str, num_envs: int, backend: str, device: str):
    """The env and a pool of action batches for its batched step."""
    generator = torch.Generator(device=device).manual_seed(0)
    if not is_game(env_id):
        env = GpuVectorEnv(env_id, num_envs, device=device, backend=backend, validate_actions=False)
        env.reset(seed=0)
        return (
            env,
            env.step,
            [sample(env.single_action_space, (num_envs,), device, generator) for _ in range(ACTION_POOL)],
        )
    env = GpuParallelEnv(env_id, num_envs, device=device, backend=backend, validate_actions=False)
    env.reset(seed=0)
    pool = [
        {
            group: sample(env.action_space(agents[0]), (num_envs, len(agents)), device, generator)
            for group, agents in env.groups.items()
        }
        for _ in range(ACTION_POOL)
    ]
    return env, env.step_groups, pool


def time_steps(step, actions, steps: int, repeats: int, sync) -> float:
    results = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for s in range(steps):
            step(actions[s % ACTION_POOL])
        sync()
        results.append(time.perf_counter() - start)
    return statistics.median(results)


def measure(env_id: str, num_envs: int, backend: str, device: str, min_seconds: float, repeats: int) -> dict:
    cuda = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    env, step, actions = make(env_id, num_envs, backend, device)
    time_steps(step, actions, 10, 1, sync)  # warm-up: compilation, graph capture, caches
    probe = time_steps(step, actions, 10, 1, sync) / 10
    steps = max(10, int(min_seconds / max(probe, 1e-7)))
    seconds = time_steps(step, actions, steps, repeats, sync)
    memory = torch.cuda.max_memory_allocated() - before if cuda else None
    env.close()
    del env, step, actions
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return {
        "env": env_id,
        "backend": backend,
        "num_envs": num_envs,
        "env_steps_per_s": num_envs * steps / seconds,
        "us_per_step": 1e6 * seconds / steps,
        "memory_bytes": memory,
    }


def sweep(
    env_id: str,
    backend: str,
    device: str,
    min_envs: int,
    max_envs: int,
    budget: int | None,
    min_seconds: float,
    repeats: int,
) -> list[dict]:
    points, num_envs = [], min_envs
    while num_envs <= max_envs:
        if budget is not None and points and points[-1]["memory_bytes"] * num_envs / points[-1]["num_envs"] > budget:
            break
        try:
            point = measure(env_id, num_envs, backend, device, min_seconds, repeats)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            break
        points.append(point)
        memory = f"{point['memory_bytes'] / 2**20:10.1f} MiB" if point["memory_bytes"] is not None else ""
        print(
            f"{env_id:26s} {backend:7s} {num_envs:>10,} {point['env_steps_per_s'] / 1e6:12.2f} M env-steps/s {memory}",
            flush=True,
        )
        num_envs *= 2
    return points


def binary_count(value: float, _position=None) -> str:
    """Env counts (powers of 2) with binary prefixes, exact at every tick: 256, 4Ki, 1Mi (a decimal
    prefix would print 1.04858M)."""
    for exponent, prefix in ((20, "Mi"), (10, "Ki")):
        if value >= 2**exponent:
            return f"{value / 2**exponent:g}{prefix}"
    return f"{value:g}"


def plot(env_id: str, curves: dict[str, list[dict]], hardware: str, path: Path) -> Path:
    """Throughput (top) and memory (bottom, on a GPU) against num_envs, a line per backend."""
    with_memory = any(p["memory_bytes"] is not None for points in curves.values() for p in points)
    figure = Figure(figsize=(7.2, 6.4 if with_memory else 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2 if with_memory else 1, 1, sharex=True, squeeze=False)[:, 0]
    figure.suptitle(f"{env_id} on {hardware}")
    for index, (backend, points) in enumerate(curves.items()):
        sizes = [p["num_envs"] for p in points]
        axes[0].plot(sizes, [p["env_steps_per_s"] for p in points], marker="o", color=f"C{index}", label=backend)
        if with_memory:
            axes[1].plot(sizes, [p["memory_bytes"] for p in points], marker="o", color=f"C{index}", label=backend)
    axes[0].set_ylabel("env-steps/s")
    axes[0].set_yscale("log")
    axes[0].yaxis.set_major_formatter(EngFormatter(sep=""))
    if with_memory:
        axes[1].set_ylabel("device memory")
        axes[1].set_yscale("log")
        axes[1].yaxis.set_major_formatter(EngFormatter(unit="B", sep=""))
    for ax in axes:
        ax.yaxis.set_minor_formatter(NullFormatter())  # decades only: 1k, 10k, 100k
        ax.set_xscale("log", base=2)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("num_envs")
    axes[-1].xaxis.set_major_locator(LogLocator(base=4))
    axes[-1].xaxis.set_major_formatter(FuncFormatter(binary_count))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--envs",
        nargs="+",
        default=sorted(spec.definition.id for spec in gpu_marl_envs.ENVS.values())
        + sorted(spec.definition.id for spec in gpu_marl_envs.GAMES.values()),
    )
    parser.add_argument("--backends", nargs="+", default=None, help="default: every backend available on the device")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--min-envs", type=int, default=64)
    parser.add_argument("--max-envs", type=int, default=2**24, help="single-agent envs; games stop at 1/64 of it")
    parser.add_argument(
        "--budget-gib",
        type=float,
        default=None,
        help="device memory an env may take (default: 80%% of the free memory)",
    )
    parser.add_argument("--min-seconds", type=float, default=0.2, help="length of one timed repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="docs/scaling", help="folder for <env>.png and scaling.json")
    args = parser.parse_args()
    cuda = torch.device(args.device).type == "cuda"
    backends = args.backends or gpu_marl_envs.available_backends(args.device)
    budget = (
        int(args.budget_gib * 2**30) if args.budget_gib else (int(0.8 * torch.cuda.mem_get_info()[0]) if cuda else None)
    )
    hardware = torch.cuda.get_device_name() if cuda else "CPU"
    out = Path(args.out)
    results = {}
    for env_id in args.envs:
        # A game's env holds many agents: its sizes stop sooner.
        max_envs = max(args.min_envs, args.max_envs // 64) if is_game(env_id) else args.max_envs
        curves = {
            backend: sweep(
                env_id, backend, args.device, args.min_envs, max_envs, budget, args.min_seconds, args.repeats
            )
            for backend in backends
        }
        results[env_id] = curves
        print(f"wrote {plot(env_id, curves, hardware, out / f'{env_id}.png')}", flush=True)
        (out / "scaling.json").write_text(
            json.dumps({"hardware": hardware, "torch": torch.__version__, "results": results}, indent=1)
        )


if __name__ == "__main__":
    main()
