"""TagContinuous, batched: taggers chase runners in a square arena (``../shared/specs/tag.md``).

After WarpDrive's ``TagContinuous`` (Lan et al., JMLR 2022), with its races and CPU/GPU
disagreements fixed as the spec says. This module is the torch reference: pure batched functions,
float32 throughout, that run on CPU and GPU and never synchronise with the host (every function here
can be captured in a CUDA graph). Kernels reproduce it; the float32 conventions below are their
contract.

## Agents
``N = num_taggers + num_runners`` agents per env, in a fixed order: ids ``0 .. num_taggers - 1``
are taggers, ids ``num_taggers .. N - 1`` runners. ``agent_type(params)`` is the ``(N,)`` vector,
1 = tagger, 0 = runner. Two agent groups: ``taggers`` and ``runners``.

## Action space
Per agent ``MultiDiscrete([num_acceleration_levels + 1, num_turn_levels + 1])``, given as an int64
tensor ``(E, N, 2)``: (acceleration index, turn index). Index 0 is "no change" (a delta of 0);
index ``i >= 1`` selects ``linspace(min_acceleration, max_acceleration, num_acceleration_levels)[i - 1]``
(likewise for the turn, in radians). The table is numpy's float64 ``linspace`` rounded once to
float32 (:func:`level_deltas`). Indices must be in range; the runtime clamps them before the step.

## Observation space
``Box(obs_dim,)`` float32 per agent, returned as ``(E, N, obs_dim)``, **agent-major**: the 7
features of the first observed agent, then the 7 of the second, ..., then ``t / T`` last. For agent
``i`` observing agent ``j``:

| index (within the 7) | feature |
|---|---|
| 0 | ``(x_j - x_i) / (sqrt(2) * L)`` |
| 1 | ``(y_j - y_i) / (sqrt(2) * L)`` |
| 2 | ``(speed_j - speed_i) / (max_speed + 1e-10)`` |
| 3 | ``(acceleration_j - acceleration_i) / (max_speed + 1e-10)`` |
| 4 | ``(direction_j - direction_i) / (2 pi)`` |
| 5 | ``type_j`` (1 tagger, 0 runner) |
| 6 | ``in_game_j`` (1 or 0) |

- Full (``use_full_observation=True``): every other agent in id order (``i`` skipped):
  ``obs_dim = 7 (N - 1) + 1``.
- Partial (default): the ``k = num_other_agents_observed`` nearest other agents still in the game
  (by default 10, or ``N - 1`` where there are fewer others),
  nearest first, ties to the lowest id; slots left when fewer than ``k`` remain are all zeros:
  ``obs_dim = 7 k + 1``.
- An agent out of the game observes all zeros (the ``t / T`` feature included).

## Rewards
Per agent and step, added in this order to 0 (each addition rounded to float32; an addition that
does not apply is skipped, not an addition of 0):
1. its type's ``step_penalty_for_tagger`` / ``step_reward_for_runner`` if it was in the game at the
   start of the step;
2. ``edge_hit_penalty`` if its move left the arena (once, whichever edges);
3. a runner tagged this step: ``tag_penalty_for_runner``; a tagger: ``count * tag_reward_for_tagger``
   (one float32 product) where ``count`` is the number of runners it tagged this step;
4. at ``t == T``, a runner still in the game after the tags: ``end_of_game_reward_for_runner``.

## Starting state
Per env, from the env's own random key (so replicas differ): ``x``, ``y`` uniform in ``[0, L)``;
``direction`` uniform from ``{0, pi/2, pi, 3 pi/2}``; speed 0; acceleration 0; every agent in the
game; ``t = 0``.

## Episode end
Terminated (for every agent) when no runner is left in the game; truncated when ``t == T`` and not
terminated. A runner that left the game is individually done; the batched view keeps it, observing
zeros, frozen, with no rewards.

## Arguments
:class:`TagContinuousParams`; defaults are the published training configuration.

## Float32 conventions (every backend)
- Constants reach the step as float32, each rounded once from its float64 value: ``L``,
  ``2 pi = 6.2831854820251465`` (``float32(2 * math.pi)``, 1.7e-7 above 2 pi, equal to
  ``2 * float32(pi)``), ``pi / 2``, ``sqrt(2) * L``, ``max_speed + 1e-10``, ``max_speed * skill``
  per type, ``tagging_distance * L``.
- ``direction <- r`` where ``r = fmod(direction + turn, 2 pi)`` (exact), plus ``2 pi`` when
  negative, and 0 if that rounds up to ``2 pi``: always in ``[0, 2 pi)``.
- Squared distances are ``dx * dx + dy * dy`` with every operation rounded (no fused multiply-add;
  kernels use ``__fmul_rn``/``__fadd_rn`` or an equivalent). "Nearest" compares them; a tag needs
  ``sqrtf(d2) < tagging_distance * L`` (correctly rounded ``sqrtf``; the reference's
  :func:`gpu_marl_envs.float32.sqrt`, as torch's CPU float32 ``sqrt`` is not).
- Observation scalings are true IEEE divisions (not multiplications by a reciprocal:
  :func:`gpu_marl_envs.float32.divide`).

## Corrections to WarpDrive
- A tagger is paid once per runner it tags in a step; WarpDrive's unsynchronised ``+=`` lost all but
  one when several runners were tagged in the same step. Here tags are counted with an integer
  scatter-add (atomics on an integer count are exact and order-independent) and paid as one product.
- The count of runners in the game drops exactly by the number tagged (no lost updates).
- Each replica draws its own starting state (WarpDrive gave every replica the same start).
- Nearest-tagger and nearest-neighbour ties go to the lowest id, so every backend agrees.

## Kernels
``kernels/tag_continuous.cu`` (CUDA C) and ``kernels/tag_continuous_numba.py`` (Numba): a block
per env, agents spread over its threads (``a = threadIdx.x + k * blockDim.x``), positions and
in-game flags staged in shared memory (:func:`shared_layout`), tag counts with integer atomics, the
partial observation's ``k`` nearest kept in a per-thread sorted list (no ``N x N`` scratch), found
by scanning every agent in small games and on a grid of cells in large ones
(:func:`search_grid_cells`), with the same result. See :func:`kernel_constants` for what they are
compiled with and ``docs/tag.md`` for the grid.

## Version history
v0: the spec's rules; torch reference, Numba and CUDA C kernels; the kernels' neighbour grid
(``neighbour_search``; observations unchanged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import float32, rng
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition, split_groups, whole_warps

FEATURES_PER_AGENT = 7
NEIGHBOUR_SEARCHES = ("auto", "scan", "grid")


def _f32(value: float) -> float:
    """A Python float holding the float32 nearest to ``value``, as every backend receives it."""
    return float(np.float32(value))


DEFAULT_OTHERS_OBSERVED = 10
"""WarpDrive's ``num_other_agents_observed``: the default where the game has that many other agents."""


@dataclass(frozen=True)
class TagContinuousParams:
    num_taggers: int = 10
    num_runners: int = 100
    grid_length: float = 20.0  # L: the arena is [0, L]^2
    episode_length: int = 500  # T: truncation
    max_acceleration: float = 0.1
    min_acceleration: float = -0.1
    num_acceleration_levels: int = 20
    max_turn: float = 2.356  # radians (3 pi / 4)
    min_turn: float = -2.356
    num_turn_levels: int = 20
    max_speed: float = 1.0
    skill_level_tagger: float = 1.0  # multiplies max_speed for taggers
    skill_level_runner: float = 1.0  # multiplies max_speed for runners
    use_full_observation: bool = False
    num_other_agents_observed: int | None = None  # k, partial observation only; None: min(10, N - 1)
    runner_exits_game_after_tagged: bool = True
    tag_reward_for_tagger: float = 10.0
    tag_penalty_for_runner: float = -10.0
    step_penalty_for_tagger: float = 0.0
    step_reward_for_runner: float = 0.0
    edge_hit_penalty: float = 0.0
    end_of_game_reward_for_runner: float = 1.0
    tagging_distance: float = 0.02  # fraction of L: a tag happens when distance < tagging_distance * L
    # How the GPU kernels find each agent's k nearest others: "scan" tests every other agent, "grid"
    # only those in the cells of a uniform grid near it, "auto" picks by search_grid_cells(). The
    # observations are the same either way (the torch reference always compares every pair).
    neighbour_search: str = "auto"

    def __post_init__(self):
        name_of = type(self).__name__
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{name_of}.{f.name} must be a bool, got {value!r}")
            if f.type == "int" and (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))):
                raise ValueError(f"{name_of}.{f.name} must be an integer, got {value!r}")
            if f.type == "str" and not isinstance(value, str):
                raise ValueError(f"{name_of}.{f.name} must be a str, got {value!r}")
            if f.type == "float" and not (
                isinstance(value, (int, float, np.integer, np.floating))
                and not isinstance(value, (bool, np.bool_))
                and math.isfinite(value)
            ):
                raise ValueError(f"{name_of}.{f.name} must be a finite number, got {value!r}")
        observed = self.num_other_agents_observed
        if observed is None:
            # Relative to the agent counts, so that num_taggers=2, num_runners=5 alone is a valid game.
            observed = min(DEFAULT_OTHERS_OBSERVED, max(1, self.num_agents - 1))
            object.__setattr__(self, "num_other_agents_observed", observed)
        elif isinstance(observed, (bool, np.bool_)) or not isinstance(observed, (int, np.integer)):
            raise ValueError(f"{name_of}.num_other_agents_observed must be an integer or None, got {observed!r}")
        for name in (
            "num_taggers",
            "num_runners",
            "episode_length",
            "num_acceleration_levels",
            "num_turn_levels",
            "num_other_agents_observed",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name_of}.{name} must be >= 1, got {getattr(self, name)}")
        # Agent ids and observation slots are int32 in the kernels; a partial observation packs the
        # id in 32 bits (see observe).
        if self.num_agents >= 2**31:
            raise ValueError(f"{name_of}: num_taggers + num_runners must be < 2**31, got {self.num_agents}")
        if not self.use_full_observation and self.num_other_agents_observed > self.num_agents - 1:
            raise ValueError(
                f"{name_of}.num_other_agents_observed must be <= num_taggers + num_runners - 1 "
                f"= {self.num_agents - 1} (the other agents there are), got {self.num_other_agents_observed}"
            )
        for name in ("grid_length", "max_speed", "skill_level_tagger", "skill_level_runner", "tagging_distance"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name_of}.{name} must be > 0, got {getattr(self, name)}")
        for name in ("tag_reward_for_tagger", "step_reward_for_runner", "end_of_game_reward_for_runner"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name_of}.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("tag_penalty_for_runner", "step_penalty_for_tagger", "edge_hit_penalty"):
            if not getattr(self, name) <= 0:
                raise ValueError(f"{name_of}.{name} must be <= 0, got {getattr(self, name)}")
        if self.neighbour_search not in NEIGHBOUR_SEARCHES:
            raise ValueError(
                f"{name_of}.neighbour_search must be one of {NEIGHBOUR_SEARCHES}, got {self.neighbour_search!r}"
            )
        for low, high in (("min_acceleration", "max_acceleration"), ("min_turn", "max_turn")):
            if not getattr(self, low) <= getattr(self, high):
                raise ValueError(f"{name_of}.{low} must be <= {high}, got {getattr(self, low)} > {getattr(self, high)}")

    @property
    def num_agents(self) -> int:
        return self.num_taggers + self.num_runners

    @property
    def obs_dim(self) -> int:
        observed = self.num_agents - 1 if self.use_full_observation else self.num_other_agents_observed
        return FEATURES_PER_AGENT * observed + 1

    @property
    def tagging_radius(self) -> float:
        """A tag happens when a runner's distance to its nearest tagger is below this."""
        return self.tagging_distance * self.grid_length

    @property
    def max_speed_tagger(self) -> float:
        return self.max_speed * self.skill_level_tagger

    @property
    def max_speed_runner(self) -> float:
        return self.max_speed * self.skill_level_runner

    @property
    def position_scale(self) -> float:
        """The observation's divisor of position differences: the arena's diagonal."""
        return math.sqrt(2.0) * self.grid_length

    @property
    def speed_scale(self) -> float:
        """The observation's divisor of speed and acceleration differences (the spec's epsilon kept;
        in float32 it vanishes for max_speed >= 2**-9)."""
        return self.max_speed + 1e-10

    @property
    def two_pi(self) -> float:
        """The modulus of directions; as float32 6.2831854820251465 (= 2 * float32(pi))."""
        return 2.0 * math.pi

    @property
    def half_pi(self) -> float:
        """The spacing of starting directions; ``i * float32(pi / 2)`` in float32 is the float32
        nearest to ``i * pi / 2`` for i = 0..3."""
        return 0.5 * math.pi

    @property
    def acceleration_levels(self) -> np.ndarray:
        """The float32 table an acceleration index selects from: index 0 = 0 (no change), then linspace."""
        return level_deltas(
            self.min_acceleration,
            self.max_acceleration,
            self.num_acceleration_levels,
            np.arange(self.num_acceleration_levels + 1),
        )

    @property
    def turn_levels(self) -> np.ndarray:
        """The float32 table a turn index selects from: index 0 = 0 (no change), then linspace."""
        return level_deltas(self.min_turn, self.max_turn, self.num_turn_levels, np.arange(self.num_turn_levels + 1))


def level_deltas(low: float, high: float, num_levels: int, index):
    """The delta an action index selects, float32: 0 for index 0, else
    ``np.linspace(low, high, num_levels)[index - 1]``, as numpy computes it in float64
    (``start + i * step``, the last level exactly ``high``) and rounded once to float32.

    ``index`` is a numpy array (for the tables handed to kernels) or an integer torch tensor on any
    device (the reference computes the delta from the index on the device: building a table there
    would copy from the host, which a CUDA graph cannot capture). One formula for both.
    """
    step = (high - low) / (num_levels - 1) if num_levels > 1 else 0.0
    if isinstance(index, torch.Tensor):
        i = (index - 1).to(torch.float64)
        value = torch.where(index == num_levels, high, i * step + low) if num_levels > 1 else torch.full_like(i, low)
        return torch.where(index == 0, 0.0, value).to(torch.float32)
    i = np.asarray(index, dtype=np.float64) - 1
    value = np.where(index == num_levels, high, i * step + low) if num_levels > 1 else np.full_like(i, low)
    return np.where(index == 0, 0.0, value).astype(np.float32)


@dataclass
class TagContinuousState:
    """Struct-of-arrays, batch-first. Agents are ordered taggers first (see :func:`agent_type`)."""

    x: torch.Tensor  # float32 (E, N), in [0, L]
    y: torch.Tensor  # float32 (E, N), in [0, L]
    direction: torch.Tensor  # float32 (E, N), radians in [0, 2 pi)
    speed: torch.Tensor  # float32 (E, N), in [0, max_speed * skill]
    acceleration: torch.Tensor  # float32 (E, N)
    in_game: torch.Tensor  # bool (E, N)
    t: torch.Tensor  # int32 (E,), steps since reset


def agent_type(p: TagContinuousParams, device=None) -> torch.Tensor:
    """int32 ``(N,)``: 1 for taggers (ids ``0 .. num_taggers - 1``), 0 for runners."""
    return (torch.arange(p.num_agents, device=device) < p.num_taggers).to(torch.int32)


def runners_in_game(p: TagContinuousParams, state: TagContinuousState) -> torch.Tensor:
    """int32 ``(E,)``: how many runners are still in the game."""
    return state.in_game[:, p.num_taggers :].sum(dim=1, dtype=torch.int32)


def in_game(p: TagContinuousParams, state: TagContinuousState) -> torch.Tensor:
    return state.in_game


def agent_groups(p: TagContinuousParams) -> dict[str, range]:
    return {"taggers": range(0, p.num_taggers), "runners": range(p.num_taggers, p.num_agents)}


def action_space(p: TagContinuousParams) -> spaces.MultiDiscrete:
    return spaces.MultiDiscrete([p.num_acceleration_levels + 1, p.num_turn_levels + 1])


def observation_space(p: TagContinuousParams) -> spaces.Box:
    """Per-feature float32 bounds, derived from the observation's formulas.

    With ``S`` the larger of the two types' top speeds (``max_speed * skill``):
    - positions lie in ``[0, L]``, so ``|dx| / (sqrt(2) L) <= 1 / sqrt(2)``: bound 1;
    - speeds lie in ``[0, S]``, so ``|speed_j - speed_i| <= S``;
    - an acceleration survives a step only when ``0 < speed + acceleration < S_type`` with the speed
      in ``[0, S_type]``, so ``|acceleration| < S`` and ``|acc_j - acc_i| < 2 S``;
    - directions lie in ``[0, 2 pi)``, so ``|dir_j - dir_i| / (2 pi) < 1``: bound 1;
    - type and in_game are 0 or 1, ``t / T`` in ``[0, 1]``; padding and absent agents are 0.
    The speed bounds get a relative margin of 1e-5 for float32 rounding.
    """
    top_speed = max(p.max_speed_tagger, p.max_speed_runner) / p.speed_scale * (1 + 1e-5)
    low = np.array([-1.0, -1.0, -top_speed, -2 * top_speed, -1.0, 0.0, 0.0], dtype=np.float64)
    high = np.array([1.0, 1.0, top_speed, 2 * top_speed, 1.0, 1.0, 1.0], dtype=np.float64)
    observed = (p.obs_dim - 1) // FEATURES_PER_AGENT
    low = np.append(np.tile(low, observed), 0.0).astype(np.float32)
    high = np.append(np.tile(high, observed), 1.0).astype(np.float32)
    return spaces.Box(low, high, dtype=np.float32)


def kernel_constants(p: TagContinuousParams) -> dict:
    """The compile-time constants of the kernels, each float already the float32 every backend uses."""
    cells = search_grid_cells(p)
    cell_size = p.grid_length / cells
    return {
        "NUM_AGENTS": p.num_agents,
        "NUM_TAGGERS": p.num_taggers,
        "BLOCK_THREADS": block_threads(p),  # the launch's block size; sizes shared memory
        "MIN_BLOCKS": min_blocks_per_sm(p),
        "SCAN_SPLIT": scan_split(p),
        "EPISODE_LENGTH": p.episode_length,
        "OBS_DIM": p.obs_dim,
        "FULL_OBSERVATION": p.use_full_observation,
        "NUM_OBSERVED": p.num_other_agents_observed,
        "RUNNER_EXITS": p.runner_exits_game_after_tagged,
        "NUM_ACCELERATION_LEVELS": p.num_acceleration_levels,
        "NUM_TURN_LEVELS": p.num_turn_levels,
        "ACCELERATION_LEVELS": tuple(float(v) for v in p.acceleration_levels),
        "TURN_LEVELS": tuple(float(v) for v in p.turn_levels),
        "GRID_LENGTH": _f32(p.grid_length),
        "TWO_PI": _f32(p.two_pi),
        "HALF_PI": _f32(p.half_pi),
        "MAX_SPEED_TAGGER": _f32(p.max_speed_tagger),
        "MAX_SPEED_RUNNER": _f32(p.max_speed_runner),
        "TAGGING_RADIUS": _f32(p.tagging_radius),
        "POSITION_SCALE": _f32(p.position_scale),
        "SPEED_SCALE": _f32(p.speed_scale),
        **_reciprocal("POSITION_SCALE", p.position_scale),
        **_reciprocal("SPEED_SCALE", p.speed_scale),
        **_reciprocal("TWO_PI", p.two_pi),
        "TAG_REWARD_FOR_TAGGER": _f32(p.tag_reward_for_tagger),
        "TAG_PENALTY_FOR_RUNNER": _f32(p.tag_penalty_for_runner),
        "STEP_PENALTY_FOR_TAGGER": _f32(p.step_penalty_for_tagger),
        "STEP_REWARD_FOR_RUNNER": _f32(p.step_reward_for_runner),
        "EDGE_HIT_PENALTY": _f32(p.edge_hit_penalty),
        "END_OF_GAME_REWARD_FOR_RUNNER": _f32(p.end_of_game_reward_for_runner),
        # The neighbour grid (search_grid_cells; 1 = none) and its conservative cell bounds.
        "GRID_CELLS": cells,
        "INV_CELL_SIZE": _f32(cells / p.grid_length),
        "CELL_SIZE": _f32(cell_size),
        "CELL_MARGIN": _f32(_cell_margin(p)),
        "GRID_TAGS": grid_tags(p),
        "PLACE_BITS": max(p.num_agents - 1, 0).bit_length(),  # a place of the grid's order, in packed keys
        "STAGE_MOTION": stage_motion(p),
        "TWO_PHASE_STAGE_MOTION": two_phase_stage_motion(p),
        "STAGE_FLOATS": STAGE_FLOATS,
        "TWO_PHASE_STAGE_FLOATS": TWO_PHASE_STAGE_FLOATS,
        "ROWS_BY_ID": rows_by_id(p),
        "TWO_PHASE": two_phase(p),
        "TWO_PHASE_MAX_IN_PLAY": two_phase_max_in_play(p),
        "TAG_REACH": _f32(_tag_reach(p)),
        # Where each shared array starts in the block's dynamic shared memory (bytes).
        **{f"SHARED_{name.upper()}": offset for name, (offset, _, _) in shared_layout(p).items()},
    }


# The rule that picks the kernels' neighbour search (neighbour_search="auto"), measured on an H100
# with benchmarks/experiments/tag_search_rule.py (docs/benchmarks/history.md), the 3 x 3 block
# searched as three runs: from 160 agents per game the grid beats the scan at 100 and 2,000 games,
# with the published rules (1.12x, 1.31x) and with every agent in play (1.72x, 1.86x); at 110 it
# loses at 100 games (0.76x, 0.84x) and wins at 2,000 (1.07x, 1.22x), so 110-agent games (the
# published size) keep the scan. Cells of about 6 agents: at 10,000 agents per game they beat 2, 3,
# 4 and 8; at 1,000 x 2,000, 4 agents per cell were 2-4% faster with every agent in play and 1-5%
# slower with the published rules (docs/benchmarks/history.md), so 6 stays.
GRID_MIN_AGENTS = 160
AGENTS_PER_CELL = 6.0

# The CUDA C kernel's warps take the observation rows by agent id (a chunk of rows is then one run
# of the buffer) in games of up to this many agents, and in the grid's order beyond. Measured on an
# H100 (docs/benchmarks/history.md): by id, 2,000 games of 1,000 to 5,000 agents ran 1.05x to
# 1.24x faster, with the published rules and with every agent in play; at 10,000 agents the
# published rules' thinned games ran slower (0.88x at 500 games, 0.86x at 100: by id, a warp's
# searches are spread over the arena and its agents out of the game idle), every agent in play
# faster (1.13x).
ROWS_BY_ID_MAX_AGENTS = 5000


def rows_by_id(p: TagContinuousParams) -> bool:
    """Whether the CUDA C kernel writes the observations by agent id (without a grid, its order is
    the ids' anyway) rather than in the grid's order: :data:`ROWS_BY_ID_MAX_AGENTS`. The Numba
    kernel takes them by id only where :func:`two_phase`: its chunks are the whole block's, and
    with the search by id each chunk's search waits on its slowest agent while thinned games'
    chunks all search (1,480 against 1,131 µs per step at 2,000 x 1,000 with the published rules on
    an H100)."""
    return search_grid_cells(p) == 1 or p.num_agents <= ROWS_BY_ID_MAX_AGENTS


# Games of up to this many agents (with a grid) keep every agent's list in shared memory
# (:func:`two_phase`): 20 KB at 1,000 agents with k = 10, where four blocks still fit an SM. Measured
# on an H100 at 2,000 games of 250, 500 and 1,000 agents (docs/benchmarks/history.md):
# with the published rules 1.01x, 1.13x and 1.10x faster on CUDA C, 1.07x, 1.09x and 1.10x on Numba;
# with every agent in play Numba 1.10x, 1.13x and 1.17x, CUDA C as before (it chooses per step).
TWO_PHASE_MAX_AGENTS = 1000


def two_phase(p: TagContinuousParams) -> bool:
    """Whether the kernels find every agent's nearest others first, in the grid's order (a warp's
    agents are neighbours and search the same cells; only agents in the game search, packed
    together), into one list per agent in shared memory (``lists``), and then write the rows by id
    from those lists: with a grid, up to :data:`TWO_PHASE_MAX_AGENTS` (and where :func:`rows_by_id`)."""
    return search_grid_cells(p) > 1 and rows_by_id(p) and p.num_agents <= TWO_PHASE_MAX_AGENTS


# The CUDA C kernel takes the two phases (:func:`two_phase`) only in a step where at most this
# share of a game's agents is in the game; with more, each warp searches for its own rows by id as
# without them. Measured on an H100 at 2,000 x 1,000 (docs/benchmarks/history.md): with
# every agent in play, the two phases in every step took 532.6 µs per step against 505.3 in one;
# with the published rules (tagged runners leave) 459.2 against 502.9, and the same (458.1 to 459.0)
# with a share of 0.8 to 0.95, which leaves every agent in play at one phase (506.3 at 0.9). The
# Numba kernel, whose chunks are the whole block's, takes them in every step (1,210 against 1,412 µs
# with every agent in play).
TWO_PHASE_IN_PLAY_SHARE = 0.9


def two_phase_max_in_play(p: TagContinuousParams) -> int:
    """The most agents in the game with which a CUDA C block takes the two phases in a step
    (:data:`TWO_PHASE_IN_PLAY_SHARE`); -1 where not :func:`two_phase`."""
    return int(p.num_agents * TWO_PHASE_IN_PLAY_SHARE) if two_phase(p) else -1


def search_grid_cells(p: TagContinuousParams) -> int:
    """Cells per side of the uniform grid the kernels sort each game's agents into at every step
    (a counting sort by cell, in shared memory) to find each agent's k nearest others: an agent
    scans rings of cells around its own, nearest first, until the k-th distance found is below a
    lower bound of every unscanned cell's. 1 means no grid: every agent tests every other (the
    scan, cheaper for small games). The full observation searches nothing, and games of more than
    65,536 agents (which no GPU's shared memory holds today) scan: the grid's keys hold 16-bit ids."""
    if (
        p.use_full_observation
        or p.neighbour_search == "scan"
        or p.num_agents > 2**16
        or (p.neighbour_search == "auto" and p.num_agents < GRID_MIN_AGENTS)
    ):
        return 1
    return max(2, round(math.sqrt(p.num_agents / AGENTS_PER_CELL)))


def _reciprocal(name: str, scale: float) -> dict:
    """How the kernels divide the observations' differences by ``scale`` (``gme_divide`` in
    kernels/float32.cuh, ``divide`` in the Numba kernels): ``{name}_RECIPROCAL``, float32 ``1 / scale``
    where a product with it (``{name}_RECIPROCAL_EXACT``: ``scale`` a power of two, as the default
    speed scale, 1) or the product and one correction (``float32.corrected_reciprocal``) is the
    quotient's own float, else 0.0 (divide)."""
    s = np.float32(scale)
    inverse = np.float32(1.0) / s if np.isfinite(s) and s > 0 else np.float32(0.0)
    if inverse != 0 and float(inverse) * float(s) == 1.0:
        return {f"{name}_RECIPROCAL": float(inverse), f"{name}_RECIPROCAL_EXACT": True}
    return {f"{name}_RECIPROCAL": float32.corrected_reciprocal(scale), f"{name}_RECIPROCAL_EXACT": False}


def _cell_margin(p: TagContinuousParams) -> float:
    """How far a cell's bounds are widened: a kernel places ``x`` in cell ``int(x * (C / L))``
    rounded in float32, which can put an agent a few ulps of ``L`` across a boundary ``i * L / C``;
    ``2**-16 L`` is over a hundred of them, so a cell's agents always lie within its widened bounds."""
    return p.grid_length * 2.0**-16


def _tag_reach(p: TagContinuousParams) -> float:
    """How far from a runner the grid's tag phase looks for taggers: the tagging radius, widened by
    more than the float32 rounding of the distance test and of the cell bounds (``2**-16`` of
    ``L + r``), so that every tagger the test could accept lies in a cell searched."""
    return p.tagging_radius + (p.grid_length + p.tagging_radius) * 2.0**-16


def grid_tags(p: TagContinuousParams) -> bool:
    """Whether the tag phase finds each runner's nearest tagger in the grid's cells within the
    tagging radius (taggers sorted ahead of runners in each cell) rather than testing every tagger:
    a tag needs a tagger within the radius, so the nearest tagger matters only there. Taken when a
    grid is built and the window's cells (at most ``(2 ceil(reach / cell) + 1)^2``) are no more
    than the taggers."""
    cells = search_grid_cells(p)
    if cells == 1:
        return False
    reach = math.ceil(_tag_reach(p) / (p.grid_length / cells))
    return (2 * reach + 1) ** 2 <= p.num_taggers


def block_threads(p: TagContinuousParams) -> int:
    """256 threads per env whatever the number of agents: the observation rows are written by the
    whole block and, with ~100 agents, the nearest-others scan is split over the spare threads
    (:func:`scan_split`). On an H200, 256 threads with a 2-way split beat 512 with a 4-way one by
    12% at 1000 envs x 110 agents and lose 11% at 100 envs (benchmarks/tag_throughput.py)."""
    return 256


def min_blocks_per_sm(p: TagContinuousParams) -> int:
    """Blocks of the step kernel that should fit an SM at once (the kernels' launch bounds): 4 caps
    the registers at 64 per thread (the CUDA C kernel spills 64 bytes at 1,000 agents). On an H100
    at 2000 games x 1000 agents, every agent in play, in one call: 862.7 µs per step against 874.9
    with 3 blocks (CUDA C), 2110.8 against 2225.8 (Numba); with the kernels before the staged
    observations, 1.10 ms against 1.17 with 3 and 1.36 with 5 (CUDA C). Fewer where fewer blocks'
    shared memory fits an SM (:data:`SM_SHARED_BYTES`): a cap on registers then buys no more
    blocks, only spills."""
    per_block = dynamic_shared_bytes(p) + BLOCK_RESERVED_SHARED_BYTES
    return max(1, min(4, SM_SHARED_BYTES // per_block))


# Floats of observation features a warp of the CUDA C kernel stages in shared memory on their way
# to global memory: room for eight rows of 71 (k = 10). In a step of two phases (:func:`two_phase`),
# half as much (four rows), so that the staged motion fits beside every agent's list with four
# blocks an SM (where it does: :func:`two_phase_stage_motion`). Measured on an H200 at 2,000 x
# 1,000 (docs/benchmarks/history.md): with the published rules 408.8 and 406.7 µs per step
# against 431.4 and 428.1 with that motion read from the state; the halved room in every step as
# well took 544.0 µs against 500.3 with every agent in play. Of the rows its room holds, a warp
# stages the chunk that fills its passes of 32 (row, slot) pairs best (``chunk_rows`` in the
# kernel: with k = 10, 6 rows of 8 and 3 of 4; docs/benchmarks/history.md).
STAGE_FLOATS = 576
TWO_PHASE_STAGE_FLOATS = STAGE_FLOATS // 2

# Shared memory per SM of an H100 or H200 and what the driver reserves for each block in it (CUDA C
# Programming Guide, compute capability 9.0: 228 KiB per SM, 1 KiB per block).
SM_SHARED_BYTES = 228 * 1024
BLOCK_RESERVED_SHARED_BYTES = 1024


def scan_split(p: TagContinuousParams) -> int:
    """Threads (consecutive lanes, a power of 2) sharing one agent's nearest-others scan: the
    spare threads of the block when it has more than there are agents, up to 32 (1 with a grid,
    where each agent's search is short)."""
    split = 1
    if search_grid_cells(p) > 1:
        return split
    while split < 32 and 2 * split * whole_warps(p.num_agents, 1 << 30) <= block_threads(p):
        split *= 2
    return split


def shared_layout(p: TagContinuousParams) -> dict[str, tuple[int, int, str]]:
    """The kernels' per-game arrays in dynamic shared memory: ``{name: (byte offset, count, dtype)}``.

    - ``positions``: (x, y) pairs after this step's moves; with a grid, in the grid's order (by
      cell, each cell's taggers first), else by agent id;
    - ``motion``: (speed, acceleration, direction) triples by place, as ``positions``, where
      :func:`stage_motion` (otherwise the observations read the state's rows); where
      :func:`two_phase`, in the room of ``lists`` (in a CUDA C step of one phase: see
      ``two_phase_motion`` for a step of two);
    - ``ends``: with a grid, where each bucket of that order ends (a cell's taggers, its runners,
      ..., then the agents out of the game);
    - ``tags``: runners each tagger tagged this step;
    - ``observed``: the partial observation's k nearest others of a chunk of agents (one per
      thread group of :func:`scan_split` lanes), where not :func:`two_phase`;
    - ``features``: :data:`STAGE_FLOATS` per warp, the observation features staged on their way to
      global memory (so that the stores are whole runs of the buffer; the Numba kernel stages the
      whole block's in one); in a CUDA C step of two phases where :func:`two_phase_stage_motion`,
      :data:`TWO_PHASE_STAGE_FLOATS` per warp, then ``two_phase_motion``;
    - ``ids``: with a grid, the agent at each place of that order (16 bits, as the grid holds at
      most 65,536 agents);
    - ``places``: with a grid where :func:`rows_by_id`, each agent's place in that order, by id (16
      bits), for the observations by id;
    - ``lists``: where :func:`two_phase`, every agent's k nearest others (their places, -1 for an
      empty slot; 16 bits), by id; in a CUDA C step of one phase each warp's own lists, then the
      staged motion;
    - ``in_game``: each agent's in-game flag, by id;
    - ``two_phase_motion``: where :func:`two_phase_stage_motion`, the staged motion (as
      ``motion``) of a CUDA C step of two phases, in the room of ``features`` after the warps'
      halved staging.
    """
    return _layout(p, stage_motion(p), two_phase_stage_motion(p))


def _layout(p: TagContinuousParams, staged: bool, two_phase_staged: bool = False) -> dict[str, tuple[int, int, str]]:
    cells = search_grid_cells(p)
    grid = cells > 1
    k = p.num_other_agents_observed
    lists = two_phase(p)
    observed = 0 if p.use_full_observation or lists else block_threads(p) // scan_split(p) * k
    arrays = [
        ("positions", 2 * p.num_agents, "float32"),
        ("motion", 3 * p.num_agents if staged and not lists else 0, "float32"),
        ("ends", 2 * cells * cells + 1 if grid else 0, "int32"),
        ("tags", p.num_taggers, "int32"),
        ("observed", observed, "int32"),
        ("features", _feature_floats(p, two_phase_staged), "float32"),
        ("ids", p.num_agents if grid else 0, "uint16"),
        ("places", p.num_agents if grid and rows_by_id(p) else 0, "uint16"),
        ("lists", _list_slots(p, staged) if lists else 0, "int16"),
        ("in_game", p.num_agents, "bool"),
    ]
    layout, offset = {}, 0
    for name, count, dtype in arrays:
        layout[name] = (offset, count, dtype)
        offset += count * np.dtype(dtype).itemsize
    if lists and staged:
        # The staged motion shares the lists' room, after the warps' own lists: it is staged only in
        # a step of one phase.
        warps_lists = 2 * block_threads(p) * k  # bytes
        assert (layout["lists"][0] + warps_lists) % 4 == 0, "the motion's floats need 4-byte alignment"
        layout["motion"] = (layout["lists"][0] + warps_lists, 3 * p.num_agents, "float32")
    if lists and two_phase_staged:
        # In a step of two phases, whose lists fill that room, after the warps' halved staging.
        warps_staging = 4 * block_threads(p) // 32 * TWO_PHASE_STAGE_FLOATS  # bytes
        layout["two_phase_motion"] = (layout["features"][0] + warps_staging, 3 * p.num_agents, "float32")
    return layout


def _feature_floats(p: TagContinuousParams, two_phase_staged: bool) -> int:
    """``features``' floats: the warps' :data:`STAGE_FLOATS`; where a step of two phases stages the
    motion, at least the warps' :data:`TWO_PHASE_STAGE_FLOATS` and, after them, that motion
    (``two_phase_motion``)."""
    warps = block_threads(p) // 32
    if two_phase_staged:
        return max(warps * STAGE_FLOATS, warps * TWO_PHASE_STAGE_FLOATS + 3 * p.num_agents)
    return warps * STAGE_FLOATS


def _list_slots(p: TagContinuousParams, staged: bool) -> int:
    """``lists``' 16-bit slots where :func:`two_phase`: every agent's k; in a step of one phase the
    CUDA C kernel's warps keep their own lists at its start, and the staged motion (3 floats an
    agent) follows them."""
    k = p.num_other_agents_observed
    return max(p.num_agents * k, block_threads(p) * k + (6 * p.num_agents if staged else 0))


def _end(layout: dict[str, tuple[int, int, str]]) -> int:
    offset, count, dtype = layout["in_game"]  # the last array
    return offset + count * np.dtype(dtype).itemsize


def dynamic_shared_bytes(p: TagContinuousParams) -> int:
    """Bytes of dynamic shared memory a block of the kernels uses (:func:`shared_layout`), which
    bounds the agents per game: 11 bytes per agent with a grid (13 where :func:`rows_by_id`; 9
    without a grid; 12 more where the motion is staged), the grid's bucket ends (about 1.3 bytes
    per agent) and some 28 KiB more (one chunk's lists with k = 10, 10 KiB, and the staged
    observation features, 18 KiB), up to what the GPU lets one block opt in to (227 KiB on an H100
    or H200: 16,537 agents with k = 10)."""
    return _end(shared_layout(p))


# A block of the kernels may stage the agents' motion in shared memory up to this size: four such
# blocks fit an H100's or H200's 227 KiB per SM, as many as the kernels' registers let run at once.
STAGING_BYTES = 56 * 1024


def stage_motion(p: TagContinuousParams) -> bool:
    """Whether the kernels copy each agent's speed, acceleration and direction into shared memory
    (12 bytes per agent) for the observations, which otherwise read them from the state in global
    memory (as random as the neighbours are): where the block stays within :data:`STAGING_BYTES`.
    Where :func:`two_phase`, this is the motion of a CUDA C step of one phase (in the lists' room);
    see :func:`two_phase_stage_motion` for a step of two."""
    return _end(_layout(p, True)) <= STAGING_BYTES


def two_phase_stage_motion(p: TagContinuousParams) -> bool:
    """Whether a CUDA C step of two phases also stages the motion, after the warps' feature
    staging halved (:data:`TWO_PHASE_STAGE_FLOATS`): where :func:`two_phase` and
    :func:`stage_motion`, and the block still stays within :data:`STAGING_BYTES`. Otherwise that
    step stages whole chunks and reads the motion from the state."""
    return two_phase(p) and stage_motion(p) and _end(_layout(p, True, True)) <= STAGING_BYTES


def reset(p: TagContinuousParams, key: torch.Tensor, num_envs: int) -> TagContinuousState:
    """A fresh state per env from ``key`` (``(E,)`` int64, :func:`rng.key_hash` of seed and episode).

    Draw indices (``N`` agents, agent ``a``): ``x_a`` is draw ``a``, ``y_a`` draw ``N + a``, and the
    direction index of ``a`` is ``floor`` of draw ``2N + a`` taken uniform in ``[0, 4)`` (at most
    ``4 - 2**-22`` as float32, so the index is in 0..3); ``direction = index * float32(pi / 2)``.
    """
    if key.shape != (num_envs,):
        raise ValueError(f"key must have shape ({num_envs},), got {tuple(key.shape)}")
    n = p.num_agents
    device = key.device
    draws = torch.arange(n, device=device, dtype=torch.int64)
    k = key.to(torch.int64)[:, None]
    length = _f32(p.grid_length)
    x = rng.uniform_from_key(k, draws, 0.0, length)
    y = rng.uniform_from_key(k, draws + n, 0.0, length)
    quarter = torch.floor(rng.uniform_from_key(k, draws + 2 * n, 0.0, 4.0))
    direction = quarter * _f32(p.half_pi)
    zeros = torch.zeros((num_envs, n), dtype=torch.float32, device=device)
    return TagContinuousState(
        x=x,
        y=y,
        direction=direction,
        speed=zeros,
        acceleration=zeros.clone(),
        in_game=torch.ones((num_envs, n), dtype=torch.bool, device=device),
        t=torch.zeros(num_envs, dtype=torch.int32, device=device),
    )


def _per_type(is_tagger: torch.Tensor, tagger_value: float, runner_value: float) -> torch.Tensor:
    return torch.where(is_tagger, _f32(tagger_value), _f32(runner_value))


def _wrap_angle(p: TagContinuousParams, angle: torch.Tensor) -> torch.Tensor:
    # fmod is exact; torch.remainder need not be on every device. Adding 2 pi to a tiny negative
    # remainder can round to 2 pi itself, which is 0 again.
    two_pi = _f32(p.two_pi)
    r = torch.fmod(angle, two_pi)
    r = torch.where(r < 0, r + two_pi, r)
    return torch.where(r == two_pi, 0.0, r)


def _squared_distance(dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return dx * dx + dy * dy


def step(p: TagContinuousParams, state: TagContinuousState, actions: torch.Tensor):
    """One step of every env: ``(next_state, rewards (E, N) float32, terminated (E,), truncated (E,))``.

    ``actions``: int64 ``(E, N, 2)``, (acceleration index, turn index), in range. Pure: ``state``
    is not modified. The numbers below are the spec's steps.
    """
    g = p.num_taggers
    in_game = state.in_game  # at the start of the step
    is_tagger = agent_type(p, in_game.device).bool()

    # 1.
    t = state.t + 1

    # 2. Movement, for agents in the game; the others are frozen.
    d_acc = level_deltas(p.min_acceleration, p.max_acceleration, p.num_acceleration_levels, actions[..., 0])
    d_turn = level_deltas(p.min_turn, p.max_turn, p.num_turn_levels, actions[..., 1])
    direction = _wrap_angle(p, state.direction + d_turn)
    acceleration = state.acceleration + d_acc
    max_speed = _per_type(is_tagger, p.max_speed_tagger, p.max_speed_runner)
    speed = torch.minimum((state.speed + acceleration).clamp(min=0.0), max_speed)
    acceleration = torch.where((speed == 0.0) | (speed == max_speed), 0.0, acceleration)
    x = state.x + speed * torch.cos(direction)
    y = state.y + speed * torch.sin(direction)
    length = _f32(p.grid_length)
    edge_hit = in_game & ((x < 0.0) | (x > length) | (y < 0.0) | (y > length))
    x = x.clamp(0.0, length)
    y = y.clamp(0.0, length)
    direction = torch.where(in_game, direction, state.direction)
    acceleration = torch.where(in_game, acceleration, state.acceleration)
    speed = torch.where(in_game, speed, state.speed)
    x = torch.where(in_game, x, state.x)
    y = torch.where(in_game, y, state.y)

    # 3. Step rewards and edge hits.
    rewards = torch.where(in_game, _per_type(is_tagger, p.step_penalty_for_tagger, p.step_reward_for_runner), 0.0)
    rewards = torch.where(edge_hit, rewards + _f32(p.edge_hit_penalty), rewards)

    # 4. Tagging: each runner in the game against its nearest tagger in the game (a tagger is never
    # out of the game in play; one set out by hand is frozen and tags no one). argmin returns the
    # first minimum: ties go to the lowest id.
    dx = x[:, g:, None] - x[:, None, :g]  # (E, runners, taggers)
    dy = y[:, g:, None] - y[:, None, :g]
    d2 = torch.where(in_game[:, None, :g], _squared_distance(dx, dy), math.inf)
    nearest = d2.argmin(dim=2)
    nearest_d2 = d2.gather(2, nearest[:, :, None])[:, :, 0]
    tagged = in_game[:, g:] & (float32.sqrt(nearest_d2) < _f32(p.tagging_radius))
    # Several runners can name the same tagger: count them with an integer scatter-add (exact and
    # order-independent, as the kernels' integer atomics are) and pay the count as one product.
    tags = torch.zeros_like(in_game[:, :g], dtype=torch.int32).scatter_add_(1, nearest, tagged.to(torch.int32))
    tagger_rewards = rewards[:, :g]
    tagger_rewards = torch.where(
        tags > 0, tagger_rewards + tags.to(torch.float32) * _f32(p.tag_reward_for_tagger), tagger_rewards
    )
    runner_rewards = rewards[:, g:]
    runner_rewards = torch.where(tagged, runner_rewards + _f32(p.tag_penalty_for_runner), runner_rewards)
    if p.runner_exits_game_after_tagged:
        # A runner out of the game has speed 0; speed 0 is a bound, so its acceleration is 0 too.
        exited = torch.cat([torch.zeros_like(in_game[:, :g]), tagged], dim=1)
        in_game = in_game & ~exited
        speed = torch.where(exited, 0.0, speed)
        acceleration = torch.where(exited, 0.0, acceleration)

    # 5. End of the game: runners still in it are paid.
    last_step = t == p.episode_length
    survived = last_step[:, None] & in_game[:, g:]
    runner_rewards = torch.where(survived, runner_rewards + _f32(p.end_of_game_reward_for_runner), runner_rewards)
    rewards = torch.cat([tagger_rewards, runner_rewards], dim=1)

    # 6.
    terminated = ~in_game[:, g:].any(dim=1)
    truncated = last_step & ~terminated
    next_state = TagContinuousState(
        x=x, y=y, direction=direction, speed=speed, acceleration=acceleration, in_game=in_game, t=t
    )
    return next_state, rewards, terminated, truncated


def _features(p: TagContinuousParams, state: TagContinuousState, j: torch.Tensor) -> torch.Tensor:
    """float32 ``(E, N, M, 7)``: agent ``i``'s features of agents ``j[e, i, m]`` (int64 ``(E, N, M)``)."""
    e, n, m = j.shape
    flat = j.reshape(e, n * m)

    def pair(v: torch.Tensor):
        return v.gather(1, flat).reshape(e, n, m), v[:, :, None]

    (xj, xi), (yj, yi) = pair(state.x), pair(state.y)
    (sj, si), (aj, ai) = pair(state.speed), pair(state.acceleration)
    dj, di = pair(state.direction)
    type_j = agent_type(p, j.device).to(torch.float32)[j]
    in_game_j = state.in_game.gather(1, flat).reshape(e, n, m).to(torch.float32)
    return torch.stack(
        [
            float32.divide(xj - xi, p.position_scale),
            float32.divide(yj - yi, p.position_scale),
            float32.divide(sj - si, p.speed_scale),
            float32.divide(aj - ai, p.speed_scale),
            float32.divide(dj - di, p.two_pi),
            type_j,
            in_game_j,
        ],
        dim=-1,
    )


def _nearest_others(p: TagContinuousParams, state: TagContinuousState) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest other agents in the game per agent, nearest first, ties to the lowest id:
    ids int64 ``(E, N, k)`` and whether the slot holds one (bool ``(E, N, k)``).

    The order is exactly lexicographic on (squared distance, id): a non-negative float32's bits,
    read as an integer, order like the float, so ``bits(d2) << 32 | id`` is an int64 key whose
    ``k`` smallest (``topk``, keys all distinct) are the answer. Self and agents out of the game get
    ``d2 = inf``, which marks an empty slot.
    """
    n = p.num_agents
    device = state.x.device
    ids = torch.arange(n, device=device)
    dx = state.x[:, None, :] - state.x[:, :, None]  # [e, i, j] = x_j - x_i
    dy = state.y[:, None, :] - state.y[:, :, None]
    candidate = state.in_game[:, None, :] & (ids[:, None] != ids[None, :])
    d2 = torch.where(candidate, _squared_distance(dx, dy), math.inf)
    keys = (d2.view(torch.int32).to(torch.int64) << 32) | ids
    keys = torch.topk(keys, p.num_other_agents_observed, dim=2, largest=False, sorted=True).values
    inf_bits = int(np.float32(np.inf).view(np.int32))
    return keys & 0xFFFFFFFF, (keys >> 32) < inf_bits


def observe(p: TagContinuousParams, state: TagContinuousState) -> torch.Tensor:
    """float32 ``(E, N, obs_dim)``, agent-major (see the module docstring)."""
    e, n = state.x.shape
    device = state.x.device
    if p.use_full_observation:
        # Row i: the ids other than i, ascending.
        others = torch.arange(n - 1, device=device)[None, :]
        others = others + (others >= torch.arange(n, device=device)[:, None]).to(others.dtype)
        features = _features(p, state, others.expand(e, n, n - 1))
    else:
        j, found = _nearest_others(p, state)
        features = torch.where(found[..., None], _features(p, state, j), 0.0)
    time = float32.divide(state.t.to(torch.float32), p.episode_length)
    obs = torch.cat([features.reshape(e, n, -1), time[:, None, None].expand(e, n, 1)], dim=2)
    return torch.where(state.in_game[..., None], obs, 0.0)


def observation_spaces(p: TagContinuousParams) -> dict[str, spaces.Box]:
    """Every group observes alike: :func:`observation_space` for each."""
    return {group: observation_space(p) for group in agent_groups(p)}


def action_spaces(p: TagContinuousParams) -> dict[str, spaces.Space]:
    """Every group acts alike: :func:`action_space` for each."""
    return {group: action_space(p) for group in agent_groups(p)}


def observe_groups(p: TagContinuousParams, state) -> dict[str, torch.Tensor]:
    """:func:`observe` split by group, ``{group: (E, n_g, obs_dim)}`` (the runtime's form)."""
    return split_groups(agent_groups(p), observe(p, state))


TAG_CONTINUOUS = MultiAgentDefinition(
    id="TagContinuous-v0",
    params_type=TagContinuousParams,
    state_type=TagContinuousState,
    agent_groups=agent_groups,
    observation_spaces=observation_spaces,
    action_spaces=action_spaces,
    reset=reset,
    step=step,
    observe=observe_groups,
    in_game=in_game,
    kernel_constants=kernel_constants,
    constant_prefix="TC",
    dynamic_shared_bytes=dynamic_shared_bytes,
    block_threads=block_threads,
)
