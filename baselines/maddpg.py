"""MADDPG (Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
Environments", arXiv:1706.02275) for games with ``Box`` actions, everything on the env's device:
decentralised deterministic actors, centralised critics, a replay of joint transitions.

A config maps the game's groups to policies as the multi-agent on-policy trainer's does
(:mod:`multi_agent`: groups that share a policy share its networks; a policy's agents are its
groups side by side). Each policy has

- an **actor** ``mu(o_i)``: :class:`ddpg.Actor`, an MLP on the agent's own observation whose tanh
  output is scaled into the ``Box``; acting (exploration, evaluation) reads nothing else;
- a **centralised critic** ``Q_i(s, a_1, ..., a_N)`` (:class:`JointCritic`): an MLP on the game's
  global state (``GpuParallelEnv.state()``), every agent's action (the joint action, agents in the
  game's order, each with its group's width) and, where the policy serves several agents, agent
  ``i``'s one-hot id among them (as MAPPO's critic, :class:`models.CentralisedCritic`); one value
  per agent of the policy, for that agent's own reward; with ``twin_critics``, two (TD3's
  clipped double Q, Fujimoto et al. 2018);
- target copies of both, moved by soft (Polyak) updates.

Each iteration steps every game once (uniform random actions during ``learning_starts``, then the
actors' with Gaussian noise, clipped into the space) and writes the ``num_envs`` joint transitions
into a device replay (:class:`joint_replay.JointReplay`): the state, every policy's observations,
the joint action, every agent's reward, terminated flag and presence (``active`` before the step),
and the successors. The game runs with SAME_STEP autoreset, so where a game ended the successors
are its final observations and final state (``final_state()``). Then ``gradient_steps`` times: one
batch of joint transitions is drawn (the same items for every policy, as Lowe et al.'s code
draws), the target actors give every agent's next action, and each trained policy's critic steps
on ``(Q_i(s, a) - y_i)^2`` with ``y_i = r_i + gamma * Q'_i(s', mu'(o'))``, bootstrapped unless
agent ``i`` *terminated* (a truncated game's final state is as real as any other); every
``policy_frequency``-th step each actor steps on ``-Q_i(s, a_1, ..., mu(o_i), ..., a_N)``: agent
``i``'s stored action replaced by its actor's, the others' as stored (plus a small penalty on the
actor's pre-tanh outputs, as Lowe et al.'s code has); then the targets follow.
Every mean is over the agents present before the step.

The critic's first layer splits as MAPPO's does: ``W [s; a; onehot(i)] = W_s s + W_a a + W[:, i]``.
So ``W_s s + W_a a`` is computed once per transition, each agent adds its id's column, and the
actor's loss swaps agent ``i``'s action by adding ``W_a[:, cols_i] (mu(o_i) - a_i)``: one pass of the
state per transition, not one per agent.

Nothing synchronises with the host inside an iteration: the replay's position and fill are device
tensors, the random numbers are drawn on the device. On CUDA (``cuda_graph``) the acting step, the
random acting step and the updates are each replayed as a CUDA graph (:class:`capture.GraphedPhase`);
the updates' graph depends on where the actor's delay falls (one graph per offset of the
``policy_frequency`` cycle).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from gpu_marl_envs.baselines.capture import GraphedPhase, make_optimizer
from gpu_marl_envs.baselines.checkpoint import CheckpointError, fitting, restore, resumed_iteration, training_state
from gpu_marl_envs.baselines.ddpg import Actor, relu_mlp, soft_update, td_target
from gpu_marl_envs.baselines.distributed import Context, setup
from gpu_marl_envs.baselines.joint_replay import JointReplay
from gpu_marl_envs.baselines.maddpg_config import MADDPGConfig, PolicySettings, box_spaces
from gpu_marl_envs.baselines.models import layer
from gpu_marl_envs.baselines.multi_agent import (
    PolicyInputs,
    game_params,
    log_entry,
    masked_mean,
    policy_slots,
    print_entry,
    reported_group,
    training_env,
)
from gpu_marl_envs.baselines.optimizers import Adam
from gpu_marl_envs.baselines.rollout import EntryNumbers, EpisodeStats, PhaseTimes
from torch import nn

from gpu_marl_envs.parallel_env import GpuParallelEnv, get_game

# -- networks --------------------------------------------------------------------------------------


class JointCritic(nn.Module):
    """``Q_i(s, a)`` for the ``agents`` agents ``i`` of one policy: a ReLU MLP on the global state
    ``s`` (``(S,)``), the joint action ``a`` (``(D,)``, every agent's) and, where the policy has
    several agents, agent ``i``'s one-hot id; ``columns`` (int64 ``(agents, d)``) are the places of
    each of its agents' actions in ``a``. The first layer is one layer on the concatenation
    (``input.weight`` is ``(hidden[0], S + D + ids)``), split in the forward pass (module docstring)."""

    def __init__(self, state_size: int, action_size: int, columns: torch.Tensor, hidden: tuple[int, ...] = (64, 64)):
        super().__init__()
        agents = columns.shape[0]
        self.state_size, self.action_size = state_size, action_size
        self.ids = agents if agents > 1 else 0  # one agent: no id
        self.register_buffer("columns", columns.clone(), persistent=False)
        self.input = layer(state_size + action_size + self.ids, hidden[0])
        self.rest = nn.Sequential(nn.ReLU(), *relu_mlp(hidden[0], hidden[1:], 1, last_gain=1.0))

    def forward(self, state: torch.Tensor, actions: torch.Tensor, own: torch.Tensor | None = None) -> torch.Tensor:
        """Every agent's value ``(B, agents)`` of ``state`` ``(B, S)`` and ``actions`` ``(B, D)``;
        with ``own`` (``(B, agents, d)``), agent ``i``'s value has its own action replaced by
        ``own[:, i]`` (the others' kept): MADDPG's actor loss."""
        inputs = self.state_size + self.action_size
        weight = self.input.weight
        hidden = F.linear(torch.cat([state, actions], dim=-1), weight[:, :inputs], self.input.bias).unsqueeze(-2)
        if own is not None:
            # W_a[:, cols_i] (own_i - a_i): the change of agent i's action, through its own columns.
            own_weight = weight[:, self.state_size : inputs][:, self.columns]  # (H, agents, d)
            hidden = hidden + torch.einsum("bad,had->bah", own - actions[:, self.columns], own_weight)
        if self.ids:
            hidden = hidden + weight[:, inputs:].t()  # (agents, H): each agent's id column
        return self.rest(hidden).squeeze(-1)


@dataclass
class Layout:
    """Where each group's agents and actions lie: the joint action is the groups' actions in the
    game's order, each agent's ``d`` values (its group's width) in turn."""

    slots: dict[str, dict[str, slice]]  # policy -> {group: its agents' slice of the policy's agents}
    groups: list[tuple[str, str]]  # (group, policy) in the game's order
    columns: dict[str, torch.Tensor]  # policy -> int64 (agents, d): its agents' places in the joint action
    action_size: int  # D

    @classmethod
    def of(cls, env_id: str, config: MADDPGConfig) -> Layout:
        action_spaces = {name: action for name, (_, action) in box_spaces(env_id, config).items()}
        slots = policy_slots(env_id, config)
        game = get_game(env_id)
        groups, offset, places = [], 0, {name: [] for name in slots}
        for group, ids in game.agent_groups(game_params(env_id, config)).items():
            name = config.groups[group]
            width = action_spaces[name].shape[0]
            groups.append((group, name))
            places[name] += [list(range(offset + k * width, offset + (k + 1) * width)) for k in range(len(ids))]
            offset += len(ids) * width
        columns = {name: torch.tensor(cols, dtype=torch.int64) for name, cols in places.items()}
        return cls(slots, groups, columns, offset)

    def joint(self, actions: dict[str, torch.Tensor]) -> torch.Tensor:
        """The joint action ``(B, D)`` of each policy's ``(B, agents, d)`` actions."""
        return torch.cat([actions[name][:, self.slots[name][group]].flatten(1) for group, name in self.groups], dim=1)


def make_actors(env_id: str, config: MADDPGConfig, device=None) -> dict[str, Actor]:
    """A fresh :class:`ddpg.Actor` per policy on ``device``."""
    return {
        name: Actor(observation_space.shape[0], action_space, config.policies[name].hidden).to(device)
        for name, (observation_space, action_space) in box_spaces(env_id, config).items()
    }


def load_actors(checkpoint: dict, device) -> tuple[dict[str, Actor], str, MADDPGConfig]:
    """The actors, game and config of a (loaded) maddpg checkpoint of ``gpu-marl-train``."""
    config = MADDPGConfig.from_dict(checkpoint["config"])
    actors = make_actors(checkpoint["env"], config, device)
    for name, actor in actors.items():
        if f"policy/{name}" not in checkpoint:
            raise CheckpointError(f"the checkpoint holds no actor of policy {name!r} (policy/{name})")
        with fitting(f"the checkpoint's policy {name!r}"):
            actor.load_state_dict(checkpoint[f"policy/{name}"])
    return actors, checkpoint["env"], config


# -- a run -----------------------------------------------------------------------------------------


@dataclass
class Policy:
    """One policy's networks, targets and optimisers (optimisers None for an untrained one), and its
    action bounds."""

    actor: Actor
    critics: nn.ModuleList  # one critic, or two with twin_critics
    target_actor: Actor
    target_critics: nn.ModuleList
    actor_optimizer: Adam | None
    critic_optimizer: Adam | None
    settings: PolicySettings

    @property
    def low(self) -> torch.Tensor:
        return self.actor.action_bias - self.actor.action_scale

    @property
    def high(self) -> torch.Tensor:
        return self.actor.action_bias + self.actor.action_scale


@dataclass
class Run:
    """One run's pieces (see :func:`start`), and what changes as it goes."""

    config: MADDPGConfig
    context: Context
    first: int  # the iteration to start from (> 0 when resumed)
    iterations: int
    env: GpuParallelEnv
    layout: Layout
    policies: dict[str, Policy]
    inputs: dict[str, PolicyInputs]
    replay: JointReplay
    stats: dict[str, EpisodeStats]  # group -> its episode returns
    losses: dict[str, torch.Tensor]  # <policy>/<term> -> the last gradient step's (NaN before the first)
    updates: int = 0  # gradient steps taken (the actors' delayed updates count them)

    @property
    def device(self) -> torch.device:
        return self.env.device

    @property
    def actors(self) -> dict[str, Actor]:
        return {name: policy.actor for name, policy in self.policies.items()}

    @property
    def trained(self) -> dict[str, Policy]:
        return {name: policy for name, policy in self.policies.items() if policy.settings.train}

    @property
    def parts(self) -> dict:
        """What a checkpoint holds besides the iteration and history."""
        parts: dict = {"replay": self.replay}
        for name, policy in self.policies.items():
            parts[f"policy/{name}"] = policy.actor
            parts[f"critic/{name}"] = policy.critics
            parts[f"target_actor/{name}"] = policy.target_actor
            parts[f"target_critic/{name}"] = policy.target_critics
            if policy.settings.train:
                parts[f"actor_optimizer/{name}"] = policy.actor_optimizer
                parts[f"critic_optimizer/{name}"] = policy.critic_optimizer
        return parts

    def begin_at(self, iteration: int) -> None:
        """Count the gradient steps taken before ``iteration`` (the actors' delay counts them)."""
        self.first = iteration
        learning = max(0, iteration - math.ceil(self.config.learning_starts / self.config.num_envs))
        self.updates = learning * self.config.gradient_steps


def replay_fields(env_id: str, config: MADDPGConfig) -> dict:
    """The replay's fields for ``config``'s game: name -> (shape per joint transition, dtype)."""
    layout = Layout.of(env_id, config)
    state = tuple(get_game(env_id).state_space(game_params(env_id, config)).shape)
    fields = {"state": (state, torch.float32), "next_state": (state, torch.float32)}
    fields["actions"] = ((layout.action_size,), torch.float32)
    for name, (observation_space, _) in box_spaces(env_id, config).items():
        agents = len(layout.columns[name])
        fields[f"obs/{name}"] = ((agents, *observation_space.shape), torch.float32)
        fields[f"next_obs/{name}"] = ((agents, *observation_space.shape), torch.float32)
        fields[f"reward/{name}"] = ((agents,), torch.float32)
        fields[f"weight/{name}"] = ((agents,), torch.float32)
        fields[f"terminated/{name}"] = ((agents,), torch.bool)
    return fields


def replay_bytes(env_id: str, config: MADDPGConfig) -> int:
    """Bytes of the replay's storage, allocated whole when a run starts (``gpu-marl-train`` checks
    them against the device's memory before the run)."""
    fields = replay_fields(env_id, config).values()
    return config.buffer_size * sum(math.prod(shape) * dtype.itemsize for shape, dtype in fields)


def start(
    env_id: str, config: MADDPGConfig, *, device=None, backend: str | None = None, resume: dict | None = None
) -> Run:
    """Everything a run needs before its first iteration."""
    context = setup(device)
    if context.world_size > 1:
        raise ValueError("maddpg trains in one process: run it without torchrun (--nproc-per-node)")
    box_spaces(env_id, config)  # a game whose actions are not Box: one line, before anything is made
    first = resumed_iteration(resume, 1, config.num_envs)
    torch.manual_seed(context.seed(config.seed, first))
    env = training_env(env_id, config, context.device, backend)
    device = env.device
    layout = Layout.of(env_id, config)
    actors = make_actors(env_id, config, device)
    state_size = env.state_space.shape[0]
    policies = {}
    for name, actor in actors.items():
        policy_settings = config.policies[name]
        critics = nn.ModuleList(
            JointCritic(state_size, layout.action_size, layout.columns[name], policy_settings.hidden)
            for _ in range(2 if config.twin_critics else 1)
        ).to(device)

        def optimizer(module, rate):
            # The learning rate as a device tensor on CUDA whether captured or not: eager and
            # captured runs then take the same (capturable) Adam update, bit for bit.
            return make_optimizer(Adam, module.parameters(), rate, device, captured=device.type == "cuda")

        trained = policy_settings.train
        policies[name] = Policy(
            actor=actor,
            critics=critics,
            # The targets start as copies and only ever move by soft updates: no optimiser, no gradients.
            target_actor=copy.deepcopy(actor).requires_grad_(False),
            target_critics=copy.deepcopy(critics).requires_grad_(False),
            actor_optimizer=optimizer(actor, policy_settings.actor_lr) if trained else None,
            critic_optimizer=optimizer(critics, policy_settings.critic_lr) if trained else None,
            settings=policy_settings,
        )
    obs, infos = env.reset_groups(seed=context.env_seed(config.seed, first, config.num_envs))
    nan = float("nan")
    run = Run(
        config=config,
        context=context,
        first=first,
        iterations=context.iterations(config.total_timesteps, config.num_envs),
        env=env,
        layout=layout,
        policies=policies,
        inputs={name: PolicyInputs.of(groups, obs, infos) for name, groups in layout.slots.items()},
        replay=JointReplay(config.buffer_size, replay_fields(env_id, config), device),
        stats={group: EpisodeStats(config.num_envs, device) for group in config.groups},
        losses={
            f"{name}/{term}": torch.full((), nan, device=device)
            for name in policies
            if config.policies[name].train
            for term in ("critic_loss", "actor_loss", "q_value")
        },
    )
    run.begin_at(first)
    return run


# -- one iteration ---------------------------------------------------------------------------------


def act(run: Run, random: bool) -> dict:
    """Step every game once and write the joint transitions into the replay: uniform random actions
    (``random``), or each actor's with Gaussian noise, clipped into the space."""
    env, replay, layout, config = run.env, run.replay, run.layout, run.config
    slots = replay.slots(config.num_envs)
    replay.write("state", slots, env.state())
    actions = {}
    for name, policy in run.policies.items():
        inputs = run.inputs[name]
        replay.write(f"obs/{name}", slots, inputs.obs)
        replay.write(f"weight/{name}", slots, inputs.active)
        low, high = policy.low, policy.high
        if random:
            actions[name] = low + (high - low) * torch.rand((*inputs.obs.shape[:2], *low.shape), device=run.device)
        else:
            with torch.no_grad():
                mean = policy.actor(inputs.obs)
            noise = config.exploration_noise * policy.actor.action_scale * torch.randn_like(mean)
            actions[name] = (mean + noise).clamp(low, high)
    replay.write("actions", slots, layout.joint(actions))
    group_actions = {group: actions[name][:, layout.slots[name][group]] for group, name in layout.groups}
    obs, rewards, terminated, _, infos = env.step_groups(group_actions)
    game_over = next(iter(infos.values()))["_final_obs"]  # per game: the same in every group's infos
    replay.write("next_state", slots, torch.where(game_over[:, None], env.final_state(), env.state()))
    for name, groups in layout.slots.items():
        successors = [torch.where(game_over[:, None, None], infos[g]["final_obs"], obs[g]) for g in groups]
        replay.write(f"next_obs/{name}", slots, torch.cat(successors, dim=1))
        replay.write(f"reward/{name}", slots, torch.cat([rewards[g] for g in groups], dim=1))
        replay.write(f"terminated/{name}", slots, torch.cat([terminated[g] for g in groups], dim=1))
        run.inputs[name].refresh(obs, infos)  # the env overwrites its buffers at the next step
    for group, group_stats in run.stats.items():
        # The mean over the group's agents of their episode sums: the mean return per agent.
        group_stats.add(rewards[group].mean(-1)[None], game_over[None])
    replay.advance(config.num_envs)
    return {}


def next_actions(run: Run, batch: dict) -> dict[str, torch.Tensor]:
    """Every policy's target actor's actions on the batch's successor observations, smoothed by
    clipped Gaussian noise where ``policy_noise`` > 0 (TD3)."""
    config, actions = run.config, {}
    for name, policy in run.policies.items():
        action = policy.target_actor(batch[f"next_obs/{name}"])
        if config.policy_noise > 0:
            noise = (torch.randn_like(action) * config.policy_noise).clamp(-config.noise_clip, config.noise_clip)
            action = (action + noise * policy.actor.action_scale).clamp(policy.low, policy.high)
        actions[name] = action
    return actions


def clipped_step(optimizer: Adam, loss: torch.Tensor, module: nn.Module, max_grad_norm: float) -> None:
    optimizer.zero_grad(set_to_none=True)  # written, not accumulated: capture.py's "Gradients"
    loss.backward()
    if math.isfinite(max_grad_norm):
        torch.nn.utils.clip_grad_norm_(module.parameters(), max_grad_norm)
    optimizer.step()


def update_critics(run: Run, name: str, batch: dict, next_joint: torch.Tensor) -> None:
    """One step of policy ``name``'s critics on the squared TD error over its agents present."""
    policy, config = run.policies[name], run.config
    weights = batch[f"weight/{name}"]
    with torch.no_grad():
        next_q = torch.stack([critic(batch["next_state"], next_joint) for critic in policy.target_critics]).amin(0)
        target = td_target(batch[f"reward/{name}"], batch[f"terminated/{name}"], next_q, config.gamma)
    values = [critic(batch["state"], batch["actions"]) for critic in policy.critics]
    loss = sum(masked_mean((q - target) ** 2, weights) for q in values)
    clipped_step(policy.critic_optimizer, loss, policy.critics, policy.settings.max_grad_norm)
    run.losses[f"{name}/critic_loss"].copy_(loss.detach())
    run.losses[f"{name}/q_value"].copy_(masked_mean(values[0].detach(), weights))


def update_actor(run: Run, name: str, batch: dict) -> None:
    """One step of policy ``name``'s actor on ``-Q_i(s, a_1, ..., mu(o_i), ..., a_N)``, plus
    ``preactivation_penalty`` times the mean square of its pre-tanh outputs. The critic
    is a fixed function here: its parameters stop requiring gradients while the loss's graph is
    built, so the backward pass computes no critic gradients at all (:func:`ddpg.update_actor`)."""
    policy, weights = run.policies[name], batch[f"weight/{name}"]
    actor, critic = policy.actor, policy.critics[0]
    critic.requires_grad_(False)
    try:
        # ddpg.Actor's forward, with its pre-activations kept for the penalty.
        pre = actor.net(batch[f"obs/{name}"])
        own = torch.tanh(pre) * actor.action_scale + actor.action_bias
        loss = -masked_mean(critic(batch["state"], batch["actions"], own), weights)
        loss = loss + policy.settings.preactivation_penalty * masked_mean(pre.square().mean(-1), weights)
    finally:
        critic.requires_grad_(True)
    clipped_step(policy.actor_optimizer, loss, policy.actor, policy.settings.max_grad_norm)
    run.losses[f"{name}/actor_loss"].copy_(loss.detach())


def update(run: Run, offset: int) -> dict:
    """``gradient_steps`` gradient steps, the first being step ``offset + 1`` of the actors'
    ``policy_frequency`` cycle: each draws one batch for every policy, steps each trained policy's
    critics, and, where the cycle completes, each trained actor and then every trained target."""
    config, trained = run.config, run.trained
    for k in range(config.gradient_steps):
        index = run.replay.sample(config.batch_size)
        batch = {name: run.replay.take(name, index) for name in run.replay.fields}
        with torch.no_grad():
            next_joint = run.layout.joint(next_actions(run, batch))
        for name in trained:
            update_critics(run, name, batch, next_joint)
        if (offset + k + 1) % config.policy_frequency == 0:
            for name in trained:
                update_actor(run, name, batch)
            for policy in trained.values():
                soft_update(policy.target_actor, policy.actor, config.tau)
                soft_update(policy.target_critics, policy.critics, config.tau)
    return {}


class Phases:
    """A run's iterations as phases (:class:`GraphedPhase`: CUDA graphs on CUDA with
    ``cuda_graph``): the random acting step, the acting step, and the updates (one phase per offset
    in the actors' ``policy_frequency`` cycle, made when first needed), with their seconds."""

    def __init__(self, run: Run):
        self.run = run
        enabled = run.config.cuda_graph
        self.act = {random: GraphedPhase(lambda r=random: act(run, r), run.device, enabled) for random in (True, False)}
        self.updates: dict[int, GraphedPhase] = {}
        self.times = PhaseTimes(run.device)
        # Both phases in every history entry, the updates before ``learning_starts`` too (metrics
        # files keep the first entry's columns).
        self.times.seconds.update(act=0.0, update=0.0)

    def iteration(self, iteration: int) -> None:
        """Iteration ``iteration``: an acting step, then the updates once ``learning_starts`` is past."""
        run, config = self.run, self.run.config
        learning = iteration * config.num_envs >= config.learning_starts
        with self.times("act"):
            self.act[not learning]()
        if not learning or not run.trained:
            return
        offset = run.updates % config.policy_frequency
        if offset not in self.updates:
            self.updates[offset] = GraphedPhase(lambda: update(run, offset), run.device, config.cuda_graph)
        with self.times("update"):
            self.updates[offset]()
        run.updates += config.gradient_steps


# -- training --------------------------------------------------------------------------------------


def train(
    env_id: str,
    config: MADDPGConfig | None = None,
    *,
    device=None,
    backend: str | None = None,
    log_every: int = 100,
    log=print_entry,
    save=None,
    resume: dict | None = None,
):
    """Train the config's policies on the game ``env_id``; returns ``(actors, history)``: each
    policy's :class:`ddpg.Actor` (``multi_agent.evaluate`` takes them as policies) and a history as
    :func:`multi_agent.train`'s (env steps, seconds, ``mean_return/<group>``, ``mean_return`` of
    :func:`multi_agent.reported_group`, episodes, ``act_seconds``, ``update_seconds``, and each
    trained policy's last ``<policy>/critic_loss``, ``actor_loss``, ``q_value``: NaN before its
    first update). ``log_every`` counts iterations (``num_envs`` env steps each). ``save`` and
    ``resume`` as for ``ppo.train``; the state holds every network, target and optimiser
    (``policy/<name>`` is the actor) and the replay's items. ``config`` defaults to
    :class:`MADDPGConfig`'s defaults."""
    config = config or MADDPGConfig()
    run = start(env_id, config, device=device, backend=backend, resume=resume)
    context = run.context
    history = restore(resume, **run.parts)
    if resume is None and save is not None:  # the run's starting point
        save(training_state(0, history, context.world_size, **run.parts))
    phases = Phases(run)
    groups, reported = list(run.stats), reported_group(config)
    networks = [module for policy in run.policies.values() for module in (policy.actor, policy.critics)]
    begin = time.perf_counter() - (history[-1]["seconds"] if history else 0.0)
    with config.matmul_precision():
        for iteration in range(run.first, run.iterations):
            phases.iteration(iteration)
            if (iteration + 1) % log_every == 0 or iteration + 1 == run.iterations:
                # Its losses are NaN until the first update (by design); a NaN loss after it makes
                # the parameters NaN at that update, where the check sees it.
                numbers = EntryNumbers(
                    list(run.stats.values()), run.losses, phases.times, networks=networks, finite_losses=False
                )
                steps = (iteration + 1) * config.num_envs
                history.append(log_entry(steps, begin, numbers, groups, reported, log, context))
                if save is not None:
                    save(training_state(iteration + 1, history, context.world_size, **run.parts))
    run.env.close()
    return run.actors, history
