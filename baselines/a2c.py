"""A2C (Mnih et al., 2016, arXiv:1602.01783, synchronous form) on a batched single-agent env: one
gradient step per short rollout, everything on the env's device.

Rollouts (with truncation bootstrapping) are :mod:`rollout`'s; returns are n-step returns
(``gae_lambda = 1``) by default, GAE with a smaller ``gae_lambda``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from gpu_marl_envs.baselines.capture import CaptureOptions, GraphedPhase, make_optimizer, set_learning_rate
from gpu_marl_envs.baselines.checkpoint import restore, resumed_iteration, training_state
from gpu_marl_envs.baselines.distributed import GradientAverager, setup
from gpu_marl_envs.baselines.gae import compute_gae
from gpu_marl_envs.baselines.models import ActorCritic
from gpu_marl_envs.baselines.optimizers import RMSprop
from gpu_marl_envs.baselines.rollout import (EpisodeStats, PhaseTimes, Rollout, RolloutSizes, collect, log_entry,
                                              make_envs, print_entry)


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


def train(env_id: str, config: A2CConfig = A2CConfig(), *, device=None, backend: str | None = None,
          log_every: int = 100, log=print_entry, save=None, resume: dict | None = None):
    """Train a fresh :class:`ActorCritic` on ``env_id``; returns ``(agent, history)`` as ``ppo.train``
    (which says how ranks under ``torchrun`` share a run)."""
    context = setup(device)
    first = resumed_iteration(resume)
    # A resumed run draws new random numbers and new episodes (see checkpoint.py).
    torch.manual_seed(context.seed(config.seed + first))
    envs, obs = make_envs(env_id, config.num_envs, context.env_seed(config.seed, first, config.num_envs),
                          device=context.device, backend=backend, captured=config.cuda_graph)
    device = envs.device
    agent = ActorCritic(envs.single_observation_space.shape[0], envs.single_action_space, config.hidden).to(device)
    agent.use_fused_mlp(config.fused_mlp)
    optimizer = make_optimizer(RMSprop, agent.parameters(), config.learning_rate, device,
                               captured=config.cuda_graph and device.type == "cuda", alpha=0.99,
                               eps=config.rms_prop_eps)
    sample, act, value = (config.compiled(f) for f in (agent.sample, agent.action_and_value, agent.value))
    gae = config.compiled(compute_gae)
    loss_fn = config.compiled(a2c_loss)
    average_gradients = GradientAverager(agent.parameters(), context, in_graph=config.graph_allreduce)
    rollout = Rollout.allocate(config.num_steps, envs)
    stats = EpisodeStats(config.num_envs, device)
    iterations = context.iterations(config.total_timesteps, config.batch_size)

    def rollout_phase():
        collect(sample, envs, rollout, obs, stats, autocast=lambda: config.autocast(device))
        return {}

    def update_phase():
        # One pass of the policy over the rollout, with gradients: its values (detached) give the
        # advantages, and the same outputs give the loss.
        with config.autocast(device):
            _, log_probs, entropy, values = act(rollout.flat("obs"), rollout.flat("actions"))
            rewards, next_value = rollout.bootstrap(value, obs, config.gamma)
        with torch.no_grad():
            advantages, returns = gae(rewards, values.detach().float().view(rewards.shape), rollout.dones,
                                      next_value, config.gamma, config.gae_lambda)
        loss, losses = loss_fn(log_probs, entropy, values, advantages.flatten(), returns.flatten(), config)
        optimizer.zero_grad(set_to_none=False)  # gradients stay where a captured update wrote them
        loss.backward()
        average_gradients()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), config.max_grad_norm)
        optimizer.step()
        return losses

    rollout_phase = GraphedPhase(rollout_phase, device, config.cuda_graph)
    update_phase = GraphedPhase(update_phase, device, config.cuda_graph)
    times = PhaseTimes(device)
    history = restore(resume, model=agent, optimizer=optimizer)
    context.broadcast_parameters(agent)
    start = time.perf_counter() - (history[-1]["seconds"] if history else 0.0)
    with config.matmul_precision():
        for iteration in range(first, iterations):
            if config.anneal_lr:
                set_learning_rate(optimizer, config.learning_rate * (1.0 - iteration / iterations))
            with times("rollout"):
                rollout_phase()
            with times("update"):
                losses = update_phase()
            if (iteration + 1) % log_every == 0 or iteration + 1 == iterations:
                history.append(log_entry((iteration + 1) * config.batch_size * context.world_size, start, stats,
                                         losses, log, times, context))
                if save is not None and context.is_main:
                    save(training_state(iteration + 1, history, model=agent, optimizer=optimizer))
    envs.close()
    return agent, history
