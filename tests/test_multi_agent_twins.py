"""Multi-agent kernel twins against the torch reference, through ``GpuParallelEnv``.

Here (no GPU) the Numba kernels run under the CUDA simulator at tiny sizes; the CUDA C kernels are
compiled by nvcc in ``test_kernel_abi.py``; ``test_gpu_tag.py`` and ``test_gpu_covid.py`` run every
backend on a GPU. Integer and boolean outputs (tags, exits, flags, cells, rings, masks) must be
identical; float ones equal to a few ulps (``harness.TWIN_RTOL``): the simulator's numpy sin/cos
(Tag) and exp/log1p (CovidEconomy's softplus) may round differently from torch's. CovidEconomy's
differ by at most 2 ulp in the unemployed, productivity and observations and by 1.4e-6 in the
governors' rewards (which divide a difference by a narrow normaliser range), over 60 days.
About 1 minute (CovidEconomy's simulator steps take 0.5 s each).
"""

import dataclasses
from typing import Callable, NamedTuple

import pytest
import torch
from gymnasium.vector import AutoresetMode

from conftest import KERNEL_BACKENDS_HERE
from harness import assert_close
from gpu_marl_envs.envs.covid_economy import CovidEconomyParams
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams
from gpu_marl_envs.parallel_env import GpuParallelEnv

# Small games where tags, exits, edge hits and the episode's end all happen within a few steps.
SMALL_CONTINUOUS = TagContinuousParams(num_taggers=2, num_runners=5, grid_length=2.0, episode_length=5,
                                       num_other_agents_observed=3, tagging_distance=0.2, edge_hit_penalty=-0.5,
                                       step_penalty_for_tagger=-0.25, step_reward_for_runner=0.125)
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


class Case(NamedTuple):
    env_id: str
    params: object
    num_envs: int = 3
    num_steps: int = 7
    start: Callable[[dict], dict] | None = None
    """A state for ``set_state`` made from the reset state; None: play from the reset."""


GAMES = {
    "continuous-partial": Case("TagContinuous-v0", SMALL_CONTINUOUS),
    # The neighbour grid at 7 agents (2 x 2 cells: ring searches across cells, edges, ties in corners).
    "continuous-grid": Case("TagContinuous-v0", dataclasses.replace(SMALL_CONTINUOUS, neighbour_search="grid")),
    "continuous-full-stay": Case("TagContinuous-v0", dataclasses.replace(SMALL_CONTINUOUS, use_full_observation=True,
                                                                          runner_exits_game_after_tagged=False)),
    "gridworld-full": Case("TagGridworld-v0", SMALL_GRIDWORLD),
    "gridworld-partial": Case("TagGridworld-v0", dataclasses.replace(SMALL_GRIDWORLD, use_full_observation=False)),
    "covid-special-days": Case("CovidEconomy-v0", SMALL_COVID, num_envs=2, num_steps=5, start=covid_days),
}


def random_group_actions(env: GpuParallelEnv, generator: torch.Generator) -> dict[str, torch.Tensor]:
    actions = {}
    for group, agents in env.groups.items():
        space = env.action_space(agents[0])
        high = [int(space.n)] if space.shape == () else [int(n) for n in space.nvec]
        columns = [torch.randint(0, h, (env.num_envs, len(agents)), generator=generator) for h in high]
        actions[group] = columns[0] if space.shape == () else torch.stack(columns, dim=-1)
    return actions


def assert_same_outputs(reference, twin, context: str) -> None:
    names = ("observations", "rewards", "terminations", "truncations")
    for name, expected, actual in zip(names, reference[:4], twin[:4]):
        for group in expected:
            assert_close(f"{name}[{group}]", expected[group], actual[group], context)
    for group, info in reference[4].items():
        assert info.keys() == twin[4][group].keys(), f"{context}: infos[{group}] keys differ"
        for key, expected in info.items():
            actual = twin[4][group][key]
            if key == "final_obs":
                mask = info["_final_obs"]
                expected, actual = expected[mask], actual[mask]
            if key == "episode":
                # Returns and totals are those of the episodes that ended on this step.
                mask = info["_episode"]
                for name in expected:
                    assert_close(f"infos[{group}][episode][{name}]", expected[name][mask], actual[name][mask], context)
                continue
            assert_close(f"infos[{group}][{key}]", expected, actual, context)


def assert_same_state(reference: GpuParallelEnv, twin: GpuParallelEnv, context: str) -> None:
    for name, expected in reference.get_state().items():
        assert_close(f"state.{name}", expected, twin.get_state()[name], context)


def clone(value):
    """A deep copy of a step's outputs (tuples and dicts of tensors): the env overwrites them in place."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    return tuple(clone(v) for v in value)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS_HERE)
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
@pytest.mark.parametrize("game", sorted(GAMES))
def test_kernel_matches_reference_step_for_step(game, mode, backend):
    case = GAMES[game]
    envs = [GpuParallelEnv(case.env_id, case.num_envs, device="cpu", backend=b, params=case.params,
                           autoreset_mode=mode) for b in ("torch", backend)]
    resets = [clone(env.reset_groups(seed=11)) for env in envs]
    assert_same_outputs((resets[0][0], {}, {}, {}, resets[0][1]), (resets[1][0], {}, {}, {}, resets[1][1]),
                        f"{game} reset")
    assert_same_state(*envs, f"{game} reset")
    if case.start is not None:
        state = case.start(envs[0].get_state())
        starts = [clone(env.set_state(state)) for env in envs]
        for agent in starts[0]:
            assert_close(f"set_state observations[{agent}]", starts[0][agent], starts[1][agent], game)
    generator = torch.Generator().manual_seed(5)
    ended = 0
    for t in range(case.num_steps):
        actions = random_group_actions(envs[0], generator)
        outputs = [clone(env.step_groups(actions)) for env in envs]
        context = f"{game} {mode.name} {backend} step {t}"
        assert_same_outputs(*outputs, context)
        assert_same_state(*envs, context)
        ended += int(envs[0]._buffers.terminated.sum() + envs[0]._buffers.truncated.sum())
        if mode == AutoresetMode.DISABLED and bool(envs[0]._buffers.needs_reset.any()):
            mask = envs[0]._buffers.needs_reset.clone()
            resets = [clone(env.reset_groups(options={"reset_mask": mask})) for env in envs]
            assert_same_outputs((resets[0][0], {}, {}, {}, resets[0][1]), (resets[1][0], {}, {}, {}, resets[1][1]),
                                f"{context} reset")
    assert ended > 0, f"{game}: no episode ended in {case.num_steps} steps; the test would not cover autoreset"


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
    state = dict(x=x, y=y, direction=torch.zeros(2, 7), speed=torch.zeros(2, 7), acceleration=torch.zeros(2, 7),
                 in_game=in_game, t=torch.tensor([3, 3], dtype=torch.int32))
    results = []
    for b in ("torch", backend):
        env = GpuParallelEnv("TagContinuous-v0", 2, device="cpu", backend=b, params=params)
        env.set_state(state)
        stay = {group: torch.zeros(2, len(agents), 2, dtype=torch.int64) for group, agents in env.groups.items()}
        results.append(clone(env.step_groups(stay)))
    for reference_or_twin in results:
        rewards = reference_or_twin[1]
        # Tagger 0: step penalty + two tags; runners 2, 3: step reward + penalty.
        assert rewards["taggers"][0, 0] == -0.25 + 2 * 10.0, rewards["taggers"]
        assert rewards["runners"][0, :3].tolist() == [0.125 - 10.0, 0.125 - 10.0, 0.125], rewards["runners"]
        assert not reference_or_twin[2]["taggers"][0].any() and reference_or_twin[2]["taggers"][1].all()
    assert_same_outputs(*results, f"crafted tags, {backend}")
