"""Would Tag A2C's policies gain from their whole forward pass as one Triton kernel (issue 44)? A
block of rows goes from the observations to the outputs in one kernel (:func:`mlp3_forward`), its
activations kept on the chip; a pass with gradients also stores the two activations for a backward
that is ``wide_mlp``'s (cuBLAS products, the tanh backward kernels). The arithmetic is the layers':
each product accumulated in float32 with its bias, rounded to the dtype, its tanh rounded again.

At WarpDrive's Tag A2C shapes (71 observations, [256, 256], 42 logits or a value; bfloat16 autocast),
µs per call, CUDA events over ``--repeats`` calls after a warm-up (Triton's compiles done):

- a rollout's pass without gradients (the actor's logits) over a step's runners (100,000 rows) and
  taggers (10,000): the layers (``wide_mlp.run_mlp`` on the aligned copy, the copy included, as
  the rollout ran them) against the kernel for each of :data:`SHAPES` (rows a program, the second
  layer's columns taken at once, warps);
- an update's pass with gradients, forward and backward, over 5,000,000 rows (a whole rollout's
  runners): the layers against the kernel's default shape.

Each kernel's outputs are checked against the layers' (max absolute difference).

    python benchmarks/experiments/wide_forward_shapes.py --out wide-forward.md --json wide-forward.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from gpu_marl_envs.baselines import wide_mlp
from gpu_marl_envs.baselines.mlp_kernels import tanh
from gpu_marl_envs.baselines.models import mlp
from torch.nn import functional as F

# The suite's modules (report) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, cuda_us, gpu_hardware, save  # noqa: E402

SHAPES = [(64, 64, 4), (64, 128, 4), (64, 64, 8), (128, 64, 8), (128, 128, 8), (32, 64, 4), (64, 256, 8)]
"""(BLOCK_ROWS, PART, WARPS) tried."""

BLOCK_ROWS = 64
"""Rows a program takes."""
PART = 64
"""The second layer's outputs a program takes at once (its weights' columns held together)."""
WARPS = 4


def _padded(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def forward(network: torch.nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``network(x)`` (``Linear, Tanh, Linear, Tanh, Linear``, hidden layers of one power-of-two
    width up to 256) in :func:`wide_mlp.compute_dtype`'s dtype, by :func:`mlp3_forward`;
    ``x`` (``(..., features)``) may be wider than the first layer's inputs (the padded copy of
    :func:`wide_mlp.aligned_input`): its extra features are not read. Differentiable with respect to
    the parameters (not ``x``: the trainers' observations need no gradient)."""
    first, _, second, _, last = network
    rows = x.reshape(-1, x.shape[-1])
    params = (first.weight, first.bias, second.weight, second.bias, last.weight, last.bias)
    out = _WideMLP.apply(rows, wide_mlp.compute_dtype(x), first.in_features, *params)
    return out.view(*x.shape[:-1], last.out_features)


def _launch(x, dtype, n_in, params, save: bool):
    """The kernel over the rows of ``x``: ``(out, a1, a2)`` (the activations ``None`` unless
    ``save``)."""
    w1, _, _, _, w3, _ = params
    n_rows, hidden, n_out = x.shape[0], w1.shape[0], w3.shape[0]
    out = torch.empty(n_rows, n_out, dtype=dtype, device=x.device)
    a1 = torch.empty(n_rows, hidden, dtype=dtype, device=x.device) if save else out
    a2 = torch.empty_like(a1) if save else out
    blocks = (n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS
    if blocks:
        mlp3_forward[(blocks,)](
            x,
            x.stride(0),
            *params[:6],
            out,
            a1,
            a2,
            n_rows,
            n_in,
            n_out,
            IN=_padded(n_in),
            H=hidden,
            PART=min(PART, hidden),
            OUT=_padded(n_out),
            BLOCK=BLOCK_ROWS,
            SAVE=save,
            num_warps=WARPS,
        )
    return out, (a1 if save else None), (a2 if save else None)


class _WideMLP(torch.autograd.Function):
    """The fused forward pass; the backward as :mod:`wide_mlp`'s layers take it (cuBLAS for the
    products, :func:`wide_mlp.activation_backward_and_bias` for each tanh, the value head's kernel for a
    single output), from the stored activations."""

    @staticmethod
    def forward(ctx, x, dtype, n_in, w1, b1, w2, b2, w3, b3):
        # Grad mode is off inside a Function's forward: whether the caller's pass takes gradients
        # is in ctx.
        save = any(ctx.needs_input_grad[3:])
        out, a1, a2 = _launch(x, dtype, n_in, (w1, b1, w2, b2, w3, b3), save)
        if save:
            ctx.save_for_backward(x, a1, a2, w1, w2, w3)
            ctx.n_in = n_in
        return out

    @staticmethod
    def backward(ctx, dout):
        x, a1, a2, w1, w2, w3 = ctx.saved_tensors
        dtype, n_in, n_out = a1.dtype, ctx.n_in, w3.shape[0]
        dout = dout.to(dtype).contiguous()
        if n_out == 1:
            dz2, db2, dw3, db3 = _value_head_backward(dout, a2, w3.to(dtype))
        else:
            # The products' sizes padded as wide_mlp.linear pads them (cuBLAS's aligned kernels).
            pad = -n_out % wide_mlp.ALIGN
            dout_p, w3_p = F.pad(dout, (0, pad)), F.pad(w3.to(dtype), (0, 0, 0, pad))
            dw3, db3 = (dout_p.T @ a2)[:n_out], dout.float().sum(0)
            dz2, db2 = wide_mlp.activation_backward_and_bias(dout_p @ w3_p, a2)
        dw2 = dz2.T @ a1
        dz1, db1 = wide_mlp.activation_backward_and_bias(dz2 @ w2.to(dtype), a1)
        dw1 = (dz1.T @ _aligned(x, n_in, dtype))[:, :n_in]
        # The layers' path rounds each weight gradient to the dtype (cuBLAS writes it so) before
        # autograd casts it to the parameter's: the same here.
        grads = (dw1, db1.to(dtype), dw2, db2.to(dtype), dw3, db3.to(dtype))
        return (None, None, None, *(g.to(p.dtype) for g, p in zip(grads, (w1, w1, w2, w2, w3, w3))))


def _aligned(x: torch.Tensor, n_in: int, dtype: torch.dtype) -> torch.Tensor:
    """``x``'s first ``n_in`` features in ``dtype``, zero-padded to a multiple of
    :data:`wide_mlp.ALIGN` (``x`` itself where it is so already)."""
    width = n_in + -n_in % wide_mlp.ALIGN
    if x.dtype == dtype and x.shape[1] == width:
        return x
    padded = x.new_zeros(x.shape[0], width, dtype=dtype)
    padded[:, :n_in] = x[:, :n_in]
    return padded


def _value_head_backward(dv, h, head_weight):
    """``(dz2, db2, dW3, db3)`` of a single-output last layer from ``dv`` (``(rows, 1)``), in one
    kernel (:func:`policy_kernels.tanh_value_head_backward`, as :mod:`wide_mlp`'s value head)."""
    from gpu_marl_envs.baselines import policy_kernels

    n_rows, width = h.shape
    block = wide_mlp.rows_per_block(h)
    blocks = (n_rows + block - 1) // block
    dz = torch.empty_like(h)
    partial = torch.empty(blocks, 2 * width + 1, dtype=torch.float32, device=h.device)
    if blocks:
        policy_kernels.tanh_value_head_backward[(blocks,)](
            dv.contiguous().view(-1), h, head_weight, dz, partial, n_rows, N=width, BLOCK=block, num_warps=8
        )
    sums = partial.sum(0)
    return dz, sums[:width], sums[width : 2 * width].view(1, width), sums[2 * width :]


@triton.jit
def _rounded(z, DTYPE: tl.constexpr):
    """``z`` (float32) rounded to ``DTYPE`` and back: what a layer that writes its output in
    ``DTYPE`` hands the next operation."""
    return z.to(DTYPE).to(tl.float32)


@triton.jit(do_not_specialize=["n_rows", "n_in", "n_out", "x_stride"])
def mlp3_forward(
    x_ptr,
    x_stride,
    w1_ptr,
    b1_ptr,
    w2_ptr,
    b2_ptr,
    w3_ptr,
    b3_ptr,
    out_ptr,
    a1_ptr,
    a2_ptr,
    n_rows,
    n_in,
    n_out,
    IN: tl.constexpr,
    H: tl.constexpr,
    PART: tl.constexpr,
    OUT: tl.constexpr,
    BLOCK: tl.constexpr,
    SAVE: tl.constexpr,
):
    """``out = W3 tanh(W2 tanh(W1 x + b1) + b2) + b3`` for a block of rows of ``x`` (any float dtype,
    rows ``x_stride`` apart, ``n_in`` features), computed in ``out``'s dtype as PyTorch's layers
    compute it under autocast: each product accumulated in float32 with its bias, rounded to the
    dtype, then the tanh rounded again. The weights (``(out, in)``, any float dtype) are rounded to
    the dtype as they are read. The second layer's outputs are taken ``PART`` at a time, each part's
    share of the last product added as it comes, so that a block holds one part of the widest
    layer's weights at once. ``SAVE``: the activations are also stored (``a1``, ``a2``: ``(rows,
    H)``), for a backward pass."""
    DTYPE = out_ptr.dtype.element_ty
    rows = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    row_ok = rows < n_rows
    k = tl.arange(0, IN)
    h = tl.arange(0, H)
    o = tl.arange(0, OUT)
    x = tl.load(x_ptr + rows[:, None] * x_stride + k[None, :], mask=row_ok[:, None] & (k[None, :] < n_in), other=0.0)
    w1t = tl.load(w1_ptr + h[None, :] * n_in + k[:, None], mask=k[:, None] < n_in, other=0.0)  # W1^T (IN, H)
    z1 = tl.dot(x.to(DTYPE), w1t.to(DTYPE)) + tl.load(b1_ptr + h).to(DTYPE).to(tl.float32)[None, :]
    a1 = tanh(_rounded(z1, DTYPE)).to(DTYPE)
    if SAVE:
        tl.store(a1_ptr + rows[:, None] * H + h[None, :], a1, mask=row_ok[:, None])
    acc = tl.zeros((BLOCK, OUT), dtype=tl.float32)
    for part in tl.static_range(H // PART):
        p = part * PART + tl.arange(0, PART)
        w2t = tl.load(w2_ptr + p[None, :] * H + h[:, None])  # W2^T's columns p (H, PART)
        z2 = tl.dot(a1, w2t.to(DTYPE)) + tl.load(b2_ptr + p).to(DTYPE).to(tl.float32)[None, :]
        a2 = tanh(_rounded(z2, DTYPE)).to(DTYPE)
        if SAVE:
            tl.store(a2_ptr + rows[:, None] * H + p[None, :], a2, mask=row_ok[:, None])
        w3t = tl.load(w3_ptr + o[None, :] * H + p[:, None], mask=o[None, :] < n_out, other=0.0)  # (PART, OUT)
        acc += tl.dot(a2, w3t.to(DTYPE))
    out = acc + tl.load(b3_ptr + o, mask=o < n_out, other=0.0).to(DTYPE).to(tl.float32)[None, :]
    tl.store(out_ptr + rows[:, None] * n_out + o[None, :], out.to(DTYPE), mask=row_ok[:, None] & (o[None, :] < n_out))


def layers(network, x):
    return wide_mlp.run_mlp(network, wide_mlp.aligned_input(x, x.shape[-1]))


def with_shape(shape):
    global BLOCK_ROWS, PART, WARPS
    BLOCK_ROWS, PART, WARPS = shape


def measure(outputs: int, repeats: int, record) -> None:
    """The rows of one network: the actor (``outputs`` logits) or the critic (a value)."""
    default = (BLOCK_ROWS, PART, WARPS)
    network = mlp(71, (256, 256), outputs, last_gain=0.01).cuda()
    for rows in (100_000, 10_000):
        x = torch.randn(rows, 71, device="cuda")
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
            reference = layers(network, x).float()
            record("rollout", rows, outputs, "layers", cuda_us(lambda x=x: layers(network, x), repeats), 0.0)
            for shape in SHAPES:
                with_shape(shape)
                try:
                    diff = (forward(network, x).float() - reference).abs().max().item()
                    us = cuda_us(lambda x=x: forward(network, x), repeats)
                except Exception as error:  # a shape Triton cannot fit: reported, not fatal
                    print(f"{shape}: {type(error).__name__}: {str(error)[:200]}", flush=True)
                    continue
                record("rollout", rows, outputs, f"kernel {shape}", us, diff)
    with_shape(default)
    rows = 5_000_000
    x = torch.randn(rows, 71, device="cuda")
    upstream = torch.randn(rows, outputs, device="cuda", dtype=torch.bfloat16)
    parameters = list(network.parameters())

    def update(fn):
        with torch.autocast("cuda", torch.bfloat16):
            out = fn(network, x)
        return torch.autograd.grad(out, parameters, upstream)

    want, got = update(layers), update(forward)
    diff = max(((g - w).norm() / w.norm()).item() for g, w in zip(got, want))
    record("update", rows, outputs, "layers", cuda_us(lambda: update(layers), 10), 0.0)
    way = f"kernel {default} (diff: the gradients' relative norm)"
    record("update", rows, outputs, way, cuda_us(lambda: update(forward), 10), diff)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=50)
    add_output_options(parser)
    args = parser.parse_args()
    hardware = gpu_hardware()
    torch.manual_seed(0)
    results = []
    lines = [f"Hardware: {hardware}.", "", "| pass | rows | outputs | way | µs | max abs diff |"]
    lines.append("|---|---:|---:|---|---:|---:|")

    def record(kind, rows, outputs, way, us, diff):
        results.append({"pass": kind, "rows": rows, "outputs": outputs, "way": way, "us": us, "max_abs_diff": diff})
        lines.append(f"| {kind} | {rows:,} | {outputs} | {way} | {us:.1f} | {diff:.1e} |")
        print(lines[-1], flush=True)

    for outputs in (42, 1):
        measure(outputs, args.repeats, record)
        torch.cuda.empty_cache()
    save(args, "\n".join(lines), {"hardware": hardware, "results": results})


if __name__ == "__main__":
    main()
