"""The fused step + autoreset shared by the multi-agent Numba kernels (twin of multi_agent.cuh, whose
header says what it owns and what a game supplies).

A game's Numba module defines ``game_functions(c)``: ``c`` is the game's ``kernel_constants(params)``
as a named tuple of typed values (:func:`typed_constants`: ``c.NUM_AGENTS`` an int, floats
``np.float32``, tuples ``np.float32`` or ``np.int32`` arrays), which its device functions close over
(a kernel is built per params); it returns a :class:`GameFunctions`. The framework builds the kernels
from them (:func:`make_multi_agent_kernels`), with the runtime's parameter lists
(``multi_agent_buffers.STEP_ARGUMENTS``, ``RESET_ARGUMENTS``).

A game of several envs to a block (``games_per_block`` > 1, as multi_agent.cuh packs them for CUDA C)
is packed on Numba too where its module sets ``PACKS_GAMES = True``: each env then has a team of
``block_threads`` lanes, a slice of a warp, and the game's functions write ``lane()``, ``lanes()``,
``sync()`` and ``team()`` (:func:`team_functions`) where a game of a block per env may write
``cuda.threadIdx.x``, ``cuda.blockDim.x``, ``cuda.syncthreads()`` and 0, and keep a shared array per
team (``cuda.shared.array((c.GME_GAMES_PER_BLOCK, n), float32)[team()]``). Numba's CUDA simulator runs a
block per env (it has no warp barrier), so the tests on a CPU cover packed games' rules, not their
packing.

The game's device functions, each called by every thread of the block with the block synchronised
(they may call ``cuda.syncthreads()`` inside; arrays have their natural shapes, indexed by ``e``, an
``np.uint32``; ``state`` is the tuple of the state's arrays in the state dataclass's order):
  shared()                                       -> a tuple of the block's shared arrays
  reset_env(state, sh, e, seed, episode)         a fresh state of env e, t included
  step_env(state, sh, e, actions, rewards)       -> (terminated, truncated), the same in every thread;
                                                  writes rewards[e, :], advances t; actions is int64
                                                  (E, N, *shape), indices to clamp, or for a Box game
                                                  float32 (E, N, d), read through nan_to_zero and
                                                  clipped as the rules say
  in_game(state, sh, e, a)                       -> whether agent a is still playing
  observe_env(state, sh, e, observations, masks) writes observations[e, :] and, unless masks is
                                                  None, masks[e, :] (bool; games with action masks);
                                                  called only right after reset_env or step_env
                                                  (multi_agent.cuh says why that matters)
A packed block's step may stage the observations and rewards (``make_multi_agent_kernels``): its
``observations`` and ``rewards`` are then views whose row ``e`` alone may be written.
  totals_env(state, sh, e, totals)               writes totals[e, :] (games with episode metrics)
  store_warp(state, sh, warp)                    where ``c.GME_WARP_STORES``, stores the state that
                                                  step_env left in shared memory instead of writing
                                                  it, by :func:`team_store`'s functions, after every
                                                  team of the warp has stepped or reset and observed
                                                  (the .cuh's store_warp); else step_env writes the
                                                  state itself
and, a flag rather than a function, ``speculative_step`` (the .cuh's: whether the step kernel may step
an env that awaits its reset, the reset following).
"""

import functools
import itertools
from collections import namedtuple
from typing import Any, NamedTuple

import numpy as np
from gpu_marl_envs.kernels.numba_api import (
    I64,
    U,
    after_previous_grid,
    agent_rows,
    assume,
    cuda,
    flat,
    inline_device,
    named_kernel,
    sources_key,
    staged_rows,
)
from gymnasium.vector import AutoresetMode
from numba import boolean, float32

from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.multi_agent_buffers import STAGED_BYTES, staged_row_bytes

NEXT_STEP = AUTORESET_CODES[AutoresetMode.NEXT_STEP]
SAME_STEP = AUTORESET_CODES[AutoresetMode.SAME_STEP]
ZERO = np.float32(0.0)


@cuda.jit(device=True)
def no_shared():
    """The shared memory of a game that shares nothing."""
    return ()


@cuda.jit(device=True)
def everyone_in_game(state, sh, e, a):
    """Every agent plays the whole episode."""
    return True


@cuda.jit(device=True)
def no_totals(state, sh, e, totals):
    """The totals of a game without episode metrics: none to write."""


@cuda.jit(device=True)
def no_warp_stores(state, sh, warp):
    """The warp's stores of a game that leaves no state in shared memory for them: none."""


@cuda.jit(device=True)
def launched_in_order():
    """A kernel launched after the grid before it ends (not by programmatic dependent launch): nothing to wait for."""


@cuda.jit(device=True)
def nan_to_zero(x):
    """A Box action's component as the rules read it: NaN (which ``validate_actions=False`` lets
    through) as 0, as the torch reference reads it (``min``/``max`` alone would drop or keep it)."""
    return ZERO if x != x else x


class GameFunctions(NamedTuple):
    """A game's device functions (the module docstring says what each does); the defaults are a
    game's that shares nothing, keeps every agent in the game and has no episode totals."""

    reset_env: Any
    step_env: Any
    observe_env: Any
    shared: Any = no_shared
    in_game: Any = everyone_in_game
    totals_env: Any = no_totals
    store_warp: Any = no_warp_stores
    launch_bounds: tuple[int, int] | None = None
    """(threads per block, blocks per SM) the kernels are compiled for, as CUDA C's
    ``__launch_bounds__`` (``GME_MULTI_AGENT_KERNELS_BOUNDED``): NVVM then keeps the registers per
    thread low enough for that many blocks to share an SM. None: registers unbounded."""
    speculative_step: bool = False
    """Whether the step kernel steps every env before it reads whether the env awaits its reset
    (multi_agent.cuh's ``speculative_step`` says where a game may)."""


def team_functions(c):
    """``(team, lane, lanes, sync)``, device functions of the calling thread's env as the backend packs
    them (``c.GME_GAMES_PER_BLOCK`` envs of ``c.GME_GAME_THREADS`` lanes to a block; one env, the whole
    block, where ``GME_GAMES_PER_BLOCK`` is 1): its env's place in the block, its lane in the env's
    team, the team's lanes, and the team's barrier (every lane waits for the others, and what each
    wrote to shared or global memory is visible to the team after it). multi_agent.cuh's
    gme_team(), gme_lane(), gme_lanes() and gme_sync()."""
    return _team_functions(c.GME_GAME_THREADS, c.GME_GAMES_PER_BLOCK)


@functools.cache
def _team_functions(game_threads: int, games_per_block: int):
    if games_per_block == 1:

        @inline_device
        def team():
            return U(0)

        @inline_device
        def lane():
            return U(cuda.threadIdx.x)

        @inline_device
        def lanes():
            return U(cuda.blockDim.x)

        @inline_device
        def sync():
            cuda.syncthreads()

        return team, lane, lanes, sync
    if game_threads & (game_threads - 1) or not 1 <= game_threads <= 32:
        raise ValueError(f"packed teams are power-of-two slices of one warp, not {game_threads} lanes")
    LANES = U(game_threads)
    # The team's lanes of its warp: a run of game_threads bits, shifted to the team's first lane.
    RUN = U(0xFFFFFFFF if game_threads == 32 else (1 << game_threads) - 1)

    @inline_device
    def team():
        return U(U(cuda.threadIdx.x) // LANES)

    @inline_device
    def lane():
        return U(U(cuda.threadIdx.x) % LANES)

    @inline_device
    def lanes():
        return LANES

    if game_threads == 1:

        @inline_device
        def sync():
            pass  # a team of one lane has nothing to wait for (multi_agent.cuh's gme_sync says why)

    else:

        @inline_device
        def sync():
            cuda.syncwarp(U(RUN << U(U(U(cuda.threadIdx.x) % U(32)) // LANES * LANES)))

    return team, lane, lanes, sync


def typed_constants(constants: dict[str, Any]):
    """``kernel_constants(params)`` as a named tuple of the types the kernels compute with: bools,
    ints, ``np.float32`` (each float rounded once, as CUDA C gets it), and tuples as ``np.float32``
    arrays or, all ints, ``np.int32`` arrays."""
    values = {}
    for name, value in constants.items():
        if isinstance(value, (bool, np.bool_)):
            values[name] = bool(value)
        elif isinstance(value, (int, np.integer)):
            values[name] = int(value)
        elif isinstance(value, (float, np.floating)):
            values[name] = np.float32(value)
        elif isinstance(value, (tuple, list)):
            integral = all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in value)
            values[name] = np.array(value, dtype=np.int32 if integral and value else np.float32)
        else:
            raise TypeError(
                f"kernel constant {name} is a {type(value).__name__}; a constant is a bool, an int, "
                "a float or a tuple of numbers"
            )
    return namedtuple("Constants", values)(**values)


class ActionLayout(NamedTuple):
    """How a game's agents' actions lie: the step's one ``actions`` buffer has rows of
    ``(num_agents, *shape)``; each agent group's own array (``step_groups``) rows of its agents'
    values side by side, ``width`` each (a narrower ``Box`` group's own width)."""

    shape: tuple[int, ...]
    """An agent's actions in the step's buffer: ``()`` (one index) or ``(size,)``."""
    groups: tuple[tuple[int, int, int], ...]
    """Per group, in order: ``(first agent, agents, width)``."""


def _group_actions(layout: ActionLayout, lane, lanes, sync, tiled: bool):
    """``(in_place, gather, as_actions)``. ``in_place``: whether the step reads a game of one group
    from that group's own array where ``from_groups`` is non-zero, through ``as_actions(group)``, a
    view of its ``(E, N * width)`` array in ``actions``' shape (the same values in the same places:
    read in place, no copy and no barrier). ``gather(group_actions, actions, target, e,
    from_groups)``: for a game of several groups, env ``e``'s team copies each group's actions into
    their agents' places in ``target`` where ``from_groups`` is non-zero, then synchronises; where
    ``tiled`` (``target`` a view of a tile of shared memory in ``actions``' shape), it copies them
    from ``actions`` where ``from_groups`` is 0. Else ``target`` is ``actions``. Every shape is
    assumed (docs/custom_env.md, "Numba as fast as CUDA C", rule 5): the kernel's arrays are the ones
    the backend allocates, of exactly these shapes."""
    N = U(sum(agents for _, agents, _ in layout.groups))
    SIZE = layout.shape[0] if layout.shape else 0
    VALUES = U(N * max(SIZE, 1))  # a group's values in an env when it is the only group
    in_place = len(layout.groups) == 1
    copy = _group_copier(layout, lane, lanes)

    @inline_device
    def copy_buffer(actions, target, e):  # env e's row of actions into target's, a lane an agent
        a = lane()
        while a < N:
            if SIZE:
                values = cuda.local.array(SIZE, actions.dtype)
                for i in range(SIZE):  # every load before any store (_group_copier says why)
                    values[i] = actions[e, a, i]
                for i in range(SIZE):
                    target[e, a, i] = values[i]
            else:
                target[e, a] = actions[e, a]
            a = U(a + lanes())

    @inline_device
    def gather(group_actions, actions, target, e, from_groups):
        assume(actions.shape[1] == N)
        assume(target.shape[1] == N)
        if SIZE:
            assume(actions.shape[2] == SIZE)
            assume(target.shape[2] == SIZE)
        if in_place:
            assume(group_actions[0].shape[1] == VALUES)
        elif from_groups:
            copy(group_actions, target, e)
            sync()  # the env's actions are visible to its team
        elif tiled:
            copy_buffer(actions, target, e)
            sync()

    if SIZE:
        return in_place, gather, agent_rows(int(N), SIZE)

    @inline_device
    def as_actions(group):  # an index per agent: the group's (E, N) array is actions' shape
        return group

    return in_place, gather, as_actions


def _group_copier(layout: ActionLayout, lane, lanes):
    """A device function ``copy(group_actions, actions, e)``: env ``e``'s actions from each group's
    own array (``group_actions[g]``, ``(num_envs, agents * width)``) into their agents' places in the
    step's ``actions`` buffer, by the env's team, a lane an agent (unsynchronised). The agent's group
    is found by comparisons unrolled at build time: each group's place and width are constants."""
    N = U(sum(agents for _, agents, _ in layout.groups))
    SIZE = max(width for _, _, width in layout.groups)
    firsts = [first for first, _, _ in layout.groups]
    if firsts != list(itertools.accumulate((agents for _, agents, _ in layout.groups[:-1]), initial=0)):
        # The comparisons below find an agent's group by its index: the groups must follow one another.
        raise ValueError(f"a game's groups must hold agents 0, 1, ... in order, one after another; got {layout}")
    load = store = None
    for g, (first, agents, width) in enumerate(layout.groups):
        load, store = _one_group(load, store, g, U(first), U(agents), width, not layout.shape)

    @inline_device
    def copy(group_actions, actions, e):
        # An agent's values are all loaded before any is stored, whatever its group: the compiler
        # may not move a load past a store to another array (they might overlap), so a store after
        # each load would wait on each load in turn. SimpleTag's lane 0 (an adversary's lane and the
        # good agent's, copied group after group) waited on two round trips to global memory.
        a = lane()
        while a < N:
            values = cuda.local.array(SIZE, group_actions[0].dtype)
            load(group_actions, e, a, values)
            store(actions, e, a, values)
            a = U(a + lanes())

    return copy


def _one_group(load_before, store_before, g, first, agents, width, scalar):
    """``(load, store)``, device functions ``load(group_actions, e, a, values)`` (agent ``a``'s values
    from its group's array into ``values``) and ``store(actions, e, a, values)`` (``values`` into
    agent ``a``'s place in ``actions``) for group ``g`` (agents ``first`` on) and, through
    ``load_before`` and ``store_before``, the earlier groups."""
    VALUES = U(agents * width)
    WIDTH = U(width)

    @inline_device
    def load_here(group_actions, e, a, values):
        group = group_actions[g]
        assume(group.shape[1] == VALUES)
        row = U(U(a - first) * WIDTH)  # the agent's first value
        for i in range(width):
            # row + i an int64 (not wrapped into U): the compiler then adds i to one address, as
            # the store adds it to actions[e, a]'s (a wrapped sum would cost an address per value).
            values[i] = group[e, row + i]

    if scalar:

        @inline_device
        def store_here(actions, e, a, values):  # an index per agent: actions is (E, N)
            actions[e, a] = values[0]

    else:

        @inline_device
        def store_here(actions, e, a, values):  # a vector per agent: actions is (E, N, size)
            for i in range(width):
                actions[e, a, i] = values[i]

    if load_before is None:
        return load_here, store_here
    return _by_group(first, load_here, load_before), _by_group(first, store_here, store_before)


def _by_group(first, here, before):
    """A device function ``(array, e, a, values)`` that calls ``here`` for agents ``first`` on and
    ``before`` for the earlier ones (a load or a store of :func:`_one_group`)."""

    @inline_device
    def call(array, e, a, values):
        if a >= first:
            here(array, e, a, values)
        else:
            before(array, e, a, values)

    return call


PARTIAL_UNROLL = 8
"""The stores a chunk of a partial warp's unrolled loop (:func:`_warp_rows`)."""


def _warp(game_threads: int, games_per_block: int):
    """A device function ``warp_of(num_envs)``: a packed warp's envs as the stores by warp take them
    (multi_agent.cuh's GmeWarp), ``(first_team, first_env, envs, active lanes)``, called by every lane
    of the warp's envs below ``num_envs`` (the others have returned) after each team has staged its
    rows: it is the warp's barrier."""
    WARP_TEAMS = U(min(32 // game_threads, games_per_block))
    GAMES, LANES = U(games_per_block), U(game_threads)

    @inline_device
    def warp_of(num_envs):
        first_team = U(U(U(cuda.threadIdx.x) // U(32)) * WARP_TEAMS)
        first_env = U(U(U(cuda.blockIdx.x) * GAMES) + first_team)
        envs = min(min(WARP_TEAMS, U(GAMES - first_team)), U(U(num_envs) - first_env))
        active = U(envs * LANES)
        cuda.syncwarp(U(0xFFFFFFFF) if active == U(32) else U(U(U(1) << active) - U(1)))  # every row is staged
        return first_team, first_env, envs, active

    return warp_of


def _warp_rows(game_threads: int, games_per_block: int, row: int, read):
    """A device function ``store(rows, source, column, warp)``: the warp's rows of ``rows`` (an
    ``(E, row)`` array), a value a lane, consecutive lanes on consecutive elements; element ``k`` of
    them (counted from the warp's first env's) is ``read(source, column, first_team, k)``:
    multi_agent.cuh's GmeWarp::store."""
    WARP_TEAMS = min(32 // game_threads, games_per_block)
    # A whole warp's elements where its teams fill it, else 0 (the .cuh's `full`).
    FULL = WARP_TEAMS * row if WARP_TEAMS * game_threads == 32 else 0
    # A partial warp's `active` lanes store envs * row elements: ceil(row / game_threads) a lane.
    LANE_STORES, EXACT = -(-row // game_threads), row % game_threads == 0

    @inline_device
    def store(rows, source, column, warp):
        first_team, first_env, envs, active = warp
        lane = U(U(cuda.threadIdx.x) % U(32))
        to = flat(rows)
        start = I64(first_env) * I64(row) + I64(lane)
        if FULL and envs == U(WARP_TEAMS):
            # A whole warp of envs: a constant count of stores (GmeWarp::store says why), through the
            # warp's rows as one flat array, so that LLVM unrolls them at constant offsets.
            k = I64(0)
            while k < I64(FULL // 32 * 32):  # (a range loop kept its generic step's arithmetic)
                to[start + k] = read(source, column, first_team, U(I64(lane) + k))
                k += I64(32)
            if lane < U(FULL % 32):
                to[start + I64(FULL // 32 * 32)] = read(source, column, first_team, U(lane + U(FULL // 32 * 32)))
            return
        # A grid's last, partial warp: a constant count of stores a lane too (GmeWarp::store's rounds),
        # unrolled: a loop of one store at a time cost SimpleSpread's step at 2,000 games 0.9 µs.
        # LLVM unrolls a loop of that count only by 2: chunks of PARTIAL_UNROLL stores, unrolled. Each
        # round but the last stores an element a lane (its (k + 1) * active <= envs * row).
        stride = I64(active)
        k = I64(0)
        while k < I64((LANE_STORES - 1) // PARTIAL_UNROLL * PARTIAL_UNROLL):
            j = I64(0)
            while j < I64(PARTIAL_UNROLL):
                to[start + (k + j) * stride] = read(source, column, first_team, U(I64(lane) + (k + j) * stride))
                j += I64(1)
            k += I64(PARTIAL_UNROLL)
        j = I64(0)
        while j < I64((LANE_STORES - 1) % PARTIAL_UNROLL):
            to[start + (k + j) * stride] = read(source, column, first_team, U(I64(lane) + (k + j) * stride))
            j += I64(1)
        last = I64(lane) + I64(LANE_STORES - 1) * stride
        if EXACT or last < I64(envs * U(row)):
            to[start + I64(LANE_STORES - 1) * stride] = read(source, column, first_team, U(last))

    return store


def _tile_store(game_threads: int, games_per_block: int, row: int):
    """``store(rows, tile, column, warp)``: :func:`_warp_rows` from a block's staged tile (1-D, ``row``
    elements a team; ``column`` unused): GmeWarp::store_tile."""

    @inline_device
    def read(tile, column, first_team, k):
        return tile[U(U(first_team * U(row)) + k)]

    return _warp_rows(game_threads, games_per_block, row, read)


def team_store(c, row: int):
    """For a game's ``store_warp``: a device function ``store(rows, block, column, warp)`` that stores
    the warp's rows of ``rows`` (an ``(E, row)`` state array) from columns ``column`` to ``column + row``
    of ``block``, the teams' 2-D shared array (``(c.GME_GAMES_PER_BLOCK, width)``, a team's row at its
    ``team()``): GmeWarp::store_teams."""

    @inline_device
    def read(block, column, first_team, k):
        t = U(k // U(row))  # a constant divisor: a multiply and a shift
        return block[U(first_team + t), U(column + U(k - U(t * U(row))))]

    return _warp_rows(c.GME_GAME_THREADS, c.GME_GAMES_PER_BLOCK, row, read)


def make_multi_agent_kernels(
    functions: GameFunctions,
    num_agents: int,
    name: str,
    layout: ActionLayout,
    game_threads=0,
    games_per_block=1,
    staged_obs_size=0,
    warp_stores=False,
    programmatic=False,
):
    """-> the ``(<name>_step, <name>_reset)`` kernels of a game of ``num_agents`` agents whose actions
    lie as ``layout`` says, packed ``games_per_block`` envs of ``game_threads`` lanes to a block
    (:func:`team_functions`). Where ``staged_obs_size`` is not 0 (a packed game's observations, that
    many floats an env, and rewards staged: ``multi_agent_buffers.stages_rows``), the step writes
    them through shared memory as multi_agent.cuh's gme_multi_agent_step does: the game's functions
    receive arrays whose row ``e`` is their team's row there (``numba_api.staged_rows``). Where
    ``warp_stores`` is true too (``multi_agent_buffers.stores_by_warp``), each warp also stores the
    rewards, running returns and agents' flags from tiles (where a lane holds several agents) and
    calls the game's ``store_warp``, as multi_agent.cuh's GME_WARP_STORES. ``programmatic``: the step
    kernel is launched by programmatic dependent launch (``cuda_driver.ProgrammaticLaunches``) and
    waits for the grid before it first (``numba_api.after_previous_grid``; a build for compute
    capability 9.0 on).

    The step kernel takes two parameters beyond ``multi_agent_buffers.STEP_ARGUMENTS``
    (``multi_agent_buffers.GROUP_ARGUMENTS``): ``group_actions``, a tuple of each group's own
    actions (``(num_envs, agents * width)``, C order), and ``from_groups``: where it is non-zero,
    the step of a game of one group reads that group's array, and in a game of several each env's
    team first copies its actions from them into ``actions`` (:func:`_group_actions`;
    ``step_groups`` reads the groups' tensors where they lie, as CUDA C's ``GmeActions`` does, in
    one launch: at small batches a step is bound by host time, and a gather before the launch cost
    more than the launch); where it is 0, ``actions`` holds them already. A staged game of several
    groups whose lanes hold several agents copies them (from either) into a tile of shared memory
    instead, which its ``step_env`` reads as ``actions`` (``TILED_ACTIONS`` below)."""
    N = U(num_agents)
    GAMES = U(games_per_block)
    team, lane, lanes, sync = _team_functions(game_threads, games_per_block)
    shared, reset_env, step_env, in_game, observe_env, totals_env, store_warp = (
        functions.shared,
        functions.reset_env,
        functions.step_env,
        functions.in_game,
        functions.observe_env,
        functions.totals_env,
        functions.store_warp,
    )
    bounds, SPECULATIVE = functions.launch_bounds, functions.speculative_step
    game = (shared, reset_env, step_env, in_game, observe_env, totals_env, store_warp)
    # (A device function chosen here, not a branch in the kernel: griddepcontrol is no instruction before sm_90.)
    wait_for_previous_grid = after_previous_grid if programmatic else launched_in_order
    sources = sources_key((*game, make_multi_agent_kernels), (bounds, layout, SPECULATIVE, programmatic))
    STAGED = staged_obs_size > 0
    # A staged step's rounds of a lane's loop over its game's agents, its running returns in registers.
    ROUNDS, LANES = -(-num_agents // max(game_threads, 1)), U(game_threads)
    # A staged game of several groups whose lanes hold several agents each reads its env's actions from
    # a tile of shared memory, where its team copies them (from the groups' arrays or the actions
    # buffer), not from the global buffer after a copy there (CUDA C's GmeActions reads the groups'
    # arrays in place): speaker-listener on one lane, with Box actions at 65,536 games, 5.52 µs a
    # captured step against 8.60 (H200). SimpleTag, a lane an agent, lost 2% with it (Discrete).
    # Where the tile (at most 8 bytes a value) and the staged rows stay within STAGED_BYTES, as the
    # staged rows alone must.
    ACTION_TILE = games_per_block * num_agents * max(layout.shape[0] if layout.shape else 1, 1)
    staged_bytes = games_per_block * staged_row_bytes(staged_obs_size, num_agents) + 8 * ACTION_TILE
    TILED_ACTIONS = STAGED and len(layout.groups) > 1 and ROUNDS > 1 and staged_bytes <= STAGED_BYTES
    in_place, gather, as_actions = _group_actions(layout, lane, lanes, sync, TILED_ACTIONS)
    if warp_stores and not (STAGED and ROUNDS > 1):
        raise ValueError("a step stores by warp what it stages, where a lane holds several agents")
    # The staged tiles' elements (a constant, as shared.array's shape must be).
    OBS_TILE, REWARD_TILE = games_per_block * staged_obs_size, games_per_block * num_agents
    # (Defined either way: Numba's on-disk cache pickles the kernel's closure, an empty cell fails.)
    warp_of = _warp(game_threads, games_per_block) if STAGED else None
    store_obs = _tile_store(game_threads, games_per_block, staged_obs_size) if STAGED else None
    store_agents = _tile_store(game_threads, games_per_block, num_agents) if warp_stores else None

    @inline_device
    def finish_agent(state, sh, e, a, reward, running, done, term, trunc, running_returns, episode_returns, flags):
        # One float32 addition per step, as the reference's running_returns + rewards.
        total = running + reward
        if done:
            episode_returns[e, a] = total
        running_returns[e, a] = ZERO if done else total
        playing = in_game(state, sh, e, a)
        agent_terminated, agent_truncated = flags
        agent_terminated[e, a] = term or not playing
        agent_truncated[e, a] = trunc and playing

    @cuda.jit(device=True)
    def reset_episode(state, sh, e, running_returns, episodes, seeds):
        # The game's reset, running returns back to 0, the episode counter advanced; ends synchronised.
        # episodes is read as an unsigned counter (the RNG masks it to 32 bits).
        episode = episodes[e]
        reset_env(state, sh, e, seeds[e], episode)
        a = lane()
        while a < N:
            running_returns[e, a] = ZERO
            a = U(a + lanes())
        sync()  # every thread has read episodes[e]; the fresh state is visible to the team
        if lane() == 0:
            episodes[e] = episode + np.int32(1)

    def step(
        num_envs,
        state,
        actions,
        observations,
        action_masks,
        rewards,
        agent_terminated,
        agent_truncated,
        terminated,
        truncated,
        running_returns,
        episode_returns,
        episode_totals,
        final_observations,
        final_observation_mask,
        needs_reset,
        episodes,
        seeds,
        autoreset_mode,
        group_actions,
        from_groups,
    ):
        sources  # noqa: B018  (read, so that the on-disk cache keys the kernel on it: named_kernel)
        wait_for_previous_grid()  # before any read of global memory
        # Each (E, N) array's rows are N long, a constant: Numba indexes x[e, a] through x's shape,
        # read at run time (a 64-bit product per array), where multi_agent.cuh's row = e * N is a
        # constant (docs/custom_env.md, "Numba as fast as CUDA C", rule 5). The backend allocates
        # exactly these shapes.
        assume(rewards.shape[1] == N)
        assume(agent_terminated.shape[1] == N)
        assume(agent_truncated.shape[1] == N)
        assume(running_returns.shape[1] == N)
        assume(episode_returns.shape[1] == N)
        sh = shared()
        e = U(U(U(cuda.blockIdx.x) * GAMES) + team())
        if e >= num_envs:
            return
        tid = lane()
        threads = lanes()
        if STAGED:  # a build-time constant, as in_place below
            obs_tile = cuda.shared.array(OBS_TILE, float32)
            obs = staged_rows(obs_tile, team(), e, observations)
            reward_tile = cuda.shared.array(REWARD_TILE, float32)
            team_rewards = staged_rows(reward_tile, team(), e, rewards)
        else:
            obs, team_rewards = observations, rewards
        if warp_stores:
            # The running returns' and the flags' rows the team writes: its rows of tiles of their own.
            returns_tile = cuda.shared.array(REWARD_TILE, float32)
            terminated_tile = cuda.shared.array(REWARD_TILE, boolean)
            truncated_tile = cuda.shared.array(REWARD_TILE, boolean)
            out_returns = staged_rows(returns_tile, team(), e, running_returns)
            flags = (
                staged_rows(terminated_tile, team(), e, agent_terminated),
                staged_rows(truncated_tile, team(), e, agent_truncated),
            )
        else:
            out_returns, flags = running_returns, (agent_terminated, agent_truncated)

        step_actions = actions  # what the game's step reads
        if TILED_ACTIONS:
            step_actions = staged_rows(cuda.shared.array(ACTION_TILE, actions.dtype), team(), e, actions)

        # A speculative game steps every env before it knows whether the env awaits its reset (the .cuh's
        # speculative_step): the step's loads then need not wait for needs_reset[e]'s.
        reset = autoreset_mode == NEXT_STEP and needs_reset[e]
        term, trunc = False, False  # (bound on every path, as Numba types them)
        returns = cuda.local.array(ROUNDS, float32)
        if SPECULATIVE or not reset:
            gather(group_actions, actions, step_actions, e, from_groups)
            if STAGED:
                # The lane's running returns loaded before the game's step, so that the loads overlap its own.
                for k in range(ROUNDS):
                    a = U(tid + U(k) * LANES)
                    if a < N:
                        returns[k] = running_returns[e, a]
            if in_place:  # a build-time constant: Numba types only the branch taken
                term, trunc = step_env(
                    state, sh, e, as_actions(group_actions[0]) if from_groups else actions, team_rewards
                )
            else:
                term, trunc = step_env(state, sh, e, step_actions, team_rewards)
        if reset:
            # The previous step ended this episode: this step only resets (the actions are ignored; a
            # speculative game's reset overwrites what its step wrote).
            if SPECULATIVE:
                sync()
            reset_episode(state, sh, e, out_returns, episodes, seeds)
            a = tid
            while a < N:
                if warp_stores:
                    team_rewards[e, a] = ZERO
                else:
                    rewards[e, a] = ZERO
                flags[0][e, a] = False
                flags[1][e, a] = False
                a = U(a + threads)
            if tid == 0:
                terminated[e] = False
                truncated[e] = False
                needs_reset[e] = False
            if not warp_stores:
                # (Where the warp stores, every lane reaches its stores below, in one place. Elsewhere the
                # reset ends here: with the paths joined, SimpleTag's step spilled 128 bytes, not 60.)
                observe_env(state, sh, e, obs, action_masks)
                if STAGED:
                    store_obs(observations, obs_tile, 0, warp_of(num_envs))
                return
        else:
            done = term or trunc
            sync()  # the stepped state and every reward are visible (every thread has read needs_reset[e])
            if STAGED:
                for k in range(ROUNDS):
                    a = U(tid + U(k) * LANES)
                    if a < N:
                        reward = team_rewards[e, a]
                        if not warp_stores:
                            rewards[e, a] = reward
                        finish_agent(
                            state, sh, e, a, reward, returns[k], done, term, trunc, out_returns, episode_returns, flags
                        )
            else:
                a = tid
                while a < N:
                    finish_agent(
                        state,
                        sh,
                        e,
                        a,
                        rewards[e, a],
                        running_returns[e, a],
                        done,
                        term,
                        trunc,
                        running_returns,
                        episode_returns,
                        flags,
                    )
                    a = U(a + threads)
            if done:
                totals_env(state, sh, e, episode_totals)
            if tid == 0:
                terminated[e] = term
                truncated[e] = trunc
                if autoreset_mode == SAME_STEP:
                    final_observation_mask[e] = done
                else:
                    needs_reset[e] = done
            sync()  # in_game and totals have read what observe_env may overwrite in shared memory
            if autoreset_mode == SAME_STEP and done:
                observe_env(state, sh, e, final_observations, None)
                sync()  # the final observations have read the state the reset overwrites
                reset_episode(state, sh, e, out_returns, episodes, seeds)
        observe_env(state, sh, e, obs, action_masks)  # before the warp's stores, as the .cuh's (it says why)
        if warp_stores:
            warp = warp_of(num_envs)
            store_agents(rewards, reward_tile, 0, warp)
            store_agents(running_returns, returns_tile, 0, warp)
            store_agents(agent_terminated, terminated_tile, 0, warp)
            store_agents(agent_truncated, truncated_tile, 0, warp)
            store_warp(state, sh, warp)
            store_obs(observations, obs_tile, 0, warp)
        elif STAGED:
            store_obs(observations, obs_tile, 0, warp_of(num_envs))

    def reset(num_envs, state, observations, action_masks, running_returns, reset_mask, needs_reset, episodes, seeds):
        sources  # noqa: B018
        assume(running_returns.shape[1] == N)  # as in step
        sh = shared()
        e = U(U(U(cuda.blockIdx.x) * GAMES) + team())
        if e >= num_envs or not reset_mask[e]:
            return
        reset_episode(state, sh, e, running_returns, episodes, seeds)
        if lane() == 0:
            needs_reset[e] = False
        observe_env(state, sh, e, observations, action_masks)

    return named_kernel(step, f"{name}_step", bounds), named_kernel(reset, f"{name}_reset", bounds)
