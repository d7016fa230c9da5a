"""TagContinuous's params and their checks, its state, agent types and groups, and spaces.

The rules are in :mod:`gpu_marl_envs.envs.tag_continuous`'s docstring; the torch reference step is
:mod:`gpu_marl_envs.envs.tag_continuous_reference`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch
from gymnasium import spaces

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


def observation_spaces(p: TagContinuousParams) -> dict[str, spaces.Box]:
    """Every group observes alike: :func:`observation_space` for each."""
    return {group: observation_space(p) for group in agent_groups(p)}


def action_spaces(p: TagContinuousParams) -> dict[str, spaces.Space]:
    """Every group acts alike: :func:`action_space` for each."""
    return {group: action_space(p) for group in agent_groups(p)}
