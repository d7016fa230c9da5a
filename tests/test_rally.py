"""Rally-v0 (``tests/rally``), a game written with the least glue (params_dataclass, the default and one
derived constant, numba_game): its kernels against its reference, from random play and from a crafted
state that reaches what random play seldom does (the edges, the crowd, termination)."""

import rally  # noqa: F401  (registers rally/Rally-v0)
import torch
from rally.game import RallyParams

import gpu_marl_envs

SMALL = RallyParams(num_agents=3, episode_length=4)


def test_the_checker_passes_from_random_play():
    gpu_marl_envs.check_env("rally/Rally-v0", SMALL, num_envs=2, num_steps=6)


def test_the_checker_passes_from_crafted_states():
    # What random play seldom reaches, each a start of its own: every agent on the edges (moves past
    # them clipped) and a crowd in a corner (radius 2 * speed: one step cannot part two agents
    # beyond it, so the game ends, and moves are clipped on both axes).
    params = RallyParams(num_agents=3, episode_length=4, radius=0.5, speed=0.25)

    def on_the_edges(state: dict) -> dict:
        edge = params.bound * torch.tensor([1.0, -1.0, 1.0]).expand_as(state["x"])
        return {**state, "x": edge, "y": -edge}

    def crowd_in_a_corner(state: dict) -> dict:
        corner = torch.full_like(state["x"], params.bound)
        return {**state, "x": corner, "y": corner.clone()}

    starts = {"on the edges": on_the_edges, "crowd in a corner": crowd_in_a_corner}
    gpu_marl_envs.check_env("rally/Rally-v0", params, num_envs=2, num_steps=3, start=starts)
