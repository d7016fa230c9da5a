"""Draws from categorical policies in one Triton kernel on CUDA.

:meth:`models.ActorCritic.sample` draws by the Gumbel-max trick (``argmax(logits + G)``, with ``G``
standard Gumbel noise, is a draw from ``softmax(logits)``); in PyTorch that takes six kernels
(uniform noise, two logs, a negation, the sum, the argmax) and writes the noise to memory.
:func:`gumbel_max_kernel` does the same in one Triton kernel (:mod:`policy_kernels`) plus the draw
of its seed. On an H200, a draw over TagContinuous's runners (100,000 rows of two 21-way
choices) took 102 µs in PyTorch and 50 µs in a first version of this kernel with one Philox draw
per entry; drawing four numbers at a time took a further 1.6 ms off the 100 draws of a Tag A2C
rollout (1,000 games x 50 steps).

Both forms use the device's PyTorch generator (the kernel's seed is drawn from it), so runs are
reproducible per seed, and a CUDA graph that replays the kernel draws new noise each time; they
draw different noise for the same seed.
"""

from __future__ import annotations

import torch
from gpu_marl_envs.baselines import wide_mlp

BLOCK_ROWS = 64


def kernel_applies(logits: torch.Tensor) -> bool:
    """Whether :func:`gumbel_max_kernel` takes ``logits``: on CUDA, rows of unit stride, and
    :func:`wide_mlp.kernels_apply` (enough rows, Triton installed, not under ``torch.compile``,
    which traces the PyTorch form instead)."""
    return logits.is_cuda and logits.stride(-1) == 1 and wide_mlp.kernels_apply(wide_mlp.row_count(logits))


def gumbel_max_kernel(logits: torch.Tensor, components: int, action_mask: torch.Tensor | None = None) -> torch.Tensor:
    """One draw per row of ``logits`` (``(..., components * n)``, each component's ``n`` entries
    side by side, for :func:`kernel_applies` logits): ``(..., components)`` int64 indices, never a
    masked one (``action_mask``, bool, the shape of ``logits``; every component needs an allowed
    entry)."""
    from gpu_marl_envs.baselines import policy_kernels

    width = logits.shape[-1]
    if width % components:
        raise ValueError(f"{width} logits do not split into {components} equal components")
    n = width // components
    batch = logits.shape[:-1]
    rows = logits.reshape(-1, width)  # a view for the rollout's and the update's layouts
    n_rows, quarter = rows.shape[0], max(1, 1 << ((n + 3) // 4 - 1).bit_length())  # Philox draws per component
    if n_rows * components * quarter >= 2**31:
        raise ValueError(
            f"{n_rows:,} rows of {components} x {n} choices overflow the kernel's 32-bit "
            "noise counters; sample in chunks"
        )
    actions = torch.empty(n_rows, components, dtype=torch.int64, device=logits.device)
    seed = torch.randint(2**62, (1,), device=logits.device)
    if action_mask is not None:
        action_mask = action_mask.reshape(n_rows, width).contiguous()
    if n_rows:
        policy_kernels.gumbel_argmax[((n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS,)](
            rows,
            action_mask if action_mask is not None else rows,
            seed,
            actions,
            n_rows,
            rows.stride(0),
            COMPONENTS=components,
            N=n,
            QUARTER=quarter,
            MASKED=action_mask is not None,
            BLOCK=BLOCK_ROWS,
        )
    return actions.view(*batch, components)
