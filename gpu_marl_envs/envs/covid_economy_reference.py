"""CovidEconomy's torch reference: ``reset``, ``step``, ``observe``, the action masks and episode
totals, pure batched functions, float32 throughout, that never synchronise with the host; and the
reward normalisers' recomputation. The rules and the float32 operations' order, which the kernels
reproduce, are in :mod:`gpu_marl_envs.envs.covid_economy`'s docstring.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from dataclasses import dataclass

import numpy as np
import torch

from gpu_marl_envs.envs import covid_calibration
from gpu_marl_envs.envs.covid_economy_constants import constants, initial_state_values
from gpu_marl_envs.envs.covid_economy_params import (
    CRRA_CLIP,
    DAYS_PER_YEAR,
    REDUCTION_WIDTH,
    SOFTPLUS_THRESHOLD,
    CovidEconomyParams,
    CovidEconomyState,
)


@functools.lru_cache(maxsize=16)
def _on_device(p: CovidEconomyParams, device: torch.device) -> dict[str, torch.Tensor]:
    """``constants`` and the starting state as tensors on ``device``, made once: a step under
    CUDA-graph capture must not copy from the host, and the runtime's uncaptured first step fills
    this cache before any capture."""
    tensors = {name: torch.tensor(value, device=device) for name, value in constants(p).items()}
    tensors.update(
        {f"initial_{name}": torch.tensor(value, device=device) for name, value in initial_state_values(p).items()}
    )
    return tensors


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
    """``{group: bool (E, n_g, A_g)}``: which actions the rules allow next (see
    :mod:`gpu_marl_envs.envs.covid_economy`)."""
    governors_free = state.t[:, None] >= state.cooldown  # (E, S)
    governor = torch.ones((*governors_free.shape, p.num_stringency_levels + 1), dtype=torch.bool, device=state.t.device)
    governor[..., 1:] = governors_free[..., None]
    planner = torch.ones((state.t.shape[0], 1, p.num_subsidy_levels + 1), dtype=torch.bool, device=state.t.device)
    planner[..., 1:] = (state.t % p.subsidy_interval == 0)[:, None, None]
    return {"governors": governor, "planner": planner}


def observe(p: CovidEconomyParams, state: CovidEconomyState) -> dict[str, torch.Tensor]:
    """``{"governors": (E, S, 75), "planner": (E, 1, 484)}`` float32 (layout in
    :mod:`gpu_marl_envs.envs.covid_economy`)."""
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
