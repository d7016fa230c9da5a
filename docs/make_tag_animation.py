"""Make the README's Tag animations: ``docs/images/tag_continuous.gif`` and ``tag_gridworld.gif``.

One episode of each game on the torch reference (CPU), random actions from a ``torch.Generator``
seeded 0, rendered with :mod:`gpu_marl_envs.rendering`. Deterministic: rerunning rewrites the same
frames. Run from anywhere: ``python docs/make_tag_animation.py``.
"""

from __future__ import annotations

import pathlib

import torch

from gpu_marl_envs import rendering, rng
from gpu_marl_envs.envs import tag_continuous as tc
from gpu_marl_envs.envs import tag_gridworld as tg

IMAGES = pathlib.Path(__file__).resolve().parent / "images"
SEED = 0
FPS = 20
MAX_GIF_BYTES = 2_000_000


def _key() -> torch.Tensor:
    return rng.key_hash(torch.tensor([SEED]), torch.tensor([0]))


def continuous_frames(size: int = 384) -> list:
    p = tc.TagContinuousParams(num_runners=20, episode_length=200)
    state = tc.reset(p, _key(), 1)
    gen = torch.Generator().manual_seed(SEED)
    frames = [rendering.render_tag_continuous(p, state, size=size)]
    done = False
    while not done:
        actions = torch.stack(
            [
                torch.randint(0, p.num_acceleration_levels + 1, (1, p.num_agents), generator=gen),
                torch.randint(0, p.num_turn_levels + 1, (1, p.num_agents), generator=gen),
            ],
            dim=-1,
        )
        state, _, terminated, truncated = tc.step(p, state, actions)
        frames.append(rendering.render_tag_continuous(p, state, size=size))
        done = bool(terminated[0] | truncated[0])
    return frames


def gridworld_frames(size: int = 256) -> list:
    p = tg.TagGridworldParams(random_start=True)
    state = tg.reset(p, _key(), 1)
    gen = torch.Generator().manual_seed(SEED)
    frames = [rendering.render_tag_gridworld(p, state, size=size)]
    done = False
    while not done:
        actions = torch.randint(0, tg.NUM_ACTIONS, (1, p.num_agents), generator=gen)
        state, _, terminated, truncated = tg.step(p, state, actions)
        frames.append(rendering.render_tag_gridworld(p, state, size=size))
        done = bool(terminated[0] | truncated[0])
    return frames


def save_small(frames: list, path: pathlib.Path) -> pathlib.Path:
    """Save at FPS; while the GIF is over MAX_GIF_BYTES, keep every other frame (and halve the fps,
    so the episode plays at the same speed)."""
    stride = 1
    while True:
        rendering.save_animation(frames[::stride], path, fps=FPS / stride)
        if path.stat().st_size <= MAX_GIF_BYTES or stride >= 4:
            return path
        stride *= 2


def main() -> None:
    for name, frames in (("tag_continuous.gif", continuous_frames()), ("tag_gridworld.gif", gridworld_frames())):
        path = save_small(frames, IMAGES / name)
        print(f"{path}: {len(frames)} frames, {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
