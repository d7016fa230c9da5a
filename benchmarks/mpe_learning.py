"""Learning on SimpleSpread-v3 (MPE2's simple_spread_v3): IPPO and MAPPO, both action modes, and
MADDPG (``Box`` actions only: it is skipped in the Discrete mode), a few seeds each, scored by greedy
evaluation on the normalised scale of ``gpu_marl_envs.mpe_policies``.

For each action mode (``Discrete(5)``, ``Box(0, 1, (5,))``) the script evaluates the score's
references on the evaluation games (``R_random``: uniform random actions; ``R_scripted``: the
scripted controller, optimal assignment and braking-aware steering), then for each algorithm's
config and each seed trains with ``multi_agent.train`` or ``maddpg.train`` (the trainers of
``gpu-marl-train``, the config's settings, ``continuous_actions`` set by the mode), evaluates the
trained policies greedily (the Gaussian's mean, clipped into ``[0, 1]``, for Box; MADDPG's actor
without its noise; the most likely move for Discrete) on the
same games, and reports ``score = (R - R_random) / (R_scripted - R_random)``, mean ± std over
seeds. ``R``: the mean episode return per agent (averaged over agents) over ``--eval-episodes``
games of one episode (``max_cycles`` steps), every policy on the same seeds.

Configs: ``baselines/configs/simple_spread_v3_ippo.toml``, ``..._mappo.toml`` (Discrete),
``..._mappo_box.toml`` (Box) and ``..._maddpg.toml`` (``--ippo``, ``--mappo``, ``--mappo-box``,
``--maddpg`` take others); ``--total-timesteps`` and ``--set key=value``
(``gpu-marl-train``'s overrides, e.g. ``num_envs=256``) change them for every run of the chosen
``--algorithms``. Each run's result is printed as it comes, and each algorithm's mean over its seeds
once they are done. The issue's target: at most 20 M env
steps per run (runs beyond are marked in the table).

Written: the table to stdout and ``--out`` (markdown), everything (references, each run's
evaluation, score and training history) to ``--json``, after each run; with ``--curves PNG``, the
learning curves: per action mode, each algorithm's training return (the sampling policy's, per
agent) on the normalised scale, mean over seeds with the seeds' range shaded, and each algorithm's
final greedy score (mean ± std over seeds) at the end.

    # on one GPU: the learning table (IPPO and MAPPO, both modes, 3 seeds, the configs' 20 M steps)
    python benchmarks/mpe_learning.py --device cuda --out mpe-learning.md --json mpe-learning.json \\
        --curves mpe-learning.png
    # the same in two commands (e.g. under a time limit per command), then one table and plot of both
    python benchmarks/mpe_learning.py --device cuda --modes Discrete --json discrete.json
    python benchmarks/mpe_learning.py --device cuda --modes Box --json box.json
    python benchmarks/mpe_learning.py --merge discrete.json box.json --out mpe-learning.md \\
        --json mpe-learning.json --curves mpe-learning.png
    # MADDPG alone (Box actions), 3 seeds of the shipped config
    python benchmarks/mpe_learning.py --device cuda --algorithms MADDPG --modes Box --json maddpg.json
    # tiny, on the CPU (a test of the script, not of learning)
    python benchmarks/mpe_learning.py --device cpu --total-timesteps 20000 --seeds 1 --eval-episodes 100
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from gpu_marl_envs.baselines import multi_agent, sizing
from gpu_marl_envs.baselines.plotting import curves, smooth
from gpu_marl_envs.baselines.run_config import MULTI_AGENT_CONFIGS, build_config, read_config, train_function
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter
from report import add_output_options, save

from gpu_marl_envs import mpe_policies
from gpu_marl_envs.envs.simple_spread import SimpleSpreadParams

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "baselines" / "configs"
DEFAULT_CONFIGS = {
    "IPPO": CONFIGS / "simple_spread_v3_ippo.toml",
    "MAPPO": CONFIGS / "simple_spread_v3_mappo.toml",
    "MADDPG": CONFIGS / "simple_spread_v3_maddpg.toml",
}
BOX_CONFIGS = {"MAPPO": CONFIGS / "simple_spread_v3_mappo_box.toml"}
"""Algorithms with a config of their own for Box actions (tuned there; the other configs serve both modes)."""
BOX_ONLY = ("MADDPG",)
"""Algorithms for Box actions only."""
MODES = {"Discrete": False, "Box": True}
BUDGET = 20_000_000
"""The issue's most env steps per run."""
HISTORY_POINTS = 250
"""About this many history entries per run (the log interval is set from the run's iterations)."""


def greedy_policy(policies: dict, env_id: str, config: multi_agent.MultiAgentConfig) -> mpe_policies.Policy:
    """The trained policies acting greedily, as a batched policy ``observations -> actions``."""
    slots = multi_agent.policy_slots(env_id, config)
    action_spaces = {name: space for name, (_, space) in multi_agent.policy_spaces(env_id, config).items()}

    def act(observations: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        no_masks = {group: {} for group in observations}
        return multi_agent.greedy_actions(policies, slots, observations, no_masks, action_spaces)

    return act


def run_config(path: Path, continuous: bool, seed: int, args) -> tuple[str, str, object]:
    """The algorithm, the game and the trainer's config of ``path`` for this mode and seed, with the overrides."""
    overrides = [f"env_params.continuous_actions={'true' if continuous else 'false'}", *args.set]
    if args.total_timesteps is not None:
        overrides.append(f"total_timesteps={args.total_timesteps}")
    algorithm, env_id, config = build_config(read_config(path), overrides, seed)
    if not isinstance(config, MULTI_AGENT_CONFIGS) or "SimpleSpread" not in env_id:
        raise SystemExit(f"{path}: expected a multi-agent config of SimpleSpread-v3, got env {env_id!r}")
    return algorithm, env_id, config


def log_interval(config) -> int:
    iterations = max(1, config.total_timesteps // sizing.iteration_steps(config))
    return max(1, iterations // HISTORY_POINTS)


def train_and_score(name: str, path: Path, mode: str, seed: int, references: dict, args) -> dict:
    algorithm, env_id, config = run_config(path, MODES[mode], seed, args)
    params = multi_agent.game_params(env_id, config)
    random_return = references[params]["random"].mean_return
    scripted_return = references[params]["scripted"].mean_return
    begin = time.perf_counter()
    progress = {"next": 0.0}

    def log(entry: dict) -> None:  # a line at every tenth of the run, from an entry with finished games
        if entry["episodes"] and entry["env_steps"] >= progress["next"] * config.total_timesteps:
            progress["next"] += 0.1
            score = mpe_policies.normalised_score(entry["mean_return"], random_return, scripted_return)
            print(
                f"  {name} {mode} seed {seed}: {entry['env_steps']:>11,d} steps, training return per agent "
                f"{entry['mean_return']:8.3f} (score {score:.3f}), {entry['seconds']:.0f} s",
                flush=True,
            )

    train = train_function(algorithm, config)
    policies, history = train(env_id, config, device=args.device, log_every=log_interval(config), log=log)
    seconds = time.perf_counter() - begin
    for policy in policies.values():
        policy.eval()
    evaluation = mpe_policies.evaluate(
        greedy_policy(policies, env_id, config), params, args.eval_episodes, device=args.device, seed=args.eval_seed
    )
    score = mpe_policies.normalised_score(evaluation.mean_return, random_return, scripted_return)
    steps = history[-1]["env_steps"] if history else 0
    print(
        f"{name} {mode} seed {seed}: greedy return {evaluation.mean_return:.3f}, score {score:.3f} "
        f"({steps:,} env steps, {seconds:.0f} s)",
        flush=True,
    )
    return {
        "algorithm": name,
        "mode": mode,
        "seed": seed,
        "config": str(path),
        "settings": config.to_dict(),
        "env_steps": steps,
        "seconds": seconds,
        "evaluation": dataclasses.asdict(evaluation),
        "score": score,
        "references": {"random": random_return, "scripted": scripted_return},
        "history": history,
    }


def mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {spread:.3f}"


def table(references: dict, runs: list[dict], device: str, args, torch_version: str = torch.__version__) -> str:
    """The markdown report: the references, then one row per (mode, algorithm)."""
    lines = [
        f"SimpleSpread-v3, greedy evaluation on {args.eval_episodes:,} games (seed {args.eval_seed}), "
        f"{device}, torch {torch_version}",
        "",
        "| actions | N | policy | mean return per agent | final distance | landmarks covered "
        "| collisions per agent-step |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for params, refs in references.items():
        for name, r in refs.items():
            lines.append(
                f"| {'Box' if params.continuous_actions else 'Discrete'} | {params.N} | {name} | "
                f"{r.mean_return:.3f} | {r.final_distance:.3f} | {r.covered:.1%} | {r.collisions:.3f} |"
            )
    lines += [
        "",
        "score = (R - R_random) / (R_scripted - R_random), mean ± std over seeds",
        "",
        "| actions | algorithm | score | greedy return per agent | seeds | scores per seed | env steps "
        "| minutes per run |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["mode"], run["algorithm"]), []).append(run)
    for (mode, name), group in groups.items():
        low, high = min(r["env_steps"] for r in group), max(r["env_steps"] for r in group)
        per_seed = ", ".join(f"{r['score']:.3f}" for r in group)
        over = " (over the 20 M budget)" if high > BUDGET else ""
        lines.append(
            f"| {mode} | {name} | {mean_std([r['score'] for r in group])} | "
            f"{mean_std([r['evaluation']['mean_return'] for r in group])} | {len(group)} | "
            f"{per_seed} | {low:,}{f' to {high:,}' if high > low else ''}{over} | "
            f"{statistics.fmean(r['seconds'] for r in group) / 60:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: str, title: str) -> None:
    """Per mode a panel: each algorithm's training return on the normalised scale (mean over seeds,
    the seeds' range shaded, smoothed as ``plotting`` smooths) and its final greedy score."""
    modes = list(dict.fromkeys(run["mode"] for run in runs))
    figure = Figure(figsize=(7.2, 3.2 * len(modes) + 0.6), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(modes), 1, squeeze=False)[:, 0]
    figure.suptitle(title)
    for ax, mode in zip(axes, modes):
        algorithms = list(dict.fromkeys(run["algorithm"] for run in runs if run["mode"] == mode))
        for index, name in enumerate(algorithms):
            group = [run for run in runs if run["mode"] == mode and run["algorithm"] == name]
            colour = f"C{index}"
            per_seed = []
            for run in group:
                points = next(iter(curves(run["history"]).values()), [])
                if points:
                    steps, returns = (np.asarray(v, dtype=float) for v in zip(*points))
                    low, high = run["references"]["random"], run["references"]["scripted"]
                    per_seed.append((steps, np.asarray(smooth(list((returns - low) / (high - low))))))
            if per_seed:
                grid = per_seed[0][0]
                values = np.stack([np.interp(grid, s, v) for s, v in per_seed])
                ax.plot(
                    grid,
                    values.mean(0),
                    color=colour,
                    linewidth=2,
                    label=f"{name} (training, {len(group)} seed{'s' if len(group) > 1 else ''})",
                )
                if len(per_seed) > 1:
                    ax.fill_between(grid, values.min(0), values.max(0), color=colour, alpha=0.2, linewidth=0)
            scores = [run["score"] for run in group]
            end = max(run["env_steps"] for run in group)
            spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
            ax.errorbar(
                [end], [statistics.fmean(scores)], yerr=[spread], color=colour, marker="o", capsize=4,
                label=f"{name} greedy: {statistics.fmean(scores):.2f}",
            )  # fmt: skip
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="scripted (1)")
        ax.axhline(0.0, color="grey", linestyle=":", linewidth=1, label="random (0)")
        ax.set_title(f"{mode} actions", fontsize="medium")
        ax.set_ylabel("normalised score")
        ax.set_xlim(left=0)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 250k, 20M
    axes[-1].set_xlabel("env steps")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")


def write(references: dict, runs: list[dict], device: str, args, torch_version: str = torch.__version__) -> None:
    """The table to ``--out``, the record to ``--json`` and the curves to ``--curves``, each where
    given; ``torch_version``: the runs' (merged records keep theirs)."""
    record = {
        "device": device,
        "torch": torch_version,
        "eval_episodes": args.eval_episodes,
        "eval_seed": args.eval_seed,
        "references": [
            {"params": dataclasses.asdict(p), **{k: dataclasses.asdict(v) for k, v in refs.items()}}
            for p, refs in references.items()
        ],
        "runs": runs,
    }
    save(args, table(references, runs, device, args, torch_version), record)
    if args.curves and runs:
        n = runs[0]["settings"]["env_params"].get("N", 3)
        plot(runs, args.curves, f"SimpleSpread-v3 (N = {n}), greedy score after training: {device}")


def merge(paths: list[Path], args) -> tuple[dict, list[dict], str, str]:
    """The references, runs, devices and torch versions of several ``--json`` records (e.g. one per
    action mode, each run in a command of its own), which must share their evaluation games."""
    references, runs, devices, versions = {}, [], [], []
    for path in paths:
        record = json.loads(Path(path).read_text())
        if (record["eval_episodes"], record["eval_seed"]) != (args.eval_episodes, args.eval_seed):
            raise SystemExit(
                f"{path} was evaluated on {record['eval_episodes']} games from seed {record['eval_seed']}; "
                f"pass --eval-episodes {record['eval_episodes']} --eval-seed {record['eval_seed']} (and merge "
                "only records of the same games)"
            )
        for entry in record["references"]:
            params = SimpleSpreadParams(**entry["params"])
            references[params] = {k: mpe_policies.Evaluation(**entry[k]) for k in ("random", "scripted")}
        runs += record["runs"]
        devices.append(record["device"])
        versions.append(record["torch"])
    return references, runs, " / ".join(dict.fromkeys(devices)), " / ".join(dict.fromkeys(versions))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_options(parser)
    parser.add_argument("--device", default="cuda", help="where to train and evaluate (default cuda)")
    parser.add_argument("--ippo", type=Path, default=DEFAULT_CONFIGS["IPPO"], help="IPPO's config (TOML)")
    parser.add_argument("--mappo", type=Path, default=DEFAULT_CONFIGS["MAPPO"], help="MAPPO's config (TOML)")
    parser.add_argument(
        "--mappo-box", type=Path, default=BOX_CONFIGS["MAPPO"], help="MAPPO's config for Box actions (TOML)"
    )
    parser.add_argument("--maddpg", type=Path, default=DEFAULT_CONFIGS["MADDPG"], help="MADDPG's config (TOML)")
    parser.add_argument("--algorithms", nargs="+", choices=list(DEFAULT_CONFIGS), default=list(DEFAULT_CONFIGS))
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--seeds", type=int, default=3, help="runs per algorithm and mode (default 3)")
    parser.add_argument("--first-seed", type=int, default=0, help="their seeds: FIRST_SEED, FIRST_SEED + 1, ...")
    parser.add_argument("--total-timesteps", type=int, help="env steps per run (default: the config's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    parser.add_argument("--eval-episodes", type=int, default=1000, help="evaluation games (default 1,000)")
    parser.add_argument("--eval-seed", type=int, default=mpe_policies.EVALUATION_SEED)
    parser.add_argument("--curves", metavar="PNG", help="draw the learning curves here")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="train nothing: one table and plot of these --json records",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.eval_episodes < 2:
        parser.error("--seeds must be >= 1 and --eval-episodes >= 2")
    if args.merge:
        references, runs, device, versions = merge(args.merge, args)
        write(references, runs, device, args, versions)
        print(table(references, runs, device, args, versions))
        return
    # (algorithm, mode) -> the option naming its config: MAPPO has one per mode (BOX_CONFIGS).
    options = {(name, mode): name.lower() for name in DEFAULT_CONFIGS for mode in MODES}
    options["MAPPO", "Box"] = "mappo_box"
    paths = {key: getattr(args, option) for key, option in options.items()}
    for (name, mode), option in options.items():
        if name in args.algorithms and mode in args.modes and not paths[name, mode].is_file():
            parser.error(f"{name}'s config {paths[name, mode]} does not exist: pass --{option.replace('_', '-')} PATH")
    device = torch.cuda.get_device_name() if str(args.device).startswith("cuda") else str(args.device)
    references: dict = {}  # game params -> {"random": Evaluation, "scripted": Evaluation}
    runs: list[dict] = []
    for mode in args.modes:
        for name in args.algorithms:
            if name in BOX_ONLY and not MODES[mode]:
                print(f"{name} trains Box actions only: skipped in the {mode} mode", flush=True)
                continue
            _, env_id, config = run_config(paths[name, mode], MODES[mode], 0, args)
            params = multi_agent.game_params(env_id, config)
            if params not in references:
                references[params] = mpe_policies.reference_returns(
                    params, args.eval_episodes, device=args.device, seed=args.eval_seed
                )
                for ref, r in references[params].items():
                    print(f"{mode} N={params.N}: R_{ref} = {r.mean_return:.3f} (covered {r.covered:.1%})", flush=True)
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                runs.append(train_and_score(name, paths[name, mode], mode, seed, references, args))
                write(references, runs, device, args)  # after every run: a run cut short keeps what it measured
            scores = [run["score"] for run in runs if (run["algorithm"], run["mode"]) == (name, mode)]
            print(f"{name} {mode}: score {mean_std(scores)} over {len(scores)} seeds", flush=True)
    print(table(references, runs, device, args))
    if args.curves:
        print(f"learning curves: {args.curves}")
    if any(not math.isfinite(run["score"]) for run in runs):
        raise SystemExit("a score is not finite")


if __name__ == "__main__":
    main()
