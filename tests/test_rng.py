"""The counter-based RNG: the torch and Numba implementations agree bit for bit, and the draws
look uniform. (The CUDA C twin is compared on the GPU: tests/test_gpu.py.)"""

import numpy as np
import torch
from gpu_marl_envs.kernels import rng_numba
from gpu_marl_envs.kernels.numba_api import cuda

from gpu_marl_envs import rng


@cuda.jit
def _numba_uniform(seeds, episodes, draws, low, high, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = rng_numba.uniform(seeds[i], episodes[i], draws[i], low, high)


def _keys(count, seed=0):
    g = torch.Generator().manual_seed(seed)
    seeds = torch.randint(0, 2**62, (count,), generator=g, dtype=torch.int64)
    seeds[:4] = torch.tensor([0, 1, 2**32, rng.MAX_SEED])  # edge seeds: zero, one word set, the largest
    episodes = torch.randint(0, 2**31 - 1, (count,), generator=g, dtype=torch.int32)
    draws = torch.randint(0, 8, (count,), generator=g, dtype=torch.int32)
    return seeds, episodes, draws


def test_mix32_matches_reference_values():
    # lowbias32 on a few inputs, computed with Python's unbounded ints as the reference.
    def reference(x):
        x ^= x >> 16
        x = (x * rng.MIX_MUL_1) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * rng.MIX_MUL_2) & 0xFFFFFFFF
        return x ^ (x >> 16)

    inputs = [0, 1, 0xFFFFFFFF, 0x12345678, 0x9E3779B9]
    got = rng.mix32(torch.tensor(inputs, dtype=torch.int64)).tolist()
    assert got == [reference(x) for x in inputs]


def test_numba_twin_is_bit_identical():
    seeds, episodes, draws = _keys(64)
    low, high = np.float32(-0.6), np.float32(-0.4)
    out = np.zeros(64, dtype=np.float32)
    _numba_uniform[1, 64](seeds.numpy(), episodes.numpy(), draws.numpy(), low, high, out)
    expected = (
        torch.stack(
            [
                rng.uniform(seeds[i : i + 1], episodes[i : i + 1], int(draws[i]), float(low), float(high))
                for i in range(64)
            ]
        )
        .flatten()
        .numpy()
    )
    mismatch = np.flatnonzero(out != expected)
    assert mismatch.size == 0, f"key {mismatch[0]}: numba {out[mismatch[0]]!r}, torch {expected[mismatch[0]]!r}"


def test_draws_are_uniform_in_range():
    seeds = torch.full((200_000,), 123, dtype=torch.int64)
    episodes = torch.arange(200_000, dtype=torch.int32)
    x = rng.uniform(seeds, episodes, 0, -0.05, 0.05).double()
    assert x.min() >= -0.05 and x.max() < 0.05
    # Mean and variance of U(-0.05, 0.05) within ~5 standard errors; a 20-bin histogram within 5%.
    assert abs(x.mean()) < 5 * 0.1 / np.sqrt(12 * 200_000)
    assert abs(x.var() - 0.1**2 / 12) < 0.02 * 0.1**2 / 12
    counts = torch.histc(x, bins=20, min=-0.05, max=0.05)
    assert (counts / counts.mean() - 1).abs().max() < 0.05


def test_keys_give_independent_streams():
    n = 50_000
    base = rng.random_bits(torch.zeros(n, dtype=torch.int64), torch.arange(n, dtype=torch.int32), 0)
    for other in (
        rng.random_bits(torch.ones(n, dtype=torch.int64), torch.arange(n, dtype=torch.int32), 0),  # seed
        rng.random_bits(torch.zeros(n, dtype=torch.int64), torch.arange(n, dtype=torch.int32), 1),  # draw
        rng.random_bits(torch.zeros(n, dtype=torch.int64), torch.arange(1, n + 1, dtype=torch.int32), 0),  # episode
    ):
        assert (base == other).float().mean() < 1e-3
        # Bits agree about half the time, as for independent words.
        agreement = 1 - torch.stack([((base ^ other) >> b) & 1 for b in range(32)]).float().mean()
        assert abs(agreement - 0.5) < 0.01
