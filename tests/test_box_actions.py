"""Games of Box actions (float32 ``(E, N, d)``): Glide-v0 (``tests/glide``, a test game with both
kernels) through the checker, the batched and PettingZoo APIs' validation, NaN and clipping with
validation off, groups of Box actions of two widths (SimpleSpeakerListener-v4's speaker and
listener), and the action spaces ``register_game`` refuses."""

import dataclasses
import math

import glide  # noqa: F401  (registers glide/Glide-v0)
import numpy as np
import pytest
import torch
from glide.game import GLIDE, GlideParams
from gymnasium import spaces

import gpu_marl_envs
from gpu_marl_envs.parallel_env import GpuParallelEnv
from gpu_marl_envs.pettingzoo_env import PettingZooParallelEnv

GLIDE_ID = "glide/Glide-v0"


def test_the_checker_passes_on_every_backend_here():
    # Every kernel backend against the reference in each autoreset mode, with actions past the
    # bounds and NaN among them; bad actions; PettingZoo's API test; nvcc on the CUDA C.
    gpu_marl_envs.check_env(GLIDE_ID, GlideParams(num_gliders=3, episode_length=4), num_envs=2, num_steps=6)


def test_actions_are_float32_and_checked_against_the_box():
    env = GpuParallelEnv(GLIDE_ID, 2, device="cpu")
    env.reset(seed=0)
    assert env.action_space("glider_0") == spaces.Box(-1.0, 1.0, (2,), np.float32)
    good = {"gliders": torch.zeros(2, 3, 2), "leaders": torch.zeros(2, 1, 2)}
    before = env.get_state()
    with pytest.raises(ValueError, match=r"actions of glider_2 in env 1: \[nan, 0.0\] not in Box"):
        env.step_groups(
            {
                **good,
                "gliders": good["gliders"].index_put((torch.tensor(1), torch.tensor(2)), torch.tensor([math.nan, 0.0])),
            }
        )
    with pytest.raises(ValueError, match=r"actions of leader_0 in env 0: \[1.5, 0.0\] not in Box"):
        env.step_groups({**good, "leaders": torch.tensor([[[1.5, 0.0]], [[0.0, 0.0]]])})
    with pytest.raises(TypeError, match=r"dtype torch.float32, got torch.int64; use .float\(\)"):
        env.step_groups({**good, "leaders": torch.zeros(2, 1, 2, dtype=torch.int64)})
    with pytest.raises(ValueError, match=r"actions\['leader_0'\] must have shape \(2, 2\)"):
        env.step({**{f"glider_{k}": torch.zeros(2, 2) for k in range(3)}, "leader_0": torch.zeros(2)})
    for name, value in env.get_state().items():
        assert torch.equal(value, before[name]), f"a refused step changed {name}"
    obs, rewards, *_ = env.step({**{f"glider_{k}": torch.ones(2, 2) for k in range(3)}, "leader_0": -torch.ones(2, 2)})
    assert torch.equal(env.get_state()["vx"], torch.tensor([[0.25, 0.25, 0.25, -0.25]] * 2))


def test_without_validation_nan_reads_as_zero_and_the_rules_clip():
    envs = [GpuParallelEnv(GLIDE_ID, 1, device="cpu", validate_actions=False) for _ in range(2)]
    for env in envs:
        env.reset(seed=4)
    wild = torch.tensor([[[math.nan, 7.0], [-3.0, math.nan], [0.5, -0.5], [math.inf, -math.inf]]])
    tame = torch.tensor([[[0.0, 1.0], [-1.0, 0.0], [0.5, -0.5], [1.0, -1.0]]])
    envs[0].step_groups({"gliders": wild[:, :3], "leaders": wild[:, 3:]})
    envs[1].step_groups({"gliders": tame[:, :3], "leaders": tame[:, 3:]})
    for name, value in envs[0].get_state().items():
        assert torch.equal(value, envs[1].get_state()[name]), name


def test_pettingzoo_env_takes_float_arrays_inside_the_box():
    env = PettingZooParallelEnv(GLIDE_ID)
    env.reset(seed=0)
    actions = {agent: np.array([0.5, -0.5]) for agent in env.agents}  # float64, as numpy makes them
    env.step(actions)
    with pytest.raises(ValueError, match="action for leader_0 must be a float array in Box"):
        env.step({**actions, "leader_0": np.array([2.0, 0.0])})
    with pytest.raises(ValueError, match="action for glider_0 must be a float array in Box"):
        env.step({**actions, "glider_0": np.array([1, 0])})


@pytest.mark.parametrize(
    "action_spaces",
    [
        {"gliders": spaces.Box(-1.0, 1.0, (2,), np.float32), "leaders": spaces.Discrete(2)},
        {"gliders": spaces.Box(-1.0, 1.0, (2, 2), np.float32), "leaders": spaces.Box(-1.0, 1.0, (2, 2), np.float32)},
        {"gliders": spaces.MultiDiscrete([2, 2]), "leaders": spaces.MultiDiscrete([2, 2, 2])},
        {"gliders": spaces.Box(-np.inf, 1.0, (2,), np.float32), "leaders": spaces.Box(-1.0, 1.0, (2,), np.float32)},
        {"gliders": spaces.Box(-1.0, 1.0, (2,), np.float64), "leaders": spaces.Box(-1.0, 1.0, (2,), np.float64)},
        {"gliders": spaces.Discrete(3, start=1), "leaders": spaces.Discrete(3, start=1)},
    ],
    ids=["mixed kinds", "2-D Box", "two MultiDiscrete lengths", "unbounded Box", "float64 Box", "Discrete from 1"],
)
def test_register_game_refuses_action_spaces_it_cannot_run(action_spaces):
    definition = dataclasses.replace(GLIDE, id="Unrunnable-v0", action_spaces=lambda p: action_spaces)
    with pytest.raises(
        ValueError, match="Unrunnable-v0: .* Discrete or MultiDiscrete .* or float32 1-D Box with finite bounds"
    ):
        gpu_marl_envs.register_game(definition, namespace="tests")


def test_groups_of_two_widths_share_one_buffer():
    # The speaker's Box(3) and the listener's Box(5): (E, 2, 5) in the buffer, the speaker's row
    # using its first 3 values; per agent, per group and through PettingZoo alike.
    envs = [GpuParallelEnv("SimpleSpeakerListener-v4", 2, device="cpu", continuous_actions=True) for _ in range(2)]
    for env in envs:
        env.reset(seed=1)
    assert envs[0].action_space("speaker_0").shape == (3,) and envs[0].action_space("listener_0").shape == (5,)
    said, moved = torch.tensor([[0.25, 0.5, 1.0], [0.0, 0.75, 0.5]]), torch.full((2, 5), 0.5)
    moved[:, 2] = 1.0
    envs[0].step({"speaker_0": said, "listener_0": moved})
    envs[1].step_groups({"speakers": said[:, None], "listeners": moved[:, None]})
    for name, value in envs[0].get_state().items():
        assert torch.equal(value, envs[1].get_state()[name]), name
    assert torch.equal(envs[0].get_state()["comm"], said), "the speaker's utterance is its 3 values"
    with pytest.raises(ValueError, match=r"actions of speaker_0 in env 1: \[0.0, 1.5, 0.0\] not in Box"):
        envs[0].step_groups(
            {"speakers": torch.tensor([[[0.0, 0.0, 0.0]], [[0.0, 1.5, 0.0]]]), "listeners": moved[:, None]}
        )
    with pytest.raises(ValueError, match=r"actions\['speaker_0'\] must have shape \(2, 3\)"):
        envs[0].step({"speaker_0": moved, "listener_0": moved})
    single = PettingZooParallelEnv("SimpleSpeakerListener-v4", continuous_actions=True)
    single.reset(seed=1)
    single.step({"speaker_0": np.array([0.25, 0.5, 1.0]), "listener_0": moved[0].numpy()})
    assert np.array_equal(single.state()[-3:], [0.25, 0.5, 1.0]), "the listener hears the utterance"
