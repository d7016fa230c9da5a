"""The fused step + autoreset shared by the multi-agent Numba kernels (twin of multi_agent.cuh, whose
header says what it owns and what a game supplies).

``make_multi_agent_blocks(...)`` closes over a game's device functions and returns ``(step_block,
reset_block)``: device functions that run a whole step (or reset) of env ``blockIdx.x`` with every
thread of the block. A game's two kernels are shells with its own parameter list (checked against
``multi_agent_buffers.step_arguments`` / ``reset_arguments``) that call them with the game's state
arrays as a tuple, ``None`` for the buffers the game does not have (action masks, episode totals).

The game's device functions, each called by every thread of the block with the block synchronised
(they may call ``cuda.syncthreads()`` inside; arrays have their natural shapes, indexed by ``e``):
  shared()                                       -> a tuple of the block's shared arrays
  reset_env(state, sh, e, seed, episode)         a fresh state of env e, t included
  step_env(state, sh, e, actions, rewards)       -> (terminated, truncated), the same in every thread;
                                                  writes rewards[e, :], advances t, clamps actions
  in_game(state, sh, e, a)                       -> whether agent a is still playing
  observe_env(state, sh, e, observations, masks) writes observations[e, :] and, unless masks is
                                                  None, masks[e, :] (bool)
  totals_env(state, sh, e, totals)               writes totals[e, :] (optional: games with metrics)
"""

import numpy as np
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.kernels.numba_api import cuda

NEXT_STEP = AUTORESET_CODES[AutoresetMode.NEXT_STEP]
SAME_STEP = AUTORESET_CODES[AutoresetMode.SAME_STEP]
ZERO = np.float32(0.0)


@cuda.jit(device=True)
def _no_totals(state, sh, e, totals):
    """The totals of a game without episode metrics: none to write."""


def make_multi_agent_blocks(num_agents, shared, reset_env, step_env, in_game, observe_env, totals_env=None):
    """-> ``(step_block, reset_block)`` device functions for a game of ``num_agents`` agents."""
    n = num_agents
    write_totals = _no_totals if totals_env is None else totals_env

    @cuda.jit(device=True)
    def reset_episode(state, sh, e, running_returns, episodes, seeds):
        # The game's reset, running returns back to 0, the episode counter advanced; ends synchronised.
        # episodes is read as an unsigned counter (the RNG masks it to 32 bits).
        episode = episodes[e]
        reset_env(state, sh, e, seeds[e], episode)
        for a in range(cuda.threadIdx.x, n, cuda.blockDim.x):
            running_returns[e, a] = ZERO
        cuda.syncthreads()  # every thread has read episodes[e]; the fresh state is visible to the block
        if cuda.threadIdx.x == 0:
            episodes[e] = episode + np.int32(1)

    @cuda.jit(device=True)
    def step_block(num_envs, state, actions, observations, action_masks, rewards, agent_terminated, agent_truncated,
                   terminated, truncated, running_returns, episode_returns, episode_totals, final_observations,
                   final_observation_mask, needs_reset, episodes, seeds, autoreset_mode):
        sh = shared()
        e = cuda.blockIdx.x
        if e >= num_envs:
            return
        tid = cuda.threadIdx.x
        threads = cuda.blockDim.x

        if autoreset_mode == NEXT_STEP and needs_reset[e]:
            # The previous step ended this episode: this step only resets (the actions are ignored).
            reset_episode(state, sh, e, running_returns, episodes, seeds)
            for a in range(tid, n, threads):
                rewards[e, a] = ZERO
                agent_terminated[e, a] = False
                agent_truncated[e, a] = False
            if tid == 0:
                terminated[e] = False
                truncated[e] = False
                needs_reset[e] = False
            observe_env(state, sh, e, observations, action_masks)
            return

        term, trunc = step_env(state, sh, e, actions, rewards)
        done = term or trunc
        cuda.syncthreads()  # the stepped state and every reward are visible (every thread has read needs_reset[e])
        for a in range(tid, n, threads):
            # One float32 addition per step, as the reference's running_returns + rewards.
            total = running_returns[e, a] + rewards[e, a]
            if done:
                episode_returns[e, a] = total
            running_returns[e, a] = ZERO if done else total
            playing = in_game(state, sh, e, a)
            agent_terminated[e, a] = term or not playing
            agent_truncated[e, a] = trunc and playing
        if done:
            write_totals(state, sh, e, episode_totals)
        if tid == 0:
            terminated[e] = term
            truncated[e] = trunc
            if autoreset_mode == SAME_STEP:
                final_observation_mask[e] = done
            else:
                needs_reset[e] = done
        cuda.syncthreads()  # in_game and totals have read what observe_env may overwrite in shared memory
        if autoreset_mode == SAME_STEP and done:
            observe_env(state, sh, e, final_observations, None)
            cuda.syncthreads()  # the final observations have read the state the reset overwrites
            reset_episode(state, sh, e, running_returns, episodes, seeds)
        observe_env(state, sh, e, observations, action_masks)

    @cuda.jit(device=True)
    def reset_block(num_envs, state, observations, action_masks, running_returns, reset_mask, needs_reset, episodes,
                    seeds):
        sh = shared()
        e = cuda.blockIdx.x
        if e >= num_envs or not reset_mask[e]:
            return
        reset_episode(state, sh, e, running_returns, episodes, seeds)
        if cuda.threadIdx.x == 0:
            needs_reset[e] = False
        observe_env(state, sh, e, observations, action_masks)

    return step_block, reset_block
