"""CovidEconomy Numba kernels, the twin of covid_economy.cu (read it for the design); the torch
reference is gpu_marl_envs/envs/covid_economy_reference.py (covid_economy.py's docstring documents
the rules, the state layout and the float32 conventions followed here operation by operation).

``game_functions(c)`` takes ``covid_economy_constants.kernel_constants(params)`` (typed) and returns
this game's device functions for the multi-agent template's kernels (``multi_agent_numba.py``: a block
per env, autoreset, returns, episode totals). State ``i`` is stepped by thread ``i % blockDim.x``, the planner by thread
``S % blockDim.x``; the planner's sums over states are the reference's tree reduction in shared
memory. Arrays have their natural shapes: per-state fields ``(E, S)``, the rings ``(E, depth, S)``
int8, ``filter_sums`` ``(E, K, S)``, observations ``(E, obs_size)``, masks ``(E, mask_size)``.

Every intermediate is float32 (constants are np.float32, ints are converted with np.float32(...)),
and every product that meets a sum goes through ``mul_rn``/``add_rn`` (no fused multiply-add; a
difference ``a - b`` is ``add_rn(a, -b)``, the same rounding). ``math.exp``/``math.log1p`` of the
softplus are the only functions that may round differently from torch's.
"""

import math

import numpy as np
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions
from gpu_marl_envs.kernels.numba_api import GlobalTables, U, add_rn, assume, cuda, inline_device, mul_rn
from numba import float32

NUM_FEATURES = 9  # per state, in the planner's row: S, I, R, D, V, U over N; P / maxprod; two levels / L
NUM_SUMS = 4  # per state, summed for the planner: new deaths, production, subsidy, unemployed


def game_functions(c) -> GameFunctions:
    """This game's device functions for the constants ``c`` (``kernel_constants``, typed)."""
    S = c.NUM_STATES
    PLANNER = S
    K = c.NUM_FILTERS
    L = c.NUM_STRINGENCY_LEVELS
    Q = c.NUM_SUBSIDY_LEVELS
    W = c.REDUCTION_WIDTH
    BETA_DELAY = c.BETA_DELAY
    FILTER_LENGTH = c.FILTER_LENGTH
    EPISODE_LENGTH = c.EPISODE_LENGTH
    ACTION_COOLDOWN = c.ACTION_COOLDOWN
    SUBSIDY_INTERVAL = c.SUBSIDY_INTERVAL
    VACCINE_START_DAY = c.VACCINE_START_DAY
    VACCINE_DELIVERY_INTERVAL = c.VACCINE_DELIVERY_INTERVAL
    GOVERNOR_DIM = c.GOVERNOR_OBS_DIM
    PLANNER_DIM = c.PLANNER_OBS_DIM
    CRRA_RECIPROCAL = c.CRRA_RECIPROCAL
    if S > W or W & (W - 1):
        raise ValueError(f"the reduction needs a power-of-two width of at least {S} slots, got {W}")
    if GOVERNOR_DIM != S + 13 + L + 1 or PLANNER_DIM != NUM_FEATURES * S + 4 + Q + 1:
        raise ValueError("the observation layout differs from the reference module's docstring")
    TAIL = GOVERNOR_DIM - S  # a governor's row after its one-hot: features, scalars, mask
    TAIL_STRIDE = TAIL + 1  # odd, so that thread i's staging writes at 25 i hit distinct banks
    GOVERNOR_MASK = TAIL - (L + 1)  # the tail's first mask column (action 0)
    PLANNER_MASK = PLANNER_DIM - (Q + 1)  # the planner row's first mask column

    # The tables in global memory, as the .cu's: each thread reads its own state's entry, which
    # constant memory (where Numba keeps an array a function closes over) would serialise.
    tables = GlobalTables()

    def table(name, dtype=np.float32, shape=None):
        values = np.asarray(getattr(c, name), dtype=dtype)
        return tables.add(values if shape is None else values.reshape(shape))

    POPULATION = table("POPULATION")
    BETA_INTERCEPT = table("BETA_INTERCEPT")
    BETA_SLOPE = table("BETA_SLOPE")
    VACCINES_PER_DELIVERY = table("VACCINES_PER_DELIVERY")
    SUBSIDY_PER_LEVEL = table("SUBSIDY_PER_LEVEL")
    FILTER_DECAY = table("FILTER_DECAY")
    FILTER_DROP = table("FILTER_DROP")
    FILTER_WEIGHTS = table("FILTER_WEIGHTS", shape=(K, S))
    UNEMPLOYMENT_BIAS = table("UNEMPLOYMENT_BIAS")
    UNEMPLOYED_PER_PERCENT = table("UNEMPLOYED_PER_PERCENT")
    WORKERS = table("WORKERS")
    MAX_PRODUCTIVITY = table("MAX_PRODUCTIVITY")
    ECONOMIC_NORM = table("ECONOMIC_NORM")  # per agent, the planner last
    HEALTH_SCALE = table("HEALTH_SCALE")
    MIN_HEALTH = table("MIN_HEALTH")
    HEALTH_RANGE = table("HEALTH_RANGE")
    MIN_ECONOMIC = table("MIN_ECONOMIC")
    ECONOMIC_RANGE = table("ECONOMIC_RANGE")
    HEALTH_WEIGHT = table("HEALTH_WEIGHT")
    ECONOMIC_WEIGHT = table("ECONOMIC_WEIGHT")
    INITIAL_SUSCEPTIBLE = table("INITIAL_SUSCEPTIBLE")
    INITIAL_INFECTED = table("INITIAL_INFECTED")
    INITIAL_RECOVERED = table("INITIAL_RECOVERED")
    INITIAL_VACCINATED = table("INITIAL_VACCINATED")
    INITIAL_DEATHS = table("INITIAL_DEATHS")
    INITIAL_UNEMPLOYED = table("INITIAL_UNEMPLOYED")
    INITIAL_PRODUCTIVITY = table("INITIAL_PRODUCTIVITY")
    INITIAL_STRINGENCY = table("INITIAL_STRINGENCY", np.int8, (BETA_DELAY, S))
    INITIAL_STRINGENCY_CHANGES = table("INITIAL_STRINGENCY_CHANGES", np.int8, (FILTER_LENGTH, S))
    INITIAL_FILTER_SUMS = table("INITIAL_FILTER_SUMS", shape=(K, S))
    INITIAL_COOLDOWN = table("INITIAL_COOLDOWN", np.int32)

    MORTALITY = c.MORTALITY
    RECOVERY_RATE = c.RECOVERY_RATE
    EPSILON = c.EPSILON
    TOO_SICK_TO_WORK_RATE = c.TOO_SICK_TO_WORK_RATE
    WORKING_AGE_SHARE = c.WORKING_AGE_SHARE
    PRODUCTION_PER_WORKER = c.PRODUCTION_PER_WORKER
    SUBSIDY_COST = c.SUBSIDY_COST
    CRRA_EXPONENT = c.CRRA_EXPONENT
    SOFTPLUS_THRESHOLD = c.SOFTPLUS_THRESHOLD
    DAYS_PER_YEAR = c.DAYS_PER_YEAR
    CRRA_CLIP_LOW = c.CRRA_CLIP_LOW
    CRRA_CLIP_HIGH = c.CRRA_CLIP_HIGH
    LEVELS = np.float32(L)
    SUBSIDY_LEVELS = np.float32(Q)
    DAYS = np.float32(EPISODE_LENGTH)
    INTERVAL = np.float32(SUBSIDY_INTERVAL)
    ZERO = np.float32(0.0)
    ONE = np.float32(1.0)

    @cuda.jit(device=True)
    def shared():
        sums = cuda.shared.array((NUM_SUMS, W), float32)  # per state, then tree-reduced: slot 0 holds the sum
        # observe_env stages every observation value but the governors' one-hots here (see the .cu).
        governor_tails = cuda.shared.array((S, TAIL_STRIDE), float32)  # governor i's columns S..
        planner = cuda.shared.array(PLANNER_DIM, float32)  # the planner's row
        return sums, governor_tails, planner

    @inline_device
    def known_shapes(state):
        # The state's shapes, for the compiler (they are the .cu's constants: row = e * S): Numba
        # indexes an array through its shape, read at run time, a 64-bit product per array and row.
        susceptible, infected, recovered, vaccinated, deaths, unemployed, productivity = state[:7]
        stringency, stringency_changes, filter_sums, cooldown = state[7:11]
        assume(susceptible.shape[1] == S)
        assume(infected.shape[1] == S)
        assume(recovered.shape[1] == S)
        assume(vaccinated.shape[1] == S)
        assume(deaths.shape[1] == S)
        assume(unemployed.shape[1] == S)
        assume(productivity.shape[1] == S)
        assume(cooldown.shape[1] == S)
        assume(stringency.shape[1] == BETA_DELAY)
        assume(stringency.shape[2] == S)
        assume(stringency_changes.shape[1] == FILTER_LENGTH)
        assume(stringency_changes.shape[2] == S)
        assume(filter_sums.shape[1] == K)
        assume(filter_sums.shape[2] == S)

    @cuda.jit(device=True)
    def reset_env(state, sh, e, seed, episode):
        # The starting state: deterministic, so the seed and episode are not used.
        (
            susceptible,
            infected,
            recovered,
            vaccinated,
            deaths,
            unemployed,
            productivity,
            stringency,
            stringency_changes,
            filter_sums,
            cooldown,
            subsidy_level,
            total_deaths,
            total_unemployed,
            total_subsidy,
            total_productivity,
            t,
        ) = state
        known_shapes(state)
        i = U(cuda.threadIdx.x)
        while i < U(S):
            susceptible[e, i] = INITIAL_SUSCEPTIBLE()[i]
            infected[e, i] = INITIAL_INFECTED()[i]
            recovered[e, i] = INITIAL_RECOVERED()[i]
            vaccinated[e, i] = INITIAL_VACCINATED()[i]
            deaths[e, i] = INITIAL_DEATHS()[i]
            unemployed[e, i] = INITIAL_UNEMPLOYED()[i]
            productivity[e, i] = INITIAL_PRODUCTIVITY()[i]
            cooldown[e, i] = INITIAL_COOLDOWN()[i]
            for k in range(K):
                filter_sums[e, k, i] = INITIAL_FILTER_SUMS()[k, i]
            for j in range(BETA_DELAY):
                stringency[e, j, i] = INITIAL_STRINGENCY()[j, i]
            for j in range(FILTER_LENGTH):  # consecutive threads store consecutive bytes of each slot
                stringency_changes[e, j, i] = INITIAL_STRINGENCY_CHANGES()[j, i]
            i = U(i + U(cuda.blockDim.x))
        if cuda.threadIdx.x == 0:
            subsidy_level[e] = 0
            total_deaths[e] = ZERO
            total_unemployed[e] = ZERO
            total_subsidy[e] = ZERO
            total_productivity[e] = ZERO
            t[e] = 0

    @cuda.jit(device=True)
    def crra(x):
        # The daily CRRA utility of an economic index x (the reference's _crra).
        a = min(max(mul_rn(x, DAYS_PER_YEAR), CRRA_CLIP_LOW), CRRA_CLIP_HIGH)
        if CRRA_RECIPROCAL:
            power = ONE / a
        else:
            power = np.float32(math.pow(a, CRRA_EXPONENT))
        return (add_rn(power, -ONE) / CRRA_EXPONENT + ONE) / DAYS_PER_YEAR

    @cuda.jit(device=True)
    def reward(a, new_deaths, production):
        # Agent a's reward from its new deaths and its economic index (the planner's: sums over states).
        health = add_rn(mul_rn(-new_deaths, HEALTH_SCALE()[a]), -MIN_HEALTH()[a]) / HEALTH_RANGE()[a]
        economic = add_rn(crra(production / ECONOMIC_NORM()[a]), -MIN_ECONOMIC()[a]) / ECONOMIC_RANGE()[a]
        return add_rn(mul_rn(HEALTH_WEIGHT()[a], health), mul_rn(ECONOMIC_WEIGHT()[a], economic))

    @cuda.jit(device=True)
    def step_env(state, sh, e, actions, rewards):
        # Spec steps 1-7 of env e.
        (
            susceptible,
            infected,
            recovered,
            vaccinated,
            deaths,
            unemployed,
            productivity,
            stringency,
            stringency_changes,
            filter_sums,
            cooldown,
            subsidy_level,
            total_deaths,
            total_unemployed,
            total_subsidy,
            total_productivity,
            t,
        ) = state
        sums = sh[0]
        known_shapes(state)
        assume(actions.shape[1] == PLANNER + 1)
        assume(rewards.shape[1] == PLANNER + 1)
        tid = U(cuda.threadIdx.x)
        threads = U(cuda.blockDim.x)
        # Loads come before the first store (see the .cu: a load the compiler cannot hoist above a
        # store that may alias it costs the block a memory round trip).
        before = U(t[e])  # a day count: unsigned, so that its remainders below are an unsigned remainder
        now = U(before + U(1))
        planner_action = actions[e, PLANNER]
        kept_level = subsidy_level[e]
        # 2. The subsidy level (read by every state; written back by the planner's phase). now - 1 is
        # before (an unsigned remainder; now - 1 would be an int64's), the level an int32 as kept_level
        # (an int64 would cost a 64-bit conversion to float).
        if before % U(SUBSIDY_INTERVAL) == U(0):
            level_paid = np.int32(min(max(planner_action, 0), Q))
        else:
            level_paid = kept_level
        # 3. Vaccines.
        delivers = now >= VACCINE_START_DAY and now % VACCINE_DELIVERY_INTERVAL == 0

        i = tid
        while i < U(S):
            raw_action = actions[e, i]
            su = susceptible[e, i]
            inf = infected[e, i]
            re = recovered[e, i]
            va = vaccinated[e, i]
            old_deaths = deaths[e, i]
            due = cooldown[e, i]
            old_sums = cuda.local.array(K, float32)
            for k in range(K):
                old_sums[k] = filter_sums[e, k, i]
            previous = np.int32(stringency[e, before % BETA_DELAY, i])
            lagged = stringency[e, now % BETA_DELAY, i]  # the level d days back, about to be overwritten
            slot = now % FILTER_LENGTH
            dropped = np.float32(stringency_changes[e, slot, i])  # FILTER_LENGTH days back, about to be overwritten

            # 1. Stringency and cooldown.
            action = np.int32(min(max(raw_action, 0), L))  # int32, as the level and its change
            level = action if action != 0 else previous
            stringency[e, now % BETA_DELAY, i] = level
            if before == U(due):  # now == due + 1, in 32 bits (due + 1 would be an int64)
                cooldown[e, i] = due + (ACTION_COOLDOWN if action != 0 else 1)

            subsidy = mul_rn(np.float32(level_paid), SUBSIDY_PER_LEVEL()[i])
            available = VACCINES_PER_DELIVERY()[i] if delivers else ZERO

            # 4. Epidemic.
            beta = add_rn(mul_rn(BETA_SLOPE()[i], np.float32(lagged)), BETA_INTERCEPT()[i])
            fraction = min(available / add_rn(su, EPSILON), ONE)
            vaccinated_now = min(available, su)
            infections = mul_rn(mul_rn(mul_rn(su / POPULATION()[i], inf), beta), add_rn(ONE, -fraction))
            d_s = add_rn(-infections, -vaccinated_now)
            d_r = add_rn(mul_rn(RECOVERY_RATE, inf), vaccinated_now)
            d_i = add_rn(-d_s, -d_r)
            new_susceptible = max(add_rn(su, d_s), ZERO)
            new_infected = max(add_rn(inf, d_i), ZERO)
            new_recovered = max(add_rn(re, d_r), ZERO)
            new_vaccinated = add_rn(va, vaccinated_now)
            new_deaths_total = mul_rn(MORTALITY, add_rn(new_recovered, -new_vaccinated))

            # 5. Unemployment: the filters over the last FILTER_LENGTH changes, by their exact recursion.
            change = np.int32(level - previous)  # (int32 - int32 is an int64 in Numba)
            stringency_changes[e, slot, i] = change
            signal = ZERO
            for k in range(K):
                filtered = add_rn(
                    add_rn(mul_rn(FILTER_DECAY()[k], old_sums[k]), np.float32(change)),
                    -mul_rn(FILTER_DROP()[k], dropped),
                )
                filter_sums[e, k, i] = filtered
                weighted = mul_rn(FILTER_WEIGHTS()[k, i], filtered)
                signal = weighted if k == 0 else add_rn(signal, weighted)
            if signal > SOFTPLUS_THRESHOLD:
                excess = signal
            else:
                excess = np.float32(math.log1p(np.float32(math.exp(signal))))
            new_unemployed = mul_rn(add_rn(excess, UNEMPLOYMENT_BIAS()[i]), UNEMPLOYED_PER_PERCENT()[i])

            # 6. Economy.
            cant_work = add_rn(
                mul_rn(add_rn(mul_rn(TOO_SICK_TO_WORK_RATE, new_infected), new_deaths_total), WORKING_AGE_SHARE),
                new_unemployed,
            )
            production = add_rn(mul_rn(max(add_rn(WORKERS()[i], -cant_work), ZERO), PRODUCTION_PER_WORKER), subsidy)

            # 7. The governor's reward; its values for the planner's sums.
            new_deaths = add_rn(new_deaths_total, -old_deaths)
            rewards[e, i] = reward(i, new_deaths, production)
            susceptible[e, i] = new_susceptible
            infected[e, i] = new_infected
            recovered[e, i] = new_recovered
            vaccinated[e, i] = new_vaccinated
            deaths[e, i] = new_deaths_total
            unemployed[e, i] = new_unemployed
            productivity[e, i] = production
            sums[0, i] = new_deaths
            sums[1, i] = production
            sums[2, i] = subsidy
            sums[3, i] = new_unemployed
            i = U(i + threads)
        j = U(S + tid)
        while j < U(W):
            for q in range(NUM_SUMS):
                sums[q, j] = ZERO
            j = U(j + threads)
        cuda.syncthreads()
        # The reference's block_sum: slot j += slot j + w, w = W/2 .. 1, one level per barrier.
        w = W // 2
        while w >= 1:
            j = tid
            while j < U(w):
                for q in range(NUM_SUMS):
                    sums[q, j] = add_rn(sums[q, j], sums[q, j + w])
                j = U(j + threads)
            cuda.syncthreads()
            w //= 2

        # 7. The planner: the social welfare; the episode's accumulators; the per-env values.
        if tid == PLANNER % threads:
            deaths_so_far = total_deaths[e]  # loads first
            unemployed_so_far = total_unemployed[e]
            subsidy_so_far = total_subsidy[e]
            productivity_so_far = total_productivity[e]
            new_deaths = sums[0, 0]
            production = sums[1, 0]
            subsidy = sums[2, 0]
            rewards[e, PLANNER] = reward(PLANNER, new_deaths, add_rn(production, -mul_rn(SUBSIDY_COST, subsidy)))
            total_deaths[e] = add_rn(deaths_so_far, new_deaths)
            total_unemployed[e] = add_rn(unemployed_so_far, sums[3, 0])
            total_subsidy[e] = add_rn(subsidy_so_far, subsidy)
            total_productivity[e] = add_rn(productivity_so_far, production)
            subsidy_level[e] = level_paid
            t[e] = now
        return False, now >= EPISODE_LENGTH

    @cuda.jit(device=True)
    def observe_env(state, sh, e, obs, masks):
        (
            susceptible,
            infected,
            recovered,
            vaccinated,
            deaths,
            unemployed,
            productivity,
            stringency,
            stringency_changes,
            filter_sums,
            cooldown,
            subsidy_level,
            total_deaths,
            total_unemployed,
            total_subsidy,
            total_productivity,
            t,
        ) = state
        governor_tails = sh[1]
        planner = sh[2]
        known_shapes(state)
        assume(obs.shape[1] == S * GOVERNOR_DIM + PLANNER_DIM)
        if masks is not None:
            assume(masks.shape[1] == S * (L + 1) + Q + 1)
        now = U(t[e])
        time = np.float32(now) / DAYS
        # (unsigned, so that its conversion to float is a 32-bit one: SUBSIDY_INTERVAL - u would be an int64)
        subsidy_timer = np.float32(U(U(SUBSIDY_INTERVAL) - U(now % U(SUBSIDY_INTERVAL)))) / INTERVAL
        level = np.float32(subsidy_level[e]) / SUBSIDY_LEVELS
        following = U(now + U(1))
        vaccines_next = ONE if following >= VACCINE_START_DAY and following % VACCINE_DELIVERY_INTERVAL == 0 else ZERO
        # Staging (layout in the reference's docstring): a thread per state fills its governor's tail
        # and its column of the planner's feature-major block.
        i = U(cuda.threadIdx.x)
        while i < U(S):
            population = POPULATION()[i]
            lag_next = np.float32(stringency[e, following % BETA_DELAY, i]) / LEVELS  # the level that sets beta next
            current = np.float32(stringency[e, now % BETA_DELAY, i]) / LEVELS
            features = (
                susceptible[e, i] / population,
                infected[e, i] / population,
                recovered[e, i] / population,
                deaths[e, i] / population,
                vaccinated[e, i] / population,
                unemployed[e, i] / population,
                productivity[e, i] / MAX_PRODUCTIVITY()[i],
                lag_next,
                current,
            )
            for f in range(8):
                governor_tails[i, f] = features[f]
            governor_tails[i, 8] = time
            governor_tails[i, 9] = current
            governor_tails[i, 10] = subsidy_timer
            governor_tails[i, 11] = level
            governor_tails[i, 12] = vaccines_next
            governor_tails[i, GOVERNOR_MASK] = ONE  # action 0 is always allowed
            free = ONE if now >= cooldown[e, i] else ZERO
            for a in range(1, L + 1):
                governor_tails[i, GOVERNOR_MASK + a] = free
            for f in range(NUM_FEATURES):
                planner[f * S + i] = features[f]
            i = U(i + U(cuda.blockDim.x))
        planner_free = ONE if now % SUBSIDY_INTERVAL == 0 else ZERO
        j = U(cuda.threadIdx.x)
        while j < U(PLANNER_DIM - NUM_FEATURES * S):
            if j == 0:
                value = time
            elif j == 1:
                value = subsidy_timer
            elif j == 2:
                value = level
            elif j == 3:
                value = vaccines_next
            else:
                value = ONE if j == 4 else planner_free
            planner[NUM_FEATURES * S + j] = value
            j = U(j + U(cuda.blockDim.x))
        cuda.syncthreads()

        # The rows, consecutive threads storing consecutive floats; (i, col): float k's governor and
        # column, advanced by blockDim.x floats per iteration without a division.
        threads = U(cuda.blockDim.x)
        i = U(U(cuda.threadIdx.x) // U(GOVERNOR_DIM))
        col = U(U(cuda.threadIdx.x) % U(GOVERNOR_DIM))
        k = U(cuda.threadIdx.x)
        while k < U(S * GOVERNOR_DIM):
            if col < U(S):
                obs[e, k] = ONE if col == i else ZERO
            else:
                obs[e, k] = governor_tails[i, U(col - U(S))]
            i = U(i + U(threads // U(GOVERNOR_DIM)))
            col = U(col + U(threads % U(GOVERNOR_DIM)))
            if col >= U(GOVERNOR_DIM):
                col = U(col - U(GOVERNOR_DIM))
                i = U(i + U(1))
            k = U(k + threads)
        j = U(cuda.threadIdx.x)
        while j < U(PLANNER_DIM):
            obs[e, S * GOVERNOR_DIM + j] = planner[j]
            j = U(j + threads)
        if masks is not None:  # the mask columns of the rows, as bools
            i = U(U(cuda.threadIdx.x) // U(L + 1))
            a = U(U(cuda.threadIdx.x) % U(L + 1))
            k = U(cuda.threadIdx.x)
            while k < U(S * (L + 1)):
                masks[e, k] = governor_tails[i, U(U(GOVERNOR_MASK) + a)] != ZERO
                i = U(i + U(threads // U(L + 1)))
                a = U(a + U(threads % U(L + 1)))
                if a > U(L):
                    a = U(a - U(L + 1))
                    i = U(i + U(1))
                k = U(k + threads)
            j = U(cuda.threadIdx.x)
            while j < U(Q + 1):
                masks[e, S * (L + 1) + j] = planner[PLANNER_MASK + j] != ZERO
                j = U(j + threads)

    @cuda.jit(device=True)
    def totals_env(state, sh, e, totals):
        # The episode's totals (the reference's episode_totals): unemployment as a mean over the days stepped.
        total_deaths, total_unemployed, total_subsidy, total_productivity, t = state[12:]
        if cuda.threadIdx.x == 0:
            totals[e, 0] = total_deaths[e]
            totals[e, 1] = total_unemployed[e] / np.float32(max(t[e], np.int32(1)))  # (an int32, as t)
            totals[e, 2] = total_subsidy[e]
            totals[e, 3] = total_productivity[e]

    return GameFunctions(reset_env, step_env, observe_env, shared=shared, totals_env=totals_env)
