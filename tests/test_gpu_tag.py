"""Tag on a GPU (``pytest -m gpu``): every backend against the torch reference at the issue's sizes,
from identical states.

Each step, the reference env's state is copied into the first envs of the backend's env (its own
autoreset bookkeeping is left alone, so both reset the same envs), both step with the same
actions, and the outputs of those envs are compared: rewards, episode returns, flags and in-game
flags exactly, floats to a few ulps (CUDA's sinf/cosf and the compilers' fused multiply-adds differ
from torch in the last bits). The observations are also compared bit for bit with the reference's
``observe`` of the kernel's own state after each step: the nearest-others search (scan or grid) and
every feature, exactly. The reference runs on at most ``REFERENCE_ENVS`` envs, fewer for large games:
its full observation and nearest-neighbour search are O(N^2) tensors per env.
"""

import dataclasses

import pytest
import torch
from conftest import GPU_BACKENDS
from gymnasium.vector import AutoresetMode
from harness import assert_close, game_twins, random_group_actions

import gpu_marl_envs.backends.multi_agent_pycuda as pycuda_backend
from gpu_marl_envs.envs import tag_continuous_kernel_layout as kernel_layout
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams
from gpu_marl_envs.parallel_env import GpuParallelEnv

pytestmark = pytest.mark.gpu

REFERENCE_ENVS = 256
REFERENCE_PAIRS = 2**29  # agent pairs (envs x N^2) the reference's search may hold at once
NUM_STEPS = 25
CONTINUOUS = TagContinuousParams(episode_length=10)
LARGE = dataclasses.replace(CONTINUOUS, num_runners=990, grid_length=10.0, episode_length=6)
GRIDWORLD = TagGridworldParams(episode_length=10, random_start=True, grid_length=6)
CONFIGS = {
    # The issue's sizes (E, N); short episodes and small arenas so that tags and autoresets happen.
    "continuous-100x110": ("TagContinuous-v0", 100, CONTINUOUS),
    "continuous-1000x110-small-arena": ("TagContinuous-v0", 1000, dataclasses.replace(CONTINUOUS, grid_length=4.0)),
    "continuous-100x110-full": ("TagContinuous-v0", 100, dataclasses.replace(CONTINUOUS, use_full_observation=True)),
    "continuous-1000x110-grid": ("TagContinuous-v0", 1000, dataclasses.replace(CONTINUOUS, neighbour_search="grid")),
    "continuous-2000x1000": ("TagContinuous-v0", 2000, LARGE),
    "continuous-2000x1000-scan": ("TagContinuous-v0", 2000, dataclasses.replace(LARGE, neighbour_search="scan")),
    "continuous-2000x1000-all-in-play": (
        "TagContinuous-v0",
        2000,
        dataclasses.replace(LARGE, runner_exits_game_after_tagged=False),
    ),
    # Agents pinned to the walls and corners of a small arena: many equal distances (ties by id).
    "continuous-2000x1000-crowded": ("TagContinuous-v0", 2000, dataclasses.replace(LARGE, grid_length=2.0)),
    # k = 12: a CUDA C step of two phases reads the motion from the state (two_phase_stage_motion).
    "continuous-2000x1000-k12": ("TagContinuous-v0", 2000, dataclasses.replace(LARGE, num_other_agents_observed=12)),
    "continuous-4x4096": ("TagContinuous-v0", 4, dataclasses.replace(CONTINUOUS, num_runners=4086, grid_length=8.0)),
    "continuous-100x10000": (
        "TagContinuous-v0",
        100,
        dataclasses.replace(CONTINUOUS, num_runners=9990, grid_length=30.0),
    ),
    "gridworld-2000x5": ("TagGridworld-v0", 2000, GRIDWORLD),
    "gridworld-65536x5": ("TagGridworld-v0", 65536, GRIDWORLD),
    "gridworld-2000x5-partial": ("TagGridworld-v0", 2000, dataclasses.replace(GRIDWORLD, use_full_observation=False)),
    "gridworld-64x1000": ("TagGridworld-v0", 64, dataclasses.replace(GRIDWORLD, num_taggers=999, grid_length=30)),
}
KERNEL_BACKENDS = [b for b in GPU_BACKENDS if b != "torch"]


def compare(name, expected, actual, context):
    # Rewards and their sums are exact: the same float32 additions in the same order everywhere.
    exact = not expected.is_floating_point() or name.startswith(("rewards", "episode returns", "running_returns"))
    assert_close(name, expected, actual, context, **({"rtol": 0, "atol": 0} if exact else {}))


def run_twins(env_id, num_envs, params, backend, mode, cuda_graph=None):
    kernel_env, reference, k = game_twins(
        env_id, num_envs, params, backend, mode, cuda_graph, REFERENCE_PAIRS, REFERENCE_ENVS
    )
    device = kernel_env.device
    kernel_out, reference_out = kernel_env.reset_groups(seed=3), reference.reset_groups(seed=3)
    for group in reference_out[0]:
        compare(f"reset observations[{group}]", reference_out[0][group], kernel_out[0][group][:k], env_id)
    for name, value in reference.get_state().items():
        compare(f"reset state.{name}", value, kernel_env.get_state()[name][:k], env_id)
    generator = torch.Generator(device=device).manual_seed(0)
    ended = 0
    for t in range(NUM_STEPS):
        for name in kernel_env.state_fields:
            getattr(kernel_env._buffers.state, name)[:k] = getattr(reference._buffers.state, name)
        actions = random_group_actions(kernel_env, generator)
        # Every float of the observations must be written by the step itself: one left over from the
        # previous step would read as NaN.
        kernel_env._buffers.observations.fill_(float("nan"))
        kernel_out = kernel_env.step_groups(actions)
        reference_out = reference.step_groups({g: a[:k] for g, a in actions.items()})
        context = f"{env_id} E={num_envs} {backend} {mode.name} step {t}"
        names = ("observations", "rewards", "terminations", "truncations")
        for name, expected, actual in zip(names, reference_out[:4], kernel_out[:4]):
            for group in expected:
                compare(f"{name}[{group}]", expected[group], actual[group][:k], context)
        for group, info in reference_out[4].items():
            compare(f"active[{group}]", info["active"], kernel_out[4][group]["active"][:k], context)
            episode_ended = info["_episode"]
            compare("_episode", episode_ended, kernel_out[4][group]["_episode"][:k], context)
            compare(
                f"episode returns[{group}]",
                info["episode"]["return"][episode_ended],
                kernel_out[4][group]["episode"]["return"][:k][episode_ended],
                context,
            )
            if "final_obs" in info:
                mask = info["_final_obs"]
                compare("_final_obs", mask, kernel_out[4][group]["_final_obs"][:k], context)
                compare(
                    f"final_obs[{group}]", info["final_obs"][mask], kernel_out[4][group]["final_obs"][:k][mask], context
                )
        for name, value in reference.get_state().items():
            compare(f"state.{name}", value, kernel_env.get_state()[name][:k], context)
        if env_id == "TagContinuous-v0":
            own = kernel_env.definition.state_type(
                **{name: value[:k] for name, value in kernel_env.get_state().items()}
            )
            assert_close(
                "observations of the kernel's own state",
                kernel_env.definition.flat_observations(params, own),
                kernel_env._buffers.observations[:k],
                context,
                rtol=0,
                atol=0,
            )
        compare("running_returns", reference._buffers.running_returns, kernel_env._buffers.running_returns[:k], context)
        ended += int((reference._buffers.terminated | reference._buffers.truncated).sum())
    assert ended > 0, f"{context}: no episode ended; autoreset went untested"
    # Beyond the compared envs the kernels ran too: every output is finite and flags consistent.
    assert torch.isfinite(kernel_env._buffers.observations).all()
    assert not (kernel_env._buffers.terminated & kernel_env._buffers.truncated).any()


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_kernels_match_reference_at_issue_sizes(config, backend, cuda_device):
    env_id, num_envs, params = CONFIGS[config]
    run_twins(env_id, num_envs, params, backend, AutoresetMode.NEXT_STEP)


@pytest.mark.skipif("pycuda" not in KERNEL_BACKENDS, reason="pycuda (the CUDA C backend) is not installed")
@pytest.mark.parametrize("config", ["continuous-2000x1000", "continuous-2000x1000-crowded"])
def test_cuda_c_two_phases_in_every_step_match_the_reference(config, monkeypatch, cuda_device):
    # The CUDA C kernel takes the two phases only in steps where few enough agents are in play
    # (kernel_layout.TWO_PHASE_IN_PLAY_SHARE): the tests above may take them in some steps, the all-in-play one
    # in none. With a share of 1 it takes them in every step.
    env_id, num_envs, params = CONFIGS[config]
    assert kernel_layout.two_phase(params)
    monkeypatch.setattr(kernel_layout, "TWO_PHASE_IN_PLAY_SHARE", 1.0)
    pycuda_backend._module.cache_clear()  # the kernels are built per params; the share is not one
    try:
        run_twins(env_id, num_envs, params, "pycuda", AutoresetMode.NEXT_STEP)
    finally:
        pycuda_backend._module.cache_clear()


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED], ids=lambda m: m.name)
@pytest.mark.parametrize("config", ["continuous-1000x110-small-arena", "gridworld-2000x5"])
def test_autoreset_modes_on_gpu(config, mode, backend, cuda_device):
    env_id, num_envs, params = CONFIGS[config]
    run_twins(env_id, num_envs, params, backend, mode)


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["no-graph", "graph"])
@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_with_and_without_cuda_graph_on_a_side_stream(backend, cuda_graph, cuda_device):
    env_id, num_envs, params = CONFIGS["continuous-100x110"]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        run_twins(env_id, num_envs, params, backend, AutoresetMode.NEXT_STEP, cuda_graph=cuda_graph)
    torch.cuda.synchronize()


def test_default_backend_on_gpu_is_a_kernel(cuda_device):
    env = GpuParallelEnv("TagContinuous-v0", 2, device=cuda_device)
    assert env.backend == KERNEL_BACKENDS[0]


@pytest.mark.parametrize("env_id", ["TagContinuous-v0", "TagGridworld-v0"])
def test_render_from_gpu_state(env_id, cuda_device):
    env = GpuParallelEnv(env_id, 3, device=cuda_device, render_mode="rgb_array", render_env_index=2)
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype.name == "uint8" and frame.ndim == 3 and frame.shape[2] == 3
