"""The trainers' default MLP (``Linear, Tanh, Linear, Tanh, Linear``) as two Triton kernels.

Why: with small networks the PPO update is bound by memory traffic, not arithmetic. PyTorch runs
each layer, each ``tanh`` and each of their gradients as a kernel of its own that writes its
activations to GPU memory and reads them back (for CartPole at 4,096 envs x 128 steps, a minibatch
of 131,072 rows makes each 64-wide activation 33.5 MB). Here one kernel computes the whole forward
pass of a block of rows in registers and writes only the outputs; the backward kernel recomputes
that block's forward pass (cheaper than storing it) and adds only its share of the weight
gradients to its program's partial sums, which a sum over programs then reduces (each program
takes fixed blocks in a fixed order, and the sum's order is fixed: the result is deterministic).

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

import importlib.util

import torch
from torch import nn

# The shapes the kernels take: each matrix dimension is padded to a power of two of at least 16
# (tl.dot's smallest); the inputs are taken 32 at a time, the second layer's outputs 32 at a time
# (mlp_kernels.py). Wider hidden layers are left to cuBLAS: on an H200, with TagContinuous's
# [256, 256] policies (5 M rows), these kernels took 115 ms per forward and backward pass against
# cuBLAS's 38.7 ms; their tiles are too small for the tensor cores, whose work outgrows the
# memory traffic saved (benchmarks/train_throughput.py; docs/benchmarks/train-h200.md).
MAX_HIDDEN = 64
MAX_IN = 128
MAX_OUT = 64
BLOCK_ROWS = 64
CHUNK = 32
# fused_mlp = "auto" fuses only where an update's minibatches have at least this many rows. On an
# H200, at CartPole's 131,072 rows, the kernels' forward and backward pass took 151 us against
# PyTorch's layers' 700 us; at PureJaxRL's 128 rows both are bound by launches (which CUDA graphs
# already remove), and fusing made a fresh process's run to a return of 475 slower: Triton's
# import and kernel loading add about half a second, its first compile (with an empty cache) about
# three. Between those sizes the crossover was not measured; this is a round figure within it.
AUTO_MIN_ROWS = 16_384


def _padded(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def fusable(module: nn.Module) -> bool:
    """Whether ``module`` is a ``Sequential`` of ``Linear, Tanh, Linear, Tanh, Linear`` with equal
    hidden widths (16, 32 or 64), at most 128 inputs and 64 outputs, float32 weights."""
    if not isinstance(module, nn.Sequential) or len(module) != 5:
        return False
    first, tanh1, second, tanh2, last = module
    if not (all(isinstance(m, nn.Linear) for m in (first, second, last))
            and isinstance(tanh1, nn.Tanh) and isinstance(tanh2, nn.Tanh)):
        return False
    hidden = first.out_features
    return (second.in_features == second.out_features == last.in_features == hidden
            and 16 <= hidden <= MAX_HIDDEN and hidden & (hidden - 1) == 0
            and first.in_features <= MAX_IN and last.out_features <= MAX_OUT
            and all(m.bias is not None and m.weight.dtype == torch.float32 for m in (first, second, last)))


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


def available() -> bool:
    """Whether Triton can be imported (CUDA builds of PyTorch ship it; CPU builds do not)."""
    return importlib.util.find_spec("triton") is not None


def _kernels():
    """``(forward, backward)``: imported at the first call (module docstring)."""
    from gpu_marl_envs.baselines import mlp_kernels

    return mlp_kernels.forward, mlp_kernels.backward


def _precision() -> str:
    """TF32 products unless PyTorch's float32 matmul precision is "highest" (as the layers')."""
    return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def _launch_shapes(n_in: int, hidden: int, n_out: int) -> dict:
    """The kernels' compile-time shapes and launch options, the fastest of a sweep on an H200 at
    CartPole's shapes (131,072 rows): 64-row blocks, 32-wide chunks, 4 warps; one stage (the
    chunk loops are too short to gain from software pipelining)."""
    padded_in = _padded(n_in)
    return dict(IN=padded_in, KC=min(padded_in, CHUNK), H=hidden, NC=min(hidden, CHUNK), OUT=_padded(n_out),
                BLOCK=BLOCK_ROWS, PRECISION=_precision(), num_warps=4, num_stages=1)


def _programs(device: torch.device, blocks: int) -> int:
    """The backward kernel's programs: two per multiprocessor (the sweep's best; two in Triton's
    interpreter, so that the tests see programs that take several blocks)."""
    if device.type != "cuda":
        return min(blocks, 2)
    return min(blocks, 2 * torch.cuda.get_device_properties(device).multi_processor_count)


class _FusedMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, w3, b3):
        forward, _ = _kernels()
        x = x.contiguous()
        n_rows, n_in = x.shape
        hidden, n_out = w1.shape[0], w3.shape[0]
        ctx.shapes = shapes = _launch_shapes(n_in, hidden, n_out)
        out = torch.empty(n_rows, n_out, dtype=x.dtype, device=x.device)
        blocks = (n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS
        if blocks:
            forward[(blocks,)](x, w1, b1, w2, b2, w3, b3, out, n_rows, n_in, n_out, **shapes)
        ctx.save_for_backward(x, w1, b1, w2, b2, w3)
        return out

    @staticmethod
    def backward(ctx, dout):
        _, backward = _kernels()
        x, w1, b1, w2, b2, w3 = ctx.saved_tensors
        n_rows, n_in = x.shape
        hidden, n_out = w1.shape[0], w3.shape[0]
        sizes = [hidden * n_in, hidden, hidden * hidden, hidden, n_out * hidden, n_out]
        blocks = (n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS
        programs = _programs(x.device, blocks)
        partial = torch.zeros(max(programs, 1), sum(sizes), dtype=torch.float32, device=x.device)
        if blocks:
            backward[(programs,)](x, w1, b1, w2, b2, w3, dout.contiguous(), partial, n_rows, n_in, n_out,
                                  blocks, programs, **ctx.shapes)
        grads = partial.sum(0).split(sizes)
        shapes = [w1.shape, b1.shape, w2.shape, b2.shape, w3.shape, (n_out,)]
        return (None, *(g.view(shape) for g, shape in zip(grads, shapes)))
