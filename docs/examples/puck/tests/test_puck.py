import gymnasium
import puck  # noqa: F401  (registers puck/Puck-v0)
import torch
from puck.env import PuckParams

import gpu_marl_envs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_kernels_match_the_reference():
    # Short episodes: truncation and autoreset within the steps checked. The float32 rules make it exact.
    gpu_marl_envs.check_env("puck/Puck-v0", PuckParams(max_episode_steps=10), num_envs=4, num_steps=24, device=DEVICE)


def test_the_puck_falls_off_the_track():
    envs = gymnasium.make_vec("puck/Puck-v0", num_envs=1, device="cpu")
    envs.reset(seed=0)
    for step in range(100):  # noqa: B007 (read after the loop: the step it ended at)
        _, _, terminated, _, _ = envs.step(torch.tensor([2]))  # push right, always
        if terminated.item():
            break
    assert terminated.item() and 0 < step < 100
