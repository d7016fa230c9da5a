"""Scripted policies for ``CovidEconomy-v0``: the baselines a trained policy is compared against.

Each is a :class:`SchedulePolicy`, a batched torch policy: ``actions = policy(observations)``
maps the group observations of :meth:`GpuParallelEnv.reset_groups` / :meth:`~GpuParallelEnv.step_groups`
(``{"governors": (E, 51, 75), "planner": (E, 1, 484)}``, any ``E``, on the policy's device) to
the group actions ``{"governors": (E, 51), "planner": (E, 1)}`` int64. It reads only what an agent
observes: the day ``t``, each governor's current level and its action mask (the observation's last
features; the same as ``infos[group]["action_mask"]``).

A schedule gives, for each day ``tau`` of the episode (``tau = t + 1``: the day a step leads to),
each state's target stringency level and the subsidy level of the planner's interval starting that
day; beyond the schedule's last day the last target holds. The policy moves towards the targets
under the env's rules (``envs/covid_economy.py``):

- a governor acts (the target level) only when its level differs from the target and, with
  ``within_masks`` (every policy but :func:`real_world`'s default), when its mask allows it: a
  change locks the governor for ``action_cooldown`` days (28), so a target is reached on the first
  day the cooldown allows; otherwise it sends 0 ("keep");
- the planner sends the target subsidy level on its decision days (``t % subsidy_interval == 0``,
  where its mask opens) and 0 on the others, where the env ignores it.

The policies:

- :func:`real_world` — the data's stringency levels and federal subsidies (the calibration's
  series; beyond its last day, 2021-06-01 in the shipped one, the last value holds: that day's
  stringency levels, and no new payment, so the last payment's level ends 90 days after it was
  paid). The day ``tau`` of an episode from ``start_date`` gets the level of the date
  ``start_date + tau``. Stringency follows the data *exactly*, every day, as the AI Economist's
  real-world baseline does (its ``use_real_world_policies`` sets the level from the data each day
  and opens every mask): so a governor changes level inside its cooldown when the data does, which
  the env accepts (a masked action sets the level). ``within_masks=True`` gives the variant that
  obeys the cooldown, reaching each data level on the first day it may act. Subsidies cannot be
  copied day by day: the env reads the planner only every ``subsidy_interval`` days, while the
  data's payments (converted to levels as the AI Economist does:
  :meth:`CovidCalibration.subsidy_levels`) start on other days. On each decision day the policy
  picks the level whose spending over the coming interval equals the data's over the same days,
  rounded to a whole level (the original holds a payment's level for 90 days from its payment day).
- :func:`all_open` — level 1 in every state (from day 1), no subsidy.
- :func:`all_closed` — level 10 in every state, the full subsidy (level ``num_subsidy_levels``).
- :func:`closed_then_open` — level 10 for ``closed_days`` days, then level 1 (on the first day the
  cooldown allows, so at the earliest on day ``action_cooldown + 1``), no subsidy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpu_marl_envs.envs.covid_economy_params import CovidEconomyParams


def observed_day_and_levels(p: CovidEconomyParams, governors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(t (E,), levels (E, S))`` int64 from the governors' observations ``(E, S, d)``: features
    ``S + 8`` (``t / T``) and ``S + 9`` (the governor's level ``/ L``) of the layout in
    ``envs/covid_economy.py``'s docstring (both exact after rounding: ``T``, ``L`` < 2**20)."""
    s = p.num_states
    t = torch.round(governors[:, 0, s + 8] * p.episode_length).long()
    levels = torch.round(governors[:, :, s + 9] * p.num_stringency_levels).long()
    return t, levels


@dataclass(frozen=True)
class SchedulePolicy:
    """Targets per day, pursued within the env's rules (module docstring)."""

    name: str
    params: CovidEconomyParams
    stringency: torch.Tensor
    """(R, S) int64: row ``min(tau, R - 1)`` holds the target level of each state on day ``tau``."""
    subsidy: torch.Tensor
    """(R', ) int64: row ``min(tau, R' - 1)`` holds the subsidy level of the interval starting on day ``tau``."""
    within_masks: bool = True
    """False: a governor changes level whenever its target does, cooldown or not (masked actions)."""

    def __post_init__(self):
        p = self.params
        if self.stringency.ndim != 2 or self.stringency.shape[1] != p.num_states or len(self.stringency) == 0:
            raise ValueError(f"stringency must have shape (days, {p.num_states}), got {tuple(self.stringency.shape)}")
        if self.subsidy.ndim != 1 or len(self.subsidy) == 0:
            raise ValueError(f"subsidy must have shape (days,), got {tuple(self.subsidy.shape)}")
        if ((self.stringency < 1) | (self.stringency > p.num_stringency_levels)).any():
            raise ValueError(f"stringency targets must lie in 1 .. {p.num_stringency_levels}")
        if ((self.subsidy < 0) | (self.subsidy > p.num_subsidy_levels)).any():
            raise ValueError(f"subsidy targets must lie in 0 .. {p.num_subsidy_levels}")

    @property
    def device(self) -> torch.device:
        return self.stringency.device

    def to(self, device) -> SchedulePolicy:
        """This policy with its tables on ``device``."""
        return SchedulePolicy(
            self.name, self.params, self.stringency.to(device), self.subsidy.to(device), self.within_masks
        )

    def __call__(self, observations: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        p = self.params
        governors, planner = observations["governors"], observations["planner"]
        if governors.device != self.device:
            raise ValueError(
                f"observations are on {governors.device} but the policy on {self.device}; "
                f"use policy.to('{governors.device}')"
            )
        t, levels = observed_day_and_levels(p, governors)
        day = t + 1
        target = self.stringency[torch.clamp(day, max=len(self.stringency) - 1)]  # (E, S)
        # A mask allows either only 0 or every action: action 1's entry says which.
        free = governors[:, :, -p.num_stringency_levels] > 0.5
        act = target != levels
        if self.within_masks:
            act &= free
        decides = planner[:, :, -p.num_subsidy_levels] > 0.5  # (E, 1)
        subsidy = self.subsidy[torch.clamp(day, max=len(self.subsidy) - 1)][:, None]
        return {"governors": torch.where(act, target, 0), "planner": torch.where(decides, subsidy, 0)}


def _policy(name, p: CovidEconomyParams, stringency, subsidy, device, within_masks=True) -> SchedulePolicy:
    return SchedulePolicy(
        name,
        p,
        torch.as_tensor(np.asarray(stringency), dtype=torch.int64, device=device),
        torch.as_tensor(np.asarray(subsidy), dtype=torch.int64, device=device),
        within_masks,
    )


def real_world_subsidy_levels(p: CovidEconomyParams, num_days: int) -> np.ndarray:
    """(num_days,) int64: the real-world subsidy level of data days ``0 .. num_days - 1``: the
    calibration's (:meth:`CovidCalibration.subsidy_levels`), continued past the data's last day with
    no new payment (the payment series' last value, 0, holds), so each payment's level still lasts
    its ``subsidy_interval`` days."""
    c, interval = p.calibration, p.subsidy_interval
    levels = c.subsidy_levels(p.max_annual_subsidy_per_person, p.num_subsidy_levels, interval)
    # The level paid from day q on: the day's level change plus the level that expires that day.
    paid = np.zeros(max(num_days, c.num_days), dtype=np.int64)
    for day, change in enumerate(np.diff(levels, prepend=0)):
        paid[day] = change + (paid[day - interval] if day >= interval else 0)
    running = np.cumsum(paid)
    return running[:num_days] - np.concatenate([np.zeros(interval, dtype=np.int64), running])[:num_days]


def real_world(p: CovidEconomyParams, within_masks: bool = False, device=None) -> SchedulePolicy:
    """The data's stringency (exactly, as the original's baseline; or ``within_masks``) and
    subsidies (spending per interval preserved), from ``p.start_date`` (module docstring)."""
    c = p.calibration
    days = np.arange(p.episode_length + 1)  # tau = 0 .. T
    stringency = c.policy_levels(np.minimum(p.start_index + days, c.num_days - 1))  # the last day's levels hold
    daily = real_world_subsidy_levels(p, p.start_index + p.episode_length + 1)[p.start_index :]  # tau = 0 .. T
    # The interval starting on day tau: days tau .. tau + M - 1 (days past T count as day T).
    window = np.minimum(days[:, None] + np.arange(p.subsidy_interval), p.episode_length)
    subsidy = np.clip(np.round(daily[window].mean(axis=1)), 0, p.num_subsidy_levels)
    name = "real world, within masks" if within_masks else "real world"
    return _policy(name, p, stringency, subsidy, device, within_masks)


def all_open(p: CovidEconomyParams, device=None) -> SchedulePolicy:
    """Level 1 everywhere, no subsidy."""
    return _policy("all open", p, np.ones((1, p.num_states)), [0], device)


def all_closed(p: CovidEconomyParams, device=None) -> SchedulePolicy:
    """Level 10 everywhere, the full subsidy."""
    return _policy(
        "all closed, full subsidy",
        p,
        np.full((1, p.num_states), p.num_stringency_levels),
        [p.num_subsidy_levels],
        device,
    )


def closed_then_open(p: CovidEconomyParams, closed_days: int = 60, device=None) -> SchedulePolicy:
    """Level 10 on days ``1 .. closed_days``, then level 1; no subsidy."""
    if isinstance(closed_days, bool) or not isinstance(closed_days, (int, np.integer)) or closed_days < 1:
        raise ValueError(f"closed_days must be an int >= 1, got {closed_days!r}")
    closed = np.arange(closed_days + 2) <= closed_days  # rows tau = 0 .. closed_days + 1
    stringency = np.where(closed[:, None], p.num_stringency_levels, 1).repeat(p.num_states, axis=1)
    return _policy(f"closed {closed_days} days, then open", p, stringency, [0], device)


def scripted_policies(p: CovidEconomyParams, closed_days: int = 60, device=None) -> list[SchedulePolicy]:
    """Every scripted policy, in the report's order."""
    return [
        real_world(p, device=device),
        real_world(p, within_masks=True, device=device),
        all_open(p, device),
        all_closed(p, device),
        closed_then_open(p, closed_days, device),
    ]
