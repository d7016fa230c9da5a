"""CovidEconomy's params and their checks, the model's fixed numbers, the state, agent groups and
spaces.

The rules are in :mod:`gpu_marl_envs.envs.covid_economy`'s docstring; the numbers a step uses are
:mod:`gpu_marl_envs.envs.covid_economy_constants`, the torch reference step
:mod:`gpu_marl_envs.envs.covid_economy_reference`.
"""

from __future__ import annotations

import datetime
import math
import numbers
from dataclasses import dataclass, field

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs.envs import covid_calibration
from gpu_marl_envs.envs.covid_calibration import CovidCalibration
from gpu_marl_envs.validation import check_params_numbers

EPSILON = 1e-10
"""Guards the vaccinated fraction's division and the normalisers' range, as in the original."""
SOFTPLUS_THRESHOLD = 20.0
DAYS_PER_YEAR = 365
CRRA_CLIP = (0.1, 3.0)
"""Annualised economic index is clipped to this range before the CRRA utility."""
REDUCTION_WIDTH = 64
"""Slots of the tree reduction over states (a power of two >= the number of states)."""
EPISODE_METRICS = ("deaths", "unemployment", "subsidies", "productivity")


@dataclass(frozen=True)
class CovidEconomyParams:
    episode_length: int = 540
    """``T``: the episode truncates after this many days."""
    start_date: str = "2020-03-22"
    """First day (``YYYY-MM-DD``); the starting state is the calibration's data on that day."""
    health_priority_scaling_governors: float = 0.3
    """``m`` of every governor: multiplies the odds of the fitted health weight (1 = as fitted)."""
    health_priority_scaling_planner: float = 0.45
    """``m`` of the planner."""
    action_cooldown: int = 28
    """Days a governor is locked after a non-zero action."""
    max_annual_subsidy_per_person: float = 20000.0
    """$ per person-year at the highest subsidy level."""
    num_subsidy_levels: int = 20
    """``Q``: the planner's actions are levels ``0 .. Q``."""
    subsidy_interval: int = 90
    """Days between the planner's subsidy decisions."""
    vaccine_start_date: str = "2021-01-12"
    """First day of vaccine deliveries."""
    daily_vaccines_per_million: float = 3000.0
    """Vaccines per million residents per day."""
    vaccine_delivery_interval: int = 1
    """Days between deliveries (each delivers the interval's vaccines)."""
    working_age_share: float = 0.6
    """Share of the population aged 18-65, whose (un)employment counts."""
    too_sick_to_work_rate: float = 0.1
    """Share of the infected who cannot work."""
    risk_free_interest_rate: float = 0.03
    """The planner pays ``1 + r`` per dollar of subsidy."""
    crra_eta: float = 2.0
    """``eta`` of the CRRA utility of the economic index (``!= 1``)."""
    calibration: CovidCalibration = field(default_factory=covid_calibration.default_calibration)
    """Fitted parameters, normalisers and data (default: the shipped AI Economist calibration)."""

    def __post_init__(self):
        name = type(self).__name__
        for f in (
            "episode_length",
            "action_cooldown",
            "num_subsidy_levels",
            "subsidy_interval",
            "vaccine_delivery_interval",
        ):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name}.{f} must be an integer, got {value!r}")
            if not 1 <= value <= np.iinfo(np.int32).max:
                raise ValueError(f"{name}.{f} must be >= 1 and fit in int32, got {value}")
        ranges = {  # field: (low, high, what the range means)
            "health_priority_scaling_governors": (0.0, math.inf, ">= 0"),
            "health_priority_scaling_planner": (0.0, math.inf, ">= 0"),
            "max_annual_subsidy_per_person": (0.0, math.inf, ">= 0"),
            "daily_vaccines_per_million": (0.0, 1e6, "in [0, 1e6]"),
            "working_age_share": (0.0, 1.0, "in [0, 1]"),
            "too_sick_to_work_rate": (0.0, 1.0, "in [0, 1]"),
            "risk_free_interest_rate": (0.0, math.inf, ">= 0"),
            "crra_eta": (0.0, 20.0, "in [0, 20]"),
        }
        for f, (low, high, meaning) in ranges.items():
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{name}.{f} must be a number, got {value!r}")
            if not (math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{name}.{f} must be finite and {meaning}, got {value}")
        if self.crra_eta == 1:
            raise ValueError(f"{name}.crra_eta must not be 1 (the CRRA formula divides by 1 - eta)")
        if not isinstance(self.calibration, CovidCalibration):
            raise ValueError(
                f"{name}.calibration must be a CovidCalibration (see "
                f"covid_calibration.default_calibration / load_ai_economist), got "
                f"{type(self.calibration).__name__}"
            )
        for f in ("start_date", "vaccine_start_date"):
            value = getattr(self, f)
            try:
                datetime.datetime.strptime(value, covid_calibration.DATE_FORMAT)
            except (TypeError, ValueError):
                raise ValueError(f"{name}.{f} must be a date 'YYYY-MM-DD', got {value!r}") from None
        # The kernels give each state and the planner one thread of a REDUCTION_WIDTH-thread block
        # (the planner's sums are a tree over its slots), and the level rings are int8.
        if self.num_states + 1 > REDUCTION_WIDTH:
            raise ValueError(
                f"{name}: the calibration has {self.num_states} states; at most "
                f"{REDUCTION_WIDTH - 1} fit the kernels' block of {REDUCTION_WIDTH} threads"
            )
        if self.num_stringency_levels > np.iinfo(np.int8).max:
            raise ValueError(
                f"{name}: the calibration has {self.num_stringency_levels} stringency levels; at most "
                f"{np.iinfo(np.int8).max} fit the int8 rings of levels and changes"
            )
        valid = self.calibration.valid_start_indices()
        if self.start_index not in valid:
            first = self.calibration.data_start_date
            raise ValueError(
                f"{name}.start_date {self.start_date} has no data to start from: the calibration "
                f"has S/I/R/U on days {valid.start} .. {valid.stop - 1} after {first}"
            )
        check_params_numbers(self)  # the kernels' float32 and int32 (1e39 passes the ranges above)

    @property
    def num_states(self) -> int:
        return self.calibration.num_states

    @property
    def num_agents(self) -> int:
        return self.num_states + 1

    @property
    def planner_id(self) -> int:
        return self.num_states

    @property
    def num_stringency_levels(self) -> int:
        return self.calibration.num_stringency_levels

    @property
    def start_index(self) -> int:
        """``si``: the start date's index in the calibration's daily series."""
        return self.calibration.day_index(self.start_date)

    @property
    def vaccine_start_day(self) -> int:
        """``t_vac``: the first step that can deliver vaccines (296 by default)."""
        start = datetime.datetime.strptime(self.start_date, covid_calibration.DATE_FORMAT)
        return (datetime.datetime.strptime(self.vaccine_start_date, covid_calibration.DATE_FORMAT) - start).days

    @property
    def governor_obs_dim(self) -> int:
        return self.num_states + 13 + self.num_stringency_levels + 1

    @property
    def planner_obs_dim(self) -> int:
        return 9 * self.num_states + 4 + self.num_subsidy_levels + 1


@dataclass
class CovidEconomyState:
    """Batch first; see :mod:`gpu_marl_envs.envs.covid_economy`'s table. ``S`` = states, ``K`` = filters."""

    susceptible: torch.Tensor
    infected: torch.Tensor
    recovered: torch.Tensor
    vaccinated: torch.Tensor
    deaths: torch.Tensor
    unemployed: torch.Tensor
    productivity: torch.Tensor
    stringency: torch.Tensor
    """(E, beta_delay, S) int8: slot ``j % beta_delay`` holds the level of day ``j``."""
    stringency_changes: torch.Tensor
    """(E, filter_length, S) int8: slot ``j % filter_length`` holds ``pi_j - pi_{j-1}``."""
    filter_sums: torch.Tensor
    """(E, K, S) float32."""
    cooldown: torch.Tensor
    subsidy_level: torch.Tensor
    total_deaths: torch.Tensor
    total_unemployed: torch.Tensor
    total_subsidy: torch.Tensor
    total_productivity: torch.Tensor
    t: torch.Tensor


# --- spaces and groups ----------------------------------------------------------------------------


def agent_groups(p: CovidEconomyParams) -> dict[str, range]:
    return {"governors": range(0, p.num_states), "planner": range(p.planner_id, p.num_agents)}


def action_spaces(p: CovidEconomyParams) -> dict[str, spaces.Discrete]:
    return {
        "governors": spaces.Discrete(p.num_stringency_levels + 1),
        "planner": spaces.Discrete(p.num_subsidy_levels + 1),
    }


def _box(bounded: np.ndarray) -> spaces.Box:
    """Features where ``bounded`` lie in [0, 1]; the others (persons, productivity ratios) are unbounded."""
    low = np.where(bounded, 0.0, -np.inf).astype(np.float32)
    high = np.where(bounded, 1.0, np.inf).astype(np.float32)
    return spaces.Box(low, high, dtype=np.float32)


def observation_spaces(p: CovidEconomyParams) -> dict[str, spaces.Box]:
    s = p.num_states
    governor = np.ones(p.governor_obs_dim, dtype=bool)
    governor[s : s + 7] = False  # compartments / N and productivity ratio
    planner = np.ones(p.planner_obs_dim, dtype=bool)
    planner[: 7 * s] = False
    return {"governors": _box(governor), "planner": _box(planner)}


def in_game(p: CovidEconomyParams, state: CovidEconomyState) -> torch.Tensor:
    """Every agent plays the whole episode."""
    return torch.ones((state.t.shape[0], p.num_agents), dtype=torch.bool, device=state.t.device)


def episode_metrics(p: CovidEconomyParams) -> tuple[str, ...]:
    return EPISODE_METRICS
