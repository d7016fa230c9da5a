"""Multi-agent kernel twins against the torch reference, through ``GpuParallelEnv``.

Here (no GPU) the Numba kernels run under the CUDA simulator at tiny sizes; the CUDA C kernels are
compiled by nvcc in ``test_kernel_abi.py``; ``test_gpu_tag.py`` runs every backend on a GPU.
Integer and boolean outputs (tags, exits, flags, cells) must be identical; float ones equal to a
few ulps (the simulator's numpy sin/cos may round differently from torch's).
"""

import dataclasses

import pytest
import torch
from gymnasium.vector import AutoresetMode

from conftest import KERNEL_BACKENDS_HERE
from harness import assert_close
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams
from gpu_marl_envs.parallel_env import GpuParallelEnv

# Small games where tags, exits, edge hits and the episode's end all happen within a few steps.
SMALL_CONTINUOUS = TagContinuousParams(num_taggers=2, num_runners=5, grid_length=2.0, episode_length=5,
                                       num_other_agents_observed=3, tagging_distance=0.2, edge_hit_penalty=-0.5,
                                       step_penalty_for_tagger=-0.25, step_reward_for_runner=0.125)
SMALL_GRIDWORLD = TagGridworldParams(num_taggers=3, grid_length=2, episode_length=5, random_start=True)
GAMES = {
    "continuous-partial": ("TagContinuous-v0", SMALL_CONTINUOUS),
    "continuous-full-stay": ("TagContinuous-v0", dataclasses.replace(SMALL_CONTINUOUS, use_full_observation=True,
                                                                      runner_exits_game_after_tagged=False)),
    "gridworld-full": ("TagGridworld-v0", SMALL_GRIDWORLD),
    "gridworld-partial": ("TagGridworld-v0", dataclasses.replace(SMALL_GRIDWORLD, use_full_observation=False)),
}
NUM_ENVS, NUM_STEPS = 3, 7


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
    env_id, params = GAMES[game]
    envs = [GpuParallelEnv(env_id, NUM_ENVS, device="cpu", backend=b, params=params, autoreset_mode=mode)
            for b in ("torch", backend)]
    resets = [clone(env.reset_groups(seed=11)) for env in envs]
    assert_same_outputs((resets[0][0], {}, {}, {}, {}), (resets[1][0], {}, {}, {}, {}), f"{game} reset")
    assert_same_state(*envs, f"{game} reset")
    generator = torch.Generator().manual_seed(5)
    ended = 0
    for t in range(NUM_STEPS):
        actions = random_group_actions(envs[0], generator)
        outputs = [clone(env.step_groups(actions)) for env in envs]
        context = f"{game} {mode.name} {backend} step {t}"
        assert_same_outputs(*outputs, context)
        assert_same_state(*envs, context)
        ended += int(envs[0]._buffers.terminated.sum() + envs[0]._buffers.truncated.sum())
        if mode == AutoresetMode.DISABLED and bool(envs[0]._buffers.needs_reset.any()):
            mask = envs[0]._buffers.needs_reset.clone()
            resets = [clone(env.reset_groups(options={"reset_mask": mask})) for env in envs]
            assert_same_outputs((resets[0][0], {}, {}, {}, {}), (resets[1][0], {}, {}, {}, {}), f"{context} reset")
    assert ended > 0, f"{game}: no episode ended in {NUM_STEPS} steps; the test would not cover autoreset"


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
