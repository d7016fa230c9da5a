"""Learning curves drawn with matplotlib: mean episode return against env steps, the raw points
faint and an exponential moving average over them, round tick values (25k, 50k, ... steps), one
panel per group for a multi-agent run (its history has a ``mean_return/<group>`` per group).

Figures are made with matplotlib's object-oriented API on the Agg canvas, without pyplot: nothing
here changes the backend or the state of a user's own plots. matplotlib is imported when a figure is
drawn, not with this module: ``gpu-marl-train`` imports it at start and draws only at the end, and
matplotlib's import (half a second on a slow CPU) would delay every run's first step.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpu_marl_envs.baselines.run_folder import atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH, HEIGHT, DPI = 720, 420, 100  # pixels of one panel's figure
PANEL_HEIGHT = 300  # pixels of each further panel
SMOOTHING_SPAN = 0.1  # the moving average's span, as a fraction of the points (at least 1 point)
GROUP_PREFIX = "mean_return/"


def smooth(values: list[float]) -> list[float]:
    """An exponential moving average over ``values`` whose span is ``SMOOTHING_SPAN`` of the
    points, debiased at the start (as TensorBoard's smoothing is), so the curve begins at the
    first value instead of climbing from 0."""
    span = max(1.0, SMOOTHING_SPAN * len(values))
    keep = 1.0 - 2.0 / (span + 1.0)
    smoothed, average, weight = [], 0.0, 0.0
    for value in values:
        average = keep * average + (1.0 - keep) * value
        weight = keep * weight + (1.0 - keep)
        smoothed.append(average / weight)
    return smoothed


def curves(history: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """The ``(env steps, mean return)`` points of each group (``""`` for a single-agent run),
    without the entries in which no episode finished."""
    finished = [h for h in history if h["episodes"] > 0]
    groups = [key[len(GROUP_PREFIX) :] for key in (history[0] if history else {}) if key.startswith(GROUP_PREFIX)]
    if not groups:
        return {"": [(h["env_steps"], h["mean_return"]) for h in finished]}
    return {group: [(h["env_steps"], h[GROUP_PREFIX + group]) for h in finished] for group in groups}


def plot_learning_curve(history: list[dict], path, title: str) -> Path:
    """One run's learning curve (a panel per group for a multi-agent run), written atomically to
    ``path`` as a PNG."""
    return plot_learning_curves({"": history}, path, title)


def plot_learning_curves(runs: dict[str, list[dict]], path, title: str) -> Path:
    """Several runs' learning curves on the same axes (``runs``: legend label -> history), one
    panel per group; written atomically to ``path`` as a PNG."""
    return _save(learning_curve_figure(runs, title), Path(path))


def learning_curve_figure(runs: dict[str, list[dict]], title: str) -> Figure:
    """The figure :func:`plot_learning_curves` writes: per panel (group), each run's raw points
    (faint, the first line of its colour) and their moving average (the second)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter, MaxNLocator

    per_run = {label: curves(history) for label, history in runs.items()}
    groups = list(dict.fromkeys(group for run in per_run.values() for group in run)) or [""]
    height = HEIGHT + PANEL_HEIGHT * (len(groups) - 1)
    figure = Figure(figsize=(WIDTH / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(groups), 1, sharex=True, squeeze=False)[:, 0]
    figure.suptitle(title)
    for ax, group in zip(axes, groups):
        for index, (label, run) in enumerate(per_run.items()):
            points = run.get(group, [])
            if not points:
                continue
            steps, returns = zip(*points)
            colour = f"C{index}"
            ax.plot(steps, returns, color=colour, alpha=0.3, linewidth=1, label=None if label else "per log interval")
            ax.plot(steps, smooth(list(returns)), color=colour, linewidth=2, label=label or "moving average")
        if not ax.lines:
            ax.text(0.5, 0.5, "no episode finished", transform=ax.transAxes, ha="center", va="center")
        else:
            ax.legend(loc="best", fontsize="small")
        ax.set_ylabel(f"{group}: return per agent" if group else "mean episode return")
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("env steps")
    axes[-1].xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    axes[-1].xaxis.set_major_formatter(EngFormatter(sep=""))  # 250k, 1.5M
    axes[-1].set_xlim(left=0)
    return figure


def _save(figure: Figure, path: Path) -> Path:
    """Write the picture whole or not at all (:func:`run_folder.atomic_write`): a crash leaves the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda file: figure.savefig(file, format="png"))
    return path
