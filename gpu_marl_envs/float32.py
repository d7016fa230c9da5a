"""float32 operations for torch references that kernels must match bit for bit.

The kernels' float32 operations are IEEE's, each correctly rounded (``sqrtf`` and ``/`` in CUDA C
without fast math, ``math.sqrt`` and ``/`` in Numba). Torch does not always give the same:
- its CPU float32 ``sqrt`` is vectorised with an approximation that is 1 ulp off for about a fifth
  of inputs on AVX-512 CPUs (19,659 of 100,000 random inputs with torch 2.13; numpy is exact);
- on CUDA it turns a division by a Python scalar into a multiplication by the scalar's rounded
  reciprocal, which differs in the last bit (``3 / 100``).
A reference that promises exact agreement uses these instead. ``docs/custom_env.md`` lists the
other float32 rules (no fused multiply-add where the reference rounds twice, constants rounded once).
"""

from __future__ import annotations

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
