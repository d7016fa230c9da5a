"""Multi-agent kernel twins against the torch reference through ``gpu_marl_envs.check_env``.

Here (no GPU) the Numba kernels run under the CUDA simulator at tiny sizes, with half as many
threads as agents; the checker compiles the CUDA C kernels with nvcc; ``test_gpu_tag.py`` and
``test_gpu_covid.py`` run every backend on a GPU. TagGridworld's kernels agree exactly. Tag's and
CovidEconomy's float outputs agree to a few ulps (``harness.TWIN_RTOL``): the simulator's numpy
sin/cos (Tag) and exp/log1p (CovidEconomy's softplus) may round differently from torch's.
CovidEconomy's differ by at most 2 ulp in the unemployed, productivity and observations and by
1.4e-6 in the governors' rewards (which divide a difference by a narrow normaliser range), over 60
days. About 1 minute (CovidEconomy's simulator steps take 0.5 s each).
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
import torch
from conftest import KERNEL_BACKENDS_HERE
from harness import TWIN_ATOL, TWIN_RTOL

from gpu_marl_envs import check_env
from gpu_marl_envs.checker import first_difference
from gpu_marl_envs.envs import mpe_physics
from gpu_marl_envs.envs.covid_economy import CovidEconomyParams
from gpu_marl_envs.envs.simple_speaker_listener import SimpleSpeakerListenerParams
from gpu_marl_envs.envs.simple_spread import SimpleSpreadParams
from gpu_marl_envs.envs.simple_tag import SimpleTagParams
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams
from gpu_marl_envs.parallel_env import GpuParallelEnv
from gpu_marl_envs.registration import GAMES as REGISTERED

# Small games where tags, exits, edge hits and the episode's end all happen within a few steps.
SMALL_CONTINUOUS = TagContinuousParams(
    num_taggers=2,
    num_runners=5,
    grid_length=2.0,
    episode_length=5,
    num_other_agents_observed=3,
    tagging_distance=0.2,
    edge_hit_penalty=-0.5,
    step_penalty_for_tagger=-0.25,
    step_reward_for_runner=0.125,
)
SMALL_GRIDWORLD = TagGridworldParams(num_taggers=3, grid_length=2, episode_length=5, random_start=True)
# CovidEconomy from the published start, ending on day 297 so that crafted states reach it in a few steps.
SMALL_COVID = dataclasses.replace(CovidEconomyParams(), episode_length=297)


def covid_days(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Two envs a few days before the rules' special days, from a reset state. Env 0 on day 88: the
    planner's mask opens on day 90 and its subsidy decision counts on day 91; a third of its
    governors locked in a cooldown, a third due on day 89 (their action then restarts it). Env 1 on
    day 294: vaccines arrive from day 296, the episode ends on day 297 (then autoreset, whose day 1
    is a subsidy decision again); state 0 has fewer susceptible people than its vaccine delivery."""
    state = {name: value.clone() for name, value in state.items()}
    state["t"] = torch.tensor([88, 294], dtype=torch.int32)
    governors = torch.arange(state["cooldown"].shape[1])
    state["cooldown"] = torch.where(governors % 3 == 0, 100, torch.where(governors % 3 == 1, 88, 0)).expand(2, -1)
    state["cooldown"] = state["cooldown"].to(torch.int32).contiguous()
    state["subsidy_level"] = torch.tensor([5, 12], dtype=torch.int32)
    state["susceptible"][1, 0] = 10.0
    return state


def mpe_crowd(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An MPE game's agents (and obstacles) crowded by a corner, fast: contact forces, collisions,
    catches, speed caps and boundary penalties within the few steps checked."""
    state = {name: value.clone() for name, value in state.items()}
    generator = torch.Generator().manual_seed(1)
    for name in ("x", "y", "obstacle_x", "obstacle_y"):
        if name in state:
            state[name] = 0.85 + 0.4 * (torch.rand(state[name].shape, generator=generator) - 0.5)
    for name in ("vx", "vy"):
        state[name] = 4.0 * (torch.rand(state[name].shape, generator=generator) - 0.5)
    return state


SMALL_SPREAD = SimpleSpreadParams(N=4, max_cycles=4)
SMALL_TAG = SimpleTagParams(num_good=2, num_adversaries=2, num_obstacles=2, max_cycles=4)


class Case(NamedTuple):
    env_id: str
    params: object
    num_envs: int = 3
    num_steps: int = 7
    start: Callable[[dict], dict] | None = None
    """A state for ``set_state`` made from the reset state; None: play from the reset."""
    exact: bool = False
    """Whether the kernels agree with the reference exactly (no transcendental functions)."""


GAMES = {
    "continuous-partial": Case("TagContinuous-v0", SMALL_CONTINUOUS),
    # The neighbour grid at 7 agents (2 x 2 cells: ring searches across cells, edges, ties in corners).
    "continuous-grid": Case("TagContinuous-v0", dataclasses.replace(SMALL_CONTINUOUS, neighbour_search="grid")),
    # A speed scale that is no power of two: the kernels divide speed differences by it (by the
    # default, 1, they multiply by its exact reciprocal).
    "continuous-speed-scale-1.5": Case("TagContinuous-v0", dataclasses.replace(SMALL_CONTINUOUS, max_speed=1.5)),
    "continuous-full-stay": Case(
        "TagContinuous-v0",
        dataclasses.replace(SMALL_CONTINUOUS, use_full_observation=True, runner_exits_game_after_tagged=False),
    ),
    "gridworld-full": Case("TagGridworld-v0", SMALL_GRIDWORLD, exact=True),
    "gridworld-partial": Case(
        "TagGridworld-v0", dataclasses.replace(SMALL_GRIDWORLD, use_full_observation=False), exact=True
    ),
    "covid-special-days": Case("CovidEconomy-v0", SMALL_COVID, num_envs=2, num_steps=5, start=covid_days),
    # MPE2's games: exact, their exp and log1p included (mpe_physics writes them with exact operations).
    "spread-discrete": Case("SimpleSpread-v3", SMALL_SPREAD, num_envs=2, num_steps=5, start=mpe_crowd, exact=True),
    "spread-continuous": Case(
        "SimpleSpread-v3",
        dataclasses.replace(SMALL_SPREAD, continuous_actions=True),
        num_envs=2,
        num_steps=5,
        start=mpe_crowd,
        exact=True,
    ),
    # Two agents: the simulator's block of one thread runs the one-lane step (each contact pair once).
    "spread-one-lane": Case(
        "SimpleSpread-v3", SimpleSpreadParams(N=2, max_cycles=4), num_envs=2, num_steps=5, start=mpe_crowd, exact=True
    ),
    "speaker-listener": Case(
        "SimpleSpeakerListener-v4", SimpleSpeakerListenerParams(max_cycles=3), num_envs=2, num_steps=5, exact=True
    ),
    # Box actions of two widths: the speaker's 3 values, the listener's 5, in one (E, 2, 5) buffer.
    "speaker-listener-continuous": Case(
        "SimpleSpeakerListener-v4",
        SimpleSpeakerListenerParams(max_cycles=3, continuous_actions=True),
        num_envs=2,
        num_steps=5,
        exact=True,
    ),
    "tag-discrete": Case("SimpleTag-v3", SMALL_TAG, num_envs=2, num_steps=5, start=mpe_crowd, exact=True),
    "tag-continuous": Case(
        "SimpleTag-v3",
        dataclasses.replace(SMALL_TAG, continuous_actions=True),
        num_envs=2,
        num_steps=5,
        start=mpe_crowd,
        exact=True,
    ),
}


def test_every_registered_game_has_a_case():
    ours = {spec.definition.id for spec in REGISTERED.values() if spec.id.startswith("gpu_marl_envs/")}
    assert {case.env_id for case in GAMES.values()} == ours


@pytest.mark.parametrize("game", sorted(GAMES))
def test_kernels_pass_the_checker(game):
    case = GAMES[game]
    tolerance = {} if case.exact else {"rtol": TWIN_RTOL, "atol": TWIN_ATOL}
    check_env(
        case.env_id,
        case.params,
        num_envs=case.num_envs,
        num_steps=case.num_steps,
        start=case.start,
        backends=KERNEL_BACKENDS_HERE,
        **tolerance,
    )


@pytest.mark.parametrize("backend", KERNEL_BACKENDS_HERE)
def test_kernel_pays_a_tagger_twice_and_counts_exits(backend):
    # Tagger 0 sits between runners 2 and 3, both within the tagging radius; tagger 1 is far away.
    # Runner 4 is the last one left afterwards... until it is tagged too in env 1 (termination).
    params = dataclasses.replace(SMALL_CONTINUOUS, episode_length=50)
    x = torch.tensor([[1.0, 0.0, 1.05, 0.95, 2.0], [1.0, 0.0, 1.05, 0.95, 1.0]])
    x = torch.cat([x, torch.full((2, 2), 2.0)], dim=1)  # runners 5, 6 in a corner, out of the game
    y = torch.tensor([[1.0, 0.0, 1.0, 1.0, 2.0, 2.0, 2.0], [1.0, 0.0, 1.0, 1.0, 1.1, 2.0, 2.0]])
    in_game = torch.ones(2, 7, dtype=torch.bool)
    in_game[:, 5:] = False
    state = dict(
        x=x,
        y=y,
        direction=torch.zeros(2, 7),
        speed=torch.zeros(2, 7),
        acceleration=torch.zeros(2, 7),
        in_game=in_game,
        t=torch.tensor([3, 3], dtype=torch.int32),
    )
    results = []
    for b in ("torch", backend):
        env = GpuParallelEnv("TagContinuous-v0", 2, device="cpu", backend=b, params=params)
        env.set_state(state)
        stay = {group: torch.zeros(2, len(agents), 2, dtype=torch.int64) for group, agents in env.groups.items()}
        results.append(tuple(_copy(output) for output in env.step_groups(stay)[:3]))
    for reference_or_twin in results:
        rewards = reference_or_twin[1]
        # Tagger 0: step penalty + two tags; runners 2, 3: step reward + penalty.
        assert rewards["taggers"][0, 0] == -0.25 + 2 * 10.0, rewards["taggers"]
        assert rewards["runners"][0, :3].tolist() == [0.125 - 10.0, 0.125 - 10.0, 0.125], rewards["runners"]
        assert not reference_or_twin[2]["taggers"][0].any() and reference_or_twin[2]["taggers"][1].all()
    for name, expected, actual in zip(("observations", "rewards", "terminations"), *results):
        for group in expected:
            assert first_difference(expected[group], actual[group], TWIN_RTOL, TWIN_ATOL) is None, (name, group)


def _copy(by_group: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {group: value.clone() for group, value in by_group.items()}


@pytest.mark.parametrize("bound", [mpe_physics.pair_constants(0.15, 0.15)[0], 0.1, 1.0, 0.3, 2.5e-3])
def test_a_squared_distance_below_sqrts_bound_is_a_distance_below_the_bound(bound):
    """The kernels count a collision by d2 < below_sqrt(bound) for sqrt(d2) < bound: the same set of
    float32 d2, checked on every float32 around the threshold and on a spread of others."""
    b2 = np.float32(mpe_physics.below_sqrt(bound))
    near = b2.view(np.int32) + np.arange(-4096, 4097, dtype=np.int32)
    d2 = np.concatenate([near.view(np.float32), np.linspace(0, 4 * float(b2), 100_001, dtype=np.float32)])
    bound32 = np.float32(bound)
    assert np.array_equal(np.sqrt(d2) < bound32, d2 < b2)
    assert np.sqrt(b2) >= bound32 and np.sqrt(np.nextafter(b2, np.float32(0))) < bound32


def test_a_quotient_by_a_sum_that_rounds_to_two_is_a_product_by_a_half():
    """The kernels' log1p takes t / (t + 2) as t * 0.5 where t + 2 rounds to 2 (mpe.cuh's
    mpe_quotient_by_sum, which skips the division's slow path so): the same float32 as IEEE's quotient,
    checked on a spread of every exponent from the denormals up to where t + 2 leaves 2, and on every
    float32 around that edge and around the smallest normal."""
    edge = np.float32(2.0**-23).view(np.int32)
    smallest_normal = np.finfo(np.float32).tiny.view(np.int32)
    bits = np.concatenate(
        [
            np.arange(0, edge + 65_536, 997, dtype=np.int32),
            edge + np.arange(-65_536, 65_537, dtype=np.int32),
            smallest_normal + np.arange(-65_536, 65_537, dtype=np.int32),
        ]
    )
    t = bits.view(np.float32)
    d = t + np.float32(2.0)
    assert (d == 2).any() and (d > 2).any()
    shortcut = np.where(d == 2, t * np.float32(0.5), t / d)
    assert np.array_equal(shortcut.view(np.int32), (t / d).view(np.int32))
