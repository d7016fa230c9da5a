"""Numba's kernels cached on disk across processes (``pytest -m gpu``; issue 46's compile cost): a
first process compiles a single-agent env's and a game's kernels and saves them, a second one loads
them (Numba's cache hits, no compilation) and steps to the same observations. What the cache keys
them on is checked on the CPU (``test_numba_cache_key.py``)."""

import os

import pytest
from harness import child_steps, run_twice

pytestmark = pytest.mark.gpu

CHILD = (
    """import json, torch
import gpu_marl_envs
from gpu_marl_envs.backends import multi_agent_numba, numba_backend
from gpu_marl_envs.registration import env_spec, game_spec
"""
    + child_steps("numba")
    + """spread = game_spec("gpu_marl_envs/SimpleSpread-v3")
# 16 games, one block: the build that does not store by warp (multi_agent_buffers.stores_by_warp).
kernels = [*numba_backend._kernels(env_spec("CartPole-v1"))]
kernels += multi_agent_numba._kernels(spread, game.params, False)[:2]
print(json.dumps({
    "hits": sum(sum(kernel.stats.cache_hits.values()) for kernel in kernels),
    "misses": sum(sum(kernel.stats.cache_misses.values()) for kernel in kernels),
    "observations": observations.tolist(),
    "group_observations": {g: o.tolist() for g, o in group_observations.items()},
}))
"""
)


def test_a_second_process_loads_the_kernels_from_disk(tmp_path, cuda_device):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    first, second = run_twice(CHILD, env)
    assert (first["hits"], first["misses"]) == (0, 4)  # two kernels each, compiled and saved
    assert (second["hits"], second["misses"]) == (4, 0)  # loaded
    assert second["observations"] == first["observations"]
    assert second["group_observations"] == first["group_observations"]
