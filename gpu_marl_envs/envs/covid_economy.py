"""CovidEconomy, batched: 51 US state governors set stringency levels and a federal planner sets
subsidies, in a deterministic daily model of COVID-19 and unemployment (torch reference).

A re-implementation of the COVID-19 and economy simulation of the AI Economist (Trott et al., 2021,
"Building a Foundation for Data-Driven, Interpretable, and Robust Policy Design using the AI
Economist"; salesforce/ai-economist, BSD-3-Clause) after ``../shared/specs/covid_economy.md``.
**Its authors present the simulation as a proof of concept, not a tool for real-world policy
decisions; so does this package.** Calibration: :mod:`gpu_marl_envs.envs.covid_calibration`.
Full documentation, with what differs from the original: ``docs/covid_economy.md``.

This module states the rules and defines the game (``COVID_ECONOMY``) from its pieces:

- ``covid_economy_params.py``: :class:`CovidEconomyParams` and their checks, the model's fixed
  numbers, the state, agent groups and spaces;
- ``covid_economy_constants.py``: every number a step uses and the starting state, as float32, and
  ``kernel_constants``;
- ``covid_economy_reference.py``: the torch reference (``reset``, ``step``, ``observe``, action
  masks, episode totals), pure batched functions, float32 throughout, that never synchronise with
  the host; and :func:`reward_normalisers`.

Kernel twins reproduce the reference's float32 operations in the order written under "Float32
conventions".

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
Constants (``covid_economy_constants.constants``, also :func:`kernel_constants`) are computed in float64 from the
calibration and rounded once to float32. Every operation below is one float32 operation, rounded
(no fused multiply-add: CUDA C uses ``__fmul_rn``/``__fadd_rn`` or ``-fmad=false``); divisions are
IEEE divisions (the reference divides by device tensors, never a Python scalar).
Names in capitals are ``constants``' (``N`` is ``POPULATION``, ``avail`` is
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
  (``covid_economy_reference.block_sum``), i.e. a shared-memory reduction after a barrier.
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

from gpu_marl_envs.envs.covid_economy_constants import kernel_constants
from gpu_marl_envs.envs.covid_economy_params import (
    REDUCTION_WIDTH,
    CovidEconomyParams,
    CovidEconomyState,
    action_spaces,
    agent_groups,
    episode_metrics,
    in_game,
    observation_spaces,
)
from gpu_marl_envs.envs.covid_economy_reference import action_masks, episode_totals, observe, reset, step
from gpu_marl_envs.envs.covid_economy_reference import reward_normalisers as reward_normalisers  # documented here
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition

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
