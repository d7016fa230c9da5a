"""The Stable-Baselines3 adapter, proven by SB3 itself: its env checker on the numpy env, its VecEnv
wrappers and algorithms over the adapter, SB3's terminal-observation and truncation conventions on
crafted episodes against the env's own flags, black death for agents that leave a game, games of Box
actions (Glide-v0, SimpleSpread-v3's continuous actions), bad input, and PPO learning CartPole
through it.
"""

import math
import re
import time

import glide  # noqa: F401  (registers glide/Glide-v0, a test game of Box actions)
import gymnasium
import numpy as np
import pytest
import torch
from conftest import HAS_GPU
from gpu_marl_envs.adapters import SB3ParallelVecEnv, SB3VecEnv, make_sb3_env
from gpu_marl_envs.adapters.sb3 import UniformActions
from gymnasium.vector import AutoresetMode
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecCheckNan, VecFrameStack, VecMonitor, VecNormalize

from gpu_marl_envs import GpuVectorEnv, make_parallel
from gpu_marl_envs.envs.cartpole import CartPoleParams
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams

N = 6
MAX_STEPS = CartPoleParams().max_episode_steps
# Games of Box actions and the settings that give them: a test game of two groups with one Box, and
# MPE2's cooperative navigation with its continuous actions (Box(0, 1, (5,))).
BOX_GAMES = {"glide/Glide-v0": {}, "gpu_marl_envs/SimpleSpread-v3": {"continuous_actions": True}}


def sample(vec_env, rng: np.random.Generator) -> np.ndarray:
    space = vec_env.action_space
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(0, space.n, vec_env.num_envs)
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return rng.integers(0, space.nvec, (vec_env.num_envs, len(space.nvec)))
    return rng.uniform(space.low, space.high, (vec_env.num_envs, *space.shape)).astype(np.float32)


# -- SB3's checker and wrappers --------------------------------------------------------------------


# SB3 advises a symmetric [-1, 1] Box for continuous actions; ours are Gymnasium's own bounds.
@pytest.mark.filterwarnings("ignore:We recommend you to use a symmetric and normalized Box")
def test_sb3_check_env(env_id):
    check_env(gymnasium.make(f"gpu_marl_envs/{env_id}"))


def test_sb3_wrappers_run_over_the_adapter(env_id):
    """VecNormalize, VecFrameStack and VecCheckNan (which raises on NaN/inf) over make_sb3_env's
    VecMonitor, which counts every episode."""
    vec_env = monitor = make_sb3_env(env_id, N, device="cpu", max_episode_steps=20)
    assert isinstance(monitor, VecMonitor) and isinstance(monitor.unwrapped, SB3VecEnv)
    wrapped = VecCheckNan(VecFrameStack(VecNormalize(monitor), n_stack=2), raise_exception=True)
    wrapped.seed(0)
    obs = wrapped.reset()
    assert obs.shape == (N, 2 * vec_env.observation_space.shape[0])
    rng = np.random.default_rng(0)
    episodes = 0
    for _ in range(25):
        obs, rewards, dones, infos = wrapped.step(sample(vec_env, rng))
        assert obs.shape[0] == rewards.shape[0] == dones.shape[0] == len(infos) == N
        for i in np.flatnonzero(dones):
            episodes += 1
            assert infos[i]["terminal_observation"].shape == obs[i].shape  # stacked by VecFrameStack
            assert infos[i]["episode"]["l"] <= 20
    assert episodes >= N  # every sub-env ended at least once (time limit 20)
    assert monitor.episode_count == episodes


@pytest.mark.filterwarnings("error")  # SB3's "not wrapped with a Monitor" warning among them
def test_evaluate_policy_finds_episode_statistics_without_a_warning():
    vec_env = make_sb3_env("CartPole-v1", 4, device="cpu")
    model = PPO("MlpPolicy", vec_env, n_steps=8, batch_size=32, device="cpu", seed=0)  # untrained
    returns, lengths = evaluate_policy(model, vec_env, n_eval_episodes=4, return_episode_rewards=True)
    assert len(returns) == 4 and returns == [float(n) for n in lengths]  # CartPole: +1 a step


# -- SB3's conventions on crafted episodes ---------------------------------------------------------

# Sub-envs 1, 3 and 4 of the batch start one step before their episode ends: 1 leaves the track
# (terminated), 3 reaches the time limit (truncated), 4 does both at once.
CRAFTED_IDS = [1, 3, 4]
CRAFTED_STATES = {
    "x": [2.39, 0.0, 2.39],
    "x_dot": [1.0, 0.0, 1.0],
    "theta": [0.0, 0.01, 0.0],
    "theta_dot": [0.0, 0.0, 0.0],
}
CRAFTED_ELAPSED = [0, MAX_STEPS - 1, MAX_STEPS - 1]


def test_terminal_observations_and_truncation_flags():
    vec_env = make_sb3_env("CartPole-v1", N, device="cpu")
    vec_env.seed(0)
    vec_env.reset()
    vec_env.env_method("set_state", CRAFTED_STATES, env_ids=CRAFTED_IDS, elapsed_steps=CRAFTED_ELAPSED)
    # The env's own account of the same three steps.
    twin = GpuVectorEnv("CartPole-v1", len(CRAFTED_IDS), device="cpu", autoreset_mode=AutoresetMode.DISABLED)
    twin.set_state(CRAFTED_STATES, elapsed_steps=CRAFTED_ELAPSED)
    actions = np.array([1, 0, 1, 0, 1, 0])
    own_obs, own_rewards, terminated, truncated, _ = twin.step(torch.as_tensor(actions[CRAFTED_IDS]))
    assert terminated.tolist() == [True, False, True] and truncated.tolist() == [False, True, True]

    obs, rewards, dones, infos = vec_env.step(actions)
    assert np.flatnonzero(dones).tolist() == CRAFTED_IDS
    np.testing.assert_array_equal(rewards[CRAFTED_IDS], own_rewards.numpy())
    for k, i in enumerate(CRAFTED_IDS):
        info = infos[i]
        np.testing.assert_array_equal(info["terminal_observation"], own_obs[k].numpy(), err_msg=f"sub-env {i}")
        assert info["TimeLimit.truncated"] == bool(truncated[k] and not terminated[k]), f"sub-env {i}"
        assert info["episode"] == {"r": 1.0, "l": 1, "t": info["episode"]["t"]}
        # The returned observation starts the next episode (SAME_STEP), within the reset bounds.
        assert np.all(np.abs(obs[i]) <= CartPoleParams().reset_bound), f"sub-env {i}: {obs[i]}"
    for i in sorted(set(range(N)) - set(CRAFTED_IDS)):
        assert infos[i] == {}
        with pytest.raises(TypeError, match="shared read-only empty dict"):
            infos[i]["terminal_observation"] = obs[i]


def test_seed_applies_at_the_next_reset():
    vec_env = make_sb3_env("Pendulum-v1", N, device="cpu")
    reference = GpuVectorEnv("Pendulum-v1", N, device="cpu")
    first = vec_env.reset()
    assert vec_env.seed(5) == [5 + i for i in range(N)]
    seeded = vec_env.reset()
    np.testing.assert_array_equal(seeded, reference.reset(seed=5)[0].numpy())
    assert not np.array_equal(first, seeded)
    assert not np.array_equal(vec_env.reset(), seeded)  # a seed is used once, as SB3's own VecEnvs do
    assert vec_env.reset_infos == [{}] * N


def test_attributes_and_methods_reach_the_batched_env():
    vec_env = make_sb3_env("CartPole-v1", N, device="cpu", render_mode="rgb_array", render_env_indices=[0, 2])
    assert vec_env.render_mode == "rgb_array" and vec_env.unwrapped.metadata["render_fps"] == 50
    assert vec_env.get_attr("params", indices=[1, 2]) == [vec_env.env.params] * 2
    assert vec_env.has_attr("state_fields") and not vec_env.has_attr("no_such_attribute")
    vec_env.set_attr("validate_actions", True)
    assert vec_env.env.validate_actions is True
    with pytest.raises(ValueError, match="can only be set for all of them: pass indices=None"):
        vec_env.set_attr("validate_actions", False, indices=[0])
    vec_env.reset()
    states = vec_env.env_method("get_state", indices=[3])
    assert len(states) == 1 and set(states[0]) == set(vec_env.env.state_fields)
    assert vec_env.env_is_wrapped(Monitor) == [False] * N
    assert len(vec_env.get_images()) == 2
    assert vec_env.render().shape == (2 * 400, 600, 3)  # SB3 tiles the two frames


# -- multi-agent: parameter sharing and black death ------------------------------------------------


def test_black_death_on_tag_continuous():
    """Runners that are tagged observe zeros with reward 0 and stay not-done until their game ends;
    then every chosen agent of that game is done at once, terminated if it had left and truncated if
    it was still playing at the time limit."""
    params = TagContinuousParams(num_taggers=4, num_runners=12, grid_length=4.0, episode_length=40)
    vec_env = make_sb3_env("TagContinuous-v0", 3, groups=["runners"], device="cpu", params=params)
    assert isinstance(vec_env.unwrapped, SB3ParallelVecEnv) and vec_env.num_envs == 3 * 12
    vec_env.seed(0)
    obs = vec_env.reset()
    rng = np.random.default_rng(0)
    left = np.zeros(vec_env.num_envs, dtype=bool)
    games_ended = tagged = 0
    for t in range(params.episode_length):
        obs, rewards, dones, infos = vec_env.step(sample(vec_env, rng))
        gone = ~obs.any(axis=1)
        assert not (left & ~gone & ~dones).any(), f"step {t}: a runner came back before its game ended"
        assert not rewards[left].any(), f"step {t}: a runner out of the game was rewarded"
        by_game = dones.reshape(3, 12)
        assert (by_game == by_game[:, :1]).all(), f"step {t}: agents of one game finished apart"
        for i in np.flatnonzero(dones):
            final = infos[i]["terminal_observation"]
            assert infos[i]["TimeLimit.truncated"] == bool(final.any()), f"step {t}, sub-env {i}"
        games_ended += int(by_game[:, 0].sum())
        tagged += int((gone & ~left).sum())
        left = gone & ~dones
    assert games_ended == 3  # all three games reach the time limit together
    assert tagged > 0


@pytest.mark.parametrize(
    "env_id, groups, params",
    [
        ("TagGridworld-v0", None, None),
        (
            "TagContinuous-v0",
            ["taggers"],
            TagContinuousParams(num_taggers=4, num_runners=8, grid_length=4.0, episode_length=12),
        ),
    ],
)
def test_ppo_with_parameter_sharing_on_tag(env_id, groups, params, one_thread):
    """SB3 PPO trains a few iterations with one policy over every chosen agent; its rollout buffer
    holds one row per (game, agent) and starts episodes only where whole games do."""
    vec_env = make_sb3_env(env_id, 4, groups=groups, device="cpu", params=params)
    model = PPO("MlpPolicy", vec_env, n_steps=16, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(3 * 16 * vec_env.num_envs)
    buffer = model.rollout_buffer
    # After the update SB3 keeps the last rollout's samples flattened sub-env-major, (num_envs * n_steps,
    # ...), and its episode starts as (n_steps, num_envs).
    assert buffer.observations.shape == (vec_env.num_envs * 16, *vec_env.observation_space.shape)
    assert np.isfinite(buffer.observations).all() and np.isfinite(buffer.returns).all()
    starts = buffer.episode_starts.reshape(16, 4, vec_env.agents_per_game)
    assert (starts == starts[..., :1]).all()


def test_parallel_adapter_refuses_groups_with_different_spaces():
    env = make_parallel("TagGridworld-v0", 2, device="cpu", autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match=re.escape("groups must be distinct names among ['taggers', 'runners']")):
        SB3ParallelVecEnv(env, groups=["hunters"])


# -- multi-agent: games of Box actions -------------------------------------------------------------


@pytest.mark.parametrize("env_id, settings", BOX_GAMES.items(), ids=list(BOX_GAMES))
def test_box_actions_reach_the_game_as_float32(env_id, settings):
    """SB3's numpy actions (float64, as numpy makes them; non-integers, and past the bounds on every
    other step) step the game as the batched env stepped with the same values in float32 does: no
    integer cast, and values outside the bounds clipped by the game's rules. NaN is refused."""
    vec_env = make_sb3_env(env_id, 3, device="cpu", **settings)  # every group driven: one policy
    k = vec_env.agents_per_game
    twin = make_parallel(
        env_id, 3, device="cpu", autoreset_mode=AutoresetMode.SAME_STEP, validate_actions=False, **settings
    )
    vec_env.seed(7)
    obs = vec_env.reset()
    expected, _ = twin.reset_groups(seed=[7 + g * k for g in range(3)])
    chosen = vec_env.unwrapped.groups
    space = vec_env.action_space
    assert isinstance(space, gymnasium.spaces.Box) and space.dtype == np.float32
    rng = np.random.default_rng(0)
    width = space.high - space.low
    games_ended = 0
    for step in range(8):
        past = 0.5 * (step % 2)
        actions = rng.uniform(space.low - past * width, space.high + past * width, (vec_env.num_envs, *space.shape))
        assert actions.dtype == np.float64 and not np.all(actions == np.round(actions))
        tensor = torch.from_numpy(actions.astype(np.float32)).view(3, k, *space.shape)
        by_group = dict(zip(chosen, tensor.split([len(twin.groups[g]) for g in chosen], dim=1)))
        expected, rewards, *_, infos = twin.step_groups(by_group)
        obs, sb3_rewards, dones, _ = vec_env.step(actions)
        np.testing.assert_array_equal(obs, torch.cat([expected[g] for g in chosen], 1).flatten(0, 1).numpy())
        np.testing.assert_array_equal(sb3_rewards, torch.cat([rewards[g] for g in chosen], 1).flatten().numpy())
        games_ended += int(infos[chosen[0]]["_final_obs"].sum())
        for name, values in twin.get_state().items():
            assert torch.equal(vec_env.env.get_state()[name], values), f"step {step}: state {name}"
    assert games_ended == (3 if env_id == "glide/Glide-v0" else 0)  # Glide's episodes last 5 steps
    before = vec_env.env.get_state()
    nan = np.zeros((vec_env.num_envs, *space.shape), dtype=np.float32)
    nan[k + 1, 0] = math.nan
    with pytest.raises(ValueError, match=re.escape(f"actions of sub-env {k + 1} contain NaN (no env was stepped)")):
        vec_env.step(nan)
    for name, values in vec_env.env.get_state().items():
        assert torch.equal(values, before[name]), name


def test_uniform_actions_of_box_groups_lie_within_the_bounds():
    env = make_parallel("glide/Glide-v0", 64, device="cpu", autoreset_mode=AutoresetMode.SAME_STEP)
    policy = UniformActions(env, ["leaders", "gliders"])
    policy.seed(0)
    actions = policy({})
    assert actions["gliders"].shape == (64, 3, 2) and actions["leaders"].shape == (64, 1, 2)
    values = torch.cat([actions["gliders"], actions["leaders"]], 1)
    assert values.dtype == torch.float32 and values.min() >= -1.0 and values.max() <= 1.0
    assert values.min() < -0.9 and values.max() > 0.9 and values.std() > 0.5  # spread over the Box
    policy.seed(0)
    assert torch.equal(policy({})["gliders"], actions["gliders"])


@pytest.mark.parametrize(
    "env_id, groups",
    [("glide/Glide-v0", ["gliders"]), ("gpu_marl_envs/SimpleSpread-v3", None)],
    ids=["Glide-v0 gliders", "SimpleSpread-v3"],
)
def test_ppo_with_gaussian_policies_on_box_games(env_id, groups, one_thread):
    """SB3 PPO (a Gaussian policy, whose actions SB3 clips to the Box) trains a few iterations under
    VecCheckNan; on Glide the leader acts by UniformActions' uniform Box values."""
    vec_env = make_sb3_env(env_id, 4, groups=groups, device="cpu", **BOX_GAMES[env_id])
    checked = VecCheckNan(vec_env, raise_exception=True)
    model = PPO("MlpPolicy", checked, n_steps=16, batch_size=64, n_epochs=2, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(3 * 16 * vec_env.num_envs)
    actions = model.rollout_buffer.actions  # the policy's, before SB3 clips them
    assert actions.dtype == np.float32 and not np.all(actions == np.round(actions))
    assert np.isfinite(model.rollout_buffer.returns).all()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    assert vec_env.episode_count >= vec_env.num_envs  # Glide's games last 5 steps, SimpleSpread's 25


def test_sac_on_a_box_game(one_thread):
    """SB3's SAC (actions squashed into the Box) collects and trains a few steps: its replay buffer
    takes the terminal observations of the games that end (Glide's last 5 steps)."""
    vec_env = make_sb3_env("glide/Glide-v0", 2, device="cpu")
    model = SAC("MlpPolicy", vec_env, learning_starts=16, batch_size=32, seed=0, device="cpu")
    model.learn(12 * vec_env.num_envs)
    stored = model.replay_buffer.actions[: model.replay_buffer.pos]
    assert stored.dtype == np.float32 and np.abs(stored).max() <= 1.0 and not np.all(stored == np.round(stored))
    assert vec_env.episode_count == 2 * vec_env.num_envs  # two games of 5 steps in 12 steps


# -- bad use ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "actions, error, message",
    [
        (np.zeros(N + 1, dtype=np.int64), ValueError, f"actions must have shape ({N},)"),
        (np.zeros((N, 1), dtype=np.int64), ValueError, f"actions must have shape ({N},)"),
        (np.zeros(N, dtype=np.float32), TypeError, "must be integers, got dtype float32; use actions.astype(np.int64)"),
        (np.array([0, 1, 2, 0, 1, 0]), ValueError, "actions of sub-env 2: 2 not in Discrete(2) (no env was stepped)"),
        (torch.zeros(N, dtype=torch.int64), TypeError, "SB3 VecEnvs take numpy actions; pass actions.cpu().numpy()"),
    ],
)
def test_bad_actions_are_refused_before_stepping(actions, error, message):
    vec_env = make_sb3_env("CartPole-v1", N, device="cpu")
    vec_env.reset()
    before = vec_env.env.get_state()
    with pytest.raises(error, match=re.escape(message)):
        vec_env.step(actions)
    for name, values in vec_env.env.get_state().items():
        assert torch.equal(values, before[name]), name


def test_nan_continuous_actions_are_refused():
    vec_env = make_sb3_env("Pendulum-v1", N, device="cpu")
    vec_env.reset()
    actions = np.zeros((N, 1), dtype=np.float32)
    actions[4] = np.nan
    with pytest.raises(ValueError, match=re.escape("actions of sub-env 4 contain NaN (no env was stepped)")):
        vec_env.step(actions)


def test_bad_construction():
    with pytest.raises(ValueError, match="autoreset_mode=AutoresetMode.SAME_STEP"):
        SB3VecEnv(GpuVectorEnv("CartPole-v1", 2, device="cpu"))
    with pytest.raises(TypeError, match="SB3VecEnv wraps a GpuVectorEnv, got CartPoleEnv"):
        SB3VecEnv(gymnasium.make("CartPole-v1"))
    with pytest.raises(gymnasium.error.NameNotFound, match="NoSuchEnv"):
        make_sb3_env("NoSuchEnv-v0", 2)
    with pytest.raises(ValueError, match="groups and other_actions apply to multi-agent games"):
        make_sb3_env("CartPole-v1", 2, groups=["taggers"])
    with pytest.raises(RuntimeError, match="call reset\\(\\) and then step_async"):
        make_sb3_env("CartPole-v1", 2, device="cpu").step_wait()
    if not HAS_GPU:
        with pytest.raises(RuntimeError, match="torch sees no CUDA GPU; use device='cpu'"):
            make_sb3_env("CartPole-v1", 2, device="cuda")


# -- learning ---------------------------------------------------------------------------------------


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


def test_ppo_learns_cartpole(one_thread):
    """rl-zoo's tuned CartPole-v1 PPO (n_steps x n_envs = 256 per update, batch 256, 20 epochs, gamma
    0.98, GAE 0.8, linear lr 1e-3 and clip 0.2 schedules), as 16 sub-envs x 16 steps instead of 8 x 32
    (half the env calls), for 50,000 steps instead of 100,000. Deterministic evaluation over 16
    episodes; seeds and the spread seen over seeds are in docs/adapters.md."""
    started = time.perf_counter()
    vec_env = make_sb3_env("CartPole-v1", 16, device="cpu")
    model = PPO(
        "MlpPolicy",
        vec_env,
        n_steps=16,
        batch_size=256,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=0,
        device="cpu",
    )
    model.learn(50_000)
    evaluation = make_sb3_env("CartPole-v1", 16, device="cpu")
    evaluation.seed(1000)
    mean, std = evaluate_policy(model, evaluation, n_eval_episodes=16, deterministic=True)
    assert mean >= 475, f"mean return {mean:.1f} +- {std:.1f} after {time.perf_counter() - started:.0f} s"


# -- GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_adapter_on_cuda_matches_cpu_and_copies_once_per_step(cuda_device):
    """The adapter on the GPU gives the CPU's outputs (same seeds, same actions) and moves data between
    host and device exactly twice per step: the actions in, the packed outputs out."""
    from torch.profiler import ProfilerActivity, profile

    cpu = make_sb3_env("CartPole-v1", 256, device="cpu")
    gpu = make_sb3_env("CartPole-v1", 256, device=cuda_device)
    for vec_env in (cpu, gpu):
        vec_env.seed(3)
    np.testing.assert_allclose(gpu.reset(), cpu.reset(), rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(0)
    for _ in range(3):  # warm-up (CUDA graph capture) and a comparison
        actions = sample(cpu, rng)
        expected, actual = cpu.step(actions), gpu.step(actions)
        np.testing.assert_allclose(actual[0], expected[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(actual[2], expected[2])
    steps = 5
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], acc_events=True) as prof:
        for _ in range(steps):
            gpu.step(sample(gpu, rng))
        torch.cuda.synchronize()
    names = [event.name for event in prof.events()]
    assert sum("Memcpy HtoD" in name for name in names) == steps, names
    assert sum("Memcpy DtoH" in name for name in names) == steps, names

    tag = make_sb3_env("TagContinuous-v0", 8, groups=["runners"], device=cuda_device)
    tag.reset()
    for _ in range(3):
        obs, rewards, dones, infos = tag.step(sample(tag, rng))
    assert obs.shape == (8 * 100, 71) and np.isfinite(obs).all()

    # A game of Box actions, the same two copies a step.
    spread = make_sb3_env("SimpleSpread-v3", 64, device=cuda_device, continuous_actions=True)
    spread.reset()
    for _ in range(3):
        spread.step(sample(spread, rng))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], acc_events=True) as prof:
        for _ in range(steps):
            obs, *_ = spread.step(sample(spread, rng))
        torch.cuda.synchronize()
    names = [event.name for event in prof.events()]
    assert sum("Memcpy HtoD" in name for name in names) == steps, names
    assert sum("Memcpy DtoH" in name for name in names) == steps, names
    assert obs.shape == (64 * 3, 18) and np.isfinite(obs).all()
