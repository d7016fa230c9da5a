"""The Triton kernels of :mod:`wide_mlp` (the backwards of tanh and ReLU layers), :mod:`sampling`
(Gumbel-max draws) and the fused losses (:mod:`fused_ppo_loss`, :mod:`fused_a2c_loss`). A module of
their own, imported at the first use, for the reason :mod:`mlp_kernels` gives (``TRITON_INTERPRET=1``
must be set before ``triton.jit`` runs); the row counts are not specialised on, so a new batch size
costs no compile."""

import triton
import triton.language as tl

ROWS = ["n_rows"]


@triton.jit(do_not_specialize=ROWS)
def activation_backward_and_bias(
    dy_ptr, y_ptr, dz_ptr, partial_ptr, n_rows, N: tl.constexpr, BLOCK: tl.constexpr, RELU: tl.constexpr
):
    """``dz = dy * (1 - y^2)`` (``y = tanh(z)``), or ``dy`` where ``y > 0`` and 0 elsewhere
    (``RELU``: ``y = relu(z)``), for a block of rows of width ``N`` (stored in dz's dtype, computed
    in float32), and the block's column sums of ``dz`` (the bias gradient's share) into its row of
    ``partial``, so that ``dz`` is read once instead of again by a separate reduction."""
    block = tl.program_id(0)
    rows = (block * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    columns = tl.arange(0, N)
    ok = rows[:, None] < n_rows
    offsets = rows[:, None] * N + columns[None, :]
    dy = tl.load(dy_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    if RELU:
        dz = tl.where(y > 0.0, dy, 0.0)
    else:
        dz = dy * (1.0 - y * y)
    tl.store(dz_ptr + offsets, dz.to(dz_ptr.dtype.element_ty), mask=ok)
    tl.store(partial_ptr + block * N + columns, tl.sum(dz, axis=0))


@triton.jit(do_not_specialize=["n_rows", "inner", "outer_stride", "inner_stride"])
def aligned_rows(
    x_ptr,
    out_ptr,
    n_rows,
    inner,
    outer_stride,
    inner_stride,
    N_IN: tl.constexpr,
    N_OUT: tl.constexpr,
    COLUMNS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """A block of rows of ``x`` (``N_IN`` features; row ``r`` at ``(r // inner) * outer_stride + (r %
    inner) * inner_stride``: a group's agents in each game of an env's buffer) into ``out``
    (contiguous rows of ``N_OUT >= N_IN``), cast to ``out``'s dtype, the extra features 0."""
    rows = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    columns = tl.arange(0, COLUMNS)
    ok = rows[:, None] < n_rows
    start = (rows // inner) * outer_stride + (rows % inner) * inner_stride
    x = tl.load(x_ptr + start[:, None] + columns[None, :], mask=ok & (columns[None, :] < N_IN), other=0.0)
    out = out_ptr + rows[:, None] * N_OUT + columns[None, :]
    tl.store(out, x.to(out_ptr.dtype.element_ty), mask=ok & (columns[None, :] < N_OUT))


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


@triton.jit
def _tie_weights(x, y):
    """How ``torch.maximum(x, y)``'s gradient splits: all to the larger, half each on a tie."""
    return tl.where(x > y, 1.0, tl.where(x == y, 0.5, 0.0)), tl.where(y > x, 1.0, tl.where(x == y, 0.5, 0.0))


@triton.jit(do_not_specialize=ROWS)
def ppo_categorical_loss(
    logits_ptr,
    actions_ptr,
    old_log_probs_ptr,
    advantages_ptr,
    returns_ptr,
    values_ptr,
    old_values_ptr,
    advantage_std_ptr,
    advantage_mean_ptr,
    d_logits_ptr,
    d_values_ptr,
    partial_ptr,
    n_rows,
    clip,
    ent_coef,
    vf_coef,
    N: tl.constexpr,
    N_POW2: tl.constexpr,
    NORM_ADV: tl.constexpr,
    CLIP_VLOSS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """PPO's loss on a block of a minibatch's rows (``ppo.ppo_loss`` for a categorical policy over
    ``N`` actions): each row's gradient of the minibatch's loss with respect to its logits and its
    value, written, and the block's sums of the clipped surrogate, of ``max`` of the squared value
    errors, of the entropy, of the approximate KL and of the clipped ratios (five numbers) into its
    row of ``partial``. The gradients are the ones PyTorch's autograd takes through that loss,
    written out: ``torch.maximum`` splits its gradient on ties, ``clamp`` passes it on its bounds.
    ``advantage_std``, ``advantage_mean``: the minibatch's, read where ``NORM_ADV``."""
    block = tl.program_id(0)
    rows = (block * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    row_ok = rows < n_rows
    columns = tl.arange(0, N_POW2)
    ok = row_ok[:, None] & (columns[None, :] < N)
    offsets = rows[:, None] * N + columns[None, :]
    logits = tl.load(logits_ptr + offsets, mask=ok, other=float("-inf")).to(tl.float32)
    shifted = logits - tl.max(logits, axis=1)[:, None]
    exp = tl.where(ok, tl.exp(shifted), 0.0)
    total = tl.sum(exp, axis=1)
    log_softmax = shifted - tl.log(total)[:, None]
    probs = exp / total[:, None]
    action = tl.load(actions_ptr + rows, mask=row_ok, other=0)
    chosen = columns[None, :] == action[:, None]
    log_prob = tl.sum(tl.where(chosen, log_softmax, 0.0), axis=1)
    entropy = -tl.sum(tl.where(ok, probs * log_softmax, 0.0), axis=1)

    inverse = 1.0 / n_rows.to(tl.float32)  # each row's share of a minibatch mean
    log_ratio = log_prob - tl.load(old_log_probs_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    ratio = tl.exp(log_ratio)
    advantage = tl.load(advantages_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    if NORM_ADV:
        std = tl.load(advantage_std_ptr).to(tl.float32)
        mean = tl.load(advantage_mean_ptr).to(tl.float32)
        advantage = (advantage - mean) / (std + 1e-8)
    low, high = 1.0 - clip, 1.0 + clip
    surrogate = -advantage * ratio
    clipped_surrogate = -advantage * tl.minimum(tl.maximum(ratio, low), high)
    to_surrogate, to_clipped = _tie_weights(surrogate, clipped_surrogate)
    inside = ((ratio >= low) & (ratio <= high)).to(tl.float32)
    d_ratio = -advantage * (to_surrogate + to_clipped * inside) * inverse
    d_log_prob = d_ratio * ratio
    d_entropy = -ent_coef * inverse  # the loss's -ent_coef * mean(entropy)
    d_logits = d_log_prob[:, None] * (chosen.to(tl.float32) - probs) - d_entropy * probs * (
        log_softmax + entropy[:, None]
    )
    tl.store(d_logits_ptr + offsets, d_logits.to(d_logits_ptr.dtype.element_ty), mask=ok)

    value = tl.load(values_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    target = tl.load(returns_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    error = value - target
    if CLIP_VLOSS:
        old_value = tl.load(old_values_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        step = value - old_value
        clipped_error = old_value + tl.minimum(tl.maximum(step, -clip), clip) - target
        squared, clipped_squared = error * error, clipped_error * clipped_error
        to_squared, to_clipped_squared = _tie_weights(squared, clipped_squared)
        within = ((step >= -clip) & (step <= clip)).to(tl.float32)
        value_term = tl.maximum(squared, clipped_squared)
        d_value = to_squared * error + to_clipped_squared * within * clipped_error
    else:
        value_term = error * error
        d_value = error
    tl.store(d_values_ptr + rows, (vf_coef * inverse * d_value).to(d_values_ptr.dtype.element_ty), mask=row_ok)

    surrogate = tl.maximum(surrogate, clipped_surrogate)
    approx_kl = (ratio - 1.0) - log_ratio
    clipped = (tl.abs(ratio - 1.0) > clip).to(tl.float32)
    base = partial_ptr + block * 5
    tl.store(base, tl.sum(tl.where(row_ok, surrogate, 0.0), axis=0))
    tl.store(base + 1, tl.sum(tl.where(row_ok, value_term, 0.0), axis=0))
    tl.store(base + 2, tl.sum(tl.where(row_ok, entropy, 0.0), axis=0))
    tl.store(base + 3, tl.sum(tl.where(row_ok, approx_kl, 0.0), axis=0))
    tl.store(base + 4, tl.sum(tl.where(row_ok, clipped, 0.0), axis=0))


@triton.jit(do_not_specialize=["n_rows", "logits_stride", "values_stride", "d_logits_stride", "d_values_stride"])
def a2c_categorical_loss(
    logits_ptr,
    logits_stride,
    values_ptr,
    values_stride,
    actions_ptr,
    advantages_ptr,
    returns_ptr,
    weights_ptr,
    weight_total_ptr,
    ent_coef_ptr,
    d_logits_ptr,
    d_logits_stride,
    d_values_ptr,
    d_values_stride,
    partial_ptr,
    n_rows,
    vf_coef,
    COMPONENTS: tl.constexpr,
    N: tl.constexpr,
    N_POW2: tl.constexpr,
    ZEROS: tl.constexpr,
    ZEROS_POW2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """A2C's loss (``multi_agent.masked_a2c_loss``) on a block of rows of a categorical policy of
    ``COMPONENTS`` components of ``N`` actions each (a row's logits side by side, rows
    ``logits_stride`` apart): each row's gradient of the loss with respect to its logits and its
    value, written (rows ``d_logits_stride`` and ``d_values_stride`` apart; the ``ZEROS`` columns
    after a row's value's, when logits and value lie in one row, set to 0), and the block's weighted
    sums of ``advantage * log prob``, of the squared value errors and of the entropies into its row
    of ``partial``. Means are over the rows' ``weights`` (``weight_total``: their sum, at least 1);
    ``ent_coef``: read from the device (a captured update's schedule moves it)."""
    block = tl.program_id(0)
    rows = (block * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    row_ok = rows < n_rows
    columns = tl.arange(0, N_POW2)
    column_ok = columns[None, :] < N
    ok = row_ok[:, None] & column_ok
    scale = tl.load(weights_ptr + rows, mask=row_ok, other=0.0).to(tl.float32) / tl.load(weight_total_ptr)
    advantage = tl.load(advantages_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    ent_coef = tl.load(ent_coef_ptr).to(tl.float32)
    log_prob = tl.zeros((BLOCK,), dtype=tl.float32)
    entropy = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in tl.static_range(COMPONENTS):
        # Rows past the end read 0 (finite, so their softmax is too: their sums add 0, not NaN);
        # columns past N, -inf.
        logits = tl.load(logits_ptr + rows[:, None] * logits_stride + c * N + columns[None, :], mask=ok, other=0.0)
        logits = tl.where(column_ok, logits.to(tl.float32), float("-inf"))
        shifted = logits - tl.max(logits, axis=1)[:, None]
        exp = tl.where(column_ok, tl.exp(shifted), 0.0)
        total = tl.sum(exp, axis=1)
        log_softmax = shifted - tl.log(total)[:, None]
        probs = exp / total[:, None]
        action = tl.load(actions_ptr + rows * COMPONENTS + c, mask=row_ok, other=0)
        chosen = columns[None, :] == action[:, None]
        component_entropy = -tl.sum(tl.where(ok, probs * log_softmax, 0.0), axis=1)
        log_prob += tl.sum(tl.where(chosen, log_softmax, 0.0), axis=1)
        entropy += component_entropy
        # d/dz of -scale * advantage * log p(a) and of -ent_coef * scale * entropy.
        d_logits = -(scale * advantage)[:, None] * (chosen.to(tl.float32) - probs) + (ent_coef * scale)[
            :, None
        ] * probs * (log_softmax + component_entropy[:, None])
        tl.store(
            d_logits_ptr + rows[:, None] * d_logits_stride + c * N + columns[None, :],
            d_logits.to(d_logits_ptr.dtype.element_ty),
            mask=ok,
        )
    value = tl.load(values_ptr + rows * values_stride, mask=row_ok, other=0.0).to(tl.float32)
    error = value - tl.load(returns_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    d_value = (vf_coef * scale * error).to(d_values_ptr.dtype.element_ty)
    tl.store(d_values_ptr + rows * d_values_stride, d_value, mask=row_ok)
    if ZEROS > 0:
        after = tl.arange(0, ZEROS_POW2)
        zeros = tl.zeros((BLOCK, ZEROS_POW2), dtype=d_values_ptr.dtype.element_ty)
        start = d_values_ptr + rows * d_values_stride + 1
        tl.store(start[:, None] + after[None, :], zeros, mask=row_ok[:, None] & (after[None, :] < ZEROS))
    weight = tl.load(weights_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    base = partial_ptr + block * 3
    tl.store(base, tl.sum(weight * advantage * log_prob, axis=0))
    tl.store(base + 1, tl.sum(weight * error * error, axis=0))
    tl.store(base + 2, tl.sum(weight * entropy, axis=0))


@triton.jit(do_not_specialize=ROWS)
def ppo_loss_totals(partial_ptr, loss_ptr, stats_ptr, n_blocks, n_rows, ent_coef, vf_coef, BLOCKS_POW2: tl.constexpr):
    """The minibatch's loss and its terms from the blocks' sums of :func:`ppo_categorical_loss`,
    added in block order: ``loss`` and ``stats`` = (policy loss, value loss, entropy, approximate
    KL, clipped fraction), each a minibatch mean (the value loss with its factor 1/2)."""
    blocks = tl.arange(0, BLOCKS_POW2)
    ok = blocks < n_blocks
    inverse = 1.0 / n_rows.to(tl.float32)
    policy = tl.sum(tl.load(partial_ptr + blocks * 5, mask=ok, other=0.0), axis=0) * inverse
    value = 0.5 * (tl.sum(tl.load(partial_ptr + blocks * 5 + 1, mask=ok, other=0.0), axis=0) * inverse)
    entropy = tl.sum(tl.load(partial_ptr + blocks * 5 + 2, mask=ok, other=0.0), axis=0) * inverse
    tl.store(loss_ptr, policy - ent_coef * entropy + vf_coef * value)
    tl.store(stats_ptr, policy)
    tl.store(stats_ptr + 1, value)
    tl.store(stats_ptr + 2, entropy)
    tl.store(stats_ptr + 3, tl.sum(tl.load(partial_ptr + blocks * 5 + 3, mask=ok, other=0.0), axis=0) * inverse)
    tl.store(stats_ptr + 4, tl.sum(tl.load(partial_ptr + blocks * 5 + 4, mask=ok, other=0.0), axis=0) * inverse)
