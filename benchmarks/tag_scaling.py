"""WarpDrive's Figure 3 (Lan et al., JMLR 2022) redrawn with ours on it: Tag env-steps/s through the
batched ``step_groups`` against the number of games and against the agents per game, with the
points WarpDrive published marked.

- ``games``: 1 to 65,536 games of TagGridworld (5 agents: 4 taggers, 1 runner) and of TagContinuous
  (110 agents: 10 taggers, 100 runners), each backend;
- ``agents``: TagContinuous with 5 to 10,000 agents per game (10 taggers, 1 below 50 agents, k = 10
  nearest or every other agent below 11), 1 game and 2,000 games, every agent in play
  (``runner_exits_game_after_tagged=False``: the games do not thin out), the CUDA C backend.

WarpDrive's points (its paper and README, A100): discrete Tag 4,300 env-steps/s with 1 env and
8.3 M with 2,000 envs (5 agents); continuous Tag 2.9 M with 2,000 envs of 1,000 agents; with 1 env,
its throughput fell 15x from 5 to 820 agents. Each point is timed as in ``tag_throughput.py``
(warm-up, repeats bracketed by ``torch.cuda.synchronize()``, median, actions on the device,
``validate_actions=False``).

    python benchmarks/tag_scaling.py --json docs/benchmarks/tag-scaling-h200.json \\
        --out tag-scaling.md --images docs/images   # results: docs/benchmarks/tag.md
    python benchmarks/tag_scaling.py --plot docs/benchmarks/tag-scaling-h200.json --images docs/images  # no GPU
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter
from report import add_output_options, gpu_hardware, save
from tag_throughput import measure

import gpu_marl_envs
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams

GAMES = [1, 4, 16, 64, 256, 1000, 2000, 4096, 16384, 65536]
AGENTS = [5, 10, 20, 50, 110, 220, 500, 820, 1000, 2000, 5000, 10000]
AGENT_SWEEP_GAMES = [1, 2000]
WARPDRIVE = {  # published points: (games, agents, env-steps/s)
    "TagGridworld-v0": [(1, 5, 4.3e3), (2000, 5, 8.3e6)],
    "TagContinuous-v0": [(2000, 1000, 2.9e6)],
}


def continuous_params(agents: int) -> TagContinuousParams:
    """The agent sweep's game: 10 taggers (1 in games under 50 agents), every agent in play."""
    taggers = 10 if agents >= 50 else 1
    return TagContinuousParams(
        num_taggers=taggers,
        num_runners=agents - taggers,
        num_other_agents_observed=min(10, agents - 1),
        runner_exits_game_after_tagged=False,
    )


def point(env_id, num_envs, params, backend, args) -> dict | None:
    try:
        r = measure(env_id, num_envs, params, backend, "step_groups", False, args.min_seconds, args.repeats)
    except (torch.cuda.OutOfMemoryError, ValueError) as error:
        print(f"{env_id} {num_envs} x {params.num_agents} {backend}: {str(error).splitlines()[0]}", flush=True)
        torch.cuda.empty_cache()
        return None
    print(
        f"{env_id:18s} {backend:7s} {num_envs:6d} games x {params.num_agents:6d} agents "
        f"{r['us_per_step']:10.1f} µs/step {r['env_steps_per_s'] / 1e6:10.3f} M env-steps/s",
        flush=True,
    )
    return r


def sweep(args) -> dict:
    backends = [b for b in gpu_marl_envs.available_backends("cuda") if b != "torch"]
    games = []
    for env_id, params in (("TagGridworld-v0", TagGridworldParams()), ("TagContinuous-v0", TagContinuousParams())):
        for backend in backends:
            for num_envs in GAMES:
                r = point(env_id, num_envs, params, backend, args)
                if r:
                    games.append(r)
    agents = []
    for num_envs in AGENT_SWEEP_GAMES:
        for n in AGENTS:
            r = point("TagContinuous-v0", num_envs, continuous_params(n), "pycuda", args)
            if r:
                agents.append(r)
    return {"hardware": gpu_hardware(), "games": games, "agents": agents}


def plot(record: dict, images: Path) -> list[Path]:
    images.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, label in (("games", "games (envs)"), ("agents", "agents per game")):
        figure = Figure(figsize=(7.2, 4.4), dpi=100, layout="constrained")
        FigureCanvasAgg(figure)
        ax = figure.add_subplot()
        if name == "games":
            series = {(r["env"], r["backend"]) for r in record["games"]}
            for env_id, backend in sorted(series):
                rows = sorted(
                    (r for r in record["games"] if (r["env"], r["backend"]) == (env_id, backend)),
                    key=lambda r: r["num_envs"],
                )
                ax.plot(
                    [r["num_envs"] for r in rows],
                    [r["env_steps_per_s"] for r in rows],
                    marker="o",
                    ms=3,
                    label=f"ours: {env_id.removesuffix('-v0')} ({rows[0]['num_agents']} agents), {backend}",
                )
            marks = [(g, v, "TagGridworld") for g, n, v in WARPDRIVE["TagGridworld-v0"]]
        else:
            for num_envs in AGENT_SWEEP_GAMES:
                rows = sorted((r for r in record["agents"] if r["num_envs"] == num_envs), key=lambda r: r["num_agents"])
                ax.plot(
                    [r["num_agents"] for r in rows],
                    [r["env_steps_per_s"] for r in rows],
                    marker="o",
                    ms=3,
                    label=f"ours: TagContinuous, {num_envs} game{'s' * (num_envs > 1)}, every agent in play",
                )
            marks = [(n, v, f"TagContinuous, {g} games") for g, n, v in WARPDRIVE["TagContinuous-v0"]]
            ax.annotate(
                "WarpDrive, 1 game: 15x slower at 820 agents than at 5",
                xy=(0.02, 0.03),
                xycoords="axes fraction",
                fontsize="small",
                color="tab:red",
            )
        for x, value, what in marks:
            ax.scatter([x], [value], marker="*", s=120, color="tab:red", zorder=3)
            ax.annotate(
                f"WarpDrive (A100): {what}",
                (x, value),
                textcoords="offset points",
                xytext=(-8, 8),
                ha="right" if name == "agents" else "left",
                fontsize="small",
                color="tab:red",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_xlabel(label)
        ax.set_ylabel("env-steps/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left" if name == "games" else "upper right", fontsize="small")
        ax.set_title(f"Tag env-steps/s against {label}, {record['hardware'].split(',')[0]}")
        path = images / f"tag_scaling_{name}.png"
        figure.savefig(path, format="png")
        paths.append(path)
    return paths


def table(record: dict) -> str:
    lines = [
        f"Hardware: {record['hardware']}. Command: `python benchmarks/tag_scaling.py`.",
        "",
        "| env | backend | games | agents | µs/step | env-steps/s | agent-steps/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in record["games"] + record["agents"]:
        lines.append(
            f"| {r['env']} | {r['backend']} | {r['num_envs']} | {r['num_agents']} | {r['us_per_step']:.1f} | "
            f"{r['env_steps_per_s'] / 1e6:.3f} M | {r['agent_steps_per_s'] / 1e6:.1f} M |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plot", help="draw the figures from this JSON of an earlier run (no GPU needed)")
    parser.add_argument("--images", default="docs/images", help="where the PNGs go")
    add_output_options(parser, min_seconds=0.2, repeats=3)
    args = parser.parse_args()
    if args.plot:
        record = json.loads(Path(args.plot).read_text())
    else:
        record = sweep(args)
        save(args, table(record), record)
        print(table(record))
    for path in plot(record, Path(args.images)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
