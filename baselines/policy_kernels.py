"""The Triton kernels of :mod:`wide_mlp` (the backwards of tanh layers) and :mod:`sampling` (Gumbel-max
draws). A module of their own, imported at the first use, for the reason :mod:`mlp_kernels` gives
(``TRITON_INTERPRET=1`` must be set before ``triton.jit`` runs); the row counts are not specialised
on, so a new batch size costs no compile."""

import triton
import triton.language as tl

ROWS = ["n_rows"]


@triton.jit(do_not_specialize=ROWS)
def tanh_backward_and_bias(dy_ptr, y_ptr, dz_ptr, partial_ptr, n_rows, N: tl.constexpr, BLOCK: tl.constexpr):
    """``dz = dy * (1 - y^2)`` for a block of rows of width ``N`` (stored in dz's dtype, computed in
    float32), and the block's column sums of ``dz`` (the bias gradient's share) into its row of
    ``partial``, so that ``dz`` is read once instead of again by a separate reduction."""
    block = tl.program_id(0)
    rows = (block * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    columns = tl.arange(0, N)
    ok = rows[:, None] < n_rows
    offsets = rows[:, None] * N + columns[None, :]
    dy = tl.load(dy_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    dz = dy * (1.0 - y * y)
    tl.store(dz_ptr + offsets, dz.to(dz_ptr.dtype.element_ty), mask=ok)
    tl.store(partial_ptr + block * N + columns, tl.sum(dz, axis=0))


@triton.jit
def _gumbel_scores(
    logits_ptr,
    mask_ptr,
    rows,
    rows_ok,
    row_stride,
    c,
    q,
    k: tl.constexpr,
    u,
    COMPONENTS: tl.constexpr,
    N: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Logits plus Gumbel noise of entries ``4 q + k`` of component ``c`` (-inf where masked or
    past the end), from the uniform draws ``u``."""
    j = 4 * q + k
    ok = rows_ok[:, None] & (j[None, :] < N)
    logits = tl.load(logits_ptr + rows[:, None] * row_stride + c * N + j[None, :], mask=ok, other=0.0)
    if MASKED:
        allowed = tl.load(mask_ptr + rows[:, None] * (COMPONENTS * N) + c * N + j[None, :], mask=ok, other=0)
        ok = ok & (allowed != 0)
    # A uniform draw of 0 would give noise -inf: keep it finite (see models.ActorCritic.sample).
    u = tl.maximum(u, 1e-30)
    return tl.where(ok, logits.to(tl.float32) - tl.log(-tl.log(u)), float("-inf"))


@triton.jit
def _keep_best(best, action, scores, k: tl.constexpr):
    """The running best score and entry of each row, given the scores of entries ``4 q + k``."""
    top = tl.max(scores, axis=1)
    action = tl.where(top > best, 4 * tl.argmax(scores, axis=1) + k, action)
    return tl.maximum(best, top), action


@triton.jit(do_not_specialize=["n_rows", "row_stride"])
def gumbel_argmax(
    logits_ptr,
    mask_ptr,
    seed_ptr,
    actions_ptr,
    n_rows,
    row_stride,
    COMPONENTS: tl.constexpr,
    N: tl.constexpr,
    QUARTER: tl.constexpr,
    MASKED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """For each row and component: ``argmax(logits + Gumbel noise)`` over the component's ``N``
    entries (a draw from the softmax of the logits), masked entries excluded. Row ``r``'s
    component ``c`` reads ``logits[r * row_stride + c * N + j]`` and ``mask[r * COMPONENTS * N +
    c * N + j]``. The noise is Philox's from ``seed`` (a device scalar, so a CUDA graph's replays
    read a fresh one), four numbers per Philox draw (its cost bounds the kernel): draw ``q`` of a
    row's component serves entries ``4 q`` to ``4 q + 3`` (``QUARTER`` draws cover ``N``), each
    quarter's best is found, then the best of the four. Counters are 32-bit, as Philox then runs in
    32-bit arithmetic (the caller checks that they do not overflow)."""
    rows32 = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rows = rows32.to(tl.int64)
    rows_ok = rows < n_rows
    q = tl.arange(0, QUARTER)
    seed = tl.load(seed_ptr)
    for c in tl.static_range(COMPONENTS):
        u0, u1, u2, u3 = tl.rand4x(seed, (rows32[:, None] * COMPONENTS + c) * QUARTER + q[None, :])
        s0 = _gumbel_scores(logits_ptr, mask_ptr, rows, rows_ok, row_stride, c, q, 0, u0, COMPONENTS, N, MASKED)
        s1 = _gumbel_scores(logits_ptr, mask_ptr, rows, rows_ok, row_stride, c, q, 1, u1, COMPONENTS, N, MASKED)
        s2 = _gumbel_scores(logits_ptr, mask_ptr, rows, rows_ok, row_stride, c, q, 2, u2, COMPONENTS, N, MASKED)
        s3 = _gumbel_scores(logits_ptr, mask_ptr, rows, rows_ok, row_stride, c, q, 3, u3, COMPONENTS, N, MASKED)
        best, action = tl.max(s0, axis=1), 4 * tl.argmax(s0, axis=1)
        best, action = _keep_best(best, action, s1, 1)
        best, action = _keep_best(best, action, s2, 2)
        best, action = _keep_best(best, action, s3, 3)
        tl.store(actions_ptr + rows * COMPONENTS + c, action.to(tl.int64), mask=rows_ok)


@triton.jit(do_not_specialize=ROWS)
def tanh_value_head_backward(dv_ptr, h_ptr, w_ptr, dz_ptr, partial_ptr, n_rows, N: tl.constexpr, BLOCK: tl.constexpr):
    """The backward of ``v = tanh(z) @ w + c`` (a critic's last hidden layer and its single output)
    for a block of rows, from ``dv`` (one per row) and ``h = tanh(z)``: ``dz = dv w (1 - h^2)``
    (stored in dz's dtype) without writing ``dv w`` to memory first, and the block's shares of the
    bias gradient (column sums of ``dz``), of ``w``'s (column sums of ``dv h``) and of ``c``'s (the
    sum of ``dv``), side by side in its row of ``partial`` (``2 N + 1`` numbers)."""
    block = tl.program_id(0)
    rows = (block * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    columns = tl.arange(0, N)
    row_ok = rows < n_rows
    ok = row_ok[:, None]
    offsets = rows[:, None] * N + columns[None, :]
    dv = tl.load(dv_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    h = tl.load(h_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + columns).to(tl.float32)
    dz = dv[:, None] * w[None, :] * (1.0 - h * h)
    tl.store(dz_ptr + offsets, dz.to(dz_ptr.dtype.element_ty), mask=ok)
    base = partial_ptr + block * (2 * N + 1)
    tl.store(base + columns, tl.sum(dz, axis=0))
    tl.store(base + N + columns, tl.sum(dv[:, None] * h, axis=0))
    tl.store(base + 2 * N, tl.sum(dv, axis=0))
