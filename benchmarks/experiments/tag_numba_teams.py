"""The measurement behind the Numba TagContinuous kernel's observation teams
(``kernels/tag_continuous_numba.py``: each warp on its own rows in games with a neighbour grid, the
whole block in games without one): ``step_groups`` at sizes from WarpDrive's training game (1,000 x
110, no grid) to 100 x 10,000, each backend given, with the published rules. Run it once per build
to compare (the teams are chosen when the kernel is built, not by a setting).

    python benchmarks/experiments/tag_numba_teams.py --backends numba pycuda --json teams.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The suite's modules (report, tag_throughput) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, gpu_hardware, save  # noqa: E402
from tag_throughput import measure  # noqa: E402

from gpu_marl_envs.envs.tag_continuous import TagContinuousParams  # noqa: E402

SIZES = [(1000, 110), (1000, 250), (500, 500), (2000, 1000), (100, 10000)]  # (games, agents)
TAGGERS = TagContinuousParams().num_taggers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["numba", "pycuda"])
    add_output_options(parser, min_seconds=0.3, repeats=5)
    args = parser.parse_args()
    hardware = gpu_hardware()
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/experiments/tag_numba_teams.py`.",
        "",
        "| backend | games x agents | µs/step |",
        "|---|---|---:|",
    ]
    results = []
    for backend in args.backends:
        for games, agents in SIZES:
            params = TagContinuousParams(num_runners=agents - TAGGERS)
            r = measure(
                "TagContinuous-v0", games, params, backend, "step_groups", False, args.min_seconds, args.repeats
            )
            print(f"{backend:7s} {games}x{agents}: {r['us_per_step']:.1f} µs/step", flush=True)
            results.append(r)
            lines.append(f"| {backend} | {games:,} x {agents:,} | {r['us_per_step']:.1f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    save(args, table, {"hardware": hardware, "results": results})


if __name__ == "__main__":
    main()
