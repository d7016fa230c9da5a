"""``gpu-marl-train``: train a policy on one env from a config file, with a progress bar, metrics,
a learning-curve picture and a checkpoint; or evaluate a checkpoint.

    gpu-marl-train --env CartPole-v1                       # the shipped config for the env
    gpu-marl-train --config my.toml --set num_envs=64 --set learning_rate=1e-3 --seed 3
    gpu-marl-train --evaluate runs/CartPole-v1-ppo-seed0/checkpoint.pt
    gpu-marl-train --resume runs/CartPole-v1-ppo-seed0/checkpoint.pt --set total_timesteps=1000000
    gpu-marl-train --env TagContinuous-v0 --set num_envs=8 --set policies.runners.train=false
    gpu-marl-train --env CartPole-v1 --set num_envs=auto     # the env count chosen by a throughput sweep
    gpu-marl-train --nproc-per-node 2 --env CartPole-v1      # 2 GPUs (torchrun), num_envs per GPU

(also ``python -m gpu_marl_envs.baselines.train``, and ``torchrun --nproc-per-node N -m
gpu_marl_envs.baselines.train ...`` for several GPUs or hosts: docs/distributed.md). A config is a
TOML file with ``env``, ``algorithm`` and a ``[hyperparameters]`` table whose keys are the algorithm's config fields
(``PPOConfig``, ``A2CConfig``, ``DDPGConfig``); shipped configs live in ``gpu_marl_envs/baselines/configs/``.
A multi-agent game (Tag, CovidEconomy) trains one network per policy (:mod:`multi_agent`): its config adds
``[groups]`` (group -> policy name), one ``[policies.<name>]`` table per policy (``PolicyConfig``
fields; ``algorithm`` defaults to the top-level one) and optionally ``[env_params]``; its
``[hyperparameters]`` are the run's (``MultiAgentConfig``: num_envs, num_steps, total_timesteps,
seed, ...). ``--set`` also takes dotted keys (``policies.taggers.learning_rate=1e-3``,
``env_params.num_runners=20``). Evaluating a multi-agent checkpoint prints each group's return and,
for a game with a renderer (Tag, not CovidEconomy), writes ``animation.gif`` of one game beside the
checkpoint.
The run directory (``--out``, default ``runs/<env>-<algorithm>-seed<seed>``) receives
``config.toml`` (the resolved config), ``metrics.csv``, ``learning_curve.png``, ``checkpoint.pt``
(rewritten atomically at each log interval, with the optimizer state that ``--resume`` continues
from) and, when TensorBoard is installed, ``tensorboard/``. The device is the GPU when there is one,
else the CPU (``--device``). ``num_envs = "auto"`` (in the file or ``--set``) picks the env count
by a short throughput sweep within a GPU-memory budget (:mod:`sizing`) and says what it chose and
why; the resolved config records the count. Under ``torchrun`` every rank trains and rank 0 alone
writes the run directory.
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import sys
from importlib import resources
from pathlib import Path

import torch
from tqdm import tqdm

from gpu_marl_envs.baselines import a2c, ddpg, multi_agent, ppo, sizing
from gpu_marl_envs.baselines.checkpoint import atomic_save
from gpu_marl_envs.baselines.distributed import SINGLE, Context, setup, teardown
from gpu_marl_envs.baselines.models import ActorCritic
from gpu_marl_envs.baselines.plotting import plot_learning_curve
from gpu_marl_envs.parallel_env import get_game
from gpu_marl_envs.registration import GAMES
from gpu_marl_envs.rendering import game_renderer, save_animation

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# algorithm -> (config type, train function, the policy class its checkpoints hold)
ALGORITHMS = {"ppo": (ppo.PPOConfig, ppo.train, ActorCritic), "a2c": (a2c.A2CConfig, a2c.train, ActorCritic),
              "ddpg": (ddpg.DDPGConfig, ddpg.train, ddpg.Actor)}
CONFIGS = resources.files("gpu_marl_envs.baselines") / "configs"
DEFAULT_CONFIGS = {"CartPole-v1": "cartpole_ppo.toml", "Acrobot-v1": "acrobot_ppo.toml",
                   "Pendulum-v1": "pendulum_ddpg.toml", "MountainCarContinuous-v0": "mountain_car_continuous_ddpg.toml",
                   "TagContinuous-v0": "tag_continuous_ppo.toml", "TagGridworld-v0": "tag_gridworld_a2c.toml",
                   "CovidEconomy-v0": "covid_economy_ppo.toml"}
MULTI_AGENT_TABLES = ("env_params", "groups", "policies")


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message says why."""


def read_config(path=None, env: str | None = None) -> dict:
    if path is None:
        if env not in DEFAULT_CONFIGS:
            raise ConfigError(f"no shipped config for env {env!r}; shipped: {sorted(DEFAULT_CONFIGS)} "
                              "(or pass --config FILE)")
        text = (CONFIGS / DEFAULT_CONFIGS[env]).read_text()
    else:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise ConfigError(f"cannot read config {path}: {error}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config {path or DEFAULT_CONFIGS[env]} is not valid TOML: {error}") from None
    unknown = set(raw) - {"env", "algorithm", "hyperparameters", *MULTI_AGENT_TABLES}
    if unknown:
        raise ConfigError(f"unknown top-level keys {sorted(unknown)}; expected env, algorithm, [hyperparameters] "
                          "(and, for a multi-agent game, [env_params], [groups], [policies.<name>])")
    return raw


def parse_override(text: str) -> tuple[str, object]:
    """``key=value`` with a TOML value (``3``, ``1e-3``, ``true``, ``[64, 64]``; bare words are strings)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects key=value, got {text!r}")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return key.strip(), parsed


def build_config(raw: dict, overrides: list[str], seed: int | None):
    """The algorithm name, env id and the algorithm's config dataclass."""
    if multi_agent.is_game(raw.get("env")):
        return build_multi_agent_config(raw, overrides, seed)
    tables = sorted(set(MULTI_AGENT_TABLES) & set(raw))
    if tables:
        raise ConfigError(f"{tables} apply to multi-agent games only ({', '.join(GAMES)}), "
                          f"not {raw.get('env')!r}")
    algorithm = raw.get("algorithm")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    config_type = ALGORITHMS[algorithm][0]
    values = dict(raw.get("hyperparameters", {}))
    values.update(parse_override(text) for text in overrides)
    if seed is not None:
        values["seed"] = seed
    names = {f.name for f in dataclasses.fields(config_type)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"unknown {algorithm} hyper-parameters {unknown}; known: {sorted(names)}")
    if "hidden" in values:
        values["hidden"] = tuple(values["hidden"])
    try:
        return algorithm, raw.get("env"), config_type(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None


def build_multi_agent_config(raw: dict, overrides: list[str], seed: int | None):
    """The policies' default algorithm, the game and its :class:`multi_agent.MultiAgentConfig`.

    ``--set`` keys: a plain key is a run setting (``num_envs=8``); a dotted key reaches into a table
    (``policies.taggers.learning_rate=1e-3``, ``env_params.num_runners=20``, ``groups.runners=shared``).
    """
    algorithm, env = raw.get("algorithm"), raw["env"]
    if algorithm not in multi_agent.ALGORITHMS:
        raise ConfigError(f"algorithm of a multi-agent config (the default of its policies) must be one of "
                          f"{list(multi_agent.ALGORITHMS)}, got {algorithm!r}")
    tables = {name: copy.deepcopy(raw.get(name, {})) for name in ("hyperparameters", *MULTI_AGENT_TABLES)}
    for text in overrides:
        key, value = parse_override(text)
        path = key.split(".")
        if len(path) == 1:
            path = ["hyperparameters", *path]
        if path[0] not in tables or len(path) != (3 if path[0] == "policies" else 2):
            raise ConfigError(f"--set {key}: use a run setting (num_envs=8) or a dotted key into a table: "
                              "policies.<name>.<setting>, env_params.<field>, groups.<group>")
        table = tables[path[0]]
        if path[0] == "policies":
            table = table.setdefault(path[1], {})
        table[path[-1]] = value
    if seed is not None:
        tables["hyperparameters"]["seed"] = seed
    try:
        config = multi_agent.MultiAgentConfig.from_dict(tables, algorithm)
        multi_agent.game_params(env, config)
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None
    return algorithm, env, config


def literal(v) -> str:
    """A TOML value (``repr(math.inf)`` is TOML's ``inf``)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(literal(x) for x in v) + "]"
    return repr(v) if not isinstance(v, str) else f'"{v}"'


def to_toml(algorithm: str, env: str, config) -> str:
    lines = [f'env = "{env}"', f'algorithm = "{algorithm}"']
    if isinstance(config, multi_agent.MultiAgentConfig):
        tables = config.to_dict()
        named = [(name, tables[name]) for name in ("hyperparameters", "env_params", "groups")]
        named += [(f"policies.{name}", settings) for name, settings in tables["policies"].items()]
    else:
        named = [("hyperparameters", dataclasses.asdict(config))]
    for name, table in named:
        lines += ["", f"[{name}]", *(f"{k} = {literal(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def config_dict(config) -> dict:
    """The config as the checkpoint stores it (what :func:`raw_config` reads back)."""
    return config.to_dict() if isinstance(config, multi_agent.MultiAgentConfig) else dataclasses.asdict(config)


def raw_config(checkpoint: dict) -> dict:
    """A checkpoint's config as a parsed config file (for :func:`build_config`)."""
    if multi_agent.is_game(checkpoint["env"]):
        return {"env": checkpoint["env"], "algorithm": checkpoint["algorithm"], **checkpoint["config"]}
    return {"env": checkpoint["env"], "algorithm": checkpoint["algorithm"], "hyperparameters": checkpoint["config"]}


class MetricsWriter:
    """Each history entry as a row of ``metrics.csv`` and, where TensorBoard is installed, as
    scalars of an event file in ``tensorboard/`` (x axis: env steps)."""

    def __init__(self, out: Path):
        self.file = open(out / "metrics.csv", "w", newline="")
        self.csv = None
        # A resumed run in the same folder already has the earlier entries in its event files.
        self.has_earlier_events = (out / "tensorboard").is_dir()
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # TensorBoard is optional (the [tensorboard] extra)
            self.tensorboard = None
        else:
            self.tensorboard = SummaryWriter(str(out / "tensorboard"))

    def write(self, entry: dict, earlier: bool = False) -> None:
        """One entry; ``earlier``: an entry of the run this one resumes."""
        if self.csv is None:
            self.csv = csv.DictWriter(self.file, fieldnames=list(entry))
            self.csv.writeheader()
        self.csv.writerow(entry)
        self.file.flush()
        if self.tensorboard is not None and not (earlier and self.has_earlier_events):
            for key, value in entry.items():
                if key != "env_steps":
                    self.tensorboard.add_scalar(key, value, entry["env_steps"])
            self.tensorboard.flush()

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()


def train_function(algorithm: str, config):
    """The function that trains ``config``: the algorithm's, or :func:`multi_agent.train`."""
    return multi_agent.train if isinstance(config, multi_agent.MultiAgentConfig) else ALGORITHMS[algorithm][1]


def run_training(algorithm: str, env: str, config, out: Path, device, resume: dict | None = None,
                 context: Context = SINGLE) -> dict | None:
    """Train (or, with ``resume`` = a checkpoint of this command, continue) a run in ``out``:
    ``checkpoint.pt`` is rewritten at each log interval and holds everything a resume needs.
    Every rank of ``context`` trains; rank 0 alone writes ``out`` and evaluates (the others
    return None)."""
    multi = isinstance(config, multi_agent.MultiAgentConfig)
    train = train_function(algorithm, config)
    header = {"algorithm": algorithm, "env": env, "config": config_dict(config)}
    state = None if resume is None else {k: v for k, v in resume.items() if k not in header}
    log_every = max(1, context.iterations(config.total_timesteps, sizing.iteration_steps(config)) // 50)
    if not context.is_main:
        train(env, config, device=device, log=None, resume=state, log_every=log_every)
        return None
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.toml").write_text(to_toml(algorithm, env, config))
    metrics = MetricsWriter(out)
    earlier = [] if state is None else state["history"]
    with tqdm(total=config.total_timesteps, unit="step", unit_scale=True, desc=f"{algorithm} {env}") as bar:
        def log(entry: dict, earlier: bool = False) -> None:
            metrics.write(entry, earlier)
            bar.update(entry["env_steps"] - bar.n)
            bar.set_postfix(ret=f"{entry['mean_return']:.1f}", sps=f"{entry['env_steps'] / entry['seconds']:,.0f}")

        def save(training_state: dict) -> None:
            atomic_save({**header, **training_state}, out / "checkpoint.pt")

        for entry in earlier:  # a resumed run's metrics start with the first run's
            log(entry, earlier=True)
        try:
            agent, history = train(env, config, device=device, log=log, save=save, resume=state, log_every=log_every)
        finally:
            metrics.close()
    plot_learning_curve(history, out / "learning_curve.png", f"{algorithm} on {env} (seed {config.seed})"
                        + (f", {context.world_size} ranks" if context.enabled else ""))
    if multi:
        returns = multi_agent.evaluate(agent, env, config, device=device)
        return {"mean_return": returns[multi_agent.reported_group(config)], "group_returns": returns,
                "checkpoint": out / "checkpoint.pt"}
    returns = ppo.evaluate(agent, env, device=device)
    return {"mean_return": returns.mean().item(), "checkpoint": out / "checkpoint.pt"}


def load_policies(checkpoint: dict, device) -> tuple[dict, str, multi_agent.MultiAgentConfig]:
    """The policies, game and config of a (loaded) multi-agent checkpoint written by this command."""
    config = multi_agent.MultiAgentConfig.from_dict(checkpoint["config"])
    policies = multi_agent.make_policies(checkpoint["env"], config, device)
    for name, policy in policies.items():
        policy.load_state_dict(checkpoint[f"policy/{name}"])
    return policies, checkpoint["env"], config


def evaluate_policies(checkpoint: dict, path: Path, episodes: int, device) -> None:
    """Print a multi-agent checkpoint's greedy returns per group; for a game with a renderer (Tag),
    write game 0 as ``animation.gif`` beside the checkpoint's ``path``."""
    policies, env, config = load_policies(checkpoint, device)
    frames = None if game_renderer(get_game(env).id) is None else []
    returns = multi_agent.evaluate(policies, env, config, episodes, device=device, frames=frames)
    drawn = "" if frames is None else f"; game 0 drawn in {save_animation(frames, path.with_name('animation.gif'))}"
    print(f"{env}: greedy mean return per agent over {episodes} games: "
          + ", ".join(f"{group} {value:.2f}" for group, value in returns.items()) + drawn)


def load_agent(path, device) -> tuple[torch.nn.Module, str]:
    """The policy and env of a checkpoint written by this command."""
    checkpoint = torch.load(path, map_location=device, weights_only=False)
    from gpu_marl_envs.vector_env import GpuVectorEnv

    probe = GpuVectorEnv(checkpoint["env"], 1, device="cpu")
    policy_type = ALGORITHMS[checkpoint["algorithm"]][2]
    agent = policy_type(probe.single_observation_space.shape[0], probe.single_action_space,
                        tuple(checkpoint["config"]["hidden"]))
    agent.load_state_dict(checkpoint["model"])
    return agent.to(device), checkpoint["env"]


def uses_auto_num_envs(raw: dict, overrides: list[str]) -> bool:
    """Whether ``num_envs`` is ``"auto"``, in the file's ``[hyperparameters]`` or the last ``--set`` of it."""
    value = raw.get("hyperparameters", {}).get("num_envs")
    for text in overrides:
        key, parsed = parse_override(text)
        if key == "num_envs":
            value = parsed
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


def prepare(args) -> tuple[str, str, object, Path, dict | None, bool]:
    """The run the arguments ask for: algorithm, env, config (``num_envs = "auto"`` not yet
    resolved), run directory, the checkpoint it resumes (or None), and whether num_envs is auto."""
    if args.resume:
        # On the CPU: each rank copies what it needs onto its own device.
        resume = torch.load(args.resume, map_location="cpu", weights_only=False)
        if "iteration" not in resume:
            raise ConfigError(f"{args.resume} holds no training state to resume from")
        changed = sorted({parse_override(text)[0] for text in args.set} - {"total_timesteps"})
        if changed or args.seed is not None:
            raise ConfigError(f"a resumed run keeps its config; only --set total_timesteps=N may change "
                              f"(got {changed or ['--seed']})")
        algorithm, env, config = build_config(raw_config(resume), args.set, None)
        return algorithm, env, config, Path(args.out) if args.out else Path(args.resume).parent, resume, False
    raw = read_config(args.config, args.env)
    auto = uses_auto_num_envs(raw, args.set)
    if auto:
        algorithm, env, config = build_auto_config(raw, args.set, args.seed, args.device)
    else:
        algorithm, env, config = build_config(raw, args.set, args.seed)
    if args.env and env != args.env:
        raise ConfigError(f"the shipped config is for {env}, not {args.env}")
    return algorithm, env, config, Path(args.out or f"runs/{env}-{algorithm}-seed{config.seed}"), None, auto


def check_ranks(config, context: Context) -> None:
    """That the ranks of ``context`` can train ``config``: its run covers one iteration of all of them."""
    try:
        context.iterations(config.total_timesteps, sizing.iteration_steps(config))
    except ValueError as error:
        raise ConfigError(str(error)) from None


def launch(args, argv: list[str]) -> int:
    """``--nproc-per-node N``: check the run here, then start ``torch.distributed.run`` (what the
    ``torchrun`` command runs) on this host with N processes of this command, without the option."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    if args.nproc_per_node < 1:
        raise ConfigError(f"--nproc-per-node must be >= 1, got {args.nproc_per_node}")
    if args.evaluate:
        raise ConfigError("--evaluate runs in one process: drop --nproc-per-node")
    if torch.device(args.device).type == "cuda" and args.nproc_per_node > torch.cuda.device_count():
        raise ConfigError(f"--nproc-per-node {args.nproc_per_node} needs as many GPUs; this host has "
                          f"{torch.cuda.device_count()} (or train on --device cpu)")
    config = prepare(args)[2]
    check_ranks(config, Context(world_size=args.nproc_per_node))
    rest = without_nproc(argv)
    try:
        torchrun(["--standalone", "--nproc-per-node", str(args.nproc_per_node), "-m", __spec__.name, *rest])
    except ChildFailedError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


def without_nproc(argv: list[str]) -> list[str]:
    """``argv`` less ``--nproc-per-node N`` (or ``--nproc-per-node=N``)."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc-per-node":
            skip = True
        elif not arg.startswith("--nproc-per-node="):
            rest.append(arg)
    return rest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-marl-train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--env", help=f"train with the shipped config of this env ({', '.join(DEFAULT_CONFIGS)})")
    source.add_argument("--config", help="train with this TOML config")
    source.add_argument("--evaluate", metavar="CHECKPOINT", help="evaluate a checkpoint and exit")
    source.add_argument("--resume", metavar="CHECKPOINT",
                        help="continue the run of a checkpoint, in its folder unless --out is given "
                             "(--set total_timesteps=N lengthens it)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a hyper-parameter")
    parser.add_argument("--seed", type=int, help="the run's seed (overrides the config's)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", help="run directory (default runs/<env>-<algorithm>-seed<seed>)")
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes")
    parser.add_argument("--nproc-per-node", type=int, metavar="N",
                        help="train with N processes on this host (one per GPU) through torchrun; "
                             "num_envs is per process")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    try:
        if args.nproc_per_node is not None:
            return launch(args, argv)
        if args.evaluate:
            checkpoint = torch.load(args.evaluate, map_location=args.device, weights_only=False)
            if multi_agent.is_game(checkpoint["env"]):
                evaluate_policies(checkpoint, Path(args.evaluate), args.episodes, args.device)
                return 0
            agent, env = load_agent(args.evaluate, args.device)
            returns = ppo.evaluate(agent, env, num_episodes=args.episodes, device=args.device)
            print(f"{env}: mean return {returns.mean().item():.1f} over {args.episodes} episodes "
                  f"(min {returns.min().item():.1f}, max {returns.max().item():.1f})")
            return 0
        algorithm, env, config, out, resume, auto = prepare(args)
        context = setup(args.device)  # under torchrun: this rank's GPU, the process group
        check_ranks(config, context)
        device = context.device if context.device is not None else args.device
        if auto:
            num_envs = sizing.choose_num_envs(train_function(algorithm, config), env, config, device=device)
            config = dataclasses.replace(config, num_envs=num_envs)
        result = run_training(algorithm, env, config, out, device, resume, context)
        teardown()  # only after a run that ended well: a failed rank must not wait for the others
        if result is None:
            return 0
        if "group_returns" in result:
            returns = ", ".join(f"{group} {value:.2f}" for group, value in result["group_returns"].items())
            print(f"{env}: greedy mean return per agent: {returns}; run saved in {out}")
        else:
            print(f"{env}: greedy mean return {result['mean_return']:.1f}; run saved in {out}")
        return 0
    except ConfigError as error:
        parser.error(str(error))


if __name__ == "__main__":
    sys.exit(main())
