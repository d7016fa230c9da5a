"""The fused step + autoreset shared by the Numba classic-control kernels (twin of classic.cuh).

``make_classic_kernels(reset, step, observe, obs_dim)`` closes over an env's three device functions:
  reset(state, n, i, seed, episode, p)                 writes the state rows of env i
  step(state, n, i, actions, p) -> (reward, terminated) advances env i in place
  observe(state, n, i, obs_row, p)                     writes env i's observation
and returns ``(<env>_step, <env>_reset)`` kernels whose parameters are the runtime's argument list.
"""

import numpy as np
from numba import float32

from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.buffers import THREADS_PER_BLOCK
from gpu_marl_envs.kernels.numba_api import cuda
from gymnasium.vector import AutoresetMode

NEXT_STEP = AUTORESET_CODES[AutoresetMode.NEXT_STEP]
SAME_STEP = AUTORESET_CODES[AutoresetMode.SAME_STEP]


def make_classic_kernels(env_reset, env_step, env_observe, obs_dim):
    staged_size = THREADS_PER_BLOCK * obs_dim

    @cuda.jit(device=True)
    def reset_env(state, n, i, obs, elapsed_steps, needs_reset, episodes, seeds, p):
        episode = episodes[i]
        env_reset(state, n, i, seeds[i], episode, p)
        episodes[i] = episode + np.uint32(1)
        env_observe(state, n, i, obs, p)
        elapsed_steps[i] = 0
        needs_reset[i] = False

    @cuda.jit
    def step(num_envs, state, actions, observations, rewards, terminated, truncated, final_observations,
             final_observation_mask, elapsed_steps, needs_reset, episodes, seeds, autoreset_mode, params):
        # Observations are staged in shared memory and written back by the whole block, so that
        # consecutive threads store consecutive words (see classic.cuh).
        staged = cuda.shared.array(staged_size, dtype=float32)
        tid = cuda.threadIdx.x
        i = cuda.grid(1)
        obs = staged[tid * obs_dim:(tid + 1) * obs_dim]
        p = params[0]
        if i < num_envs:
            if autoreset_mode == NEXT_STEP and needs_reset[i]:
                # The previous step ended this episode: this step only resets (the action is ignored).
                reset_env(state, num_envs, i, obs, elapsed_steps, needs_reset, episodes, seeds, p)
                rewards[i] = np.float32(0.0)
                terminated[i] = False
                truncated[i] = False
            else:
                reward, term = env_step(state, num_envs, i, actions, p)
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
                        env_observe(state, num_envs, i, final_observations[i], p)
                        reset_env(state, num_envs, i, obs, elapsed_steps, needs_reset, episodes, seeds, p)
                    else:
                        env_observe(state, num_envs, i, obs, p)
                else:
                    needs_reset[i] = done
                    env_observe(state, num_envs, i, obs, p)
        cuda.syncthreads()
        first_env = cuda.blockIdx.x * cuda.blockDim.x
        count = min(cuda.blockDim.x, num_envs - first_env) * obs_dim
        flat = observations.reshape(observations.size)
        for k in range(tid, count, cuda.blockDim.x):
            flat[first_env * obs_dim + k] = staged[k]

    @cuda.jit
    def reset(num_envs, state, observations, reset_mask, elapsed_steps, needs_reset, episodes, seeds, params):
        i = cuda.grid(1)
        if i >= num_envs or not reset_mask[i]:
            return
        reset_env(state, num_envs, i, observations[i], elapsed_steps, needs_reset, episodes, seeds, params[0])

    return step, reset
