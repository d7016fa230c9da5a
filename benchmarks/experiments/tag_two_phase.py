"""The measurements behind the Tag kernels' two phases (``tag_continuous_kernel_layout.two_phase``,
``TWO_PHASE_MAX_AGENTS``, ``TWO_PHASE_IN_PLAY_SHARE``): TagContinuous through ``step_groups`` at
2,000 games of 250, 500 and 1,000 agents (a grid in each), with the published rules (tagged runners
leave: the games thin out) and with every agent in play,

- on both kernels, without the two phases (each warp, or the Numba block's chunk, searches for its
  own rows) and with them;
- on the CUDA C kernel, which chooses in every step, with the two phases taken only where at most a
  share of a game's agents is in the game, for each share in ``SHARES``.

The constants are module constants rather than params: set here before each kernel is built.

    python benchmarks/experiments/tag_two_phase.py --out tag-two-phase.md --json tag-two-phase.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The suite's modules (report, tag_throughput) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, gpu_hardware, save  # noqa: E402
from tag_throughput import measure, tag_constants  # noqa: E402

from gpu_marl_envs.envs.tag_continuous import TagContinuousParams  # noqa: E402

GAMES = 2000
AGENTS = [1000, 500, 250]
SHARES = [0.8, 0.9, 0.95, 1.0]  # 1.0: the CUDA C kernel takes the two phases in every step


def us_per_step(backend: str, params: TagContinuousParams, max_agents: int, share: float, args) -> float:
    with tag_constants(TWO_PHASE_MAX_AGENTS=max_agents, TWO_PHASE_IN_PLAY_SHARE=share):
        r = measure("TagContinuous-v0", GAMES, params, backend, "step_groups", False, args.min_seconds, args.repeats)
    return r["us_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["pycuda", "numba"])
    parser.add_argument("--agents", nargs="+", type=int, default=AGENTS)
    add_output_options(parser, min_seconds=0.2, repeats=3)
    args = parser.parse_args()
    hardware = gpu_hardware()
    columns = ["one phase", *(f"two, in play ≤ {s:g}" for s in SHARES)]
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/experiments/tag_two_phase.py`.",
        "",
        f"TagContinuous, {GAMES:,} games, `step_groups`, µs per step (Numba: one phase or two in every step):",
        "",
        f"| kernel | agents | rules | {' | '.join(columns)} |",
        "|---|---:|---|" + "---:|" * len(columns),
    ]
    rows = []
    for backend in args.backends:
        for agents in args.agents:
            for published in (True, False):
                params = TagContinuousParams(num_runners=agents - 10, runner_exits_game_after_tagged=published)
                times = {"one phase": us_per_step(backend, params, 0, 1.0, args)}
                for share, column in zip(SHARES, columns[1:]):
                    if backend == "pycuda" or share == 1.0:  # Numba does not choose per step
                        times[column] = us_per_step(backend, params, agents, share, args)
                rules = "published" if published else "every agent in play"
                rows.append(dict(backend=backend, games=GAMES, agents=agents, rules=rules, us=times))
                cells = " | ".join(f"{times[c]:.1f}" if c in times else "—" for c in columns)
                lines.append(f"| {'CUDA C' if backend == 'pycuda' else 'Numba'} | {agents} | {rules} | {cells} |")
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    save(args, text, {"hardware": hardware, "rows": rows})


if __name__ == "__main__":
    main()
