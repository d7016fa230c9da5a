"""CovidEconomy-v0's rules on the torch reference, from crafted states, and against a float64
re-implementation written straight from the spec (``../shared/specs/covid_economy.md``).

About 5 s on CPU (one 700-day and two 540-day runs take most of it); one GPU-marked test.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from gpu_marl_envs.envs import covid_economy_reference as ce
from gpu_marl_envs.envs.covid_calibration import CovidCalibration
from gpu_marl_envs.envs.covid_economy import COVID_ECONOMY, CovidEconomyParams
from gpu_marl_envs.envs.covid_economy_constants import constants, economy_scales, health_weights, kernel_constants
from gpu_marl_envs.envs.covid_economy_params import (
    REDUCTION_WIDTH,
    CovidEconomyState,
    episode_metrics,
    in_game,
    observation_spaces,
)

P = CovidEconomyParams()
S = P.num_states
PLANNER = P.planner_id


def start(num_envs: int = 1, p: CovidEconomyParams = P) -> CovidEconomyState:
    return ce.reset(p, torch.zeros(num_envs, dtype=torch.int64), num_envs)


def actions(governors=0, planner=0, num_envs: int = 1) -> torch.Tensor:
    a = torch.zeros((num_envs, P.num_agents), dtype=torch.int64)
    a[:, :S] = torch.as_tensor(governors)
    a[:, PLANNER] = planner
    return a


def run(state, steps, p=P, **kwargs):
    for _ in range(steps):
        state, *_ = ce.step(p, state, actions(**kwargs))
    return state


def current_level(state) -> torch.Tensor:
    return ce._ring_read(state.stringency, state.t % P.calibration.beta_delay)


# --- params -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("episode_length", 0, "episode_length must be >= 1"),
        ("episode_length", 1.5, "episode_length must be an integer"),
        ("action_cooldown", True, "action_cooldown must be an integer"),
        ("subsidy_interval", 0, "subsidy_interval must be >= 1"),
        ("num_subsidy_levels", -1, "num_subsidy_levels must be >= 1"),
        ("health_priority_scaling_governors", -0.1, "health_priority_scaling_governors must be finite and >= 0"),
        ("health_priority_scaling_planner", math.nan, "health_priority_scaling_planner must be finite"),
        ("working_age_share", 1.5, "working_age_share must be finite and in [0, 1]"),
        ("daily_vaccines_per_million", 2e6, "daily_vaccines_per_million must be finite and in [0, 1e6]"),
        ("crra_eta", 1.0, "crra_eta must not be 1"),
        ("crra_eta", "2", "crra_eta must be a number"),
        ("start_date", "22/03/2020", "start_date must be a date 'YYYY-MM-DD'"),
        ("vaccine_start_date", None, "vaccine_start_date must be a date"),
        ("start_date", "2020-01-10", "start_date 2020-01-10 has no data to start from"),
        ("start_date", "2022-01-01", "has no data to start from"),
        ("calibration", {}, "calibration must be a CovidCalibration"),
    ],
)
def test_params_reject_bad_values_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        CovidEconomyParams(**{field: value})


def test_params_reject_calibrations_the_kernels_cannot_hold(monkeypatch):
    too_many_levels = dataclasses.replace(CovidEconomyParams().calibration, num_stringency_levels=128)
    with pytest.raises(ValueError, match="at most 127 fit the int8 rings"):
        CovidEconomyParams(calibration=too_many_levels)
    # The shipped data has 51 states; a larger calibration is simulated by its size alone.
    monkeypatch.setattr(CovidCalibration, "num_states", property(lambda self: 64))
    with pytest.raises(ValueError, match="at most 63 fit the kernels' block of 64 threads"):
        CovidEconomyParams()


def test_params_defaults_are_the_training_configuration():
    assert (P.start_index, P.vaccine_start_day, P.episode_length) == (81, 296, 540)
    assert (P.governor_obs_dim, P.planner_obs_dim) == (75, 484)
    assert P == CovidEconomyParams() and hash(P) == hash(CovidEconomyParams())  # kernels are cached per params
    alpha = health_weights(P)
    alpha0 = P.calibration.health_weight
    z = alpha / (1 - alpha)
    np.testing.assert_allclose(z[:S], 0.3 * alpha0[:S] / (1 - alpha0[:S]))
    np.testing.assert_allclose(z[S], 0.45 * alpha0[S] / (1 - alpha0[S]))
    np.testing.assert_allclose(
        health_weights(
            dataclasses.replace(P, health_priority_scaling_governors=1.0, health_priority_scaling_planner=1.0)
        ),
        alpha0,
    )


# --- reset ------------------------------------------------------------------------------------------


def test_reset_is_the_data_on_the_start_date_and_the_same_every_time():
    c, si = P.calibration, P.start_index
    first = start(3)
    np.testing.assert_array_equal(first.susceptible[1].numpy(), c.susceptible[si].astype(np.float32))
    np.testing.assert_array_equal(first.unemployed[2].numpy(), c.unemployed[si].astype(np.float32))
    np.testing.assert_array_equal(first.deaths[0].numpy(), np.float32(c.mortality) * c.recovered[si].astype(np.float32))
    assert not first.vaccinated.any() and not first.productivity.any() and not first.cooldown.any()
    np.testing.assert_array_equal(current_level(first)[0].numpy(), c.policy[si])
    # The lagged level of the first step is the real level d days before the start.
    lag = ce._ring_read(first.stringency, (first.t + 1) % c.beta_delay)
    np.testing.assert_array_equal(lag[0].numpy(), c.policy[si + 1 - c.beta_delay])
    later = run(first, 40, governors=7, planner=3)
    again = ce.reset(P, torch.arange(3, dtype=torch.int64) + 99, 3)
    for name in COVID_ECONOMY.state_fields:
        torch.testing.assert_close(getattr(again, name), getattr(first, name), rtol=0, atol=0, msg=name)
        assert getattr(first, name).shape[0] == 3
    assert not torch.equal(later.susceptible, first.susceptible)


def test_change_ring_holds_the_policy_differences_padded_with_ones():
    c, si, length = P.calibration, P.start_index, P.calibration.filter_length
    ring = start().stringency_changes[0].numpy().astype(np.int64)
    days = np.arange(-length + 1, 1)
    levels = np.vstack([np.ones((length, S), np.int64), c.policy[: si + 1]])[-length - 1 :]
    np.testing.assert_array_equal(ring[days % length], np.diff(levels, axis=0))
    assert ring.sum() == (c.policy[si].astype(np.int64) - 1).sum()  # telescopes from level 1


def test_step_is_pure():
    state = start(2)
    before = {name: getattr(state, name).clone() for name in COVID_ECONOMY.state_fields}
    ce.step(P, state, actions(governors=5, planner=4, num_envs=2))
    for name, value in before.items():
        assert torch.equal(getattr(state, name), value), name


# --- governors: stringency and cooldown ---------------------------------------------------------------


def test_cooldown_timing_and_masked_actions_still_set_the_level():
    state = start()
    g = torch.zeros(S, dtype=torch.int64)
    g[0] = 5
    state, *_ = ce.step(P, state, actions(governors=g))  # t = 1 == cooldown + 1: locks for 28 days
    assert current_level(state)[0, 0] == 5 and state.cooldown[0, 0] == 28
    assert (state.cooldown[0, 1:] == 1).all()  # no-ops advance the others by one day
    masks = ce.action_masks(P, state)["governors"][0]
    assert masks[0, 0] and not masks[0, 1:].any() and masks[1:].all()
    state = run(state, 8)  # t = 9
    g[0] = 7  # masked, still applied: the level changes, the cooldown is not restarted
    state, *_ = ce.step(P, state, actions(governors=g))
    assert current_level(state)[0, 0] == 7 and state.cooldown[0, 0] == 28
    state = run(state, 17)  # t = 27: still masked
    assert state.t[0] == 27 and not ce.action_masks(P, state)["governors"][0, 0, 1:].any()
    state = run(state, 1)  # t = 28: free again
    assert ce.action_masks(P, state)["governors"][0, 0].all() and state.cooldown[0, 0] == 28
    g[0] = 2
    state, *_ = ce.step(P, state, actions(governors=g))  # t = 29 == cooldown + 1
    assert current_level(state)[0, 0] == 2 and state.cooldown[0, 0] == 56
    state = run(state, 26)
    assert state.t[0] == 55 and not ce.action_masks(P, state)["governors"][0, 0, 1:].any()
    assert ce.action_masks(P, run(state, 1))["governors"][0, 0].all()


def test_zero_keeps_the_level_and_rings_hold_levels_and_changes():
    state = start()
    c = P.calibration
    initial = current_level(state)[0].clone()
    g = torch.zeros(S, dtype=torch.int64)
    g[3] = 9
    state, *_ = ce.step(P, state, actions(governors=g))
    level = current_level(state)[0]
    assert level[3] == 9 and torch.equal(level[:3], initial[:3]) and torch.equal(level[4:], initial[4:])
    newest = ce._ring_read(state.stringency_changes, state.t % c.filter_length)[0]
    assert newest[3] == 9 - initial[3] and (newest[torch.arange(S) != 3] == 0).all()


# --- planner: subsidies --------------------------------------------------------------------------------


def test_subsidy_is_decided_every_interval_and_held_between():
    state = start()
    masks = ce.action_masks(P, state)["planner"][0, 0]
    assert masks.all()  # t = 0: the first decision is open
    state, *_ = ce.step(P, state, actions(planner=7))  # t = 1: decides
    assert state.subsidy_level[0] == 7
    assert ce.action_masks(P, state)["planner"][0, 0].tolist() == [True] + [False] * P.num_subsidy_levels
    expected = 7 / 20 * P.calibration.population * 20000 / 365  # $ per state and day
    np.testing.assert_allclose(state.total_subsidy[0].item(), expected.sum(), rtol=1e-6)
    no_subsidy, *_ = ce.step(P, start(), actions(planner=0))
    np.testing.assert_allclose((state.productivity - no_subsidy.productivity)[0].numpy(), expected, rtol=1e-4)
    state = run(state, 89, planner=12)  # t = 2 .. 90: masked, ignored
    assert state.t[0] == 90 and state.subsidy_level[0] == 7
    assert ce.action_masks(P, state)["planner"][0, 0].all()
    state, *_ = ce.step(P, state, actions(planner=0))  # t = 91: decides "no subsidy"
    assert state.subsidy_level[0] == 0
    np.testing.assert_allclose(state.total_subsidy[0].item(), 90 * expected.sum(), rtol=1e-5)


# --- vaccines ---------------------------------------------------------------------------------------------


def at_step(state, t: int):
    return dataclasses.replace(state, t=torch.full_like(state.t, t))


def test_vaccines_arrive_from_the_start_day_and_are_all_used():
    t_vac = P.vaccine_start_day
    delivery = np.floor(P.calibration.population / 1e6 * 3000).astype(np.float32)
    obs = ce.observe(P, at_step(start(), t_vac - 2))["governors"][0, :, S + 12]
    assert not obs.any()  # nothing on the next step
    before, *_ = ce.step(P, at_step(start(), t_vac - 2), actions())
    assert not before.vaccinated.any()
    assert ce.observe(P, before)["governors"][0, :, S + 12].all()  # vaccines on the next step
    after, *_ = ce.step(P, before, actions())
    np.testing.assert_array_equal(after.vaccinated[0].numpy(), delivery)
    # D = mu (R - V): the vaccinated move to R but do not die.
    np.testing.assert_allclose(
        after.deaths[0].numpy(), np.float32(P.calibration.mortality) * (after.recovered - after.vaccinated)[0].numpy()
    )


def test_vaccines_are_capped_by_the_susceptible():
    state = at_step(start(), P.vaccine_start_day - 1)
    state = dataclasses.replace(state, susceptible=torch.full_like(state.susceptible, 10.0))
    after, *_ = ce.step(P, state, actions())
    assert torch.equal(after.vaccinated, torch.full_like(state.susceptible, 10.0))
    assert (after.susceptible == 0).all()  # f = 1: no infections, and every susceptible vaccinated


# --- epidemic ---------------------------------------------------------------------------------------------


def test_negative_infection_rate_is_not_clamped():
    c = P.calibration
    beta_closed = c.beta_intercepts + 10 * c.beta_slopes
    negative = np.flatnonzero(beta_closed < 0)
    assert len(negative) > 0, "the fitted calibration has states whose beta is negative at level 10"
    state = start()
    state = dataclasses.replace(state, stringency=torch.full_like(state.stringency, 10))  # lag = 10
    after, *_ = ce.step(P, state, actions())
    s, i = state.susceptible[0].double().numpy(), state.infected[0].double().numpy()
    d_s = -beta_closed * s / c.population * i
    np.testing.assert_allclose(after.susceptible[0].numpy() - s, d_s, rtol=2e-2, atol=0.5)
    assert (after.susceptible[0, negative] > state.susceptible[0, negative]).all()


# --- unemployment filter ----------------------------------------------------------------------------------


def test_recursive_filter_equals_the_full_convolution_over_700_steps():
    c = P.calibration
    generator = torch.Generator().manual_seed(3)
    state = start(2)
    levels = np.vstack([np.ones((c.filter_length, S)), c.policy[: P.start_index + 1]])
    history = [np.diff(levels, axis=0)[-c.filter_length :] for _ in range(2)]  # oldest first, per env
    age = np.arange(c.filter_length - 1, -1, -1)  # the newest change weighs exp(0)
    weights = np.exp(-age[None, :] / c.filter_lambdas[:, None])  # (K, 600)
    worst = 0.0
    for _ in range(700):
        a = torch.randint(0, 11, (2, P.num_agents), generator=generator)
        a[:, :S] *= torch.rand((2, S), generator=generator) < 0.1  # mostly keep
        before = current_level(state)
        state, *_ = ce.step(P, state, a)
        changes = (current_level(state) - before).numpy()
        for e in range(2):
            history[e] = np.vstack([history[e][1:], changes[e]])
            exact = weights @ history[e]
            worst = max(worst, np.abs(state.filter_sums[e].double().numpy() - exact).max())
    assert worst < 1e-4, f"recursive filter drifted {worst} from the full convolution"


def test_unemployment_with_no_changes_is_the_baseline():
    state = start()
    state = dataclasses.replace(
        state,
        filter_sums=torch.zeros_like(state.filter_sums),
        stringency_changes=torch.zeros_like(state.stringency_changes),
    )
    after, *_ = ce.step(P, state, actions())
    c = P.calibration
    np.testing.assert_allclose(
        after.unemployed[0].numpy(), (math.log(2) + c.unemployment_bias) * c.population / 100, rtol=1e-6
    )


# --- planner: sums over states ---------------------------------------------------------------------------


def test_block_sum_is_the_documented_tree():
    x = torch.randn(5, S, generator=torch.Generator().manual_seed(1)).to(torch.float32) * 1e6
    slots = np.zeros((5, REDUCTION_WIDTH), np.float32)
    slots[:, :S] = x.numpy()
    width = REDUCTION_WIDTH // 2
    while width:
        slots[:, :width] = slots[:, :width] + slots[:, width : 2 * width]
        width //= 2
    np.testing.assert_array_equal(ce.block_sum(x).numpy(), slots[:, 0])
    np.testing.assert_allclose(ce.block_sum(x).numpy(), x.double().sum(1).numpy(), rtol=1e-6)


def test_planner_reward_is_the_welfare_of_the_national_sums():
    p = P
    state = run(start(), 5, governors=3, planner=6)
    after, rewards, *_ = ce.step(p, state, actions(governors=0))
    c, k = p.calibration, constants(p)
    dppw, maxprod = economy_scales(p)
    norm = 365 * maxprod.sum()
    new_deaths = (after.deaths - state.deaths)[0].double().numpy().sum()
    subsidy = 6 / 20 * c.population.sum() * 20000 / 365
    production = after.productivity[0].double().numpy().sum()
    alpha = health_weights(p)[-1]
    h = (-new_deaths * c.value_of_life / norm - c.min_health[-1]) / (c.max_health[-1] - c.min_health[-1] + 1e-10)
    x = np.clip(365 * (production - 1.03 * subsidy) / norm, 0.1, 3)
    e = (1 + (x**-1 - 1) / -1) / 365
    e = (e - c.min_economic[-1]) / (c.max_economic[-1] - c.min_economic[-1] + 1e-10)
    assert rewards[0, PLANNER].item() == pytest.approx(alpha * h + (1 - alpha) * e, rel=1e-4)
    totals = ce.episode_totals(p, after)[0]
    assert totals[2].item() == pytest.approx(6 * subsidy, rel=1e-5)
    assert k["HEALTH_WEIGHT"][-1] == np.float32(alpha)


# --- observations, masks, totals, episode end ----------------------------------------------------------------


def test_observation_layout():
    state = run(start(2), 3, governors=4, planner=5)
    obs = ce.observe(P, state)
    masks = ce.action_masks(P, state)
    g, planner = obs["governors"], obs["planner"][:, 0]
    c, k = P.calibration, constants(P)
    assert g.shape == (2, S, P.governor_obs_dim) and planner.shape == (2, P.planner_obs_dim)
    torch.testing.assert_close(g[:, :, :S], torch.eye(S).expand(2, S, S))
    fields = [state.susceptible, state.infected, state.recovered, state.deaths, state.vaccinated, state.unemployed]
    population = torch.tensor(k["POPULATION"])
    for f, value in enumerate(fields):
        torch.testing.assert_close(g[:, :, S + f], value / population, rtol=0, atol=0)
        torch.testing.assert_close(planner[:, f * S : (f + 1) * S], value / population, rtol=0, atol=0)
    torch.testing.assert_close(g[:, :, S + 6], state.productivity / torch.tensor(k["MAX_PRODUCTIVITY"]))
    assert (g[:, :, S + 9] == 0.4).all()  # level 4 / 10
    assert (g[:, :, S + 8] == 3 / 540).all() and (planner[:, 9 * S] == 3 / 540).all()
    assert (g[:, :, S + 10] == np.float32(87 / 90)).all()
    assert (g[:, :, S + 11] == 0.25).all()  # subsidy level 5 / 20
    torch.testing.assert_close(
        planner[:, 6 * S : 9 * S],
        g[:, :, S + 6 : S + 10].index_select(2, torch.tensor([0, 1, 3])).transpose(1, 2).reshape(2, 3 * S),
    )
    torch.testing.assert_close(planner[:, 9 * S + 1 : 9 * S + 4], g[:, 0, S + 10 : S + 13])
    torch.testing.assert_close(g[:, :, S + 13 :], masks["governors"].float())
    torch.testing.assert_close(planner[:, 9 * S + 4 :], masks["planner"][:, 0].float())
    # The lagged level the next step uses: the real level d - 1 days before the start, plus 3.
    np.testing.assert_allclose(g[0, :, S + 7].numpy(), c.policy[P.start_index + 4 - c.beta_delay] / np.float32(10))
    spaces = observation_spaces(P)
    for group, space in spaces.items():
        for row in obs[group].reshape(-1, space.shape[0]).numpy():
            assert space.contains(row), group


def test_episode_truncates_at_the_episode_length_and_totals_add_up():
    p = dataclasses.replace(P, episode_length=30)
    state = start(1, p)
    deaths_start = state.deaths.double().sum()
    unemployed = 0.0
    for t in range(1, 31):
        state, rewards, terminated, truncated = ce.step(p, state, actions(governors=6 if t == 1 else 0, planner=2))
        unemployed += state.unemployed.double().sum().item()
        assert not terminated.any() and bool(truncated[0]) == (t == 30)
    totals = ce.episode_totals(p, state)[0].double()
    assert episode_metrics(p) == ("deaths", "unemployment", "subsidies", "productivity")
    assert totals[0].item() == pytest.approx((state.deaths.double().sum() - deaths_start).item(), rel=1e-4)
    assert totals[1].item() == pytest.approx(unemployed / 30, rel=1e-5)
    assert totals[2].item() == pytest.approx(30 * 2 / 20 * p.calibration.population.sum() * 20000 / 365, rel=1e-5)
    assert totals[3].item() > 0


def test_definition_layout_and_groups():
    assert COVID_ECONOMY.agent_names(P)[:2] == ["governor_0", "governor_1"]
    assert COVID_ECONOMY.agent_names(P)[-1] == "planner_0"
    assert COVID_ECONOMY.obs_size(P) == S * 75 + 484
    assert COVID_ECONOMY.mask_size(P) == S * 11 + 21
    state = start(2)
    assert COVID_ECONOMY.flat_observations(P, state).shape == (2, S * 75 + 484)
    assert in_game(P, state).all()
    constants = kernel_constants(P)
    assert constants["NUM_STATES"] == S and len(constants["INITIAL_STRINGENCY_CHANGES"]) == 600 * S
    assert all(isinstance(v, (bool, int, float, tuple)) for v in constants.values())


# --- against a float64 re-implementation of the spec ---------------------------------------------------------


class Float64Spec:
    """The spec's daily step in float64 numpy, with whole histories and the full convolution."""

    def __init__(self, p: CovidEconomyParams):
        c, si = p.calibration, p.start_index
        self.p, self.c = p, c
        self.n = c.population.astype(np.float64)
        self.levels = [c.policy_levels(np.array(d)).astype(np.float64) for d in range(si - 700, si + 1)]
        self.s, self.i, self.r = c.susceptible[si].copy(), c.infected[si].copy(), c.recovered[si].copy()
        self.v = np.zeros(S)
        self.d = c.mortality * self.r
        self.cool = np.zeros(S)
        self.level = 0
        self.t = 0
        u0 = (math.log(2) + c.unemployment_bias) * self.n / 100
        workforce = c.us_population * 0.6 - u0.sum()
        self.dppw = c.gdp_per_capita / (workforce / c.us_population) / 365
        self.hn = np.append(365 * (0.6 * self.n - u0) * self.dppw, 365 * ((0.6 * self.n - u0) * self.dppw).sum())
        self.alpha = health_weights(p)

    def step(self, a: np.ndarray) -> np.ndarray:
        c, n = self.c, self.n
        self.t += 1
        t = self.t
        gov = a[:S]
        level = np.where(gov != 0, gov, self.levels[-1])
        self.cool = np.where(t == self.cool + 1, self.cool + np.where(gov != 0, 28, 1), self.cool)
        lag = self.levels[-c.beta_delay]
        self.levels.append(level)
        if (t - 1) % 90 == 0:
            self.level = a[S]
        subsidy = self.level / 20 * n * 20000 / 365
        avail = np.floor(n / 1e6 * 3000) if t >= 296 else np.zeros(S)
        beta = c.beta_intercepts + c.beta_slopes * lag
        f = np.minimum(1, avail / (self.s + 1e-10))
        v = np.minimum(avail, self.s)
        d_s = -beta * (self.s / n) * self.i * (1 - f) - v
        d_r = c.recovery_rate * self.i + v
        d_i = -d_s - d_r
        self.s, self.i, self.r = np.maximum(0, self.s + d_s), np.maximum(0, self.i + d_i), np.maximum(0, self.r + d_r)
        self.v = self.v + v
        deaths = c.mortality * (self.r - self.v)
        changes = np.diff(np.array(self.levels[-601:]), axis=0)  # the last 600, oldest first
        weights = np.exp(-(599 - np.arange(600))[None, :] / c.filter_lambdas[:, None])  # (K, 600)
        s_k = weights @ changes  # (K, S)
        x = (c.filter_weights * s_k.T).sum(1)
        u = (np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))) + c.unemployment_bias) * n / 100
        cant = (0.1 * self.i + deaths) * 0.6 + u
        production = np.maximum(0, 0.6 * n - cant) * self.dppw + subsidy
        new_deaths = deaths - self.d
        self.d = deaths

        def crra(x):
            a_ = np.clip(365 * x, 0.1, 3)
            return (1 + (a_**-1.0 - 1) / -1.0) / 365

        health = -np.append(new_deaths, new_deaths.sum()) * c.value_of_life / self.hn
        economic = crra(np.append(production, production.sum() - 1.03 * subsidy.sum()) / self.hn)
        health = (health - c.min_health) / (c.max_health - c.min_health + 1e-10)
        economic = (economic - c.min_economic) / (c.max_economic - c.min_economic + 1e-10)
        return self.alpha * health + (1 - self.alpha) * economic


def test_a_whole_episode_matches_a_float64_reimplementation_of_the_spec():
    generator = np.random.default_rng(7)
    reference = Float64Spec(P)
    state = start()
    worst = np.zeros(P.num_agents)
    for _ in range(P.episode_length):
        a = generator.integers(0, 11, P.num_agents)
        a[:S] *= generator.random(S) < 0.05
        a[S] = generator.integers(0, 21)
        expected = reference.step(a)
        state, rewards, *_ = ce.step(P, state, torch.as_tensor(a)[None])
        worst = np.maximum(worst, np.abs(rewards[0].double().numpy() - expected))
    np.testing.assert_allclose(state.susceptible[0].double().numpy(), reference.s, rtol=1e-4)
    np.testing.assert_allclose(state.infected[0].double().numpy(), reference.i, rtol=1e-3, atol=0.05)  # persons
    assert worst.max() < 2e-4, f"largest reward difference {worst.max()} (agent {worst.argmax()})"


# --- on a GPU ------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_reference_on_cuda_matches_cpu_and_captures_in_a_cuda_graph(cuda_device):
    """The torch reference runs on CUDA without host syncs (a step captures in a CUDA graph) and
    agrees with CPU: exactly but for exp/log1p in the unemployment's softplus (a few ulp apart)."""
    generator = torch.Generator().manual_seed(11)
    cpu, gpu = start(4), ce.reset(P, torch.zeros(4, dtype=torch.int64, device=cuda_device), 4)
    worst = 0.0
    for _ in range(P.episode_length):
        a = torch.randint(0, 11, (4, P.num_agents), generator=generator)
        a[:, :S] *= torch.rand((4, S), generator=generator) < 0.05
        cpu, r_cpu, *_ = ce.step(P, cpu, a)
        gpu, r_gpu, *_ = ce.step(P, gpu, a.to(cuda_device))
        worst = max(worst, (r_gpu.cpu() - r_cpu).abs().max().item())
    assert worst < 1e-5, f"rewards on CUDA and CPU differ by {worst}"
    for name in COVID_ECONOMY.state_fields:
        torch.testing.assert_close(getattr(gpu, name).cpu(), getattr(cpu, name), rtol=1e-5, atol=1e-3, msg=name)
    for group, obs in ce.observe(P, gpu).items():
        torch.testing.assert_close(obs.cpu(), ce.observe(P, cpu)[group], rtol=1e-5, atol=1e-6, msg=group)

    state = ce.reset(P, torch.zeros(4, dtype=torch.int64, device=cuda_device), 4)
    a = torch.full((4, P.num_agents), 3, dtype=torch.int64, device=cuda_device)
    eager = ce.step(P, state, a)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ce.step(P, state, a)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[1], eager[1])
    for name in COVID_ECONOMY.state_fields:
        assert torch.equal(getattr(captured[0], name), getattr(eager[0], name)), name
