"""The trainers' default MLP (``Linear, Tanh, Linear, Tanh, Linear``) as two Triton kernels.

Why: with small networks the PPO update is bound by memory traffic, not arithmetic. PyTorch runs
each layer, each ``tanh`` and each of their gradients as a kernel of its own that writes its
activations to GPU memory and reads them back (for CartPole at 4,096 envs x 128 steps, a minibatch
of 131,072 rows makes each 64-wide activation 33.5 MB). Here one kernel computes the whole forward
pass of a block of rows in registers and writes only the outputs; the backward kernel recomputes
that block's forward pass (cheaper than storing it) and writes only its share of the weight
gradients, which a sum over blocks then reduces (in a fixed order: the result is deterministic).

:func:`mlp_forward` is differentiable with respect to the weights and biases (not the input: the
trainers' observations need no gradient). The matrix products run in TF32 unless PyTorch's
float32 matmul precision is ``"highest"`` (the trainers set it from their ``tf32`` option), like
the unfused layers. ``tanh`` is computed as ``1 - 2 / (exp(2x) + 1)`` (Triton has no tanh of its
own on every backend), within about 1e-7 of ``torch.tanh``.

Triton is imported at the first call: CUDA builds of PyTorch ship it. With
``TRITON_INTERPRET=1`` the kernels run on the CPU through Triton's interpreter, which is how the
tests check them against PyTorch's layers on machines without a GPU.
"""

from __future__ import annotations

import functools
import importlib.util

import torch
from torch import nn

# The shapes the kernels take: each matrix dimension is padded to a power of two of at least 16
# (tl.dot's smallest), and a block's activations must fit in its registers. Wider hidden layers
# are left to cuBLAS: on an H200, with TagContinuous's [256, 256] policies (5 M rows), a version of
# these kernels that took the layers in 32-wide chunks needed 115 ms per forward and backward pass
# against cuBLAS's 38.7 ms (its tiles are too small for the tensor cores, whose work then outweighs
# the memory traffic saved).
MAX_HIDDEN = 64
MAX_IO = 64
BLOCK_ROWS = 64
# fused_mlp = "auto" fuses only where an update's minibatches have at least this many rows. On an
# H200, PPO on CartPole at 4,096 envs x 128 steps (131,072-row minibatches) ran at 35-38 M env
# steps/s with the kernels against 21.7 M with PyTorch's layers; at PureJaxRL's 4 envs (128-row
# minibatches) the passes are bound by launches (which CUDA graphs already remove), and the kernels
# made a fresh process's run to a return of 475 slower: about 1 s more with Triton's cache filled
# (its import, kernel loading), about 4 s more with it empty (the first compile). Between those
# sizes the crossover was not measured; this is a round figure within it.
AUTO_MIN_ROWS = 16_384


def _padded(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def fusable(module: nn.Module) -> bool:
    """Whether ``module`` is a ``Sequential`` of ``Linear, Tanh, Linear, Tanh, Linear`` with equal
    hidden widths (16, 32 or 64), at most 64 inputs and outputs, float32 weights."""
    if not isinstance(module, nn.Sequential) or len(module) != 5:
        return False
    first, tanh1, second, tanh2, last = module
    if not (
        all(isinstance(m, nn.Linear) for m in (first, second, last))
        and isinstance(tanh1, nn.Tanh)
        and isinstance(tanh2, nn.Tanh)
    ):
        return False
    hidden = first.out_features
    return (
        second.in_features == second.out_features == last.in_features == hidden
        and 16 <= hidden <= MAX_HIDDEN
        and hidden & (hidden - 1) == 0
        and first.in_features <= MAX_IO
        and last.out_features <= MAX_IO
        and all(m.bias is not None and m.weight.dtype == torch.float32 for m in (first, second, last))
    )


def widths(module: nn.Sequential) -> str:
    """``"4 -> 64 -> 64 -> 2"``: the widths of a ``Sequential``'s linear layers, for messages."""
    linear = [m for m in module if isinstance(m, nn.Linear)]
    return " -> ".join(str(n) for n in [linear[0].in_features, *(m.out_features for m in linear)]) if linear else "?"


def mlp_forward(module: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` for a :func:`fusable` ``module`` and a float32 ``x`` of shape ``(..., in)``."""
    first, _, second, _, last = module
    rows = x.reshape(-1, x.shape[-1])
    out = _FusedMLP.apply(rows, first.weight, first.bias, second.weight, second.bias, last.weight, last.bias)
    return out.reshape(*x.shape[:-1], out.shape[-1])


@functools.cache
def available() -> bool:
    """Whether Triton can be imported (CUDA builds of PyTorch ship it; CPU builds do not). Asked at
    every pass of the policies: the answer is kept (the search of ``sys.path`` is not free)."""
    return importlib.util.find_spec("triton") is not None


def _kernels():
    """``(forward, backward)``: imported at the first call (module docstring)."""
    from gpu_marl_envs.baselines import mlp_kernels

    return mlp_kernels.forward, mlp_kernels.backward


def _precision() -> str:
    """TF32 products unless PyTorch's float32 matmul precision is "highest" (as the layers')."""
    return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"


class _FusedMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, w3, b3):
        forward, _ = _kernels()
        x = x.contiguous()
        n_rows, n_in = x.shape
        hidden, n_out = w1.shape[0], w3.shape[0]
        shapes = dict(IN=_padded(n_in), H=hidden, OUT=_padded(n_out), BLOCK=BLOCK_ROWS, PRECISION=_precision())
        out = torch.empty(n_rows, n_out, dtype=x.dtype, device=x.device)
        blocks = (n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS
        if blocks:
            forward[(blocks,)](x, w1, b1, w2, b2, w3, b3, out, n_rows, n_in, n_out, **shapes)
        ctx.save_for_backward(x, w1, b1, w2, b2, w3)
        ctx.shapes = shapes
        return out

    @staticmethod
    def backward(ctx, dout):
        _, backward = _kernels()
        x, w1, b1, w2, b2, w3 = ctx.saved_tensors
        n_rows, n_in = x.shape
        hidden, n_out = w1.shape[0], w3.shape[0]
        sizes = [hidden * n_in, hidden, hidden * hidden, hidden, n_out * hidden, n_out]
        blocks = (n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS
        partial = torch.empty(blocks, sum(sizes), dtype=torch.float32, device=x.device)
        if blocks:
            backward[(blocks,)](x, w1, b1, w2, b2, w3, dout.contiguous(), partial, n_rows, n_in, n_out, **ctx.shapes)
        grads = partial.sum(0).split(sizes)
        shapes = [w1.shape, b1.shape, w2.shape, b2.shape, w3.shape, (n_out,)]
        return (None, *(g.view(shape) for g, shape in zip(grads, shapes)))
