"""Per-group policies on a batched multi-agent game (Tag, CovidEconomy), everything on the env's
device: one network per *policy*, each trained with its own algorithm (PPO or A2C) and settings, or
only acting.

A config maps every group of the game to a policy name: ``{"taggers": "taggers", "runners":
"runners"}`` gives each group its own network, ``{"taggers": "shared", "runners": "shared"}`` one
network for both (WarpDrive's ``policy_tag_to_agent_id_map``, by group); groups that share a
policy must have equal observation and action spaces (:func:`policy_spaces`). A policy's agents are
its groups side by side; each ``(env, agent)`` slot is one stream of transitions:

- a transition counts where the agent was in the game *before* the step (``active`` after the
  previous step): tagged runners stay in the arrays, observe zeros and get reward 0 until their game
  resets, and those rows get weight 0 in every mean of the losses (weights rather than selected rows,
  because boolean indexing synchronises with the host);
- ``done`` = that agent's ``terminated | truncated``; an agent truncated while in the game is
  bootstrapped with ``gamma * V(final observation)`` (SAME_STEP autoreset keeps it on the device); a
  terminated one is not.

As in :mod:`rollout`, a rollout step runs only the actors and the env; the update computes the
rollout's log-probabilities and values in one batched pass per policy (the policy has not changed
since), so the rollout stores each step's final observations too.

Action masks (games that have them, e.g. CovidEconomy: a governor in its cooldown may only keep
its level): at each step the policy samples within the env's ``infos[group]["action_mask"]``, and
the rollout stores that mask, so the update's log-probabilities and entropies (PPO's ratio, A2C's
gradient, the entropy bonus) are those of the same masked distribution (see :mod:`models` for why
masked logits are finite). Evaluation's greedy actions are masked too (:func:`greedy_actions`).

Centralised critics (MAPPO; ``PolicyConfig.critic = "centralised"``): the policy's value network
reads the game's global state (``GpuParallelEnv.state()``: by default every agent's observation
side by side, MPE2's ``state()``) and, where the policy serves several agents, the agent's one-hot
id among them (:class:`~gpu_marl_envs.baselines.models.CentralisedActorCritic`); the actor still
reads the agent's own observation, so acting (the rollout, evaluation) needs no state. The rollout
keeps each game's state and final state once per step (:class:`StateRollout`, read on the device
inside the captured rollout), not once per agent: ``2 x num_steps x num_envs x S`` floats for the
run, e.g. 3.1 GB for TagContinuous's default game (``S`` = 7,810) at 1,000 games x 50 steps, beside
the policies' own observations and final observations, which take as much. The critic's first
layer is computed once per game and each agent adds its id's column (the state is never copied per
agent); truncated agents are bootstrapped with ``gamma * V(final state, agent)``.

Box actions (float32 ``(E, N, d)``): the policy is a diagonal Gaussian (:class:`ActorCritic`'s
head for ``Box``); the rollout keeps its samples (their log-probabilities are the samples') and the
env gets them clipped into the space, as the single-agent trainers do; greedy evaluation takes the
mean, clipped.

The losses are :func:`ppo.ppo_loss` and :func:`a2c.a2c_loss` with each mean weighted by that mask
(:func:`masked_ppo_loss`, :func:`masked_a2c_loss`); advantages come from :func:`gae.compute_gae`.
Both algorithms use Adam, as WarpDrive does. Nothing synchronises with the host inside the rollout
or the update; per-group episode returns accumulate on the device and are read at the log interval.

Custom networks: ``train(..., models={"runners": module})`` uses ``module`` for that policy instead
of a fresh :class:`ActorCritic`. It is any ``torch.nn.Module`` with ActorCritic's methods ``sample(obs)
-> action``, ``value(obs)`` and ``action_and_value(obs, action=None) -> (action, log_prob, entropy,
value)`` over any leading batch dimensions (the rollout hands it ``(num_envs, agents, obs_dim)``, the
update ``(rows, obs_dim)``), and ``greedy(obs)`` for :func:`evaluate`; in games with action masks,
``sample``, ``action_and_value`` and ``greedy`` also take ``action_mask=`` (bool, the batch
dimensions then the group's ``n``). It is moved to the env's device. For CUDA graphs it must not
synchronise with the host. A policy with a centralised critic needs a module with
:class:`~gpu_marl_envs.baselines.models.CentralisedActorCritic`'s methods: ``value(state,
rows=None)`` and ``action_and_value(obs, action, action_mask, *, state, rows=None)``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import typing
from dataclasses import asdict, dataclass, field, fields
from typing import Literal

import numpy as np
import torch
from gpu_marl_envs.baselines import fused_a2c_loss, settings, wide_mlp
from gpu_marl_envs.baselines.capture import Branches, CaptureOptions, GraphedPhase, make_optimizer, set_learning_rate
from gpu_marl_envs.baselines.checkpoint import resumed_iteration
from gpu_marl_envs.baselines.distributed import SINGLE, Context, GradientAverager, setup
from gpu_marl_envs.baselines.gae import compute_gae
from gpu_marl_envs.baselines.models import Activation, ActorCritic, CentralisedActorCritic, Distribution
from gpu_marl_envs.baselines.obs_norm import ObservationNormalizer
from gpu_marl_envs.baselines.optimizers import Adam
from gpu_marl_envs.baselines.rollout import (
    EntryNumbers,
    EpisodeStats,
    IterationPhases,
    PhaseTimes,
    RolloutSizes,
    bootstrap_values,
    old_policy_outputs,
    pool_entry,
    set_steps,
    train_iterations,
)
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.parallel_env import GpuParallelEnv, get_game
from gpu_marl_envs.registration import is_game  # noqa: F401  (multi_agent.is_game, for the train command)

Algorithm = Literal["ppo", "a2c"]
ALGORITHMS = typing.get_args(Algorithm)
Critic = Literal["local", "centralised"]
PPO_ONLY = ("clip_coef", "update_epochs", "num_minibatches")
POLICY_NAME = re.compile(r"[A-Za-z0-9_-]+")  # a bare TOML key, and a clean metrics-column prefix


# -- configuration ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyConfig:
    """One policy's algorithm and settings. Defaults: CleanRL's PPO."""

    algorithm: Algorithm = "ppo"
    """``"ppo"`` (clipped surrogate, epochs of minibatches) or ``"a2c"`` (one gradient step per rollout)."""
    train: bool = True
    """False: the policy acts but is never updated (WarpDrive's ``to_train``)."""
    critic: Critic = "local"
    """What the value network reads. ``"local"``: the agent's own observation, as the actor does
    (independent learners: IPPO, IA2C). ``"centralised"``: the game's global state
    (``GpuParallelEnv.state()``) and, where the policy serves several agents, the agent's one-hot
    id among them (MAPPO, Yu et al. 2022; MAA2C with ``algorithm = "a2c"``): centralised training,
    decentralised execution, since acting reads the actor alone (:class:`CentralisedActorCritic`;
    module docstring)."""
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    gae_lambda: float = 0.95
    """1: plain n-step returns (WarpDrive's A2C)."""
    ent_coef: float | tuple[tuple[int, float], ...] = 0.01
    """Weight of the entropy bonus: a number, or a schedule of ``[env_steps, value]`` points
    (TOML ``[[0, 0.5], [50_000_000, 0.05]]``, as WarpDrive's ``entropy_coeff``): linear between
    the points, the first value before them and the last after (the first point's step is 0)."""
    vf_coef: float = 0.5
    """Weight of the value loss ``0.5 * (V - return)^2``; WarpDrive's ``vf_loss_coeff`` weighs the
    squared error without the 1/2, so its value 1 is 2 here."""
    max_grad_norm: float = 0.5
    """Clip the gradient's global norm at this; ``inf`` (TOML ``inf``): no clipping."""
    norm_adv: bool = True
    """Normalise advantages (per minibatch, over the rows that count)."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the actor's and the critic's MLPs."""
    activation: Activation = "tanh"
    """The hidden layers' activation: ``"tanh"`` (CleanRL's, MAPPO's) or ``"relu"`` (WarpDrive's
    ``FullyConnected``)."""
    shared_hidden: bool = False
    """The actor and the critic share their hidden layers, each adding its own output layer on
    them (WarpDrive's ``FullyConnected``: one MLP, policy heads and a value head); the value loss
    (weighted by ``vf_coef``) trains the shared layers too. False: two MLPs (CleanRL's layout).
    A local critic only."""
    normalize_observations: bool = False
    """Scale the observations by their running mean and variance before the networks
    (:mod:`obs_norm`), updated from each rollout's rows that count, before the update."""
    normalize_values: bool = False
    """Train the critic on the returns scaled by their running mean and variance (MAPPO's value
    normalisation, Yu et al. 2022, whose code turns it on for MPE): the critic's outputs are mapped
    back for the advantages and the truncation bootstrap, and each rollout's returns (its rows that
    count) are merged into the statistics before its update. The statistics are the policy's
    ``value_norm`` buffers (:class:`obs_norm.ObservationNormalizer`, one feature, unclipped), saved
    with its weights."""
    clip_coef: float = 0.2
    """PPO only: the ratio's clip range."""
    update_epochs: int = 4
    """PPO only: passes over each rollout."""
    num_minibatches: int = 4
    """PPO only: minibatches per pass (rows of the policy's agents, split as evenly as possible)."""
    max_std: float | tuple[tuple[int, float], ...] = math.inf
    """``Box`` actions only: the bound of the Gaussian's std. ``inf``: free, ``exp`` of a
    parameter starting at 0 (CleanRL's, ``ActorCritic``'s). A number: ``max_std * sigmoid(p)``,
    ``p`` starting at 1, the Gaussian head of MAPPO's code (marlbenchmark/on-policy and HARL's
    ``DiagGaussian``, whose ``std_y_coef`` is this, 0.5 there): the entropy bonus cannot widen the
    std past it. With actions clipped into a box, a free std can grow without bound at no cost to
    the clipped actions (docs/benchmarks/mpe.md). A schedule of ``[env_steps, value]`` points, as
    ``ent_coef``'s (values > 0): the bound moves with the run. The bonus drives ``p`` far into the
    sigmoid's flat end within a few million steps, where the gradient no longer moves it back: from
    then on the std is the bound, and a falling bound is a schedule of the exploration noise (the
    PPO paper's Roboschool runs annealed the log std linearly, Schulman et al. 2017)."""
    distribution: Distribution = "gaussian"
    """``Box`` actions only: the policy's distribution. ``"gaussian"``: a diagonal Gaussian (see
    ``max_std``) whose draws the env clips into the box. ``"beta"``: a Beta distribution per
    component, scaled to the box (finite bounds only): its draws are always inside, so no
    probability piles up on the bounds, where a clipped Gaussian's log-probabilities no longer say
    what the env did (Chou et al. 2017; :meth:`ActorCritic.beta_distribution`); the greedy action
    is its mean. ``max_std`` stays ``inf`` with it."""

    def __post_init__(self):
        if isinstance(self.ent_coef, tuple) and not is_schedule(self.ent_coef):
            raise ValueError(
                f"{type(self).__name__}.ent_coef must be a number >= 0 or a list of [env_steps, value] "
                f"points with steps increasing from 0 and values >= 0, e.g. [[0, 0.5], "
                f"[50_000_000, 0.05]]; got {self.ent_coef!r}"
            )
        if isinstance(self.max_std, tuple) and not (
            is_schedule(self.max_std) and all(value > 0 for _, value in self.max_std)
        ):
            raise ValueError(
                f"{type(self).__name__}.max_std must be a number > 0 (inf: a free std) or a list of "
                f"[env_steps, value] points with steps increasing from 0 and values > 0, e.g. [[0, 0.5], "
                f"[20_000_000, 0.2]]; got {self.max_std!r}"
            )
        if self.shared_hidden and self.critic == "centralised":
            raise ValueError(
                f'{type(self).__name__}.shared_hidden needs critic = "local": a centralised critic reads the '
                "game's state, the actor the agent's observation, so they cannot share layers"
            )
        settings.check(self)

    def entropy_coefficient(self, env_steps: int) -> float:
        """``ent_coef`` after ``env_steps`` env steps of the run."""
        return scheduled(self.ent_coef, env_steps)

    def std_bound(self, env_steps: int = 0) -> float:
        """``max_std`` after ``env_steps`` env steps of the run."""
        return scheduled(self.max_std, env_steps)


def scheduled(setting: float | tuple, env_steps: int) -> float:
    """A setting that is a number or a schedule of ``(env_steps, value)`` points, at ``env_steps``:
    linear between the points, the first value before them and the last after."""
    if not isinstance(setting, tuple):
        return float(setting)
    steps, values = zip(*setting)
    return float(np.interp(env_steps, steps, values))


def set_std_bounds(policies: dict, config: MultiAgentConfig, env_steps: int) -> None:
    """Move the std's bound of each policy whose ``max_std`` is a schedule to its value after
    ``env_steps`` env steps (:meth:`ActorCritic.set_max_std`). Only a bounded Gaussian head has
    one: for another head the schedule, as a number, means nothing."""
    for name, policy in config.policies.items():
        if isinstance(policy.max_std, tuple) and hasattr(policies[name], "std_logit"):
            policies[name].set_max_std(policy.std_bound(env_steps))


def is_schedule(points: tuple) -> bool:
    """Whether ``points`` is a schedule (``ent_coef``'s, ``max_std``'s): ``(env_steps, value)``
    pairs, steps ints increasing from 0, values finite numbers >= 0."""
    pairs = [p for p in points if isinstance(p, tuple) and len(p) == 2]
    if not pairs or len(pairs) != len(points):
        return False
    steps, values = zip(*pairs)
    return (
        steps[0] == 0
        and all(settings.matches(step, int) for step in steps)
        and all(a < b for a, b in zip(steps, steps[1:]))
        and all(settings.matches(v, float) and math.isfinite(v) and v >= 0 for v in values)
    )


def _default_groups() -> dict[str, str]:
    return {"taggers": "taggers", "runners": "runners"}


def _default_policies() -> dict[str, PolicyConfig]:
    return {"taggers": PolicyConfig(), "runners": PolicyConfig()}


@dataclass(frozen=True)
class MultiAgentConfig(RolloutSizes, CaptureOptions):
    """A run: sizes, seed, how phases run (``cuda_graph``, ``compile``), the game's params and the
    group -> policy map. Default: one PPO policy per Tag group."""

    num_envs: int = 64
    """Parallel games of the rollout."""
    num_steps: int = 128
    """Steps per game per rollout."""
    total_timesteps: int = 1_000_000
    """Env steps of the whole run (games x steps, as WarpDrive counts; not agent steps), rounded
    down to whole rollouts."""
    seed: int = 0
    groups: dict[str, str] = field(default_factory=_default_groups)
    """Group -> policy name; every group of the game needs one, and groups may share a policy."""
    policies: dict[str, PolicyConfig] = field(default_factory=_default_policies)
    """Policy name -> its settings; every policy serves at least one group."""
    env_params: dict = field(default_factory=dict)
    """Fields of the game's params dataclass to change from its defaults (the published config)."""

    def __post_init__(self):
        settings.check(self)
        self.check_sizes()
        check_policy_map(self.groups, self.policies, PolicyConfig)

    @classmethod
    def from_dict(cls, tables: dict, algorithm: str | None = None) -> MultiAgentConfig:
        """The config of a TOML-shaped dict: ``hyperparameters`` (the run's fields), ``groups``,
        ``policies`` (name -> settings table) and ``env_params``; ``algorithm`` is the default of the
        policies that do not name theirs. Errors name the table and the fix."""
        unknown = set(tables) - {"hyperparameters", "groups", "policies", "env_params"}
        if unknown:
            raise ValueError(
                f"unknown tables {sorted(unknown)}; expected hyperparameters, groups, policies, env_params"
            )
        run = dict(tables.get("hyperparameters", {}))
        run_keys = {f.name for f in fields(cls)} - {"groups", "policies", "env_params"}
        for key in sorted(set(run) - run_keys):
            hint = (
                f"; {key} is a policy setting: put it in [policies.<name>] (--set policies.<name>.{key}=...)"
                if key in settings.field_types(PolicyConfig)
                else ""
            )
            raise ValueError(f"unknown run setting {key!r} in [hyperparameters]; known: {sorted(run_keys)}{hint}")
        policies = {}
        policy_types = settings.field_types(PolicyConfig)
        for name, table in tables.get("policies", {}).items():
            if not isinstance(table, dict):
                raise ValueError(f"policies.{name} must be a table of settings, got {table!r}")
            values = {key: settings.as_annotated(value, policy_types.get(key)) for key, value in table.items()}
            values.setdefault("algorithm", algorithm or PolicyConfig.algorithm)
            unknown = sorted(set(values) - set(policy_types))
            if unknown:
                raise ValueError(f"unknown settings {unknown} in [policies.{name}]; known: {sorted(policy_types)}")
            if values["algorithm"] == "a2c":
                ppo_only = sorted(set(values) & set(PPO_ONLY))
                if ppo_only:
                    raise ValueError(
                        f'{ppo_only} in [policies.{name}] apply to PPO only; remove them or set algorithm = "ppo"'
                    )
            try:
                policies[name] = PolicyConfig(**values)
            except ValueError as error:
                raise ValueError(f"[policies.{name}]: {error}") from None
        groups = tables.get("groups", {})
        if not all(isinstance(v, str) for v in groups.values()):
            raise ValueError(f"[groups] maps each group to a policy name (a string), got {groups!r}")
        return cls(**run, groups=dict(groups), policies=policies, env_params=dict(tables.get("env_params", {})))

    def to_dict(self) -> dict:
        """The TOML-shaped dict :meth:`from_dict` reads (every setting written out)."""
        run = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("groups", "policies", "env_params")
        }
        return {
            "hyperparameters": run,
            "env_params": dict(self.env_params),
            "groups": dict(self.groups),
            "policies": {
                name: {
                    key: value
                    for key, value in asdict(settings).items()
                    if settings.algorithm == "ppo" or key not in PPO_ONLY
                }
                for name, settings in self.policies.items()
            },
        }


def check_policy_map(groups: dict[str, str], policies: dict, policy_type: type) -> None:
    """``ValueError`` (naming the table and the fix) unless ``groups`` maps groups to policies that
    ``policies`` holds, each a ``policy_type``, named as TOML keys, and each serving a group (shared
    by the multi-agent trainers' configs)."""
    if not groups:
        raise ValueError(
            "groups is empty: map every group of the game to a policy, e.g. "
            '[groups] taggers = "taggers", runners = "runners"'
        )
    for group, policy in groups.items():
        if policy not in policies:
            raise ValueError(
                f"group {group!r} uses policy {policy!r}, which has no settings: add a "
                f"[policies.{policy}] table (policies: {sorted(policies)})"
            )
    for policy, policy_config in policies.items():
        if not POLICY_NAME.fullmatch(policy):
            raise ValueError(f"policy name {policy!r} must use only letters, digits, '_' and '-'")
        if policy not in groups.values():
            raise ValueError(
                f"policy {policy!r} serves no group: map a group to it in [groups] or remove [policies.{policy}]"
            )
        if not isinstance(policy_config, policy_type):
            raise ValueError(
                f"policies[{policy!r}] must be a {policy_type.__name__}, got {type(policy_config).__name__}"
            )


def game_params(env_id: str, config: MultiAgentConfig):
    """The game's params from ``config.env_params``, with the config's groups checked against the game's."""
    game = get_game(env_id)
    known = [f.name for f in fields(game.params_type)]
    unknown = sorted(set(config.env_params) - set(known))
    if unknown:
        raise ValueError(f"unknown env_params {unknown} for {game.id}; known: {known}")
    params = game.params_type(**config.env_params)
    game_groups = list(game.agent_groups(params))
    missing = [g for g in game_groups if g not in config.groups]
    unknown = [g for g in config.groups if g not in game_groups]
    if missing or unknown:
        raise ValueError(
            f"[groups] must map exactly the groups of {game.id} {game_groups} to policies; "
            f"missing {missing}, unknown {unknown}"
        )
    return params


def policy_slots(env_id: str, config: MultiAgentConfig) -> dict[str, dict[str, slice]]:
    """Policy -> {group: its agents' slice of the policy's agent dimension}: groups side by side in
    the game's group order."""
    game = get_game(env_id)
    slots: dict[str, dict[str, slice]] = {name: {} for name in config.policies}
    sizes = {name: 0 for name in config.policies}
    for group, ids in game.agent_groups(game_params(env_id, config)).items():
        name = config.groups[group]
        slots[name][group] = slice(sizes[name], sizes[name] + len(ids))
        sizes[name] += len(ids)
    return slots


def policy_spaces(env_id: str, config: MultiAgentConfig) -> dict[str, tuple[spaces.Box, spaces.Space]]:
    """Policy -> ``(observation space, action space)`` of one of its agents. One network reads every
    group of a policy, so those groups must have equal spaces; otherwise the error names them."""
    game = get_game(env_id)
    params = game_params(env_id, config)
    observation_spaces, action_spaces = game.observation_spaces(params), game.action_spaces(params)
    first: dict[str, str] = {}  # policy -> its first group
    for group in game.agent_groups(params):
        name = config.groups[group]
        other = first.setdefault(name, group)
        if (observation_spaces[group], action_spaces[group]) != (observation_spaces[other], action_spaces[other]):
            raise ValueError(
                f"policy {name!r} serves groups {other!r} (observations {observation_spaces[other]}, actions "
                f"{action_spaces[other]}) and {group!r} (observations {observation_spaces[group]}, actions "
                f"{action_spaces[group]}), whose spaces differ: one network cannot serve both; map them to "
                f"different policies in [groups]"
            )
    return {name: (observation_spaces[group], action_spaces[group]) for name, group in first.items()}


def make_policies(env_id: str, config: MultiAgentConfig, device=None, models: dict | None = None) -> dict:
    """A fresh :class:`ActorCritic` per policy (a :class:`CentralisedActorCritic` for a policy with
    ``critic = "centralised"``, its critic over the game's state and its agents' ids), or the module
    ``models`` gives for it, moved to ``device``."""
    models = dict(models or {})
    unknown = sorted(set(models) - set(config.policies))
    if unknown:
        raise ValueError(f"models given for unknown policies {unknown}; policies: {sorted(config.policies)}")
    game = get_game(env_id)
    slots = policy_slots(env_id, config)
    policies = {}
    for name, (observation_space, action_space) in policy_spaces(env_id, config).items():
        settings = config.policies[name]
        centralised = settings.critic == "centralised"
        if name in models:
            module = models[name]
            if centralised and isinstance(module, ActorCritic) and not isinstance(module, CentralisedActorCritic):
                raise ValueError(
                    f'policy {name!r} has critic = "centralised" but its module is an ActorCritic, whose critic '
                    'reads the observations: pass a CentralisedActorCritic or set critic = "local"'
                )
        elif centralised:
            module = CentralisedActorCritic(
                observation_space.shape[0],
                action_space,
                game.state_space(game_params(env_id, config)).shape[0],
                sum(s.stop - s.start for s in slots[name].values()),
                settings.hidden,
                settings.normalize_observations,
                settings.std_bound(),
                settings.distribution,
                settings.activation,
            )
        else:
            module = ActorCritic(
                observation_space.shape[0],
                action_space,
                settings.hidden,
                settings.normalize_observations,
                max_std=settings.std_bound(),
                distribution=settings.distribution,
                activation=settings.activation,
                shared=settings.shared_hidden,
            )
        if settings.normalize_values:
            module.value_norm = ObservationNormalizer(1, clip=math.inf)
        policies[name] = module.to(device)
    return policies


def reported_group(config: MultiAgentConfig) -> str:
    """The group whose return is a run's ``mean_return``: the first group of the first trained policy."""
    trained = [group for group, policy in config.groups.items() if config.policies[policy].train]
    return (trained or list(config.groups))[0]


# -- rollout storage -------------------------------------------------------------------------------


def mask_argument(action_mask: torch.Tensor | None) -> dict:
    """``{"action_mask": action_mask}`` to pass to a policy's methods, or ``{}`` where the game has
    no masks (so custom policies written without the argument keep working)."""
    return {} if action_mask is None else {"action_mask": action_mask}


def _mask_width(action_space: spaces.Space) -> int:
    """Actions a stored mask covers: the trainer's masks are those of a ``Discrete`` space."""
    if not isinstance(action_space, spaces.Discrete):
        raise TypeError(f"action masks are supported for Discrete action spaces only, got {action_space}")
    return int(action_space.n)


@dataclass
class PolicyRollout:
    """``(num_steps, num_envs, agents, ...)`` tensors of one policy's agents (its groups side by side):
    what the env and the sampled actions gave."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor  # bool: the agent's terminated flag after the step
    truncated: torch.Tensor  # bool: the agent's truncated flag after the step
    final_obs: torch.Tensor  # the agent's last observation where its game ended on this step
    weights: torch.Tensor  # float: 1 where the agent was in the game before the step
    game_over: torch.Tensor  # bool (num_steps, num_envs): the game ended on this step
    max_truncations: int  # truncations a game can have in one rollout (see rollout.bootstrap_values)
    action_masks: torch.Tensor | None = None  # bool (..., n): the actions allowed at the step (games with masks)
    action_low: torch.Tensor | None = None  # Box action spaces: the bounds the env's actions are clipped to
    action_high: torch.Tensor | None = None

    @classmethod
    def allocate(
        cls,
        num_steps: int,
        num_envs: int,
        agents: int,
        obs_size: int,
        action_space: spaces.Space,
        device,
        episode_length: int,
        masked: bool = False,
    ) -> PolicyRollout:
        """Zeroed storage; ``masked``: with room for the action masks (a ``Discrete`` action space).
        Actions are kept as the policy drew them: int64 indices, or float32 values for a ``Box``
        space (Gaussian samples, unclipped: their log-probabilities are the samples')."""
        shape = (num_steps, num_envs, agents)
        box = isinstance(action_space, spaces.Box)

        def zeros(*extra, dtype=torch.float32):
            return torch.zeros((*shape, *extra), dtype=dtype, device=device)

        return cls(
            obs=zeros(obs_size),
            actions=zeros(*action_space.shape, dtype=torch.float32 if box else torch.int64),
            rewards=zeros(),
            terminated=zeros(dtype=torch.bool),
            truncated=zeros(dtype=torch.bool),
            final_obs=zeros(obs_size),
            weights=zeros(),
            game_over=torch.zeros(shape[:2], dtype=torch.bool, device=device),
            max_truncations=math.ceil(num_steps / episode_length),
            action_masks=zeros(_mask_width(action_space), dtype=torch.bool) if masked else None,
            action_low=torch.as_tensor(action_space.low, device=device) if box else None,
            action_high=torch.as_tensor(action_space.high, device=device) if box else None,
        )

    def env_actions(self, t: int) -> torch.Tensor:
        """Step ``t``'s actions as the env gets them: ``Box`` ones clipped into the space (as the
        single-agent trainers do; the rollout keeps the samples), others as drawn."""
        actions = self.actions[t]
        return actions if self.action_low is None else actions.clamp(self.action_low, self.action_high)

    def flat(self, name: str) -> torch.Tensor:
        """A field with the step, env and agent dimensions merged (a view)."""
        return getattr(self, name).flatten(0, 2)

    @property
    def dones(self) -> torch.Tensor:
        """Where the agent's stream of transitions ends: its terminated | truncated."""
        return self.terminated | self.truncated

    def mask_argument(self, rows=None) -> dict:
        """:func:`mask_argument` of the stored masks flattened like :meth:`flat` (``rows`` of them, if given)."""
        if self.action_masks is None:
            return {}
        masks = self.flat("action_masks")
        return mask_argument(masks if rows is None else masks[rows])

    def old_policy(self, act) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`rollout.Rollout.old_policy`, under the stored action masks."""
        return old_policy_outputs(
            functools.partial(act, **self.mask_argument()), self.flat("obs"), self.flat("actions"), self.rewards.shape
        )

    def bootstrap(self, value, next_obs: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`rollout.Rollout.bootstrap`: an agent truncated while in the game is bootstrapped
        with ``gamma * V(final observation)``; one tagged, even on the truncating step, or already out
        is not."""
        with torch.no_grad():
            bootstrapped = self.truncated & ~self.terminated & (self.weights > 0)
            final_values = bootstrap_values(value, self.final_obs, bootstrapped, self.max_truncations)
            return self.rewards + gamma * final_values, value(next_obs).float()


@dataclass
class StateRollout:
    """``(num_steps, num_envs, S)``: each game's global state before each step of a rollout
    (``GpuParallelEnv.state()``) and, where the step ended the game, its final state
    (``final_state()``), for the truncation bootstrap. One per run, read by every trained policy
    with a centralised critic: a state is kept once per game, not once per agent or per policy."""

    states: torch.Tensor
    final_states: torch.Tensor

    @classmethod
    def allocate(cls, num_steps: int, num_envs: int, state_size: int, device) -> StateRollout:
        shape = (num_steps, num_envs, state_size)
        return cls(torch.zeros(shape, device=device), torch.zeros(shape, device=device))

    def flat(self, name: str) -> torch.Tensor:
        """A field with the step and env dimensions merged (a view): ``(num_steps * num_envs, S)``,
        the games of :meth:`PolicyRollout.flat`'s rows in order (row ``r`` is game ``r // agents``)."""
        return getattr(self, name).flatten(0, 1)

    def bootstrap(
        self, rollout: PolicyRollout, value, next_state: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`PolicyRollout.bootstrap` with a centralised critic ``value`` (``(..., S) -> (...,
        agents)``): an agent truncated while in the game is bootstrapped with ``gamma * V(final
        state, agent)``. The critic runs on at most ``max_truncations`` steps of each game (those
        where one of its agents is bootstrapped; see :func:`rollout.bootstrap_values`)."""
        with torch.no_grad():
            bootstrapped = rollout.truncated & ~rollout.terminated & (rollout.weights > 0)  # (T, E, A)
            if rollout.max_truncations >= len(bootstrapped):
                final_values = value(self.final_states).float() * bootstrapped
            else:
                steps = set_steps(bootstrapped.any(-1), rollout.max_truncations)  # (k, E)
                picked = self.final_states.gather(0, steps[..., None].expand(-1, -1, self.final_states.shape[-1]))
                values = value(picked).float()  # (k, E, A)
                final_values = torch.zeros(bootstrapped.shape, device=values.device).scatter_(
                    0, steps[..., None].expand_as(values), values
                )
                final_values = final_values * bootstrapped
            return rollout.rewards + gamma * final_values, value(next_state).float()


@dataclass
class PolicyInputs:
    """What a policy reads at each step, ``(num_envs, agents, ...)``: its agents' observations and
    whether each is in the game now (before the next step). For a policy that serves one group
    these are the env's own buffers, which the env updates in place (no copies per step); for a
    policy that serves several groups they are tensors of its own, refreshed from the env's after
    each step. Either way their addresses never change, so a CUDA graph can capture the rollout."""

    obs: torch.Tensor
    active: torch.Tensor  # bool
    groups: dict[str, slice]  # group -> slice of the agent dimension to refresh; empty for the env's views
    action_mask: torch.Tensor | None = None  # bool (num_envs, agents, n): allowed actions (games with masks)

    @classmethod
    def of(cls, groups: dict[str, slice], obs: dict, infos: dict) -> PolicyInputs:
        """The inputs of a policy serving ``groups`` (group -> its slice), from the env's outputs."""
        first = next(iter(groups))
        masked = "action_mask" in infos[first]
        if len(groups) == 1:
            return cls(obs[first], infos[first]["active"], {}, infos[first]["action_mask"] if masked else None)
        num_envs, device = obs[first].shape[0], obs[first].device
        agents = sum(s.stop - s.start for s in groups.values())
        mask = (
            torch.empty((num_envs, agents, infos[first]["action_mask"].shape[-1]), dtype=torch.bool, device=device)
            if masked
            else None
        )
        inputs = cls(
            obs[first].new_empty((num_envs, agents, *obs[first].shape[2:])),
            torch.empty((num_envs, agents), dtype=torch.bool, device=device),
            dict(groups),
            mask,
        )
        inputs.refresh(obs, infos)
        return inputs

    def refresh(self, obs: dict, infos: dict) -> None:
        for group, s in self.groups.items():
            self.obs[:, s].copy_(obs[group])
            self.active[:, s].copy_(infos[group]["active"])
            if self.action_mask is not None:
                self.action_mask[:, s].copy_(infos[group]["action_mask"])


def collect(
    env: GpuParallelEnv,
    sample: dict,
    slots: dict,
    rollouts: dict,
    inputs: dict,
    stats: dict,
    autocast=contextlib.nullcontext,
    branches: Branches | None = None,
    states: StateRollout | None = None,
) -> None:
    """Fill each policy's rollout from its inputs, stepping every game ``num_steps`` times;
    ``sample`` holds each policy's ``sample`` (run under ``autocast()``; given the action masks in
    games with masks, which the rollout stores for the update). A step only copies what
    the env gave into the rollout (in a captured rollout every kernel counts), each policy's work
    in its own branch of ``branches``; episode statistics are taken from the whole rollout at its
    end. ``states`` (runs with a centralised critic): filled with the games' global states and
    final states, read from the env's buffers on the device (no host copy)."""
    branches = branches or Branches((), torch.device("cpu"))
    with wide_mlp.frozen_weights():  # the policies change at the update, not during the rollout
        for t in range(next(iter(rollouts.values())).obs.shape[0]):
            _collect_step(t, env, sample, slots, rollouts, inputs, autocast, branches, states)
    for name, rollout in rollouts.items():
        for group, s in slots[name].items():
            # The mean over the group's agents of their episode sums: the mean return per agent.
            stats[group].add(rollout.rewards[:, :, s].mean(-1), rollout.game_over)


def _collect_step(t: int, env, sample, slots, rollouts, inputs, autocast, branches, states) -> None:
    """Step ``t`` of :func:`collect`."""
    if states is not None:
        states.states[t].copy_(env.state())
    actions = {}
    with branches.fork():
        for name, rollout in rollouts.items():
            with branches.branch(name):
                policy_inputs = inputs[name]
                rollout.obs[t].copy_(policy_inputs.obs)
                rollout.weights[t].copy_(policy_inputs.active)
                if rollout.action_masks is not None:
                    rollout.action_masks[t].copy_(policy_inputs.action_mask)
                with torch.no_grad(), autocast():
                    rollout.actions[t].copy_(
                        sample[name](policy_inputs.obs, **mask_argument(policy_inputs.action_mask))
                    )
                env_actions = rollout.env_actions(t)
            actions.update({group: env_actions[:, s] for group, s in slots[name].items()})
    obs, rewards, terminated, truncated, infos = env.step_groups(actions)
    game_over = next(iter(infos.values()))["_final_obs"]  # per game: the same in every group's infos
    if states is not None:
        states.final_states[t].copy_(env.final_state())
    # The env's next step overwrites what these copies read: it waits for the join.
    with branches.fork():
        for name, rollout in rollouts.items():
            with branches.branch(name):
                for group, s in slots[name].items():
                    rollout.rewards[t, :, s].copy_(rewards[group])
                    rollout.terminated[t, :, s].copy_(terminated[group])
                    rollout.truncated[t, :, s].copy_(truncated[group])
                    rollout.final_obs[t, :, s].copy_(infos[group]["final_obs"])
                rollout.game_over[t].copy_(game_over)
                inputs[name].refresh(obs, infos)


# -- losses ----------------------------------------------------------------------------------------


def masked_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over the rows of weight 1 (0 when there are none), without a host sync."""
    return (x * weights).sum() / weights.sum().clamp(min=1.0)


def normalise(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    mean = masked_mean(advantages, weights)
    return (advantages - mean) / (masked_mean((advantages - mean) ** 2, weights).sqrt() + 1e-8)


def masked_ppo_loss(
    policy,
    obs,
    actions,
    old_log_probs,
    advantages,
    returns,
    weights,
    config: PolicyConfig,
    ent_coef,
    action_mask=None,
    diagnostics=True,
    **critic_input,
):
    """:func:`ppo.ppo_loss` (without value clipping; its ``diagnostics`` alike) with every mean over
    the rows that count; ``ent_coef``: the entropy bonus's weight now (a number or a device tensor);
    ``action_mask``: the rows' action masks, in games with masks; ``critic_input``: a centralised
    critic's (``state=``, ``rows=``: :meth:`CentralisedActorCritic.action_and_value`)."""
    _, log_probs, entropy, values = policy.action_and_value(obs, actions, **mask_argument(action_mask), **critic_input)
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    if config.norm_adv:
        advantages = normalise(advantages, weights)
    clipped = ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef)
    policy_loss = masked_mean(torch.max(-advantages * ratio, -advantages * clipped), weights)
    value_loss = 0.5 * masked_mean((values - returns) ** 2, weights)
    entropy_loss = masked_mean(entropy, weights)
    loss = policy_loss - ent_coef * entropy_loss + config.vf_coef * value_loss
    # Detached: a loss term kept (as the update's output) with its autograd graph keeps that
    # graph's AccumulateGrad nodes alive into the next captured update, on another stream (torch
    # warns of the mismatch and of the synchronisation it may cost).
    stats = {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(), "entropy": entropy_loss.detach()}
    if diagnostics:
        with torch.no_grad():
            stats["approx_kl"] = masked_mean((ratio - 1) - log_ratio, weights)
            stats["clip_fraction"] = masked_mean(((ratio - 1).abs() > config.clip_coef).float(), weights)
    return loss, stats


def masked_a2c_loss(log_probs, entropy, values, advantages, returns, weights, config: PolicyConfig, ent_coef):
    """:func:`a2c.a2c_loss` with every mean over the rows that count (``ent_coef`` as for
    :func:`masked_ppo_loss`)."""
    if config.norm_adv:
        advantages = normalise(advantages, weights)
    policy_loss = -masked_mean(advantages * log_probs, weights)
    value_loss = 0.5 * masked_mean((returns - values) ** 2, weights)
    entropy_loss = masked_mean(entropy, weights)
    loss = policy_loss - ent_coef * entropy_loss + config.vf_coef * value_loss
    stats = {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(), "entropy": entropy_loss.detach()}
    return loss, stats


def update(
    policy,
    optimizer,
    rollout: PolicyRollout,
    next_obs: torch.Tensor,
    act,
    value,
    gae,
    config: PolicyConfig,
    loss_fn,
    ent_coef,
    average_gradients,
    autocast=contextlib.nullcontext,
    sum_over_ranks=None,
    states: StateRollout | None = None,
    next_state: torch.Tensor | None = None,
    fuse_loss: bool = True,
) -> dict:
    """One policy's update from its rollout (``next_obs``: the observations after it) with its
    ``action_and_value`` and ``value`` (``act``, ``value``), the advantage estimator and its
    algorithm's masked loss (each maybe compiled), the entropy weight ``ent_coef`` (a device
    tensor that a captured update reads); ``average_gradients()`` (a
    :class:`distributed.GradientAverager` of the policy's parameters) runs between each
    ``backward`` and the clipping; ``autocast()`` is the context of the forward passes
    (:meth:`CaptureOptions.autocast`). Log-probabilities and entropies are those under the stored
    action masks. A policy with an observation normalizer first merges the rollout's observations
    into it (``sum_over_ranks``: see :meth:`ObservationNormalizer.update`), so that the whole update,
    old log-probabilities included, sees one normalisation. Returns the last gradient step's loss
    terms.

    A policy with a centralised critic (``states``: the rollout's global states; ``next_state``:
    the games' state after it) gets its values from the states: ``value`` is its critic's
    ``(..., S) -> (..., agents)``, and ``act`` and the loss take ``state=`` (the rollout's states,
    ``(num_steps * num_envs, S)``) and, for a minibatch, ``rows=`` (its rows' indices), so that the
    state's part of the critic runs once per game (:class:`CentralisedCritic`).

    ``fuse_loss``: A2C's loss of a categorical policy without action masks (and with a critic on
    the observations) as one kernel where it applies (:mod:`fused_a2c_loss`); False under
    ``torch.compile``, which fuses the PyTorch form on its own."""
    b_obs, b_actions, b_weights = (rollout.flat(n) for n in ("obs", "actions", "weights"))
    value_norm = getattr(policy, "value_norm", None)
    if value_norm is not None:
        # The critic's outputs are normalised returns (PolicyConfig.normalize_values): the old values
        # and the bootstrap read them mapped back; the loss compares them with scaled returns.
        restored_act, value = _values_restored(act, value_norm), _values_restored(value, value_norm)
    else:
        restored_act = act
    if getattr(policy, "obs_norm", None) is not None:
        policy.obs_norm.update(b_obs, b_weights, sum_over_ranks)
    critic_input = {}
    if states is not None:
        critic_input = {"state": states.flat("states")}
        if getattr(policy.critic, "state_norm", None) is not None:
            policy.critic.state_norm.update(critic_input["state"], None, sum_over_ranks)
    with autocast():
        if states is None:
            rewards, next_value = rollout.bootstrap(value, next_obs, config.gamma)
        else:
            rewards, next_value = states.bootstrap(rollout, value, next_state, config.gamma)

    def advantages_and_returns(values):
        with torch.no_grad():
            advantages, returns = gae(rewards, values, rollout.dones, next_value, config.gamma, config.gae_lambda)
            returns = returns.flatten()
            if value_norm is not None:
                value_norm.update(returns[:, None], b_weights, sum_over_ranks)
                returns = value_norm(returns[:, None]).view(-1)
        return advantages.flatten(), returns

    def step(loss, losses):
        optimizer.zero_grad(set_to_none=True)  # written, not accumulated: capture.py's "Gradients"
        loss.backward()
        average_gradients()
        if math.isfinite(config.max_grad_norm):
            torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        optimizer.step()
        return losses

    if config.algorithm == "a2c":
        # One pass with gradients: its values (detached) give the advantages, its outputs the loss.
        fused = fuse_loss and states is None and rollout.action_masks is None and fused_a2c_loss.applies(policy, b_obs)
        joint = None
        with autocast():
            if fused and policy.trunk is not None:
                # The loss writes the gradient of the joint product whole (fused_a2c_loss).
                joint = policy.joint_outputs(b_obs)
                width = policy.actor[-1].out_features
                logits, values = joint[:, :width], joint[:, width]
            elif fused:
                logits, values = policy.outputs_and_value(b_obs)
            else:
                _, log_probs, entropy, values = act(b_obs, b_actions, **rollout.mask_argument(), **critic_input)
        restored = values.detach().float() if value_norm is None else value_norm.restore(values.detach().float())
        b_adv, b_returns = advantages_and_returns(restored.view(rewards.shape))
        if fused:
            loss = fused_a2c_loss.categorical_a2c_loss(
                logits, values, b_actions, b_adv, b_returns, b_weights, config, ent_coef, joint
            )
        else:
            loss = loss_fn(log_probs, entropy, values, b_adv, b_returns, b_weights, config, ent_coef)
        return step(*loss)
    # The old policy's log-probabilities and values, before any gradient step; then epochs of
    # shuffled minibatches.
    with autocast():
        if states is None:
            log_probs, values = rollout.old_policy(restored_act)
        else:
            log_probs, values = old_policy_outputs(
                functools.partial(restored_act, **rollout.mask_argument(), **critic_input),
                b_obs,
                b_actions,
                rewards.shape,
            )
    b_adv, b_returns = advantages_and_returns(values)
    b_log_probs = log_probs.flatten()
    for epoch in range(config.update_epochs):
        order = torch.rand(len(b_obs), device=b_obs.device).argsort()  # a permutation, capturable
        for k, idx in enumerate(torch.tensor_split(order, config.num_minibatches)):
            last = epoch == config.update_epochs - 1 and k == config.num_minibatches - 1
            with autocast():
                loss = loss_fn(
                    policy,
                    b_obs[idx],
                    b_actions[idx],
                    b_log_probs[idx],
                    b_adv[idx],
                    b_returns[idx],
                    b_weights[idx],
                    config,
                    ent_coef,
                    diagnostics=last,
                    **rollout.mask_argument(idx),
                    **({} if states is None else {**critic_input, "rows": idx}),
                )
            losses = step(*loss)
    return losses


def _values_restored(fn, value_norm):
    """``fn`` (a policy's ``value``, or its ``action_and_value``, whose last output is the value)
    with its values mapped back from the normalised scale (:meth:`ObservationNormalizer.restore`), in
    float32 whatever precision the pass ran in (a bf16 value times the returns' std would keep 8 bits)."""

    def restored(*args, **kwargs):
        out = fn(*args, **kwargs)
        if isinstance(out, tuple):
            return (*out[:-1], value_norm.restore(out[-1].float()))
        return value_norm.restore(out.float())

    return restored


# -- logging ---------------------------------------------------------------------------------------


def print_entry(entry: dict) -> None:
    """The default ``log`` of :func:`train`: one line per log interval, every group's return."""
    returns = "  ".join(
        f"{key.split('/', 1)[1]} {value:8.2f}" for key, value in entry.items() if key.startswith("mean_return/")
    )
    print(
        f"steps {entry['env_steps']:>11,d}  return per agent: {returns}  ({entry['episodes']} games)  "
        f"{entry['env_steps'] / entry['seconds']:,.0f} steps/s"
    )


def log_entry(
    env_steps: int,
    start: float,
    numbers: EntryNumbers,
    groups: list[str],
    reported: str,
    log,
    context: Context = SINGLE,
) -> dict:
    """One history entry from ``numbers`` (of each of ``groups``' episode statistics, in that order;
    reading them is the only host synchronisation of a run), handed to ``log`` if given. Every rank
    of ``context`` calls it, and it reduces as :func:`rollout.log_entry` does: episode returns
    pooled over the ranks, losses averaged, seconds the slowest rank's; only rank 0 calls ``log``.
    ``env_steps``: of all ranks."""
    pooled, averages, seconds = pool_entry(start, numbers, context)
    returns = dict(zip(groups, pooled))
    entry = {
        "env_steps": env_steps,
        "seconds": seconds.pop("seconds"),
        "mean_return": returns[reported][0],
        "episodes": returns[reported][1],
        **{f"mean_return/{group}": r for group, (r, _) in returns.items()},
        **seconds,
        **averages,
    }
    if log is not None and context.is_main:
        log(entry)
    return entry


# -- training --------------------------------------------------------------------------------------


@dataclass
class Run:
    """One rank's pieces of a multi-agent run (see :func:`start`)."""

    context: Context
    config: MultiAgentConfig
    first: int  # the iteration to start from (> 0 when resumed)
    iterations: int
    env: GpuParallelEnv
    policies: dict  # policy name -> module
    trained: dict[str, PolicyConfig]  # the policies that learn, in the config's order
    optimizers: dict  # trained policy -> its optimizer
    slots: dict[str, dict[str, slice]]  # policy -> {group: its agents' slice}
    rollouts: dict[str, PolicyRollout]
    states: StateRollout | None  # the games' states, where a trained policy has a centralised critic
    inputs: dict[str, PolicyInputs]
    stats: dict[str, EpisodeStats]  # group -> its episode returns
    ent_coefs: dict[str, torch.Tensor]  # trained policy -> its entropy weight now (a device tensor)
    sample: dict  # policy -> its sample, compiled with config.compile
    act: dict  # trained policy -> its action_and_value, likewise
    value: dict  # trained policy -> its value, likewise
    gae: object  # compute_gae, likewise
    loss_fns: dict  # algorithm -> its masked loss, likewise
    averagers: dict[str, GradientAverager]  # trained policy -> its gradient average over the ranks

    @property
    def device(self) -> torch.device:
        return self.env.device

    @property
    def parts(self) -> dict:
        """What a checkpoint holds besides the iteration and history: every policy, each trained
        policy's optimizer."""
        return {
            **{f"policy/{name}": policy for name, policy in self.policies.items()},
            **{f"optimizer/{name}": optimizer for name, optimizer in self.optimizers.items()},
        }

    def restart(self, iteration: int) -> None:
        """Go on from ``iteration`` with the random numbers and fresh games that :func:`start` gives a
        run resumed there (for a state restored after the start, e.g. by Lightning)."""
        self.first = iteration
        torch.manual_seed(self.context.seed(self.config.seed, iteration))
        obs, infos = self.env.reset_groups(
            seed=self.context.env_seed(self.config.seed, iteration, self.config.num_envs)
        )
        for policy_inputs in self.inputs.values():
            policy_inputs.refresh(obs, infos)
        for group_stats in self.stats.values():
            group_stats.running.zero_()


def training_env(env_id: str, config, device, backend: str | None) -> GpuParallelEnv:
    """The trainers' games (``config``: a multi-agent trainer's config, with ``num_envs``, the game's
    params and ``cuda_graph``): SAME_STEP autoreset (the final observations are the ended episodes'
    successors), actions unchecked (the policies' are valid by construction)."""
    # A captured phase records the env's launches itself: the env must not replay its own graph inside it.
    return GpuParallelEnv(
        env_id,
        config.num_envs,
        device=device,
        backend=backend,
        params=game_params(env_id, config),
        autoreset_mode=AutoresetMode.SAME_STEP,
        validate_actions=False,
        cuda_graph=False if config.cuda_graph else None,
    )


def start(
    env_id: str,
    config: MultiAgentConfig,
    *,
    device=None,
    backend: str | None = None,
    models: dict | None = None,
    resume: dict | None = None,
) -> Run:
    """Everything a run needs before its first iteration (``models`` as for :func:`train`)."""
    context = setup(device)
    first = resumed_iteration(resume, context.world_size, config.batch_size)
    # A resumed run draws new random numbers and new games (see checkpoint.py).
    torch.manual_seed(context.seed(config.seed, first))
    env = training_env(env_id, config, context.device, backend)
    device = env.device
    policies = make_policies(env_id, config, device, models)
    for name, policy in policies.items():
        if isinstance(policy, ActorCritic):
            settings = config.policies[name]
            agents = sum(len(env.groups[group]) for group, served in config.groups.items() if served == name)
            minibatches = settings.num_minibatches if settings.algorithm == "ppo" else 1
            policy.use_fused_mlp(config.fused_mlp_setting(config.batch_size * agents // minibatches))
        elif config.fused_mlp is True:
            raise ValueError(
                f"fused_mlp applies to the default policies (ActorCritic); {name!r} is a {type(policy).__name__}"
            )
    trained = {name: settings for name, settings in config.policies.items() if settings.train}
    optimizers = {
        name: make_optimizer(
            Adam,
            policies[name].parameters(),
            settings.learning_rate,
            device,
            captured=config.cuda_graph and device.type == "cuda",
            eps=1e-5,
        )
        for name, settings in trained.items()
    }
    # Storage: per policy, its groups side by side along the agent dimension.
    slots = policy_slots(env_id, config)
    rollouts = {}
    for name, (observation_space, action_space) in policy_spaces(env_id, config).items():
        agents = sum(s.stop - s.start for s in slots[name].values())
        rollouts[name] = PolicyRollout.allocate(
            config.num_steps,
            config.num_envs,
            agents,
            observation_space.shape[0],
            action_space,
            device,
            env.params.episode_length,
            masked=env.definition.has_action_masks,
        )
    centralised = [name for name, settings in trained.items() if settings.critic == "centralised"]
    states = (
        StateRollout.allocate(config.num_steps, config.num_envs, env.state_space.shape[0], device)
        if centralised
        else None
    )
    obs, infos = env.reset_groups(seed=context.env_seed(config.seed, first, config.num_envs))
    return Run(
        context=context,
        config=config,
        first=first,
        iterations=context.iterations(config.total_timesteps, config.batch_size),
        env=env,
        policies=policies,
        trained=trained,
        optimizers=optimizers,
        slots=slots,
        rollouts=rollouts,
        states=states,
        inputs={name: PolicyInputs.of(groups, obs, infos) for name, groups in slots.items()},
        stats={group: EpisodeStats(config.num_envs, device) for group in config.groups},
        # The entropy weights, set before each iteration from their schedules (a captured update reads them).
        ent_coefs={name: torch.zeros((), device=device) for name in trained},
        sample={name: config.compiled(policy.sample) for name, policy in policies.items()},
        act={name: config.compiled(policies[name].action_and_value) for name in trained},
        value={name: config.compiled(policies[name].value) for name in trained},
        gae=config.compiled(compute_gae),
        loss_fns={"ppo": config.compiled(masked_ppo_loss), "a2c": config.compiled(masked_a2c_loss)},
        averagers={
            name: GradientAverager(
                policies[name].parameters(), context, in_graph=config.graph_allreduce_setting(multi_agent=True)
            )
            for name in trained
        },
    )


class Phases(IterationPhases):
    """One iteration of a run: the rollout (:meth:`collect`), then the schedules (:meth:`schedule`)
    and the update of every trained policy (:meth:`learn`), the rollout and the update each a CUDA
    graph on CUDA (:class:`GraphedPhase`), with the seconds spent in each (``times``). Each
    policy's share of a rollout step, and each policy's update, is a branch of its own
    (:class:`Branches`); but an update whose graph is cut at each all-reduce
    (``between_graphs``) cannot fork: no branches there.

    ``update_policy(name)`` is one policy's update alone (uncaptured), returning its loss terms as
    ``<policy>/<term>``: a Lightning training step replays it per policy, as that policy's
    optimizer step (:mod:`gpu_marl_envs.baselines.lightning`)."""

    def __init__(self, run: Run):
        self.run = run
        config, device = run.config, run.device
        cut = run.context.enabled and not config.graph_allreduce_setting(multi_agent=True)
        rollout_branches = Branches(run.policies, device)
        self._update_branches = Branches(() if cut else run.trained, device)

        def rollout():
            collect(
                run.env,
                run.sample,
                run.slots,
                run.rollouts,
                run.inputs,
                run.stats,
                autocast=lambda: config.autocast(device),
                branches=rollout_branches,
                states=run.states,
            )
            return {}

        def update():
            losses = {}
            with self._update_branches.fork():
                for name in run.trained:
                    with self._update_branches.branch(name):
                        losses.update(self.update_policy(name))
            return losses

        self.rollout = GraphedPhase(rollout, device, config.cuda_graph)
        self.update = GraphedPhase(update, device, config.cuda_graph)
        self.times = PhaseTimes(device)
        self._next_rollout = run.first  # the iteration whose rollout collect() runs next

    def collect(self) -> None:
        """An iteration's rollout, the bounds of scheduled stds first set to the iteration's values
        (:func:`set_std_bounds`): its rollout and its update then draw and score the actions under
        one distribution, and a resumed run's first rollout under its own iteration's bound."""
        run = self.run
        set_std_bounds(run.policies, run.config, self._next_rollout * run.config.batch_size * run.context.world_size)
        self._next_rollout += 1
        super().collect()

    def update_policy(self, name: str) -> dict[str, torch.Tensor]:
        run, config, settings = self.run, self.run.config, self.run.trained[name]
        centralised = settings.critic == "centralised"
        terms = update(
            run.policies[name],
            run.optimizers[name],
            run.rollouts[name],
            run.inputs[name].obs,
            run.act[name],
            run.value[name],
            run.gae,
            settings,
            run.loss_fns[settings.algorithm],
            run.ent_coefs[name],
            run.averagers[name],
            autocast=lambda: config.autocast(run.device),
            sum_over_ranks=run.context.sum_over_ranks(in_graph=config.graph_allreduce_setting(multi_agent=True)),
            states=run.states if centralised else None,
            next_state=run.env.state() if centralised else None,
            fuse_loss=not config.compile,
        )
        return {f"{name}/{term}": tensor for term, tensor in terms.items()}

    def schedule(self, iteration: int) -> None:
        """Each trained policy's learning rate (annealed linearly to 0 over the run if its
        ``anneal_lr``) and entropy weight (its schedule's value at the iteration's env steps). A
        scheduled std's bound is set before the rollout (:meth:`collect`)."""
        run = self.run
        for name, policy in run.trained.items():
            if policy.anneal_lr:
                set_learning_rate(run.optimizers[name], policy.learning_rate * (1.0 - iteration / run.iterations))
            run.ent_coefs[name].fill_(
                policy.entropy_coefficient(iteration * run.config.batch_size * run.context.world_size)
            )


def train(
    env_id: str,
    config: MultiAgentConfig = MultiAgentConfig(),
    *,
    device=None,
    backend: str | None = None,
    models: dict | None = None,
    log_every: int = 10,
    log=print_entry,
    save=None,
    resume: dict | None = None,
):
    """Train the config's policies on the game ``env_id``; returns ``(policies, history)``.

    ``policies`` maps each policy name to its module; ``history`` is a list of dicts (env steps,
    seconds, ``mean_return/<group>``: the mean episode return per agent of each group over the
    games finished since the last entry, ``mean_return`` that of :func:`reported_group`,
    ``episodes``: games finished, seconds spent in rollouts and updates, and ``<policy>/<loss term>``
    for each trained policy), each also handed to ``log`` when it is made. ``models``: custom
    modules for some policies (module docstring). ``save`` and ``resume`` as for ``ppo.train``: the
    state holds every policy (``policy/<name>``) and each trained policy's optimizer
    (``optimizer/<name>``).

    Under ``torchrun`` every rank runs this with its own ``num_envs`` games on its own GPU, as
    ``ppo.train`` does (:mod:`distributed`): ``total_timesteps``, the history's env steps and the
    schedules' steps (the entropy weight's, the std bound's) count all ranks; each trained policy's
    gradients are averaged over the ranks before every optimizer step; only rank 0 calls ``log``
    and ``save``. A CUDA graph cannot be cut while the policies' update branches are forked, so
    with ``graph_allreduce=False`` on several ranks the policies' updates run one after another
    (the all-reduce between graph replays), instead of as parallel branches.
    """
    run = start(env_id, config, device=device, backend=backend, models=models, resume=resume)
    context = run.context
    phases = Phases(run)
    reported = reported_group(config)
    history = train_iterations(
        run,
        phases,
        list(run.stats.values()),
        lambda steps, begin, numbers: log_entry(steps, begin, numbers, list(run.stats), reported, log, context),
        modules=list(run.policies.values()),
        log_every=log_every,
        save=save,
        resume=resume,
    )
    run.env.close()
    return run.policies, history


# -- evaluation ------------------------------------------------------------------------------------


def greedy_actions(
    policies: dict, slots: dict, obs: dict, infos: dict, action_spaces: dict | None = None
) -> dict[str, torch.Tensor]:
    """Each group's greedy actions ``(num_envs, group_size, ...)`` from the env's outputs keyed by
    group (``reset_groups``/``step_groups``): each policy (``slots``: :func:`policy_slots`) acts for
    its groups at once, within the action masks of ``infos`` in games with masks. ``Box`` actions
    (the Gaussian's mean) are clipped into the policy's space where ``action_spaces`` (policy ->
    action space, as :func:`policy_spaces` gives them) says it is a ``Box``."""
    action_spaces = action_spaces or {}
    actions = {}
    with torch.no_grad():
        for name, policy in policies.items():
            groups = slots[name]
            masks = None
            if "action_mask" in infos[next(iter(groups))]:
                masks = torch.cat([infos[group]["action_mask"] for group in groups], dim=1)
            greedy = policy.greedy(torch.cat([obs[group] for group in groups], dim=1), **mask_argument(masks))
            space = action_spaces.get(name)
            if isinstance(space, spaces.Box):
                greedy = greedy.clamp(
                    torch.as_tensor(space.low, device=greedy.device), torch.as_tensor(space.high, device=greedy.device)
                )
            actions.update({group: greedy[:, s] for group, s in groups.items()})
    return actions


def evaluate(
    policies: dict,
    env_id: str,
    config: MultiAgentConfig,
    num_episodes: int = 16,
    *,
    device=None,
    seed: int = 10_000,
    frames: list | None = None,
) -> dict[str, float]:
    """Mean episode return per agent of each group over ``num_episodes`` games (one per env) with
    every policy's greedy actions (:func:`greedy_actions`, within the action masks in games with
    masks). With a list as ``frames``, appends the RGB frames of game 0's episode to it
    (``gpu_marl_envs.rendering.save_animation`` writes them).

    ``policies`` as :func:`train` returns them, or from a checkpoint of ``gpu-marl-train``:
    ``gpu_marl_envs.baselines.train.load_policies(checkpoint.load_checkpoint(path), device)``
    gives ``(policies, env_id, config)``."""
    env = GpuParallelEnv(
        env_id,
        num_episodes,
        device=device,
        params=game_params(env_id, config),
        autoreset_mode=AutoresetMode.DISABLED,
        validate_actions=False,
        render_mode=None if frames is None else "rgb_array",
    )
    slots = policy_slots(env_id, config)
    action_spaces = {name: action_space for name, (_, action_space) in policy_spaces(env_id, config).items()}
    obs, infos = env.reset_groups(seed=seed)
    returns = {group: torch.zeros(num_episodes, device=env.device) for group in config.groups}
    running = torch.ones(num_episodes, dtype=torch.bool, device=env.device)
    if frames is not None:
        frames.append(env.render())
    while bool(running.any()):
        obs, rewards, terminated, truncated, infos = env.step_groups(
            greedy_actions(policies, slots, obs, infos, action_spaces)
        )
        for group, group_returns in returns.items():
            group_returns += rewards[group].mean(1) * running
        if frames is not None and bool(running[0]):
            frames.append(env.render())
        # A game is over when every agent of it is done (tagged runners are terminated from their tag on).
        running &= ~torch.stack([(terminated[g] | truncated[g]).all(1) for g in returns]).all(0)
    env.close()
    return {group: group_returns.mean().item() for group, group_returns in returns.items()}
