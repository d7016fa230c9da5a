"""The games' global state (PettingZoo's ``state()``/``state_space``, batched ``GpuParallelEnv.state()``):
by default every agent's observation side by side, the observation buffer itself; a game's own
(``definition.global_state``) from the flat observations; PettingZoo's state test on every game."""

import dataclasses
import warnings

import numpy as np
import pettingzoo
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from pettingzoo.test.state_test import test_parallel_env as pettingzoo_state_test

from gpu_marl_envs import registration
from gpu_marl_envs.envs.tag_gridworld import TAG_GRIDWORLD
from gpu_marl_envs.parallel_env import GpuParallelEnv
from gpu_marl_envs.registration import parallel_env_ids


@pytest.mark.parametrize("env_id", parallel_env_ids())
def test_default_state_is_every_agents_observation_side_by_side(env_id):
    env = GpuParallelEnv(env_id, 2, device="cpu")
    obs, _ = env.reset(seed=3)
    state = env.state()
    assert state.data_ptr() == env._buffers.observations.data_ptr(), "the observation buffer itself, no copy"
    expected = torch.cat([obs[agent] for agent in env.possible_agents], dim=1)
    assert torch.equal(state, expected)
    assert env.state_space.shape == (expected.shape[1],) and env.state_space.dtype == np.float32
    low, high = env.state_space.low, env.state_space.high
    first = env.observation_space(env.possible_agents[0])
    assert np.array_equal(low[: first.shape[0]], first.low) and np.array_equal(high[: first.shape[0]], first.high)
    for row in state.numpy():
        assert env.state_space.contains(row)


@pytest.mark.parametrize("env_id", parallel_env_ids())
def test_pettingzoo_state_test(env_id):
    env = pettingzoo.make("parallel", env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PettingZoo's advice on all-zero states (a game's first step)
        pettingzoo_state_test(env, seed=0)
    state = env.state()
    assert state.dtype == np.float32 and state.shape == env.state_space.shape
    state[:] = 7.0
    assert not (env.state() == 7.0).all(), "state() returns a copy"


def _runners_view(p, observations):
    # The last 4 values of TagGridworld's runner's observation (the buffer's last row) as the
    # state: a slice, a view.
    return observations[:, -4:]


@pytest.fixture
def own_state(monkeypatch):
    definition = dataclasses.replace(
        TAG_GRIDWORLD,
        id="OwnState-v0",
        global_state=_runners_view,
        global_state_space=lambda p: spaces.Box(-1.0, 1.0, (4,), np.float32),
    )
    monkeypatch.setitem(
        registration.GAMES,
        "tests/OwnState-v0",
        registration.RegisteredEnv("tests/OwnState-v0", definition, registration.KernelSources(None, None)),
    )


def test_a_games_own_state_and_the_final_state(own_state):
    env = GpuParallelEnv("tests/OwnState-v0", 3, device="cpu", autoreset_mode=AutoresetMode.SAME_STEP)
    obs, _ = env.reset(seed=0)
    assert env.state_space.shape == (4,)
    assert torch.equal(env.state(), obs[env.possible_agents[-1]][:, -4:])
    actions = {group: torch.zeros(3, len(agents), dtype=torch.int64) for group, agents in env.groups.items()}
    for _ in range(env.params.episode_length):
        _, _, _, _, infos = env.step_groups(actions)
    ended = infos["runners"]["_final_obs"]
    assert ended.all(), "the episode length ends every game"
    assert torch.equal(env.final_state(), infos["runners"]["final_obs"][:, -1, -4:])
    with pytest.raises(RuntimeError, match="SAME_STEP"):
        GpuParallelEnv("tests/OwnState-v0", 1, device="cpu").final_state()
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.state()


def test_global_state_needs_its_space():
    half = dataclasses.replace(TAG_GRIDWORLD, id="HalfState-v0", global_state=_runners_view)
    with pytest.raises(ValueError, match="global_state and global_state_space"):
        registration.register_game(half, namespace="tests")
