"""The batched PettingZoo-style API of ``GpuParallelEnv`` (torch backend on the CPU): agents and
groups, the two views, seeding, autoreset, the ``active`` mask, explicit states, rendering, bad input,
per-agent episode returns; and, on a toy game defined here, groups with their own observation sizes
and action ranges, action masks and episode totals."""

import dataclasses
import re

import numpy as np
import pytest
import torch
from conftest import KERNEL_BACKENDS_HERE
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from harness import random_group_actions

from gpu_marl_envs import registration
from gpu_marl_envs.envs import tag_continuous, tag_gridworld
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition
from gpu_marl_envs.parallel_env import GpuParallelEnv

SMALL = tag_continuous.TagContinuousParams(
    num_taggers=2, num_runners=3, grid_length=2.0, episode_length=4, num_other_agents_observed=2, tagging_distance=0.2
)
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
    return dict(
        x=x,
        y=y,
        direction=zeros,
        speed=zeros,
        acceleration=zeros,
        in_game=torch.ones(num_envs, 5, dtype=torch.bool),
        t=torch.zeros(num_envs, dtype=torch.int32),
    )


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_agents_groups_and_spaces(env_id):
    env = GpuParallelEnv(env_id, 3, device="cpu")
    p = env.params
    assert env.possible_agents[: p.num_taggers] == [f"tagger_{i}" for i in range(p.num_taggers)]
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
        by_agent = {
            a: torch.randint(0, 5, (2, *envs[0].action_space(a).shape), generator=generator)
            for a in envs[0].possible_agents
        }
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
    envs = [
        GpuParallelEnv("TagContinuous-v0", 2, device="cpu", params=SMALL, validate_actions=v) for v in (True, False)
    ]
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
        # int64 2**32 would wrap to 0 in the int32 buffer, a valid step count.
        ({**state, "t": torch.full(state["t"].shape, 2**32)}, re.escape("state['t'] must lie in [-2147483648, ")),
    ]
    for value, message in bad:
        with pytest.raises(ValueError, match=message):
            env.set_state(value)
    assert all(torch.equal(after[k], env.get_state()[k]) for k in after), "a rejected set_state changed the env"


def test_set_state_refuses_a_goal_that_is_no_landmark():
    # Speaker-listener's goal picks a landmark and its colour: the kernels would read out of bounds.
    env = GpuParallelEnv("SimpleSpeakerListener-v4", 2, device="cpu")
    env.reset(seed=0)
    before = env.get_state()
    for goal in (-1, 3):
        with pytest.raises(ValueError, match=re.escape("state['goal'] must lie in [0, 2]")):
            env.set_state({**before, "goal": torch.full_like(before["goal"], goal)})
    assert all(torch.equal(before[k], env.get_state()[k]) for k in before), "a rejected set_state changed the env"
    env.set_state({**before, "goal": torch.full_like(before["goal"], 2)})
    assert torch.equal(env.get_state()["goal"], torch.full_like(before["goal"], 2))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_rgb_array(env_id):
    env = GpuParallelEnv(env_id, 2, device="cpu", render_mode="rgb_array", render_env_index=1)
    env.reset(seed=0)
    frame = env.render()
    assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert GpuParallelEnv(env_id, 1, device="cpu").render() is None
    assert GpuParallelEnv(env_id, 1, device="cpu").metadata["render_modes"] == ["rgb_array"]


def test_a_game_without_a_renderer_refuses_rgb_array():
    env = GpuParallelEnv("CovidEconomy-v0", 1, device="cpu")
    assert env.metadata["render_modes"] == [] and env.render() is None
    with pytest.raises(ValueError, match=r"render_mode must be None or one of \[\] for CovidEconomy-v0"):
        GpuParallelEnv("CovidEconomy-v0", 1, device="cpu", render_mode="rgb_array")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(env_id="Tag-v9"), ValueError, "unknown multi-agent env"),
        (dict(num_envs=0), ValueError, "num_envs"),
        (dict(backend="cupy"), ValueError, "unknown backend"),
        (dict(render_mode="human"), ValueError, "render_mode"),
        (dict(render_env_index=5), ValueError, "render_env_index"),
        (dict(params=tag_gridworld.TagGridworldParams()), TypeError, "TagContinuousParams"),
        (dict(autoreset_mode="sometimes"), ValueError, "autoreset_mode"),
    ],
)
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

    assert gpu_marl_envs.registration.parallel_env_ids()[:3] == [
        "gpu_marl_envs/TagContinuous-v0",
        "gpu_marl_envs/TagGridworld-v0",
        "gpu_marl_envs/CovidEconomy-v0",
    ]
    env = gpu_marl_envs.make_parallel("gpu_marl_envs/TagGridworld-v0", 3, device="cpu")
    assert isinstance(env, GpuParallelEnv) and env.num_envs == 3 and env.definition.id == "TagGridworld-v0"
    with pytest.raises(ValueError, match="unknown multi-agent env 'other/TagGridworld-v0'"):
        gpu_marl_envs.make_parallel("other/TagGridworld-v0")


# -- per-agent episode returns -------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_episode_returns_sum_each_agents_rewards(env_id, mode):
    params = (
        SMALL
        if env_id == "TagContinuous-v0"
        else tag_gridworld.TagGridworldParams(grid_length=2, episode_length=4, random_start=True)
    )
    env = GpuParallelEnv(env_id, 3, device="cpu", params=params, autoreset_mode=mode)
    env.reset(seed=2)
    generator = torch.Generator().manual_seed(1)
    sums = {agent: torch.zeros(3) for agent in env.possible_agents}
    ended_episodes = 0
    for _ in range(3 * params.episode_length):
        actions = {
            a: torch.randint(0, 5, (3, *env.action_space(a).shape), generator=generator) for a in env.possible_agents
        }
        _, rewards, _, _, infos = env.step(actions)
        for agent in env.possible_agents:
            ended = infos[agent]["_episode"]
            sums[agent] += rewards[agent]
            assert torch.equal(infos[agent]["episode"]["return"][ended], sums[agent][ended]), agent
            sums[agent][ended] = 0.0
        ended_episodes += int(ended.sum())
        if mode == AutoresetMode.DISABLED and bool(ended.any()):
            env.reset(options={"reset_mask": ended.clone()})
    assert ended_episodes >= 3, "every game ends at least once"
    group_infos = env.step_groups(zero_actions(env))[4]
    for group, agents in env.groups.items():
        assert torch.equal(
            group_infos[group]["episode"]["return"], torch.stack([infos[a]["episode"]["return"] for a in agents], dim=1)
        )
    assert set(group_infos["taggers"]["episode"]) == {"return"}, "Tag has no episode metrics"


def test_reset_and_set_state_restart_running_returns():
    env = GpuParallelEnv("TagContinuous-v0", 2, device="cpu", params=SMALL)
    env.set_state(crafted_tag_state())
    env.step(zero_actions(env, by="agent"))  # runner 0 tagged: -10 so far
    assert env._buffers.running_returns[:, SMALL.num_taggers].tolist() == [-10.0, -10.0]
    env.set_state({k: v[:1] for k, v in crafted_tag_state(1).items()}, env_ids=[1])
    env.reset(options={"reset_mask": torch.tensor([True, False])})
    assert (env._buffers.running_returns == 0).all()


# -- a game whose groups differ: observation sizes, action ranges, masks, episode totals ---------


@dataclasses.dataclass(frozen=True)
class ToyParams:
    num_movers: int = 3
    episode_length: int = 3

    @property
    def num_agents(self) -> int:
        return self.num_movers + 1


@dataclasses.dataclass
class ToyState:
    level: torch.Tensor  # int32 (E, N): the sum of the agent's actions
    total: torch.Tensor  # float32 (E,): the sum of every reward of the episode
    t: torch.Tensor  # int32 (E,)


def _toy_groups(p):
    return {"movers": range(0, p.num_movers), "judges": range(p.num_movers, p.num_agents)}


def _toy_step(p, state, actions):
    rewards = actions.to(torch.float32)
    rewards[:, -1] = -rewards[:, -1]  # the judge pays what it plays
    t = state.t + 1
    next_state = ToyState(level=state.level + actions.to(torch.int32), total=state.total + rewards.sum(1), t=t)
    return next_state, rewards, torch.zeros_like(t, dtype=torch.bool), t == p.episode_length


def _toy_observe(p, state):
    t = state.t.to(torch.float32)[:, None]
    movers = torch.stack([state.level[:, :-1].to(torch.float32), t.expand(-1, p.num_movers)], dim=2)
    judge = torch.cat(
        [state.level.sum(1, keepdim=True).to(torch.float32), t, state.total[:, None], torch.ones_like(t)], dim=1
    )
    return {"movers": movers, "judges": judge[:, None, :]}


def _toy_masks(p, state):
    # Movers may play up to t % 3; the judge anything.
    allowed = torch.arange(3)[None, None, :] <= (state.t % 3)[:, None, None]
    return {
        "movers": allowed.expand(-1, p.num_movers, 3),
        "judges": torch.ones(state.t.shape[0], 1, 5, dtype=torch.bool),
    }


TOY = MultiAgentDefinition(
    id="Toy-v0",
    params_type=ToyParams,
    state_type=ToyState,
    agent_groups=_toy_groups,
    observation_spaces=lambda p: {
        "movers": spaces.Box(-np.inf, np.inf, (2,), np.float32),
        "judges": spaces.Box(-np.inf, np.inf, (4,), np.float32),
    },
    action_spaces=lambda p: {"movers": spaces.Discrete(3), "judges": spaces.Discrete(5)},
    reset=lambda p, key, n: ToyState(
        level=torch.zeros(n, p.num_agents, dtype=torch.int32), total=torch.zeros(n), t=torch.zeros(n, dtype=torch.int32)
    ),
    step=_toy_step,
    observe=_toy_observe,
    action_masks=_toy_masks,
    episode_metrics=lambda p: ("total",),
    episode_totals=lambda p, s: s.total[:, None],
)


@pytest.fixture
def toy(monkeypatch):
    """Toy-v0 in the registry for one test (a reference only: no kernels)."""
    monkeypatch.setitem(
        registration.GAMES,
        "tests/Toy-v0",
        registration.RegisteredEnv("tests/Toy-v0", TOY, registration.KernelSources(None, None)),
    )
    return TOY


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
def test_groups_with_their_own_spaces_masks_and_totals(toy, mode):
    env = GpuParallelEnv("Toy-v0", 2, device="cpu", autoreset_mode=mode)
    assert env.observation_space("mover_2").shape == (2,) and env.observation_space("judge_0").shape == (4,)
    assert env.action_space("mover_0").n == 3 and env.action_space("judge_0").n == 5
    assert env._buffers.observations.shape == (2, 3 * 2 + 4) and env._buffers.action_masks.shape == (2, 3 * 3 + 5)
    obs, infos = env.reset(seed=0)
    group_obs, group_infos = env.reset_groups(seed=0)
    assert group_obs["movers"].shape == (2, 3, 2) and group_obs["judges"].shape == (2, 1, 4)
    assert infos["mover_1"]["action_mask"].tolist() == [[True, False, False]] * 2
    assert group_infos["judges"]["action_mask"].shape == (2, 1, 5) and group_infos["judges"]["action_mask"].all()
    assert "episode" not in infos["mover_0"], "a reset ends no episode"

    actions = {"movers": torch.tensor([[1, 0, 1], [0, 0, 1]]), "judges": torch.tensor([[4], [2]])}
    rewards_so_far = torch.zeros(2, 4)
    for t in range(1, 4):
        obs, rewards, _, truncations, infos = env.step_groups(actions)
        rewards_so_far += torch.cat([rewards["movers"], rewards["judges"]], dim=1)
        if t < 3:
            assert not infos["movers"]["_episode"].any()
            assert obs["judges"][:, 0].tolist() == [[6.0 * t, t, -2.0 * t, 1.0], [3.0 * t, t, -1.0 * t, 1.0]]
            assert obs["movers"][0].tolist() == [[t, t], [0, t], [t, t]]
            assert torch.equal(obs["movers"][:, 2], env._agent_outputs()[0]["mover_2"])
            assert infos["movers"]["action_mask"][0, 0].tolist() == [True] * (t % 3 + 1) + [False] * (2 - t % 3)
    assert infos["judges"]["_episode"].all() and truncations["judges"].all()
    episode = infos["judges"]["episode"]
    assert torch.equal(episode["return"], rewards_so_far[:, 3:]) and torch.equal(
        infos["movers"]["episode"]["return"], rewards_so_far[:, :3]
    )
    assert torch.equal(episode["total"], rewards_so_far.sum(1)), "the totals of the state right after the step"
    if mode == AutoresetMode.SAME_STEP:
        assert infos["judges"]["final_obs"][:, 0, 1].tolist() == [3.0, 3.0] and (obs["judges"][:, 0, 1] == 0).all()


def test_actions_are_checked_against_their_groups_range(toy):
    env = GpuParallelEnv("Toy-v0", 2, device="cpu")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"mover_2 in env 1: 3 not in Discrete\(3\)"):
        env.step_groups({"movers": torch.tensor([[0, 0, 0], [0, 0, 3]]), "judges": torch.tensor([[4], [4]])})
    with pytest.raises(ValueError, match=r"judge_0 in env 0: 5 not in Discrete\(5\)"):
        env.step(
            {
                "mover_0": torch.zeros(2, dtype=torch.int64),
                "mover_1": torch.zeros(2, dtype=torch.int64),
                "mover_2": torch.zeros(2, dtype=torch.int64),
                "judge_0": torch.tensor([5, 0]),
            }
        )
    unchecked = GpuParallelEnv("Toy-v0", 1, device="cpu", validate_actions=False)
    unchecked.reset(seed=0)
    _, rewards, *_ = unchecked.step_groups({"movers": torch.tensor([[7, -1, 2]]), "judges": torch.tensor([[9]])})
    assert rewards["movers"].tolist() == [[2.0, 0.0, 2.0]] and rewards["judges"].tolist() == [[-4.0]], (
        "out-of-range actions are clamped into each group's own range"
    )


def test_set_state_rewrites_masks(toy):
    env = GpuParallelEnv("Toy-v0", 2, device="cpu")
    env.reset(seed=0)
    state = env.get_state()
    state["t"] = torch.tensor([2, 1], dtype=torch.int32)
    obs = env.set_state(state)
    assert env._buffers.action_masks[:, :3].tolist() == [[True] * 3, [True, True, False]]
    assert obs["judge_0"][:, 1].tolist() == [2.0, 1.0]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS_HERE)
@pytest.mark.parametrize(
    "env_id, settings",
    [
        ("TagContinuous-v0", {"params": SMALL}),  # MultiDiscrete: (E, N, 2) int64
        ("SimpleSpread-v3", {"N": 2}),  # Discrete: (E, N) int64
        ("SimpleSpeakerListener-v4", {"continuous_actions": True}),  # Box(3) beside Box(5)
        ("SimpleSpread-v3", {"N": 2, "continuous_actions": True}),  # one group of Box(5): read as (E, N, 5)
    ],
    ids=["MultiDiscrete", "Discrete", "Box of two widths", "Box of one group"],
)
def test_kernels_read_contiguous_group_actions_in_place(backend, env_id, settings):
    # step_groups with contiguous tensors hands the kernel each group's own tensor (no gather first:
    # a game of one group reads it in place, one of several copies it in the kernel); it steps as
    # the torch reference's per-agent step does.
    kwargs = dict(device="cpu", validate_actions=False, **settings)
    envs = [GpuParallelEnv(env_id, 2, backend=b, **kwargs) for b in (backend, "torch")]
    for env in envs:
        env.reset(seed=5)
    in_place = []
    launch = envs[0]._backend.step_groups
    envs[0]._backend.step_groups = lambda actions: (in_place.append(True), launch(actions))
    generator = torch.Generator().manual_seed(2)
    for step in range(2):
        # Box values past the bounds too: the kernels clip them as the rules say.
        by_group = random_group_actions(envs[0], generator, past_bounds=0.25)
        by_agent = {a: by_group[g][:, k] for g, agents in envs[0].groups.items() for k, a in enumerate(agents)}
        ours, reference = envs[0].step_groups(by_group), envs[1].step(by_agent)
        for k, what in enumerate(("observations", "rewards")):
            for group, agents in envs[0].groups.items():
                expected = torch.stack([reference[k][a] for a in agents], dim=1)
                assert torch.equal(ours[k][group], expected), f"step {step}: {what}[{group}]"
    assert len(in_place) == 2
