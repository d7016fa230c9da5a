"""What TagContinuous's kernels are compiled and launched with: the neighbour search (scan or grid,
one phase or two), the dynamic shared-memory layout and what is staged in it, the launch bounds,
and :func:`kernel_constants`, which hands all of it (and the params as float32) to both kernels.
"""

from __future__ import annotations

import math

import numpy as np

from gpu_marl_envs import float32
from gpu_marl_envs.envs.multi_agent import whole_warps
from gpu_marl_envs.envs.tag_continuous_params import TagContinuousParams, _f32


def kernel_constants(p: TagContinuousParams) -> dict:
    """The compile-time constants of the kernels, each float already the float32 every backend uses."""
    cells = search_grid_cells(p)
    cell_size = p.grid_length / cells
    return {
        "NUM_AGENTS": p.num_agents,
        "NUM_TAGGERS": p.num_taggers,
        "BLOCK_THREADS": block_threads(p),  # the launch's block size; sizes shared memory
        "MIN_BLOCKS": min_blocks_per_sm(p),
        "SCAN_SPLIT": scan_split(p),
        "EPISODE_LENGTH": p.episode_length,
        "OBS_DIM": p.obs_dim,
        "FULL_OBSERVATION": p.use_full_observation,
        "NUM_OBSERVED": p.num_other_agents_observed,
        "RUNNER_EXITS": p.runner_exits_game_after_tagged,
        "NUM_ACCELERATION_LEVELS": p.num_acceleration_levels,
        "NUM_TURN_LEVELS": p.num_turn_levels,
        "ACCELERATION_LEVELS": tuple(float(v) for v in p.acceleration_levels),
        "TURN_LEVELS": tuple(float(v) for v in p.turn_levels),
        "GRID_LENGTH": _f32(p.grid_length),
        "TWO_PI": _f32(p.two_pi),
        "HALF_PI": _f32(p.half_pi),
        "MAX_SPEED_TAGGER": _f32(p.max_speed_tagger),
        "MAX_SPEED_RUNNER": _f32(p.max_speed_runner),
        "TAGGING_RADIUS": _f32(p.tagging_radius),
        "POSITION_SCALE": _f32(p.position_scale),
        "SPEED_SCALE": _f32(p.speed_scale),
        **_reciprocal("POSITION_SCALE", p.position_scale),
        **_reciprocal("SPEED_SCALE", p.speed_scale),
        **_reciprocal("TWO_PI", p.two_pi),
        "TAG_REWARD_FOR_TAGGER": _f32(p.tag_reward_for_tagger),
        "TAG_PENALTY_FOR_RUNNER": _f32(p.tag_penalty_for_runner),
        "STEP_PENALTY_FOR_TAGGER": _f32(p.step_penalty_for_tagger),
        "STEP_REWARD_FOR_RUNNER": _f32(p.step_reward_for_runner),
        "EDGE_HIT_PENALTY": _f32(p.edge_hit_penalty),
        "END_OF_GAME_REWARD_FOR_RUNNER": _f32(p.end_of_game_reward_for_runner),
        # The neighbour grid (search_grid_cells; 1 = none) and its conservative cell bounds.
        "GRID_CELLS": cells,
        "INV_CELL_SIZE": _f32(cells / p.grid_length),
        "CELL_SIZE": _f32(cell_size),
        "CELL_MARGIN": _f32(_cell_margin(p)),
        "GRID_TAGS": grid_tags(p),
        "PLACE_BITS": max(p.num_agents - 1, 0).bit_length(),  # a place of the grid's order, in packed keys
        "STAGE_MOTION": stage_motion(p),
        "TWO_PHASE_STAGE_MOTION": two_phase_stage_motion(p),
        "STAGE_FLOATS": STAGE_FLOATS,
        "TWO_PHASE_STAGE_FLOATS": TWO_PHASE_STAGE_FLOATS,
        "ROWS_BY_ID": rows_by_id(p),
        "TWO_PHASE": two_phase(p),
        "TWO_PHASE_MAX_IN_PLAY": two_phase_max_in_play(p),
        "TAG_REACH": _f32(_tag_reach(p)),
        # Where each shared array starts in the block's dynamic shared memory (bytes).
        **{f"SHARED_{name.upper()}": offset for name, (offset, _, _) in shared_layout(p).items()},
    }


# The rule that picks the kernels' neighbour search (neighbour_search="auto"), measured on an H100
# with benchmarks/experiments/tag_search_rule.py (docs/benchmarks/history.md), the 3 x 3 block
# searched as three runs: from 160 agents per game the grid beats the scan at 100 and 2,000 games,
# with the published rules (1.12x, 1.31x) and with every agent in play (1.72x, 1.86x); at 110 it
# loses at 100 games (0.76x, 0.84x) and wins at 2,000 (1.07x, 1.22x), so 110-agent games (the
# published size) keep the scan. Cells of about 6 agents: at 10,000 agents per game they beat 2, 3,
# 4 and 8; at 1,000 x 2,000, 4 agents per cell were 2-4% faster with every agent in play and 1-5%
# slower with the published rules (docs/benchmarks/history.md), so 6 stays.
GRID_MIN_AGENTS = 160
AGENTS_PER_CELL = 6.0

# The CUDA C kernel's warps take the observation rows by agent id (a chunk of rows is then one run
# of the buffer) in games of up to this many agents, and in the grid's order beyond. Measured on an
# H100 (docs/benchmarks/history.md): by id, 2,000 games of 1,000 to 5,000 agents ran 1.05x to
# 1.24x faster, with the published rules and with every agent in play; at 10,000 agents the
# published rules' thinned games ran slower (0.88x at 500 games, 0.86x at 100: by id, a warp's
# searches are spread over the arena and its agents out of the game idle), every agent in play
# faster (1.13x).
ROWS_BY_ID_MAX_AGENTS = 5000


def rows_by_id(p: TagContinuousParams) -> bool:
    """Whether the CUDA C kernel writes the observations by agent id (without a grid, its order is
    the ids' anyway) rather than in the grid's order: :data:`ROWS_BY_ID_MAX_AGENTS`. The Numba
    kernel takes them by id only where :func:`two_phase`: with the search by id each chunk's search
    waits on its slowest agent while thinned games' chunks all search (1,480 against 1,131 µs per
    step at 2,000 x 1,000 with the published rules on an H100, measured when its chunks were the
    whole block's; its grid games' chunks are now each warp's, not measured against this rule)."""
    return search_grid_cells(p) == 1 or p.num_agents <= ROWS_BY_ID_MAX_AGENTS


# Games of up to this many agents (with a grid) keep every agent's list in shared memory
# (:func:`two_phase`): 20 KB at 1,000 agents with k = 10, where four blocks still fit an SM. Measured
# on an H100 at 2,000 games of 250, 500 and 1,000 agents (docs/benchmarks/history.md):
# with the published rules 1.01x, 1.13x and 1.10x faster on CUDA C, 1.07x, 1.09x and 1.10x on Numba;
# with every agent in play Numba 1.10x, 1.13x and 1.17x, CUDA C as before (it chooses per step).
TWO_PHASE_MAX_AGENTS = 1000


def two_phase(p: TagContinuousParams) -> bool:
    """Whether the kernels find every agent's nearest others first, in the grid's order (a warp's
    agents are neighbours and search the same cells; only agents in the game search, packed
    together), into one list per agent in shared memory (``lists``), and then write the rows by id
    from those lists: with a grid, up to :data:`TWO_PHASE_MAX_AGENTS` (and where :func:`rows_by_id`)."""
    return search_grid_cells(p) > 1 and rows_by_id(p) and p.num_agents <= TWO_PHASE_MAX_AGENTS


# The CUDA C kernel takes the two phases (:func:`two_phase`) only in a step where at most this
# share of a game's agents is in the game; with more, each warp searches for its own rows by id as
# without them. Measured on an H100 at 2,000 x 1,000 (docs/benchmarks/history.md): with
# every agent in play, the two phases in every step took 532.6 µs per step against 505.3 in one;
# with the published rules (tagged runners leave) 459.2 against 502.9, and the same (458.1 to 459.0)
# with a share of 0.8 to 0.95, which leaves every agent in play at one phase (506.3 at 0.9). The
# Numba kernel takes them in every step (1,210 against 1,412 µs with every agent in play, measured
# when its chunks were the whole block's; they are now each warp's).
TWO_PHASE_IN_PLAY_SHARE = 0.9


def two_phase_max_in_play(p: TagContinuousParams) -> int:
    """The most agents in the game with which a CUDA C block takes the two phases in a step
    (:data:`TWO_PHASE_IN_PLAY_SHARE`); -1 where not :func:`two_phase`."""
    return int(p.num_agents * TWO_PHASE_IN_PLAY_SHARE) if two_phase(p) else -1


def search_grid_cells(p: TagContinuousParams) -> int:
    """Cells per side of the uniform grid the kernels sort each game's agents into at every step
    (a counting sort by cell, in shared memory) to find each agent's k nearest others: an agent
    scans rings of cells around its own, nearest first, until the k-th distance found is below a
    lower bound of every unscanned cell's. 1 means no grid: every agent tests every other (the
    scan, cheaper for small games). The full observation searches nothing, and games of more than
    65,536 agents (which no GPU's shared memory holds today) scan: the grid's keys hold 16-bit ids."""
    if (
        p.use_full_observation
        or p.neighbour_search == "scan"
        or p.num_agents > 2**16
        or (p.neighbour_search == "auto" and p.num_agents < GRID_MIN_AGENTS)
    ):
        return 1
    return max(2, round(math.sqrt(p.num_agents / AGENTS_PER_CELL)))


def _reciprocal(name: str, scale: float) -> dict:
    """How the kernels divide the observations' differences by ``scale`` (``gme_divide`` in
    kernels/float32.cuh, ``divide`` in the Numba kernels): ``{name}_RECIPROCAL``, float32 ``1 / scale``
    where a product with it (``{name}_RECIPROCAL_EXACT``: ``scale`` a power of two, as the default
    speed scale, 1) or the product and one correction (``float32.corrected_reciprocal``) is the
    quotient's own float, else 0.0 (divide)."""
    s = np.float32(scale)
    inverse = np.float32(1.0) / s if np.isfinite(s) and s > 0 else np.float32(0.0)
    if inverse != 0 and float(inverse) * float(s) == 1.0:
        return {f"{name}_RECIPROCAL": float(inverse), f"{name}_RECIPROCAL_EXACT": True}
    return {f"{name}_RECIPROCAL": float32.corrected_reciprocal(scale), f"{name}_RECIPROCAL_EXACT": False}


def _cell_margin(p: TagContinuousParams) -> float:
    """How far a cell's bounds are widened: a kernel places ``x`` in cell ``int(x * (C / L))``
    rounded in float32, which can put an agent a few ulps of ``L`` across a boundary ``i * L / C``;
    ``2**-16 L`` is over a hundred of them, so a cell's agents always lie within its widened bounds."""
    return p.grid_length * 2.0**-16


def _tag_reach(p: TagContinuousParams) -> float:
    """How far from a runner the grid's tag phase looks for taggers: the tagging radius, widened by
    more than the float32 rounding of the distance test and of the cell bounds (``2**-16`` of
    ``L + r``), so that every tagger the test could accept lies in a cell searched."""
    return p.tagging_radius + (p.grid_length + p.tagging_radius) * 2.0**-16


def grid_tags(p: TagContinuousParams) -> bool:
    """Whether the tag phase finds each runner's nearest tagger in the grid's cells within the
    tagging radius (taggers sorted ahead of runners in each cell) rather than testing every tagger:
    a tag needs a tagger within the radius, so the nearest tagger matters only there. Taken when a
    grid is built and the window's cells (at most ``(2 ceil(reach / cell) + 1)^2``) are no more
    than the taggers."""
    cells = search_grid_cells(p)
    if cells == 1:
        return False
    reach = math.ceil(_tag_reach(p) / (p.grid_length / cells))
    return (2 * reach + 1) ** 2 <= p.num_taggers


def block_threads(p: TagContinuousParams) -> int:
    """256 threads per env whatever the number of agents: the observation rows are written by the
    whole block and, with ~100 agents, the nearest-others scan is split over the spare threads
    (:func:`scan_split`). On an H200, 256 threads with a 2-way split beat 512 with a 4-way one by
    12% at 1000 envs x 110 agents and lose 11% at 100 envs (benchmarks/tag_throughput.py)."""
    return 256


def min_blocks_per_sm(p: TagContinuousParams) -> int:
    """Blocks of the step kernel that should fit an SM at once (the kernels' launch bounds): 4 caps
    the registers at 64 per thread (the CUDA C kernel spills 64 bytes at 1,000 agents). On an H100
    at 2000 games x 1000 agents, every agent in play, in one call: 862.7 µs per step against 874.9
    with 3 blocks (CUDA C), 2110.8 against 2225.8 (Numba); with the kernels before the staged
    observations, 1.10 ms against 1.17 with 3 and 1.36 with 5 (CUDA C). Fewer where fewer blocks'
    shared memory fits an SM (:data:`SM_SHARED_BYTES`): a cap on registers then buys no more
    blocks, only spills."""
    per_block = dynamic_shared_bytes(p) + BLOCK_RESERVED_SHARED_BYTES
    return max(1, min(4, SM_SHARED_BYTES // per_block))


# Floats of observation features a warp of the CUDA C kernel stages in shared memory on their way
# to global memory: room for eight rows of 71 (k = 10). In a step of two phases (:func:`two_phase`),
# half as much (four rows), so that the staged motion fits beside every agent's list with four
# blocks an SM (where it does: :func:`two_phase_stage_motion`). Measured on an H200 at 2,000 x
# 1,000 (docs/benchmarks/history.md): with the published rules 408.8 and 406.7 µs per step
# against 431.4 and 428.1 with that motion read from the state; the halved room in every step as
# well took 544.0 µs against 500.3 with every agent in play. Of the rows its room holds, a warp
# stages the chunk that fills its passes of 32 (row, slot) pairs best (``chunk_rows`` in the
# kernel: with k = 10, 6 rows of 8 and 3 of 4; docs/benchmarks/history.md).
STAGE_FLOATS = 576
TWO_PHASE_STAGE_FLOATS = STAGE_FLOATS // 2

# Shared memory per SM of an H100 or H200 and what the driver reserves for each block in it (CUDA C
# Programming Guide, compute capability 9.0: 228 KiB per SM, 1 KiB per block).
SM_SHARED_BYTES = 228 * 1024
BLOCK_RESERVED_SHARED_BYTES = 1024


def scan_split(p: TagContinuousParams) -> int:
    """Threads (consecutive lanes, a power of 2) sharing one agent's nearest-others scan: the
    spare threads of the block when it has more than there are agents, up to 32 (1 with a grid,
    where each agent's search is short)."""
    split = 1
    if search_grid_cells(p) > 1:
        return split
    while split < 32 and 2 * split * whole_warps(p.num_agents, 1 << 30) <= block_threads(p):
        split *= 2
    return split


def shared_layout(p: TagContinuousParams) -> dict[str, tuple[int, int, str]]:
    """The kernels' per-game arrays in dynamic shared memory: ``{name: (byte offset, count, dtype)}``.

    - ``positions``: (x, y) pairs after this step's moves; with a grid, in the grid's order (by
      cell, each cell's taggers first), else by agent id;
    - ``motion``: (speed, acceleration, direction) triples by place, as ``positions``, where
      :func:`stage_motion` (otherwise the observations read the state's rows); where
      :func:`two_phase`, in the room of ``lists`` (in a CUDA C step of one phase: see
      ``two_phase_motion`` for a step of two);
    - ``ends``: with a grid, where each bucket of that order ends (a cell's taggers, its runners,
      ..., then the agents out of the game);
    - ``tags``: runners each tagger tagged this step;
    - ``observed``: the partial observation's k nearest others of a chunk of agents (one per
      thread group of :func:`scan_split` lanes), where not :func:`two_phase`; as many in the Numba
      kernel: its block's chunk without a grid, its warps' groups of ``32 // scan_split`` with one;
    - ``features``: :data:`STAGE_FLOATS` per warp, the observation features staged on their way to
      global memory (so that the stores are whole runs of the buffer; the Numba kernel's warps stage
      their own with a grid, its block all of it in one without); in a CUDA C step of two phases
      where :func:`two_phase_stage_motion`, :data:`TWO_PHASE_STAGE_FLOATS` per warp, then
      ``two_phase_motion``;
    - ``ids``: with a grid, the agent at each place of that order (16 bits, as the grid holds at
      most 65,536 agents);
    - ``places``: with a grid where :func:`rows_by_id`, each agent's place in that order, by id (16
      bits), for the observations by id;
    - ``lists``: where :func:`two_phase`, every agent's k nearest others (their places, -1 for an
      empty slot; 16 bits), by id; in a CUDA C step of one phase each warp's own lists, then the
      staged motion;
    - ``in_game``: each agent's in-game flag, by id;
    - ``two_phase_motion``: where :func:`two_phase_stage_motion`, the staged motion (as
      ``motion``) of a CUDA C step of two phases, in the room of ``features`` after the warps'
      halved staging.
    """
    return _layout(p, stage_motion(p), two_phase_stage_motion(p))


def _layout(p: TagContinuousParams, staged: bool, two_phase_staged: bool = False) -> dict[str, tuple[int, int, str]]:
    cells = search_grid_cells(p)
    grid = cells > 1
    k = p.num_other_agents_observed
    lists = two_phase(p)
    observed = 0 if p.use_full_observation or lists else block_threads(p) // scan_split(p) * k
    arrays = [
        ("positions", 2 * p.num_agents, "float32"),
        ("motion", 3 * p.num_agents if staged and not lists else 0, "float32"),
        ("ends", 2 * cells * cells + 1 if grid else 0, "int32"),
        ("tags", p.num_taggers, "int32"),
        ("observed", observed, "int32"),
        ("features", _feature_floats(p, two_phase_staged), "float32"),
        ("ids", p.num_agents if grid else 0, "uint16"),
        ("places", p.num_agents if grid and rows_by_id(p) else 0, "uint16"),
        ("lists", _list_slots(p, staged) if lists else 0, "int16"),
        ("in_game", p.num_agents, "bool"),
    ]
    layout, offset = {}, 0
    for name, count, dtype in arrays:
        layout[name] = (offset, count, dtype)
        offset += count * np.dtype(dtype).itemsize
    if lists and staged:
        # The staged motion shares the lists' room, after the warps' own lists: it is staged only in
        # a step of one phase.
        warps_lists = 2 * block_threads(p) * k  # bytes
        assert (layout["lists"][0] + warps_lists) % 4 == 0, "the motion's floats need 4-byte alignment"
        layout["motion"] = (layout["lists"][0] + warps_lists, 3 * p.num_agents, "float32")
    if lists and two_phase_staged:
        # In a step of two phases, whose lists fill that room, after the warps' halved staging.
        warps_staging = 4 * block_threads(p) // 32 * TWO_PHASE_STAGE_FLOATS  # bytes
        layout["two_phase_motion"] = (layout["features"][0] + warps_staging, 3 * p.num_agents, "float32")
    return layout


def _feature_floats(p: TagContinuousParams, two_phase_staged: bool) -> int:
    """``features``' floats: the warps' :data:`STAGE_FLOATS`; where a step of two phases stages the
    motion, at least the warps' :data:`TWO_PHASE_STAGE_FLOATS` and, after them, that motion
    (``two_phase_motion``)."""
    warps = block_threads(p) // 32
    if two_phase_staged:
        return max(warps * STAGE_FLOATS, warps * TWO_PHASE_STAGE_FLOATS + 3 * p.num_agents)
    return warps * STAGE_FLOATS


def _list_slots(p: TagContinuousParams, staged: bool) -> int:
    """``lists``' 16-bit slots where :func:`two_phase`: every agent's k; in a step of one phase the
    CUDA C kernel's warps keep their own lists at its start, and the staged motion (3 floats an
    agent) follows them."""
    k = p.num_other_agents_observed
    return max(p.num_agents * k, block_threads(p) * k + (6 * p.num_agents if staged else 0))


def _end(layout: dict[str, tuple[int, int, str]]) -> int:
    offset, count, dtype = layout["in_game"]  # the last array
    return offset + count * np.dtype(dtype).itemsize


def dynamic_shared_bytes(p: TagContinuousParams) -> int:
    """Bytes of dynamic shared memory a block of the kernels uses (:func:`shared_layout`), which
    bounds the agents per game: 11 bytes per agent with a grid (13 where :func:`rows_by_id`; 9
    without a grid; 12 more where the motion is staged), the grid's bucket ends (about 1.3 bytes
    per agent) and some 28 KiB more (one chunk's lists with k = 10, 10 KiB, and the staged
    observation features, 18 KiB), up to what the GPU lets one block opt in to (227 KiB on an H100
    or H200: 16,537 agents with k = 10)."""
    return _end(shared_layout(p))


# A block of the kernels may stage the agents' motion in shared memory up to this size: four such
# blocks fit an H100's or H200's 227 KiB per SM, as many as the kernels' registers let run at once.
STAGING_BYTES = 56 * 1024


def stage_motion(p: TagContinuousParams) -> bool:
    """Whether the kernels copy each agent's speed, acceleration and direction into shared memory
    (12 bytes per agent) for the observations, which otherwise read them from the state in global
    memory (as random as the neighbours are): where the block stays within :data:`STAGING_BYTES`.
    Where :func:`two_phase`, this is the motion of a CUDA C step of one phase (in the lists' room);
    see :func:`two_phase_stage_motion` for a step of two."""
    return _end(_layout(p, True)) <= STAGING_BYTES


def two_phase_stage_motion(p: TagContinuousParams) -> bool:
    """Whether a CUDA C step of two phases also stages the motion, after the warps' feature
    staging halved (:data:`TWO_PHASE_STAGE_FLOATS`): where :func:`two_phase` and
    :func:`stage_motion`, and the block still stays within :data:`STAGING_BYTES`. Otherwise that
    step stages whole chunks and reads the motion from the state."""
    return two_phase(p) and stage_motion(p) and _end(_layout(p, True, True)) <= STAGING_BYTES
