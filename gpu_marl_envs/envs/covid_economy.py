"""CovidEconomy, batched: 51 US state governors set stringency levels and a federal planner sets
subsidies, in a deterministic daily model of COVID-19 and unemployment (torch reference).

A re-implementation of the COVID-19 and economy simulation of the AI Economist (Trott et al., 2021,
"Building a Foundation for Data-Driven, Interpretable, and Robust Policy Design using the AI
Economist"; salesforce/ai-economist, BSD-3-Clause) after ``../shared/specs/covid_economy.md``.
**Its authors present the simulation as a proof of concept, not a tool for real-world policy
decisions; so does this package.** Calibration: :mod:`gpu_marl_envs.envs.covid_calibration`.
Full documentation, with what differs from the original: ``docs/covid_economy.md``.

This module is the torch reference: pure batched functions, float32 throughout, that never
synchronise with the host. Kernel twins reproduce the float32 operations in the order written
under "Float32 conventions".

## Agents
``N = S + 1 = 52``: governors ``0 .. 50`` (states alphabetical, District of Columbia at 8), the
planner ``51``. Groups: ``governors`` (``governor_0 .. governor_50``) and ``planner``
(``planner_0``). Every agent plays the whole episode. One step is one day.

## Action space
- Governor: ``Discrete(L + 1)`` with ``L = 10`` stringency levels. 0 keeps the current level;
  ``k >= 1`` sets level ``k``. Cooldown: ``cooldown`` starts at 0; on step ``t`` (counted after
  the step, 1 on the first) with ``t == cooldown + 1``, ``cooldown += action_cooldown`` (28) if the
  action is non-zero, else ``+= 1``.
- Planner: ``Discrete(num_subsidy_levels + 1)`` (21): the subsidy level, read only on steps with
  ``(t - 1) % subsidy_interval == 0`` (``t = 1, 91, 181, ...``; 0 = no subsidy); on other steps the
  level holds.
Actions are int64 ``(E, N)``, in range (the runtime clamps per group).

## Action masks
``action_masks`` (``True`` = allowed), evaluated on the state an action will be applied to:
- governor: all ``L + 1`` actions when ``t >= cooldown``, else only 0;
- planner: all when ``t % subsidy_interval == 0``, else only 0.
**Masked actions are not rejected**, as in the original (its component applies any action and
leaves masking to the policy): a governor's non-zero action during its cooldown *does* set the
level, but does not restart the cooldown (the cooldown advances only on ``t == cooldown + 1``,
which never holds inside a cooldown); a planner's action on a step where it is masked is
ignored (the level is only read on the steps above). The normaliser procedure relies on the
first: it closes every state on every day.

## Observation space
``Box`` float32 per agent, the agent's action mask (1.0 / 0.0) last. ``S = 51``, ``L = 10``,
``Q = num_subsidy_levels = 20``, ``M = subsidy_interval = 90``; "lag next" is the stringency level
``beta_delay - 1`` days back, the one that sets the infection rate on the next step.

Governor ``i``, ``S + 13 + L + 1 = 75`` features:

| index | feature |
|---|---|
| ``0 .. S-1`` | one-hot of ``i`` |
| ``S .. S+5`` | ``S_i, I_i, R_i, D_i, V_i, U_i`` each ``/ N_i`` (population) |
| ``S+6`` | ``P_i / maxprod_i`` (production plus subsidy over maximal production) |
| ``S+7`` | lag-next level of ``i`` ``/ L`` |
| ``S+8`` | ``t / T`` |
| ``S+9`` | current level of ``i`` ``/ L`` |
| ``S+10`` | ``(M - t % M) / M`` (days to the next subsidy decision, normalised; = ``1 - (t % M) / M``) |
| ``S+11`` | subsidy level ``/ Q`` |
| ``S+12`` | 1.0 if vaccines are delivered on the next step, else 0.0 |
| ``S+13 .. S+13+L`` | action mask (``L + 1``) |

Planner, ``9 S + 4 + Q + 1 = 484`` features:

| index | feature |
|---|---|
| ``0 .. 6S-1`` | ``[S, I, R, D, V, U] / N`` feature-major: ``S_0 .. S_50``, then ``I_0 .. I_50``, ... |
| ``6S .. 7S-1`` | ``P_j / maxprod_j`` |
| ``7S .. 8S-1`` | lag-next level ``/ L`` |
| ``8S .. 9S-1`` | current level ``/ L`` |
| ``9S`` | ``t / T`` |
| ``9S+1 .. 9S+3`` | ``(M - t % M) / M``, subsidy level ``/ Q``, vaccines-next-step indicator |
| ``9S+4 .. 9S+4+Q`` | action mask (``Q + 1``) |

## Dynamics (one step, in this order; per state ``i``)
1. Stringency: ``pi_t = a ? a : pi_{t-1}``; the cooldown as above.
2. Subsidy: the level as above; ``subsidy_i = level * (N_i * max_annual_subsidy_per_person / 365 / Q)``.
3. Vaccines: ``avail_i = floor(vaccine_delivery_interval * N_i / 1e6 * daily_vaccines_per_million)``
   on steps with ``t >= vaccine_start_day`` and ``t % vaccine_delivery_interval == 0``, else 0; all
   used on the day they arrive.
4. Epidemic: ``beta = beta0_i + beta1_i * pi_{t - d}`` (``d = beta_delay = 29``; not clamped, so
   it may be negative); ``f = min(1, avail / (S + 1e-10))``, ``v = min(avail, S)``;
   ``dS = -beta (S / N_i) I (1 - f) - v``, ``dR = gamma I + v``, ``dI = -dS - dR``;
   ``S, I, R <- max(0, . + d.)``, ``V <- V + v``, ``D = mu (R - V)``.
5. Unemployment: ``Delta_t = pi_t - pi_{t-1}``; per filter ``k`` the exponentially weighted sum
   of the last 600 changes, ``s_k = sum_{m<600} Delta_{t-m} exp(-m / lambda_k)``, kept by the exact
   recursion ``s_k <- e^{-1/lambda_k} s_k + Delta_t - e^{-600/lambda_k} Delta_{t-600}``;
   ``U_i = (softplus(sum_k W_ik s_k) + bias_i) N_i / 100``.
6. Economy: ``cant = (0.1 I + D) 0.6 + U``; ``P_i = max(0, 0.6 N_i - cant) * dppw + subsidy_i``.
7. Rewards (below).
``t`` is incremented first: every rule above reads the new ``t`` (1 on the first step).

``dppw`` (daily production per worker) and ``maxprod_i`` are fixed from the calibration:
``U0_i = (ln 2 + bias_i) N_i / 100``, ``workforce = 0.6 US_POP - sum_i U0_i``,
``dppw = gdp_per_capita / (workforce / US_POP) / 365``, ``maxprod_i = (0.6 N_i - U0_i) dppw``.

## Rewards
``crra(x) = (1 + (a^(1-eta) - 1) / (1 - eta)) / 365`` with ``a = clip(365 x, 0.1, 3)``;
``mm(x, lo, hi) = (x - lo) / (hi - lo + 1e-10)``; ``En_i = Hn_i = 365 maxprod_i``, ``Hn_p = sum_i Hn_i``.
- Governor ``i``: ``h = mm(-dD_i VoL / Hn_i)``, ``e = mm(crra(P_i / En_i))``, ``r = alpha_i h + (1 - alpha_i) e``.
- Planner: ``h = mm(-sum dD VoL / Hn_p)``, ``e = mm(crra((sum P - (1 + r_f) sum subsidy) / Hn_p))``,
  ``r = alpha_p h + (1 - alpha_p) e``: the social welfare.
``alpha = z / (1 + z)``, ``z = m alpha0 / (1 - alpha0)``: the fitted weight ``alpha0`` with the
priority multiplier ``m`` of the agent's group (0.3 governors, 0.45 planner: the training
configuration). ``mm`` uses the calibration's normalisers (:func:`reward_normalisers` recomputes them).

## Starting state
Deterministic, the same for every env and every reset: ``S, I, R, U`` from the calibration's data
on ``start_date`` (day index ``si``; 81 for 2020-03-22); ``V = 0``; ``D = mu R``; ``P = 0``;
subsidy level 0; cooldown 0; ``pi_0`` the real level on ``si``. The rings hold the real levels and
changes before ``si`` (days before the data count as level 1, fully open), and the filter sums
their exact weighted sums (computed in float64, rounded once). ``t = 0``.

## Episode end
Truncated at ``t >= episode_length`` (540); never terminated.

## Episode metrics (``episode_totals``, per env, in this order)
``deaths`` (sum over steps of ``sum_i dD_i``: ``D_end - D_start`` summed over states),
``unemployment`` (mean over the episode's days of ``sum_i U_i``), ``subsidies`` (total paid, $),
``productivity`` (total of ``sum_i P_i``, production plus subsidies, $ — the original's
``total_productivity`` metric). Accumulated in float32 on each step.

## State (:class:`CovidEconomyState`; field order = kernel argument order)
``S``-wide fields are ``(E, S)``; the rings are indexed by step: slot ``j % depth`` holds day ``j``
(days before the start have negative ``j``), so on step ``t`` slot ``t % 29`` holds ``pi_{t-29}``
until ``pi_t`` overwrites it, and slot ``t % 600`` holds ``Delta_{t-600}`` until ``Delta_t`` does.

| field | dtype, shape | content |
|---|---|---|
| ``susceptible``, ``infected``, ``recovered``, ``vaccinated``, ``deaths``, ``unemployed`` | f32 ``(E, S)`` | persons |
| ``productivity`` | f32 ``(E, S)`` | ``P_i``, $ per day (production plus subsidy) |
| ``stringency`` | int8 ``(E, 29, S)`` | ring of the last 29 levels |
| ``stringency_changes`` | int8 ``(E, 600, S)`` | ring of the last 600 level changes |
| ``filter_sums`` | f32 ``(E, K, S)`` | ``s_k`` per state (``K = 5``) |
| ``cooldown`` | int32 ``(E, S)`` | |
| ``subsidy_level`` | int32 ``(E,)`` | |
| ``total_deaths``, ``total_unemployed``, ``total_subsidy``, ``total_productivity`` | f32 ``(E,)`` | accumulators |
| ``t`` | int32 ``(E,)`` | steps since reset |

The accumulators are sums over the episode's steps of ``sum_i dD_i``, ``sum_i U_i``,
``sum_i subsidy_i`` and ``sum_i P_i``, each step adding its tree sum (below).

## Float32 conventions (every backend)
Constants (:func:`constants`, also :func:`kernel_constants`) are computed in float64 from the
calibration and rounded once to float32. Every operation below is one float32 operation, rounded
(no fused multiply-add: CUDA C uses ``__fmul_rn``/``__fadd_rn`` or ``-fmad=false``); divisions are
IEEE divisions (the reference divides by device tensors, never a Python scalar).
Names in capitals are :func:`constants` (``N`` is ``POPULATION``, ``avail`` is
``VACCINES_PER_DELIVERY`` or 0).
- ``beta = BETA_SLOPE * float(lag) + BETA_INTERCEPT``; ``f = min(1, avail / (S + EPSILON))``;
  ``v = min(avail, S)``; ``x = ((S / N) * I) * beta * (1 - f)`` left to right; ``dS = -x - v``;
  ``dR = RECOVERY_RATE * I + v``; ``dI = -dS - dR``; ``S, I, R = max(0, S + dS)``, ...;
  ``V = V + v``; ``D = MORTALITY * (R - V)`` (new values).
- ``s_k = (FILTER_DECAY_k * s_k + float(Delta)) - FILTER_DROP_k * float(dropped)``;
  ``z = ((W_0 s_0 + W_1 s_1) + W_2 s_2) + ...`` left to right (``W = FILTER_WEIGHTS``, ``(K, S)``);
  ``softplus(z) = z if z > 20 else log1p(exp(z))`` (the only transcendental functions of a step:
  twins agree to a few ulp there, not bit for bit); ``U = (softplus + UNEMPLOYMENT_BIAS) * UNEMPLOYED_PER_PERCENT``.
- ``cant = ((TOO_SICK_TO_WORK_RATE * I + D) * WORKING_AGE_SHARE) + U``;
  ``P = max(0, WORKERS - cant) * PRODUCTION_PER_WORKER + subsidy``; ``subsidy = float(level) * SUBSIDY_PER_LEVEL``.
- ``crra(x)``: ``a = min(max(365 * x, float32(0.1)), 3)``; ``p = 1 / a`` when ``CRRA_EXPONENT == -1``
  (eta = 2, the default; ``CRRA_RECIPROCAL``), else ``powf(a, CRRA_EXPONENT)`` (not bit-reproducible
  across devices); ``crra = ((p - 1) / CRRA_EXPONENT + 1) / 365``.
- Per agent (``(N,)`` constants, the planner last): ``dD = D_new - D_old``;
  ``h = ((-dD) * HEALTH_SCALE - MIN_HEALTH) / HEALTH_RANGE``,
  ``e = (crra(P / ECONOMIC_NORM) - MIN_ECONOMIC) / ECONOMIC_RANGE``, ``r = HEALTH_WEIGHT * h + ECONOMIC_WEIGHT * e``;
  the planner's ``dD`` and ``P`` are the sums below, its ``P`` less ``SUBSIDY_COST * sum subsidy``.
- The planner's sums over states (``dD``, ``P``, ``subsidy``, and ``U`` for the metric) are a tree:
  values in a 64-slot array (zeros past 51), then ``x[j] += x[j + w]`` for ``w = 32, 16, ..., 1``
  (:func:`block_sum`), i.e. a shared-memory reduction after a barrier.
- Observations are IEEE divisions of the float32 values by float32 constants (``N_i``,
  ``maxprod_i``, ``L``, ``T``, ``M``, ``Q``).

## Kernels
``kernels/covid_economy.cu`` (CUDA C) and ``kernels/covid_economy_numba.py`` (Numba), compiled per
params from :func:`kernel_constants`: a block of ``REDUCTION_WIDTH = 64`` threads per env; thread
``i < 51`` is governor ``i`` and steps state ``i``, thread 51 is the planner, the spare lanes fill
the reduction's slots; the planner's sums over states are the shared-memory tree reduction above.
One launch per step: the game's device functions run inside the multi-agent template
(``kernels/multi_agent.cuh``, ``kernels/multi_agent_numba.py``), which adds the rewards to the
returns, writes the episode totals and applies the autoreset mode. The twins agree with this
reference bit for bit, except where the softplus's ``log1p(exp(z))`` rounds differently (within
about 2 ulp, and what follows from it); the twin tests use ``rtol = atol = 1e-5``.

## Arguments
:class:`CovidEconomyParams`; the defaults are the AI Economist's training configuration.

## Version history
v0: the spec's rules; the torch reference and both kernel twins (CUDA C, Numba).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import numbers
from dataclasses import dataclass, field

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs.envs import covid_calibration
from gpu_marl_envs.envs.covid_calibration import CovidCalibration
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition
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
    """Batch first; see the module docstring's table. ``S`` = states, ``K`` = filters."""

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


# --- constants ------------------------------------------------------------------------------------


def health_weights(p: CovidEconomyParams) -> np.ndarray:
    """(N,) float64: each agent's reward weight ``alpha`` on health, governors then the planner."""
    alpha0 = p.calibration.health_weight
    m = np.full(alpha0.shape, float(p.health_priority_scaling_governors))
    m[-1] = p.health_priority_scaling_planner
    z = m * alpha0 / (1 - alpha0)
    return z / (1 + z)


def economy_scales(p: CovidEconomyParams) -> tuple[float, np.ndarray]:
    """``(dppw, maxprod (S,))`` in float64: daily production per worker, and each state's daily
    production with nobody sick and baseline unemployment (all stringency changes 0)."""
    c = p.calibration
    population = c.population.astype(np.float64)
    baseline_unemployed = (math.log(2) + c.unemployment_bias) * population / 100  # softplus(0) = ln 2
    workforce = c.us_population * p.working_age_share - baseline_unemployed.sum()
    dppw = c.gdp_per_capita / (workforce / c.us_population) / DAYS_PER_YEAR
    return dppw, (p.working_age_share * population - baseline_unemployed) * dppw


def _f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).astype(np.float32)


@functools.lru_cache(maxsize=16)
def constants(p: CovidEconomyParams) -> dict[str, np.ndarray]:
    """Every number a step uses, by kernel-constant name: read-only float32 arrays, each rounded once
    from its float64 value. Per-state arrays are ``(S,)``, per-agent ``(N,)`` (planner last),
    per-filter ``(K,)``, scalars 0-d."""
    c = p.calibration
    population = c.population.astype(np.float64)
    dppw, maxprod = economy_scales(p)
    norm = np.append(DAYS_PER_YEAR * maxprod, DAYS_PER_YEAR * maxprod.sum())  # En = Hn, per agent
    alpha = health_weights(p)
    lambdas = c.filter_lambdas
    named = {
        "POPULATION": _f32(population),
        "BETA_INTERCEPT": _f32(c.beta_intercepts),
        "BETA_SLOPE": _f32(c.beta_slopes),
        "MORTALITY": _f32(c.mortality),
        "RECOVERY_RATE": _f32(c.recovery_rate),
        "EPSILON": _f32(EPSILON),
        "VACCINES_PER_DELIVERY": _f32(
            np.floor(p.vaccine_delivery_interval * population / 1e6 * p.daily_vaccines_per_million)
        ),
        "SUBSIDY_PER_LEVEL": _f32(population * p.max_annual_subsidy_per_person / DAYS_PER_YEAR / p.num_subsidy_levels),
        "FILTER_DECAY": _f32(np.exp(-1 / lambdas)),
        "FILTER_DROP": _f32(np.exp(-c.filter_length / lambdas)),
        "FILTER_WEIGHTS": _f32(c.filter_weights.T),  # (K, S): filter-major, like filter_sums
        "UNEMPLOYMENT_BIAS": _f32(c.unemployment_bias),
        "UNEMPLOYED_PER_PERCENT": _f32(population / 100),
        "TOO_SICK_TO_WORK_RATE": _f32(p.too_sick_to_work_rate),
        "WORKING_AGE_SHARE": _f32(p.working_age_share),
        "WORKERS": _f32(p.working_age_share * population),
        "PRODUCTION_PER_WORKER": _f32(dppw),
        "MAX_PRODUCTIVITY": _f32(maxprod),
        "ECONOMIC_NORM": _f32(norm),
        "HEALTH_SCALE": _f32(c.value_of_life / norm),
        "SUBSIDY_COST": _f32(1 + p.risk_free_interest_rate),
        "CRRA_EXPONENT": _f32(1 - p.crra_eta),
        "MIN_HEALTH": _f32(c.min_health),
        "HEALTH_RANGE": _f32(c.max_health - c.min_health + EPSILON),
        "MIN_ECONOMIC": _f32(c.min_economic),
        "ECONOMIC_RANGE": _f32(c.max_economic - c.min_economic + EPSILON),
        "HEALTH_WEIGHT": _f32(alpha),
        "ECONOMIC_WEIGHT": _f32(1 - alpha),
    }
    for value in named.values():
        value.setflags(write=False)  # shared by every caller through the cache
    return named


@functools.lru_cache(maxsize=16)
def initial_state_values(p: CovidEconomyParams) -> dict[str, np.ndarray]:
    """The starting state of one env's per-state fields (numpy, read-only; every env starts from it)."""
    c, si = p.calibration, p.start_index
    k = constants(p)
    days = np.arange(-c.beta_delay + 1, 1)  # the stringency ring: days -28 .. 0
    ring = np.zeros((c.beta_delay, c.num_states), dtype=np.int8)
    ring[days % c.beta_delay] = c.policy_levels(si + days)
    days = np.arange(-c.filter_length + 1, 1)  # the change ring: days -599 .. 0
    changes = c.policy_levels(si + days) - c.policy_levels(si + days - 1)
    ring_changes = np.zeros((c.filter_length, c.num_states), dtype=np.int8)
    ring_changes[days % c.filter_length] = changes
    age = -days  # 599 .. 0: the newest change weighs exp(0)
    sums = (np.exp(-age[None, :, None] / c.filter_lambdas[:, None, None]) * changes[None]).sum(axis=1)
    recovered = _f32(c.recovered[si])
    zeros = np.zeros(c.num_states, dtype=np.float32)
    named = {
        "susceptible": _f32(c.susceptible[si]),
        "infected": _f32(c.infected[si]),
        "recovered": recovered,
        "vaccinated": zeros,
        "deaths": k["MORTALITY"] * recovered,  # float32 product, as the step computes D with V = 0
        "unemployed": _f32(c.unemployed[si]),
        "productivity": zeros,
        "stringency": ring,
        "stringency_changes": ring_changes,
        "filter_sums": _f32(sums),
        "cooldown": np.zeros(c.num_states, dtype=np.int32),
    }
    for value in named.values():
        value.setflags(write=False)
    return named


@functools.lru_cache(maxsize=16)
def _on_device(p: CovidEconomyParams, device: torch.device) -> dict[str, torch.Tensor]:
    """:func:`constants` and the starting state as tensors on ``device``, made once: a step under
    CUDA-graph capture must not copy from the host, and the runtime's uncaptured first step fills
    this cache before any capture."""
    tensors = {name: torch.tensor(value, device=device) for name, value in constants(p).items()}
    tensors.update(
        {f"initial_{name}": torch.tensor(value, device=device) for name, value in initial_state_values(p).items()}
    )
    return tensors


def kernel_constants(p: CovidEconomyParams) -> dict:
    """The kernels' compile-time constants: ints, float32 values as Python floats, arrays as
    (flattened, row-major) tuples; the starting state under ``INITIAL_*``."""
    c = p.calibration
    out = {
        "NUM_STATES": p.num_states,
        "NUM_AGENTS": p.num_agents,
        "NUM_STRINGENCY_LEVELS": p.num_stringency_levels,
        "NUM_SUBSIDY_LEVELS": p.num_subsidy_levels,
        "NUM_FILTERS": len(c.filter_lambdas),
        "BETA_DELAY": c.beta_delay,
        "FILTER_LENGTH": c.filter_length,
        "EPISODE_LENGTH": p.episode_length,
        "ACTION_COOLDOWN": p.action_cooldown,
        "SUBSIDY_INTERVAL": p.subsidy_interval,
        "VACCINE_START_DAY": p.vaccine_start_day,
        "VACCINE_DELIVERY_INTERVAL": p.vaccine_delivery_interval,
        "GOVERNOR_OBS_DIM": p.governor_obs_dim,
        "PLANNER_OBS_DIM": p.planner_obs_dim,
        "REDUCTION_WIDTH": REDUCTION_WIDTH,
        "SOFTPLUS_THRESHOLD": SOFTPLUS_THRESHOLD,
        "DAYS_PER_YEAR": float(DAYS_PER_YEAR),
        "CRRA_CLIP_LOW": float(np.float32(CRRA_CLIP[0])),
        "CRRA_CLIP_HIGH": CRRA_CLIP[1],
        "CRRA_RECIPROCAL": bool(constants(p)["CRRA_EXPONENT"] == -1),
    }
    named = {**constants(p), **{f"INITIAL_{k.upper()}": v for k, v in initial_state_values(p).items()}}
    for name, value in named.items():
        value = np.asarray(value)
        if value.ndim == 0:
            out[name] = float(value)
        elif value.dtype.kind == "f":
            out[name] = tuple(float(x) for x in value.reshape(-1))
        else:
            out[name] = tuple(int(x) for x in value.reshape(-1))
    return out


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


# --- reference functions --------------------------------------------------------------------------


def reset(p: CovidEconomyParams, key: torch.Tensor, num_envs: int) -> CovidEconomyState:
    """The starting state for ``num_envs`` envs (deterministic: ``key`` only gives the device)."""
    device = key.device
    k = _on_device(p, device)
    per_state = {
        name: k[f"initial_{name}"].expand(num_envs, *k[f"initial_{name}"].shape).clone()
        for name in initial_state_values(p)
    }
    zero = torch.zeros(num_envs, dtype=torch.float32, device=device)
    return CovidEconomyState(
        **per_state,
        subsidy_level=torch.zeros(num_envs, dtype=torch.int32, device=device),
        total_deaths=zero,
        total_unemployed=zero.clone(),
        total_subsidy=zero.clone(),
        total_productivity=zero.clone(),
        t=torch.zeros(num_envs, dtype=torch.int32, device=device),
    )


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """A float32 0-dim tensor on ``like``'s device: dividing by it is an IEEE division on every
    device (CUDA torch turns a division by a Python scalar into a multiplication by its reciprocal)."""
    return torch.full((), value, dtype=torch.float32, device=like.device)


def block_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension (at most ``REDUCTION_WIDTH``) as a kernel's tree reduction adds:
    zero-padded to ``REDUCTION_WIDTH`` slots, then slot ``j`` += slot ``j + w`` for ``w`` halving
    from ``REDUCTION_WIDTH / 2`` to 1. Fixing the order makes the float32 sum reproducible."""
    x = torch.nn.functional.pad(x, (0, REDUCTION_WIDTH - x.shape[-1]))
    width = REDUCTION_WIDTH // 2
    while width >= 1:
        x = x[..., :width] + x[..., width : 2 * width]
        width //= 2
    return x[..., 0]


def _ring_read(ring: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """``ring[e, slot[e], :]`` for each env ``e``: ``(E, S)``."""
    return ring[torch.arange(ring.shape[0], device=ring.device), slot.long()]


def _ring_write(ring: torch.Tensor, slot: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A copy of ``ring`` with ``values`` (E, S) in slot ``slot[e]`` of each env. (An indexed put
    into a clone: ``scatter`` on int8 is many times slower on CPU.)"""
    envs = torch.arange(ring.shape[0], device=ring.device)
    return ring.clone().index_put_((envs, slot.long()), values.to(ring.dtype))


def _crra(p: CovidEconomyParams, k: dict, x: torch.Tensor) -> torch.Tensor:
    """The daily CRRA utility of an economic index ``x`` (a fraction of annual production per day)."""
    days = _scalar(DAYS_PER_YEAR, x)
    a = (x * DAYS_PER_YEAR).clamp(float(np.float32(CRRA_CLIP[0])), CRRA_CLIP[1])
    exponent = k["CRRA_EXPONENT"]
    power = torch.reciprocal(a) if constants(p)["CRRA_EXPONENT"] == -1 else torch.pow(a, exponent)
    return ((power - 1) / exponent + 1) / days


@dataclass
class _RawIndices:
    """The un-normalised health and economic indices of a step, ``(E, N)``, planner last."""

    health: torch.Tensor
    economic: torch.Tensor


def _advance(p: CovidEconomyParams, state: CovidEconomyState, actions: torch.Tensor):
    """One day of dynamics: ``(next_state, raw indices)``."""
    k = _on_device(p, state.t.device)
    c = p.calibration
    t = state.t + 1
    governor_actions = actions[:, : p.num_states].to(torch.int32)
    planner_action = actions[:, p.planner_id].to(torch.int32)

    # 1. Stringency (the cooldown counts only on t == cooldown + 1: a masked action still sets the level).
    previous = _ring_read(state.stringency, state.t % c.beta_delay).to(torch.int32)
    lagged = _ring_read(state.stringency, t % c.beta_delay).to(torch.int32)  # pi_{t - d}, about to be overwritten
    level = torch.where(governor_actions != 0, governor_actions, previous)
    stringency = _ring_write(state.stringency, t % c.beta_delay, level)
    due = t[:, None] == state.cooldown + 1
    cooldown = torch.where(
        due, state.cooldown + torch.where(governor_actions != 0, p.action_cooldown, 1), state.cooldown
    )

    # 2. Subsidy.
    decides = (t - 1) % p.subsidy_interval == 0
    subsidy_level = torch.where(decides, planner_action, state.subsidy_level)
    subsidy = subsidy_level.to(torch.float32)[:, None] * k["SUBSIDY_PER_LEVEL"]

    # 3. Vaccines.
    delivers = (t >= p.vaccine_start_day) & (t % p.vaccine_delivery_interval == 0)
    available = torch.where(delivers[:, None], k["VACCINES_PER_DELIVERY"], 0.0)

    # 4. Epidemic.
    s, i, r = state.susceptible, state.infected, state.recovered
    beta = k["BETA_SLOPE"] * lagged.to(torch.float32) + k["BETA_INTERCEPT"]
    fraction_vaccinated = torch.clamp(available / (s + k["EPSILON"]), max=1.0)
    vaccinated_now = torch.minimum(available, s)
    infections = s / k["POPULATION"] * i * beta * (1 - fraction_vaccinated)
    d_s = -infections - vaccinated_now
    d_r = k["RECOVERY_RATE"] * i + vaccinated_now
    d_i = -d_s - d_r
    susceptible = torch.clamp(s + d_s, min=0.0)
    infected = torch.clamp(i + d_i, min=0.0)
    recovered = torch.clamp(r + d_r, min=0.0)
    vaccinated = state.vaccinated + vaccinated_now
    deaths = k["MORTALITY"] * (recovered - vaccinated)

    # 5. Unemployment.
    change = level - previous
    slot = t % c.filter_length
    dropped = _ring_read(state.stringency_changes, slot).to(torch.float32)
    stringency_changes = _ring_write(state.stringency_changes, slot, change)
    filter_sums = (
        k["FILTER_DECAY"][:, None] * state.filter_sums
        + change.to(torch.float32)[:, None]
        - k["FILTER_DROP"][:, None] * dropped[:, None]
    )
    weighted = k["FILTER_WEIGHTS"] * filter_sums  # (E, K, S)
    signal = weighted[:, 0]
    for f in range(1, weighted.shape[1]):
        signal = signal + weighted[:, f]
    excess = torch.where(signal > SOFTPLUS_THRESHOLD, signal, torch.log1p(torch.exp(signal)))
    unemployed = (excess + k["UNEMPLOYMENT_BIAS"]) * k["UNEMPLOYED_PER_PERCENT"]

    # 6. Economy.
    cant_work = (k["TOO_SICK_TO_WORK_RATE"] * infected + deaths) * k["WORKING_AGE_SHARE"] + unemployed
    productivity = torch.clamp(k["WORKERS"] - cant_work, min=0.0) * k["PRODUCTION_PER_WORKER"] + subsidy

    # 7. Raw indices, governors then the planner (sums over states as a kernel's tree reduction).
    new_deaths = deaths - state.deaths
    total_new_deaths = block_sum(new_deaths)
    total_productivity = block_sum(productivity)
    total_subsidy = block_sum(subsidy)
    spent = total_productivity - k["SUBSIDY_COST"] * total_subsidy
    health = torch.cat([new_deaths, total_new_deaths[:, None]], dim=1)
    economic = torch.cat([productivity, spent[:, None]], dim=1)
    raw = _RawIndices(health=-health * k["HEALTH_SCALE"], economic=_crra(p, k, economic / k["ECONOMIC_NORM"]))

    next_state = CovidEconomyState(
        susceptible=susceptible,
        infected=infected,
        recovered=recovered,
        vaccinated=vaccinated,
        deaths=deaths,
        unemployed=unemployed,
        productivity=productivity,
        stringency=stringency,
        stringency_changes=stringency_changes,
        filter_sums=filter_sums,
        cooldown=cooldown,
        subsidy_level=subsidy_level,
        total_deaths=state.total_deaths + total_new_deaths,
        total_unemployed=state.total_unemployed + block_sum(unemployed),
        total_subsidy=state.total_subsidy + total_subsidy,
        total_productivity=state.total_productivity + total_productivity,
        t=t,
    )
    return next_state, raw


def step(p: CovidEconomyParams, state: CovidEconomyState, actions: torch.Tensor):
    """``(state, actions (E, N) int64) -> (next_state, rewards (E, N) float32, terminated (E,) bool,
    truncated (E,) bool)``. Pure: ``state`` is not modified."""
    k = _on_device(p, state.t.device)
    next_state, raw = _advance(p, state, actions)
    health = (raw.health - k["MIN_HEALTH"]) / k["HEALTH_RANGE"]
    economic = (raw.economic - k["MIN_ECONOMIC"]) / k["ECONOMIC_RANGE"]
    rewards = k["HEALTH_WEIGHT"] * health + k["ECONOMIC_WEIGHT"] * economic
    terminated = torch.zeros_like(next_state.t, dtype=torch.bool)
    truncated = next_state.t >= p.episode_length
    return next_state, rewards, terminated, truncated


def action_masks(p: CovidEconomyParams, state: CovidEconomyState) -> dict[str, torch.Tensor]:
    """``{group: bool (E, n_g, A_g)}``: which actions the rules allow next (see the module docstring)."""
    governors_free = state.t[:, None] >= state.cooldown  # (E, S)
    governor = torch.ones((*governors_free.shape, p.num_stringency_levels + 1), dtype=torch.bool, device=state.t.device)
    governor[..., 1:] = governors_free[..., None]
    planner = torch.ones((state.t.shape[0], 1, p.num_subsidy_levels + 1), dtype=torch.bool, device=state.t.device)
    planner[..., 1:] = (state.t % p.subsidy_interval == 0)[:, None, None]
    return {"governors": governor, "planner": planner}


def observe(p: CovidEconomyParams, state: CovidEconomyState) -> dict[str, torch.Tensor]:
    """``{"governors": (E, S, 75), "planner": (E, 1, 484)}`` float32 (layout in the module docstring)."""
    k = _on_device(p, state.t.device)
    c = p.calibration
    num_envs, s = state.t.shape[0], p.num_states
    levels = _scalar(p.num_stringency_levels, state.t)
    compartments = (
        torch.stack(
            [state.susceptible, state.infected, state.recovered, state.deaths, state.vaccinated, state.unemployed],
            dim=1,
        )
        / k["POPULATION"]
    )  # (E, 6, S)
    productivity = state.productivity / k["MAX_PRODUCTIVITY"]
    lag_next = _ring_read(state.stringency, (state.t + 1) % c.beta_delay).to(torch.float32) / levels
    current = _ring_read(state.stringency, state.t % c.beta_delay).to(torch.float32) / levels
    time = state.t.to(torch.float32) / _scalar(p.episode_length, state.t)
    subsidy_timer = (p.subsidy_interval - state.t % p.subsidy_interval).to(torch.float32) / _scalar(
        p.subsidy_interval, state.t
    )
    subsidy_level = state.subsidy_level.to(torch.float32) / _scalar(p.num_subsidy_levels, state.t)
    next_t = state.t + 1
    vaccines_next = ((next_t >= p.vaccine_start_day) & (next_t % p.vaccine_delivery_interval == 0)).to(torch.float32)
    masks = action_masks(p, state)
    scalars = torch.stack([subsidy_timer, subsidy_level, vaccines_next], dim=1)  # (E, 3)

    one_hot = torch.eye(s, dtype=torch.float32, device=state.t.device).expand(num_envs, s, s)
    governors = torch.cat(
        [
            one_hot,
            compartments.transpose(1, 2),
            productivity[..., None],
            lag_next[..., None],
            time[:, None, None].expand(num_envs, s, 1),
            current[..., None],
            scalars[:, None].expand(num_envs, s, 3),
            masks["governors"].to(torch.float32),
        ],
        dim=2,
    )
    planner = torch.cat(
        [
            compartments.reshape(num_envs, 6 * s),
            productivity,
            lag_next,
            current,
            time[:, None],
            scalars,
            masks["planner"][:, 0].to(torch.float32),
        ],
        dim=1,
    )[:, None]
    return {"governors": governors, "planner": planner}


def episode_totals(p: CovidEconomyParams, state: CovidEconomyState) -> torch.Tensor:
    """(E, 4) float32: ``EPISODE_METRICS`` of the episode so far (the runtime reads it where an
    episode ended). ``unemployment`` is a mean over the ``t`` days stepped (0 before any step)."""
    days = torch.clamp(state.t, min=1).to(torch.float32)
    return torch.stack(
        [state.total_deaths, state.total_unemployed / days, state.total_subsidy, state.total_productivity], dim=1
    )


# --- the normalisers ------------------------------------------------------------------------------


def reward_normalisers(
    p: CovidEconomyParams | None = None, start_date: str = "2020-03-22", end_date: str = "2020-12-31"
) -> dict[str, np.ndarray]:
    """Recompute the reward normalisers as the AI Economist's calibration does: run the simulation
    from ``start_date`` for the days up to ``end_date`` (284 by default) with every state fully open
    (level 1 every day) and fully closed (level 10 every day), no subsidy, and average each agent's
    raw daily health and economic indices. Open gives ``min_health`` and ``max_economic``, closed
    ``max_health`` and ``min_economic``. Returns ``(N,)`` float64 arrays by calibration field name.
    Uses ``p``'s settings (vaccines, shares, eta); the calibration's own normalisers are not read."""
    p = CovidEconomyParams() if p is None else p
    days = (
        datetime.datetime.strptime(end_date, covid_calibration.DATE_FORMAT)
        - datetime.datetime.strptime(start_date, covid_calibration.DATE_FORMAT)
    ).days
    p = dataclasses.replace(p, start_date=start_date, episode_length=days)
    means = {}
    for name, level in (("open", 1), ("closed", p.num_stringency_levels)):
        state = reset(p, torch.zeros(1, dtype=torch.int64), 1)
        actions = torch.full((1, p.num_agents), level, dtype=torch.int64)
        actions[:, p.planner_id] = 0
        health = np.zeros(p.num_agents)
        economic = np.zeros(p.num_agents)
        for _ in range(days):
            state, raw = _advance(p, state, actions)
            health += raw.health[0].double().numpy()
            economic += raw.economic[0].double().numpy()
        means[name] = (health / days, economic / days)
    return {
        "min_health": means["open"][0],
        "max_economic": means["open"][1],
        "max_health": means["closed"][0],
        "min_economic": means["closed"][1],
    }


COVID_ECONOMY = MultiAgentDefinition(
    id="CovidEconomy-v0",
    params_type=CovidEconomyParams,
    state_type=CovidEconomyState,
    agent_groups=agent_groups,
    observation_spaces=observation_spaces,
    action_spaces=action_spaces,
    reset=reset,
    step=step,
    observe=observe,
    action_masks=action_masks,
    episode_metrics=episode_metrics,
    episode_totals=episode_totals,
    in_game=in_game,
    kernel_constants=kernel_constants,
    constant_prefix="CE",
    block_threads=lambda p: REDUCTION_WIDTH,
)
