"""float32 operations for torch references that kernels must match bit for bit.

The kernels' float32 operations are IEEE's, each correctly rounded (``sqrtf`` and ``/`` in CUDA C
without fast math, ``math.sqrt`` and ``/`` in Numba). Torch does not always give the same:
- its CPU float32 ``sqrt`` is vectorised with an approximation that is 1 ulp off for about a fifth
  of inputs on AVX-512 CPUs (19,659 of 100,000 random inputs with torch 2.13; numpy is exact);
- on CUDA it turns a division by a Python scalar into a multiplication by the scalar's rounded
  reciprocal, which differs in the last bit (``3 / 100``).
A reference that promises exact agreement uses these instead. ``docs/custom_env.md`` lists the
other float32 rules (no fused multiply-add where the reference rounds twice, constants rounded once).

For the kernels' side: ``corrected_reciprocal`` gives the constant with which a kernel divides by
a product and one FMA correction (``gme_divide`` in kernels/float32.cuh) and proves it exact, with
``fma``, numpy's single-rounding fused multiply-add (the CUDA simulator's rounds twice).
"""

from __future__ import annotations

import functools

import numpy as np
import torch


def sqrt(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded float32 square root of float32 ``x``, on every device: computed in
    float64 and rounded once. The float64 root of a float32 is within half a float64 ulp of the exact
    root, and 53 >= 2 * 24 + 2 bits make that second rounding innocuous for square roots (Figueroa,
    "When is double rounding innocuous?", 1995)."""
    return torch.sqrt(x.to(torch.float64)).to(torch.float32)


def divide(numerator: torch.Tensor, denominator: float) -> torch.Tensor:
    """``numerator / float32(denominator)`` as a true float32 division on every device: the divisor
    is a 0-dim tensor on the numerator's device, which torch on CUDA does not turn into a reciprocal."""
    divisor = torch.full((), float(denominator), dtype=torch.float32, device=numerator.device)
    return numerator.to(torch.float32) / divisor


def fma(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once to float32 (IEEE's fused multiply-add, CUDA's ``__fmaf_rn``) for
    float32 arrays or scalars, in numpy. The product is exact in float64 (24 + 24 bits). Knuth's
    TwoSum gives the float64 sum ``s`` and its exact error ``e``; ``s`` rounds to float32 as the exact
    sum does, except where ``s`` is a float32 midpoint (representable in float64) and ``e`` is not
    zero, which puts the exact sum on ``e``'s side of it."""
    a, b, c = (np.asarray(v, dtype=np.float32) for v in (a, b, c))
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        s = p + c64
        v = s - p
        e = (p - (s - v)) + (c64 - v)
        rounded = s.astype(np.float32)
        towards = np.nextafter(rounded, np.where(s > rounded, np.float32(np.inf), np.float32(-np.inf)))
        midpoint = (s != rounded) & (s == (rounded.astype(np.float64) + towards.astype(np.float64)) / 2)
        move = midpoint & (e != 0) & ((e > 0) == (towards > rounded))
    return np.where(move, towards, rounded)


# Dividends whose division by a corrected reciprocal is carried from the binade [1, 2) by powers of
# two: every intermediate of the correction stays a normal float32 (a reciprocal within 2**±60).
CORRECTED_DIVIDENDS = (2.0**-64, 2.0**64)


@functools.cache
def corrected_reciprocal(divisor: float) -> float:
    """``y = float32(1 / divisor)`` where one correction of ``q = x * y`` gives every float32 quotient
    ``x / divisor`` exactly, else 0.0 (divide). The correction (Markstein, IBM J. Res. Dev. 34(1),
    1990): ``r = fma(-q, divisor, x)``, the exact remainder, then ``fma(r, y, q)``; two FMAs and a
    product in place of a division (a dozen instructions and a branch on a GPU). Checked here for
    every significand of the dividends in [1, 2), against numpy's division rounded once more to
    float32 (innocuous: 53 >= 2 * 24 + 2 bits, see ``sqrt``). Scaling ``x`` by a power of two scales
    every step exactly while they stay normal, so this holds for every ``|x|`` within
    ``CORRECTED_DIVIDENDS``; a kernel divides the others (zeros, for their sign, take ``q``)."""
    b = np.float32(divisor)
    if not (np.isfinite(b) and b > 0):
        return 0.0
    y = np.float32(1.0) / b
    return float(y) if 2.0**-60 <= y <= 2.0**60 and corrects_every_quotient(b, y) else 0.0


def corrects_every_quotient(divisor: np.float32, reciprocal: np.float32) -> bool:
    """Whether ``fma(fma(-q, divisor, x), reciprocal, q)``, ``q = x * reciprocal``, is float32
    ``x / divisor`` for every ``x`` in [1, 2) (see ``corrected_reciprocal``)."""
    for start in range(2**23, 2**24, 2**21):  # a quarter of the binade at a time: 16 MB arrays
        x = (np.arange(start, start + 2**21, dtype=np.float64) * 2.0**-23).astype(np.float32)
        q = x * reciprocal
        quotient = (x.astype(np.float64) / np.float64(divisor)).astype(np.float32)
        if not np.array_equal(fma(fma(-q, divisor, x), reciprocal, q), quotient):
            return False
    return True
