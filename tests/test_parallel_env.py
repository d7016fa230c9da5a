"""The batched PettingZoo-style API of ``GpuParallelEnv`` (torch backend on the CPU): agents and
groups, the two views, seeding, autoreset, the ``active`` mask, explicit states, rendering, bad input."""

import dataclasses

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from conftest import KERNEL_BACKENDS_HERE
from gpu_marl_envs.envs import tag_continuous, tag_gridworld
from gpu_marl_envs.parallel_env import GpuParallelEnv

SMALL = tag_continuous.TagContinuousParams(num_taggers=2, num_runners=3, grid_length=2.0, episode_length=4,
                                           num_other_agents_observed=2, tagging_distance=0.2)
ENV_IDS = ["TagContinuous-v0", "TagGridworld-v0"]


def zero_actions(env, by="group"):
    shape = env.action_space(env.possible_agents[0]).shape
    if by == "group":
        return {g: torch.zeros(env.num_envs, len(a), *shape, dtype=torch.int64) for g, a in env.groups.items()}
    return {a: torch.zeros(env.num_envs, *shape, dtype=torch.int64) for a in env.possible_agents}


def crafted_tag_state(num_envs=2):
    """Runner 2 sits on tagger 0 (tagged at the next step); runners 3, 4 are far from every tagger."""
    x = torch.tensor([[1.0, 0.0, 1.0, 2.0, 2.0]]).repeat(num_envs, 1)
    y = torch.tensor([[1.0, 0.0, 1.0, 2.0, 0.0]]).repeat(num_envs, 1)
    zeros = torch.zeros(num_envs, 5)
    return dict(x=x, y=y, direction=zeros, speed=zeros, acceleration=zeros,
                in_game=torch.ones(num_envs, 5, dtype=torch.bool), t=torch.zeros(num_envs, dtype=torch.int32))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_agents_groups_and_spaces(env_id):
    env = GpuParallelEnv(env_id, 3, device="cpu")
    p = env.params
    assert env.possible_agents[:p.num_taggers] == [f"tagger_{i}" for i in range(p.num_taggers)]
    assert env.groups["taggers"] + env.groups["runners"] == env.possible_agents
    assert env.agents == env.possible_agents and env.num_agents == env.max_num_agents == p.num_agents
    obs, infos = env.reset(seed=0)
    assert set(obs) == set(infos) == set(env.possible_agents)
    for agent in env.possible_agents:
        space = env.observation_space(agent)
        assert obs[agent].shape == (3, *space.shape) and obs[agent].dtype == torch.float32
        assert all(space.contains(row.numpy()) for row in obs[agent]), f"{agent} observation outside its space"
        assert infos[agent]["active"].shape == (3,) and bool(infos[agent]["active"].all())
    group_obs, group_infos = env.reset_groups(seed=0)
    for group, agents in env.groups.items():
        assert group_obs[group].shape == (3, len(agents), p.obs_dim)
        for k, agent in enumerate(agents):
            assert torch.equal(group_obs[group][:, k], obs[agent])
    with pytest.raises(ValueError, match="unknown agent"):
        env.observation_space("nobody")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_agent_and_group_views_step_alike(env_id):
    envs = [GpuParallelEnv(env_id, 2, device="cpu") for _ in range(2)]
    for env in envs:
        env.reset(seed=3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):
        by_agent = {a: torch.randint(0, 5, (2, *envs[0].action_space(a).shape), generator=generator)
                    for a in envs[0].possible_agents}
        by_group = {g: torch.stack([by_agent[a] for a in agents], dim=1) for g, agents in envs[0].groups.items()}
        agent_out = envs[0].step(by_agent)
        group_out = envs[1].step_groups(by_group)
        for part_a, part_g in zip(agent_out[:4], group_out[:4]):
            for group, agents in envs[0].groups.items():
                assert torch.equal(torch.stack([part_a[a] for a in agents], dim=1), part_g[group])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeding(env_id):
    params = tag_gridworld.TagGridworldParams(random_start=True) if env_id == "TagGridworld-v0" else None

    def start(seed, n=4):
        env = GpuParallelEnv(env_id, n, device="cpu", params=params)
        return env.reset_groups(seed=seed)[0]["runners"].clone()

    assert torch.equal(start(7), start(7))
    assert not torch.equal(start(7), start(8))
    assert torch.equal(start(7)[2], start(9)[0]), "sub-env i must be seeded with seed + i"
    assert not torch.equal(start(7)[0], start(7)[1]), "replicas must start differently"


def test_step_before_reset_and_after_close_raise():
    env = GpuParallelEnv("TagContinuous-v0", 2, device="cpu", params=SMALL)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step_groups(zero_actions(env))
    env.reset(seed=0)
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step_groups(zero_actions(env))


def test_tagged_runner_leaves_and_stays_out():
    env = GpuParallelEnv("TagContinuous-v0", 2, device="cpu", params=SMALL)
    env.set_state(crafted_tag_state())
    obs, rewards, terms, truncs, infos = env.step(zero_actions(env, by="agent"))
    assert rewards["runner_0"].tolist() == [-10.0, -10.0] and rewards["tagger_0"].tolist() == [10.0, 10.0]
    assert terms["runner_0"].all() and not terms["runner_1"].any() and not terms["tagger_0"].any()
    assert not infos["runner_0"]["active"].any() and infos["runner_1"]["active"].all()
    assert (obs["runner_0"] == 0).all(), "an agent out of the game observes zeros"
    obs, rewards, terms, truncs, infos = env.step(zero_actions(env, by="agent"))
    assert rewards["runner_0"].tolist() == [0.0, 0.0] and terms["runner_0"].all()
    assert not infos["runner_0"]["active"].any() and (obs["runner_0"] == 0).all()


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
def test_autoreset_modes(mode):
    env = GpuParallelEnv("TagContinuous-v0", 2, device="cpu", params=SMALL, autoreset_mode=mode)
    assert env.metadata["autoreset_mode"] == mode
    env.reset(seed=1)
    for _ in range(SMALL.episode_length - 1):
        env.step_groups(zero_actions(env))
    before_end = env.get_state()
    obs, rewards, terms, truncs, infos = env.step_groups(zero_actions(env))
    ended = env._buffers.terminated | env._buffers.truncated
    assert ended.all(), "every env ends at t == episode_length"
    assert truncs["taggers"].all() or terms["taggers"].all()
    t = env.get_state()["t"]
    if mode == AutoresetMode.SAME_STEP:
        assert (t == 0).all() and infos["taggers"]["_final_obs"].all()
        assert infos["taggers"]["final_obs"].shape == obs["taggers"].shape
        assert not torch.equal(infos["runners"]["final_obs"], obs["runners"])
    else:
        assert (t == SMALL.episode_length).all()
        assert "final_obs" not in infos["taggers"]
    obs, rewards, terms, truncs, infos = env.step_groups(zero_actions(env))
    t = env.get_state()["t"]
    if mode == AutoresetMode.NEXT_STEP:
        assert (t == 0).all() and (rewards["taggers"] == 0).all() and not truncs["taggers"].any()
    elif mode == AutoresetMode.SAME_STEP:
        assert (t == 1).all()
    else:
        assert (t == SMALL.episode_length + 1).all()
        env.reset(options={"reset_mask": torch.tensor([True, False])})
        assert env.get_state()["t"].tolist() == [0, SMALL.episode_length + 1]
    assert before_end["t"].tolist() == [SMALL.episode_length - 1] * 2


def test_bad_actions_raise_and_change_nothing():
    env = GpuParallelEnv("TagContinuous-v0", 2, device="cpu", params=SMALL)
    env.reset(seed=0)
    before = env.get_state()
    good = zero_actions(env)
    cases = [
        ({"taggers": good["taggers"]}, ValueError, "missing"),
        ({**good, "extra": good["taggers"]}, ValueError, "unknown"),
        ({**good, "taggers": good["taggers"].float()}, TypeError, "int64"),
        ({**good, "taggers": good["taggers"][:, :1]}, ValueError, "shape"),
        ({**good, "taggers": good["taggers"].numpy()}, TypeError, "torch.Tensor"),
        ({**good, "runners": good["runners"] + 21}, ValueError, "runner_0 in env 0"),
        ({**good, "runners": good["runners"] - 1}, ValueError, "no env was stepped"),
        ([1, 2], TypeError, "dict"),
    ]
    for actions, error, message in cases:
        with pytest.raises(error, match=message):
            env.step_groups(actions)
    with pytest.raises(ValueError, match="missing"):
        env.step({"tagger_0": good["taggers"][:, 0]})
    after = env.get_state()
    for name in before:
        assert torch.equal(before[name], after[name]), f"a rejected step changed {name}"


def test_without_validation_out_of_range_actions_are_clamped():
    envs = [GpuParallelEnv("TagContinuous-v0", 2, device="cpu", params=SMALL, validate_actions=v) for v in (True, False)]
    for env in envs:
        env.reset(seed=4)
    top = torch.tensor([SMALL.num_acceleration_levels, SMALL.num_turn_levels])
    actions = {g: top.expand(2, len(a), 2).clone() for g, a in envs[0].groups.items()}
    wild = {g: a * 100 for g, a in actions.items()}
    expected = envs[0].step_groups(actions)[0]["runners"]
    assert torch.equal(envs[1].step_groups(wild)[0]["runners"], expected)


def test_set_state_validates_and_round_trips():
    env = GpuParallelEnv("TagContinuous-v0", 3, device="cpu", params=SMALL)
    env.reset(seed=0)
    state = env.get_state()
    obs = env.set_state({k: v[1:] for k, v in state.items()}, env_ids=[0, 1])
    after = env.get_state()
    assert torch.equal(after["x"][:2], state["x"][1:]) and torch.equal(obs["tagger_0"][1], obs["tagger_0"][2])
    bad = [
        ({k: v for k, v in state.items() if k != "x"}, "missing"),
        ({**state, "x": state["x"][:, :2]}, "shape"),
        ({**state, "x": torch.full_like(state["x"], float("nan"))}, "finite"),
        ({**state, "t": torch.full_like(state["t"], SMALL.episode_length)}, r"state\['t'\]"),
        ({**state, "t": state["x"][:, 0]}, "must have a torch.int32 value"),
    ]
    for value, message in bad:
        with pytest.raises(ValueError, match=message):
            env.set_state(value)
    assert all(torch.equal(after[k], env.get_state()[k]) for k in after), "a rejected set_state changed the env"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_rgb_array(env_id):
    env = GpuParallelEnv(env_id, 2, device="cpu", render_mode="rgb_array", render_env_index=1)
    env.reset(seed=0)
    frame = env.render()
    assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert GpuParallelEnv(env_id, 1, device="cpu").render() is None


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(env_id="Tag-v9"), ValueError, "unknown multi-agent env"),
    (dict(num_envs=0), ValueError, "num_envs"),
    (dict(backend="cupy"), ValueError, "unknown backend"),
    (dict(render_mode="human"), ValueError, "render_mode"),
    (dict(render_env_index=5), ValueError, "render_env_index"),
    (dict(params=tag_gridworld.TagGridworldParams()), TypeError, "TagContinuousParams"),
    (dict(autoreset_mode="sometimes"), ValueError, "autoreset_mode"),
])
def test_bad_construction(kwargs, error, message):
    arguments = {**dict(env_id="TagContinuous-v0", num_envs=2, device="cpu"), **kwargs}
    with pytest.raises(error, match=message):
        GpuParallelEnv(**arguments)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS_HERE)
def test_kernels_refuse_games_beyond_shared_memory(backend):
    huge = dataclasses.replace(SMALL, num_runners=6000)
    with pytest.raises(ValueError, match="shared memory"):
        GpuParallelEnv("TagContinuous-v0", 1, device="cpu", backend=backend, params=huge)


def test_make_parallel_by_gymnasium_style_id():
    import gpu_marl_envs

    assert gpu_marl_envs.registration.parallel_env_ids() == ["gpu_marl_envs/TagContinuous-v0",
                                                             "gpu_marl_envs/TagGridworld-v0"]
    env = gpu_marl_envs.make_parallel("gpu_marl_envs/TagGridworld-v0", 3, device="cpu")
    assert isinstance(env, GpuParallelEnv) and env.num_envs == 3 and env.definition.id == "TagGridworld-v0"
    with pytest.raises(ValueError, match="unknown namespace"):
        gpu_marl_envs.make_parallel("other/TagGridworld-v0")
