"""The measurements behind the MPE games' CUDA C block shape (``mpe_physics.PACKED_BLOCK_THREADS``,
``MIN_TEAM_THREADS``, ``simple_spread.ONE_LANE_AGENTS``) and the staged step
(``multi_agent_pycuda.STAGED_BYTES``): how many threads a packed block has, how many lanes at least a
game's team gets, whether SimpleSpread's game runs on one lane, and whether a block's observations and
rewards are staged in shared memory, for MPE2's default scenarios at 2,000 and 65,536 games
(``mpe_throughput.py``'s captured rows: random actions through ``step_groups``, validation off, 100
steps replayed as one CUDA graph, so that the host's time per call does not blur the kernels'), µs per
step.

Each shape is set before the kernels are built (``report.module_constants``: the backends build
them per params, so their caches are cleared between shapes). Apart from SimpleSpread's one lane, a
team smaller than a game's agents is never made (the team is the next power of two at or above
them), nor a block smaller than a team. Issue 42's target for simple_spread at 65,536 games: about
6.5 µs a step (1,000x VMAS 1.5.2 on an H200, docs/benchmarks/mpe.md).

    python benchmarks/experiments/mpe_team_shape.py --out mpe-team-shape.md --json mpe-team-shape.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The suite's modules (report, mpe_throughput) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mpe_throughput import ours_runner, scenarios, time_runner  # noqa: E402
from report import add_output_options, gpu_hardware, module_constants, save  # noqa: E402

from gpu_marl_envs import multi_agent_buffers  # noqa: E402
from gpu_marl_envs.envs import mpe_physics, simple_spread  # noqa: E402

BLOCK_THREADS = [64, 128, 256, 512]
MIN_TEAMS = [4, 8, 32]
NUM_ENVS = [2000, 65536]


def us_per_step(scenario, num_envs: int, continuous: bool, args) -> float:
    runner = ours_runner("pycuda", scenario, num_envs, "cuda", continuous, captured=True)
    try:
        steps, seconds = time_runner(runner, args.min_seconds, args.repeats)
    finally:
        runner.close()
    return 1e6 * seconds / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block-threads", nargs="+", type=int, default=BLOCK_THREADS)
    parser.add_argument("--min-teams", nargs="+", type=int, default=MIN_TEAMS, help="powers of two, at most 32")
    parser.add_argument(
        "--one-lane-agents",
        nargs="+",
        type=int,
        help="SimpleSpread's ONE_LANE_AGENTS (a game of at most this many agents on one lane; default: as shipped)",
    )
    parser.add_argument(
        "--staged", nargs="+", type=int, default=[1], choices=[0, 1], help="observations staged in shared memory"
    )
    parser.add_argument("--num-envs", nargs="+", type=int, default=NUM_ENVS)
    parser.add_argument("--continuous", action="store_true", help="Box actions (default Discrete)")
    add_output_options(parser, min_seconds=0.1, repeats=3)
    args = parser.parse_args()
    for team in args.min_teams:
        if team < 1 or team > 32 or team & (team - 1):
            parser.error(f"--min-teams takes powers of two up to 32, got {team}")
    shapes = [
        (b, t, k, staged)
        for b in args.block_threads
        for t in args.min_teams
        for k in args.one_lane_agents or [simple_spread.ONE_LANE_AGENTS]
        for staged in args.staged
        if t <= b
    ]
    hardware = gpu_hardware()
    columns = [
        f"{b} threads, teams >= {t}, one lane up to {k} agents{', staged' if staged else ''}"
        for b, t, k, staged in shapes
    ]
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/experiments/mpe_team_shape.py"
        f"{' --continuous' if args.continuous else ''}`.",
        "",
        f"CUDA C, {'Box' if args.continuous else 'Discrete'} actions, µs per step (the shipped shape: "
        f"{mpe_physics.PACKED_BLOCK_THREADS} threads, teams >= {mpe_physics.MIN_TEAM_THREADS}):",
        "",
        f"| scenario | games | {' | '.join(columns)} |",
        "|---|---:|" + "---:|" * len(columns),
    ]
    rows = []
    for scenario in scenarios([3]):
        for num_envs in args.num_envs:
            cells = []
            for block_threads, min_team, one_lane, staged in shapes:
                shape = dict(PACKED_BLOCK_THREADS=block_threads, MIN_TEAM_THREADS=min_team)
                budget = multi_agent_buffers.STAGED_BYTES if staged else 0
                with (
                    module_constants(mpe_physics, **shape),
                    module_constants(simple_spread, ONE_LANE_AGENTS=one_lane),
                    module_constants(multi_agent_buffers, STAGED_BYTES=budget),
                ):
                    us = us_per_step(scenario, num_envs, args.continuous, args)
                rows.append(
                    {
                        "scenario": scenario.label,
                        "num_envs": num_envs,
                        "block_threads": block_threads,
                        "min_team_threads": min_team,
                        "one_lane_agents": one_lane,
                        "staged_observations": bool(staged),
                        "us_per_step": us,
                    }
                )
                cells.append(f"{us:.1f}")
                print(
                    f"{scenario.label} {num_envs} games, {block_threads} threads, teams >= {min_team}, "
                    f"one lane up to {one_lane} agents, staged {staged}: {us:.1f} µs",
                    flush=True,
                )
            lines.append(f"| {scenario.label} | {num_envs:,} | {' | '.join(cells)} |")
    save(args, "\n".join(lines), {"hardware": hardware, "continuous": args.continuous, "results": rows})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
