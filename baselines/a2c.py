"""A2C (Mnih et al., 2016, arXiv:1602.01783, synchronous form) on a batched single-agent env: one
gradient step per short rollout, everything on the env's device.

Rollouts (with truncation bootstrapping) are :mod:`rollout`'s; returns are n-step returns
(``gae_lambda = 1``) by default, GAE with a smaller ``gae_lambda``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from gpu_marl_envs.baselines import on_policy, settings
from gpu_marl_envs.baselines.capture import CaptureOptions
from gpu_marl_envs.baselines.optimizers import RMSprop
from gpu_marl_envs.baselines.rollout import RolloutSizes, print_entry


@dataclass(frozen=True)
class A2CConfig(RolloutSizes, CaptureOptions):
    """Defaults: Stable-Baselines3's A2C (RMSprop, 5-step rollouts), with 16 envs."""

    num_envs: int = 16
    num_steps: int = 5
    """Steps per env per update."""
    total_timesteps: int = 500_000
    learning_rate: float = 7e-4
    anneal_lr: bool = False
    gamma: float = 0.99
    gae_lambda: float = 1.0
    """1: plain n-step returns."""
    norm_adv: bool = False
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    rms_prop_eps: float = 1e-5
    hidden: tuple[int, ...] = (64, 64)
    seed: int = 0

    def __post_init__(self):
        settings.check(self)
        self.check_sizes()


def a2c_loss(log_probs, entropy, values, advantages, returns, config: A2CConfig):
    """Policy gradient, value and entropy terms on one rollout, from the policy's outputs on it
    (``action_and_value`` of the rollout's observations and actions, with gradients):
    ``(loss, stats)``."""
    if config.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_loss = -(advantages * log_probs).mean()
    value_loss = 0.5 * ((returns - values) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = policy_loss - config.ent_coef * entropy_loss + config.vf_coef * value_loss
    stats = {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(), "entropy": entropy_loss.detach()}
    return loss, stats


def start(
    env_id: str, config: A2CConfig, *, device=None, backend: str | None = None, resume: dict | None = None
) -> tuple[on_policy.Run, Callable[[], dict[str, torch.Tensor]]]:
    """A run's pieces (:func:`on_policy.start`, with A2C's optimizer) and its update phase: one
    clipped gradient step on the whole rollout, returning its loss terms."""
    run = on_policy.start(env_id, config, device, backend, resume, RMSprop, alpha=0.99, eps=config.rms_prop_eps)
    loss_fn = config.compiled(a2c_loss)
    rollout, agent, optimizer = run.rollout, run.agent, run.optimizer

    def update():
        # One pass of the policy over the rollout, with gradients: its values (detached) give the
        # advantages, and the same outputs give the loss.
        with config.autocast(run.device):
            _, log_probs, entropy, values = run.act(rollout.flat("obs"), rollout.flat("actions"))
            rewards, next_value = rollout.bootstrap(run.value, run.obs, config.gamma)
        with torch.no_grad():
            advantages, returns = run.gae(
                rewards,
                values.detach().float().view(rewards.shape),
                rollout.dones,
                next_value,
                config.gamma,
                config.gae_lambda,
            )
        loss, losses = loss_fn(log_probs, entropy, values, advantages.flatten(), returns.flatten(), config)
        optimizer.zero_grad(set_to_none=True)  # written, not accumulated: capture.py's "Gradients"
        loss.backward()
        run.average_gradients()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), config.max_grad_norm)
        optimizer.step()
        return losses

    return run, update


def train(
    env_id: str,
    config: A2CConfig = A2CConfig(),
    *,
    device=None,
    backend: str | None = None,
    log_every: int = 100,
    log=print_entry,
    save=None,
    resume: dict | None = None,
):
    """Train a fresh :class:`ActorCritic` on ``env_id``; returns ``(agent, history)`` as ``ppo.train``
    (which says how ranks under ``torchrun`` share a run)."""
    run, update = start(env_id, config, device=device, backend=backend, resume=resume)
    return on_policy.iterate(run, update, log_every=log_every, log=log, save=save, resume=resume)
