"""DDPG (Lillicrap et al., 2016, arXiv:1509.02971) and TD3 (Fujimoto et al., 2018, arXiv:1802.09477)
for ``Box`` action spaces on a batched env, everything on the env's device: CleanRL's
``ddpg_continuous_action.py`` and ``td3_continuous_action.py`` structure (act -> store -> sample ->
critic update -> delayed actor and target updates -> log). TD3 is a setting of the same trainer
(:class:`TD3Config`): twin critics, target policy smoothing, delayed actor updates.

Each iteration steps every env once and stores the ``num_envs`` transitions in a device-resident
:class:`ReplayBuffer`. The env runs with SAME_STEP autoreset, so a transition that ended its
episode is stored with the episode's final observation as its successor; the TD target stops
bootstrapping only where the episode *terminated*, and bootstraps from ``Q'(final obs)`` where it
was truncated (a time limit is no property of the state).

An iteration is two phases (:class:`Phases`), each replayed as a CUDA graph on CUDA with
``cuda_graph`` (:class:`~gpu_marl_envs.baselines.capture.GraphedPhase`): acting and the env step
with the replay's insert, then the iteration's gradient steps with the replay's draw. Nothing in
them synchronises with the host or branches on a tensor: whether an iteration acts at random
(before ``learning_starts``) and which of its gradient steps update the actor (every
``policy_frequency``-th of the run) follow from the iteration's number, a fixed schedule on the
host that picks among separately captured graphs; the replay's fill and write position are device
tensors. Nothing synchronises with the host except at the log interval.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from gpu_marl_envs.baselines import ppo, settings
from gpu_marl_envs.baselines.capture import CaptureOptions, GraphedPhase
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
class DDPGConfig(CaptureOptions):
    """Defaults: CleanRL's DDPG (TD3-style Gaussian exploration and delayed actor updates, one
    gradient step per env step), with 4 envs and a smaller ``learning_starts``; Lillicrap et al.'s
    OU noise is ``exploration="ou"``, their every-step actor update ``policy_frequency=1``.

    The capture options (``cuda_graph``, ``compile``, ``tf32``, ``bf16``) are PPO's; ``fused_mlp``
    has nothing to fuse here (the networks are ReLU MLPs: ``"auto"`` and false run PyTorch's layers,
    true is refused)."""

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
    """Actor and target updates every this many critic updates (TD3's delay; 1 is the paper's DDPG).
    On CUDA with ``cuda_graph``, each pattern of actor updates an iteration's gradient steps can
    have is a graph of its own: ``policy_frequency / gcd(policy_frequency, gradient_steps)`` graphs."""
    exploration: Literal["gaussian", "ou"] = "gaussian"
    """Behaviour noise: ``"gaussian"`` (independent per step) or ``"ou"`` (Ornstein-Uhlenbeck, per env)."""
    exploration_noise: float = 0.1
    """Noise scale (the Gaussian's std, or OU's sigma) as a fraction of the action half-range
    ``(high - low) / 2``, i.e. of the tanh output's unit scale."""
    ou_theta: float = 0.15
    """OU mean reversion per step: ``x <- (1 - ou_theta) * x + exploration_noise * N(0, 1)``."""
    twin_critics: bool = False
    """TD3's clipped double Q-learning: two critics trained on one target, which takes the smaller
    of their two target values; the actor ascends the first (:class:`TwinCritic`)."""
    policy_noise: float = 0.0
    """TD3's target policy smoothing: the std of the Gaussian noise added to the target actor's
    action in the TD target, as a fraction of the action half-range like ``exploration_noise``
    (0: none, DDPG's target)."""
    noise_clip: float = 0.5
    """The smoothing noise is clipped to +-``noise_clip`` (a fraction of the half-range) before the
    noisy action is clipped to the bounds."""
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
        if self.fused_mlp is True:
            raise ValueError(
                f"{type(self).__name__}.fused_mlp = true: the fused kernels run tanh MLPs, and DDPG's networks "
                'are ReLU MLPs; leave it "auto" or set false'
            )

    @property
    def num_iterations(self) -> int:
        """Vector steps of the run."""
        return self.total_timesteps // self.num_envs


@dataclass(frozen=True)
class TD3Config(DDPGConfig):
    """TD3 (Fujimoto et al., 2018): :class:`DDPGConfig` with twin critics and target policy
    smoothing on. Defaults: CleanRL's ``td3_continuous_action.py`` (``policy_noise`` 0.2,
    ``noise_clip`` 0.5, ``policy_frequency`` 2, ``exploration_noise`` 0.1,
    ``tau`` 0.005, learning rates 3e-4, batch 256, (256, 256) networks), with DDPGConfig's 4 envs,
    4 gradient steps an iteration (CleanRL's one per env step) and ``learning_starts`` of 5,000
    (CleanRL: 25,000). Stable-Baselines3 calls these settings ``n_critics=2``,
    ``target_policy_noise`` and ``target_noise_clip`` (its DDPG is its TD3 with them off)."""

    twin_critics: bool = True
    policy_noise: float = 0.2


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

    def values(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Every estimate of Q(s, a) the critic makes, ``(critics, B)``: here one."""
        return self(obs, actions)[None]


class TwinCritic(nn.Module):
    """TD3's pair of critics (clipped double Q-learning): ``q1`` and ``q2`` are trained on the same
    target, built from the smaller of their target copies' values; the actor ascends ``q1``, which
    is what calling the pair returns."""

    def __init__(self, observation_size: int, action_size: int, hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        self.q1 = Critic(observation_size, action_size, hidden)
        self.q2 = Critic(observation_size, action_size, hidden)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.q1(obs, actions)

    def values(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(2, B)``: Q1 and Q2."""
        return torch.stack([self.q1(obs, actions), self.q2(obs, actions)])


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


def critic_loss(
    critic: Critic | TwinCritic,
    target_actor: Actor,
    target_critic: Critic | TwinCritic,
    batch: Transitions,
    gamma: float,
    policy_noise: float = 0.0,
    noise_clip: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean squared TD error of each of the critic's estimates, summed: ``(loss, Q1)``, Q1 the
    first estimate of each transition (detached; the trainer logs its mean, once an iteration).

    The target's next action is the target actor's, with TD3's smoothing where ``policy_noise`` > 0:
    Gaussian noise of std ``policy_noise``, clipped to +-``noise_clip`` (both fractions of the
    action half-range), added, and the sum clipped to the bounds. Its value is the smallest of the
    target critic's estimates (a single critic's own for DDPG)."""
    with torch.no_grad():
        next_actions = target_actor(batch.next_obs)
        if policy_noise > 0:
            scale, middle = target_actor.action_scale, target_actor.action_bias
            noise = (torch.randn_like(next_actions) * policy_noise).clamp(-noise_clip, noise_clip)
            next_actions = (next_actions + noise * scale).clamp(middle - scale, middle + scale)
        estimates = target_critic.values(batch.next_obs, next_actions).float()
        # A single critic's one estimate is its own smallest: no reduction kernel for it.
        next_q = estimates[0] if len(estimates) == 1 else estimates.amin(0)
        target = td_target(batch.rewards, batch.terminated, next_q, gamma)
    q = critic.values(batch.obs, batch.actions).float()
    errors = ((q - target) ** 2).mean(-1)
    # A single critic's error is the loss as it is (a view: no reduction kernel, forward or backward).
    loss = errors.sum() if len(errors) > 1 else errors.reshape(())
    return loss, q[0].detach()


def actor_loss(actor: Actor, critic: Critic | TwinCritic, obs: torch.Tensor) -> torch.Tensor:
    """``-Q(s, mu(s)).mean()`` (Q1's for a :class:`TwinCritic`)."""
    return -critic(obs, actor(obs)).float().mean()


def update_critic(
    critic: Critic | TwinCritic,
    critic_optimizer: Optimizer,
    target_actor: Actor,
    target_critic: Critic | TwinCritic,
    batch: Transitions,
    gamma: float,
    average_gradients=None,
    *,
    policy_noise: float = 0.0,
    noise_clip: float = 0.5,
    loss_fn=critic_loss,
    autocast=contextlib.nullcontext,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step on :func:`critic_loss` (``loss_fn``, which the trainer may have compiled, run under
    ``autocast()``); only the critic's parameters move. ``(loss, Q1)`` as :func:`critic_loss`'s.
    ``average_gradients()``, if given, runs between the backward pass and the step (ranks). The
    gradients are dropped before the backward pass, which then writes them (capture.py's
    "Gradients")."""
    with autocast():
        loss, q = loss_fn(critic, target_actor, target_critic, batch, gamma, policy_noise, noise_clip)
    critic_optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if average_gradients is not None:
        average_gradients()
    critic_optimizer.step()
    return loss.detach(), q


def update_actor(
    actor: Actor,
    actor_optimizer: Optimizer,
    critic: Critic | TwinCritic,
    obs: torch.Tensor,
    average_gradients=None,
    *,
    loss_fn=actor_loss,
    autocast=contextlib.nullcontext,
) -> torch.Tensor:
    """One step on :func:`actor_loss` (``loss_fn`` and ``autocast`` as for :func:`update_critic`);
    only the actor's parameters move. Returns the loss. ``average_gradients`` as for
    :func:`update_critic`.

    The critic is a fixed function here: its parameters stop requiring gradients while the loss's
    graph is built, so the backward pass computes (and leaves) no critic gradients at all, rather
    than gradients that would have to be zeroed before the critic's own step.
    """
    critic.requires_grad_(False)
    try:
        with autocast():
            loss = loss_fn(actor, critic, obs)
    finally:
        critic.requires_grad_(True)
    actor_optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if average_gradients is not None:
        average_gradients()
    actor_optimizer.step()
    return loss.detach()


@dataclass
class Run:
    """One rank's pieces of a DDPG run (see :func:`start`), and what changes as it goes, each a
    tensor updated in place (the captured phases read and write the same tensors at every replay):
    the observations, the exploration noise's state, the last losses."""

    context: Context
    config: DDPGConfig
    first: int  # the iteration to start from (> 0 when resumed)
    iterations: int
    envs: GpuVectorEnv
    obs: torch.Tensor  # the envs' current observations
    actor: Actor
    critic: Critic | TwinCritic
    target_actor: Actor
    target_critic: Critic | TwinCritic
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
    critic_loss_fn: object  # critic_loss, compiled with config.compile
    actor_loss_fn: object  # actor_loss, likewise

    @property
    def device(self) -> torch.device:
        return self.envs.device

    @property
    def steps_per_iteration(self) -> int:
        """Env steps of all ranks in one iteration."""
        return self.config.num_envs * self.context.world_size

    @property
    def first_learning_iteration(self) -> int:
        """The first iteration whose env steps so far reach ``learning_starts``."""
        return -(-self.config.learning_starts // self.steps_per_iteration)

    def learns(self, iteration: int) -> bool:
        """Whether ``iteration`` acts with the actor and takes gradient steps (not before ``learning_starts``)."""
        return iteration >= self.first_learning_iteration

    def actor_steps(self, iteration: int) -> tuple[bool, ...]:
        """Which of ``iteration``'s gradient steps also update the actor and the targets: every
        ``policy_frequency``-th critic update of the run, counted from the first."""
        config = self.config
        done = (iteration - self.first_learning_iteration) * config.gradient_steps
        return tuple((done + k + 1) % config.policy_frequency == 0 for k in range(config.gradient_steps))

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

    def restart(self, iteration: int) -> None:
        """Go on from ``iteration`` with the random numbers and fresh episodes that :func:`start` gives
        a run resumed there (for a state restored after the start, e.g. by Lightning)."""
        self.first = iteration
        torch.manual_seed(self.context.seed(self.config.seed, iteration))
        obs, _ = self.envs.reset(seed=self.context.env_seed(self.config.seed, iteration, self.config.num_envs))
        self.obs.copy_(obs)
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
        captured=config.cuda_graph,
    )
    device = envs.device
    obs_size = envs.single_observation_space.shape[0]
    actor = Actor(obs_size, envs.single_action_space, config.hidden).to(device)
    action_size = actor.action_scale.numel()
    critic = (TwinCritic if config.twin_critics else Critic)(obs_size, action_size, config.hidden).to(device)
    nan = torch.full((), float("nan"), device=device)
    in_graph = config.graph_allreduce_setting(multi_agent=False)
    return Run(
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
        # Float learning rates, also when captured: they never change, so a graph may keep them.
        actor_optimizer=Adam(actor.parameters(), lr=config.actor_lr),
        critic_optimizer=Adam(critic.parameters(), lr=config.critic_lr),
        average_actor_gradients=GradientAverager(actor.parameters(), context, in_graph=in_graph),
        average_critic_gradients=GradientAverager(critic.parameters(), context, in_graph=in_graph),
        replay=ReplayBuffer(config.buffer_size, obs_size, action_size, device),
        stats=EpisodeStats(config.num_envs, device),
        low=actor.action_bias - actor.action_scale,
        high=actor.action_bias + actor.action_scale,
        noise_std=config.exploration_noise * actor.action_scale,
        ou_state=torch.zeros((config.num_envs, action_size), device=device),
        losses={"critic_loss": nan.clone(), "actor_loss": nan.clone(), "q_value": nan.clone()},
        critic_loss_fn=config.compiled(critic_loss),
        actor_loss_fn=config.compiled(actor_loss),
    )


def collect(run: Run, explore: bool) -> dict:
    """One vector step: every env acts (uniform random actions with ``explore``, before
    ``learning_starts``; else the actor's with exploration noise), and the transitions go into the
    replay. Returns no outputs (a phase's)."""
    config, low, high = run.config, run.low, run.high
    if explore:
        actions = low + (high - low) * torch.rand((config.num_envs, *low.shape), device=run.device)
    else:
        with torch.no_grad(), config.autocast(run.device):
            actions = run.actor(run.obs).float()
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
    run.stats.add_step(rewards, done)
    if config.exploration == "ou":
        run.ou_state.mul_(~done.unsqueeze(-1))  # a new episode starts its noise afresh
    run.obs.copy_(next_obs)  # the env overwrites its buffers at the next step
    return {}


def update(run: Run, actor_steps: tuple[bool, ...]) -> dict[str, torch.Tensor]:
    """An iteration's gradient steps: a critic step each, followed by the actor's step and the
    targets' soft update where ``actor_steps`` says. The batches of all of them are drawn at once
    (the replay does not change between them). Returns the run's losses, the last steps' copied in."""
    config, batch_size = run.config, run.config.batch_size
    autocast = functools.partial(config.autocast, run.device)
    drawn = run.replay.sample(batch_size * len(actor_steps))
    last_actor_loss = None
    for k, with_actor in enumerate(actor_steps):
        batch = Transitions(*(field[k * batch_size : (k + 1) * batch_size] for field in drawn))
        loss, q1 = update_critic(
            run.critic,
            run.critic_optimizer,
            run.target_actor,
            run.target_critic,
            batch,
            config.gamma,
            run.average_critic_gradients,
            policy_noise=config.policy_noise,
            noise_clip=config.noise_clip,
            loss_fn=run.critic_loss_fn,
            autocast=autocast,
        )
        if with_actor:
            last_actor_loss = update_actor(
                run.actor,
                run.actor_optimizer,
                run.critic,
                batch.obs,
                run.average_actor_gradients,
                loss_fn=run.actor_loss_fn,
                autocast=autocast,
            )
            # Both targets in one foreach kernel.
            soft_update(
                nn.ModuleList([run.target_actor, run.target_critic]), nn.ModuleList([run.actor, run.critic]), config.tau
            )
    # In place, once an iteration: the losses are tensors of the run, whichever graph ran last.
    run.losses["critic_loss"].copy_(loss)
    run.losses["q_value"].copy_(q1.mean())
    if last_actor_loss is not None:
        run.losses["actor_loss"].copy_(last_actor_loss)
    return run.losses


class Phases:
    """A run's iterations: :meth:`collect` (acting, the env step, the replay's insert), then
    :meth:`update` (the iteration's gradient steps), each a :class:`GraphedPhase`: a CUDA graph on
    CUDA with ``config.cuda_graph``, else run as it is. The graphs: acting at random (before
    ``learning_starts``), acting with the actor, and one update per pattern of actor steps
    (:meth:`Run.actor_steps`), each captured when first needed."""

    def __init__(self, run: Run):
        self.run = run
        self.iteration = run.first  # the iteration collected last
        self.explore, self.act = (
            GraphedPhase(functools.partial(collect, run, explore), run.device, run.config.cuda_graph)
            for explore in (True, False)
        )
        self.updates: dict[tuple[bool, ...], GraphedPhase] = {}

    def collect(self, iteration: int) -> None:
        """Iteration ``iteration``'s vector step."""
        self.iteration = iteration
        (self.act if self.run.learns(iteration) else self.explore)()

    def update(self) -> dict[str, torch.Tensor]:
        """The gradient steps of the iteration collected last (none before ``learning_starts``);
        returns the run's losses."""
        run = self.run
        if run.learns(self.iteration):
            pattern = run.actor_steps(self.iteration)
            if pattern not in self.updates:
                self.updates[pattern] = GraphedPhase(
                    functools.partial(update, run, pattern), run.device, run.config.cuda_graph
                )
            self.updates[pattern]()
        return run.losses

    @property
    def graphed(self) -> list[GraphedPhase]:
        """Every phase, for :meth:`GraphedPhase.release`."""
        return [self.explore, self.act, *self.updates.values()]


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
    """Train a fresh :class:`Actor` (and its critic, or TD3's pair with a :class:`TD3Config`) on
    ``env_id``; returns ``(actor, history)``, the history as ``ppo.train``'s (env steps, seconds,
    mean return of the episodes finished since the last log, and the last losses: NaN before the
    first update). ``log_every`` counts iterations (vector steps of ``num_envs`` env steps).
    ``save`` and ``resume`` as for ``ppo.train``; the state includes the replay buffer's items.

    Under ``torchrun`` (see ``ppo.train``) each rank keeps its own replay of its own envs'
    transitions and samples ``batch_size`` of them per gradient step (the averaged gradient is of
    ``batch_size * world_size`` transitions); ``learning_starts`` and ``total_timesteps`` count the
    env steps of all ranks. A checkpoint holds rank 0's replay, which every rank of a resumed run
    loads: the ranks' buffers start alike and part as new transitions come in."""
    run = start(env_id, config, device=device, backend=backend, resume=resume)
    phases = Phases(run)
    context = run.context
    history = restore(resume, **run.parts)
    context.broadcast_parameters(run.actor, run.critic, run.target_actor, run.target_critic)
    if resume is None and save is not None and context.is_main:  # the run's starting point
        save(training_state(0, history, context.world_size, **run.parts))
    begin = time.perf_counter() - (history[-1]["seconds"] if history else 0.0)
    with config.matmul_precision():
        for iteration in range(run.first, run.iterations):
            phases.collect(iteration)
            losses = phases.update()
            if (iteration + 1) % log_every == 0 or iteration + 1 == run.iterations:
                history.append(
                    log_entry(
                        (iteration + 1) * run.steps_per_iteration,
                        begin,
                        # Its losses are NaN until its first update (by design); a NaN loss after it makes
                        # the parameters NaN at that update, where the check sees it.
                        EntryNumbers([run.stats], losses, networks=(run.actor, run.critic), finite_losses=False),
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
