"""Our envs against Gymnasium's own, step for step from identical states.

Each step, Gymnasium's env is given our float32 state (exactly representable in its float64) and
both take the same action. Gymnasium then computes in float64, we in float32, so one step differs
by float32 rounding of the state's magnitude: |error| <= 1e-5 * |value| + 1e-5 covers a few ulps of
values up to ~10 (the largest state magnitudes here are Acrobot's velocities, <= 9 pi). Termination
flags must agree exactly, and so must the rewards' values (up to the same tolerance).
"""

import gymnasium
import numpy as np
import pytest
import torch
from conftest import CPU_BACKENDS
from gymnasium.vector import AutoresetMode
from harness import assert_close, random_actions, state_matrix

from gpu_marl_envs import GpuVectorEnv

RTOL, ATOL = 1e-5, 1e-5
# (num_envs, steps): the torch reference runs long; simulated kernels stay tiny.
SIZES = {"torch": (16, 600), "numba": (3, 40)}


def gymnasium_step(env, state_row, action):
    env.state = np.array(state_row, dtype=np.float64)
    if isinstance(env.action_space, gymnasium.spaces.Discrete):
        action = int(action)
    else:
        action = np.asarray(action, dtype=np.float32)
    obs, reward, terminated, truncated, _ = env.step(action)
    return obs, float(reward), bool(terminated)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_steps_match_gymnasium(env_id, backend):
    check_against_gymnasium(env_id, backend, "cpu", *SIZES[backend])


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_sutton_barto_reward_matches_gymnasium(backend):
    """Gymnasium's CartPole keyword: 0 per step, -1 for the terminating one, on every backend."""
    num_envs, steps = SIZES[backend]
    terminations = check_against_gymnasium("CartPole-v1", backend, "cpu", num_envs, steps, sutton_barto_reward=True)
    assert terminations > 0, "the -1 of a terminating step was never compared"


def check_against_gymnasium(env_id, backend, device, num_envs, steps, **settings):
    """Step both from identical states for ``steps`` steps, both made with ``settings`` (Gymnasium's
    keywords, ours too); the number of terminations seen."""
    # Unvalidated: actions past the bounds check that ours clip them where Gymnasium's do.
    ours = GpuVectorEnv(
        env_id,
        num_envs,
        device=device,
        backend=backend,
        autoreset_mode=AutoresetMode.DISABLED,
        validate_actions=False,
        **settings,
    )
    theirs = [gymnasium.make(env_id, **settings).unwrapped for _ in range(num_envs)]
    for i, env in enumerate(theirs):
        env.reset(seed=i)
    ours.reset(seed=0)
    generator = torch.Generator().manual_seed(1)
    terminations = 0
    for t in range(steps):
        states = state_matrix(ours)
        actions = random_actions(ours.single_action_space, num_envs, generator, past_bounds=0.5)
        obs, rewards, terminated, _, _ = ours.step(actions.to(device))
        expected = [gymnasium_step(env, states[i], actions[i].numpy()) for i, env in enumerate(theirs)]
        context = f"{env_id} {backend} step {t}"
        assert_close("observations", torch.as_tensor(np.stack([e[0] for e in expected])), obs, context, RTOL, ATOL)
        assert_close(
            "rewards", torch.tensor([e[1] for e in expected], dtype=torch.float64), rewards, context, RTOL, ATOL
        )
        assert_close("terminated", torch.tensor([e[2] for e in expected]), terminated, context)
        if terminated.any():
            terminations += int(terminated.sum())
            ours.reset(options={"reset_mask": terminated.clone()})
            for i in terminated.nonzero().flatten().tolist():
                theirs[i].reset()  # clears Gymnasium's after-termination bookkeeping
    if steps >= 300 and env_id == "CartPole-v1":
        assert terminations > 0, "random actions should end some CartPole episodes"
    return terminations


def test_reset_distribution_matches_gymnasium(env_id):
    """Reset states: same support and moments as Gymnasium's (different generators, same law)."""
    count = 4000
    ours = GpuVectorEnv(env_id, count, device="cpu", backend="torch")
    ours.reset(seed=123)
    our_states = state_matrix(ours)
    env = gymnasium.make(env_id).unwrapped
    their_states = []
    for seed in range(count):
        env.reset(seed=seed)
        their_states.append(np.array(env.state, dtype=np.float64))
    their_states = np.stack(their_states)
    for k, name in enumerate(ours.state_fields):
        a, b = our_states[:, k], their_states[:, k]
        span = max(b.max() - b.min(), 1e-12)
        if b.max() == b.min():  # deterministic start value (e.g. MountainCar's velocity 0)
            assert np.all(a == b[0]), f"{name}: Gymnasium always starts at {b[0]}, ours ranges {a.min()}..{a.max()}"
            continue
        assert a.min() >= b.min() - 0.01 * span and a.max() <= b.max() + 0.01 * span, f"{name}: support differs"
        assert abs(a.mean() - b.mean()) < 0.03 * span, f"{name}: means {a.mean()} vs {b.mean()}"
        assert abs(a.std() / b.std() - 1) < 0.05, f"{name}: standard deviations {a.std()} vs {b.std()}"
