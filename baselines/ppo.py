"""PPO (Schulman et al., 2017, arXiv:1707.06347) on a batched single-agent env, everything on the
env's device: CleanRL's ``ppo.py`` structure (rollout -> advantages -> update -> log).

Rollouts (with truncation bootstrapping) are :mod:`rollout`'s. Nothing synchronises with the host
inside the rollout or the update; episode statistics accumulate on the device and are read at the
log interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from gpu_marl_envs.baselines import fused_ppo_loss, on_policy, settings
from gpu_marl_envs.baselines.capture import CaptureOptions
from gpu_marl_envs.baselines.minibatches import Reorderable
from gpu_marl_envs.baselines.optimizers import Adam
from gpu_marl_envs.baselines.rollout import RolloutSizes, print_entry
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.vector_env import GpuVectorEnv


@dataclass(frozen=True)
class PPOConfig(RolloutSizes, CaptureOptions):
    """Defaults: PureJaxRL's CartPole-v1 hyper-parameters (Lu et al., 2022)."""

    num_envs: int = 4
    """Parallel envs of the rollout."""
    num_steps: int = 128
    """Steps per env per rollout."""
    total_timesteps: int = 500_000
    """Env steps of the whole run (rounded down to whole rollouts)."""
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    clip_coef: float = 0.2
    clip_vloss: bool = False
    """Clip the value update like the policy's (CleanRL's option; PureJaxRL clips, off here)."""
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: tuple[int, ...] = (64, 64)
    seed: int = 0

    def __post_init__(self):
        settings.check(self)
        self.check_sizes()
        if self.batch_size % self.num_minibatches:
            raise ValueError(
                f"num_envs * num_steps = {self.batch_size} must be a multiple of num_minibatches "
                f"= {self.num_minibatches}"
            )


def ppo_loss(agent, obs, actions, old_log_probs, advantages, returns, old_values, config: PPOConfig, diagnostics=True):
    """The clipped surrogate, value and entropy terms on one minibatch: ``(loss, stats)``; the stats
    hold the approximate KL divergence and the clipped fraction too where ``diagnostics`` (the update
    logs the last minibatch's stats only, so the others skip their eight kernels). A categorical
    policy on CUDA takes :mod:`fused_ppo_loss`'s kernels where they apply."""
    if fused_ppo_loss.applies(agent, obs):
        logits, values = agent.outputs_and_value(obs)
        return fused_ppo_loss.categorical_ppo_loss(
            logits, values, actions, old_log_probs, advantages, returns, old_values, config, diagnostics
        )
    _, log_probs, entropy, values = agent.action_and_value(obs, actions)
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    if config.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_loss = torch.max(
        -advantages * ratio, -advantages * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef)
    ).mean()
    if config.clip_vloss:
        clipped = old_values + (values - old_values).clamp(-config.clip_coef, config.clip_coef)
        value_loss = 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((values - returns) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = policy_loss - config.ent_coef * entropy_loss + config.vf_coef * value_loss
    # Detached: a loss term kept (as the update's output) with its autograd graph keeps that
    # graph's AccumulateGrad nodes alive into the next captured update, on another stream (torch
    # warns of the mismatch and of the synchronisation it may cost).
    stats = {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(), "entropy": entropy_loss.detach()}
    if diagnostics:
        with torch.no_grad():
            stats["approx_kl"] = ((ratio - 1) - log_ratio).mean()
            stats["clip_fraction"] = ((ratio - 1).abs() > config.clip_coef).float().mean()
    return loss, stats


def start(
    env_id: str, config: PPOConfig, *, device=None, backend: str | None = None, resume: dict | None = None
) -> tuple[on_policy.Run, Callable[[], dict[str, torch.Tensor]]]:
    """A run's pieces (:func:`on_policy.start`, with PPO's optimizer) and its update phase: GAE,
    then ``update_epochs`` passes of shuffled minibatches, each a clipped gradient step; the phase
    returns the last step's loss terms."""
    run = on_policy.start(env_id, config, device, backend, resume, Adam, eps=1e-5)
    loss_fn = config.compiled(ppo_loss)
    minibatch = config.batch_size // config.num_minibatches
    rollout, agent, optimizer = run.rollout, run.agent, run.optimizer

    def update():
        # The old policy's log-probabilities and values, before any gradient step.
        with config.autocast(run.device):
            log_probs, values = rollout.old_policy(run.act)
            rewards, next_value = rollout.bootstrap(run.value, run.obs, config.gamma)
        with torch.no_grad():
            advantages, returns = run.gae(rewards, values, rollout.dones, next_value, config.gamma, config.gae_lambda)
        # Epochs of shuffled minibatches.
        b_obs, b_actions = rollout.flat("obs"), rollout.flat("actions")
        b_log_probs, b_values, b_adv, b_returns = (x.flatten() for x in (log_probs, values, advantages, returns))
        fields = Reorderable(b_obs, b_actions, b_log_probs, b_adv, b_returns, b_values)
        for epoch in range(config.update_epochs):
            order = torch.rand(config.batch_size, device=run.device).argsort()  # a permutation, capturable
            shuffled = fields.reordered(order)  # one gather an epoch; each minibatch a slice of it
            for first in range(0, config.batch_size, minibatch):
                last = epoch == config.update_epochs - 1 and first + minibatch == config.batch_size
                with config.autocast(run.device):
                    loss, losses = loss_fn(
                        agent, *(field[first : first + minibatch] for field in shuffled), config, diagnostics=last
                    )
                optimizer.zero_grad(set_to_none=True)  # written, not accumulated: capture.py's "Gradients"
                loss.backward()
                run.average_gradients()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), config.max_grad_norm)
                optimizer.step()
        return losses

    return run, update


def train(
    env_id: str,
    config: PPOConfig = PPOConfig(),
    *,
    device=None,
    backend: str | None = None,
    log_every: int = 10,
    log=print_entry,
    save=None,
    resume: dict | None = None,
):
    """Train a fresh :class:`ActorCritic` on ``env_id``; returns ``(agent, history)``, the history a
    list of dicts (env steps, mean return of the episodes finished since the last log, seconds spent
    in rollouts and updates, losses), each also handed to ``log`` when it is made.

    ``save(state)``, if given, receives the training state (:mod:`checkpoint`) at the start of a
    fresh run and at each log interval; ``resume`` = such a state continues that run from its
    iteration (on this number of ranks or another: :func:`checkpoint.resumed_iteration`).

    Under ``torchrun`` every rank runs this with its own ``num_envs`` envs on its own GPU
    (:mod:`distributed`): ``total_timesteps`` and the history's env steps count all ranks, and
    only rank 0 calls ``log`` and ``save``."""
    run, update = start(env_id, config, device=device, backend=backend, resume=resume)
    return on_policy.iterate(run, update, log_every=log_every, log=log, save=save, resume=resume)


def evaluate(agent, env_id: str, num_episodes: int = 16, *, device=None, seed: int = 10_000) -> torch.Tensor:
    """Returns of ``num_episodes`` episodes (one per env) with the agent's greedy actions."""
    envs = GpuVectorEnv(
        env_id, num_episodes, device=device, autoreset_mode=AutoresetMode.DISABLED, validate_actions=False
    )
    obs, _ = envs.reset(seed=seed)
    returns = torch.zeros(num_episodes, device=envs.device)
    running = torch.ones(num_episodes, dtype=torch.bool, device=envs.device)
    space = envs.single_action_space
    while bool(running.any()):
        with torch.no_grad():
            action = agent.greedy(obs)
        if isinstance(space, spaces.Box):
            action = action.clamp(
                torch.as_tensor(space.low, device=envs.device), torch.as_tensor(space.high, device=envs.device)
            )
        obs, reward, terminated, truncated, _ = envs.step(action)
        returns += reward * running
        running &= ~(terminated | truncated)
    envs.close()
    return returns
