"""The device store of a batch of single-agent envs: every tensor a step reads or writes,
allocated once and updated in place by the backends.

``STEP_ARGUMENTS`` and ``RESET_ARGUMENTS`` are the kernels' parameter lists. Each name is an
attribute of :class:`ClassicBuffers`, except ``num_envs``, ``actions``, ``autoreset_mode`` and
``params``, which the backends supply; ``tests/test_kernel_abi.py`` checks that the Numba and
CUDA C kernels declare exactly these parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Threads per block of every classic kernel launch (CUDA C sizes shared memory with it).
THREADS_PER_BLOCK = 256

STEP_ARGUMENTS = (
    "num_envs",
    "state",
    "actions",
    "observations",
    "rewards",
    "terminated",
    "truncated",
    "final_observations",
    "final_observation_mask",
    "elapsed_steps",
    "needs_reset",
    "episodes",
    "seeds",
    "autoreset_mode",
    "params",
)
RESET_ARGUMENTS = (
    "num_envs",
    "state",
    "observations",
    "reset_mask",
    "elapsed_steps",
    "needs_reset",
    "episodes",
    "seeds",
    "params",
)


@dataclass
class ClassicBuffers:
    state: torch.Tensor  # (num_state_fields, num_envs) float32, a row per field
    observations: torch.Tensor  # (num_envs, obs_dim) float32
    rewards: torch.Tensor  # (num_envs,) float32
    terminated: torch.Tensor  # (num_envs,) bool
    truncated: torch.Tensor  # (num_envs,) bool
    final_observations: torch.Tensor  # (num_envs, obs_dim): rows valid where final_observation_mask
    final_observation_mask: torch.Tensor  # (num_envs,) bool, written in SAME_STEP mode
    elapsed_steps: torch.Tensor  # (num_envs,) int32, steps since the episode's reset
    needs_reset: torch.Tensor  # (num_envs,) bool: the last step ended the episode (NEXT_STEP mode)
    episodes: torch.Tensor  # (num_envs,) int32, resets so far under the current seed (RNG counter)
    seeds: torch.Tensor  # (num_envs,) int64
    reset_mask: torch.Tensor  # (num_envs,) bool, input of the reset kernel

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every buffer by its kernel-argument name."""
        return dict(vars(self))

    @classmethod
    def allocate(cls, num_envs: int, num_fields: int, obs_dim: int, device: torch.device) -> ClassicBuffers:
        def zeros(*shape, dtype=torch.float32):
            return torch.zeros(shape, dtype=dtype, device=device)

        return cls(
            state=zeros(num_fields, num_envs),
            observations=zeros(num_envs, obs_dim),
            rewards=zeros(num_envs),
            terminated=zeros(num_envs, dtype=torch.bool),
            truncated=zeros(num_envs, dtype=torch.bool),
            final_observations=zeros(num_envs, obs_dim),
            final_observation_mask=zeros(num_envs, dtype=torch.bool),
            elapsed_steps=zeros(num_envs, dtype=torch.int32),
            needs_reset=zeros(num_envs, dtype=torch.bool),
            episodes=zeros(num_envs, dtype=torch.int32),
            seeds=zeros(num_envs, dtype=torch.int64),
            reset_mask=zeros(num_envs, dtype=torch.bool),
        )
