"""CovidEconomy's constants: every number a step uses (float32, each rounded once from float64),
the starting state, and :func:`kernel_constants`, which hands them to both kernels. The rules and
float32 conventions are in :mod:`gpu_marl_envs.envs.covid_economy`'s docstring.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from gpu_marl_envs.envs.covid_economy_params import (
    CRRA_CLIP,
    DAYS_PER_YEAR,
    EPSILON,
    REDUCTION_WIDTH,
    SOFTPLUS_THRESHOLD,
    CovidEconomyParams,
)


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
