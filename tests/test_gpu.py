"""GPU-only checks (``pytest -m gpu`` on a CUDA machine): every backend against the torch
reference at larger sizes, with and without CUDA-graph replay, on the default and a side stream;
reset states identical on CPU and GPU; Gymnasium equivalence of the kernels on the device."""

import pytest
import torch
from conftest import GPU_BACKENDS
from gymnasium.vector import AutoresetMode
from test_gymnasium_equivalence import check_against_gymnasium
from test_twins import run_twins

from gpu_marl_envs import GpuVectorEnv

pytestmark = pytest.mark.gpu
KERNEL_BACKENDS = [b for b in GPU_BACKENDS if b != "torch"]


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_kernels_match_reference_on_gpu(env_id, backend, mode, cuda_device):
    run_twins(env_id, backend, cuda_device, num_envs=20_000, steps=150, mode=mode, max_episode_steps=40)


# Each backend has its default (a graph replay or a prepared launch); both ways are checked.
@pytest.mark.parametrize("cuda_graph", [False, True], ids=["no-graph", "graph"])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_with_and_without_cuda_graph(env_id, backend, cuda_graph, cuda_device):
    run_twins(
        env_id,
        backend,
        cuda_device,
        num_envs=3000,
        steps=60,
        mode=AutoresetMode.NEXT_STEP,
        max_episode_steps=25,
        cuda_graph=cuda_graph,
    )


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_side_stream(env_id, backend, cuda_device):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run_twins(
            env_id, backend, cuda_device, num_envs=1000, steps=30, mode=AutoresetMode.SAME_STEP, max_episode_steps=10
        )
    torch.cuda.synchronize()


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_steps_match_gymnasium_on_gpu(env_id, backend, cuda_device):
    check_against_gymnasium(env_id, backend, cuda_device, num_envs=32, steps=400)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_sutton_barto_reward_matches_gymnasium_on_gpu(backend, cuda_device):
    assert (
        check_against_gymnasium("CartPole-v1", backend, cuda_device, num_envs=32, steps=400, sutton_barto_reward=True)
        > 0
    )


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_reset_states_identical_on_cpu_and_gpu(env_id, backend, cuda_device):
    cpu = GpuVectorEnv(env_id, 50_000, device="cpu", backend="torch")
    gpu = GpuVectorEnv(env_id, 50_000, device=cuda_device, backend=backend)
    cpu.reset(seed=2024)
    gpu.reset(seed=2024)
    for name in cpu.state_fields:
        assert torch.equal(cpu.get_state()[name], gpu.get_state()[name].cpu()), f"{backend}: {name} differs"


def test_default_backend_is_a_kernel_backend(cuda_device):
    env = GpuVectorEnv("CartPole-v1", 8, device=cuda_device)
    assert env.backend == GPU_BACKENDS[0] and env.backend != "torch"
