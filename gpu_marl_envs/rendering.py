"""Headless rendering of one sub-env of a batched Tag state, with Pillow (no display, no matplotlib).

Frames are ``(size, size, 3)`` uint8 RGB arrays. A text band at the top holds the caption; the
arena is the largest square below it, with a dark border, on a light background. World ``y`` points
up: ``y = 0`` is the arena's bottom edge.

- TagContinuous: taggers are red filled discs whose radius is the tagging radius (at least 3 px),
  so a runner is tagged when its centre enters a red disc; runners in the game are smaller blue
  discs; agents out of the game are small grey hollow circles. Every agent in the game has a dark
  heading line from its centre, reaching past its disc by at least 3 px plus the distance it covers
  in one step at its current speed. Caption: ``t = {t}  runners left: {k}/{num_runners}``.
- TagGridworld: the ``(L + 1) x (L + 1)`` cells (light grid lines only when a cell is >= 6 px);
  taggers are red squares, the runner a smaller blue square on top (so a tag shows as blue inside
  red); squares are at least 5 px so small cells stay visible. Caption: ``t = {t}``.
- Both: a colour legend (tagger, runner; TagContinuous also "out" for agents out of the game) at
  the right of the caption band, where the band has room for it beside the caption.

:func:`game_renderer` says which multi-agent games have a renderer (CovidEconomy has none). Only the
rendered env's rows leave the device. :func:`save_animation` writes GIF (Pillow) or MP4
(imageio with its ffmpeg plugin).

The classic-control envs are drawn by Gymnasium's own renderer instead (:class:`ClassicRenderer`):
a Gymnasium env of the same id is given our state and asked for its ``rgb_array`` frame, so sizes,
colours and anti-aliasing are Gymnasium's by construction. It draws with pygame
(``pip install gpu_marl_envs[render]``).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import tempfile
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from gpu_marl_envs.envs.definition import EnvDefinition
from gpu_marl_envs.envs.tag_continuous_params import TagContinuousParams, TagContinuousState
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams, TagGridworldState

BACKGROUND = (246, 246, 242)
BORDER = (60, 60, 60)
GRID = (222, 222, 216)
TEXT = (20, 20, 20)
TAGGER = (215, 40, 40)
RUNNER = (40, 90, 215)
OUT_OF_GAME = (150, 150, 150)
HEADING = (25, 25, 25)
MIN_SIZE = 64
SUPPORTED_SUFFIXES = (".gif", ".mp4")


def _font(size: int):
    try:  # Pillow >= 10.1 scales its default font; older ones have only the fixed bitmap font.
        return ImageFont.load_default(size=max(10, size // 36))
    except TypeError:
        return ImageFont.load_default()


def _layout(size: int) -> tuple[int, int, int]:
    """``(left, top, side)`` of the arena square in pixels, below the caption band."""
    band = max(10, size // 36) + 8
    margin = max(2, size // 64)
    side = size - band - 2 * margin
    return (size - side) // 2, band + margin, side


def _check(params, state, env_index, size, params_type, state_type) -> None:
    if not isinstance(params, params_type):
        raise TypeError(f"params must be a {params_type.__name__}, got {type(params).__name__}")
    if not isinstance(state, state_type):
        raise TypeError(f"state must be a {state_type.__name__}, got {type(state).__name__}")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < MIN_SIZE:
        raise ValueError(f"size must be an integer >= {MIN_SIZE}, got {size!r}")
    if state.x.ndim != 2 or state.x.shape[1] != params.num_agents:
        raise ValueError(f"state.x must have shape (num_envs, {params.num_agents}), got {tuple(state.x.shape)}")
    num_envs = state.x.shape[0]
    if isinstance(env_index, bool) or not isinstance(env_index, (int, np.integer)):
        raise TypeError(f"env_index must be an integer, got {env_index!r}")
    if not 0 <= env_index < num_envs:
        raise IndexError(f"env_index must be in 0..{num_envs - 1} (the state holds {num_envs} envs), got {env_index}")


# (label, colour, marker) per entry; markers as the agents are drawn: "disc", "ring" or "square".
Legend = Sequence[tuple[str, tuple[int, int, int], str]]


def _canvas(size: int, caption: str, legend: Legend) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    """The frame's background, caption, legend (right-aligned in the caption band; left out where it
    would run into the caption) and arena border."""
    image = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    font, margin = _font(size), max(2, size // 64)
    draw.text((margin, 3), caption, fill=TEXT, font=font)
    marker = max(4, size // 80)  # the markers' diameter
    gap = marker // 2 + 2
    widths = [marker + gap + draw.textlength(label, font=font) for label, _, _ in legend]
    x = size - margin - sum(widths) - 2 * gap * (len(legend) - 1)
    if x > margin + draw.textlength(caption, font=font) + 4 * gap:
        middle = 3 + (max(10, size // 36)) / 2 + 1  # the text line's middle
        for (label, colour, shape), width in zip(legend, widths):
            box = (x, middle - marker / 2, x + marker, middle + marker / 2)
            if shape == "square":
                draw.rectangle(box, fill=colour)
            elif shape == "ring":
                draw.ellipse(box, outline=colour, width=1)
            else:
                draw.ellipse(box, fill=colour)
            draw.text((x + marker + gap, 3), label, fill=TEXT, font=font)
            x += width + 2 * gap
    left, top, side = _layout(size)
    draw.rectangle((left - 1, top - 1, left + side, top + side), outline=BORDER, width=max(1, size // 256))
    return image, draw


def render_tag_continuous(
    params: TagContinuousParams, state: TagContinuousState, env_index: int = 0, size: int = 512
) -> np.ndarray:
    """One env of a TagContinuous state as a ``(size, size, 3)`` uint8 RGB frame."""
    _check(params, state, env_index, size, TagContinuousParams, TagContinuousState)
    # One row of one env crosses to the host: the batch may be large and on a GPU.
    x, y, direction, speed = (
        torch.stack(
            [
                state.x[env_index],
                state.y[env_index],
                state.direction[env_index],
                state.speed[env_index],
            ]
        )
        .to(torch.float64)
        .cpu()
        .numpy()
    )
    in_game = state.in_game[env_index].cpu().numpy().astype(bool)
    t = int(state.t[env_index].cpu())
    g = params.num_taggers
    caption = f"t = {t}  runners left: {int(in_game[g:].sum())}/{params.num_runners}"
    image, draw = _canvas(
        size, caption, [("tagger", TAGGER, "disc"), ("runner", RUNNER, "disc"), ("out", OUT_OF_GAME, "ring")]
    )

    left, top, side = _layout(size)
    scale = side / params.grid_length
    px = left + x * scale
    py = top + (params.grid_length - y) * scale  # y up
    tagger_r = max(3.0, params.tagging_radius * scale)
    runner_r = max(2.5, 0.6 * tagger_r)
    # Taggers last, so a runner about to be tagged is seen under the red disc.
    order = [i for i in range(params.num_agents) if not in_game[i]]
    order += [i for i in range(g, params.num_agents) if in_game[i]] + [i for i in range(g) if in_game[i]]
    for i in order:
        cx, cy = px[i], py[i]
        if not in_game[i]:
            r = runner_r * 0.8
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=OUT_OF_GAME, width=1)
            continue
        r = tagger_r if i < g else runner_r
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=TAGGER if i < g else RUNNER)
        length = r + 3.0 + speed[i] * scale
        tip = (cx + length * np.cos(direction[i]), cy - length * np.sin(direction[i]))
        draw.line(((cx, cy), tip), fill=HEADING, width=max(1, size // 384))
    return np.asarray(image, dtype=np.uint8)


def render_tag_gridworld(
    params: TagGridworldParams, state: TagGridworldState, env_index: int = 0, size: int = 512
) -> np.ndarray:
    """One env of a TagGridworld state as a ``(size, size, 3)`` uint8 RGB frame."""
    _check(params, state, env_index, size, TagGridworldParams, TagGridworldState)
    cells = torch.stack([state.x[env_index], state.y[env_index]]).cpu().numpy()
    t = int(state.t[env_index].cpu())
    image, draw = _canvas(size, f"t = {t}", [("tagger", TAGGER, "square"), ("runner", RUNNER, "square")])

    left, top, side = _layout(size)
    n_cells = params.grid_length + 1
    cell = side / n_cells
    if cell >= 6:
        for k in range(1, n_cells):
            draw.line(((left + k * cell, top), (left + k * cell, top + side - 1)), fill=GRID)
            draw.line(((left, top + k * cell), (left + side - 1, top + k * cell)), fill=GRID)

    def square(cx: int, cy: int, half: float, colour) -> None:
        mx = left + (cx + 0.5) * cell
        my = top + (params.grid_length - cy + 0.5) * cell  # y up
        draw.rectangle((mx - half, my - half, mx + half - 1, my + half - 1), fill=colour)

    tagger_half = max(2.5, cell / 2)
    for i in range(params.num_taggers):
        square(cells[0, i], cells[1, i], tagger_half, TAGGER)
    square(cells[0, params.runner_id], cells[1, params.runner_id], max(2.0, 0.7 * tagger_half), RUNNER)
    return np.asarray(image, dtype=np.uint8)


# The multi-agent games that can be drawn, by id: CovidEconomy has no picture of one game.
_GAME_RENDERERS = {"TagContinuous-v0": render_tag_continuous, "TagGridworld-v0": render_tag_gridworld}


def game_renderer(game_id: str):
    """The function ``(params, state, env_index) -> frame`` that draws one env of the multi-agent
    game ``game_id`` (as ``MultiAgentDefinition.id``), or ``None`` for a game without a renderer."""
    return _GAME_RENDERERS.get(game_id)


GAME_FPS = 20
"""Frames per second of a game's window (``render_mode="human"``) and, by default, its animations."""


def has_window() -> bool:
    """Whether frames can be shown in a window (``render_mode="human"``): pygame (``[render]``) is
    installed. Not imported here: pygame greets on stdout when imported, which only a window should cost."""
    return importlib.util.find_spec("pygame") is not None


class Window:
    """Frames shown in a pygame window at ``fps`` frames per second: the ``"human"`` render mode of
    a game that draws ``rgb_array`` frames, as Gymnasium's ``HumanRendering`` shows an env's. The
    window opens at the first frame (sized to it) and closes with :meth:`close`."""

    def __init__(self, caption: str, fps: float):
        import pygame

        self.pygame, self.caption, self.fps = pygame, caption, fps
        self.screen = self.clock = None

    def show(self, frame: np.ndarray) -> None:
        pygame = self.pygame
        if self.screen is None:
            pygame.init()
            self.screen = pygame.display.set_mode((frame.shape[1], frame.shape[0]))
            pygame.display.set_caption(self.caption)
            self.clock = pygame.time.Clock()
        self.screen.blit(pygame.surfarray.make_surface(frame.swapaxes(0, 1)), (0, 0))
        pygame.event.pump()  # a window whose events are not read is "not responding"
        pygame.display.flip()
        self.clock.tick(self.fps)

    def close(self) -> None:
        if self.screen is not None:
            self.pygame.display.quit()
            self.screen = None


def save_animation(frames: Sequence[np.ndarray], path, fps: float = GAME_FPS) -> pathlib.Path:
    """Write ``frames`` (each ``H x W x 3`` uint8) to ``path`` as ``.gif`` (Pillow, looping forever)
    or ``.mp4`` (imageio + ffmpeg); returns the path. The file appears whole or not at all.

    GIF frame times are whole centiseconds and viewers slow frames under 20 ms, so GIFs play at
    most 50 fps."""
    path = pathlib.Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ValueError(f"unsupported animation format {path.suffix!r}; supported: {', '.join(SUPPORTED_SUFFIXES)}")
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.integer, np.floating)) or not 0 < fps < 1e4:
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    frames = [np.asarray(f) for f in frames]
    if not frames:
        raise ValueError("frames is empty: nothing to save")
    for i, frame in enumerate(frames):
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            raise ValueError(f"frame {i} must be an H x W x 3 uint8 array, got {frame.dtype} {frame.shape}")
        if frame.shape != frames[0].shape:
            raise ValueError(f"frames differ in shape: frame 0 is {frames[0].shape}, frame {i} is {frame.shape}")
    if suffix == ".mp4":
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401  (imageio's ffmpeg plugin needs it)
        except ImportError as error:
            raise RuntimeError(
                f"writing .mp4 needs imageio and its ffmpeg plugin: pip install imageio[ffmpeg] ({error})"
            ) from error

    path.parent.mkdir(parents=True, exist_ok=True)
    # Same directory, so os.replace is an atomic rename; the suffix lets ffmpeg pick the container.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        if suffix == ".gif":
            images = [Image.fromarray(f) for f in frames]
            images[0].save(
                tmp,
                format="GIF",
                save_all=True,
                append_images=images[1:],
                loop=0,
                duration=round(1000 / fps),
                optimize=True,
            )
        else:
            imageio.mimwrite(tmp, frames, format="FFMPEG", fps=fps)
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


# -- classic control --------------------------------------------------------------------------------


def _cartpole(env, p, action) -> None:
    env.x_threshold, env.length = p.x_threshold, p.length  # the track's width and the pole's length


def _acrobot(env, p, action) -> None:
    env.LINK_LENGTH_1 = p.link_length_1  # the second link is 1 long, as in Gymnasium (it only draws it)


def _mountain_car(env, p, action) -> None:
    env.min_position, env.max_position, env.goal_position = p.min_position, p.max_position, p.goal_position
    frequency = p.hill_frequency
    env._height = lambda xs: np.sin(frequency * xs) * 0.45 + 0.55  # the hill's shape, as in the dynamics


def _pendulum(env, p, action) -> None:
    # Gymnasium draws the last torque it applied (clipped), and none before the first step.
    env.last_u = None if action is None else float(np.clip(np.nan_to_num(action[0]), -p.max_torque, p.max_torque))


# What each Gymnasium renderer reads besides ``state`` (our state rows are in its state's order):
# ``(gymnasium_env, params, last_action or None) -> None``.
_DRAWN_FROM = {
    "CartPole-v1": _cartpole,
    "Acrobot-v1": _acrobot,
    "MountainCar-v0": _mountain_car,
    "MountainCarContinuous-v0": _mountain_car,
    "Pendulum-v1": _pendulum,
}


class ClassicRenderer:
    """Frames of a classic-control env drawn by Gymnasium's own env (``definition.gymnasium_original``, pygame).

    ``render(state, last_action)`` gives Gymnasium's env the float64 state row (fields in the env's
    ``state_fields`` order, which is Gymnasium's) plus what its drawing reads from params or the last
    action, and returns its ``(H, W, 3)`` uint8 frame: 600 x 400 for CartPole and the mountain cars,
    500 x 500 for Acrobot and Pendulum. Things Gymnasium draws at a fixed size stay so (Acrobot's
    target line and second link, Pendulum's rod).
    """

    def __init__(self, definition: EnvDefinition, params):
        try:
            import pygame  # noqa: F401  (Gymnasium's renderer imports it; fail here with our extra's name)
        except ImportError as error:
            raise RuntimeError(
                f"rendering {definition.gymnasium_original} needs pygame: pip install gpu_marl_envs[render] ({error})"
            ) from error
        import gymnasium

        self._env = gymnasium.make(definition.gymnasium_original, render_mode="rgb_array").unwrapped
        self._configure = _DRAWN_FROM[definition.gymnasium_original]
        self._params = params

    def render(self, state: np.ndarray, last_action: np.ndarray | None = None) -> np.ndarray:
        self._env.state = np.asarray(state, dtype=np.float64)
        self._configure(self._env, self._params, last_action)
        return self._env.render()
