"""The device store of a batch of multi-agent games: the game's state plus every tensor a step
writes, allocated once and updated in place by the backends.

The kernels' parameter lists are ``STEP_ARGUMENTS`` and ``RESET_ARGUMENTS``, the same for every
game: ``state`` is the game's state arrays in its state dataclass's order (a parameter per field in
CUDA C, one tuple of arrays in Numba); ``action_masks`` and ``episode_totals`` are passed to games
without them too (a null pointer, a one-element array), never read. ``num_envs``, ``actions`` and
``autoreset_mode`` are supplied by the backends; every other name is an attribute of
:class:`MultiAgentBuffers`. The framework declares the kernels (``kernels/multi_agent.cuh``,
``kernels/multi_agent_numba.py``); ``tests/test_kernel_abi.py`` checks both against these lists.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition

# Static shared memory per block at most, and the shared memory of any kind a block gets without
# opting in to more, on every CUDA GPU.
MAX_SHARED_BYTES = 48 * 1024


def shared_memory_limit(device: torch.device) -> int:
    """Bytes of shared memory (static and dynamic) one block of a game's kernels may use on
    ``device``: the GPU's opt-in maximum (227 KiB on an H100 or H200), which the backends opt the
    kernels in to; on the CPU, where only Numba's simulator runs them, the 48 KiB any GPU gives."""
    if device.type != "cuda":
        return MAX_SHARED_BYTES
    return torch.cuda.get_device_properties(device).shared_memory_per_block_optin


def check_shared_memory(
    definition: MultiAgentDefinition, params, device: torch.device, backend: str, static_bytes: int = 0
) -> None:
    """Refuse a game whose kernels need more shared memory per block than ``device`` gives one
    (which is what bounds the agents per game), naming the limit: the game's dynamic shared memory,
    and the kernels' static shared memory (``static_bytes``) once they are compiled."""
    dynamic = definition.dynamic_shared_bytes(params)
    # Static shared memory has a limit of its own, every GPU's 48 KiB.
    limit = MAX_SHARED_BYTES if static_bytes > MAX_SHARED_BYTES else shared_memory_limit(device)
    if static_bytes + dynamic > limit:
        where = "this GPU's" if device.type == "cuda" else "the CPU simulator's (any GPU's default)"
        raise ValueError(
            f"{params.num_agents} agents per env need {static_bytes + dynamic} bytes of shared memory "
            f"per block in the {backend} kernels of {definition.id}, more than {where} limit of {limit} "
            "bytes; use fewer agents or backend='torch'"
        )


STAGED_BYTES = 32 * 1024
"""The most shared memory a packed block's staged rows may take (kernels/multi_agent.cuh,
gme_multi_agent_step): its observations, and per agent a reward, a running return and two flags;
with the game's own shared arrays they must stay under a block's 48 KB of static shared memory."""

STAGED_AGENT_BYTES = 4 + 4 + 1 + 1
"""An agent's staged bytes: its reward, its running return, its terminated and truncated flags."""

STAGED_AGENTS_PER_LANE = 8
"""The most agents a lane of a staged step's team holds the running returns of, in registers."""


def staged_row_bytes(obs_size: int, num_agents: int) -> int:
    """An env's staged bytes: its observations (``obs_size`` floats) and its agents' staged outputs."""
    return 4 * obs_size + STAGED_AGENT_BYTES * num_agents


def stages_rows(definition, params, games: int, lanes: int) -> bool:
    """Whether the step kernel of ``games`` envs to a block, ``lanes`` each, stages the block's
    observations and per-agent outputs in shared memory (both backends' rule; a block of one env never)."""
    row = staged_row_bytes(definition.obs_size(params), params.num_agents)
    return games > 1 and games * row <= STAGED_BYTES and -(-params.num_agents // lanes) <= STAGED_AGENTS_PER_LANE


def can_store_by_warp(definition, params, games: int, lanes: int) -> bool:
    """Whether the step kernel of ``games`` envs to a block, ``lanes`` each, has a build that stores by
    warp (:func:`stores_by_warp`): where it is staged (:func:`stages_rows`) and a lane holds several
    agents, whose rows it would store strided (a 32-byte sector for each of their few bytes)."""
    return -(-params.num_agents // lanes) > 1 and stages_rows(definition, params, games, lanes)


def stores_by_warp(definition, params, games: int, lanes: int, num_envs: int, device: torch.device) -> bool:
    """Whether the step kernel of ``num_envs`` envs, ``games`` a block, ``lanes`` each, stores by warp
    (kernels/multi_agent.cuh, GME_WARP_STORES) its per-agent outputs and the state its game leaves in
    shared memory, as it stores the staged observations: where it can (:func:`can_store_by_warp`)
    and the grid has more blocks than the GPU has SMs, so that the step is bound by the memory's
    throughput; with fewer blocks a warp's latency is the step's time, which the staging lengthens
    (SimpleSpread on an H200: 8.9 µs against 10.9 at 65,536 games, 6.6 against 7.0 at 32,768, 5.5
    against 5.2 at 16,384, 5.2 against 4.5 at 2,048). Never in the CPU simulator, which stages nothing."""
    if device.type != "cuda" or not can_store_by_warp(definition, params, games, lanes):
        return False
    return -(-num_envs // games) > torch.cuda.get_device_properties(device).multi_processor_count


STEP_ARGUMENTS = (
    "num_envs",
    "state",
    "actions",
    "observations",
    "action_masks",
    "rewards",
    "agent_terminated",
    "agent_truncated",
    "terminated",
    "truncated",
    "running_returns",
    "episode_returns",
    "episode_totals",
    "final_observations",
    "final_observation_mask",
    "needs_reset",
    "episodes",
    "seeds",
    "autoreset_mode",
)
RESET_ARGUMENTS = (
    "num_envs",
    "state",
    "observations",
    "action_masks",
    "running_returns",
    "reset_mask",
    "needs_reset",
    "episodes",
    "seeds",
)
GROUP_ARGUMENTS = ("group_actions", "from_groups")
"""The Numba step kernel's parameters after :data:`STEP_ARGUMENTS`: each group's own actions, read in
place of ``actions`` where ``from_groups`` is non-zero (``kernels/multi_agent_numba.py``)."""


@dataclass
class MultiAgentBuffers:
    state: Any  # the game's state dataclass, batch first
    observations: torch.Tensor  # (num_envs, obs_size) float32: per env the groups in order, each (n_g, d_g)
    action_masks: torch.Tensor | None  # (num_envs, mask_size) bool, groups as in observations; None without masks
    rewards: torch.Tensor  # (num_envs, N) float32
    agent_terminated: torch.Tensor  # (num_envs, N) bool: the episode terminated, or the agent left the game
    agent_truncated: torch.Tensor  # (num_envs, N) bool: the episode truncated while the agent was in the game
    terminated: torch.Tensor  # (num_envs,) bool
    truncated: torch.Tensor  # (num_envs,) bool
    running_returns: torch.Tensor  # (num_envs, N) float32: rewards of the episode so far
    episode_returns: torch.Tensor  # (num_envs, N) float32: the last ended episode's returns
    episode_totals: torch.Tensor | None  # (num_envs, K) float32: the last ended episode's totals; None if K = 0
    final_observations: torch.Tensor  # (num_envs, obs_size): valid where final_observation_mask (SAME_STEP)
    final_observation_mask: torch.Tensor  # (num_envs,) bool
    needs_reset: torch.Tensor  # (num_envs,) bool: the last step ended the episode (NEXT_STEP, DISABLED)
    episodes: torch.Tensor  # (num_envs,) int32, resets so far under the current seed (RNG counter)
    seeds: torch.Tensor  # (num_envs,) int64
    reset_mask: torch.Tensor  # (num_envs,) bool, input of the reset kernel

    @classmethod
    def allocate(
        cls, definition: MultiAgentDefinition, params, num_envs: int, device: torch.device
    ) -> MultiAgentBuffers:
        def zeros(*shape, dtype=torch.float32):
            return torch.zeros(shape, dtype=dtype, device=device)

        n, obs_size = params.num_agents, definition.obs_size(params)
        num_metrics = len(definition.episode_metrics(params))
        # A valid state to start from (the seed is irrelevant: reset() overwrites it).
        state = definition.reset(params, torch.zeros(num_envs, dtype=torch.int64, device=device), num_envs)
        state = definition.state_type(
            **{name: getattr(state, name).clone().contiguous() for name in definition.state_fields}
        )
        return cls(
            state=state,
            observations=zeros(num_envs, obs_size),
            action_masks=zeros(num_envs, definition.mask_size(params), dtype=torch.bool)
            if definition.has_action_masks
            else None,
            rewards=zeros(num_envs, n),
            agent_terminated=zeros(num_envs, n, dtype=torch.bool),
            agent_truncated=zeros(num_envs, n, dtype=torch.bool),
            terminated=zeros(num_envs, dtype=torch.bool),
            truncated=zeros(num_envs, dtype=torch.bool),
            running_returns=zeros(num_envs, n),
            episode_returns=zeros(num_envs, n),
            episode_totals=zeros(num_envs, num_metrics) if num_metrics else None,
            final_observations=zeros(num_envs, obs_size),
            final_observation_mask=zeros(num_envs, dtype=torch.bool),
            needs_reset=zeros(num_envs, dtype=torch.bool),
            episodes=zeros(num_envs, dtype=torch.int32),
            seeds=zeros(num_envs, dtype=torch.int64),
            reset_mask=zeros(num_envs, dtype=torch.bool),
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every buffer by its kernel-argument name and every state field by its name (absent buffers
        left out)."""
        named = {name: value for name, value in vars(self).items() if name != "state" and value is not None}
        named.update(vars(self.state))
        return named

    def state_arrays(self) -> tuple[torch.Tensor, ...]:
        """The state's fields in order: the kernels' ``state`` argument."""
        return tuple(getattr(self.state, f.name) for f in fields(self.state))
