"""``gpu-marl-covid-report``: CovidEconomy-v0 under the scripted policies (and a trained one), one
episode each under the same env settings, as plots and a welfare table.

    gpu-marl-covid-report --out covid-report
    gpu-marl-covid-report --checkpoint runs/CovidEconomy-v0-ppo-seed0/checkpoint.pt --device cuda

Policies: those of :mod:`gpu_marl_envs.covid_policies` (real world, as the original's baseline and
within the masks; all open; all closed with the full subsidy; closed for ``--closed-days`` then
open) and, with ``--checkpoint``, the policies of a ``gpu-marl-train`` run acting greedily within
the action masks. The env settings are the defaults (the AI Economist's training configuration:
540 days from 2020-03-22, health priority multipliers 0.3 and 0.45), or a checkpoint's
``env_params``; ``--episode-length`` shortens every episode.

Written to ``--out``:
- ``covid_<quantity>.png`` for each quantity of :data:`QUANTITIES` (a line per policy; the day's
  value after its step, averaged over the ``--num-envs`` envs) and ``covid_overview.png`` with all
  of them. Sums over the 51 states, except the stringency level, a mean over states weighted by
  population.
- ``covid_report.md``, ``.csv``, ``.json``: per policy the social welfare (the planner's episode
  return), the governors' mean episode return, the episode metrics (deaths, mean unemployed,
  subsidies, productivity; means over envs), the actions taken outside the masks per env, and
  (JSON) the settings and seconds per policy.

The dynamics are deterministic, and so are the scripted policies and the greedy trained policy:
every env runs the same episode, and ``--num-envs`` only measures speed on a GPU.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tqdm import tqdm

from gpu_marl_envs import covid_policies
from gpu_marl_envs.envs import covid_calibration
from gpu_marl_envs.envs import covid_economy as ce
from gpu_marl_envs.envs.covid_economy_constants import constants
from gpu_marl_envs.parallel_env import make_parallel
from gpu_marl_envs.vector_env import resolve_device

ENV_ID = "gpu_marl_envs/" + ce.COVID_ECONOMY.id
TRAINED = "trained (greedy)"


@dataclass(frozen=True)
class Quantity:
    title: str
    unit: str
    scale: float
    """The plotted value is the raw one (persons, $, level) divided by this."""


QUANTITIES = {
    "infections": Quantity("Infected persons (summed over states)", "millions", 1e6),
    "deaths": Quantity("Deaths since the start (summed over states)", "thousands", 1e3),
    "unemployment": Quantity("Unemployed persons (summed over states)", "millions", 1e6),
    "productivity": Quantity("Daily production plus subsidies (summed over states)", "$ billion per day", 1e9),
    "stringency": Quantity("Stringency level (mean over states, population-weighted)", "level 1 .. 10", 1.0),
    "subsidy": Quantity("Federal subsidy level", "level 0 .. 20", 1.0),
}

COLUMNS = {  # table column -> header
    "policy": "policy",
    "social_welfare": "social welfare (planner's return)",
    "governors_mean_return": "governors' mean return",
    "deaths": "deaths",
    "mean_unemployed": "mean unemployed",
    "subsidies": "subsidies ($)",
    "productivity": "productivity ($)",
    "actions_outside_masks": "actions outside the masks",
}

Act = Callable[[dict, dict], dict]
"""``(observations, infos) -> actions``, keyed by group (``step_groups``' form)."""


class ReportError(ValueError):
    """A bad argument or input file; the message says what to change."""


@dataclass
class Episode:
    name: str
    series: dict[str, np.ndarray]
    """Quantity -> (T,) values of days 1 .. T (raw units)."""
    summary: dict[str, float]
    seconds: float


def day_values(
    p: ce.CovidEconomyParams, state: dict[str, torch.Tensor], population: torch.Tensor, start_deaths: torch.Tensor
) -> torch.Tensor:
    """(len(QUANTITIES),) float64 on the state's device: :data:`QUANTITIES` of the state's day,
    averaged over envs."""
    envs = torch.arange(len(state["t"]), device=state["t"].device)
    level = state["stringency"][envs, state["t"].long() % p.calibration.beta_delay].double()  # (E, S)
    values = torch.stack(
        [
            state["infected"].double().sum(1),
            state["deaths"].double().sum(1) - start_deaths,
            state["unemployed"].double().sum(1),
            state["productivity"].double().sum(1),
            (level * population).sum(1) / population.sum(),
            state["subsidy_level"].double(),
        ],
        dim=1,
    )
    return values.mean(0)


def outside_masks(actions: dict[str, torch.Tensor], infos: dict) -> torch.Tensor:
    """How many of ``actions`` their agent's mask forbids (a device scalar: no host sync)."""
    count = torch.zeros((), dtype=torch.int64, device=next(iter(actions.values())).device)
    for group, action in actions.items():
        allowed = infos[group]["action_mask"].gather(-1, action[..., None])
        count += (~allowed).sum()
    return count


def run_episode(
    name: str,
    act: Act,
    p: ce.CovidEconomyParams,
    num_envs: int = 1,
    *,
    device="cpu",
    backend: str | None = None,
    progress: tqdm | None = None,
) -> Episode:
    """One episode of ``num_envs`` envs under ``act``; the series and the episode's summary."""
    start = time.perf_counter()
    env = make_parallel(
        ENV_ID, num_envs, device=device, backend=backend, params=p, autoreset_mode=AutoresetMode.DISABLED
    )
    observations, infos = env.reset_groups(seed=0)
    population = torch.tensor(constants(p)["POPULATION"], dtype=torch.float64, device=env.device)
    start_deaths = env.get_state()["deaths"].double().sum(1)
    days, outside = [], torch.zeros((), dtype=torch.int64, device=env.device)
    for _ in range(p.episode_length):
        actions = act(observations, infos)
        outside += outside_masks(actions, infos)
        observations, _, _, _, infos = env.step_groups(actions)
        days.append(day_values(p, env.get_state(), population, start_deaths))
        if progress is not None:
            progress.update(1)
    if not bool(infos["planner"]["_episode"].all()):  # else "episode" would hold an earlier episode's values
        raise RuntimeError("the episode did not end after episode_length steps")
    episode = {
        group: {key: value.double().mean().item() for key, value in infos[group]["episode"].items()} for group in infos
    }
    series = torch.stack(days).cpu().numpy()
    env.close()
    summary = {
        "social_welfare": episode["planner"]["return"],
        "governors_mean_return": episode["governors"]["return"],
        "deaths": episode["planner"]["deaths"],
        "mean_unemployed": episode["planner"]["unemployment"],
        "subsidies": episode["planner"]["subsidies"],
        "productivity": episode["planner"]["productivity"],
        "actions_outside_masks": outside.item() / num_envs,
    }
    return Episode(name, dict(zip(QUANTITIES, series.T)), summary, time.perf_counter() - start)


def scripted(policy: covid_policies.SchedulePolicy) -> Act:
    return lambda observations, infos: policy(observations)


def load_trained(path: Path, device) -> tuple[Act, ce.CovidEconomyParams]:
    """The greedy, masked policies of a ``gpu-marl-train`` checkpoint of CovidEconomy-v0, and the
    env params it was trained with (loaded with the trainer's own functions)."""
    from gpu_marl_envs.baselines import multi_agent
    from gpu_marl_envs.baselines.checkpoint import CheckpointError, load_checkpoint
    from gpu_marl_envs.baselines.train import load_policies

    try:
        checkpoint = load_checkpoint(path, map_location=device)
    except CheckpointError as error:
        raise ReportError(f"--checkpoint: {error} (gpu-marl-train writes <run>/checkpoint.pt)") from None
    env_id = checkpoint.get("env")
    if not isinstance(env_id, str) or env_id.split("/")[-1] != ce.COVID_ECONOMY.id:
        raise ReportError(
            f"--checkpoint {path} is not a gpu-marl-train checkpoint of {ce.COVID_ECONOMY.id} (its env: {env_id!r})"
        )
    policies, env_id, config = load_policies(checkpoint, device)
    slots = multi_agent.policy_slots(env_id, config)
    for policy in policies.values():
        policy.eval()
    return (
        lambda observations, infos: multi_agent.greedy_actions(policies, slots, observations, infos),
        multi_agent.game_params(env_id, config),
    )


def dates(p: ce.CovidEconomyParams) -> list[datetime.date]:
    """The dates of days 1 .. T."""
    start = datetime.datetime.strptime(p.start_date, covid_calibration.DATE_FORMAT).date()
    return [start + datetime.timedelta(days=day) for day in range(1, p.episode_length + 1)]


def plot(episodes: list[Episode], p: ce.CovidEconomyParams, out: Path) -> list[Path]:
    """``covid_<quantity>.png`` per quantity and ``covid_overview.png``; returns the paths."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    x = dates(p)

    def draw(ax, key: str) -> None:
        quantity = QUANTITIES[key]
        for index, episode in enumerate(episodes):
            ax.plot(x, episode.series[key] / quantity.scale, color=f"C{index}", linewidth=1.6, label=episode.name)
        ax.set_title(quantity.title, fontsize="medium")
        ax.set_ylabel(quantity.unit)
        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.grid(True, alpha=0.3)

    def legend(figure, ax, columns: int) -> None:
        figure.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=columns, fontsize="small")

    paths = []
    for key in QUANTITIES:
        figure = Figure(figsize=(7.2, 4.6), dpi=100, layout="constrained")
        FigureCanvasAgg(figure)
        ax = figure.subplots()
        draw(ax, key)
        legend(figure, ax, columns=3)
        paths.append(out / f"covid_{key}.png")
        figure.savefig(paths[-1])
    figure = Figure(figsize=(14, 8.4), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, 3).ravel()
    for ax, key in zip(axes, QUANTITIES):
        draw(ax, key)
    legend(figure, axes[0], columns=len(episodes))
    figure.suptitle(f"CovidEconomy-v0 from {p.start_date}, {p.episode_length} days: one episode per policy")
    paths.append(out / "covid_overview.png")
    figure.savefig(paths[-1])
    return paths


def table_rows(episodes: list[Episode]) -> list[dict]:
    return [{"policy": episode.name, **episode.summary} for episode in episodes]


def markdown_table(episodes: list[Episode]) -> str:
    formats = {
        "social_welfare": "{:.2f}",
        "governors_mean_return": "{:.2f}",
        "deaths": "{:,.0f}",
        "mean_unemployed": "{:,.0f}",
        "subsidies": "{:.3g}",
        "productivity": "{:.4g}",
        "actions_outside_masks": "{:.0f}",
    }
    lines = ["| " + " | ".join(COLUMNS.values()) + " |", "|" + "---|" + "---:|" * (len(COLUMNS) - 1)]
    for row in table_rows(episodes):
        cells = [row["policy"]] + [formats[key].format(row[key]) for key in list(COLUMNS)[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_tables(episodes: list[Episode], settings: dict, out: Path) -> list[Path]:
    """``covid_report.md``, ``.csv``, ``.json``; returns the paths."""
    paths = [out / "covid_report.md", out / "covid_report.csv", out / "covid_report.json"]
    paths[0].write_text(
        f"# CovidEconomy-v0: one episode per policy\n\n{markdown_table(episodes)}\nSettings: {json.dumps(settings)}\n"
    )
    with open(paths[1], "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows(table_rows(episodes))
    paths[2].write_text(
        json.dumps(
            {
                "settings": settings,
                "policies": [
                    {**row, "seconds": episode.seconds} for row, episode in zip(table_rows(episodes), episodes)
                ],
            },
            indent=2,
        )
        + "\n"
    )
    return paths


def settings_of(p: ce.CovidEconomyParams, args: argparse.Namespace, device, backend: str) -> dict:
    fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name != "calibration"}
    return {
        "env": ENV_ID,
        "params": fields,
        "calibration": "shipped" if p.calibration is covid_calibration.default_calibration() else "custom",
        "num_envs": args.num_envs,
        "device": str(device),
        "backend": backend,
        "closed_days": args.closed_days,
        "checkpoint": None if args.checkpoint is None else str(args.checkpoint),
    }


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu-marl-covid-report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, help="a gpu-marl-train checkpoint of CovidEconomy-v0 to add")
    parser.add_argument("--out", type=Path, default=Path("covid-report"), help="output folder (default: covid-report)")
    parser.add_argument("--device", default="cpu", help="torch device of the envs and policies (default: cpu)")
    parser.add_argument(
        "--backend",
        choices=("torch", "numba", "pycuda"),
        help="the env's backend (default: the fastest available on the device)",
    )
    parser.add_argument("--num-envs", type=positive_int, default=1, help="envs per policy (default: 1)")
    parser.add_argument("--episode-length", type=positive_int, help="days per episode (default: the params', 540)")
    parser.add_argument(
        "--closed-days",
        type=positive_int,
        default=60,
        help="days closed of the 'closed, then open' policy (default: 60)",
    )
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
        acts: list[tuple[str, Act]] = []
        p = ce.CovidEconomyParams()
        if args.checkpoint is not None:
            trained, p = load_trained(args.checkpoint, device)
            acts.append((TRAINED, trained))
        if args.episode_length is not None:
            p = dataclasses.replace(p, episode_length=args.episode_length)
        # The env's own checks of the device, backend and sizes, before any episode runs.
        probe = make_parallel(ENV_ID, args.num_envs, device=device, backend=args.backend, params=p)
        backend = probe.backend
        probe.close()
        if args.out.exists() and not args.out.is_dir():
            raise ReportError(f"--out {args.out} exists and is not a folder")
    except (ValueError, RuntimeError) as error:  # ReportError, and the runtime's errors, which name the fix
        parser.error(str(error))
    acts = [
        (policy.name, scripted(policy)) for policy in covid_policies.scripted_policies(p, args.closed_days, device)
    ] + acts
    args.out.mkdir(parents=True, exist_ok=True)
    episodes = []
    with tqdm(total=len(acts) * p.episode_length, unit="day", desc="covid report") as progress:
        for name, act in acts:
            progress.set_postfix_str(name)
            episodes.append(run_episode(name, act, p, args.num_envs, device=device, backend=backend, progress=progress))
    paths = plot(episodes, p, args.out) + write_tables(episodes, settings_of(p, args, device, backend), args.out)
    print(markdown_table(episodes))
    print(
        f"{sum(e.seconds for e in episodes):.1f} s for {len(episodes)} episodes of {p.episode_length} days "
        f"x {args.num_envs} env(s) on {device}; wrote {', '.join(str(path) for path in paths)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
