"""What PPO and A2C share: their set-up (envs, policy, optimizer, rollout storage, on the right
rank and device), an iteration's phases (schedule, captured rollout, captured update) and the loop
over them with logging and checkpoints. Each trainer adds only its update.

``train`` loops over :class:`Phases` here (:func:`iterate`); a Lightning training step runs the
same phases (:mod:`gpu_marl_envs.baselines.lightning`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from gpu_marl_envs.baselines.capture import GraphedPhase, make_optimizer, set_learning_rate
from gpu_marl_envs.baselines.checkpoint import resumed_iteration
from gpu_marl_envs.baselines.distributed import Context, GradientAverager, setup
from gpu_marl_envs.baselines.gae import compute_gae
from gpu_marl_envs.baselines.models import ActorCritic
from gpu_marl_envs.baselines.optimizers import Optimizer
from gpu_marl_envs.baselines.rollout import (
    EpisodeStats,
    IterationPhases,
    PhaseTimes,
    Rollout,
    collect,
    log_entry,
    make_envs,
    train_iterations,
)

from gpu_marl_envs.vector_env import GpuVectorEnv


@dataclass
class Run:
    """One rank's pieces of a run (see :func:`start`)."""

    context: Context
    config: object  # the trainer's config
    first: int  # the iteration to start from (> 0 when resumed)
    iterations: int
    envs: GpuVectorEnv
    obs: torch.Tensor  # the envs' observations, updated in place by every step
    device: torch.device
    agent: ActorCritic
    optimizer: Optimizer
    act: Callable  # agent.action_and_value, compiled with config.compile
    value: Callable  # agent.value, likewise
    gae: Callable  # compute_gae, likewise
    average_gradients: GradientAverager
    rollout: Rollout
    stats: EpisodeStats

    @property
    def parts(self) -> dict:
        """What a checkpoint holds besides the iteration and history (:func:`checkpoint.training_state`)."""
        return {"model": self.agent, "optimizer": self.optimizer}

    def restart(self, iteration: int) -> None:
        """Go on from ``iteration`` with the random numbers and fresh episodes that :func:`start` gives
        a run resumed there (for a state restored after the start, e.g. by Lightning)."""
        config = self.config
        self.first = iteration
        torch.manual_seed(self.context.seed(config.seed, iteration))
        obs, _ = self.envs.reset(seed=self.context.env_seed(config.seed, iteration, config.num_envs))
        self.obs.copy_(obs)
        self.stats.running.zero_()


def start(
    env_id: str,
    config,
    device,
    backend: str | None,
    resume: dict | None,
    optimizer_type: type[Optimizer],
    **optimizer_options,
) -> Run:
    """Everything a run needs before its first iteration. ``config`` is a trainer's config (its
    ``RolloutSizes`` and ``CaptureOptions`` fields, ``seed``, ``hidden``, ``learning_rate``); the
    optimizer is ``optimizer_type(..., **optimizer_options)``."""
    context = setup(device)
    first = resumed_iteration(resume, context.world_size, config.batch_size)
    # A resumed run draws new random numbers and new episodes (see checkpoint.py).
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
    agent = ActorCritic(envs.single_observation_space.shape[0], envs.single_action_space, config.hidden).to(device)
    # PPO splits each rollout into minibatches; A2C takes it whole.
    agent.use_fused_mlp(config.fused_mlp_setting(config.batch_size // getattr(config, "num_minibatches", 1)))
    optimizer = make_optimizer(
        optimizer_type,
        agent.parameters(),
        config.learning_rate,
        device,
        captured=config.cuda_graph and device.type == "cuda",
        **optimizer_options,
    )
    return Run(
        context=context,
        config=config,
        first=first,
        iterations=context.iterations(config.total_timesteps, config.batch_size),
        envs=envs,
        obs=obs,
        device=device,
        agent=agent,
        optimizer=optimizer,
        act=config.compiled(agent.action_and_value),
        value=config.compiled(agent.value),
        gae=config.compiled(compute_gae),
        average_gradients=GradientAverager(
            agent.parameters(), context, in_graph=config.graph_allreduce_setting(multi_agent=False)
        ),
        rollout=Rollout.allocate(config.num_steps, envs),
        stats=EpisodeStats(config.num_envs, device),
    )


class Phases(IterationPhases):
    """One iteration of a run: the rollout (:meth:`collect`), then the learning-rate schedule
    (:meth:`schedule`) and ``update()`` (:meth:`learn`, returning its losses), the rollout and the
    update each a CUDA graph on CUDA (:class:`GraphedPhase`), with the seconds spent in each
    (``times``)."""

    def __init__(self, run: Run, update: Callable[[], dict[str, torch.Tensor]]):
        self.run, config = run, run.config
        sample = config.compiled(run.agent.sample)

        def rollout():
            collect(sample, run.envs, run.rollout, run.obs, run.stats, autocast=lambda: config.autocast(run.device))
            return {}

        self.rollout = GraphedPhase(rollout, run.device, config.cuda_graph)
        self.update = GraphedPhase(update, run.device, config.cuda_graph)
        self.times = PhaseTimes(run.device)

    def schedule(self, iteration: int) -> None:
        """The learning rate of ``iteration``: annealed linearly to 0 over the run if ``config.anneal_lr``."""
        run = self.run
        if run.config.anneal_lr:
            set_learning_rate(run.optimizer, run.config.learning_rate * (1.0 - iteration / run.iterations))


def iterate(
    run: Run, update: Callable[[], dict[str, torch.Tensor]], *, log_every: int, log, save, resume: dict | None
) -> tuple[ActorCritic, list[dict]]:
    """The run's iterations (:class:`Phases`, ``update()`` returning its losses); a history entry
    (handed to ``log``, and the training state to ``save`` on rank 0) every ``log_every``
    iterations and at the end, and a fresh run's starting state to ``save`` before its first
    iteration. Returns ``(agent, history)``."""
    phases = Phases(run, update)
    history = train_iterations(
        run,
        phases,
        [run.stats],
        lambda steps, begin, numbers: log_entry(steps, begin, numbers, log, run.context),
        modules=[run.agent],
        log_every=log_every,
        save=save,
        resume=resume,
    )
    run.envs.close()
    return run.agent, history
