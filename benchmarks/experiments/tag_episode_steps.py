"""Where a TagContinuous step's time goes over an episode: the µs of each ``step_groups`` step of
2,000 games of 1,000 agents with the published rules (tagged runners leave, so the games thin out
until the autoreset at step 500), beside the mean number of agents in the game after it.

The steps are timed one by one with CUDA events (no host synchronisation between them) after a
warm-up of two short episodes, from a reset with seed 0 and the actions of ``tag_throughput.py``
(``pool``: eight draws over every level, replayed in turn); a second pass of the same steps reads
the in-game counts, which would otherwise synchronise each step. Over whole episodes it averages to
the step time that ``tag_throughput.py`` measures for the same configuration.

    python benchmarks/experiments/tag_episode_steps.py --backends pycuda numba --json tag-episode-steps-h200.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

# The suite's modules (report, tag_throughput) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, gpu_hardware, save  # noqa: E402
from tag_throughput import ACTION_POOL, pool  # noqa: E402

from gpu_marl_envs import GpuParallelEnv  # noqa: E402
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams  # noqa: E402

GAMES = 2000
PARAMS = TagContinuousParams(num_runners=990)
SHOWN = [0, 1, 10, 20, 40, 60, 100, 150, 200, 250, 300, 400, 499]  # the table's steps


def episode_steps(backend: str, steps: int) -> dict:
    env = GpuParallelEnv(
        "TagContinuous-v0", GAMES, device="cuda", backend=backend, params=PARAMS, validate_actions=False
    )
    actions = pool(env, by_agent=False)
    for _ in range(2):  # warm-up: compilation, graph capture, caches
        env.reset(seed=0)
        for s in range(20):
            env.step_groups(actions[s % ACTION_POOL])
    env.reset(seed=0)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    torch.cuda.synchronize()
    events[0].record()
    for s in range(steps):
        env.step_groups(actions[s % ACTION_POOL])
        events[s + 1].record()
    torch.cuda.synchronize()
    us = [1000 * events[s].elapsed_time(events[s + 1]) for s in range(steps)]
    env.reset(seed=0)
    in_play = []
    for s in range(steps):
        env.step_groups(actions[s % ACTION_POOL])
        in_play.append(env.get_state()["in_game"].sum(dim=1).float().mean().item())
    env.close()
    return {"backend": backend, "mean_us": sum(us) / steps, "us": us, "in_play": in_play}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["pycuda"])
    parser.add_argument("--steps", type=int, default=2 * PARAMS.episode_length)
    add_output_options(parser)
    args = parser.parse_args()
    hardware = gpu_hardware()
    runs = [episode_steps(backend, args.steps) for backend in args.backends]
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/experiments/tag_episode_steps.py`. "
        f"{GAMES} x {PARAMS.num_agents}, published rules: µs of step t (agents in the game after it).",
        "",
        "| step | " + " | ".join(run["backend"] for run in runs) + " | agents in the game |",
        "|---:|" + "---:|" * len(runs) + "---:|",
    ]
    for s in (s for s in SHOWN if s < args.steps):
        times = " | ".join(f"{run['us'][s]:.1f}" for run in runs)
        lines.append(f"| {s} | {times} | {runs[0]['in_play'][s]:.1f} |")
    lines.append("| mean | " + " | ".join(f"{run['mean_us']:.1f}" for run in runs) + " | |")
    table = "\n".join(lines) + "\n"
    print(table)
    save(args, table, {"hardware": hardware, "games": GAMES, "agents": PARAMS.num_agents, "runs": runs})


if __name__ == "__main__":
    main()
