"""PPO's loss for a categorical policy as two Triton kernels (:mod:`policy_kernels`) on CUDA.

:func:`ppo.ppo_loss` in PyTorch runs about 30 kernels forward and 45 backward on each minibatch
(the log-softmax, the ratio, the clipped surrogate, the value and entropy terms, their means and
autograd's kernels for each), each over the minibatch's rows; on PPO CartPole 4096 x 128 these
were about a third of an iteration's kernels and 3.4 ms of its 10.3 (``docs/benchmarks/training.md``).
:func:`categorical_ppo_loss` computes the same loss, and each row's gradient with respect to its
logits and its value, in one pass over the rows (plus one kernel for the minibatch's advantage
statistics and one adding the blocks' sums); the backward pass scales those gradients by the
incoming one. The arithmetic is the same formulas in float32 in another order (the softmax, the
sums over blocks), so the results agree with PyTorch's to float32 rounding, not bitwise.
"""

from __future__ import annotations

import torch
from gpu_marl_envs.baselines import wide_mlp
from gpu_marl_envs.baselines.models import ActorCritic
from gymnasium import spaces

BLOCK_ROWS = 256
STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


def applies(agent, obs: torch.Tensor) -> bool:
    """Whether :func:`ppo.ppo_loss` takes this path for ``agent`` on ``obs``: a single-agent
    policy over one ``Discrete`` space without action masks, on CUDA, where
    :func:`wide_mlp.kernels_apply` (enough rows, Triton installed, not under ``torch.compile``)."""
    return (
        type(agent) is ActorCritic
        and isinstance(agent.space, spaces.Discrete)
        and obs.is_cuda
        and wide_mlp.kernels_apply(wide_mlp.row_count(obs))
    )


class _CategoricalPPOLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, values, actions, old_log_probs, advantages, returns, old_values, config):
        from gpu_marl_envs.baselines import policy_kernels

        n_rows, n = logits.shape
        blocks = (n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS
        # The minibatch's advantage statistics, one kernel (read where config.norm_adv).
        std, mean = torch.std_mean(advantages.float()) if config.norm_adv else (advantages, advantages)
        d_logits, d_values = torch.empty_like(logits), torch.empty_like(values)
        partial = torch.empty(blocks, 5, device=logits.device, dtype=torch.float32)
        loss = torch.empty((), device=logits.device, dtype=torch.float32)
        stats = torch.empty(len(STATS), device=logits.device, dtype=torch.float32)
        if n_rows:
            policy_kernels.ppo_categorical_loss[(blocks,)](
                logits,
                actions,
                old_log_probs,
                advantages,
                returns,
                values,
                old_values,
                std,
                mean,
                d_logits,
                d_values,
                partial,
                n_rows,
                config.clip_coef,
                config.ent_coef,
                config.vf_coef,
                N=n,
                N_POW2=_power_of_2_from(n),
                NORM_ADV=config.norm_adv,
                CLIP_VLOSS=config.clip_vloss,
                BLOCK=BLOCK_ROWS,
            )
        policy_kernels.ppo_loss_totals[(1,)](
            partial,
            loss,
            stats,
            blocks,
            max(n_rows, 1),
            config.ent_coef,
            config.vf_coef,
            BLOCKS_POW2=_power_of_2_from(max(blocks, 1)),
        )
        ctx.save_for_backward(d_logits, d_values)
        ctx.mark_non_differentiable(stats)
        return loss, stats

    @staticmethod
    def backward(ctx, d_loss, _):
        d_logits, d_values = ctx.saved_tensors
        # (in the inputs' dtype: bfloat16 logits under autocast get bfloat16 gradients)
        return d_logits * d_loss.to(d_logits.dtype), d_values * d_loss.to(d_values.dtype), *(None,) * 6


def _power_of_2_from(n: int) -> int:
    """The least power of two >= ``n`` (a Triton block's extent)."""
    return 1 << max(n - 1, 0).bit_length()


def categorical_ppo_loss(
    logits, values, actions, old_log_probs, advantages, returns, old_values, config, diagnostics=True
):
    """:func:`ppo.ppo_loss`'s ``(loss, stats)`` from the policy's ``logits`` ``(B, n)`` and
    ``values`` ``(B,)`` on a minibatch (``actions`` int64 ``(B,)``, the rest ``(B,)``)."""
    rows = (logits, values, actions, old_log_probs, advantages, returns, old_values)
    loss, stats = _CategoricalPPOLoss.apply(*(x.contiguous() for x in rows), config)
    kept = STATS if diagnostics else STATS[:3]
    return loss, {name: stats[i] for i, name in enumerate(kept)}
