"""Every kernel backend against the torch reference through ``gpu_marl_envs.check_env``: step for
step from identical states, in every autoreset mode, identical resets, bad input, Gymnasium's
checker. Here (no GPU): Numba kernels under the CUDA simulator at tiny sizes; the GPU machine runs
all backends at larger sizes (tests/test_gpu.py)."""

import pytest
import torch
from conftest import KERNEL_BACKENDS_HERE
from harness import TWIN_ATOL, TWIN_RTOL, assert_close, compare_step, random_actions, snapshot

from gpu_marl_envs import GpuVectorEnv, check_env
from gpu_marl_envs.registration import env_spec


def run_twins(env_id, backend, device, num_envs, steps, mode, max_episode_steps, seed=7, cuda_graph=None):
    """Step for step on ``device`` from identical states; the GPU tests' (test_gpu.py), with CUDA
    graphs and streams that ``check_env`` leaves alone."""
    kwargs = dict(device=device, autoreset_mode=mode, max_episode_steps=max_episode_steps)
    # Unvalidated: the random actions go past the bounds, to compare the backends' clipping.
    kwargs["validate_actions"] = False
    reference = GpuVectorEnv(env_id, num_envs, backend="torch", cuda_graph=False, **kwargs)
    twin = GpuVectorEnv(env_id, num_envs, backend=backend, cuda_graph=cuda_graph, **kwargs)
    reference.reset(seed=seed)
    twin.reset(seed=seed)
    for name in reference.state_fields:
        # Reset states come from the shared counter-based RNG: bit-identical, not just close.
        assert torch.equal(reference.get_state()[name], twin.get_state()[name]), f"reset state {name} differs"
    generator = torch.Generator().manual_seed(seed)
    for t in range(steps):
        actions = random_actions(reference.single_action_space, num_envs, generator, device, past_bounds=0.5)
        expected = snapshot(reference.step(actions))
        compare_step(expected, twin.step(actions), f"{env_id} {backend} {mode.name} step {t}")
        assert_close("episodes", reference._buffers.episodes, twin._buffers.episodes, f"step {t}")
        assert_close("elapsed_steps", reference._buffers.elapsed_steps, twin._buffers.elapsed_steps, f"step {t}")
        # Continue both from the reference's state, so that chaotic dynamics (Acrobot) cannot
        # amplify ulp-level differences: each step is compared from identical states.
        twin._buffers.state.copy_(reference._buffers.state)


def test_kernels_pass_the_checker(env_id):
    # Short episodes, so that truncation and autoreset happen within the few simulated steps. The
    # tolerance: the simulator's numpy sin/cos (CartPole, Acrobot, Pendulum, the mountain cars'
    # cos) may round differently from torch's (harness.TWIN_RTOL says more).
    params = env_spec(env_id).definition.make_params(max_episode_steps=9)
    check_env(env_id, params, num_envs=4, num_steps=30, backends=KERNEL_BACKENDS_HERE, rtol=TWIN_RTOL, atol=TWIN_ATOL)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS_HERE)
def test_kernel_matches_reference_from_wide_states(env_id, backend):
    """One step from states far outside the reset distribution (hand-set, as set_state allows):
    clipping, wall, wrap and termination branches that random play rarely reaches. From such
    states one step amplifies ulp-level differences (Acrobot's Runge-Kutta stages reach
    accelerations in the thousands), so the tolerance is 1e-3: loose for rounding, tight for a
    wrong branch, whose errors are of order one."""
    envs = [GpuVectorEnv(env_id, 8, device="cpu", backend=b, validate_actions=False) for b in ("torch", backend)]
    generator = torch.Generator().manual_seed(3)
    state = {name: (torch.rand(8, generator=generator) * 2 - 1) * 80 for name in envs[0].state_fields}
    actions = random_actions(envs[0].single_action_space, 8, generator, past_bounds=0.5)  # the clipping branches
    results = []
    for env in envs:
        env.set_state(state)
        results.append(snapshot(env.step(actions)))
    context = f"{env_id} {backend} from wide states"
    for name, expected, actual in zip(("observations", "rewards", "terminated", "truncated"), *results):
        assert_close(name, expected, actual, context, rtol=1e-3, atol=1e-3)
    for name in envs[0].state_fields:
        assert_close(name, envs[0].get_state()[name], envs[1].get_state()[name], context, rtol=1e-3, atol=1e-3)
