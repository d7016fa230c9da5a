"""A run's config for ``gpu-marl-train``: a TOML file and ``--set`` overrides in, the algorithm, the
env and the trainer's config dataclass out; and that config back to TOML (the run's
``config.toml``) and to a checkpoint's header.

A config file holds ``env``, ``algorithm`` and a ``[hyperparameters]`` table whose keys are the
algorithm's config fields (``PPOConfig``, ``A2CConfig``, ``DDPGConfig``, ``TD3Config``); a multi-agent game adds
``[groups]``, ``[policies.<name>]`` and ``[env_params]`` (:class:`multi_agent.MultiAgentConfig`; with
``algorithm = "maddpg"``, :class:`maddpg_config.MADDPGConfig`). Values are typed by the fields they
set (:mod:`settings`).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from importlib import resources
from pathlib import Path

from gpu_marl_envs.baselines import a2c, ddpg, maddpg, maddpg_config, multi_agent, ppo, settings, sizing
from gpu_marl_envs.baselines.models import ActorCritic
from gymnasium import spaces

from gpu_marl_envs.parallel_env import get_game
from gpu_marl_envs.registration import GAMES, env_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# algorithm -> (config type, train function, the policy class its checkpoints hold)
ALGORITHMS = {
    "ppo": (ppo.PPOConfig, ppo.train, ActorCritic),
    "a2c": (a2c.A2CConfig, a2c.train, ActorCritic),
    "ddpg": (ddpg.DDPGConfig, ddpg.train, ddpg.Actor),
    # TD3 is a setting of the DDPG trainer (twin critics, target policy smoothing): its own name, as
    # in CleanRL and Stable-Baselines3, with a config of TD3's defaults.
    "td3": (ddpg.TD3Config, ddpg.train, ddpg.Actor),
}
CONFIGS = resources.files("gpu_marl_envs.baselines") / "configs"
DEFAULT_CONFIGS = {
    "CartPole-v1": "cartpole_ppo.toml",
    "Acrobot-v1": "acrobot_ppo.toml",
    "Pendulum-v1": "pendulum_ddpg.toml",
    "MountainCarContinuous-v0": "mountain_car_continuous_ddpg.toml",
    "TagContinuous-v0": "tag_continuous_ppo.toml",
    "TagGridworld-v0": "tag_gridworld_a2c.toml",
    "CovidEconomy-v0": "covid_economy_ppo.toml",
    "SimpleSpread-v3": "simple_spread_v3_mappo.toml",
    "SimpleTag-v3": "simple_tag_v3_mappo.toml",
    "SimpleSpeakerListener-v4": "simple_speaker_listener_v4_mappo.toml",
}
MULTI_AGENT_TABLES = ("env_params", "groups", "policies")
MULTI_AGENT_ALGORITHMS = (*multi_agent.ALGORITHMS, "maddpg")
"""A multi-agent config's ``algorithm``: the on-policy trainer's default for its policies, or maddpg."""
MULTI_AGENT_CONFIGS = (multi_agent.MultiAgentConfig, maddpg_config.MADDPGConfig)


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message says why."""


def read_config(path=None, env: str | None = None) -> dict:
    if path is None:
        if env not in DEFAULT_CONFIGS:
            raise ConfigError(
                f"no shipped config for env {env!r}; shipped: {sorted(DEFAULT_CONFIGS)} (or pass --config FILE)"
            )
        text = (CONFIGS / DEFAULT_CONFIGS[env]).read_text()
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot read config {path}: {error.strerror or error}") from None
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"config {path} is not UTF-8 text, as TOML must be: byte {error.object[error.start]:#04x} at "
                f"position {error.start}"
            ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config {path or DEFAULT_CONFIGS[env]} is not valid TOML: {error}") from None
    unknown = set(raw) - {"env", "algorithm", "hyperparameters", *MULTI_AGENT_TABLES}
    if unknown:
        raise ConfigError(
            f"unknown top-level keys {sorted(unknown)}; expected env, algorithm, [hyperparameters] "
            "(and, for a multi-agent game, [env_params], [groups], [policies.<name>])"
        )
    for name in ("hyperparameters", *MULTI_AGENT_TABLES):
        if not isinstance(raw.get(name, {}), dict):
            raise ConfigError(f"{name} must be a table ([{name}]), got {raw[name]!r}")
    return raw


def parse_override(text: str) -> tuple[str, str]:
    """``key=value`` of ``--set``: the key and the value's text, which the setting's type reads
    (:func:`settings.read`: ``3``, ``1e-3``, ``true``, ``[64, 64]``; bare words are strings)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects key=value, got {text!r}")
    return key.strip(), value


def build_config(raw: dict, overrides: list[str], seed: int | None):
    """The algorithm name, env id and the algorithm's config dataclass."""
    if multi_agent.is_game(raw.get("env")):
        return build_multi_agent_config(raw, overrides, seed)
    tables = sorted(set(MULTI_AGENT_TABLES) & set(raw))
    if tables:
        raise ConfigError(f"{tables} apply to multi-agent games only ({', '.join(GAMES)}), not {raw.get('env')!r}")
    algorithm = raw.get("algorithm")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    config_type = ALGORITHMS[algorithm][0]
    types = settings.field_types(config_type)
    values = dict(raw.get("hyperparameters", {}))
    for text in overrides:
        key, value = parse_override(text)
        values[key] = settings.read(value, types.get(key))
    if seed is not None:
        values["seed"] = seed
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise ConfigError(f"unknown {algorithm} hyper-parameters {unknown}; known: {sorted(types)}")
    try:
        config = config_type(**{key: settings.as_annotated(value, types[key]) for key, value in values.items()})
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None
    return algorithm, raw.get("env"), config


def build_multi_agent_config(raw: dict, overrides: list[str], seed: int | None):
    """The policies' default algorithm, the game and its :class:`multi_agent.MultiAgentConfig` (for
    ``algorithm = "maddpg"``, its :class:`maddpg_config.MADDPGConfig`).

    ``--set`` keys: a plain key is a run setting (``num_envs=8``); a dotted key reaches into a table
    (``policies.taggers.learning_rate=1e-3``, ``env_params.num_runners=20``, ``groups.runners=shared``).
    """
    algorithm, env = raw.get("algorithm"), raw["env"]
    if algorithm not in MULTI_AGENT_ALGORITHMS:
        raise ConfigError(
            f"algorithm of a multi-agent config (the default of its policies, or maddpg) must be one of "
            f"{list(MULTI_AGENT_ALGORITHMS)}, got {algorithm!r}"
        )
    off_policy = algorithm == "maddpg"
    tables = {name: copy.deepcopy(raw.get(name, {})) for name in ("hyperparameters", *MULTI_AGENT_TABLES)}
    # The type of a setting each table's keys name.
    types = {
        "hyperparameters": settings.field_types(
            maddpg_config.MADDPGConfig if off_policy else multi_agent.MultiAgentConfig
        ),
        "policies": settings.field_types(maddpg_config.PolicySettings if off_policy else multi_agent.PolicyConfig),
        "env_params": settings.field_types(get_game(env).params_type),
        "groups": {},
    }
    for text in overrides:
        key, value = parse_override(text)
        path = key.split(".")
        if len(path) == 1:
            path = ["hyperparameters", *path]
        if path[0] not in tables or len(path) != (3 if path[0] == "policies" else 2):
            raise ConfigError(
                f"--set {key}: use a run setting (num_envs=8) or a dotted key into a table: "
                "policies.<name>.<setting>, env_params.<field>, groups.<group>"
            )
        table = tables[path[0]]
        if path[0] == "policies":
            table = table.setdefault(path[1], {})
            if not isinstance(table, dict):
                raise ConfigError(f"--set {key}: policies.{path[1]} is not a table")
        table[path[-1]] = settings.read(value, types[path[0]].get(path[-1], str if path[0] == "groups" else None))
    if seed is not None:
        tables["hyperparameters"]["seed"] = seed
    try:
        if off_policy:
            config = maddpg_config.MADDPGConfig.from_dict(tables)
        else:
            config = multi_agent.MultiAgentConfig.from_dict(tables, algorithm)
        multi_agent.game_params(env, config)
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None
    return algorithm, env, config


def check_env(algorithm: str, env, config) -> None:
    """``ConfigError`` unless ``env`` exists and ``algorithm`` can train it."""
    if not isinstance(env, str):
        raise ConfigError(f'the config must name its env (env = "CartPole-v1"), got {env!r}')
    try:
        if isinstance(config, maddpg_config.MADDPGConfig):
            maddpg_config.box_spaces(env, config)
            return
        if isinstance(config, multi_agent.MultiAgentConfig):
            multi_agent.policy_spaces(env, config)
            return
        definition = env_spec(env).definition
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None
    space = definition.action_space(definition.params_type())
    if isinstance(config, ddpg.DDPGConfig) and not isinstance(space, spaces.Box):
        raise ConfigError(f"{algorithm} needs continuous (Box) actions; {env} has {space}: train it with ppo or a2c")


def uses_auto_num_envs(raw: dict, overrides: list[str]) -> bool:
    """Whether ``num_envs`` is ``"auto"``, in the file's ``[hyperparameters]`` or the last ``--set`` of it."""
    value = raw.get("hyperparameters", {}).get("num_envs")
    for text in overrides:
        key, parsed = parse_override(text)
        if key == "num_envs":
            value = settings.read(parsed)
    return value == sizing.AUTO


def build_auto_config(raw: dict, overrides: list[str], seed: int | None, device):
    """:func:`build_config` with ``num_envs = "auto"`` held by the first count a sweep would try
    that the config takes (the sweep replaces it)."""
    error = None
    for num_envs in sizing.candidates(device):
        try:
            return build_config(raw, [*overrides, f"num_envs={num_envs}"], seed)
        except ConfigError as problem:
            error = error or problem
    raise error


def literal(v) -> str:
    """A TOML value (``repr(math.inf)`` is TOML's ``inf``)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(literal(x) for x in v) + "]"
    return repr(v) if not isinstance(v, str) else f'"{v}"'


def to_toml(algorithm: str, env: str, config) -> str:
    lines = [f'env = "{env}"', f'algorithm = "{algorithm}"']
    if isinstance(config, MULTI_AGENT_CONFIGS):
        tables = config.to_dict()
        named = [(name, tables[name]) for name in ("hyperparameters", "env_params", "groups")]
        named += [(f"policies.{name}", values) for name, values in tables["policies"].items()]
    else:
        named = [("hyperparameters", dataclasses.asdict(config))]
    for name, table in named:
        lines += ["", f"[{name}]", *(f"{k} = {literal(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def config_dict(config) -> dict:
    """The config as the checkpoint stores it (what :func:`raw_config` reads back)."""
    return config.to_dict() if isinstance(config, MULTI_AGENT_CONFIGS) else dataclasses.asdict(config)


def raw_config(checkpoint: dict) -> dict:
    """A checkpoint's config as a parsed config file (for :func:`build_config`)."""
    if multi_agent.is_game(checkpoint["env"]):
        return {"env": checkpoint["env"], "algorithm": checkpoint["algorithm"], **checkpoint["config"]}
    return {"env": checkpoint["env"], "algorithm": checkpoint["algorithm"], "hyperparameters": checkpoint["config"]}


def train_function(algorithm: str, config):
    """The function that trains ``config``: the algorithm's, :func:`multi_agent.train` or :func:`maddpg.train`."""
    if isinstance(config, maddpg_config.MADDPGConfig):
        return maddpg.train
    return multi_agent.train if isinstance(config, multi_agent.MultiAgentConfig) else ALGORITHMS[algorithm][1]
