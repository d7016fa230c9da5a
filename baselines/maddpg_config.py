"""MADDPG's settings (:mod:`maddpg`): the run's (:class:`MADDPGConfig`) and each policy's
(:class:`PolicySettings`), read from a game's config with ``algorithm = "maddpg"``, and the check
that every policy acts in a ``Box`` (:func:`box_spaces`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from gpu_marl_envs.baselines import settings
from gpu_marl_envs.baselines.capture import float32_matmul_precision
from gpu_marl_envs.baselines.multi_agent import check_policy_map, policy_spaces
from gymnasium import spaces

from gpu_marl_envs.parallel_env import get_game


@dataclass(frozen=True)
class PolicySettings:
    """One MADDPG policy's networks and optimisers. Defaults: Lowe et al.'s MPE settings (their
    appendix and ``openai/maddpg``'s ``train.py``/``maddpg.py``)."""

    train: bool = True
    """False: the policy acts (its actor, with exploration noise) but is never updated."""
    actor_lr: float = 1e-2
    critic_lr: float = 1e-2
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and the critic (ReLU)."""
    preactivation_penalty: float = 1e-3
    """Weight of the mean square of the actor's pre-tanh outputs in its loss (``openai/maddpg``'s
    ``p_reg``, 1e-3): it keeps the tanh off its flat tails, where the critic's gradient no longer
    moves the action; 0: none."""
    max_grad_norm: float = 0.5
    """Clip each network's gradient norm at this (``openai/maddpg``'s ``grad_norm_clipping``); ``inf``: no clipping."""

    def __post_init__(self):
        settings.check(self)


def _default_groups() -> dict[str, str]:
    return {"agents": "agents"}


def _default_policies() -> dict[str, PolicySettings]:
    return {"agents": PolicySettings()}


@dataclass(frozen=True)
class MADDPGConfig:
    """A MADDPG run: sizes, the replay, the updates, exploration, the game's params and the group ->
    policy map. Defaults: Lowe et al.'s settings (gamma 0.95, tau 0.01, a replay of 1e6, batches of
    1,024, learning after 1,024 x 25 transitions, one gradient step per 100 transitions) with 1,024
    games per iteration; the default map is SimpleSpread's one group."""

    num_envs: int = 1024
    """Parallel games; each iteration adds ``num_envs`` joint transitions to the replay."""
    total_timesteps: int = 2_000_000
    """Env steps (games x steps) of the whole run, rounded down to whole iterations."""
    learning_starts: int = 25_600
    """Env steps of uniform random actions that fill the replay before the first update."""
    buffer_size: int = 1_000_000
    """Replay capacity in joint transitions (>= num_envs); the oldest are overwritten."""
    batch_size: int = 1024
    """Joint transitions per gradient step, drawn uniformly with replacement."""
    gradient_steps: int = 10
    """Gradient steps per iteration: the update-to-data ratio is gradient_steps / num_envs."""
    policy_frequency: int = 1
    """Actor and target updates every this many critic updates (1: MADDPG; 2: TD3's delay)."""
    gamma: float = 0.95
    tau: float = 0.01
    """Soft target update: ``target <- (1 - tau) * target + tau * online``."""
    exploration_noise: float = 0.1
    """The behaviour's Gaussian noise std, as a fraction of the action half-range ``(high - low) / 2``."""
    twin_critics: bool = False
    """TD3's clipped double Q: two critics per policy, the target from the smaller target value."""
    policy_noise: float = 0.0
    """TD3's target policy smoothing: Gaussian noise of this std (fraction of the half-range) on the
    target actors' actions, clipped at ``noise_clip``; 0: none (MADDPG)."""
    noise_clip: float = 0.5
    """The smoothing noise's bound, as a fraction of the half-range."""
    cuda_graph: bool = True
    """On CUDA, replay each acting step and each iteration's updates as one CUDA graph."""
    tf32: bool = True
    """Float32 matrix products on TF32 tensor cores (as the other trainers' ``tf32``)."""
    seed: int = 0
    groups: dict[str, str] = field(default_factory=_default_groups)
    """Group -> policy name; every group of the game needs one, and groups may share a policy."""
    policies: dict[str, PolicySettings] = field(default_factory=_default_policies)
    """Policy name -> its settings; every policy serves at least one group."""
    env_params: dict = field(default_factory=dict)
    """Fields of the game's params dataclass to change from its defaults."""

    TABLES = ("groups", "policies", "env_params")

    def __post_init__(self):
        settings.check(self)
        if self.total_timesteps < self.num_envs:
            raise ValueError(
                f"total_timesteps ({self.total_timesteps}) must cover one iteration (num_envs = {self.num_envs})"
            )
        if self.buffer_size < self.num_envs:
            raise ValueError(f"buffer_size ({self.buffer_size}) must hold one iteration (num_envs = {self.num_envs})")
        check_policy_map(self.groups, self.policies, PolicySettings)

    @classmethod
    def from_dict(cls, tables: dict) -> MADDPGConfig:
        """The config of a TOML-shaped dict: ``hyperparameters`` (the run's fields), ``groups``,
        ``policies`` (name -> settings table) and ``env_params``. Errors name the table and the fix."""
        unknown = set(tables) - {"hyperparameters", *cls.TABLES}
        if unknown:
            raise ValueError(
                f"unknown tables {sorted(unknown)}; expected hyperparameters, groups, policies, env_params"
            )
        run = dict(tables.get("hyperparameters", {}))
        run_keys = {f.name for f in fields(cls)} - set(cls.TABLES)
        policy_types = settings.field_types(PolicySettings)
        for key in sorted(set(run) - run_keys):
            hint = f"; {key} is a policy setting: put it in [policies.<name>]" if key in policy_types else ""
            raise ValueError(
                f"unknown maddpg run setting {key!r} in [hyperparameters]; known: {sorted(run_keys)}{hint}"
            )
        policies = {}
        for name, table in tables.get("policies", {}).items():
            if not isinstance(table, dict):
                raise ValueError(f"policies.{name} must be a table of settings, got {table!r}")
            unknown = sorted(set(table) - set(policy_types))
            if unknown:
                raise ValueError(
                    f"unknown settings {unknown} in [policies.{name}] of a maddpg config; known: {sorted(policy_types)}"
                )
            try:
                policies[name] = PolicySettings(
                    **{key: settings.as_annotated(value, policy_types[key]) for key, value in table.items()}
                )
            except ValueError as error:
                raise ValueError(f"[policies.{name}]: {error}") from None
        groups = tables.get("groups", {})
        if not all(isinstance(v, str) for v in groups.values()):
            raise ValueError(f"[groups] maps each group to a policy name (a string), got {groups!r}")
        return cls(**run, groups=dict(groups), policies=policies, env_params=dict(tables.get("env_params", {})))

    def to_dict(self) -> dict:
        """The TOML-shaped dict :meth:`from_dict` reads (every setting written out)."""
        return {
            "hyperparameters": {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.TABLES},
            "env_params": dict(self.env_params),
            "groups": dict(self.groups),
            "policies": {name: asdict(policy) for name, policy in self.policies.items()},
        }

    def matmul_precision(self):
        """The run's float32 matmul precision, restored afterwards (torch's setting is global)."""
        return float32_matmul_precision(self.tf32)


def box_spaces(env_id: str, config: MADDPGConfig) -> dict[str, tuple[spaces.Box, spaces.Box]]:
    """:func:`multi_agent.policy_spaces`, with every policy's action space checked to be a ``Box``
    (``ValueError``, one line, for the first that is not)."""
    policy_space = policy_spaces(env_id, config)
    for group, name in config.groups.items():
        action_space = policy_space[name][1]
        if not isinstance(action_space, spaces.Box):
            hint = (
                "set env_params.continuous_actions = true, or train it with ppo or a2c"
                if "continuous_actions" in {f.name for f in fields(get_game(env_id).params_type)}
                else "train it with ppo or a2c"
            )
            raise ValueError(f"maddpg needs Box actions; {env_id}'s group {group!r} has {action_space}: {hint}")
    return policy_space
