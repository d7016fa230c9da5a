"""The float32 operations references use where kernels must match them bit for bit
(``gpu_marl_envs.float32``), and TagContinuous's tag test, which takes a square root."""

import numpy as np
import torch

from gpu_marl_envs import float32
from gpu_marl_envs.envs import tag_continuous as tc


def test_sqrt_is_correctly_rounded():
    # numpy's float32 sqrt is correctly rounded; torch's CPU one is 1 ulp off for about a fifth of
    # these on AVX-512 CPUs.
    generator = torch.Generator().manual_seed(0)
    x = torch.cat(
        [
            torch.rand(100_000, generator=generator) * 100,
            torch.rand(1000, generator=generator) * 1e-38,
            torch.tensor([0.0, 1.0, 2.0, float(np.finfo(np.float32).max), float("inf")]),
        ]
    )
    assert np.array_equal(float32.sqrt(x).numpy(), np.sqrt(x.numpy()))


def test_divide_is_a_true_division():
    x = torch.arange(1000, dtype=torch.int32)
    assert np.array_equal(float32.divide(x, 100).numpy(), np.arange(1000, dtype=np.float32) / np.float32(100))


def test_tag_decision_rounds_the_distance_correctly():
    """A runner at every float32 squared distance within 2e-6 of the tagging radius's square from
    the one tagger: tagged exactly where numpy's (correctly rounded) sqrt of it is below the radius.
    One of these (1 - 2**-24) was tagged wrongly with torch's CPU float32 sqrt on AVX-512."""
    p = tc.TagContinuousParams(
        num_taggers=1, num_runners=1, num_other_agents_observed=1, grid_length=10.0, tagging_distance=0.1
    )
    radius = np.float32(p.tagging_radius)
    assert radius == 1.0
    low, high = np.float32(1 - 2e-6).view(np.int32), np.float32(1 + 2e-6).view(np.int32)
    d2 = np.arange(low, high + 1, dtype=np.int32).view(np.float32)
    # The runner at (dx, dy) with fl(fl(dx * dx) + fl(dy * dy)) = d2: dx just short, dy the rest.
    dx = np.sqrt(d2.astype(np.float64)).astype(np.float32)
    dx = np.where(dx * dx >= d2, np.nextafter(dx, np.float32(0)), dx)
    dy = np.sqrt(d2.astype(np.float64) - (dx * dx).astype(np.float64)).astype(np.float32)
    assert np.array_equal(dx * dx + dy * dy, d2)
    e = len(d2)
    zeros = torch.zeros(e, 2)
    state = tc.TagContinuousState(
        x=torch.stack([torch.zeros(e), torch.from_numpy(dx)], dim=1),
        y=torch.stack([torch.zeros(e), torch.from_numpy(dy)], dim=1),
        direction=zeros.clone(),
        speed=zeros.clone(),
        acceleration=zeros.clone(),
        in_game=torch.ones(e, 2, dtype=torch.bool),
        t=torch.zeros(e, dtype=torch.int32),
    )
    next_state, _, _, _ = tc.step(p, state, torch.zeros(e, 2, 2, dtype=torch.int64))
    expected = np.sqrt(d2) < radius
    tagged = ~next_state.in_game[:, 1].numpy()
    assert np.array_equal(tagged, expected), f"differs at squared distances {d2[tagged != expected].tolist()}"
