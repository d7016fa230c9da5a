"""The Triton kernels of :mod:`fused_mlp` (see there). A module of their own, imported at the
first use: ``triton.jit`` decides when a kernel is defined whether it runs compiled or, with
``TRITON_INTERPRET=1``, in Triton's interpreter on the CPU (as the tests run it).

Each program works on ``BLOCK`` rows at a time. The layers are taken in chunks: the first layer's
inputs ``KC`` columns at a time (so inputs up to 128 wide fit), the second layer's outputs (and
with them the last layer's inputs) ``NC`` at a time, which keeps fewer values live in registers (on
an H200, 32-wide chunks of 64-wide layers ran faster than whole ones). The backward kernel is
persistent: each program takes every ``programs``-th block of rows and adds its blocks' weight
gradients into a row of its own in ``partial`` (read, add, write; a barrier between blocks makes
one block's writes visible to the next's reads in every thread). So ``partial`` has a row per
program rather than per block: for CartPole's 131,072-row minibatches, 264 rows of 18 KB instead
of 2,048, written and then summed.

The sizes passed at run time are not specialised on: by default Triton compiles a kernel again for
integer arguments that equal 1 or are multiples of 16, so the rollout's rows, the update's
minibatch, the actor's outputs and the critic's single one would each cost a compile of their own
(each paid by a fresh process before its first result)."""

import triton
import triton.language as tl

SIZES = ["n_rows", "n_in", "n_out", "blocks", "programs"]


@triton.jit
def tanh(z):
    return 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)


@triton.jit
def first_layer(x_ptr, w1_ptr, b1_ptr, rows, row_ok, n_in,
                IN: tl.constexpr, KC: tl.constexpr, H: tl.constexpr, BLOCK: tl.constexpr,
                PRECISION: tl.constexpr):
    """``tanh(x @ W1^T + b1)`` for a block of rows, ``(BLOCK, H)``; rows past the end read 0."""
    h = tl.arange(0, H)
    k = tl.arange(0, KC)
    z = tl.zeros((BLOCK, H), dtype=tl.float32)
    for k0 in range(0, IN, KC):
        cols = k0 + k
        x = tl.load(x_ptr + rows[:, None] * n_in + cols[None, :], mask=row_ok[:, None] & (cols[None, :] < n_in),
                    other=0.0)
        w1t = tl.load(w1_ptr + h[None, :] * n_in + cols[:, None], mask=cols[:, None] < n_in, other=0.0)  # (KC, H)
        z += tl.dot(x, w1t, input_precision=PRECISION)
    return tanh(z + tl.load(b1_ptr + h)[None, :])


@triton.jit
def second_layer_chunk(a1, w2_ptr, b2_ptr, n0, H: tl.constexpr, NC: tl.constexpr, PRECISION: tl.constexpr):
    """Columns ``n0 .. n0 + NC`` of ``tanh(a1 @ W2^T + b2)``, ``(BLOCK, NC)``."""
    h = tl.arange(0, H)
    j = n0 + tl.arange(0, NC)
    w2t = tl.load(w2_ptr + j[None, :] * H + h[:, None])  # (H, NC)
    return tanh(tl.dot(a1, w2t, input_precision=PRECISION) + tl.load(b2_ptr + j)[None, :])


@triton.jit(do_not_specialize=SIZES)
def forward(x_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, w3_ptr, b3_ptr, out_ptr, n_rows, n_in, n_out,
            IN: tl.constexpr, KC: tl.constexpr, H: tl.constexpr, NC: tl.constexpr, OUT: tl.constexpr,
            BLOCK: tl.constexpr, PRECISION: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    row_ok = rows < n_rows
    a1 = first_layer(x_ptr, w1_ptr, b1_ptr, rows, row_ok, n_in, IN, KC, H, BLOCK, PRECISION)
    o = tl.arange(0, OUT)
    o_ok = o < n_out
    out = tl.zeros((BLOCK, OUT), dtype=tl.float32) + tl.load(b3_ptr + o, mask=o_ok, other=0.0)[None, :]
    for n0 in range(0, H, NC):
        a2 = second_layer_chunk(a1, w2_ptr, b2_ptr, n0, H, NC, PRECISION)
        j = n0 + tl.arange(0, NC)
        w3t = tl.load(w3_ptr + o[None, :] * H + j[:, None], mask=o_ok[None, :], other=0.0)  # (NC, OUT)
        out += tl.dot(a2, w3t, input_precision=PRECISION)
    tl.store(out_ptr + rows[:, None] * n_out + o[None, :], out, mask=row_ok[:, None] & o_ok[None, :])


@triton.jit
def accumulate(ptr, value, mask):
    tl.store(ptr, tl.load(ptr, mask=mask, other=0.0) + value, mask=mask)


@triton.jit(do_not_specialize=SIZES)
def backward(x_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, w3_ptr, dout_ptr, partial_ptr, n_rows, n_in, n_out,
             blocks, programs,
             IN: tl.constexpr, KC: tl.constexpr, H: tl.constexpr, NC: tl.constexpr, OUT: tl.constexpr,
             BLOCK: tl.constexpr, PRECISION: tl.constexpr):
    """Adds this program's blocks' shares of every weight's and bias's gradient to its row of
    ``partial`` (zeroed by the caller): dW1 (H, n_in), db1 (H), dW2 (H, H), db2 (H), dW3 (n_out, H),
    db3 (n_out), flattened in that order."""
    h = tl.arange(0, H)
    k = tl.arange(0, KC)
    o = tl.arange(0, OUT)
    o_ok = o < n_out
    dw1_ptr = partial_ptr + tl.program_id(0).to(tl.int64) * (H * n_in + H + H * H + H + n_out * H + n_out)
    db1_ptr = dw1_ptr + H * n_in
    dw2_ptr = db1_ptr + H
    db2_ptr = dw2_ptr + H * H
    dw3_ptr = db2_ptr + H
    db3_ptr = dw3_ptr + n_out * H
    for block in range(tl.program_id(0), blocks, programs):
        rows = block * BLOCK + tl.arange(0, BLOCK).to(tl.int64)  # block * BLOCK < n_rows + BLOCK fits in 32 bits
        row_ok = rows < n_rows
        a1 = first_layer(x_ptr, w1_ptr, b1_ptr, rows, row_ok, n_in, IN, KC, H, BLOCK, PRECISION)
        dout = tl.load(dout_ptr + rows[:, None] * n_out + o[None, :], mask=row_ok[:, None] & o_ok[None, :], other=0.0)
        dz1 = tl.zeros((BLOCK, H), dtype=tl.float32)
        for n0 in range(0, H, NC):
            a2 = second_layer_chunk(a1, w2_ptr, b2_ptr, n0, H, NC, PRECISION)
            j = n0 + tl.arange(0, NC)
            w3 = tl.load(w3_ptr + o[:, None] * H + j[None, :], mask=o_ok[:, None], other=0.0)  # (OUT, NC)
            dz2 = tl.dot(dout, w3, input_precision=PRECISION) * (1.0 - a2 * a2)  # 0 on rows past the end
            w2 = tl.load(w2_ptr + j[:, None] * H + h[None, :])  # rows n0.. of W2, (NC, H)
            dz1 += tl.dot(dz2, w2, input_precision=PRECISION)
            accumulate(dw2_ptr + j[:, None] * H + h[None, :], tl.dot(tl.trans(dz2), a1, input_precision=PRECISION),
                       j[:, None] < H)
            accumulate(db2_ptr + j, tl.sum(dz2, axis=0), j < H)
            accumulate(dw3_ptr + o[:, None] * H + j[None, :], tl.dot(tl.trans(dout), a2, input_precision=PRECISION),
                       o_ok[:, None])
        dz1 = dz1 * (1.0 - a1 * a1)
        accumulate(db1_ptr + h, tl.sum(dz1, axis=0), h < H)
        for k0 in range(0, IN, KC):
            cols = k0 + k
            x = tl.load(x_ptr + rows[:, None] * n_in + cols[None, :], mask=row_ok[:, None] & (cols[None, :] < n_in),
                        other=0.0)
            accumulate(dw1_ptr + h[:, None] * n_in + cols[None, :], tl.dot(tl.trans(dz1), x, input_precision=PRECISION),
                       cols[None, :] < n_in)
        accumulate(db3_ptr + o, tl.sum(dout, axis=0), o_ok)
        tl.debug_barrier()  # this block's additions are seen by the next block's reads in every thread
