"""The LightningModules: a bundled trainer's iterations as Lightning training steps.

A module is made from an env id and the config ``gpu-marl-train`` uses (:func:`training_module`,
or :func:`module_from_config` for a shipped or TOML config with ``--set``-style overrides). In
``setup`` it starts the trainer's run exactly as ``train`` does (same seeds, envs on the
strategy's device, networks, optimizers; :func:`gpu_marl_envs.baselines.ppo.start` and the
like), and each training step runs one of the run's iterations with the trainer's own code
(``Phases``): the rollout on the device (DDPG: its vector step), then the update, both CUDA graphs
where ``train`` captures them. So with the same seed the parameters are those of ``train`` after
every iteration.

- The training data is the numbers of the iterations still to run (:class:`IterationNumbers`):
  one epoch is the config's whole run (``total_timesteps``); ``Trainer(max_epochs=1)`` trains it.
- The optimizers are the trainers' own, one per trained policy (DDPG and TD3: the actor's and the
  critic's), under manual optimisation. A policy's update is one Lightning optimizer step
  (:class:`RolloutUpdate`), so ``trainer.global_step`` grows by the number of trained policies
  per iteration; DDPG's iteration interleaves its critic's and actor's gradient steps in one
  update (one graph), which is its critic optimizer's Lightning step: one a learning iteration,
  none before ``learning_starts``. ``Trainer(max_steps=N)`` stops after N such steps.
- Gradients are averaged over the ranks (``strategy="ddp"``) and clipped (``max_grad_norm``)
  inside the update, as ``train`` does: the update does not call ``manual_backward`` or
  ``clip_gradients``, whose Python could not run in a graph's replays. DDP's own gradient hooks
  are idle under manual optimisation (Lightning turns them off around the training step); its
  wrapper broadcasts rank 0's parameters at the start. Trainer options that would act between
  ``backward`` and the step (``gradient_clip_val``, ``accumulate_grad_batches``) are refused by
  Lightning under manual optimisation, other precisions than ``32-true`` and other strategies
  here (:func:`check_trainer`).
- A history entry (the trainers' ``log`` entries: env steps, seconds, mean returns, losses; the
  only host synchronisation) is made every ``Trainer(log_every_n_steps)`` iterations and at the
  end, appended to ``module.history``, handed to every logger (``Logger.log_metrics``, at the
  step's number) and its ``mean_return`` logged with ``self.log`` (progress bar,
  ``callback_metrics``), unless the module is made with ``log_mean_return=False``
  (``gpu-marl-train --lightning``, which reports the entries itself: the call costs the GPU a wait).
- Lightning's checkpoints hold the networks (``state_dict``), the optimizers and, under
  :data:`CHECKPOINT_KEY`, the iterations done, the number of ranks and the history (DDPG: its
  replay); ``Trainer.fit(ckpt_path=...)`` continues from them, with new seeds and fresh episodes
  as a resumed ``gpu-marl-train`` run. ``resume=`` continues a ``gpu-marl-train`` checkpoint
  instead (``checkpoint.pt``'s training state).
"""

from __future__ import annotations

import functools
import time

import lightning.pytorch as pl
import torch
from gpu_marl_envs.baselines import a2c, ddpg, multi_agent, on_policy, ppo, rollout
from gpu_marl_envs.baselines.capture import GraphedPhase
from gpu_marl_envs.baselines.checkpoint import restore, training_state
from gpu_marl_envs.baselines.lightning.rollout_update import RolloutUpdate
from gpu_marl_envs.baselines.run_config import (
    ConfigError,
    build_config,
    check_env,
    config_dict,
    read_config,
    uses_auto_num_envs,
)
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from torch import nn

CHECKPOINT_KEY = "gpu_marl_envs"
"""The key of a Lightning checkpoint's training state besides the networks and optimizers."""


def check_trainer(trainer: pl.Trainer) -> None:
    """``ValueError`` for a strategy or precision the trainers' captured updates cannot honour."""
    if not isinstance(trainer.strategy, (SingleDeviceStrategy, DDPStrategy)):
        raise ValueError(
            f"strategy {type(trainer.strategy).__name__}: train on one device or with strategy='ddp' (one "
            "process per device, each with its own envs); strategies that shard or offload the "
            "networks do not fit the trainers' updates"
        )
    if trainer.precision != "32-true":
        raise ValueError(
            f"precision={trainer.precision!r}: Lightning's precision plugins do not reach the trainers' "
            "captured updates; keep the default 32-true and set the config's bf16 = true for "
            "bfloat16 forward passes"
        )


class IterationNumbers:
    """The Trainer's training data: the numbers of the run's iterations still to run, one per
    training step. Its length is the run's iterations, so one epoch is the whole run; a resumed
    run yields the rest of it. It resumes by itself (it reads the iterations done from the
    module, which restores them from its checkpoint): its state, for Lightning, is empty."""

    def __init__(self, module: TrainingModule):
        self.module = module

    def __len__(self) -> int:
        return self.module.run.iterations

    def __iter__(self):
        return iter(range(self.module.next_iteration, self.module.run.iterations))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


class TrainingModule(pl.LightningModule):
    """What the modules share: the run's start in ``setup``, the training data, the training step
    around the trainer's iteration, the history and logging, the checkpoint's training state. A
    subclass starts its trainer's run (:meth:`start`), runs one iteration (:meth:`iterate`) and
    makes a history entry (:meth:`entry`).

    ``backend``: the env's backend; ``resume``: a ``gpu-marl-train`` training state to continue;
    ``log_mean_return``: whether each history entry's ``mean_return`` goes through ``self.log``
    (the progress bar, ``trainer.callback_metrics``, a ``ModelCheckpoint`` or ``EarlyStopping``
    monitoring it)."""

    print_entry = staticmethod(rollout.print_entry)
    """The trainer's one-line report of a history entry (:class:`TrainingStats` prints it)."""

    def __init__(
        self,
        env_id: str,
        config,
        algorithm: str,
        *,
        backend: str | None = None,
        resume: dict | None = None,
        log_mean_return: bool = True,
    ):
        super().__init__()
        check_env(algorithm, env_id, config)
        self.automatic_optimization = False  # the trainers step their optimizers themselves
        self.env_id, self.config, self.algorithm, self.backend = env_id, config, algorithm, backend
        self._resume = resume
        self.log_mean_return = log_mean_return
        self.run = None  # the trainer's run, made in setup
        self.history: list[dict] = []
        self.next_iteration = 0
        self.save_hyperparameters({"env_id": env_id, "algorithm": algorithm, "config": config_dict(config)})

    # -- what a subclass provides ------------------------------------------------------------------

    def start(self, device: torch.device):
        """Start the trainer's run on ``device`` (resuming ``self._resume`` if given), register its
        networks as submodules; returns the run."""
        raise NotImplementedError

    def iterate(self, iteration: int) -> dict[str, torch.Tensor]:
        """Run iteration ``iteration``, stepping the optimizers through Lightning; returns the losses.
        Here: the trainer's ``Phases`` (``self.phases``) as its ``train`` runs them, each update as
        its optimizer's Lightning step (DDPG's module overrides it)."""
        with self.config.matmul_precision():
            self.phases.collect()
            self.phases.schedule(iteration)
            with self.phases.times("update"):
                return self.step_optimizers()

    def entry(self, losses: dict[str, torch.Tensor]) -> dict:
        """The history entry after ``self.next_iteration`` iterations (a host synchronisation)."""
        raise NotImplementedError

    @property
    def networks(self) -> list[nn.Module]:
        """The modules rank 0 broadcasts at the start."""
        raise NotImplementedError

    def trained(self):
        """What the trainer's ``train`` returns first: the policy (the policies by name, for a game)."""
        raise NotImplementedError

    # -- Lightning's hooks -------------------------------------------------------------------------

    def setup(self, stage: str) -> None:
        if stage != "fit":
            raise ValueError(f"{type(self).__name__} trains through Trainer.fit; Trainer.{stage} has nothing to run")
        if self.run is not None:
            raise RuntimeError(
                f"this {type(self).__name__} has trained already; continue its run with a new module "
                "and Trainer.fit(ckpt_path=...)"
            )
        check_trainer(self.trainer)
        self.run = self.start(self.trainer.strategy.root_device)
        self.history = restore(self._resume, **self.run.parts)
        self.next_iteration = self.run.first
        self._resume = None

    def train_dataloader(self) -> IterationNumbers:
        return IterationNumbers(self)

    def on_train_start(self) -> None:
        # Rank 0's networks on every rank, as train() starts (DDP's wrapper does it too; other strategies do not).
        self.run.context.broadcast_parameters(*self.networks)
        self.begin = time.perf_counter() - (self.history[-1]["seconds"] if self.history else 0.0)

    def training_step(self, iteration: int) -> None:
        losses = self.iterate(iteration)
        self.next_iteration = iteration + 1
        every = self.trainer.log_every_n_steps
        last = self.next_iteration == self.run.iterations or 0 <= self.trainer.max_steps <= self.trainer.global_step
        if last or (every and self.next_iteration % every == 0):
            entry = self.entry(losses)
            self.history.append(entry)
            # The entry goes to the loggers as it is, at Lightning's step (the batch): self.log's bookkeeping
            # costs about half a millisecond of Python per key (Lightning 2.6.6 on a 2-core CPU), which the
            # GPU would wait for after this step's synchronisation.
            for logger in self.loggers:
                logger.log_metrics(entry, step=iteration)
            # The return alone through self.log: for the progress bar and callback_metrics (ModelCheckpoint's
            # monitor="mean_return"). A CPU tensor: logging it synchronises nothing with the GPU. It runs
            # after this step's synchronisation, while the GPU waits: about 0.4 ms a call on a 2-core CPU
            # (Lightning 2.6.6), so gpu-marl-train --lightning, which reports the entries itself, skips it.
            if self.log_mean_return:
                self.log(
                    "mean_return",
                    torch.tensor(entry["mean_return"], dtype=torch.float64),
                    prog_bar=True,
                    logger=False,
                    on_step=True,
                    on_epoch=False,
                )
        if last:
            self.trainer.should_stop = True  # the run (or max_steps) is done: no more epochs

    @property
    def graphed_phases(self) -> list[GraphedPhase]:
        """The run's captured phases, released when fitting ends."""
        return []

    @property
    def run_envs(self):
        """The run's envs, closed when fitting ends."""
        return self.run.envs

    def on_train_end(self) -> None:
        self.run_envs.close()
        # A fitted module trains no more (setup refuses), and keeping its graphs would hold the GPU
        # memory and, under DDP, the NCCL communicator that their captured all-reduces use, so that
        # destroy_process_group waits for them.
        for phase in self.graphed_phases:
            phase.release()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = {
            "iteration": self.next_iteration,
            "world_size": self.run.context.world_size,
            "history": list(self.history),
            **self.extra_state(),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get(CHECKPOINT_KEY)
        if state is None:
            raise ValueError(
                f"the checkpoint holds no {CHECKPOINT_KEY!r} training state: it was not written by a "
                f"{TrainingModule.__name__}"
            )
        if self.history or self.run.first:
            raise ValueError("resume= and Trainer.fit(ckpt_path=...) both continue a run: pass one of them")
        world_size = self.run.context.world_size
        if state["world_size"] != world_size:
            raise ValueError(
                f"the checkpoint was written by {state['world_size']} process(es): continue it on as many "
                f"(this run has {world_size}), or resume its gpu-marl-train checkpoint.pt, which takes "
                "other numbers"
            )
        self.history = list(state["history"])
        self.next_iteration = state["iteration"]
        self.load_extra_state(state)
        self.run.restart(self.next_iteration)

    # -- the run's state -----------------------------------------------------------------------

    def training_state(self) -> dict:
        """The run's state as ``gpu-marl-train``'s checkpoints hold it (:func:`checkpoint.training_state`)."""
        return training_state(self.next_iteration, self.history, self.run.context.world_size, **self.run.parts)

    def extra_state(self) -> dict:
        """What a Lightning checkpoint needs besides the networks, optimizers, iteration and history."""
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass

    def step_optimizers(self) -> dict[str, torch.Tensor]:
        """Each optimizer's Lightning step (a policy's update, :class:`RolloutUpdate`), in order; their losses."""
        optimizers = self.optimizers()
        losses = {}
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            losses.update(optimizer.step())
        return losses


class OnPolicyModule(TrainingModule):
    """PPO or A2C (``ppo.PPOConfig`` or ``a2c.A2CConfig``) on a single-agent env; the policy is
    ``self.agent`` (an ``ActorCritic``), its optimizer Adam (PPO) or RMSprop (A2C)."""

    def __init__(self, env_id: str, config: ppo.PPOConfig | a2c.A2CConfig, **options):
        if not isinstance(config, (ppo.PPOConfig, a2c.A2CConfig)):
            raise TypeError(f"{type(self).__name__} takes a PPOConfig or an A2CConfig, not a {type(config).__name__}")
        super().__init__(env_id, config, "ppo" if isinstance(config, ppo.PPOConfig) else "a2c", **options)

    def start(self, device):
        trainer = ppo if self.algorithm == "ppo" else a2c
        run, update = trainer.start(self.env_id, self.config, device=device, backend=self.backend, resume=self._resume)
        self.agent = run.agent
        self.phases = on_policy.Phases(run, update)
        return run

    @property
    def networks(self):
        return [self.agent]

    def trained(self):
        return self.agent

    @property
    def graphed_phases(self):
        return [self.phases.rollout, self.phases.update]

    def configure_optimizers(self):
        return RolloutUpdate(self.run.optimizer, self.phases.update)

    def entry(self, losses):
        run = self.run
        return rollout.log_entry(
            self.next_iteration * self.config.batch_size * run.context.world_size,
            self.begin,
            rollout.EntryNumbers([run.stats], losses, self.phases.times, networks=self.networks),
            None,
            run.context,
        )


class MultiAgentModule(TrainingModule):
    """The multi-agent trainer (``multi_agent.MultiAgentConfig``) on a game (Tag, CovidEconomy):
    one network per policy in ``self.policies`` (a ``ModuleDict``), one optimizer per trained
    policy. ``models``: custom networks for some policies, as for ``multi_agent.train``."""

    print_entry = staticmethod(multi_agent.print_entry)

    def __init__(self, env_id: str, config: multi_agent.MultiAgentConfig, *, models: dict | None = None, **options):
        if not isinstance(config, multi_agent.MultiAgentConfig):
            raise TypeError(f"{type(self).__name__} takes a MultiAgentConfig, not a {type(config).__name__}")
        super().__init__(env_id, config, "multi_agent", **options)  # each policy's algorithm is in its settings
        self.models = models

    def start(self, device):
        run = multi_agent.start(
            self.env_id, self.config, device=device, backend=self.backend, models=self.models, resume=self._resume
        )
        self.policies = nn.ModuleDict(run.policies)
        self.phases = multi_agent.Phases(run)
        # Each trained policy's update alone, as its optimizer's step (train() captures them together).
        self.updates = {
            name: GraphedPhase(functools.partial(self.phases.update_policy, name), run.device, self.config.cuda_graph)
            for name in run.trained
        }
        return run

    @property
    def networks(self):
        return list(self.policies.values())

    def trained(self):
        return dict(self.policies)

    def configure_optimizers(self):
        return [RolloutUpdate(self.run.optimizers[name], self.updates[name]) for name in self.run.trained]

    def entry(self, losses):
        run = self.run
        return multi_agent.log_entry(
            self.next_iteration * self.config.batch_size * run.context.world_size,
            self.begin,
            rollout.EntryNumbers(list(run.stats.values()), losses, self.phases.times, networks=self.networks),
            list(run.stats),
            multi_agent.reported_group(self.config),
            None,
            run.context,
        )

    @property
    def graphed_phases(self):
        return [self.phases.rollout, *self.updates.values()]

    @property
    def run_envs(self):
        return self.run.env


class DDPGModule(TrainingModule):
    """DDPG or TD3 (``ddpg.DDPGConfig`` or ``ddpg.TD3Config``) on a single-agent env with Box
    actions: ``self.actor``, ``self.critic`` (TD3's pair) and their targets. Each training step is
    the run's iteration (``ddpg.Phases``): the vector step, then, from ``learning_starts`` on, the
    iteration's gradient steps as the critic optimizer's Lightning step (:class:`RolloutUpdate`),
    the actor's steps inside it; the actor's optimizer is Lightning's to save and restore. Its
    checkpoints hold the replay buffer."""

    def __init__(self, env_id: str, config: ddpg.DDPGConfig, **options):
        if not isinstance(config, ddpg.DDPGConfig):
            raise TypeError(f"{type(self).__name__} takes a DDPGConfig or a TD3Config, not a {type(config).__name__}")
        super().__init__(env_id, config, "td3" if isinstance(config, ddpg.TD3Config) else "ddpg", **options)

    def start(self, device):
        run = ddpg.start(self.env_id, self.config, device=device, backend=self.backend, resume=self._resume)
        self.actor, self.critic, self.target_actor, self.target_critic = (
            run.actor,
            run.critic,
            run.target_actor,
            run.target_critic,
        )
        self.phases = ddpg.Phases(run)
        return run

    @property
    def networks(self):
        return [self.actor, self.critic, self.target_actor, self.target_critic]

    def trained(self):
        return self.actor

    @property
    def graphed_phases(self):
        return self.phases.graphed

    def configure_optimizers(self):
        # In the order of earlier checkpoints: the actor's, then the critic's.
        return [self.run.actor_optimizer, RolloutUpdate(self.run.critic_optimizer, self.phases.update)]

    def iterate(self, iteration):
        with self.config.matmul_precision():
            self.phases.collect(iteration)
            if not self.run.learns(iteration):
                return self.run.losses
            _, update = self.optimizers()
            return update.step()

    def entry(self, losses):
        run = self.run
        return rollout.log_entry(
            self.next_iteration * run.steps_per_iteration,
            self.begin,
            rollout.EntryNumbers([run.stats], losses, networks=self.networks, finite_losses=False),  # as ddpg.train's
            None,
            run.context,
        )

    def extra_state(self):
        return {"replay": self.run.replay.state_dict()}

    def load_extra_state(self, state):
        self.run.replay.load_state_dict(state["replay"])


def training_module(env_id: str, config, **options) -> TrainingModule:
    """The module that trains ``config`` on ``env_id``: :class:`OnPolicyModule` for a
    ``PPOConfig`` or ``A2CConfig``, :class:`DDPGModule` for a ``DDPGConfig`` (or ``TD3Config``),
    :class:`MultiAgentModule` for a ``MultiAgentConfig``. ``options``: ``backend``, ``resume``
    (a ``gpu-marl-train`` training state to continue) and, for a game, ``models``."""
    if isinstance(config, multi_agent.MultiAgentConfig):
        return MultiAgentModule(env_id, config, **options)
    if isinstance(config, ddpg.DDPGConfig):
        return DDPGModule(env_id, config, **options)
    if isinstance(config, (ppo.PPOConfig, a2c.A2CConfig)):
        return OnPolicyModule(env_id, config, **options)
    raise TypeError(
        f"no trainer takes a {type(config).__name__}: pass a PPOConfig, A2CConfig, DDPGConfig or MultiAgentConfig"
    )


def module_from_config(
    env: str | None = None,
    config: str | None = None,
    overrides: tuple[str, ...] = (),
    seed: int | None = None,
    **options,
) -> TrainingModule:
    """The module of a ``gpu-marl-train`` config: the shipped one of ``env``, or the TOML file
    ``config``, with ``--set``-style ``overrides`` (``"num_envs=100"``,
    ``"policies.taggers.learning_rate=1e-3"``) and ``seed``. ``num_envs = "auto"`` is not taken
    here (it is the command's throughput sweep): set a number. Errors are ``ConfigError``s."""
    raw = read_config(config, env)
    if uses_auto_num_envs(raw, list(overrides)):
        raise ConfigError(
            'num_envs = "auto" is chosen by gpu-marl-train\'s sweep: pass a number (overrides=["num_envs=4096"])'
        )
    _, env_id, trainer_config = build_config(raw, list(overrides), seed)
    if env is not None and env_id != env:
        raise ConfigError(f"the config is for {env_id}, not {env}")
    return training_module(env_id, trainer_config, **options)
