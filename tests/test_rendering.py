"""Headless rendering of Tag states and saving animations (CPU only)."""

import functools
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from gpu_marl_envs import rendering, rng
from gpu_marl_envs.envs import tag_continuous as tc
from gpu_marl_envs.envs import tag_gridworld as tg

SIZE = 256


def _key(seed=0, num_envs=1):
    return rng.key_hash(torch.full((num_envs,), seed), torch.arange(num_envs))


def _continuous(num_envs=1, seed=0, **kw):
    p = tc.TagContinuousParams(num_taggers=2, num_runners=3, num_other_agents_observed=2, **kw)
    return p, tc.reset(p, _key(seed, num_envs), num_envs)


def _gridworld(num_envs=1, **kw):
    p = tg.TagGridworldParams(num_taggers=2, grid_length=10, **kw)
    return p, tg.reset(p, _key(0, num_envs), num_envs)


def _pixel(frame, x, y, length, up=0):
    """The pixel at world point (x, y) of an arena [0, length]^2, or ``up`` pixels above it."""
    left, top, side = rendering._layout(frame.shape[0])
    return frame[int(round(top + (length - y) * side / length)) - up, int(round(left + x * side / length))]


def _reddish(rgb):
    r, g, b = (int(c) for c in rgb)
    return r > 150 and r > g + 80 and r > b + 80


def _bluish(rgb):
    r, g, b = (int(c) for c in rgb)
    return b > 150 and b > r + 80 and b > g + 50


def _park(state, L):
    """Every agent to the bottom-left corner, out of the way of the points under test, heading +x
    (so the heading line, drawn from the centre, leaves the pixels just above the centre alone)."""
    state.x[:] = 0.02 * L
    state.y[:] = 0.02 * L
    state.direction[:] = 0.0


def test_frames_shape_dtype():
    p, s = _continuous(num_envs=3)
    for env_index in range(3):
        frame = rendering.render_tag_continuous(p, s, env_index, size=SIZE)
        assert frame.shape == (SIZE, SIZE, 3) and frame.dtype == np.uint8
    q, g = _gridworld(num_envs=2, random_start=True)
    frame = rendering.render_tag_gridworld(q, g, 1, size=200)
    assert frame.shape == (200, 200, 3) and frame.dtype == np.uint8


def test_continuous_tagger_red_and_out_of_game_runner_not_blue():
    p, s = _continuous()
    L = p.grid_length
    _park(s, L)
    s.x[0, 0], s.y[0, 0] = 0.3 * L, 0.7 * L  # tagger
    s.x[0, 2], s.y[0, 2] = 0.7 * L, 0.3 * L  # runner in the game
    s.x[0, 3], s.y[0, 3] = 0.7 * L, 0.7 * L  # runner out of the game
    s.in_game[0, 3] = False
    frame = rendering.render_tag_continuous(p, s, size=SIZE)
    assert _reddish(_pixel(frame, 0.3 * L, 0.7 * L, L, up=2))
    assert _bluish(_pixel(frame, 0.7 * L, 0.3 * L, L, up=2))
    left, top, side = rendering._layout(SIZE)
    cx, cy = left + int(0.7 * side), top + int(0.3 * side)
    patch = frame[cy - 8 : cy + 9, cx - 8 : cx + 9].reshape(-1, 3)
    assert not any(_bluish(rgb) for rgb in patch)
    assert not any(_reddish(rgb) for rgb in patch)


def test_y_points_up():
    p, s = _continuous()
    L = p.grid_length
    s.x[0, :] = 0.5 * L
    s.y[0, :] = 0.9 * L  # everyone near the top ...
    s.y[0, 0] = 0.1 * L  # ... except tagger 0; tagger 1 out of the game, so the only red is tagger 0
    s.in_game[0, 1] = False
    frame = rendering.render_tag_continuous(p, s, size=SIZE)
    _, top, _ = rendering._layout(SIZE)
    f = frame[top:].astype(int)  # the arena (the legend's red marker is in the band above)
    red = (f[..., 0] > 150) & (f[..., 0] > f[..., 1] + 80) & (f[..., 0] > f[..., 2] + 80)
    rows = np.nonzero(red.any(axis=1))[0] + top
    assert rows.size and rows.min() > SIZE / 2


@pytest.mark.parametrize("game", ["continuous", "gridworld"])
def test_the_caption_band_holds_a_colour_legend(game):
    """The band above the arena shows each kind of agent's colour beside its name, at the sizes of
    the README's animations; where it would run into the caption (a tiny frame), it is left out."""
    p, s = _continuous() if game == "continuous" else _gridworld()
    render = rendering.render_tag_continuous if game == "continuous" else rendering.render_tag_gridworld
    for size, legend_expected in [(384, True), (256, True), (64, False)]:
        frame = render(p, s, size=size)
        _, top, _ = rendering._layout(size)
        band = frame[: top - 2].reshape(-1, 3)  # above the arena's border
        colours = {"red": any(_reddish(rgb) for rgb in band), "blue": any(_bluish(rgb) for rgb in band)}
        assert colours == {"red": legend_expected, "blue": legend_expected}, f"{game} at {size} px: {colours}"


def test_gridworld_cells():
    q, g = _gridworld()
    g.x[0] = torch.tensor([2, 2, 8], dtype=torch.int32)
    g.y[0] = torch.tensor([7, 7, 1], dtype=torch.int32)
    frame = rendering.render_tag_gridworld(q, g, size=SIZE)
    L = q.grid_length + 1  # cell k spans [k, k + 1) of an arena of L + 1 cells
    assert _reddish(_pixel(frame, 2.5, 7.5, L))
    assert _bluish(_pixel(frame, 8.5, 1.5, L))
    assert not _bluish(_pixel(frame, 1.5, 8.5, L)) and not _reddish(_pixel(frame, 1.5, 8.5, L))


def test_different_states_give_different_frames():
    p, s0 = _continuous(seed=0)
    _, s1 = _continuous(seed=1)
    f0 = rendering.render_tag_continuous(p, s0, size=SIZE)
    assert not np.array_equal(f0, rendering.render_tag_continuous(p, s1, size=SIZE))
    s0.t[0] = 7  # only the caption changes
    assert not np.array_equal(f0, rendering.render_tag_continuous(p, s0, size=SIZE))
    q, g = _gridworld(num_envs=2, random_start=True)
    assert not np.array_equal(
        rendering.render_tag_gridworld(q, g, 0, size=SIZE), rendering.render_tag_gridworld(q, g, 1, size=SIZE)
    )


def test_render_bad_inputs():
    p, s = _continuous(num_envs=2)
    q, g = _gridworld()
    with pytest.raises(IndexError, match=r"0\.\.1"):
        rendering.render_tag_continuous(p, s, env_index=2)
    with pytest.raises(IndexError, match=r"0\.\.1"):
        rendering.render_tag_continuous(p, s, env_index=-1)
    with pytest.raises(TypeError):
        rendering.render_tag_continuous(p, s, env_index=0.0)
    with pytest.raises(ValueError, match="size"):
        rendering.render_tag_continuous(p, s, size=8)
    with pytest.raises(TypeError, match="TagGridworldParams"):
        rendering.render_tag_gridworld(p, g)
    with pytest.raises(TypeError, match="TagContinuousState"):
        rendering.render_tag_continuous(p, g)
    wrong = tc.TagContinuousParams(num_taggers=3, num_runners=3, num_other_agents_observed=2)
    with pytest.raises(ValueError, match="shape"):
        rendering.render_tag_continuous(wrong, s)


def _frames(count=5, size=64):
    frames = []
    for k in range(count):
        frame = np.full((size, size, 3), 240, dtype=np.uint8)
        frame[10:20, 5 + 5 * k : 15 + 5 * k] = (200, 30, 30)
        frames.append(frame)
    return frames


def test_save_gif(tmp_path):
    path = rendering.save_animation(_frames(), tmp_path / "sub" / "anim.gif", fps=10)
    assert path == tmp_path / "sub" / "anim.gif" and path.is_file()
    assert [f.name for f in path.parent.iterdir()] == ["anim.gif"]  # no temporary left behind
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.size == (64, 64) and gif.n_frames == 5
        assert gif.info.get("loop") == 0 and gif.info.get("duration") == 100
        gif.seek(2)
        first = np.asarray(gif.convert("RGB"))
    assert np.abs(first.astype(int) - _frames()[2].astype(int)).max() < 40


def test_save_mp4(tmp_path):
    import imageio.v2 as imageio  # the [dev] extra installs imageio[ffmpeg]

    path = rendering.save_animation(_frames(size=64), tmp_path / "anim.mp4", fps=10)
    assert len(imageio.mimread(path, format="FFMPEG")) == 5


def test_save_mp4_without_ffmpeg_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import fails as if not installed
    with pytest.raises(RuntimeError, match=r"pip install imageio\[ffmpeg\]"):
        rendering.save_animation(_frames(), tmp_path / "anim.mp4")
    assert not any(tmp_path.iterdir())


def test_save_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match=r"\.gif.*\.mp4"):
        rendering.save_animation(_frames(), tmp_path / "anim.avi")
    with pytest.raises(ValueError, match="empty"):
        rendering.save_animation([], tmp_path / "anim.gif")
    with pytest.raises(ValueError, match="differ"):
        rendering.save_animation(_frames(size=64) + _frames(size=32), tmp_path / "anim.gif")
    with pytest.raises(ValueError, match="uint8"):
        rendering.save_animation([f.astype(np.float32) for f in _frames()], tmp_path / "anim.gif")
    with pytest.raises(ValueError, match="fps"):
        rendering.save_animation(_frames(), tmp_path / "anim.gif", fps=0)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("game", ["TagContinuous-v0", "TagGridworld-v0"])
def test_pettingzoos_render_test_passes(game, monkeypatch):
    """PettingZoo's own render test: every render mode the game declares, "human" (a pygame window,
    here on SDL's headless driver) included."""
    import pettingzoo
    from pettingzoo.test import render_test
    from pettingzoo.utils.conversions import parallel_to_aec

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    make = functools.partial(pettingzoo.make, "parallel", f"gpu_marl_envs/{game}")
    assert make().metadata["render_modes"] == ["rgb_array", "human"]
    render_test(lambda render_mode=None: parallel_to_aec(make(render_mode=render_mode)))


def test_a_game_without_frames_refuses_the_human_mode():
    import pettingzoo

    with pytest.raises(ValueError, match=r"render_mode must be None or one of \[\] for CovidEconomy-v0, got 'human'"):
        pettingzoo.make("parallel", "gpu_marl_envs/CovidEconomy-v0", render_mode="human")
