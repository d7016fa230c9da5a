"""The fused step + autoreset shared by the Numba classic-control kernels (twin of classic.cuh).

An env's Numba module defines three device functions (``@cuda.jit(device=True)``):
  reset(state, n, i, seed, episode, p)                 writes the state rows of env i
  step(state, n, i, actions, p) -> (reward, terminated) advances env i in place
  observe(state, n, i, obs_row, p)                     writes env i's observation
where ``n`` (the number of envs) and ``i`` are ``np.uint32``, ``state`` is the flat array of state rows
(field ``f`` of env ``i`` at ``state[f * n + i]``),
``actions`` the batch's actions and ``p`` the params record (``EnvDefinition.kernel_params`` as fields).
The backend hands them to ``make_classic_kernels``, which returns the ``(<name>_step, <name>_reset)``
kernels whose parameters are the runtime's argument lists (``buffers.STEP_ARGUMENTS``, ``RESET_ARGUMENTS``).
"""

import numpy as np
from gpu_marl_envs.kernels.numba_api import U, cuda, named_kernel, sources_key
from gymnasium.vector import AutoresetMode
from numba import float32

from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.buffers import THREADS_PER_BLOCK

NEXT_STEP = AUTORESET_CODES[AutoresetMode.NEXT_STEP]
SAME_STEP = AUTORESET_CODES[AutoresetMode.SAME_STEP]


def make_classic_kernels(env_reset, env_step, env_observe, obs_dim: int, name: str):
    staged_size = THREADS_PER_BLOCK * obs_dim
    row = U(obs_dim)
    sources = sources_key((env_reset, env_step, env_observe, make_classic_kernels))

    @cuda.jit(device=True)
    def reset_env(state, n, i, obs, elapsed_steps, needs_reset, episodes, seeds, p):
        episode = episodes[i]
        env_reset(state, n, i, seeds[i], episode, p)
        episodes[i] = episode + np.uint32(1)
        env_observe(state, n, i, obs, p)
        elapsed_steps[i] = 0
        needs_reset[i] = False

    def step(
        num_envs,
        state,
        actions,
        observations,
        rewards,
        terminated,
        truncated,
        final_observations,
        final_observation_mask,
        elapsed_steps,
        needs_reset,
        episodes,
        seeds,
        autoreset_mode,
        params,
    ):
        sources  # noqa: B018  (read, so that the on-disk cache keys the kernel on it: named_kernel)
        # Observations are staged in shared memory and written back by the whole block, so that
        # consecutive threads store consecutive words (see classic.cuh).
        staged = cuda.shared.array(staged_size, dtype=float32)
        tid = U(cuda.threadIdx.x)
        i = U(cuda.grid(1))
        n = U(num_envs)
        first = U(tid * row)
        obs = staged[first : U(first + row)]  # this thread's observation row
        p = params[0]
        if i < n:
            if autoreset_mode == NEXT_STEP and needs_reset[i]:
                # The previous step ended this episode: this step only resets (the action is ignored).
                reset_env(state, n, i, obs, elapsed_steps, needs_reset, episodes, seeds, p)
                rewards[i] = np.float32(0.0)
                terminated[i] = False
                truncated[i] = False
            else:
                reward, term = env_step(state, n, i, actions, p)
                elapsed = elapsed_steps[i] + 1
                trunc = elapsed >= p.max_episode_steps
                done = term or trunc
                rewards[i] = reward
                terminated[i] = term
                truncated[i] = trunc
                elapsed_steps[i] = elapsed
                if autoreset_mode == SAME_STEP:
                    final_observation_mask[i] = done
                    if done:
                        env_observe(state, n, i, final_observations[i], p)
                        reset_env(state, n, i, obs, elapsed_steps, needs_reset, episodes, seeds, p)
                    else:
                        env_observe(state, n, i, obs, p)
                else:
                    needs_reset[i] = done
                    env_observe(state, n, i, obs, p)
        cuda.syncthreads()
        threads = U(cuda.blockDim.x)
        first_env = U(U(cuda.blockIdx.x) * threads)
        count = U(min(threads, U(n - first_env)) * row)
        # Two-dimensional stores: a flat view (observations.reshape) would be a call into Numba's
        # reshape helper, linked apart and so never inlined: 136 bytes of stack in every thread.
        k = tid
        while k < count:
            observations[U(first_env + U(k // row)), U(k % row)] = staged[k]
            k = U(k + threads)

    def reset(num_envs, state, observations, reset_mask, elapsed_steps, needs_reset, episodes, seeds, params):
        sources  # noqa: B018
        i = U(cuda.grid(1))
        n = U(num_envs)
        if i >= n or not reset_mask[i]:
            return
        reset_env(state, n, i, observations[i], elapsed_steps, needs_reset, episodes, seeds, params[0])

    return named_kernel(step, f"{name}_step"), named_kernel(reset, f"{name}_reset")
