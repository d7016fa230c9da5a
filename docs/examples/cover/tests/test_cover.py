import cover  # noqa: F401  (registers cover/Cover-v0)
import torch
from cover.game import CoverParams

import gpu_marl_envs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_kernels_match_the_reference():
    # 5 agents spread over 3 threads in the simulator; short episodes for autoreset. Exact: integer
    # rules and one float32 division per value.
    gpu_marl_envs.check_env(
        "cover/Cover-v0",
        CoverParams(num_agents=5, grid_length=2, episode_length=4),
        num_envs=3,
        num_steps=10,
        device=DEVICE,
    )


def test_covering_every_landmark_ends_the_game_without_a_penalty():
    env = gpu_marl_envs.make_parallel("cover/Cover-v0", 1, device="cpu", params=CoverParams(num_agents=2))
    env.reset(seed=0)
    state = env.get_state()
    state["x"], state["y"] = state["landmark_x"].clone(), state["landmark_y"].clone()
    env.set_state(state)
    _, rewards, terminations, _, _ = env.step_groups({"agents": torch.zeros(1, 2, dtype=torch.int64)})
    assert rewards["agents"].tolist() == [[0.0, 0.0]] and terminations["agents"].all()
