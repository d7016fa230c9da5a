"""The float32 operations references use where kernels must match them bit for bit
(``gpu_marl_envs.float32``), and TagContinuous's tag test, which takes a square root."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from conftest import HAS_GPU

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


def _rounded(value: Fraction) -> np.float32:
    """The float32 nearest ``value`` (ties to even), from exact rationals: normal and subnormal."""
    if value == 0:
        return np.float32(0.0)
    magnitude = abs(value)
    exponent = max(math.floor(math.log2(magnitude)), -126)
    while Fraction(2) ** exponent > magnitude and exponent > -126:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    units = magnitude / Fraction(2) ** (exponent - 23)
    whole = units.numerator // units.denominator
    rest = units - whole
    whole += rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1)
    return np.float32(math.copysign(float(whole * Fraction(2) ** (exponent - 23)), value))


def test_fma_rounds_once():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(3000).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32)
    cancelling = (-(a.astype(np.float64) * b)).astype(np.float32)  # the exact remainders a division's correction takes
    spread = (rng.standard_normal(3000) * np.exp2(rng.integers(-40, 40, 3000))).astype(np.float32)
    for c in (cancelling, spread):
        got = float32.fma(a, b, c)
        want = [_rounded(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)]
        assert np.array_equal(got, np.array(want, dtype=np.float32))
    # (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24: a float32 midpoint, which an addend far below one float64
    # ulp moves to its side (a float64 sum alone would land on the midpoint and round to even).
    one = np.float32(1 + 2**-12)
    even, odd = np.float32(1 + 2**-11), np.float32(1 + 2**-11 + 2**-23)
    assert float32.fma(one, one, np.float32(0.0)) == even
    assert float32.fma(one, one, np.float32(2**-60)) == odd
    assert float32.fma(one, one, np.float32(-(2**-60))) == even


def test_a_corrected_reciprocal_divides_exactly_across_its_dividends():
    rng = np.random.default_rng(1)
    low, high = float32.CORRECTED_DIVIDENDS
    significands = rng.uniform(1, 2, 200_000)
    exponents = rng.integers(math.log2(low), math.log2(high), 200_000)
    x = (significands * np.exp2(exponents) * rng.choice([-1.0, 1.0], 200_000)).astype(np.float32)
    for scale in (20.0, 2 * np.pi, 1.5, 0.1, 1000.0):
        b = np.float32(scale)
        y = np.float32(float32.corrected_reciprocal(scale))
        assert y == np.float32(1) / b
        q = x * y
        # numpy's division is correctly rounded: the kernels' correction must give its floats.
        assert np.array_equal(float32.fma(float32.fma(-q, b, x), y, q), x / b), scale
        assert not np.array_equal(q, x / b), scale  # the product alone would not


def test_the_check_catches_a_reciprocal_one_correction_cannot_fix():
    b = np.float32(20.0)
    y = np.float32(1) / b
    assert float32.corrects_every_quotient(b, y)
    assert not float32.corrects_every_quotient(b, np.nextafter(y, np.float32(1)) * np.float32(1.001))


def test_no_reciprocal_for_a_divisor_out_of_its_range():
    for divisor in (0.0, -2.0, float("inf"), float("nan"), 1e-30, 1e30):
        assert float32.corrected_reciprocal(divisor) == 0.0, divisor


@pytest.mark.skipif(HAS_GPU, reason="on a GPU, test_gpu_division checks the compiled twins over every float32")
def test_the_numba_division_is_a_true_division_under_the_simulator():
    from gpu_marl_envs.kernels.numba_api import divide

    bits = np.random.default_rng(2).integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0.0, -0.0, 1e-40, -1e-30, 2.0**-64, 2.0**64, 3e38, np.inf, -np.inf, np.nan], np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf dividends, as on a GPU
        for x in np.concatenate([bits.view(np.float32), special]):
            for divisor, reciprocal, exact in [(20.0, float32.corrected_reciprocal(20.0), False), (4.0, 0.25, True)]:
                b = np.float32(divisor)
                for r in (np.float32(reciprocal), np.float32(0.0)):  # the reciprocal's way, and a division
                    got, want = divide(x, b, r, exact and r != 0), x / b
                    assert got.view(np.uint32) == want.view(np.uint32) or (np.isnan(got) and np.isnan(want)), (
                        x,
                        divisor,
                    )
