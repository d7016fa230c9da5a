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


def test_the_checker_passes_from_a_crowd_in_a_corner():
    # Every agent at the corner (bound, bound): moves past the edge are clipped, everyone is near
    # everyone (radius 2 * speed: one step cannot part two agents beyond it), and the game ends.
    params = RallyParams(num_agents=3, episode_length=4, radius=0.5, speed=0.25)

    def crowd_in_a_corner(state: dict) -> dict:
        return {**state, "x": torch.full_like(state["x"], params.bound), "y": torch.full_like(state["y"], params.bound)}

    gpu_marl_envs.check_env("rally/Rally-v0", params, num_envs=2, num_steps=3, start=crowd_in_a_corner)
