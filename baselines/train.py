"""``gpu-marl-train``: train a policy on one env from a config file, with a progress bar, metrics,
a learning-curve picture and a checkpoint; or evaluate a checkpoint.

    gpu-marl-train --env CartPole-v1                       # the shipped config for the env
    gpu-marl-train --config my.toml --set num_envs=64 --set learning_rate=1e-3 --seed 3
    gpu-marl-train --evaluate runs/CartPole-v1-ppo-seed0/checkpoint.pt
    gpu-marl-train --resume runs/CartPole-v1-ppo-seed0/checkpoint.pt --set total_timesteps=1000000
    gpu-marl-train --env CartPole-v1 --overwrite           # replace the run in runs/CartPole-v1-ppo-seed0
    gpu-marl-train --env TagContinuous-v0 --set num_envs=8 --set policies.runners.train=false
    gpu-marl-train --env CartPole-v1 --set num_envs=auto     # the env count chosen by a throughput sweep
    gpu-marl-train --nproc-per-node 2 --env CartPole-v1      # 2 GPUs (torchrun), num_envs per GPU
    gpu-marl-train --nproc-per-node 2 --max-restarts 3 --env CartPole-v1   # restarted after a failure
    gpu-marl-train --env TagContinuous-v0 --lightning      # through PyTorch Lightning's Trainer

(also ``python -m gpu_marl_envs.baselines.train``, and ``torchrun --nproc-per-node N -m
gpu_marl_envs.baselines.train ...`` for several GPUs or hosts: docs/distributed.md). A config is a
TOML file with ``env``, ``algorithm`` and a ``[hyperparameters]`` table whose keys are the algorithm's config fields
(``PPOConfig``, ``A2CConfig``, ``DDPGConfig``, ``TD3Config``); shipped configs live in
``gpu_marl_envs/baselines/configs/``.
A multi-agent game (Tag, CovidEconomy) trains one network per policy (:mod:`multi_agent`): its config adds
``[groups]`` (group -> policy name), one ``[policies.<name>]`` table per policy (``PolicyConfig``
fields; ``algorithm`` defaults to the top-level one) and optionally ``[env_params]``; its
``[hyperparameters]`` are the run's (``MultiAgentConfig``: num_envs, num_steps, total_timesteps,
seed, ...). ``--set`` also takes dotted keys (``policies.taggers.learning_rate=1e-3``,
``env_params.num_runners=20``); values are typed by the setting (:mod:`settings`). Evaluating a
multi-agent checkpoint prints each group's return and, for a game with a renderer (Tag, not
CovidEconomy), writes ``animation.gif`` of one game beside the checkpoint.

The run folder (``--out``, default ``runs/<env>-<algorithm>-seed<seed>``) receives ``checkpoint.pt``
(the run's starting state, then rewritten atomically at each log interval, with the optimizer
state that ``--resume`` continues from), ``config.toml`` (the resolved config), ``metrics.csv``,
``learning_curve.png`` and, when TensorBoard is installed, ``tensorboard/``. A folder that holds a
run is never written into by another: a new run refuses it (continue the run with ``--resume``,
replace it with ``--overwrite``, or pass another ``--out``), and nothing is written until the
config, env, device and folder have passed their checks and the trainer has started
(:mod:`run_folder`). A folder that holds other files but no run is refused, naming them; ``--overwrite``
removes a run's own files only. The device is the GPU when there is one, else the CPU (``--device``).
``num_envs = "auto"`` (in the file or ``--set``) picks the env count by a short throughput sweep
within a GPU-memory budget (:mod:`sizing`) and says what it chose and why; the resolved config
records the count. One process writes a run folder at a time, holding its lock (``.lock``, which
names the holder) for the run's life: a second command into it is refused with one line naming the
holder. Under ``torchrun`` every rank trains and rank 0 alone writes the run folder, holding its
lock; ranks whose torchrun agent has died stop at their next log interval, so that orphaned ranks
do not train on beside a later command. A run whose losses or parameters become non-finite stops
at the log interval that sees them (exit code 1), its checkpoint kept at the last good one. A
finished run resumed in its folder finishes what a kill left undone (the learning curve). When
torchrun restarts the job (``--max-restarts``), the command finds the checkpoint this job
wrote and continues from it. ``--lightning`` runs the same training through PyTorch Lightning's
Trainer (:mod:`gpu_marl_envs.baselines.lightning`; ``pip install gpu_marl_envs[lightning]``): the
same run folder and numbers, plus ``lightning.ckpt``, Lightning's checkpoint of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from gpu_marl_envs.baselines import maddpg, multi_agent, ppo, sizing
from gpu_marl_envs.baselines.checkpoint import (
    DIGEST,
    CheckpointError,
    fitting,
    load_checkpoint,
    resumed_iteration,
    save_checkpoint,
)
from gpu_marl_envs.baselines.distributed import (
    DEFAULT_TIMEOUT,
    MAX_TIMEOUT,
    Context,
    LauncherGone,
    job_id,
    launch_problem,
    setup,
    teardown,
)
from gpu_marl_envs.baselines.plotting import plot_learning_curve
from gpu_marl_envs.baselines.rollout import Diverged
from gpu_marl_envs.baselines.run_config import (
    ALGORITHMS,
    DEFAULT_CONFIGS,
    MULTI_AGENT_CONFIGS,
    ConfigError,
    build_auto_config,
    build_config,
    check_env,
    config_dict,
    parse_override,
    raw_config,
    read_config,
    to_toml,
    train_function,
    uses_auto_num_envs,
)
from gpu_marl_envs.baselines.run_folder import (
    CHECKPOINT,
    LIGHTNING_CHECKPOINT,
    FolderLock,
    MetricsWriter,
    RunFolderError,
    RunStopped,
    check_new_run,
    check_unlocked,
    check_writable,
    remove_run,
    remove_temporaries,
    write_text,
)
from tqdm import tqdm

import gpu_marl_envs
from gpu_marl_envs.parallel_env import get_game
from gpu_marl_envs.rendering import game_renderer, save_animation

HEADER = ("algorithm", "env", "config", "written_by")
"""A checkpoint's keys besides the training state: what the command adds."""


# -- what a run will do, checked before anything is written ----------------------------------------


@dataclass(frozen=True)
class Plan:
    """A training command's run, decided before anything is written."""

    algorithm: str
    env: str
    config: object  # the trainer's config (with auto: num_envs holds a placeholder until the sweep)
    folder: Path
    resume: dict | None = None  # the checkpoint the run continues (--resume, or this job's own after a restart)
    same_folder: bool = False  # the run of resume is in folder already (in place, or a restart)
    overwrite: bool = False  # folder holds a run that this one replaces (--overwrite)
    restart: bool = False  # torchrun restarted this job, which continues its own checkpoint
    auto: bool = False  # num_envs = "auto": a sweep picks it once the ranks are up
    finished: bool = False  # resume holds every iteration of config.total_timesteps: nothing left to train
    identity: tuple | None = None  # with same_folder: the file identity of the folder's checkpoint when read


def plan_run(args, world_size: int, local_processes: int) -> Plan:
    """The run the arguments ask for, on ``world_size`` ranks (``local_processes`` on this host),
    after every check that needs no process group: config, env, device, checkpoint and folder.
    Reads files, writes none."""
    check_device(args.device, local_processes)
    if args.lightning:
        check_lightning()
    if args.resume:
        identity = file_identity(args.resume)  # before reading: a file replaced meanwhile no longer matches
        resume = load_checkpoint(args.resume)
        check_checkpoint(resume, args.resume, training=True)
        changed = sorted({parse_override(text)[0] for text in args.set} - {"total_timesteps"})
        if changed or args.seed is not None:
            raise ConfigError(
                f"a resumed run keeps its config; only --set total_timesteps=N may change (got {changed or ['--seed']})"
            )
        algorithm, env, config = build_config(raw_config(resume), args.set, None)
        source = Path(args.resume)
        if args.out is None and source.name != CHECKPOINT:
            raise RunFolderError(
                f"--resume {source}: pass --out, the folder to continue the run in (a run's "
                f"folder holds its checkpoint as {CHECKPOINT})"
            )
        folder = Path(args.out) if args.out else source.parent
        in_place = source.name == CHECKPOINT and folder.resolve() == source.parent.resolve()
        auto = False
    else:
        raw = read_config(args.config, args.env)
        auto = uses_auto_num_envs(raw, args.set)
        if auto:
            algorithm, env, config = build_auto_config(raw, args.set, args.seed, args.device)
        else:
            algorithm, env, config = build_config(raw, args.set, args.seed)
        if args.env and env != args.env:
            raise ConfigError(f"the shipped config is for {env}, not {args.env}")
        folder = Path(args.out or f"runs/{env}-{algorithm}-seed{config.seed}")
        resume, in_place, identity = None, False, None
    check_env(algorithm, env, config)
    if algorithm == "maddpg" and (args.lightning or world_size > 1):
        raise ConfigError(
            "maddpg trains in one process without Lightning: drop "
            + ("--lightning" if args.lightning else "--nproc-per-node (and torchrun)")
        )
    try:
        sizing.check_fits(env, config, args.device)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    check_writable(folder)
    own_identity = file_identity(folder / CHECKPOINT)
    own = own_checkpoint(folder)
    if own is not None:
        # torchrun restarted this job: its own checkpoint, whatever the command line resumed or started.
        # (Its first attempt's rank 0 may hold the lock still, while it ends: rank 0 waits for it.)
        plan = Plan(
            *build_config(raw_config(own), [], None),
            folder,
            resume=own,
            same_folder=True,
            restart=True,
            identity=own_identity,
        )
    else:
        check_unlocked(folder)
        if in_place:
            if args.overwrite:
                raise RunFolderError(f"--overwrite replaces the run in {folder}, which --resume continues: drop one")
            plan = Plan(algorithm, env, config, folder, resume=resume, same_folder=True, identity=identity)
        else:
            overwrite = check_new_run(folder, args.overwrite)
            plan = Plan(algorithm, env, config, folder, resume=resume, overwrite=overwrite, auto=auto)
    try:
        steps = sizing.iteration_steps(plan.config)
        done = resumed_iteration(plan.resume, world_size, steps)
        total = Context(world_size=world_size).iterations(plan.config.total_timesteps, steps)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return dataclasses.replace(plan, finished=plan.resume is not None and done >= total)


def file_identity(path) -> tuple | None:
    """What changes when the file at ``path`` is rewritten (a checkpoint is replaced by a rename:
    a new inode), or None where there is none."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def own_checkpoint(folder: Path) -> dict | None:
    """The checkpoint in ``folder`` if this torchrun job wrote it (this is a restart), else None."""
    job, path = job_id(), folder / CHECKPOINT
    if job is None or not path.exists():
        return None
    checkpoint = load_checkpoint(path)
    return checkpoint if checkpoint.get("written_by", {}).get("job") == job else None


def check_device(device: str, local_processes: int = 1) -> None:
    """``ConfigError`` unless ``device`` is the CPU or a CUDA GPU this host has (one per process)."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"--device {device!r} names no device: use cpu, cuda or cuda:N") from None
    if parsed.type == "cpu":
        return
    if parsed.type != "cuda":
        raise ConfigError(f"--device {device}: the trainers run on cpu or cuda[:N]")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"--device {device}: torch sees no CUDA GPU here (torch.cuda.is_available() is False); "
            "train with --device cpu"
        )
    count = torch.cuda.device_count()
    if parsed.index is not None and parsed.index >= count:
        raise ConfigError(f"--device {device}: this host has {count} GPU(s), cuda:0 to cuda:{count - 1}")
    if local_processes > count:
        raise ConfigError(
            f"{local_processes} processes on this host need as many GPUs; it has {count} (or train on --device cpu)"
        )
    if local_processes > 1 and parsed.index is not None:
        raise ConfigError(
            f"--device {device}: with several processes each trains on cuda:LOCAL_RANK; pass --device cuda"
        )


def check_lightning() -> None:
    """``ConfigError`` unless PyTorch Lightning can be imported (``--lightning``)."""
    try:
        import lightning.pytorch  # noqa: F401
    except ImportError as error:
        raise ConfigError(
            f"--lightning needs PyTorch Lightning ({error}): pip install 'gpu_marl_envs[lightning]'"
        ) from None


def check_checkpoint(checkpoint: dict, path, training: bool = False) -> None:
    """``CheckpointError`` unless ``checkpoint`` has this command's header (and, with ``training``,
    a training state to resume)."""
    needed = {"algorithm", "env", "config"} | ({"iteration", "world_size", "history"} if training else set())
    missing = sorted(needed - set(checkpoint))
    if missing:
        what = "no training state to resume from" if training else "not a checkpoint of gpu-marl-train"
        raise CheckpointError(f"{path} holds {what} (no {', '.join(missing)})")


# -- training --------------------------------------------------------------------------------------


class RunWriter:
    """Rank 0's writes into the run's folder. Nothing is written until the trainer hands over its
    first state or entry; then the folder is locked for the rest of the run (:class:`FolderLock`),
    checked again under the lock (another command may have written it since :func:`plan_run`), and
    written in this order: the checkpoint (what a restart looks for; with ``--overwrite`` it
    replaces the old run's before the rest of that run is removed, so a failed first write leaves
    the old run whole), ``config.toml`` and ``metrics.csv`` (:class:`run_folder.MetricsWriter`).
    A write that fails stops the run with :class:`RunStopped`, naming what the folder keeps."""

    def __init__(self, plan: Plan, header: dict, state: dict | None):
        self.plan, self.header, self.state = plan, header, state
        self.metrics: MetricsWriter | None = None
        self.lock: FolderLock | None = None
        self.saved_steps: int | None = None  # env steps of the last checkpoint written (None: none yet)

    def save(self, state: dict) -> None:
        if self.metrics is None:
            self._start(state)
        else:
            with self._stopping_on_failure():
                save_checkpoint({**self.header, **state}, self.plan.folder / CHECKPOINT)
            self.saved_steps = _env_steps(state["history"])

    def log(self, entry: dict) -> None:
        if self.metrics is None:
            self._start(None)
        with self._stopping_on_failure():
            self.metrics.write(entry)

    def ensure_started(self) -> None:
        """After the training: start the folder if the trainer handed over nothing (a finished run
        resumed, which trains no more)."""
        if self.metrics is None:
            self._start(None)

    def draw(self, history: list[dict], title: str) -> None:
        with self._stopping_on_failure():
            plot_learning_curve(history, self.plan.folder / "learning_curve.png", title)

    def close(self) -> None:
        """Close the metrics and release the folder."""
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    @contextlib.contextmanager
    def _stopping_on_failure(self):
        try:
            yield
        except (OSError, RunFolderError) as error:
            kept = (
                f"{self.plan.folder / CHECKPOINT} keeps the run at {self.saved_steps:,} env steps"
                if self.saved_steps is not None
                else "nothing was kept"
            )
            reason = error if isinstance(error, RunFolderError) else f"cannot write in {self.plan.folder}: {error}"
            raise RunStopped(f"{reason}; the run stopped, and {kept}") from None

    def _start(self, state: dict | None) -> None:
        plan, folder = self.plan, self.plan.folder
        created = not folder.exists()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.lock = FolderLock(folder, wait=RESTART_LOCK_WAIT if plan.restart else 0.0)
            if plan.same_folder:
                if file_identity(folder / CHECKPOINT) != plan.identity:
                    raise RunFolderError(
                        f"{folder / CHECKPOINT} changed since this command read it (another command wrote "
                        "the run meanwhile): run the command again to continue from it"
                    )
            else:
                check_new_run(folder, plan.overwrite)
            remove_temporaries(folder)
            if state is None and not plan.same_folder:
                state = self.state  # a run resumed into another folder starts it with its checkpoint
            if state is not None:
                save_checkpoint({**self.header, **state}, folder / CHECKPOINT)
                self.saved_steps = _env_steps(state["history"])
            elif plan.same_folder:
                self.saved_steps = _env_steps(plan.resume["history"])
            if plan.overwrite:
                remove_run(folder, keep=(CHECKPOINT,))
            write_text(folder / "config.toml", to_toml(plan.algorithm, plan.env, plan.config))
            earlier = None if plan.resume is None else list(plan.resume["history"])
            self.metrics = MetricsWriter(folder, earlier, plan.same_folder)
        except BaseException as error:
            if created and self.lock is not None:
                shutil.rmtree(folder)  # this process made it and alone wrote in it: as it was, absent
            self.close()
            if isinstance(error, OSError):
                raise RunFolderError(f"cannot write in {folder}: {error.strerror or error}") from None
            raise


RESTART_LOCK_WAIT = 60.0
"""Seconds a restarted job's rank 0 waits for its first attempt's rank 0 to release the folder."""


def _env_steps(history: list[dict]) -> int:
    return history[-1]["env_steps"] if history else 0


def curve_title(plan: Plan, world_size: int) -> str:
    return f"{plan.algorithm} on {plan.env} (seed {plan.config.seed})" + (
        f", {world_size} ranks" if world_size > 1 else ""
    )


def run_training(plan: Plan, device, context: Context, lightning: bool = False) -> dict | None:
    """Train (or, with ``plan.resume``, continue) the run of ``plan``: ``checkpoint.pt`` is written
    at the start and at each log interval and holds everything a resume needs. Every rank of
    ``context`` trains; rank 0 alone writes the folder, holding its lock until the learning curve
    is drawn, and evaluates (the others return None). ``lightning``: through Lightning's Trainer,
    which also writes ``lightning.ckpt`` there."""
    algorithm, env, config, folder = plan.algorithm, plan.env, plan.config, plan.folder
    multi = isinstance(config, MULTI_AGENT_CONFIGS)
    written_by = {"package": gpu_marl_envs.__version__, "torch": str(torch.__version__), "job": job_id()}
    if lightning:
        import lightning as lightning_package
        from gpu_marl_envs.baselines.lightning import command

        train = functools.partial(command.train, checkpoint=folder / LIGHTNING_CHECKPOINT)
        written_by["lightning"] = lightning_package.__version__
    else:
        train = train_function(algorithm, config)
    header = {"algorithm": algorithm, "env": env, "config": config_dict(config), "written_by": written_by}
    state = None if plan.resume is None else {k: v for k, v in plan.resume.items() if k not in (*HEADER, DIGEST)}
    log_every = max(1, context.iterations(config.total_timesteps, sizing.iteration_steps(config)) // 50)
    if not context.is_main:
        train(env, config, device=device, log=None, resume=state, log_every=log_every)
        return None
    writer = RunWriter(plan, header, state)
    earlier = [] if state is None else state["history"]
    try:
        with tqdm(
            total=config.total_timesteps,
            initial=_env_steps(earlier),
            unit="step",
            unit_scale=True,
            desc=f"{algorithm} {env}",
        ) as bar:

            def log(entry: dict) -> None:
                writer.log(entry)
                bar.update(entry["env_steps"] - bar.n)
                bar.set_postfix(ret=f"{entry['mean_return']:.1f}", sps=f"{entry['env_steps'] / entry['seconds']:,.0f}")

            agent, history = train(
                env, config, device=device, log=log, save=writer.save, resume=state, log_every=log_every
            )
            writer.ensure_started()
        writer.draw(history, curve_title(plan, context.world_size))
    except Diverged as error:
        raise RunStopped(
            f"training diverged: {error}; the run stopped, and {folder / CHECKPOINT} keeps its last good "
            f"state ({writer.saved_steps or 0:,} env steps): lower learning_rate, or check the env's rewards"
        ) from None
    finally:
        writer.close()  # a trainer that failed before handing anything over leaves no folder
    if multi:
        returns = multi_agent.evaluate(agent, env, config, device=device)
        return {
            "mean_return": returns[multi_agent.reported_group(config)],
            "group_returns": returns,
            "checkpoint": folder / CHECKPOINT,
        }
    returns = ppo.evaluate(agent, env, device=device)
    return {"mean_return": returns.mean().item(), "checkpoint": folder / CHECKPOINT}


def finish_leftovers(plan: Plan) -> str:
    """A finished run resumed in its folder: finish what a kill after its last checkpoint left
    undone (temporaries of interrupted writes removed, a missing learning curve drawn, from the
    checkpoint's history); returns what was done, for the report ("" for nothing)."""
    folder, done = plan.folder, []
    lock = FolderLock(folder)
    try:
        if file_identity(folder / CHECKPOINT) != plan.identity:
            raise RunFolderError(f"{folder / CHECKPOINT} changed since this command read it: run the command again")
        if list(folder.glob(".*.tmp")):
            remove_temporaries(folder)
            done.append("removed the temporaries of interrupted writes")
        curve = folder / "learning_curve.png"
        if not curve.exists() and plan.resume["history"]:
            plot_learning_curve(plan.resume["history"], curve, curve_title(plan, plan.resume["world_size"]))
            done.append(f"drew the missing {curve.name}")
    finally:
        lock.release()
    return "; ".join(done)


def train_command(args) -> int:
    """Check the run, form the process group (under torchrun), train, report."""
    problem = launch_problem()
    if problem is not None:
        raise ConfigError(problem)
    plan = plan_run(args, int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if plan.finished:
        # Training would only replay the run's history (and show it as training at an absurd speed).
        if int(os.environ.get("RANK", "0")) == 0:
            if plan.same_folder:
                done = finish_leftovers(plan)
                if done:
                    print(f"{plan.folder}: {done}", flush=True)
            checkpoint_path = args.resume or plan.folder / CHECKPOINT  # (a torchrun restart's own checkpoint)
            steps = _env_steps(plan.resume["history"])
            print(
                f"{plan.folder}: the run has finished ({steps:,} env steps of total_timesteps "
                f"{plan.config.total_timesteps:,}); nothing to train. Train it further with --resume "
                f"{checkpoint_path} --set total_timesteps=N (N > {plan.config.total_timesteps:,}), or evaluate it "
                f"with --evaluate {checkpoint_path}",
                flush=True,
            )
        return 0
    context = setup(args.device, args.collective_timeout)  # under torchrun: this rank's GPU, the process group
    # Every rank continues the same checkpoint (a folder each host reads, or none).
    if len(set(context.gather(None if plan.resume is None else plan.resume[DIGEST]))) > 1:
        raise ConfigError(
            f"the ranks found different checkpoints to continue in {plan.folder}: keep the run "
            "folder on a filesystem every host shares"
        )
    if plan.restart and context.is_main:
        print(
            f"torchrun restarted the job: {plan.folder} continues from its checkpoint at "
            f"{plan.resume['history'][-1]['env_steps'] if plan.resume['history'] else 0:,} env steps",
            flush=True,
        )
    device = context.device if context.device is not None else args.device
    with cpu_threads(device):
        if plan.auto:
            num_envs = sizing.choose_num_envs(
                train_function(plan.algorithm, plan.config), plan.env, plan.config, device=device
            )
            plan = dataclasses.replace(plan, config=dataclasses.replace(plan.config, num_envs=num_envs))
        result = run_training(plan, device, context, lightning=args.lightning)
    teardown()  # only after a run that ended well: a failed rank must not wait for the others
    if result is None:
        return 0
    if "group_returns" in result:
        returns = ", ".join(f"{group} {value:.2f}" for group, value in result["group_returns"].items())
        print(f"{plan.env}: greedy mean return per agent: {returns}; run saved in {plan.folder}")
    else:
        print(f"{plan.env}: greedy mean return {result['mean_return']:.1f}; run saved in {plan.folder}")
    return 0


@contextlib.contextmanager
def cpu_threads(device):
    """On the CPU, one torch thread while the command trains or evaluates (the caller's count
    after), unless ``OMP_NUM_THREADS`` sets the count (as torchrun does).
    The trainers' networks are small MLPs (64-unit layers) on batches of a few hundred to a few
    thousand rows, whose operations take microseconds: torch's intra-op threads cost more in
    hand-offs than they gain, and on a machine whose cores are busy they wait for each other. The
    README's first command on two cores (see its timing there) took 68 s with one thread and 158 s
    for its first fifth with two, on a machine other work shared."""
    previous = torch.get_num_threads()
    if torch.device(device).type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# -- evaluation ------------------------------------------------------------------------------------


def load_policies(checkpoint: dict, device) -> tuple[dict, str, multi_agent.MultiAgentConfig]:
    """The policies, game and config of a (loaded) multi-agent checkpoint written by this command
    (for maddpg: the actors, :func:`maddpg.load_actors`)."""
    if checkpoint["algorithm"] == "maddpg":
        return maddpg.load_actors(checkpoint, device)
    config = multi_agent.MultiAgentConfig.from_dict(checkpoint["config"])
    policies = multi_agent.make_policies(checkpoint["env"], config, device)
    for name, policy in policies.items():
        with fitting(f"the checkpoint's policy {name!r}"):
            policy.load_state_dict(checkpoint[f"policy/{name}"])
    if "iteration" in checkpoint:  # a scheduled std's bound where the run stood (not saved: the config's)
        env_steps = checkpoint["iteration"] * config.batch_size * checkpoint["world_size"]
        multi_agent.set_std_bounds(policies, config, env_steps)
    return policies, checkpoint["env"], config


def evaluate_policies(checkpoint: dict, path: Path, episodes: int, device) -> None:
    """Print a multi-agent checkpoint's greedy returns per group; for a game with a renderer (Tag),
    write game 0 as ``animation.gif`` beside the checkpoint's ``path``."""
    policies, env, config = load_policies(checkpoint, device)
    frames = None if game_renderer(get_game(env).id) is None else []
    returns = multi_agent.evaluate(policies, env, config, episodes, device=device, frames=frames)
    drawn = "" if frames is None else f"; game 0 drawn in {save_animation(frames, path.with_name('animation.gif'))}"
    print(
        f"{env}: greedy mean return per agent over {episodes} games: "
        + ", ".join(f"{group} {value:.2f}" for group, value in returns.items())
        + drawn
    )


def load_agent(checkpoint: dict, device) -> tuple[torch.nn.Module, str]:
    """The policy and env of a (loaded) single-agent checkpoint written by this command."""
    from gpu_marl_envs.vector_env import GpuVectorEnv

    algorithm, env, config = build_config(raw_config(checkpoint), [], None)  # (its defaults for what it lacks)
    probe = GpuVectorEnv(env, 1, device="cpu")
    agent = ALGORITHMS[algorithm][2](probe.single_observation_space.shape[0], probe.single_action_space, config.hidden)
    with fitting("the checkpoint's model"):
        agent.load_state_dict(checkpoint["model"])
    return agent.to(device), checkpoint["env"]


def evaluate_command(args) -> None:
    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    check_device(args.device)
    checkpoint = load_checkpoint(args.evaluate, map_location=args.device)
    check_checkpoint(checkpoint, args.evaluate)
    # Its header checked as a resume's is (a forged one is one line, not a traceback of building it).
    algorithm, env, config = build_config(raw_config(checkpoint), [], None)
    check_env(algorithm, env, config)
    with cpu_threads(args.device):
        if multi_agent.is_game(checkpoint["env"]):
            evaluate_policies(checkpoint, Path(args.evaluate), args.episodes, args.device)
            return
        agent, env = load_agent(checkpoint, args.device)
        returns = ppo.evaluate(agent, env, num_episodes=args.episodes, device=args.device)
    print(
        f"{env}: mean return {returns.mean().item():.1f} over {args.episodes} episodes "
        f"(min {returns.min().item():.1f}, max {returns.max().item():.1f})"
    )


# -- several processes -----------------------------------------------------------------------------


def launch(args, argv: list[str]) -> int:
    """``--nproc-per-node N``: check the run here, then start ``torch.distributed.run`` (what the
    ``torchrun`` command runs) on this host with N processes of this command, without the option,
    restarted up to ``--max-restarts`` times."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    if args.nproc_per_node < 1:
        raise ConfigError(f"--nproc-per-node must be >= 1, got {args.nproc_per_node}")
    if args.evaluate:
        raise ConfigError("--evaluate runs in one process: drop --nproc-per-node")
    restarts = args.max_restarts or 0
    if restarts < 0:
        raise ConfigError(f"--max-restarts must be >= 0, got {restarts}")
    plan_run(args, args.nproc_per_node, args.nproc_per_node)
    rest = without_options(argv, ("--nproc-per-node", "--max-restarts"))
    # The restarted ranks must not meet the first attempt's rendezvous store (distributed.launch_problem).
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    try:
        torchrun(
            [
                "--standalone",
                "--nproc-per-node",
                str(args.nproc_per_node),
                "--max-restarts",
                str(restarts),
                "-m",
                __spec__.name,
                *rest,
            ]
        )
    except ChildFailedError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


def without_options(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """``argv`` less the options ``names`` and their values (``--name N`` or ``--name=N``)."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not arg.startswith(tuple(f"{name}=" for name in names)):
            rest.append(arg)
    return rest


def shipped_config_env(env: str) -> str:
    """``--env``'s value as the shipped configs name envs: the package's namespace, with which the
    adapters and ``gymnasium.make`` take the id (``gpu_marl_envs/CartPole-v1``), dropped."""
    return env.removeprefix("gpu_marl_envs/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu-marl-train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--env",
        type=shipped_config_env,
        help=f"train with the shipped config of this env ({', '.join(DEFAULT_CONFIGS)}; with or "
        "without the gpu_marl_envs/ prefix)",
    )
    source.add_argument("--config", help="train with this TOML config")
    source.add_argument("--evaluate", metavar="CHECKPOINT", help="evaluate a checkpoint and exit")
    source.add_argument(
        "--resume",
        metavar="CHECKPOINT",
        help="continue the run of a checkpoint, in its folder unless --out is given "
        "(--set total_timesteps=N lengthens it)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a hyper-parameter")
    parser.add_argument("--seed", type=int, help="the run's seed (overrides the config's)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--out",
        help="run folder (default runs/<env>-<algorithm>-seed<seed>); one that holds a run "
        "is refused, unless --resume continues it or --overwrite replaces it",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --out (its checkpoint, config, metrics, curve and TensorBoard "
        "events are removed when the new run writes its first file)",
    )
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes")
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        metavar="N",
        help="train with N processes on this host (one per GPU) through torchrun; num_envs is per process",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        metavar="K",
        help="with --nproc-per-node: restart the processes up to K times after a failure; the "
        "run continues from its last checkpoint",
    )
    parser.add_argument(
        "--lightning",
        action="store_true",
        help="train through PyTorch Lightning's Trainer (pip install 'gpu_marl_envs[lightning]'): the "
        "same run folder and numbers, plus lightning.ckpt, Lightning's checkpoint of the run",
    )
    parser.add_argument(
        "--collective-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="with several processes: how long one waits for the others in a collective before "
        f"the job (or a restart) fails, which bounds a dead or frozen process (default "
        f"{DEFAULT_TIMEOUT:.0f})",
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    try:
        if not 0 < args.collective_timeout <= MAX_TIMEOUT:
            raise ConfigError(
                f"--collective-timeout must be a number of seconds > 0 and <= {MAX_TIMEOUT:.0f} (a year), "
                f"got {args.collective_timeout}"
            )
        if args.lightning and args.evaluate:
            raise ConfigError("--lightning trains; --evaluate reads any run's checkpoint.pt without it")
        if args.max_restarts is not None and args.nproc_per_node is None:
            raise ConfigError("--max-restarts goes with --nproc-per-node (under torchrun, give it to torchrun)")
        if args.nproc_per_node is not None:
            return launch(args, argv)
        if args.evaluate:
            evaluate_command(args)
            return 0
        return train_command(args)
    except (ConfigError, RunFolderError, CheckpointError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")  # one line: the arguments parsed, a value is wrong
    except (RunStopped, Diverged, LauncherGone) as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")  # one line: the run began, and stopped


if __name__ == "__main__":
    sys.exit(main())
