"""What the runtime needs to know about a multi-agent env (a "game"): a small, plain description.

A game module (e.g. ``tag_continuous.py``) holds its params dataclass, its state dataclass and a
torch reference of ``reset``/``step``/``observe``, and exports one :class:`MultiAgentDefinition`.
Batching, autoreset, seeding, devices, backends and the PettingZoo front ends live in the runtime.

Conventions every game follows:
- The state is a dataclass of tensors, batch first: per-agent fields ``(num_envs, N)``, per-env
  fields ``(num_envs,)``; the per-env int32 field ``t`` counts the steps since reset.
- Agents have fixed ids ``0 .. N - 1``; a group is a contiguous id range, so a group's slice of a
  batched tensor is a view.
- ``step(p, state, actions) -> (next_state, rewards (E, N), terminated (E,), truncated (E,))`` is pure,
  with actions already in range; ``observe(p, state) -> (E, N, obs_dim)``; ``reset(p, key, E)``
  draws from ``key`` (``rng.key_hash(seed, episode)`` per env). None of them synchronises with the host.
- ``in_game(p, state)``: bool ``(E, N)``, whether each agent is still playing (the batched API's
  ``active`` mask). Agents out of the game are individually terminated.
- Kernels receive the params as compile-time constants (``kernel_constants``): a kernel is built per
  params, so shared-memory arrays are sized by the number of agents and constants fold.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

import torch
from gymnasium import spaces


@dataclass(frozen=True)
class MultiAgentDefinition:
    id: str
    """Id without the namespace, e.g. ``"TagContinuous-v0"``."""
    params_type: type
    state_type: type
    """Dataclass of tensors; its field order is the kernels' argument order."""
    agent_groups: Callable[[Any], dict[str, range]]
    """``p -> {group: ids}``, contiguous ranges covering ``0 .. N - 1`` in order."""
    observation_space: Callable[[Any], spaces.Box]
    """One agent's observation space (every agent of these games shares it)."""
    action_space: Callable[[Any], spaces.Space]
    """One agent's action space (shared by every agent)."""
    reset: Callable
    step: Callable
    observe: Callable
    in_game: Callable[[Any, Any], torch.Tensor]
    kernel_name: str
    """``kernels/<name>.cu`` and ``kernels/<name>_numba.py`` hold the kernels."""
    kernel_constants: Callable[[Any], dict[str, Any]]
    """``p -> {NAME: value}``: bool, int, float (already a float32 value) or a tuple of floats."""
    constant_prefix: str
    """CUDA C sees constant ``NAME`` as the macro ``<prefix>_NAME``."""
    shared_bytes: Callable[[Any], int]
    """``p -> bytes`` of static shared memory a block of the kernels uses (at most 48 KiB)."""
    block_threads: Callable[[Any], int]
    """``p -> threads`` of the kernels' block per env (agents are spread over them)."""

    @property
    def state_fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.state_type))

    def agent_names(self, params) -> list[str]:
        """``<group without its plural s>_<index within the group>``, e.g. ``tagger_0``, ``runner_3``."""
        return [f"{group.removesuffix('s')}_{k}" for group, ids in self.agent_groups(params).items()
                for k in range(len(ids))]

    def action_shape(self, params) -> tuple[int, ...]:
        return self.action_space(params).shape

    def make_params(self, params: Any = None) -> Any:
        if params is None:
            return self.params_type()
        if not isinstance(params, self.params_type):
            raise TypeError(f"params must be a {self.params_type.__name__}, got {type(params).__name__}")
        return params

    def clamp_actions(self, params, actions: torch.Tensor) -> torch.Tensor:
        """Out-of-range discrete indices clamped into range, as every kernel does."""
        space = self.action_space(params)
        if isinstance(space, spaces.Discrete):
            return actions.clamp(0, int(space.n) - 1)
        # Column by column with Python bounds: no host-to-device copy, so a CUDA graph can capture it.
        return torch.stack([actions[..., c].clamp(0, int(n) - 1) for c, n in enumerate(space.nvec)], dim=-1)
