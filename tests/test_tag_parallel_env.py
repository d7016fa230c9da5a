"""TagParallelEnv: PettingZoo's own API and seed tests, spaces, agent removal, episode end, errors, seeding."""

import math
import warnings

import numpy as np
import pytest
import torch
from pettingzoo.test import parallel_api_test, parallel_seed_test

from gpu_marl_envs import rng
from gpu_marl_envs.envs import tag_continuous as tc
from gpu_marl_envs.envs import tag_gridworld as tg
from gpu_marl_envs.tag_parallel_env import TagParallelEnv

SMALL_CONTINUOUS = tc.TagContinuousParams(
    num_taggers=2, num_runners=3, num_other_agents_observed=2, episode_length=30, tagging_distance=0.15
)
SMALL_GRIDWORLD = tg.TagGridworldParams(grid_length=4, episode_length=20)
CONFIGS = {
    "continuous-small": ("continuous", SMALL_CONTINUOUS),
    "continuous-full-obs": (
        "continuous",
        tc.TagContinuousParams(
            num_taggers=2,
            num_runners=2,
            episode_length=25,
            use_full_observation=True,
            skill_level_tagger=1.5,
            max_acceleration=0.8,
            min_acceleration=-0.8,
            tagging_distance=0.1,
        ),
    ),
    "gridworld-small": ("gridworld", SMALL_GRIDWORLD),
    "gridworld-partial-random": (
        "gridworld",
        tg.TagGridworldParams(grid_length=4, episode_length=20, use_full_observation=False, random_start=True),
    ),
    "gridworld-default": ("gridworld", None),
}


@pytest.fixture(params=sorted(CONFIGS))
def config(request):
    return CONFIGS[request.param]


def random_episode(env, seed, action_seed=0):
    """Play one episode with seeded random actions; return every step's five dicts."""
    env.reset(seed=seed)
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(action_seed + i)
    steps = []
    while env.agents:
        steps.append(env.step({agent: env.action_space(agent).sample() for agent in env.agents}))
    return steps


def test_pettingzoo_parallel_api_test(config):
    env = TagParallelEnv(*config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parallel_api_test(env, num_cycles=200)
    # The only warning is ours, about the probe option the API test passes to reset.
    messages = [str(w.message) for w in caught]
    assert messages == ["TagParallelEnv.reset supports no options; ignored ['options']"], messages


def test_pettingzoo_parallel_seed_test(config):
    parallel_seed_test(lambda: TagParallelEnv(*config), num_cycles=50)


def test_names_and_agents():
    env = TagParallelEnv("continuous", SMALL_CONTINUOUS)
    assert env.metadata == {
        "name": "tag_continuous_v0",
        "render_modes": ["rgb_array", "human"],
        "render_fps": 20,
        "is_parallelizable": True,
    }
    assert env.possible_agents == ["tagger_0", "tagger_1", "runner_0", "runner_1", "runner_2"]
    assert env.agents == []
    env.reset(seed=1)
    assert env.agents == env.possible_agents and env.agents is not env.possible_agents
    grid = TagParallelEnv("gridworld")
    assert grid.metadata["name"] == "tag_gridworld_v0"
    assert grid.possible_agents == ["tagger_0", "tagger_1", "tagger_2", "tagger_3", "runner_0"]
    assert grid.action_space("runner_0").n == 5
    assert tuple(env.action_space("runner_2").nvec) == (21, 21)
    assert env.observation_space("tagger_0").shape == (SMALL_CONTINUOUS.obs_dim,) == (15,)
    assert grid.observation_space("runner_0").shape == (21,)


def test_observations_within_spaces_over_random_play(config):
    env = TagParallelEnv(*config)
    num_steps = 0
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        frames = [obs] + [step[0] for step in random_episode(env, seed, action_seed=10 * seed)]
        for frame in frames:
            for agent, o in frame.items():
                space = env.observation_space(agent)
                assert o.dtype == np.float32 and o.shape == space.shape, (agent, o.dtype, o.shape)
                outside = np.flatnonzero((o < space.low) | (o > space.high))
                assert outside.size == 0, f"{agent}: features {outside} = {o[outside]} outside the space"
                num_steps += 1
    assert num_steps > 20


def test_random_play_tags_runners_in_the_small_config():
    # The small config must exercise removal during the API and seed tests, not only end by truncation.
    env = TagParallelEnv("continuous", SMALL_CONTINUOUS)
    removed = 0
    for seed in range(4):
        env.reset(seed=seed)
        for i, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(seed + i)
        while env.agents:
            before = list(env.agents)
            _, rewards, terminations, truncations, _ = env.step(
                {agent: env.action_space(agent).sample() for agent in env.agents}
            )
            if env.agents:
                left = [a for a in before if a not in env.agents]
                assert left == [a for a in before if terminations[a]], left
                assert all(rewards[a] == -10.0 for a in left), rewards
                removed += len(left)
    assert removed > 0


def test_continuous_bounds_hold_at_the_extremes():
    # Two agents at opposite corners, opposite extreme speeds, accelerations and directions.
    p = tc.TagContinuousParams(num_taggers=1, num_runners=1, use_full_observation=True, skill_level_tagger=2.0)
    big, top = np.float32(2 * math.pi), np.float32(p.max_speed_tagger)
    below_2pi = float(np.nextafter(big, np.float32(0)))
    below_top = float(np.nextafter(top, np.float32(0)))
    state = tc.TagContinuousState(
        x=torch.tensor([[0.0, p.grid_length]]),
        y=torch.tensor([[0.0, p.grid_length]]),
        direction=torch.tensor([[0.0, below_2pi]]),
        speed=torch.tensor([[float(top), 0.0]]),
        acceleration=torch.tensor([[below_top, -float(np.nextafter(np.float32(p.max_speed_runner), 0))]]),
        in_game=torch.tensor([[True, True]]),
        t=torch.tensor([p.episode_length], dtype=torch.int32),
    )
    obs = tc.observe(p, state)[0].numpy()
    space = TagParallelEnv("continuous", p).observation_space("tagger_0")
    assert space.low[2] == pytest.approx(-2.0, rel=2e-5) and space.high[3] == pytest.approx(4.0, rel=2e-5)
    assert space.high[0] == 1.0 and space.low[4] == -1.0 and space.high[-1] == 1.0
    for i in range(2):
        assert space.contains(obs[i]), f"agent {i}: {obs[i]} not in [{space.low}, {space.high}]"
    # The extremes are reached: the tagger sees the runner's speed 2 below its own.
    assert obs[0][2] == pytest.approx(-2.0) and obs[1][2] == pytest.approx(2.0)


def test_all_runners_tagged_at_step_one_terminates_everyone():
    # A tagging radius (2 L) beyond the arena's diagonal: every runner is tagged on the first step.
    p = tc.TagContinuousParams(num_taggers=2, num_runners=3, num_other_agents_observed=2, tagging_distance=2.0)
    env = TagParallelEnv("continuous", p)
    env.reset(seed=5)
    obs, rewards, terminations, truncations, infos = env.step({a: [0, 0] for a in env.agents})
    assert env.agents == []
    assert terminations == dict.fromkeys(env.possible_agents, True)
    assert truncations == dict.fromkeys(env.possible_agents, False)
    assert infos == {a: {} for a in env.possible_agents}
    assert [rewards[f"runner_{j}"] for j in range(3)] == [-10.0] * 3
    assert rewards["tagger_0"] + rewards["tagger_1"] == 30.0  # paid once per runner tagged
    for j in range(3):
        assert not obs[f"runner_{j}"].any(), "a runner out of the game observes zeros"
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})


def test_tagged_runner_leaves_agents_others_play_on():
    p = tc.TagContinuousParams(num_taggers=1, num_runners=3, num_other_agents_observed=2, tagging_distance=0.4)
    env = TagParallelEnv("continuous", p)
    for seed in range(200):  # find a start where the first step tags some runners, not all
        env.reset(seed=seed)
        obs, rewards, terminations, truncations, _ = env.step({a: [0, 0] for a in env.agents})
        gone = [a for a in env.possible_agents if a not in env.agents]
        if 0 < len(gone) < 3:
            break
    else:
        pytest.fail("no seed in 0..199 tags some but not all runners at step 1")
    assert all(a.startswith("runner_") for a in gone) and "tagger_0" in env.agents
    assert set(obs) == set(rewards) == set(terminations) == set(env.possible_agents)
    for agent in env.possible_agents:
        assert terminations[agent] == (agent in gone), agent
        assert truncations[agent] is False
        assert rewards[agent] == (-10.0 if agent in gone else 10.0 * len(gone) if agent == "tagger_0" else 0.0)
    for agent in gone:
        assert not obs[agent].any()
    # The next step takes actions for the agents left only, and reports on them only.
    with pytest.raises(ValueError, match="not in the game"):
        env.step({a: [0, 0] for a in env.possible_agents})
    obs, *_ = env.step({a: [0, 0] for a in env.agents})
    assert set(obs) == set(env.agents) and not set(obs) & set(gone)


def test_gridworld_tag_terminates_everyone():
    # L = 1: the tagger starts at (L // 2, L // 2) = (0, 0), the runner's cell; a tag needs a step.
    env = TagParallelEnv("gridworld", tg.TagGridworldParams(num_taggers=1, grid_length=1))
    env.reset(seed=0)
    obs, rewards, terminations, truncations, _ = env.step({"tagger_0": 0, "runner_0": np.int64(0)})
    assert env.agents == []
    assert terminations == {"tagger_0": True, "runner_0": True}
    assert truncations == {"tagger_0": False, "runner_0": False}
    assert rewards == {"tagger_0": 10.0, "runner_0": -5.0}
    # [x_0, x_1, y_0, y_1, type_0, type_1, one-hot(runner), t / T]
    expected = np.array([0, 0, 0, 0, 0, 1, 0, 1, 1 / 100], dtype=np.float32)
    assert np.array_equal(obs["runner_0"], expected), obs["runner_0"]


@pytest.mark.parametrize(
    "game, params",
    [
        ("gridworld", SMALL_GRIDWORLD),
        (
            "continuous",
            tc.TagContinuousParams(
                num_taggers=2, num_runners=3, num_other_agents_observed=2, episode_length=30, tagging_distance=1e-6
            ),
        ),
    ],
)
def test_truncation_at_episode_length(game, params):
    env = TagParallelEnv(game, params)
    env.reset(seed=3)
    stay = 0 if game == "gridworld" else [0, 0]  # nobody moves, so nobody is tagged
    for t in range(1, params.episode_length + 1):
        obs, rewards, terminations, truncations, _ = env.step(dict.fromkeys(env.agents, stay))
        assert set(obs) == set(env.possible_agents), t
        assert not any(terminations.values()), t
        assert all(truncations.values()) == (t == params.episode_length), t
        assert (env.agents == []) == (t == params.episode_length), t
    assert all(o[-1] == 1.0 for o in obs.values() if o.any())  # t / T = 1
    if game == "continuous":
        assert [rewards[f"runner_{j}"] for j in range(3)] == [1.0] * 3  # end_of_game_reward_for_runner
    else:
        assert rewards["runner_0"] == np.float32(0.01) and rewards["tagger_0"] == -np.float32(0.01)


def test_bad_arguments():
    with pytest.raises(ValueError, match="game must be one of"):
        TagParallelEnv("hide_and_seek")
    with pytest.raises(TypeError, match="TagContinuousParams"):
        TagParallelEnv("continuous", tg.TagGridworldParams())
    with pytest.raises(ValueError, match=r"render_mode must be None or one of \['rgb_array', 'human'\]"):
        TagParallelEnv("gridworld", render_mode="ansi")
    env = TagParallelEnv("continuous", SMALL_CONTINUOUS)
    with pytest.raises(ValueError, match="unknown agent"):
        env.observation_space("referee")
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})
    for seed in (-1, 2**63, "7", True, 1.0):
        with pytest.raises(ValueError, match="seed"):
            env.reset(seed=seed)
    with pytest.raises(TypeError, match="options"):
        env.reset(options=["reset_mask"])
    with pytest.warns(UserWarning, match="no options"):
        env.reset(options={"reset_mask": None})


@pytest.mark.parametrize(
    "game, params, good, bad_actions",
    [
        ("continuous", SMALL_CONTINUOUS, [0, 0], [[21, 0], [0, -1], [1], [1, 2, 3], [0.5, 1.0], "ab", None]),
        ("gridworld", SMALL_GRIDWORLD, 0, [5, -1, 1.5, [1], None, "a"]),
    ],
)
def test_bad_actions(game, params, good, bad_actions):
    env = TagParallelEnv(game, params)
    env.reset(seed=0)
    actions = dict.fromkeys(env.agents, good)
    with pytest.raises(ValueError, match=r"no action for agents \['runner_0'\]"):
        env.step({a: v for a, v in actions.items() if a != "runner_0"})
    with pytest.raises(ValueError, match="not in the game"):
        env.step({**actions, "referee": good})
    with pytest.raises(TypeError, match="dict"):
        env.step(list(actions.values()))
    for bad in bad_actions:
        with pytest.raises(ValueError, match="tagger_1"):
            env.step({**actions, "tagger_1": bad})
    # Rejected steps changed nothing: the first real step is step 1.
    obs, *_ = env.step(actions)
    assert obs["tagger_0"][-1] == np.float32(1 / params.episode_length)


def test_same_seed_same_actions_same_trajectory(config):
    first = random_episode(TagParallelEnv(*config), seed=11, action_seed=3)
    second = random_episode(TagParallelEnv(*config), seed=11, action_seed=3)
    assert len(first) == len(second) > 0
    for t, (a, b) in enumerate(zip(first, second)):
        for what, x, y in zip(("obs", "rewards", "terminations", "truncations", "infos"), a, b):
            assert x.keys() == y.keys(), (t, what)
            for agent in x:
                assert np.array_equal(x[agent], y[agent]), f"step {t}: {what}[{agent}] differs"


@pytest.mark.parametrize(
    "game, params, module",
    [
        ("continuous", SMALL_CONTINUOUS, tc),
        ("gridworld", tg.TagGridworldParams(grid_length=50, random_start=True), tg),
    ],
)
def test_reset_keys_follow_seed_and_episode(game, params, module):
    env = TagParallelEnv(game, params)

    def expected(seed, episode):
        key = rng.key_hash(torch.tensor([seed]), torch.tensor([episode]))
        rows = module.observe(params, module.reset(params, key, 1))[0].numpy()
        return {agent: rows[i] for i, agent in enumerate(env.possible_agents)}

    def assert_obs_equal(got, want, what):
        for agent in want:
            assert np.array_equal(got[agent], want[agent]), f"{what}: {agent} {got[agent]} != {want[agent]}"

    seed = 2**63 - 1
    assert_obs_equal(env.reset(seed=seed)[0], expected(seed, 0), "reset(seed)")
    second = env.reset()[0]
    assert_obs_equal(second, expected(seed, 1), "reset() after reset(seed)")
    assert not np.array_equal(second["runner_0"], expected(seed, 0)["runner_0"])
    assert_obs_equal(env.reset(seed=seed)[0], expected(seed, 0), "reset(seed) again")
    # Never seeded: each env draws its own random seed.
    a, b = TagParallelEnv(game, params).reset()[0], TagParallelEnv(game, params).reset()[0]
    assert not all(np.array_equal(a[agent], b[agent]) for agent in a)


def test_returned_observations_are_copies():
    env = TagParallelEnv("continuous", SMALL_CONTINUOUS)
    obs, _ = env.reset(seed=0)
    kept = {agent: o.copy() for agent, o in obs.items()}
    obs["tagger_0"][:] = 99.0
    assert not np.shares_memory(obs["tagger_0"], obs["tagger_1"])
    step_obs, *_ = env.step({a: [1, 1] for a in env.agents})
    assert step_obs["tagger_0"][-1] == np.float32(1 / 30)
    assert np.array_equal(obs["runner_0"], kept["runner_0"])
