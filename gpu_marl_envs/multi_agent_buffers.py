"""The device store of a batch of multi-agent games: the game's state plus every tensor a step
writes, allocated once and updated in place by the backends.

The kernels' parameter lists are ``step_arguments(definition)`` and ``reset_arguments(definition)``:
the game's state fields (in its state dataclass's order) sit between the runtime's own buffers.
``num_envs``, ``actions`` and ``autoreset_mode`` are supplied by the backends; every other name is
an attribute of :class:`MultiAgentBuffers` (state fields: of ``buffers.state``).
``tests/test_kernel_abi.py`` checks that the kernels declare exactly these parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition

# Kernels stage per-agent positions and flags in static shared memory sized by the number of
# agents (MultiAgentDefinition.shared_bytes), which CUDA caps at 48 KiB per block.
MAX_SHARED_BYTES = 48 * 1024


def whole_warps(num_agents: int, most: int) -> int:
    """Threads of a block per env: a thread per agent in whole warps, at most ``most`` (envs with
    more agents spread them over the block's threads)."""
    return min(most, 32 * ((num_agents + 31) // 32))


def step_arguments(definition: MultiAgentDefinition) -> tuple[str, ...]:
    return ("num_envs", *definition.state_fields, "actions", "observations", "rewards", "agent_terminated",
            "agent_truncated", "terminated", "truncated", "final_observations", "final_observation_mask",
            "needs_reset", "episodes", "seeds", "autoreset_mode")


def reset_arguments(definition: MultiAgentDefinition) -> tuple[str, ...]:
    return ("num_envs", *definition.state_fields, "observations", "reset_mask", "needs_reset", "episodes", "seeds")


@dataclass
class MultiAgentBuffers:
    state: Any  # the game's state dataclass, batch first
    observations: torch.Tensor  # (num_envs, N, obs_dim) float32
    rewards: torch.Tensor  # (num_envs, N) float32
    agent_terminated: torch.Tensor  # (num_envs, N) bool: the episode terminated, or the agent left the game
    agent_truncated: torch.Tensor  # (num_envs, N) bool: the episode truncated while the agent was in the game
    terminated: torch.Tensor  # (num_envs,) bool
    truncated: torch.Tensor  # (num_envs,) bool
    final_observations: torch.Tensor  # (num_envs, N, obs_dim): valid where final_observation_mask (SAME_STEP)
    final_observation_mask: torch.Tensor  # (num_envs,) bool
    needs_reset: torch.Tensor  # (num_envs,) bool: the last step ended the episode (NEXT_STEP, DISABLED)
    episodes: torch.Tensor  # (num_envs,) int32, resets so far under the current seed (RNG counter)
    seeds: torch.Tensor  # (num_envs,) int64
    reset_mask: torch.Tensor  # (num_envs,) bool, input of the reset kernel

    @classmethod
    def allocate(cls, definition: MultiAgentDefinition, params, num_envs: int,
                 device: torch.device) -> "MultiAgentBuffers":
        def zeros(*shape, dtype=torch.float32):
            return torch.zeros(shape, dtype=dtype, device=device)

        n, obs_dim = params.num_agents, params.obs_dim
        # A valid state to start from (the seed is irrelevant: reset() overwrites it).
        state = definition.reset(params, torch.zeros(num_envs, dtype=torch.int64, device=device), num_envs)
        state = definition.state_type(**{name: getattr(state, name).clone().contiguous()
                                         for name in definition.state_fields})
        return cls(
            state=state,
            observations=zeros(num_envs, n, obs_dim),
            rewards=zeros(num_envs, n),
            agent_terminated=zeros(num_envs, n, dtype=torch.bool),
            agent_truncated=zeros(num_envs, n, dtype=torch.bool),
            terminated=zeros(num_envs, dtype=torch.bool),
            truncated=zeros(num_envs, dtype=torch.bool),
            final_observations=zeros(num_envs, n, obs_dim),
            final_observation_mask=zeros(num_envs, dtype=torch.bool),
            needs_reset=zeros(num_envs, dtype=torch.bool),
            episodes=zeros(num_envs, dtype=torch.int32),
            seeds=zeros(num_envs, dtype=torch.int64),
            reset_mask=zeros(num_envs, dtype=torch.bool),
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every buffer by its kernel-argument name (state fields included)."""
        named = {name: value for name, value in vars(self).items() if name != "state"}
        named.update(vars(self.state))
        return named
