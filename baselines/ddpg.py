"""DDPG (Lillicrap et al., 2016, arXiv:1509.02971) for ``Box`` action spaces on a batched env,
everything on the env's device: CleanRL's ``ddpg_continuous_action.py`` structure (act -> store ->
sample -> critic update -> delayed actor and target updates -> log).

Each iteration steps every env once and stores the ``num_envs`` transitions in a device-resident
:class:`ReplayBuffer`. The env runs with SAME_STEP autoreset, so a transition that ended its
episode is stored with the episode's final observation as its successor; the TD target stops
bootstrapping only where the episode *terminated*, and bootstraps from ``Q'(final obs)`` where it
was truncated (a time limit is no property of the state). Nothing synchronises with the host except
at the log interval.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from gpu_marl_envs.baselines import ppo, settings
from gpu_marl_envs.baselines.checkpoint import restore, resumed_iteration, training_state
from gpu_marl_envs.baselines.distributed import Context, GradientAverager, setup
from gpu_marl_envs.baselines.models import layer
from gpu_marl_envs.baselines.optimizers import Adam, Optimizer
from gpu_marl_envs.baselines.replay import ReplayBuffer, Transitions
from gpu_marl_envs.baselines.rollout import EntryNumbers, EpisodeStats, log_entry, make_envs, print_entry
from gymnasium import spaces
from torch import nn

from gpu_marl_envs.vector_env import GpuVectorEnv


@dataclass(frozen=True)
class DDPGConfig:
    """Defaults: CleanRL's DDPG (TD3-style Gaussian exploration and delayed actor updates, one
    gradient step per env step), with 4 envs and a smaller ``learning_starts``; Lillicrap et al.'s
    OU noise is ``exploration="ou"``, their every-step actor update ``policy_frequency=1``."""

    num_envs: int = 4
    """Parallel envs; each iteration adds ``num_envs`` transitions to the replay."""
    total_timesteps: int = 1_000_000
    """Env steps of the whole run (rounded down to whole vector steps)."""
    learning_starts: int = 5_000
    """Env steps of uniform random actions that fill the replay before the first update."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions (>= num_envs); the oldest are overwritten."""
    batch_size: int = 256
    """Transitions per gradient step, sampled uniformly with replacement."""
    gamma: float = 0.99
    tau: float = 0.005
    """Soft (Polyak) target update: ``target <- (1 - tau) * target + tau * online``."""
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    gradient_steps: int = 4
    """Critic updates per iteration (vector step): the update-to-data ratio is gradient_steps / num_envs."""
    policy_frequency: int = 2
    """Actor and target updates every this many critic updates (TD3's delay; 1 is the paper's DDPG)."""
    exploration: Literal["gaussian", "ou"] = "gaussian"
    """Behaviour noise: ``"gaussian"`` (independent per step) or ``"ou"`` (Ornstein-Uhlenbeck, per env)."""
    exploration_noise: float = 0.1
    """Noise scale (the Gaussian's std, or OU's sigma) as a fraction of the action half-range
    ``(high - low) / 2``, i.e. of the tanh output's unit scale."""
    ou_theta: float = 0.15
    """OU mean reversion per step: ``x <- (1 - ou_theta) * x + exploration_noise * N(0, 1)``."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and the critic (ReLU)."""
    seed: int = 0

    def __post_init__(self):
        settings.check(self)
        if self.total_timesteps < self.num_envs:
            raise ValueError(
                f"total_timesteps ({self.total_timesteps}) must cover one vector step (num_envs = {self.num_envs})"
            )
        if self.buffer_size < self.num_envs:
            raise ValueError(f"buffer_size ({self.buffer_size}) must hold one vector step (num_envs = {self.num_envs})")

    @property
    def num_iterations(self) -> int:
        """Vector steps of the run."""
        return self.total_timesteps // self.num_envs


def relu_mlp(inputs: int, hidden: tuple[int, ...], outputs: int, last_gain: float) -> nn.Sequential:
    """CleanRL's DDPG networks are ReLU MLPs; initialised orthogonally like :mod:`models`."""
    sizes = (inputs, *hidden)
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [layer(a, b), nn.ReLU()]
    return nn.Sequential(*layers, layer(sizes[-1], outputs, last_gain))


def _box_bounds(action_space: spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(action_space, spaces.Box):
        raise TypeError(f"DDPG needs a Box action space, got {action_space}")
    low, high = np.asarray(action_space.low, np.float32).ravel(), np.asarray(action_space.high, np.float32).ravel()
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
        raise ValueError(
            f"DDPG scales a tanh onto the action bounds, which must be finite with high > low; "
            f"got low={action_space.low}, high={action_space.high}"
        )
    return low, high


class Actor(nn.Module):
    """The deterministic policy mu(s): an MLP whose tanh output is scaled onto the Box bounds."""

    def __init__(self, observation_size: int, action_space: spaces.Box, hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        low, high = _box_bounds(action_space)
        # A small last layer starts the policy near the middle of the bounds, off tanh's flat tails.
        self.net = relu_mlp(observation_size, hidden, low.size, last_gain=0.01)
        self.register_buffer("action_scale", torch.as_tensor((high - low) / 2))
        self.register_buffer("action_bias", torch.as_tensor((high + low) / 2))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)) * self.action_scale + self.action_bias

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's action, for evaluation (the interface :func:`ppo.evaluate` uses)."""
        return self(obs)


class Critic(nn.Module):
    """Q(s, a): an MLP on the concatenated observation and action; returns ``(B,)``."""

    def __init__(self, observation_size: int, action_size: int, hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        self.net = relu_mlp(observation_size + action_size, hidden, 1, last_gain=1.0)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], dim=-1)).squeeze(-1)


def td_target(rewards: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor, gamma: float) -> torch.Tensor:
    """``r + gamma * Q'(s', mu'(s'))``, without the bootstrap where the episode *terminated*.

    A truncated transition keeps it: its ``s'`` is the episode's final observation, and the return
    beyond a time limit is as real as anywhere else.
    """
    return rewards + gamma * next_q * (~terminated)


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging of the parameters: ``target <- (1 - tau) * target + tau * source``."""
    torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)


def update_critic(
    critic: Critic,
    critic_optimizer: Optimizer,
    target_actor: Actor,
    target_critic: Critic,
    batch: Transitions,
    gamma: float,
    average_gradients=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step on the mean squared TD error; only the critic's parameters move. ``(loss, mean Q)``.
    ``average_gradients()``, if given, runs between the backward pass and the step (ranks)."""
    with torch.no_grad():
        next_q = target_critic(batch.next_obs, target_actor(batch.next_obs))
        target = td_target(batch.rewards, batch.terminated, next_q, gamma)
    q = critic(batch.obs, batch.actions)
    loss = ((q - target) ** 2).mean()
    critic_optimizer.zero_grad()
    loss.backward()
    if average_gradients is not None:
        average_gradients()
    critic_optimizer.step()
    return loss.detach(), q.detach().mean()


def update_actor(
    actor: Actor, actor_optimizer: Optimizer, critic: Critic, obs: torch.Tensor, average_gradients=None
) -> torch.Tensor:
    """One step on ``-Q(s, mu(s)).mean()``; only the actor's parameters move. Returns the loss.
    ``average_gradients`` as for :func:`update_critic`.

    The critic is a fixed function here: its parameters stop requiring gradients while the loss's
    graph is built, so the backward pass computes (and leaves) no critic gradients at all, rather
    than gradients that would have to be zeroed before the critic's own step.
    """
    critic.requires_grad_(False)
    try:
        loss = -critic(obs, actor(obs)).mean()
    finally:
        critic.requires_grad_(True)
    actor_optimizer.zero_grad()
    loss.backward()
    if average_gradients is not None:
        average_gradients()
    actor_optimizer.step()
    return loss.detach()


@dataclass
class Run:
    """One rank's pieces of a DDPG run (see :func:`start`), and what changes as it goes: the
    observations, the exploration noise's state, the gradient steps taken, the last losses."""

    context: Context
    config: DDPGConfig
    first: int  # the iteration to start from (> 0 when resumed)
    iterations: int
    envs: GpuVectorEnv
    obs: torch.Tensor  # the envs' current observations
    actor: Actor
    critic: Critic
    target_actor: Actor
    target_critic: Critic
    actor_optimizer: Optimizer
    critic_optimizer: Optimizer
    average_actor_gradients: GradientAverager
    average_critic_gradients: GradientAverager
    replay: ReplayBuffer
    stats: EpisodeStats
    low: torch.Tensor  # the action bounds
    high: torch.Tensor
    noise_std: torch.Tensor  # the exploration noise's scale per action dimension
    ou_state: torch.Tensor  # the Ornstein-Uhlenbeck noise of each env (exploration="ou")
    losses: dict[str, torch.Tensor]  # the last gradient steps' losses (NaN before the first)
    updates: int = 0  # critic gradient steps taken (the actor's delayed updates count them)

    @property
    def device(self) -> torch.device:
        return self.envs.device

    @property
    def steps_per_iteration(self) -> int:
        """Env steps of all ranks in one iteration."""
        return self.config.num_envs * self.context.world_size

    @property
    def parts(self) -> dict:
        """What a checkpoint holds besides the iteration and history."""
        return {
            "model": self.actor,
            "critic": self.critic,
            "target_actor": self.target_actor,
            "target_critic": self.target_critic,
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "replay": self.replay,
        }

    def begin_at(self, iteration: int) -> None:
        """Count the gradient steps taken before ``iteration`` (the actor's delayed updates count them)."""
        self.first = iteration
        self.updates = (
            max(0, iteration - math.ceil(self.config.learning_starts / self.steps_per_iteration))
            * self.config.gradient_steps
        )

    def restart(self, iteration: int) -> None:
        """Go on from ``iteration`` with the random numbers and fresh episodes that :func:`start` gives
        a run resumed there (for a state restored after the start, e.g. by Lightning)."""
        self.begin_at(iteration)
        torch.manual_seed(self.context.seed(self.config.seed, iteration))
        obs, _ = self.envs.reset(seed=self.context.env_seed(self.config.seed, iteration, self.config.num_envs))
        self.obs = obs.clone()
        self.ou_state.zero_()
        self.stats.running.zero_()


def start(
    env_id: str, config: DDPGConfig, *, device=None, backend: str | None = None, resume: dict | None = None
) -> Run:
    """Everything a run needs before its first iteration."""
    context = setup(device)
    first = resumed_iteration(resume, context.world_size, config.num_envs)
    torch.manual_seed(context.seed(config.seed, first))
    envs, obs = make_envs(
        env_id,
        config.num_envs,
        context.env_seed(config.seed, first, config.num_envs),
        device=context.device,
        backend=backend,
    )
    device = envs.device
    obs_size = envs.single_observation_space.shape[0]
    actor = Actor(obs_size, envs.single_action_space, config.hidden).to(device)
    action_size = actor.action_scale.numel()
    critic = Critic(obs_size, action_size, config.hidden).to(device)
    nan = torch.tensor(float("nan"), device=device)
    run = Run(
        context=context,
        config=config,
        first=first,
        iterations=context.iterations(config.total_timesteps, config.num_envs),
        envs=envs,
        obs=obs,
        actor=actor,
        critic=critic,
        # The targets start as copies and only ever move by soft updates: no optimiser, no gradients.
        target_actor=copy.deepcopy(actor).requires_grad_(False),
        target_critic=copy.deepcopy(critic).requires_grad_(False),
        actor_optimizer=Adam(actor.parameters(), lr=config.actor_lr),
        critic_optimizer=Adam(critic.parameters(), lr=config.critic_lr),
        average_actor_gradients=GradientAverager(actor.parameters(), context),
        average_critic_gradients=GradientAverager(critic.parameters(), context),
        replay=ReplayBuffer(config.buffer_size, obs_size, action_size, device),
        stats=EpisodeStats(config.num_envs, device),
        low=actor.action_bias - actor.action_scale,
        high=actor.action_bias + actor.action_scale,
        noise_std=config.exploration_noise * actor.action_scale,
        ou_state=torch.zeros((config.num_envs, action_size), device=device),
        losses={"critic_loss": nan, "actor_loss": nan, "q_value": nan},
    )
    run.begin_at(first)
    return run


def step(run: Run, iteration: int, actor_optimizer=None, critic_optimizer=None) -> None:
    """Iteration ``iteration``: every env steps once (uniform random actions during
    ``learning_starts``, then the actor's with exploration noise), the transitions go into the
    replay, and from ``learning_starts`` on ``gradient_steps`` critic steps follow, with the actor's
    and the targets' update every ``policy_frequency``-th. The optimizers default to the run's (a
    Lightning step passes both, as Lightning wraps them)."""
    config, actor, low, high = run.config, run.actor, run.low, run.high
    if actor_optimizer is None:
        actor_optimizer, critic_optimizer = run.actor_optimizer, run.critic_optimizer
    global_step = iteration * run.steps_per_iteration
    if global_step < config.learning_starts:
        actions = low + (high - low) * torch.rand((config.num_envs, *low.shape), device=run.device)
    else:
        with torch.no_grad():
            actions = actor(run.obs)
        if config.exploration == "ou":
            run.ou_state.mul_(1.0 - config.ou_theta).add_(torch.randn_like(run.ou_state))  # sigma applied below
            noise = run.ou_state
        else:
            noise = torch.randn_like(actions)
        actions = (actions + run.noise_std * noise).clamp(low, high)

    next_obs, rewards, terminated, truncated, infos = run.envs.step(actions)
    done = terminated | truncated
    # SAME_STEP autoreset: next_obs already starts the next episode where one ended; the
    # transition's successor is the final observation there.
    successor = torch.where(infos["_final_obs"].unsqueeze(-1), infos["final_obs"], next_obs)
    run.replay.add(run.obs, actions, rewards, successor, terminated)
    run.stats.add(rewards[None], done[None])
    run.ou_state.mul_(~done.unsqueeze(-1))  # a new episode starts its noise afresh
    run.obs = next_obs.clone()  # the env overwrites its buffers at the next step

    if global_step >= config.learning_starts:
        losses = run.losses
        for _ in range(config.gradient_steps):
            batch = run.replay.sample(config.batch_size)
            losses["critic_loss"], losses["q_value"] = update_critic(
                run.critic,
                critic_optimizer,
                run.target_actor,
                run.target_critic,
                batch,
                config.gamma,
                run.average_critic_gradients,
            )
            run.updates += 1
            if run.updates % config.policy_frequency == 0:
                losses["actor_loss"] = update_actor(
                    actor, actor_optimizer, run.critic, batch.obs, run.average_actor_gradients
                )
                soft_update(run.target_actor, actor, config.tau)
                soft_update(run.target_critic, run.critic, config.tau)


def train(
    env_id: str,
    config: DDPGConfig = DDPGConfig(),
    *,
    device=None,
    backend: str | None = None,
    log_every: int = 1000,
    log=print_entry,
    save=None,
    resume: dict | None = None,
):
    """Train a fresh :class:`Actor` (and its critic) on ``env_id``; returns ``(actor, history)``, the
    history as ``ppo.train``'s (env steps, seconds, mean return of the episodes finished since the
    last log, and the last losses: NaN before the first update). ``log_every`` counts iterations
    (vector steps of ``num_envs`` env steps). ``save`` and ``resume`` as for ``ppo.train``; the
    state includes the replay buffer's items.

    Under ``torchrun`` (see ``ppo.train``) each rank keeps its own replay of its own envs'
    transitions and samples ``batch_size`` of them per gradient step (the averaged gradient is of
    ``batch_size * world_size`` transitions); ``learning_starts`` and ``total_timesteps`` count the
    env steps of all ranks. A checkpoint holds rank 0's replay, which every rank of a resumed run
    loads: the ranks' buffers start alike and part as new transitions come in."""
    run = start(env_id, config, device=device, backend=backend, resume=resume)
    context = run.context
    history = restore(resume, **run.parts)
    context.broadcast_parameters(run.actor, run.critic, run.target_actor, run.target_critic)
    if resume is None and save is not None and context.is_main:  # the run's starting point
        save(training_state(0, history, context.world_size, **run.parts))
    begin = time.perf_counter() - (history[-1]["seconds"] if history else 0.0)
    for iteration in range(run.first, run.iterations):
        step(run, iteration)
        if (iteration + 1) % log_every == 0 or iteration + 1 == run.iterations:
            history.append(
                log_entry(
                    (iteration + 1) * run.steps_per_iteration,
                    begin,
                    # Its losses are NaN until its first update (by design); a NaN loss after it makes
                    # the parameters NaN at that update, where the check sees it.
                    EntryNumbers([run.stats], run.losses, networks=(run.actor, run.critic), finite_losses=False),
                    log,
                    context,
                )
            )
            if save is not None and context.is_main:
                save(training_state(iteration + 1, history, context.world_size, **run.parts))
    run.envs.close()
    return run.actor, history


def evaluate(actor: Actor, env_id: str, num_episodes: int = 16, *, device=None, seed: int = 10_000) -> torch.Tensor:
    """Returns of ``num_episodes`` episodes (one per env, autoreset DISABLED) with the actor's
    noiseless actions: :func:`ppo.evaluate`, which calls ``actor.greedy``."""
    return ppo.evaluate(actor, env_id, num_episodes, device=device, seed=seed)
