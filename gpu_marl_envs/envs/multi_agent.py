"""What the runtime needs to know about a multi-agent env (a "game"): a small, plain description.

A game module (e.g. ``tag_continuous.py``) holds its params dataclass, its state dataclass and a
torch reference of ``reset``/``step``/``observe``, and exports one :class:`MultiAgentDefinition`.
Batching, autoreset, seeding, devices, backends, per-agent episode returns and the PettingZoo front
ends live in the runtime.

Conventions every game follows:
- The state is a dataclass of tensors, batch first: per-agent fields ``(num_envs, N)``, per-env
  fields ``(num_envs,)``; the per-env int32 field ``t`` counts the steps since reset.
- Agents have fixed ids ``0 .. N - 1``; a group is a contiguous id range, so a group's slice of a
  batched tensor is a view. Agents of one group share their observation and action spaces; groups
  may differ in both, except that every group's actions are of one kind, so that one buffer
  ``(E, N, *shape)`` holds them all: discrete (``Discrete`` everywhere, or ``MultiDiscrete`` of one
  length; int64, indices from 0) or continuous (float32 ``Box`` of shape ``(d_g,)``, finite bounds;
  float32 ``(E, N, d)`` with ``d`` the widest group's ``d_g``, a group's agents using their first
  ``d_g`` values: MPE2's speaker acts in ``Box(3)``, its listener in ``Box(5)``).
- ``step(p, state, actions) -> (next_state, rewards (E, N), terminated (E,), truncated (E,))`` is pure,
  with discrete actions already in their group's range and continuous ones with NaN read as 0 but
  not clipped (the rules clip them, as the kernels do); ``observe(p, state) -> {group: (E, n_g, d_g)}``;
  ``reset(p, key, E)`` draws from ``key`` (``rng.key_hash(seed, episode)`` per env). None of them
  synchronises with the host.
- The runtime keeps observations in one flat float32 buffer ``(E, obs_size)``: per env the groups in
  order, each ``(n_g, d_g)`` row-major (:meth:`MultiAgentDefinition.observation_layout`). Action
  masks, where a game has them, likewise in one bool buffer ``(E, mask_size)``.
- ``in_game(p, state)``: bool ``(E, N)``, whether each agent is still playing (the batched API's
  ``active`` mask; by default every agent plays the whole episode). Agents out of the game are
  individually terminated.
- ``global_state(p, observations)``: float32 ``(E, S)``, the game's global state (PettingZoo's
  ``state()``, a centralised critic's input), computed from the flat observation buffer, so that
  every backend has it and SAME_STEP's final observations give the final state; by default the
  buffer itself, the concatenation of every agent's observation (MPE2's ``state()``).
- ``episode_totals(p, state)``: float32 ``(E, K)``, one column per name of ``episode_metrics(p)``,
  evaluated on the state right after a step (before any autoreset): the game keeps the
  accumulators it needs in its state.
- Kernels receive the params as compile-time constants (``kernel_constants``, by default every
  number field of the params): a kernel is built per params, so shared-memory arrays are sized by
  the number of agents and constants fold. The torch reference receives the params object itself,
  the one ``env.params`` holds (float32 values where it is a
  :func:`~gpu_marl_envs.envs.params.params_dataclass`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs.envs.definition import apply_settings
from gpu_marl_envs.envs.params import params_constants


def no_metrics(params) -> tuple[str, ...]:
    """The default ``episode_metrics``: a game with no episode totals."""
    return ()


def no_dynamic_shared(params) -> int:
    """The default ``dynamic_shared_bytes``: a game whose kernels use static shared memory only."""
    return 0


def no_state_ranges(params) -> dict[str, tuple[int, int]]:
    """The default ``state_ranges``: no integer state field that the rules index with."""
    return {}


def one_group(params) -> dict[str, range]:
    """The default ``agent_groups``: every agent in one group, ``agents``."""
    return {"agents": range(params.num_agents)}


def everyone_in_game(params, state) -> torch.Tensor:
    """The default ``in_game``: every agent plays until the episode ends, bool ``(E, N)``."""
    return torch.ones((state.t.shape[0], params.num_agents), dtype=torch.bool, device=state.t.device)


def whole_warps(num_agents: int, most: int) -> int:
    """Threads of a block per env: a thread per agent in whole warps, at most ``most`` (envs with
    more agents spread them over the block's threads)."""
    return min(most, 32 * ((num_agents + 31) // 32))


def one_game_per_block(params) -> int:
    """The default ``games_per_block``: a block per env."""
    return 1


def thread_per_agent(params) -> int:
    """The default ``block_threads``: a thread per agent in whole warps, at most 256."""
    return whole_warps(params.num_agents, 256)


class GroupSlice(NamedTuple):
    """Where one group sits in a flat per-env buffer: ``count`` agents of ``size`` values each,
    from ``start`` (row-major, so agent ``k`` of the group is ``start + k * size``)."""

    start: int
    count: int
    size: int

    @property
    def stop(self) -> int:
        return self.start + self.count * self.size


@dataclass(frozen=True)
class MultiAgentDefinition:
    id: str
    """Name and version without the namespace, e.g. ``"TagContinuous-v0"``."""
    params_type: type
    """Frozen dataclass of the game's constants, validating itself (a
    :func:`~gpu_marl_envs.envs.params.params_dataclass` checks the ranges its fields declare); its
    defaults are the published configuration. The runtime reads two of its attributes: ``num_agents``
    (``N``, the agents of every group together) and ``episode_length`` (``T``, the bound of ``state.t``)."""
    state_type: type
    """Dataclass of tensors, batch first, with the per-env int32 field ``t``; its field order is the
    order of the kernels' state struct (CUDA C ``GmeState``, the Numba ``state`` tuple)."""
    observation_spaces: Callable[[Any], dict[str, spaces.Box]]
    """``p -> {group: one agent's observation space}`` (a 1-D float32 ``Box``), groups in order."""
    action_spaces: Callable[[Any], dict[str, spaces.Space]]
    """``p -> {group: one agent's action space}``: ``Discrete`` or ``MultiDiscrete`` (indices from 0),
    every group of one shape; or float32 1-D ``Box`` with finite bounds, of any width per group."""
    reset: Callable
    """``(p, key, E) -> state``: ``key`` int64 ``(E,)``, to draw from with :mod:`gpu_marl_envs.rng`."""
    step: Callable
    """``(p, state, actions) -> (next_state, rewards (E, N) float32, terminated (E,), truncated (E,))``."""
    observe: Callable
    """``(p, state) -> {group: float32 (E, n_g, d_g)}``."""
    agent_groups: Callable[[Any], dict[str, range]] = one_group
    """``p -> {group: ids}``, contiguous ranges covering ``0 .. N - 1`` in order; agents are named
    ``<group in the singular>_<k>`` (``runners`` -> ``runner_0``, ``adversaries`` -> ``adversary_0``).
    By default one group, ``agents`` (``agent_0 .. agent_{N-1}``)."""
    kernel_constants: Callable[[Any], dict[str, Any]] = params_constants
    """``p -> {NAME: value}``, the kernels' compile-time constants: bool, int, float or a tuple of
    floats or of ints. Floats reach the kernels rounded once to float32, as the reference should use
    them. By default every number field of the params (and ``num_agents``, ``episode_length``) in
    UPPER_CASE (:func:`~gpu_marl_envs.envs.params.params_constants`); a game with constants of its own
    adds them, ``lambda p: params_constants(p, DIM=2 + 4 * p.num_agents)``."""
    in_game: Callable[[Any, Any], torch.Tensor] = everyone_in_game
    """``(p, state) -> bool (E, N)``: whether each agent still plays."""
    constant_prefix: str = "GAME"
    """CUDA C sees constant ``NAME`` as the macro ``<prefix>_NAME``."""
    block_threads: Callable[[Any], int] = thread_per_agent
    """``p -> threads`` of the kernels per env, its team (agents are spread over them)."""
    games_per_block: Callable[[Any], int] = one_game_per_block
    """``p -> envs`` whose teams share one block of the CUDA C kernels (``block_threads`` then a
    power of two up to 32, no dynamic shared memory, and the game's .cu written with
    ``gme_lane()``, ``gme_lanes()``, ``gme_sync()``: ``kernels/multi_agent.cuh``). For games of few
    agents, whose one-env blocks would leave most of an SM's threads idle. Numba packs them alike
    where the game's Numba module is written for it (``PACKS_GAMES``: ``kernels/multi_agent_numba.py``),
    else runs a block of one warp per env."""
    action_masks: Callable[[Any, Any], dict[str, torch.Tensor]] | None = None
    """``(p, state) -> {group: bool (E, n_g, A_g)}``: the actions each agent may take now (``A_g``
    = the group's ``Discrete`` size), or ``None`` for a game without masks."""
    episode_metrics: Callable[[Any], tuple[str, ...]] = no_metrics
    """``p -> names`` of the game's episode totals (empty: none)."""
    episode_totals: Callable[[Any, Any], torch.Tensor] | None = None
    """``(p, state) -> float32 (E, K)``, ``K = len(episode_metrics(p))``; needed when ``K > 0``."""
    global_state: Callable[[Any, torch.Tensor], torch.Tensor] | None = None
    """``(p, observations (E, obs_size)) -> float32 (E, S)``: the global state from the flat
    observations (e.g. a slice of them: a view, no copy), or ``None`` for their concatenation, the
    observation buffer itself. Pure torch, no host synchronisation (trainers capture it)."""
    global_state_space: Callable[[Any], spaces.Box] | None = None
    """``p -> Box (S,)`` of :attr:`global_state`; needed with it."""
    dynamic_shared_bytes: Callable[[Any], int] = no_dynamic_shared
    """``p -> bytes`` of dynamic shared memory the backends launch a block of the kernels with
    (``extern __shared__`` in CUDA C, ``cuda.shared.array(0, ...)`` in Numba): static and dynamic
    together may reach the GPU's opt-in limit (:func:`multi_agent_buffers.shared_memory_limit`).
    Static shared memory (the game's ``Shared`` struct, its ``shared()`` arrays) is read from the
    compiled kernels."""
    state_ranges: Callable[[Any], dict[str, tuple[int, int]]] = no_state_ranges
    """``p -> {field: (low, high)}``: the inclusive range of each integer state field that the rules
    index with (speaker-listener's goal picks a landmark). ``set_state`` refuses a value outside it,
    which the kernels would read out of bounds."""

    @property
    def state_fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.state_type))

    @property
    def has_action_masks(self) -> bool:
        return self.action_masks is not None

    # The method caches (B019) keep their definition alive: definitions are registered once and live
    # as long as the process anyway.
    @functools.cache  # noqa: B019
    def state_dtypes(self, params) -> dict[str, torch.dtype]:
        """Each state field's dtype, as the reference's ``reset`` makes it (the kernels' types)."""
        state = self.reset(params, torch.zeros(1, dtype=torch.int64), 1)
        return {name: getattr(state, name).dtype for name in self.state_fields}

    def agent_names(self, params) -> list[str]:
        """``<group in the singular>_<index within the group>``, e.g. ``tagger_0``, ``runner_3``,
        ``adversary_0`` (:func:`singular`)."""
        return [f"{singular(group)}_{k}" for group, ids in self.agent_groups(params).items() for k in range(len(ids))]

    # Cached: the torch backend flattens observations and masks every step, and building a game's
    # spaces takes tens of microseconds (params are frozen, hence hashable).
    @functools.cache  # noqa: B019
    def observation_layout(self, params) -> dict[str, GroupSlice]:
        """Each group's place in the flat observation buffer ``(E, obs_size)``."""
        return _layout(
            self.agent_groups(params), {g: int(space.shape[0]) for g, space in self.observation_spaces(params).items()}
        )

    @functools.cache  # noqa: B019
    def mask_layout(self, params) -> dict[str, GroupSlice]:
        """Each group's place in the flat action-mask buffer ``(E, mask_size)`` (games with masks)."""
        return _layout(self.agent_groups(params), {g: int(space.n) for g, space in self.action_spaces(params).items()})

    def obs_size(self, params) -> int:
        return sum(s.count * s.size for s in self.observation_layout(params).values())

    def mask_size(self, params) -> int:
        return sum(s.count * s.size for s in self.mask_layout(params).values()) if self.has_action_masks else 0

    @functools.cache  # noqa: B019
    def state_space(self, params) -> spaces.Box:
        """One game's global state space: :attr:`global_state_space`, or by default every agent's
        observation space side by side, in the flat observation layout."""
        if self.global_state_space is not None:
            return self.global_state_space(params)
        groups, layout = self.observation_spaces(params), self.observation_layout(params)
        bounds = [[np.tile(getattr(groups[g], side), s.count) for g, s in layout.items()] for side in ("low", "high")]
        return spaces.Box(np.concatenate(bounds[0]), np.concatenate(bounds[1]), dtype=np.float32)

    def flat_global_state(self, params, observations: torch.Tensor) -> torch.Tensor:
        """The global state ``(E, S)`` of flat observations ``(E, obs_size)`` (the buffer itself by default)."""
        return observations if self.global_state is None else self.global_state(params, observations)

    def action_shape(self, params) -> tuple[int, ...]:
        """The shape of one agent's row in the actions buffer ``(E, N, *shape)``: every group's one
        shape in a discrete game, ``(d,)`` of the widest group in a ``Box`` game."""
        action_spaces = self.action_spaces(params)
        if self.continuous_actions(params):
            return (max(space.shape[0] for space in action_spaces.values()),)
        return next(iter(action_spaces.values())).shape

    def continuous_actions(self, params) -> bool:
        """Whether the game's actions are float32 ``Box`` values (else int64 indices), checked to be
        of one kind the framework runs (:func:`check_action_spaces`)."""
        return check_action_spaces(self.id, self.action_spaces(params))

    def action_dtype(self, params) -> torch.dtype:
        """The actions buffer's dtype: float32 for ``Box`` games, int64 for discrete ones."""
        return torch.float32 if self.continuous_actions(params) else torch.int64

    def action_high(self, params) -> torch.Tensor:
        """``(N, *action_shape)``: each agent's largest valid value per action component (int64
        indices of discrete games, float32 bounds of ``Box`` games)."""
        return self._per_agent(params, "high")

    def action_low(self, params) -> torch.Tensor:
        """``(N, *action_shape)``: each agent's smallest valid value (0 for discrete games)."""
        return self._per_agent(params, "low")

    def _per_agent(self, params, side: str) -> torch.Tensor:
        rows, width = [], self.action_shape(params)
        for group, space in self.action_spaces(params).items():
            if isinstance(space, spaces.Box):
                # A narrower group's unused values are 0 in the buffer: bounds of 0 accept them.
                value = torch.zeros(width, dtype=torch.float32)
                value[: space.shape[0]] = torch.as_tensor(getattr(space, side), dtype=torch.float32)
            elif side == "low":
                value = torch.zeros(space.shape, dtype=torch.int64)
            else:
                value = torch.as_tensor(space.nvec if isinstance(space, spaces.MultiDiscrete) else space.n) - 1
            rows.append(value.to(self.action_dtype(params)).expand(len(self.agent_groups(params)[group]), *value.shape))
        return torch.cat(rows)

    def make_params(self, params: Any = None, **settings: Any) -> Any:
        """``params`` (default: the defaults) with ``settings``, fields of :attr:`params_type` by name
        (``make_params(num_runners=20)``), applied on top, validated as ``params=`` is
        (:func:`~gpu_marl_envs.envs.definition.apply_settings`)."""
        return apply_settings(self.params_type, params, settings)

    def flat_observations(self, params, state) -> torch.Tensor:
        """``observe`` in the runtime's flat layout, float32 ``(E, obs_size)``."""
        return _flatten(self.observe(params, state), self.observation_layout(params), "observe")

    def flat_action_masks(self, params, state) -> torch.Tensor:
        """``action_masks`` in the runtime's flat layout, bool ``(E, mask_size)``."""
        return _flatten(self.action_masks(params, state), self.mask_layout(params), "action_masks")


def singular(group: str) -> str:
    """A group's name in the singular, as its agents are named: a final ``ies`` becomes ``y``
    (``adversaries``, MPE2's ``adversary_0``), a final ``s`` goes (``runners``); others stay."""
    if group.endswith("ies"):
        return group[:-3] + "y"
    return group.removesuffix("s")


def check_action_spaces(game_id: str, action_spaces: dict[str, spaces.Space]) -> bool:
    """Whether the groups' action spaces are continuous (float32 ``Box``) rather than discrete;
    ``ValueError`` naming what the framework runs when they are of no kind it runs."""
    supported = (
        "a game's action spaces are Discrete or MultiDiscrete (starting at 0) of one shape in every group, "
        "or float32 1-D Box with finite bounds (of any width) in every group"
    )
    kinds = set()
    for group, space in action_spaces.items():
        if isinstance(space, spaces.Box) and space.dtype == np.float32 and len(space.shape) == 1:
            if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
                raise ValueError(f"{game_id}: group {group!r} has {space}; {supported}")
            kinds.add("continuous")
        elif isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)) and not np.any(space.start):
            kinds.add("discrete")
        else:
            raise ValueError(f"{game_id}: group {group!r} has {space}; {supported}")
    shapes = {tuple(space.shape) for space in action_spaces.values()}
    if len(kinds) != 1 or (kinds == {"discrete"} and len(shapes) != 1):
        raise ValueError(f"{game_id}: the groups' action spaces are {action_spaces}; {supported}")
    return kinds == {"continuous"}


def split_groups(groups: dict[str, range], tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{group: tensor[:, ids]}`` (views) of a tensor whose dimension 1 is the agents: for games
    whose reference computes every agent's observation in one ``(E, N, d)`` tensor."""
    return {group: tensor[:, ids.start : ids.stop] for group, ids in groups.items()}


def _layout(groups: dict[str, range], sizes: dict[str, int]) -> dict[str, GroupSlice]:
    if list(sizes) != list(groups):
        raise ValueError(f"spaces are given for groups {list(sizes)}, the game has {list(groups)} (in that order)")
    layout, start = {}, 0
    for group, ids in groups.items():
        layout[group] = GroupSlice(start, len(ids), sizes[group])
        start = layout[group].stop
    return layout


def _flatten(per_group: dict[str, torch.Tensor], layout: dict[str, GroupSlice], what: str) -> torch.Tensor:
    if list(per_group) != list(layout):
        raise ValueError(f"{what} returned groups {list(per_group)}, expected {list(layout)} (in that order)")
    parts = []
    for group, s in layout.items():
        value = per_group[group]
        if tuple(value.shape[1:]) != (s.count, s.size):
            raise ValueError(f"{what}[{group!r}] has shape {tuple(value.shape)}, expected (E, {s.count}, {s.size})")
        parts.append(value.reshape(value.shape[0], -1))
    return torch.cat(parts, dim=1)
