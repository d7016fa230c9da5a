"""The CUDA C backend's compiler on a GPU (``pytest -m gpu``; ``backends/nvrtc.py``, issue 44's cold
start): a first process compiles a single-agent env's and a game's kernels with NVRTC and caches
them, a second loads them (no compile) and steps to the same observations; and where NVRTC cannot be
loaded the backend compiles with nvcc, through pycuda, to the same observations. The cache's rules
without a GPU: ``test_nvrtc.py``."""

import os
import shutil

import pytest
import torch
from harness import child_steps, run_twice

import gpu_marl_envs
from gpu_marl_envs.backends import multi_agent_pycuda, nvrtc, pycuda_backend

pytestmark = pytest.mark.gpu

CHILD = (
    """import json, torch
import gpu_marl_envs
from gpu_marl_envs.backends import nvrtc
compiled = []
compile_ = nvrtc._compile
nvrtc._compile = lambda *args, **kwargs: compiled.append(args[2]) or compile_(*args, **kwargs)
"""
    + child_steps("pycuda")
    + """print(json.dumps({
    "compiled": compiled,
    "observations": observations.tolist(),
    "group_observations": {g: o.tolist() for g, o in group_observations.items()},
}))
"""
)


def test_a_second_process_loads_the_kernels_from_disk(tmp_path, cuda_device):
    assert nvrtc.unavailable_reason() is None
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    first, second = run_twice(CHILD, env)
    assert first["compiled"] == ["cartpole.cu", "simple_spread.cu"]
    assert second["compiled"] == []  # both loaded from the cache
    assert len(list((tmp_path / "gpu_marl_envs" / "cubin").iterdir())) == 2
    assert second["observations"] == first["observations"]
    assert second["group_observations"] == first["group_observations"]


def _steps(env_id: str):
    """Observations of 30 steps from one seed, CUDA C backend, both kinds of env."""
    if env_id == "CartPole-v1":
        env = gpu_marl_envs.GpuVectorEnv(env_id, 64, device="cuda", backend="pycuda")
        seen = [env.reset(seed=3)[0]]
        for k in range(30):
            seen.append(env.step(torch.full((64,), k % 2, device="cuda"))[0])
        return torch.stack(seen)
    game = gpu_marl_envs.make_parallel(env_id, 16, device="cuda", backend="pycuda")
    seen = [torch.cat(list(game.reset_groups(seed=3)[0].values()), dim=1)]
    for k in range(30):
        actions = {g: torch.full((16, len(agents)), k % 5, device="cuda") for g, agents in game.groups.items()}
        seen.append(torch.cat(list(game.step_groups(actions)[0].values()), dim=1))
    return torch.stack(seen)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("env_id", ["CartPole-v1", "gpu_marl_envs/SimpleSpread-v3"])
def test_nvcc_where_nvrtc_cannot_be_loaded(env_id, cuda_device, monkeypatch):
    by_nvrtc = _steps(env_id)
    monkeypatch.setattr(nvrtc, "unavailable_reason", lambda: "NVRTC could not be loaded (this test)")
    monkeypatch.setattr(nvrtc, "binary", None)  # never reached
    for cached in (pycuda_backend._module, multi_agent_pycuda._module):
        cached.cache_clear()
    try:
        by_nvcc = _steps(env_id)
    finally:
        for cached in (pycuda_backend._module, multi_agent_pycuda._module):
            cached.cache_clear()  # no later test gets nvcc's modules
    assert torch.equal(by_nvcc, by_nvrtc)
