"""The multi-agent trainer's A2C loss for a categorical policy as one Triton kernel
(:mod:`policy_kernels`) on CUDA, as :mod:`fused_ppo_loss` is PPO's.

:func:`multi_agent.masked_a2c_loss` in PyTorch, with the log-softmax, log-probabilities and
entropies before it, runs some twenty kernels forward and as many backward over an update's rows;
on Tag A2C (1,000 games x 50 steps, 5.5 M rows of two 21-way choices) they took about 10 ms of a
43 ms iteration on an H200, each pass reading or writing the rows' logits in float32.
:func:`categorical_a2c_loss` computes the same loss, and each row's gradient with respect to its
logits and its value, in one pass over the rows; the backward pass scales those gradients by the
incoming one. The arithmetic is the same formulas in float32 in another order (the softmax, the
sums over blocks), so the results agree with PyTorch's to float32 rounding, not bitwise.
"""

from __future__ import annotations

import torch
from gpu_marl_envs.baselines import wide_mlp
from gpu_marl_envs.baselines.models import ActorCritic

BLOCK_ELEMENTS = 512
"""Logits a program takes per component (rows times the component's actions, rounded up to a power
of two): at most 256 rows, at least 16. On an H200 at Tag A2C's 5 M rows of 2 x 21 logits, a
forward and backward pass took 3.69 ms with 512 (16 rows), 4.16 with 1,024, 5.46-5.57 with 2,048 to
8,192 (4 or 8 warps), PyTorch's 8.46 (``benchmarks/experiments/a2c_loss_block.py``)."""
WARPS = 4
STATS = ("policy_loss", "value_loss", "entropy")


def block_rows(n_pow2: int) -> int:
    """Rows a program takes for components of ``n_pow2`` (a power of two) logits."""
    return max(16, min(256, BLOCK_ELEMENTS // n_pow2))


def applies(policy, obs: torch.Tensor) -> bool:
    """Whether an update takes :func:`categorical_a2c_loss` for ``policy`` on ``obs``: an
    :class:`ActorCritic` (its critic on the observations) of ``Discrete`` or equal ``MultiDiscrete``
    components, on CUDA, where :func:`wide_mlp.kernels_apply` (enough rows, Triton installed). The
    caller rules out action masks and ``torch.compile``."""
    return (
        type(policy) is ActorCritic
        and policy.uniform
        and obs.is_cuda
        and wide_mlp.kernels_apply(wide_mlp.row_count(obs))
    )


class _CategoricalA2CLoss(torch.autograd.Function):
    """``outputs``: the logits (``(B, width)``), or, where ``values`` is None, a row of the logits,
    the value and zero columns (:meth:`ActorCritic.joint_outputs`), whose gradient is then one
    tensor of its shape written by the kernel."""

    @staticmethod
    def forward(ctx, outputs, values, actions, advantages, returns, weights, ent_coef, vf_coef, components, width):
        from gpu_marl_envs.baselines import policy_kernels

        joint = values is None
        n_rows = outputs.shape[0]
        n = width // components
        n_pow2 = 1 << max(n - 1, 0).bit_length()
        block = block_rows(n_pow2)
        blocks = (n_rows + block - 1) // block
        weight_total = weights.float().sum().clamp(min=1.0)
        if joint:
            values = outputs[:, width]
            d_outputs = torch.empty_like(outputs, memory_format=torch.contiguous_format)
            d_values = d_outputs[:, width]
        else:
            d_outputs = torch.empty(n_rows, width, dtype=outputs.dtype, device=outputs.device)
            d_values = torch.empty(n_rows, dtype=values.dtype, device=values.device)
        zeros = d_outputs.shape[1] - width - 1 if joint else 0
        partial = torch.empty(blocks, 3, device=outputs.device, dtype=torch.float32)
        if n_rows:
            policy_kernels.a2c_categorical_loss[(blocks,)](
                outputs,
                outputs.stride(0),
                values,
                values.stride(0),
                actions,
                advantages,
                returns,
                weights,
                weight_total,
                ent_coef,
                d_outputs,
                d_outputs.stride(0),
                d_values,
                d_values.stride(0),
                partial,
                n_rows,
                vf_coef,
                COMPONENTS=components,
                N=n,
                N_POW2=n_pow2,
                ZEROS=zeros,
                ZEROS_POW2=1 << max(zeros - 1, 0).bit_length(),
                BLOCK=block,
                num_warps=WARPS,
            )
        sums = partial.sum(0) / weight_total
        policy_loss, value_loss, entropy = -sums[0], 0.5 * sums[1], sums[2]
        loss = policy_loss - ent_coef * entropy + vf_coef * value_loss
        ctx.joint = joint
        ctx.save_for_backward(d_outputs, d_values)
        stats = torch.stack([policy_loss, value_loss, entropy])
        ctx.mark_non_differentiable(stats)
        return loss, stats

    @staticmethod
    def backward(ctx, d_loss, _):
        d_outputs, d_values = ctx.saved_tensors
        # (in the inputs' dtype: bfloat16 logits under autocast get bfloat16 gradients)
        d_outputs = d_outputs * d_loss.to(d_outputs.dtype)
        d_values = None if ctx.joint else d_values * d_loss.to(d_values.dtype)
        return d_outputs, d_values, *(None,) * 8


def categorical_a2c_loss(logits, values, actions, advantages, returns, weights, config, ent_coef, joint=None):
    """:func:`multi_agent.masked_a2c_loss`'s ``(loss, stats)`` from the policy's ``logits``
    (``(B, components * n)``, rows of unit stride) and ``values`` (``(B,)``) on the update's rows
    (``actions`` int64 ``(B, components)`` or ``(B,)``, the rest ``(B,)``); ``config`` a
    ``PolicyConfig`` (``norm_adv``, ``vf_coef``); ``ent_coef`` a number or a device tensor.
    ``joint``: where ``logits`` and ``values`` are views of it (:meth:`ActorCritic.joint_outputs`),
    its gradient is written whole, without a view's zeros and copies in between."""
    from gpu_marl_envs.baselines.multi_agent import normalise

    if config.norm_adv:
        advantages = normalise(advantages, weights)
    components = actions.shape[-1] if actions.dim() == 2 else 1
    ent_coef = torch.as_tensor(ent_coef, dtype=torch.float32, device=logits.device)
    rows = (actions.contiguous(), advantages.contiguous(), returns.contiguous(), weights.contiguous())
    outputs, values = (joint, None) if joint is not None else (logits, values)
    loss, stats = _CategoricalA2CLoss.apply(
        outputs, values, *rows, ent_coef, float(config.vf_coef), components, logits.shape[-1]
    )
    return loss, dict(zip(STATS, stats))
