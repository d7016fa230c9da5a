"""MPE2's games on a GPU (``pytest -m gpu``): both kernel backends against the torch reference at
large sizes, SimpleSpread with 1,000 agents per game included, in both action modes.

Each step, the reference env's state is copied into the first envs of the kernel env (its own
autoreset bookkeeping left alone, so both reset the same envs), both step with the same actions
(Box actions spread past their bounds, with NaN, for the clipping), and every output of those envs
is compared bit for bit: the MPE games' physics, exp and log1p included, is written with operations
every backend rounds alike (``mpe_physics``). The reference runs on at most ``REFERENCE_ENVS`` envs,
fewer for large games: its contact forces are ``(E, N, N)`` tensors summed one entity at a time.
"""

import dataclasses

import pytest
import torch
from conftest import GPU_BACKENDS
from gymnasium.vector import AutoresetMode
from harness import assert_close, game_twins, random_group_actions

from gpu_marl_envs.backends import multi_agent_numba, multi_agent_pycuda
from gpu_marl_envs.envs.simple_speaker_listener import SimpleSpeakerListenerParams
from gpu_marl_envs.envs.simple_spread import SimpleSpreadParams
from gpu_marl_envs.envs.simple_tag import SimpleTagParams
from gpu_marl_envs.multi_agent_buffers import stages_rows

pytestmark = pytest.mark.gpu

REFERENCE_ENVS = 256
REFERENCE_PAIRS = 2**23  # agent pairs (envs x N^2) the reference holds at once: 8 games of 1,000
NUM_STEPS = 12
SPREAD = SimpleSpreadParams(max_cycles=8)
TAG = SimpleTagParams(max_cycles=8)
LARGE_TAG = dataclasses.replace(TAG, num_good=200, num_adversaries=100, num_obstacles=10)
CONFIGS = {
    # (id, num_envs, params): short episodes, so that autoresets happen.
    "spread-2000x3": ("SimpleSpread-v3", 2000, SPREAD),
    "spread-2000x3-continuous": ("SimpleSpread-v3", 2000, dataclasses.replace(SPREAD, continuous_actions=True)),
    # A grid wider than the GPU: rows stored a warp at a time (multi_agent_buffers.stores_by_warp).
    "spread-65536x3": ("SimpleSpread-v3", 65536, SPREAD),
    "spread-65536x3-continuous": ("SimpleSpread-v3", 65536, dataclasses.replace(SPREAD, continuous_actions=True)),
    # 1,000 agents in [-1, 1]^2: every agent within reach of ~100 others, contacts everywhere.
    "spread-64x1000": ("SimpleSpread-v3", 64, dataclasses.replace(SPREAD, N=1000)),
    "spread-64x1000-continuous": (
        "SimpleSpread-v3",
        64,
        dataclasses.replace(SPREAD, N=1000, continuous_actions=True, local_ratio=0.25),
    ),
    "speaker-listener-65536": ("SimpleSpeakerListener-v4", 65536, SimpleSpeakerListenerParams(max_cycles=8)),
    "speaker-listener-65536-continuous": (
        "SimpleSpeakerListener-v4",
        65536,
        SimpleSpeakerListenerParams(max_cycles=8, continuous_actions=True),
    ),
    "tag-2000x4": ("SimpleTag-v3", 2000, TAG),
    "tag-2000x4-continuous": ("SimpleTag-v3", 2000, dataclasses.replace(TAG, continuous_actions=True)),
    "tag-100x300": ("SimpleTag-v3", 100, LARGE_TAG),
    "tag-100x300-continuous": ("SimpleTag-v3", 100, dataclasses.replace(LARGE_TAG, continuous_actions=True)),
}
KERNEL_BACKENDS = [b for b in GPU_BACKENDS if b != "torch"]


def exact(name, expected, actual, context):
    assert_close(name, expected, actual, context, rtol=0, atol=0)


def with_nan(actions: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Box actions with about one component in a hundred NaN (read as 0 by every backend)."""
    out = {}
    for group, value in actions.items():
        if value.is_floating_point():
            nan = torch.rand(value.shape, generator=generator, device=value.device) < 0.01
            value = torch.where(nan, float("nan"), value)
        out[group] = value
    return out


def run_twins(env_id, num_envs, params, backend, mode, cuda_graph=None, reference_envs=REFERENCE_ENVS):
    kernel_env, reference, k = game_twins(
        env_id, num_envs, params, backend, mode, cuda_graph, REFERENCE_PAIRS, reference_envs
    )
    device = kernel_env.device
    kernel_out, reference_out = kernel_env.reset_groups(seed=3), reference.reset_groups(seed=3)
    for group in reference_out[0]:
        exact(f"reset observations[{group}]", reference_out[0][group], kernel_out[0][group][:k], env_id)
    for name, value in reference.get_state().items():
        exact(f"reset state.{name}", value, kernel_env.get_state()[name][:k], env_id)
    generator = torch.Generator(device=device).manual_seed(0)
    ended = 0
    for t in range(NUM_STEPS):
        for name in kernel_env.state_fields:
            getattr(kernel_env._buffers.state, name)[:k] = getattr(reference._buffers.state, name)
        actions = with_nan(random_group_actions(kernel_env, generator, past_bounds=0.3), generator)
        # Every float of the observations must be written by the step itself: one left over from the
        # previous step would read as NaN.
        kernel_env._buffers.observations.fill_(float("nan"))
        kernel_out = kernel_env.step_groups(actions)
        reference_out = reference.step_groups({g: a[:k] for g, a in actions.items()})
        context = f"{env_id} E={num_envs} {backend} {mode.name} step {t}"
        names = ("observations", "rewards", "terminations", "truncations")
        for name, expected, actual in zip(names, reference_out[:4], kernel_out[:4], strict=True):
            for group in expected:
                exact(f"{name}[{group}]", expected[group], actual[group][:k], context)
        for group, info in reference_out[4].items():
            episode_ended = info["_episode"]
            exact("_episode", episode_ended, kernel_out[4][group]["_episode"][:k], context)
            exact(
                f"episode returns[{group}]",
                info["episode"]["return"][episode_ended],
                kernel_out[4][group]["episode"]["return"][:k][episode_ended],
                context,
            )
            if "final_obs" in info:
                mask = info["_final_obs"]
                exact("_final_obs", mask, kernel_out[4][group]["_final_obs"][:k], context)
                final = kernel_out[4][group]["final_obs"][:k][mask]
                exact(f"final_obs[{group}]", info["final_obs"][mask], final, context)
        for name, value in reference.get_state().items():
            exact(f"state.{name}", value, kernel_env.get_state()[name][:k], context)
        exact("running_returns", reference._buffers.running_returns, kernel_env._buffers.running_returns[:k], context)
        ended += int((reference._buffers.terminated | reference._buffers.truncated).sum())
    assert ended > 0, f"{context}: no episode ended; autoreset went untested"
    # Beyond the compared envs the kernels ran too: every output is finite.
    assert torch.isfinite(kernel_env._buffers.observations).all()
    assert torch.isfinite(kernel_env._buffers.rewards).all()


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_kernels_match_reference_at_large_sizes(config, backend, cuda_device):
    env_id, num_envs, params = CONFIGS[config]
    run_twins(env_id, num_envs, params, backend, AutoresetMode.NEXT_STEP)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED], ids=lambda m: m.name)
@pytest.mark.parametrize("config", ["spread-2000x3-continuous", "tag-2000x4"])
def test_autoreset_modes_on_gpu(config, mode, backend, cuda_device):
    env_id, num_envs, params = CONFIGS[config]
    run_twins(env_id, num_envs, params, backend, mode)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
@pytest.mark.parametrize("config", ["spread-2000x3", "spread-2000x3-continuous"])
def test_stores_by_warp_on_every_env(config, mode, backend, cuda_device, monkeypatch):
    # The build of a grid wider than the GPU, forced at 2,000 games, whose last block's third warp
    # holds 16 of them (the stores' partial path): against the reference on every env.
    chosen = []

    def by_warp(definition, params, games, lanes, *_):
        chosen.append(stages_rows(definition, params, games, lanes))
        return True

    for module in (multi_agent_pycuda, multi_agent_numba):
        monkeypatch.setattr(module, "stores_by_warp", by_warp)
    env_id, num_envs, params = CONFIGS[config]
    run_twins(env_id, num_envs, params, backend, mode, reference_envs=num_envs)
    assert chosen == [True], chosen


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize(
    "env_id, params",
    [("SimpleTag-v3", TAG), ("SimpleSpeakerListener-v4", SimpleSpeakerListenerParams(max_cycles=8))],
    ids=["tag", "speaker-listener"],
)
def test_a_partial_last_warp_on_every_env(env_id, params, backend, cuda_device):
    # 2,003 games of 4-lane teams: the grid's last warp holds 3 games (12 lanes), whose observation
    # rows (62 and 14 floats a game) are not a whole count of stores a lane: the staged store's last
    # round stores only some lanes' elements (GmeWarp::store). Against the reference on every env.
    run_twins(env_id, 2003, params, backend, AutoresetMode.NEXT_STEP, reference_envs=2003)


# Steps back to back in one CUDA graph, as a captured rollout or mpe_throughput's captured runner has
# them: on an sm_90 GPU each step kernel is launched by programmatic dependent launch and waits for the
# step before it itself (cuda_driver.ProgrammaticLaunches), so a step that read its state or flags
# before the last step's writes had landed would part from the torch reference, stepped the same way
# on every env (its kernels are torch's own, launched in order). Episodes of 8 steps: resets inside
# the graph.
@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize(
    "config", ["spread-2000x3", "spread-65536x3-continuous", "speaker-listener-65536-continuous", "tag-2000x4"]
)
def test_steps_back_to_back_in_a_graph_equal_the_reference(config, backend, cuda_device):
    from gpu_marl_envs import GpuParallelEnv

    env_id, num_envs, params = CONFIGS[config]
    kernel_env, reference = (
        GpuParallelEnv(env_id, num_envs, device=cuda_device, backend=b, params=params, validate_actions=False)
        for b in (backend, "torch")
    )
    generator = torch.Generator(device=cuda_device).manual_seed(3)
    pool = [random_group_actions(reference, generator) for _ in range(NUM_STEPS)]
    for env in (kernel_env, reference):
        env.reset_groups(seed=5)
        env.step_groups(pool[0])  # the kernels loaded outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for actions in pool[1:]:
            outputs = kernel_env.step_groups(actions)
    graph.replay()
    for actions in pool[1:]:
        expected = reference.step_groups(actions)
    torch.cuda.synchronize()
    context = f"{config} {backend}"
    for name, want, got in zip(("observations", "rewards", "terminations", "truncations"), expected, outputs):
        for group in want:
            exact(f"{name}[{group}]", want[group], got[group], context)
    for name, value in reference.get_state().items():
        exact(f"state.{name}", value, kernel_env.get_state()[name], context)
    exact("running_returns", reference._buffers.running_returns, kernel_env._buffers.running_returns, context)
    exact("episodes", reference._buffers.episodes, kernel_env._buffers.episodes, context)
    # Reset from seed 5 (one episode), then a reset after step 8, inside the graph.
    assert (kernel_env._buffers.episodes == 2).all(), f"{context}: no reset inside the graph"


# The MPE2-sized games (the many-agent ones would only make the reference slow).
@pytest.mark.parametrize("config", sorted(c for c, (_, _, params) in CONFIGS.items() if params.num_agents <= 4))
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_captured_in_a_cuda_graph(config, backend, cuda_device):
    # The torch backend replays its step as a CUDA graph by default: any copy from the host inside
    # the step (a constant made per step) fails the capture. The kernel backends launch directly by
    # default; captured, a replay reads the actions from the graph's input. The twin is the torch
    # rules uncaptured.
    env_id, num_envs, params = CONFIGS[config]
    run_twins(env_id, num_envs, params, backend, AutoresetMode.NEXT_STEP, cuda_graph=True)
