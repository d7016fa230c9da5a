"""Learning curves: round tick values, a moving average over the faint raw points, a panel per
group of a multi-agent run, the PNG the command writes, and matplotlib imported only to draw."""

import math
import subprocess
import sys

import pytest
from gpu_marl_envs.baselines import plotting
from PIL import Image


def history(points: int, step: int = 24_960, groups=()) -> list[dict]:
    entries = []
    for i in range(points):
        entry = {
            "env_steps": step * (i + 1),
            "seconds": 1.0 + i,
            "mean_return": 23.47 + 11.3 * i + (-1) ** i * 9,
            "episodes": 3,
        }
        entry.update({f"mean_return/{group}": k + 0.1 * i for k, group in enumerate(groups)})
        entries.append(entry)
    return entries


def round_ticks(ticks) -> bool:
    """Evenly spaced multiples of a round step: 1, 2, 2.5 or 5 times a power of ten."""
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    return (
        any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5))
        and all(math.isclose(t / step, round(t / step), abs_tol=1e-9) for t in ticks)
        and all(math.isclose(b - a, step) for a, b in zip(ticks, ticks[1:]))
    )


def test_ticks_are_round_numbers():
    figure = plotting.learning_curve_figure({"": history(50)}, "t")
    ax = figure.axes[0]
    figure.canvas.draw()
    x_ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    y_ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert len(x_ticks) >= 3 and round_ticks(x_ticks), x_ticks
    assert len(y_ticks) >= 3 and round_ticks(y_ticks), y_ticks
    labels = [label.get_text() for label in ax.get_xticklabels() if label.get_text()]
    assert "250k" in labels and "1M" in labels, labels  # steps written short, not 249,600


def test_a_smoothed_curve_over_the_faint_raw_one():
    entries = history(50)
    raw, smoothed = plotting.learning_curve_figure({"": entries}, "t").axes[0].lines
    assert list(raw.get_ydata()) == [h["mean_return"] for h in entries]
    assert list(smoothed.get_ydata()) == pytest.approx(plotting.smooth([h["mean_return"] for h in entries]))
    assert raw.get_alpha() < 0.5 and smoothed.get_linewidth() > raw.get_linewidth()

    # The average tames the alternating noise of +-9 around the trend.
    def roughness(values):
        return sum(abs(a - 2 * b + c) for a, b, c in zip(values, values[1:], values[2:]))

    assert roughness(smoothed.get_ydata()) < 0.5 * roughness(raw.get_ydata())


def test_smooth_keeps_constants_and_starts_at_the_first_value():
    assert plotting.smooth([3.0] * 20) == pytest.approx([3.0] * 20)
    assert plotting.smooth([5.0, 0.0, 0.0])[0] == 5.0
    assert plotting.smooth([]) == []


def test_one_panel_per_group_and_entries_without_episodes_skipped():
    entries = history(10, groups=("taggers", "runners"))
    entries[3]["episodes"] = 0
    figure = plotting.learning_curve_figure({"": entries}, "Tag")
    assert [ax.get_ylabel() for ax in figure.axes] == ["taggers: return per agent", "runners: return per agent"]
    for ax, index in zip(figure.axes, (0, 1)):
        raw = ax.lines[0]
        assert len(raw.get_xdata()) == 9 and entries[3]["env_steps"] not in raw.get_xdata()
        assert raw.get_ydata()[0] == index


def test_several_runs_share_the_axes_with_a_legend():
    figure = plotting.learning_curve_figure({"1 GPU": history(8), "2 GPUs": history(8)}, "t")
    ax = figure.axes[0]
    assert len(ax.lines) == 4
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["1 GPU", "2 GPUs"]


def test_png_written_atomically(tmp_path):
    path = plotting.plot_learning_curve(history(5), tmp_path / "curve.png", "ppo on CartPole-v1")
    assert Image.open(path).size == (plotting.WIDTH, plotting.HEIGHT)
    empty = plotting.plot_learning_curve([], tmp_path / "empty.png", "nothing yet")
    assert Image.open(empty).format == "PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png", "empty.png"]


def test_the_training_command_imports_matplotlib_only_to_draw():
    """gpu-marl-train draws at the end of a run: matplotlib's import must not delay its start."""
    code = "import sys, gpu_marl_envs.baselines.train; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
