"""TagContinuous's neighbour grid (``neighbour_search="grid"``) and the scan it replaces in large
games, both against the torch reference and against each other, from crafted states of a few
hundred agents: more agents than a block has threads, several cells per side, in the situations the
grid's bounds must get right (sparse and crowded arenas, agents out of the game, on the arena's
edges, exact ties on one point and on a lattice, fewer agents in the game than the k observed,
tags across cell boundaries).

Agents stand still (speed 0, "no change" actions), so a step keeps every position bit for bit and
the kernels' nearest-others search meets the reference's on the very positions crafted: the
observations and rewards must be equal exactly. Here (no GPU) the Numba kernels run under the CUDA
simulator; ``test_kernel_abi.py`` compiles the CUDA C kernels for the same paths and
``test_gpu_tag.py`` runs both on a GPU at the issue's sizes. About 40 seconds.
"""

import dataclasses

import numpy as np
import pytest
import torch
from conftest import KERNEL_BACKENDS_HERE
from harness import assert_close

from gpu_marl_envs.envs import tag_continuous_kernel_layout as kernel_layout
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.parallel_env import GpuParallelEnv

# 300 agents (256 threads a block here): 12 taggers, so that the tag phase uses the grid too.
PARAMS = TagContinuousParams(
    num_taggers=12, num_runners=288, grid_length=20.0, episode_length=50, tagging_distance=0.05
)


def crafted(kind: str, generator: torch.Generator) -> tuple[TagContinuousParams, dict]:
    """Params and one env's state (speeds 0) for a situation the grid must handle."""
    p, n = PARAMS, PARAMS.num_agents
    x = torch.rand(n, generator=generator) * p.grid_length
    y = torch.rand(n, generator=generator) * p.grid_length
    in_game = torch.ones(n, dtype=torch.bool)
    if kind == "crowded":
        # A small arena, every agent on one of four points: distances tie everywhere (ties by id).
        p = dataclasses.replace(p, grid_length=1.0)
        points = torch.tensor([[0.25, 0.25], [0.25, 0.5], [0.75, 0.25], [1.0, 1.0]])
        x, y = points[torch.randint(0, 4, (n,), generator=generator)].T.contiguous()
    elif kind == "lattice":
        # Whole-number positions: squared distances are whole numbers, so exact ties fall inside the
        # kernels' packed lists (their entries then put in exact order) and at their boundary (then
        # the exact search): here two agents in three take the exact search and the rest the
        # reordering, while in the "sparse" arena every agent keeps the packed list's own order.
        x = torch.randint(0, 21, (n,), generator=generator).float()
        y = torch.randint(0, 21, (n,), generator=generator).float()
    elif kind == "edges":
        # Agents on the arena's four sides and corners: cells clamped at the grid's borders.
        side = torch.randint(0, 4, (n,), generator=generator)
        x = torch.where(side == 0, 0.0, torch.where(side == 1, p.grid_length, x))
        y = torch.where(side == 2, 0.0, torch.where(side == 3, p.grid_length, y))
    elif kind == "out_of_game":
        in_game = torch.rand(n, generator=generator) < 0.5
        in_game[: p.num_taggers] = True
    elif kind == "fewer_than_k":
        # Five runners left: every agent's list holds the others in the game, then empty slots.
        in_game[p.num_taggers :] = False
        in_game[p.num_taggers : p.num_taggers + 5] = True
    elif kind == "tags_across_cells":
        # Taggers 0-9 on cell corners, each with a runner across the boundary just inside (odd k)
        # or just outside (even k) the tagging radius (0.05 * 20 = 1); taggers 10 and 11 0.5 either
        # side of a runner (the lower id tags it).
        cell = p.grid_length / kernel_layout.search_grid_cells(p)
        for k in range(10):
            x[k], y[k] = (k % 5 + 2) * cell, (k // 5 * 3 + 2) * cell
            x[p.num_taggers + k], y[p.num_taggers + k] = x[k] - (0.9999 if k % 2 else 1.0001), y[k]
        x[10], x[11], x[p.num_taggers + 10] = 15.0, 16.0, 15.5
        y[10], y[11], y[p.num_taggers + 10] = 17.0, 17.0, 17.0
    state = dict(
        x=x,
        y=y,
        direction=torch.zeros(n),
        speed=torch.zeros(n),
        acceleration=torch.zeros(n),
        in_game=in_game,
        t=torch.tensor(3, dtype=torch.int32),
    )
    return p, {name: value[None] for name, value in state.items()}


def step_still(p: TagContinuousParams, state: dict, backend: str):
    """One step of agents standing still from ``state``: (observations, rewards) by group, cloned."""
    env = GpuParallelEnv("TagContinuous-v0", 1, device="cpu", backend=backend, params=p)
    env.set_state(state)
    still = {group: torch.zeros(1, len(agents), 2, dtype=torch.int64) for group, agents in env.groups.items()}
    obs, rewards, *_ = env.step_groups(still)
    return ({g: v.clone() for g, v in obs.items()}, {g: v.clone() for g, v in rewards.items()})


KINDS = ["sparse", "crowded", "edges", "out_of_game", "fewer_than_k", "tags_across_cells", "lattice"]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS_HERE)
@pytest.mark.parametrize("kind", KINDS)
def test_grid_and_scan_match_the_reference_exactly(kind, backend):
    p, state = crafted(kind, torch.Generator().manual_seed(KINDS.index(kind)))
    assert kernel_layout.search_grid_cells(
        dataclasses.replace(p, neighbour_search="grid")
    ) > 2 and kernel_layout.grid_tags(dataclasses.replace(p, neighbour_search="grid")), (
        "the grid and its tag phase must be in use"
    )
    expected = step_still(p, state, "torch")
    for search in ("grid", "scan"):
        actual = step_still(dataclasses.replace(p, neighbour_search=search), state, backend)
        for name, e, a in zip(("observations", "rewards"), expected, actual):
            for group in e:
                assert_close(f"{name}[{group}]", e[group], a[group], f"{kind}, {backend} {search}", rtol=0, atol=0)
    if kind == "tags_across_cells":
        tagged = (expected[1]["runners"][0, :11] < 0).tolist()
        assert tagged == [k % 2 == 1 for k in range(10)] + [True], f"the crafted tags did not happen: {tagged}"
        # Tagger 11 tags no one here (this seed puts no other runner near it): tagger 10 took the tie.
        assert expected[1]["taggers"][0, 11] == 0 < expected[1]["taggers"][0, 10], "the lower id tags"


def test_auto_rule_picks_the_grid_for_large_games_only():
    assert kernel_layout.search_grid_cells(TagContinuousParams()) == 1  # 110 agents: the scan
    large = TagContinuousParams(num_runners=990)
    assert kernel_layout.search_grid_cells(large) == round((1000 / kernel_layout.AGENTS_PER_CELL) ** 0.5)
    assert kernel_layout.search_grid_cells(dataclasses.replace(large, neighbour_search="scan")) == 1
    assert kernel_layout.search_grid_cells(dataclasses.replace(large, use_full_observation=True)) == 1


@pytest.mark.parametrize("agents, by_id", [(110, True), (1000, True), (5000, True), (5001, False), (10000, False)])
def test_cuda_c_rows_go_by_id_up_to_the_measured_size_with_places_only_there(agents, by_id):
    # kernel_layout.ROWS_BY_ID_MAX_AGENTS (docs/benchmarks/history.md); without a grid the
    # rows' order is the ids' anyway, and the agents' places are kept only where the rows use them.
    p = TagContinuousParams(num_runners=agents - 10)
    assert kernel_layout.rows_by_id(p) is by_id and kernel_layout.kernel_constants(p)["ROWS_BY_ID"] is by_id
    grid = kernel_layout.search_grid_cells(p) > 1
    assert kernel_layout.shared_layout(p)["places"][1] == (agents if grid and by_id else 0)


@pytest.mark.parametrize("agents, two", [(110, False), (250, True), (1000, True), (1001, False)])
def test_two_phases_up_to_the_measured_size_with_the_motion_staged_in_every_step(agents, two):
    # kernel_layout.TWO_PHASE_MAX_AGENTS and TWO_PHASE_IN_PLAY_SHARE (docs/benchmarks/history.md);
    # the staged motion in the lists' room in a step of one phase, after the warps' halved feature
    # staging in a step of two (TWO_PHASE_STAGE_FLOATS), with four blocks an SM still.
    p = TagContinuousParams(num_runners=agents - 10)
    k = p.num_other_agents_observed
    constants = kernel_layout.kernel_constants(p)
    assert kernel_layout.two_phase(p) is two and constants["TWO_PHASE"] is two
    layout = kernel_layout.shared_layout(p)
    if not two:
        assert layout["lists"][1] == 0 and constants["TWO_PHASE_MAX_IN_PLAY"] == -1
        assert "two_phase_motion" not in layout
        return
    assert constants["TWO_PHASE_MAX_IN_PLAY"] == int(agents * kernel_layout.TWO_PHASE_IN_PLAY_SHARE)
    assert (
        kernel_layout.stage_motion(p)
        and kernel_layout.two_phase_stage_motion(p)
        and constants["TWO_PHASE_STAGE_MOTION"]
    )
    assert layout["observed"][1] == 0 and kernel_layout.min_blocks_per_sm(p) == 4

    def room(name):
        at, count, dtype = layout[name]
        return at, at + count * np.dtype(dtype).itemsize

    lists, features = room("lists"), room("features")
    assert layout["lists"][1] >= agents * k  # two phases: every agent's list
    # One phase: the warps' lists at the start of the lists' room, the motion after them, within it.
    motion = room("motion")
    assert (
        motion[0] == lists[0] + 2 * kernel_layout.block_threads(p) * k and motion[0] % 4 == 0 and motion[1] <= lists[1]
    )
    # Two phases: the motion after the warps' halved staging, within the features' room.
    two_phase_motion = room("two_phase_motion")
    warps = kernel_layout.block_threads(p) // 32
    assert two_phase_motion[0] == features[0] + 4 * warps * kernel_layout.TWO_PHASE_STAGE_FLOATS
    assert two_phase_motion[1] <= features[1]
    assert features[1] - features[0] >= 4 * warps * kernel_layout.STAGE_FLOATS  # a step of one phase stages in full
    # No other array shares either room.
    for name in layout:
        if name not in ("lists", "motion", "features", "two_phase_motion") and layout[name][1]:
            begin, end = room(name)
            assert end <= lists[0] or begin >= lists[1], name
            assert end <= features[0] or begin >= features[1], name


def test_a_step_of_two_phases_stages_the_motion_only_where_the_block_keeps_its_room():
    # With k = 12 at 1,000 agents the lists leave no room for the motion of a step of two phases
    # (the block would pass STAGING_BYTES): that step reads it from the state and stages whole
    # chunks, while a step of one phase keeps its staged motion in the lists' room, as before the
    # two phases staged theirs.
    p = TagContinuousParams(num_runners=990, num_other_agents_observed=12)
    assert kernel_layout.two_phase(p) and kernel_layout.stage_motion(p) and not kernel_layout.two_phase_stage_motion(p)
    layout = kernel_layout.shared_layout(p)
    assert "two_phase_motion" not in layout and layout["motion"][1] == 3 * 1000
    assert layout["features"][1] == kernel_layout.block_threads(p) // 32 * kernel_layout.STAGE_FLOATS
    assert (
        kernel_layout.dynamic_shared_bytes(p) <= kernel_layout.STAGING_BYTES and kernel_layout.min_blocks_per_sm(p) == 4
    )
    staged_too = kernel_layout._end(kernel_layout._layout(p, True, True))  # what staging it as well would take
    assert staged_too > kernel_layout.STAGING_BYTES


@pytest.mark.parametrize("agents, blocks", [(110, 4), (1000, 4), (3000, 3), (5000, 2), (10000, 1)])
def test_launch_bounds_ask_only_for_blocks_whose_shared_memory_fits(agents, blocks):
    # A register cap for more blocks than an SM's shared memory holds would buy spills, not blocks.
    p = TagContinuousParams(num_runners=agents - 10)
    assert kernel_layout.min_blocks_per_sm(p) == blocks
    per_block = kernel_layout.dynamic_shared_bytes(p) + kernel_layout.BLOCK_RESERVED_SHARED_BYTES
    assert blocks * per_block <= kernel_layout.SM_SHARED_BYTES and (
        blocks == 4 or (blocks + 1) * per_block > kernel_layout.SM_SHARED_BYTES
    )


def test_the_largest_game_the_docs_name_is_the_largest_that_fits_an_h100_block():
    # docs/tag.md and README.md: 16,537 agents with k = 10 in the 227 KiB an H100 or H200 block may opt in to.
    limit = 227 * 1024
    largest, one_more = (TagContinuousParams(num_runners=n - 10) for n in (16537, 16538))
    assert kernel_layout.dynamic_shared_bytes(largest) <= limit < kernel_layout.dynamic_shared_bytes(one_more)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS_HERE)
def test_a_game_beyond_the_shared_memory_limit_is_refused_naming_it(backend):
    # On the CPU the simulator takes the 48 KiB any GPU gives a block; 5000 agents need more.
    with pytest.raises(ValueError, match=r"5000 agents per env need \d+ bytes of shared memory .* limit of 49152"):
        GpuParallelEnv(
            "TagContinuous-v0", 1, device="cpu", backend=backend, params=TagContinuousParams(num_runners=4990)
        )
