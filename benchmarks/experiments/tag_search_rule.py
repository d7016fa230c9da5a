"""The measurements behind the rule that picks the Tag kernels' neighbour search
(``tag_continuous_kernel_layout.search_grid_cells``): TagContinuous env-steps/s through ``step_groups`` on the CUDA
C backend

- with ``neighbour_search="scan"`` and ``"grid"``, over agents per game (10 taggers), at 100 and
  2,000 games, with the published rules (tagged runners leave: the games thin out) and with every
  agent in play: where the grid starts to win is ``GRID_MIN_AGENTS``;
- with the grid at several sizes of its cells (``AGENTS_PER_CELL``, a module constant rather than a
  param: set here before each kernel is built), every agent in play.

    python benchmarks/experiments/tag_search_rule.py --out tag-search-rule.md
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

# The suite's modules (report, tag_throughput) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, gpu_hardware, save  # noqa: E402
from tag_throughput import measure, tag_constants  # noqa: E402

from gpu_marl_envs.envs.tag_continuous import TagContinuousParams  # noqa: E402

AGENTS = [64, 110, 160, 200, 220, 256, 400, 640, 1000]
GAMES = [100, 2000]
DENSITIES = [2.0, 3.0, 4.0, 6.0, 8.0]
DENSITY_GAMES = {1000: 2000, 10000: 100}  # agents per game -> games


def rate(num_envs: int, params: TagContinuousParams, args) -> float:
    r = measure("TagContinuous-v0", num_envs, params, "pycuda", "step_groups", False, args.min_seconds, args.repeats)
    return r["env_steps_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_options(parser, min_seconds=0.2, repeats=3)
    args = parser.parse_args()
    hardware = gpu_hardware()
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/experiments/tag_search_rule.py`. TagContinuous, CUDA C, "
        "`step_groups`, M env-steps/s.",
        "",
        "| agents | games | published rules: scan | grid | grid / scan "
        "| every agent in play: scan | grid | grid / scan |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    searches, densities = [], []
    for n in AGENTS:
        for num_envs in GAMES:
            cells = []
            for exits in (True, False):
                params = TagContinuousParams(num_runners=n - 10, runner_exits_game_after_tagged=exits)
                scan = rate(num_envs, dataclasses.replace(params, neighbour_search="scan"), args)
                grid = rate(num_envs, dataclasses.replace(params, neighbour_search="grid"), args)
                cells.append(f"{scan / 1e6:.3f} | {grid / 1e6:.3f} | {grid / scan:.2f}")
                searches.append({"agents": n, "games": num_envs, "published_rules": exits, "scan": scan, "grid": grid})
            lines.append(f"| {n} | {num_envs} | {' | '.join(cells)} |")
            print(lines[-1], flush=True)
    lines += [
        "",
        "Grid cells sized for this many agents each (every agent in play):",
        "",
        "| agents | games | " + " | ".join(f"{d:g}" for d in DENSITIES) + " |",
        "|---:|---:|" + "---:|" * len(DENSITIES),
    ]
    for n, num_envs in DENSITY_GAMES.items():
        rates = []
        for density in DENSITIES:
            with tag_constants(AGENTS_PER_CELL=density):
                rates.append(
                    rate(num_envs, TagContinuousParams(num_runners=n - 10, runner_exits_game_after_tagged=False), args)
                )
        lines.append(f"| {n} | {num_envs} | " + " | ".join(f"{r / 1e6:.3f}" for r in rates) + " |")
        print(lines[-1], flush=True)
        densities.append({"agents": n, "games": num_envs, "env_steps_per_s": dict(zip(DENSITIES, rates))})
    text = "\n".join(lines) + "\n"
    print(text)
    save(args, text, {"hardware": hardware, "searches": searches, "agents_per_cell": densities})


if __name__ == "__main__":
    main()
