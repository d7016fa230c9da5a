"""TagGridworld, batched: taggers chase one runner on a grid of integer cells (torch reference).

After WarpDrive's ``TagGridWorld`` (Lan et al., JMLR 2022); the rules are those of
``../shared/specs/tag.md`` (section "TagGridworld"), which fixes them where WarpDrive's backends
disagreed. This module is the reference layer only: params, state and the pure batched functions
``reset``, ``step`` and ``observe`` that every kernel backend is tested against.

## Agents
``N = num_taggers + 1`` agents per env. Ids ``0 .. num_taggers - 1`` are taggers, id ``N - 1`` is
the one runner. Groups (:func:`agent_groups`): ``taggers`` and ``runners``.
The agent type vector (:func:`agent_type`, also ``TagGridworldState.agent_type``) is
**0 = tagger, 1 = runner**, as the spec and WarpDrive's gridworld have it: the inverse of
TagContinuous, where 1 = tagger and 0 = runner.

## Action space
Per agent ``Discrete(5)``: 0 stay, 1 ``+x``, 2 ``-x``, 3 ``+y``, 4 ``-y`` (one cell). Any other
value moves nowhere, like 0 (the runtime clamps actions into range before they get here).

## Observation space
Per agent ``Box(0, 1, (obs_dim,))`` float32; every ``/`` below is a float32 division (not a
multiplication by a reciprocal), so kernels can match it bit for bit.

Full observation (``use_full_observation=True``, the default), ``obs_dim = 4N + 1``:

| index             | feature                                  |
|-------------------|------------------------------------------|
| ``0 .. N-1``      | ``x_j / L`` for every agent ``j`` in id order |
| ``N .. 2N-1``     | ``y_j / L`` for every agent ``j``        |
| ``2N .. 3N-1``    | ``type_j`` (0 tagger, 1 runner)          |
| ``3N .. 4N-1``    | one-hot of the observing agent's id      |
| ``4N``            | ``t / T``                                |

Partial observation (``use_full_observation=False``), ``obs_dim = 6``:

| index | feature |
|-------|---------|
| 0, 1  | own ``x / L``, own ``y / L`` |
| 2, 3  | target's ``x / L``, target's ``y / L`` |
| 4     | own type |
| 5     | ``t / T`` |

A tagger's target is the runner. The runner's target is its nearest tagger by Euclidean distance
between cells, ties going to the lowest id. Distances are compared as exact integer squared
distances ``dx² + dy²`` (in int64): the same order as the Euclidean distance, with no float
rounding to make two backends break a near-tie differently.

## Rewards
Per step, in float32, per agent: ``-wall_hit_penalty`` if its move was clipped on either axis (once,
however many axes were clipped), plus, if the runner was tagged this step, ``+tag_reward_for_tagger``
for **every** tagger and ``-tag_penalty_for_runner`` for the runner (each once, however many taggers
share the runner's cell); otherwise ``-step_cost_for_tagger`` for every tagger and
``+step_cost_for_tagger`` for the runner. Computed as ``tag_term - (wall_hit_penalty if clipped else 0)``.

The runner is tagged when, after every agent has moved, a tagger stands on the runner's cell. Only
cells after the move count: a tagger and the runner that swap cells in one step pass each other.

## Starting state
``t = 0``. By default the published layout: every tagger at ``(L // 2, L // 2)``, the runner at
``(0, 0)``, the same in every env. With ``random_start=True`` every coordinate is drawn
independently per env from the counter-based RNG (:mod:`gpu_marl_envs.rng`) of the env's key:
agent ``i``'s ``x`` is draw ``2 i`` and its ``y`` draw ``2 i + 1``, each
``min(floor(uniform_from_key(key, draw, 0, L + 1)), L)``, i.e. uniform over the cells ``0 .. L``
(the ``min`` catches the float32 rounding of a draw up to ``L + 1``). Agents may start on one
cell; a start on the runner's cell is not a tag (tags are checked after moves only).

## Episode end
Terminated when the runner is tagged. Truncated at ``t >= T`` when not tagged (``t`` counts the
steps since reset, so this is the spec's ``t == T`` for every state an episode reaches; ``>=``
also ends a hand-set state past ``T``). A tag on step ``T`` terminates and does not truncate.

## Step
1. ``t <- t + 1``; every agent moves by its action; each coordinate is clipped to ``[0, L]``; an
   agent with any coordinate clipped pays the wall-hit penalty once. (A ``Discrete(5)`` move changes
   one axis, so two axes are clipped only from a hand-set state already outside the grid.)
2. Tag check and rewards as above.
3. ``terminated``, ``truncated`` as above.
``step`` never synchronises with the host (no ``.item()``, no data-dependent Python branch or loop),
so it can be captured in a CUDA graph.

## Arguments
See :class:`TagGridworldParams`.

## Kernels
``kernels/tag_gridworld.cu`` (CUDA C) and ``kernels/tag_gridworld_numba.py`` (Numba): a block per
env, agents spread over its threads, cells staged in shared memory, the observation block written
by the whole block in consecutive words. See :func:`kernel_constants`.

## Version history
v0: the spec's rules; torch reference, Numba and CUDA C kernels.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import float32, rng
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition, split_groups
from gpu_marl_envs.validation import check_params_numbers

# Actions, as in WarpDrive's gridworld.
STAY, PLUS_X, MINUS_X, PLUS_Y, MINUS_Y = range(5)
NUM_ACTIONS = 5

# Agent types in this game (TagContinuous uses the inverse: 1 = tagger).
TAGGER, RUNNER = 0, 1

# Cells and L + 1 must be exact in float32: the observation divides them, the random start draws
# uniform floats in [0, L + 1).
MAX_GRID_LENGTH = 2**24 - 1


@dataclass(frozen=True)
class TagGridworldParams:
    num_taggers: int = 4
    """Taggers, ids ``0 .. num_taggers - 1``; the one runner is id ``num_taggers``."""
    grid_length: int = 100
    """``L``: cells are the integers ``0 .. L`` on each axis."""
    episode_length: int = 100
    """``T``: the episode truncates after this many steps."""
    wall_hit_penalty: float = 0.1
    """Paid (subtracted) by an agent whose move was clipped at the grid's edge."""
    tag_reward_for_tagger: float = 10.0
    """Paid to every tagger on the step the runner is tagged."""
    tag_penalty_for_runner: float = 5.0
    """Subtracted from the runner's reward on the step it is tagged (a magnitude, >= 0)."""
    step_cost_for_tagger: float = 0.01
    """Subtracted from every tagger, and added to the runner, on every step without a tag."""
    use_full_observation: bool = True
    """Full observation (``4N + 1``) or partial (6); see the module docstring."""
    random_start: bool = False
    """Draw start cells per env from the RNG instead of the published layout."""

    def __post_init__(self):
        name = type(self).__name__
        for field, low in (("num_taggers", 1), ("grid_length", 1), ("episode_length", 1)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name}.{field} must be an integer, got {value!r}")
            if value < low:
                raise ValueError(f"{name}.{field} must be >= {low}, got {value}")
        if self.grid_length > MAX_GRID_LENGTH:
            raise ValueError(
                f"{name}.grid_length must be <= {MAX_GRID_LENGTH} (cells exact in float32), got {self.grid_length}"
            )
        if self.episode_length > np.iinfo(np.int32).max:
            raise ValueError(f"{name}.episode_length must fit in int32, got {self.episode_length}")
        for field in ("wall_hit_penalty", "tag_reward_for_tagger", "tag_penalty_for_runner", "step_cost_for_tagger"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{name}.{field} must be a number, got {value!r}")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"{name}.{field} must be finite and >= 0 (a magnitude; the sign is fixed by the rules), got {value}"
                )
        for field in ("use_full_observation", "random_start"):
            value = getattr(self, field)
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{name}.{field} must be a bool, got {value!r}")
        check_params_numbers(self)  # the kernels' float32 (1e39 passes the ranges above)

    @property
    def num_agents(self) -> int:
        return self.num_taggers + 1

    @property
    def runner_id(self) -> int:
        return self.num_agents - 1

    @property
    def obs_dim(self) -> int:
        return 4 * self.num_agents + 1 if self.use_full_observation else 6


@dataclass
class TagGridworldState:
    x: torch.Tensor
    """(num_envs, N) int32: cell column of each agent, in ``0 .. L``."""
    y: torch.Tensor
    """(num_envs, N) int32: cell row of each agent, in ``0 .. L``."""
    t: torch.Tensor
    """(num_envs,) int32: steps since reset."""

    @property
    def agent_type(self) -> torch.Tensor:
        """(N,) int32: 0 tagger, 1 runner (the same in every env)."""
        return agent_type(self.x.shape[1], self.x.device)


def agent_type(num_agents: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(num_agents,) int32 agent types: ``TAGGER`` (0) for ids below ``num_agents - 1``, ``RUNNER`` (1) for the last."""
    return (torch.arange(num_agents, device=device) == num_agents - 1).to(torch.int32)


def observation_space(p: TagGridworldParams) -> spaces.Box:
    """One agent's observation: every feature lies in [0, 1]."""
    return spaces.Box(0.0, 1.0, (p.obs_dim,), dtype=np.float32)


def action_space(p: TagGridworldParams) -> spaces.Discrete:
    return spaces.Discrete(NUM_ACTIONS)


def agent_groups(p: TagGridworldParams) -> dict[str, range]:
    return {"taggers": range(0, p.num_taggers), "runners": range(p.runner_id, p.num_agents)}


def in_game(p: TagGridworldParams, state: TagGridworldState) -> torch.Tensor:
    """Every agent plays until the episode ends (a tag ends it for all)."""
    return torch.ones(state.x.shape, dtype=torch.bool, device=state.x.device)


def kernel_constants(p: TagGridworldParams) -> dict:
    """The compile-time constants of the kernels, each float already the float32 every backend uses."""
    return {
        "NUM_AGENTS": p.num_agents,
        "NUM_TAGGERS": p.num_taggers,
        "GRID_LENGTH": p.grid_length,
        "EPISODE_LENGTH": p.episode_length,
        "OBS_DIM": p.obs_dim,
        "FULL_OBSERVATION": p.use_full_observation,
        "RANDOM_START": p.random_start,
        "WALL_HIT_PENALTY": float(np.float32(p.wall_hit_penalty)),
        "TAG_REWARD_FOR_TAGGER": float(np.float32(p.tag_reward_for_tagger)),
        "TAG_PENALTY_FOR_RUNNER": float(np.float32(p.tag_penalty_for_runner)),
        "STEP_COST_FOR_TAGGER": float(np.float32(p.step_cost_for_tagger)),
    }


def reset(p: TagGridworldParams, key: torch.Tensor, num_envs: int) -> TagGridworldState:
    """Start states for ``num_envs`` envs; ``key`` (num_envs,) int64 from :func:`rng.key_hash`."""
    n, L, device = p.num_agents, p.grid_length, key.device
    t = torch.zeros(num_envs, dtype=torch.int32, device=device)
    if p.random_start:
        # Agent i: x from draw 2 i, y from draw 2 i + 1 (columns interleave x, y).
        draws = torch.arange(2 * n, dtype=torch.int64, device=device)
        u = rng.uniform_from_key(key.to(torch.int64)[:, None], draws, 0.0, float(L + 1))
        cells = torch.floor(u).to(torch.int32).clamp_(max=L)
        return TagGridworldState(x=cells[:, 0::2].contiguous(), y=cells[:, 1::2].contiguous(), t=t)
    start = torch.full((num_envs, n), L // 2, dtype=torch.int32, device=device)
    start[:, p.runner_id] = 0
    return TagGridworldState(x=start, y=start.clone(), t=t)


def step(p: TagGridworldParams, state: TagGridworldState, actions: torch.Tensor):
    """``(state, actions (E, N) int64) -> (next_state, rewards (E, N) float32, terminated (E,) bool,
    truncated (E,) bool)``. Pure: ``state`` is not modified."""
    L, r = p.grid_length, p.runner_id
    # Moves by comparison rather than a lookup table: no host-to-device copy in a captured graph.
    dx = (actions == PLUS_X).to(torch.int32) - (actions == MINUS_X).to(torch.int32)
    dy = (actions == PLUS_Y).to(torch.int32) - (actions == MINUS_Y).to(torch.int32)
    moved_x = state.x + dx
    moved_y = state.y + dy
    x = moved_x.clamp(0, L)
    y = moved_y.clamp(0, L)
    wall_hit = (x != moved_x) | (y != moved_y)
    t = state.t + 1

    on_runner = (x == x[:, r : r + 1]) & (y == y[:, r : r + 1])
    tagged = on_runner[:, :r].any(dim=1)

    is_runner = agent_type(p.num_agents, x.device).bool()
    # Python scalars round to float32 once here; all arithmetic below is float32.
    tag_term = torch.where(is_runner, -p.tag_penalty_for_runner, p.tag_reward_for_tagger).to(torch.float32)
    step_term = torch.where(is_runner, p.step_cost_for_tagger, -p.step_cost_for_tagger).to(torch.float32)
    rewards = torch.where(tagged[:, None], tag_term, step_term)
    rewards = rewards - wall_hit.to(torch.float32) * p.wall_hit_penalty

    terminated = tagged
    truncated = (t >= p.episode_length) & ~tagged
    return TagGridworldState(x=x, y=y, t=t), rewards, terminated, truncated


def observe(p: TagGridworldParams, state: TagGridworldState) -> torch.Tensor:
    """``(num_envs, N, obs_dim)`` float32 observations, one row per agent (layout in the module docstring)."""
    n, r = p.num_agents, p.runner_id
    x = float32.divide(state.x, p.grid_length)
    y = float32.divide(state.y, p.grid_length)
    time = float32.divide(state.t, p.episode_length)[:, None, None].expand(-1, n, 1)
    types = agent_type(n, state.x.device).to(torch.float32)
    num_envs = x.shape[0]

    if p.use_full_observation:
        shared = torch.cat([x, y, types.expand(num_envs, n)], dim=1)  # (E, 3N)
        one_hot = torch.eye(n, dtype=torch.float32, device=x.device).expand(num_envs, n, n)
        return torch.cat([shared[:, None, :].expand(-1, n, -1), one_hot, time], dim=2)

    # The runner's nearest tagger: exact squared distances; argmin returns the first (lowest id) minimum.
    dx = (state.x[:, :r] - state.x[:, r : r + 1]).to(torch.int64)
    dy = (state.y[:, :r] - state.y[:, r : r + 1]).to(torch.int64)
    nearest = (dx * dx + dy * dy).argmin(dim=1)  # (E,)
    target = torch.full((num_envs, n), r, dtype=torch.int64, device=x.device)
    target[:, r] = nearest
    return torch.stack(
        [
            x,
            y,
            x.gather(1, target),
            y.gather(1, target),
            types.expand(num_envs, n),
            time[:, :, 0],
        ],
        dim=2,
    )


def observation_spaces(p: TagGridworldParams) -> dict[str, spaces.Box]:
    """Every group observes alike: :func:`observation_space` for each."""
    return {group: observation_space(p) for group in agent_groups(p)}


def action_spaces(p: TagGridworldParams) -> dict[str, spaces.Space]:
    """Every group acts alike: :func:`action_space` for each."""
    return {group: action_space(p) for group in agent_groups(p)}


def observe_groups(p: TagGridworldParams, state) -> dict[str, torch.Tensor]:
    """:func:`observe` split by group, ``{group: (E, n_g, obs_dim)}`` (the runtime's form)."""
    return split_groups(agent_groups(p), observe(p, state))


TAG_GRIDWORLD = MultiAgentDefinition(
    id="TagGridworld-v0",
    params_type=TagGridworldParams,
    state_type=TagGridworldState,
    agent_groups=agent_groups,
    observation_spaces=observation_spaces,
    action_spaces=action_spaces,
    reset=reset,
    step=step,
    observe=observe_groups,
    in_game=in_game,
    kernel_constants=kernel_constants,
    constant_prefix="TG",
)
