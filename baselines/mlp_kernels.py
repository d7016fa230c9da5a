"""The Triton kernels of :mod:`fused_mlp` (see there). A module of their own, imported at the
first use: ``triton.jit`` decides when a kernel is defined whether it runs compiled or, with
``TRITON_INTERPRET=1``, in Triton's interpreter on the CPU (as the tests run it).

The sizes passed at run time are not specialised on: by default Triton compiles a kernel again for
integer arguments that equal 1 or are multiples of 16, so the rollout's rows, the update's
minibatch, the actor's outputs and the critic's single one would each cost a compile of their own
(each paid by a fresh process before its first result)."""

import triton
import triton.language as tl

SIZES = ["n_rows", "n_in", "n_out"]


@triton.jit
def tanh(z):
    return 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)


@triton.jit
def hidden_layers(
    x_ptr,
    w1_ptr,
    b1_ptr,
    w2_ptr,
    b2_ptr,
    rows,
    row_ok,
    n_in,
    IN: tl.constexpr,
    H: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """A block's input and both hidden activations, ``(x, a1, a2)``; rows past the end read 0."""
    k = tl.arange(0, IN)
    h = tl.arange(0, H)
    x = tl.load(x_ptr + rows[:, None] * n_in + k[None, :], mask=row_ok[:, None] & (k[None, :] < n_in), other=0.0)
    w1t = tl.load(w1_ptr + h[None, :] * n_in + k[:, None], mask=k[:, None] < n_in, other=0.0)  # W1^T (IN, H)
    a1 = tanh(tl.dot(x, w1t, input_precision=PRECISION) + tl.load(b1_ptr + h)[None, :])
    w2t = tl.load(w2_ptr + h[None, :] * H + h[:, None])  # W2^T
    a2 = tanh(tl.dot(a1, w2t, input_precision=PRECISION) + tl.load(b2_ptr + h)[None, :])
    return x, a1, a2


@triton.jit(do_not_specialize=SIZES)
def forward(
    x_ptr,
    w1_ptr,
    b1_ptr,
    w2_ptr,
    b2_ptr,
    w3_ptr,
    b3_ptr,
    out_ptr,
    n_rows,
    n_in,
    n_out,
    IN: tl.constexpr,
    H: tl.constexpr,
    OUT: tl.constexpr,
    BLOCK: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row_ok = rows < n_rows
    _, _, a2 = hidden_layers(x_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, rows, row_ok, n_in, IN, H, PRECISION)
    h = tl.arange(0, H)
    o = tl.arange(0, OUT)
    w3t = tl.load(w3_ptr + o[None, :] * H + h[:, None], mask=o[None, :] < n_out, other=0.0)  # W3^T (H, OUT)
    out = tl.dot(a2, w3t, input_precision=PRECISION) + tl.load(b3_ptr + o, mask=o < n_out, other=0.0)[None, :]
    tl.store(out_ptr + rows[:, None] * n_out + o[None, :], out, mask=row_ok[:, None] & (o[None, :] < n_out))


@triton.jit(do_not_specialize=SIZES)
def backward(
    x_ptr,
    w1_ptr,
    b1_ptr,
    w2_ptr,
    b2_ptr,
    w3_ptr,
    dout_ptr,
    partial_ptr,
    n_rows,
    n_in,
    n_out,
    IN: tl.constexpr,
    H: tl.constexpr,
    OUT: tl.constexpr,
    BLOCK: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """This block's share of every weight's and bias's gradient, into its row of ``partial``:
    dW1 (H, n_in), db1 (H), dW2 (H, H), db2 (H), dW3 (n_out, H), db3 (n_out), flattened in that order."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row_ok = rows < n_rows
    x, a1, a2 = hidden_layers(x_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, rows, row_ok, n_in, IN, H, PRECISION)
    h = tl.arange(0, H)
    k = tl.arange(0, IN)
    o = tl.arange(0, OUT)
    o_ok = o < n_out
    dout = tl.load(dout_ptr + rows[:, None] * n_out + o[None, :], mask=row_ok[:, None] & o_ok[None, :], other=0.0)
    w3 = tl.load(w3_ptr + o[:, None] * H + h[None, :], mask=o_ok[:, None], other=0.0)  # (OUT, H)
    dz2 = tl.dot(dout, w3, input_precision=PRECISION) * (1.0 - a2 * a2)  # (BLOCK, H); 0 on rows past the end
    w2 = tl.load(w2_ptr + h[:, None] * H + h[None, :])
    dz1 = tl.dot(dz2, w2, input_precision=PRECISION) * (1.0 - a1 * a1)
    dw1 = tl.dot(tl.trans(dz1), x, input_precision=PRECISION)  # (H, IN)
    dw2 = tl.dot(tl.trans(dz2), a1, input_precision=PRECISION)  # (H, H)
    dw3 = tl.dot(tl.trans(dout), a2, input_precision=PRECISION)  # (OUT, H)
    base = partial_ptr + tl.program_id(0).to(tl.int64) * (H * n_in + H + H * H + H + n_out * H + n_out)
    tl.store(base + h[:, None] * n_in + k[None, :], dw1, mask=k[None, :] < n_in)
    base += H * n_in
    tl.store(base + h, tl.sum(dz1, axis=0))
    base += H
    tl.store(base + h[:, None] * H + h[None, :], dw2)
    base += H * H
    tl.store(base + h, tl.sum(dz2, axis=0))
    base += H
    tl.store(base + o[:, None] * H + h[None, :], dw3, mask=o_ok[:, None])
    base += n_out * H
    tl.store(base + o, tl.sum(dout, axis=0), mask=o_ok)
