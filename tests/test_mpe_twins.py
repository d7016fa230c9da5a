"""The MPE games against MPE2 1.1.1 itself: MPE2's env and our torch reference step from identical
states with identical actions, in both action modes, and their observations and rewards agree.

Each step, our float32 state is written into MPE2's world (``env.unwrapped.world``, as float64), both
step with the same actions, and the outputs are compared; the next step starts from our new state.
The states are drawn crowded (agents within reach of each other and of the obstacles: contact forces
and collision rewards) and fast (speed caps), the continuous actions partly outside ``[0, 1]``
(clipped).

Tolerance: MPE2 computes in float64, we in float32. A step is a few dozen float32 operations on
values of order 1 (relative rounding 6e-8 each); the contact force (``100 * penetration``) turns a
position's rounding into up to ``100 dt = 10`` times as much velocity, and the rewards sum distances
over every landmark. ``ATOL = RTOL = 1e-5`` holds with a margin of about ten (the largest differences
seen are about 1e-6). A collision reward flips only where a distance lies within that rounding of
its threshold, which random states do not reach. The kernels match the reference exactly
(``check_env``), so this holds for them too.
"""

import numpy as np
import pytest
import torch
from mpe2 import simple_speaker_listener_v4, simple_spread_v3, simple_tag_v3
from pettingzoo.utils.env_logger import EnvLogger

from gpu_marl_envs.envs import simple_speaker_listener as ssl
from gpu_marl_envs.envs import simple_spread, simple_tag
from gpu_marl_envs.envs.simple_speaker_listener import SIMPLE_SPEAKER_LISTENER, SimpleSpeakerListenerParams
from gpu_marl_envs.envs.simple_spread import SIMPLE_SPREAD, SimpleSpreadParams, SimpleSpreadState
from gpu_marl_envs.envs.simple_tag import SIMPLE_TAG, SimpleTagParams, SimpleTagState

ATOL = RTOL = 1e-5
STEPS = 6


@pytest.fixture(autouse=True)
def quiet_clipping():
    """MPE2's ClipOutOfBoundsWrapper warns at every action it clips (which these tests do on purpose)."""
    EnvLogger.suppress_output()
    yield
    EnvLogger.unsuppress_output()


def assert_close(name, expected, actual):
    expected, actual = np.asarray(expected, dtype=np.float64), np.asarray(actual, dtype=np.float64)
    assert expected.shape == actual.shape, f"{name}: shape {actual.shape}, MPE2's {expected.shape}"
    error = np.abs(actual - expected) - (ATOL + RTOL * np.abs(expected))
    if (error > 0).any():
        k = np.unravel_index(np.argmax(error), error.shape)
        raise AssertionError(f"{name}{list(k)}: ours {actual[k]!r}, MPE2's {expected[k]!r}")


def random_actions(rng, continuous: bool, n: int, dim: int = 5) -> np.ndarray:
    if continuous:  # partly outside [0, 1]: clipped by both
        return rng.uniform(-0.3, 1.3, (n, dim)).astype(np.float32)
    return rng.integers(0, dim, n)


def torch_actions(actions: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(actions)[None]


def set_entity(entity, x, y, vx=0.0, vy=0.0):
    entity.state.p_pos = np.array([x, y], dtype=np.float64)
    entity.state.p_vel = np.array([vx, vy], dtype=np.float64)


def check_spaces(definition, params, env):
    """Our spaces are MPE2's, agent by agent (in MPE2's order, which is ours)."""
    groups = definition.agent_groups(params)
    names = env.possible_agents
    obs_spaces, action_spaces = definition.observation_spaces(params), definition.action_spaces(params)
    for group, ids in groups.items():
        for a in ids:
            assert obs_spaces[group] == env.observation_space(names[a]), names[a]
            assert action_spaces[group] == env.action_space(names[a]), names[a]


# --- SimpleSpread-v3 ---------------------------------------------------------------------------------


def spread_state(rng, n: int, spread: float) -> SimpleSpreadState:
    def draw(scale):
        return torch.as_tensor(rng.uniform(-scale, scale, (1, n)), dtype=torch.float32)

    return SimpleSpreadState(
        draw(spread), draw(spread), draw(1.0), draw(1.0), draw(1.0), draw(1.0), torch.zeros(1, dtype=torch.int32)
    )


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("n, spread, local_ratio", [(3, 0.4, 0.5), (6, 0.5, 0.25)])
def test_simple_spread_matches_mpe2(continuous, n, spread, local_ratio):
    rng = np.random.default_rng(n)
    params = SimpleSpreadParams(N=n, local_ratio=local_ratio, continuous_actions=continuous, max_cycles=100)
    env = simple_spread_v3.parallel_env(N=n, local_ratio=local_ratio, continuous_actions=continuous, max_cycles=100)
    env.reset(seed=0)
    check_spaces(SIMPLE_SPREAD, params, env)
    world = env.unwrapped.world
    collided = 0
    for episode in range(3):
        state = spread_state(rng, n, spread)
        for _ in range(STEPS):
            for a, agent in enumerate(world.agents):
                set_entity(agent, state.x[0, a], state.y[0, a], state.vx[0, a], state.vy[0, a])
            for lm, landmark in enumerate(world.landmarks):
                set_entity(landmark, state.landmark_x[0, lm], state.landmark_y[0, lm])
            actions = random_actions(rng, continuous, n)
            observations, rewards, _, _, _ = env.step(dict(zip(env.agents, actions, strict=True)))
            state, ours, _, _ = simple_spread.step(params, state, torch_actions(actions))
            obs = simple_spread.observe(params, state)["agents"][0]
            for a, name in enumerate(env.possible_agents):
                assert_close(f"episode {episode} observation of {name}", observations[name], obs[a])
                assert_close(f"episode {episode} reward of {name}", rewards[name], ours[0, a])
            collided += int(simple_spread.collisions(params, state.x, state.y).sum())
    assert collided > 0, "no collision reached: crowd the states"


# --- SimpleTag-v3 ------------------------------------------------------------------------------------


def tag_state(rng, p: SimpleTagParams) -> SimpleTagState:
    """Agents crowded around the obstacles near a wall (contacts, catches, boundary penalties on
    both sides of 0.9 and 1), some fast (speed caps)."""

    def draw(count, low, high):
        return torch.as_tensor(rng.uniform(low, high, (1, count)), dtype=torch.float32)

    n, m = p.num_agents, p.num_obstacles
    return SimpleTagState(
        draw(n, 0.5, 1.2),
        draw(n, -0.3, 0.3),
        draw(n, -2.0, 2.0),
        draw(n, -2.0, 2.0),
        draw(m, 0.4, 0.9),
        draw(m, -0.3, 0.3),
        torch.zeros(1, dtype=torch.int32),
    )


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("good, adversaries, obstacles", [(1, 3, 2), (3, 4, 1)])
def test_simple_tag_matches_mpe2(continuous, good, adversaries, obstacles):
    rng = np.random.default_rng(good + adversaries)
    settings = dict(num_good=good, num_adversaries=adversaries, num_obstacles=obstacles, max_cycles=100)
    params = SimpleTagParams(**settings, continuous_actions=continuous)
    env = simple_tag_v3.parallel_env(**settings, continuous_actions=continuous)
    env.reset(seed=0)
    check_spaces(SIMPLE_TAG, params, env)
    world = env.unwrapped.world
    caught = capped = 0
    for episode in range(4):
        state = tag_state(rng, params)
        for _ in range(STEPS):
            for a, agent in enumerate(world.agents):
                set_entity(agent, state.x[0, a], state.y[0, a], state.vx[0, a], state.vy[0, a])
            for lm, landmark in enumerate(world.landmarks):
                set_entity(landmark, state.obstacle_x[0, lm], state.obstacle_y[0, lm])
            actions = random_actions(rng, continuous, params.num_agents)
            observations, rewards, _, _, _ = env.step(dict(zip(env.agents, actions, strict=True)))
            state, ours, _, _ = simple_tag.step(params, state, torch_actions(actions))
            obs = simple_tag.observe(params, state)
            for a, name in enumerate(env.possible_agents):
                group, k = ("adversaries", a) if a < adversaries else ("agents", a - adversaries)
                assert_close(f"episode {episode} observation of {name}", observations[name], obs[group][0, k])
                assert_close(f"episode {episode} reward of {name}", rewards[name], ours[0, a])
            caught += int(simple_tag.catches(params, state.x, state.y).sum())
            capped += int((torch.hypot(state.vx, state.vy) > 0.999).sum())
    assert caught > 0 and capped > 0, f"catches {caught}, capped speeds {capped}: crowd the states"


def test_agent_names_are_mpe2s():
    params = SimpleSpreadParams()
    assert SIMPLE_SPREAD.agent_names(params) == simple_spread_v3.parallel_env().possible_agents


def test_simple_tag_agent_names_are_mpe2s():
    assert SIMPLE_TAG.agent_names(SimpleTagParams()) == simple_tag_v3.parallel_env().possible_agents


def test_simple_tag_boundary_penalty_is_mpe2s():
    # MPE2's bound(x) (simple_tag.Scenario.agent_reward), on every branch: 0, the ramp, exp, the cap.
    def mpe2_bound(x):
        if x < 0.9:
            return 0
        if x < 1.0:
            return (x - 0.9) * 10
        return min(np.exp(2 * x - 2), 10)

    v = torch.linspace(0.0, 4.0, 4001)
    expected = np.array([mpe2_bound(float(x)) for x in v])
    assert_close("bound", expected, simple_tag.bound(v))


# --- SimpleSpeakerListener-v4 --------------------------------------------------------------------------


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_simple_speaker_listener_matches_mpe2(continuous):
    rng = np.random.default_rng(0)
    params = SimpleSpeakerListenerParams(max_cycles=100, continuous_actions=continuous)
    env = simple_speaker_listener_v4.parallel_env(max_cycles=100, continuous_actions=continuous)
    env.reset(seed=0)
    check_spaces(SIMPLE_SPEAKER_LISTENER, params, env)
    assert SIMPLE_SPEAKER_LISTENER.agent_names(params) == env.possible_agents
    world = env.unwrapped.world
    for episode in range(4):

        def draw(shape, scale=1.0):
            return torch.as_tensor(rng.uniform(-scale, scale, shape), dtype=torch.float32)

        state = ssl.SimpleSpeakerListenerState(
            draw((1, 2)),
            draw((1, 2)),
            torch.cat([torch.zeros(1, 1), draw((1, 1), 2.0)], 1),
            torch.cat([torch.zeros(1, 1), draw((1, 1), 2.0)], 1),
            draw((1, 3)),
            draw((1, 3)),
            torch.tensor([episode % 3], dtype=torch.int32),
            torch.zeros(1, 3),
            torch.zeros(1, dtype=torch.int32),
        )
        for _ in range(STEPS):
            for a, agent in enumerate(world.agents):
                set_entity(agent, state.x[0, a], state.y[0, a], state.vx[0, a], state.vy[0, a])
            for lm, landmark in enumerate(world.landmarks):
                set_entity(landmark, state.landmark_x[0, lm], state.landmark_y[0, lm])
            world.agents[0].goal_b = world.landmarks[int(state.goal[0])]
            world.agents[0].state.c = state.comm[0].double().numpy()
            if continuous:  # the speaker's 3 values, the listener's 5, partly outside [0, 1]
                said, moved = random_actions(rng, True, 1, 3)[0], random_actions(rng, True, 1)[0]
                observations, rewards, _, _, _ = env.step(dict(zip(env.agents, (said, moved), strict=True)))
                actions = np.stack([np.concatenate([said, np.zeros(2, np.float32)]), moved])  # the (2, 5) buffer
            else:
                actions = np.array([rng.integers(0, 3), rng.integers(0, 5)])
                observations, rewards, _, _, _ = env.step(dict(zip(env.agents, actions, strict=True)))
            state, ours, _, _ = ssl.step(params, state, torch_actions(actions))
            obs = ssl.observe(params, state)
            for a, (name, group) in enumerate(zip(env.possible_agents, ("speakers", "listeners"), strict=True)):
                assert_close(f"episode {episode} observation of {name}", observations[name], obs[group][0, 0])
                assert_close(f"episode {episode} reward of {name}", rewards[name], ours[0, a])


@pytest.mark.parametrize(
    "env_id, mpe2_env",
    [
        ("SimpleSpread-v3", simple_spread_v3.parallel_env),
        ("SimpleTag-v3", simple_tag_v3.parallel_env),
        ("SimpleSpeakerListener-v4", simple_speaker_listener_v4.parallel_env),
    ],
)
def test_global_state_is_mpe2s(env_id, mpe2_env):
    # MPE2's state(): every agent's observation, agent by agent, as ours (the framework's default).
    from gpu_marl_envs.pettingzoo_env import PettingZooParallelEnv

    ours, theirs = PettingZooParallelEnv(env_id), mpe2_env()
    observations, _ = ours.reset(seed=0)
    theirs.reset(seed=0)
    assert ours.state_space == theirs.state_space
    np.testing.assert_array_equal(ours.state(), np.concatenate([observations[a] for a in ours.possible_agents]))
