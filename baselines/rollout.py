"""On-policy rollouts on a batched env, kept on the env's device (shared by PPO and A2C), and the
on-policy trainers' iteration loop (:func:`train_iterations`, shared with the multi-agent trainer).

The env runs with SAME_STEP autoreset, so an episode's last transition carries its final
observation: a truncated episode is bootstrapped by adding ``gamma * V(final observation)`` to its
last reward; a terminated one is not. Nothing here synchronises with the host except a history
entry (``log_entry``, ``pool_entry``) and the checkpoints handed to ``save``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from gpu_marl_envs.baselines import wide_mlp
from gpu_marl_envs.baselines.checkpoint import restore, training_state
from gpu_marl_envs.baselines.distributed import SINGLE, Context, LauncherGone
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.vector_env import GpuVectorEnv


class RolloutSizes:
    """What the configs of on-policy trainers share: ``num_envs``, ``num_steps`` and
    ``total_timesteps`` fields, the sizes derived from them and their check."""

    @property
    def batch_size(self) -> int:
        """Transitions per rollout."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.batch_size

    def check_sizes(self) -> None:
        """The run covers at least one rollout (each field's own range is :func:`settings.check`'s)."""
        if self.total_timesteps < self.batch_size:
            raise ValueError(f"total_timesteps ({self.total_timesteps}) must cover one rollout ({self.batch_size})")


def make_envs(
    env_id: str, num_envs: int, seed: int, *, device=None, backend: str | None = None, captured: bool = False
):
    """The training envs and a persistent tensor holding their current observations.

    ``captured``: the trainer captures whole rollouts in CUDA graphs, so the env must not replay
    its own graph inside them (graphs do not nest); its backend's launches are captured instead.
    """
    envs = GpuVectorEnv(
        env_id,
        num_envs,
        device=device,
        backend=backend,
        autoreset_mode=AutoresetMode.SAME_STEP,
        validate_actions=False,
        cuda_graph=False if captured else None,
    )
    obs, _ = envs.reset(seed=seed)
    return envs, obs.clone()


@dataclass
class Rollout:
    """``(num_steps, num_envs, ...)`` tensors of one rollout: what the envs and the sampled actions
    gave. Values and log-probabilities are not stored: the update computes them for the whole
    rollout in one batched pass (the policy has not changed since), which keeps the rollout step to
    the actor and the env."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor  # bool: the transition ended its episode
    truncated: torch.Tensor  # bool: ... by truncation (to be bootstrapped from final_obs)
    final_obs: torch.Tensor  # the episode's last observation where the transition ended it
    max_truncations: int  # truncations an env can have in one rollout (see bootstrap_values)

    @classmethod
    def allocate(cls, num_steps: int, envs: GpuVectorEnv) -> Rollout:
        space, device = envs.single_action_space, envs.device
        shape = (num_steps, envs.num_envs)
        obs_shape = (*shape, *envs.single_observation_space.shape)
        action_dtype = torch.float32 if isinstance(space, spaces.Box) else torch.int64
        return cls(
            obs=torch.zeros(obs_shape, device=device),
            actions=torch.zeros((*shape, *space.shape), dtype=action_dtype, device=device),
            rewards=torch.zeros(shape, device=device),
            dones=torch.zeros(shape, dtype=torch.bool, device=device),
            truncated=torch.zeros(shape, dtype=torch.bool, device=device),
            final_obs=torch.zeros(obs_shape, device=device),
            max_truncations=math.ceil(num_steps / envs.params.max_episode_steps),
        )

    def flat(self, name: str) -> torch.Tensor:
        """A field with the step and env dimensions merged (a view)."""
        return getattr(self, name).flatten(0, 1)

    def old_policy(self, act) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities and values of the rollout under the current policy (``act``: its
        ``action_and_value``), computed without gradients."""
        return old_policy_outputs(act, self.flat("obs"), self.flat("actions"), self.rewards.shape)

    def bootstrap(self, value, next_obs: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The rewards with each truncated episode bootstrapped by ``gamma * V(final observation)``
        (a terminated one is not), and V(``next_obs``), both without gradients."""
        with torch.no_grad():
            final_values = bootstrap_values(value, self.final_obs, self.truncated, self.max_truncations)
            return self.rewards + gamma * final_values, value(next_obs).float()


def old_policy_outputs(act, obs: torch.Tensor, actions: torch.Tensor, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """``act(obs, actions)``'s log-probabilities and values without gradients, shaped ``shape`` and
    float32 whatever precision the pass ran in (bf16 autocast): advantages are float32."""
    with torch.no_grad():
        _, log_probs, _, values = act(obs, actions)
    return log_probs.float().view(shape), values.float().view(shape)


def set_steps(mask: torch.Tensor, k: int) -> torch.Tensor:
    """``k`` steps (indices along dimension 0) of each column of ``mask`` (``(T, ...)``, bool, at
    most ``k`` set in a column): every set step, then unset ones. ``k = 1``, the common case (a
    rollout shorter than an episode), is an argmax, one reduction: ``topk`` sorted each column (on
    an H200, 0.33 ms over a Tag A2C rollout's 50 x 100,000 agents)."""
    if k == 1:
        return mask.float().argmax(dim=0, keepdim=True)
    return mask.float().topk(k, dim=0).indices


def bootstrap_values(value, final_obs: torch.Tensor, mask: torch.Tensor, max_per_column: int) -> torch.Tensor:
    """``V(final_obs)`` where ``mask`` (``(T, ...)``, bool) is set and 0 elsewhere, as float32.

    An episode is truncated only once it has run its full length L, so an env (or agent) has at
    most ``ceil(T / L)`` truncations in T steps: given that bound, the critic runs on those rows
    only, picked per column with ``topk`` (no host sync, fixed shapes for CUDA graphs), instead of
    on all T rows of which nearly all are multiplied by 0.
    """
    columns = mask.dim()
    with torch.no_grad():
        if max_per_column >= mask.shape[0]:
            return value(final_obs.flatten(0, columns - 1)).float().view(mask.shape) * mask
        steps = set_steps(mask, max_per_column)
        index = steps.view(*steps.shape, *[1] * (final_obs.dim() - columns)).expand(
            *steps.shape, *final_obs.shape[columns:]
        )
        picked = final_obs.gather(0, index)
        values = value(picked.flatten(0, columns - 1)).float().view(steps.shape) * mask.gather(0, steps)
        return torch.zeros(mask.shape, device=mask.device).scatter_(0, steps, values)


class EpisodeStats:
    """Returns of finished episodes, summed on the device; read (one sync) only when logging."""

    def __init__(self, num_envs: int, device):
        self.running = torch.zeros(num_envs, device=device)
        self.total = torch.zeros((), device=device)
        self.count = torch.zeros((), device=device)

    def add(self, rewards: torch.Tensor, done: torch.Tensor) -> None:
        """Account for ``(T, num_envs)`` rewards and done flags of ``T`` consecutive steps, all at
        once (a rollout's, at its end: a dozen kernels instead of a few per step)."""
        sums = rewards.cumsum(0)
        steps = torch.arange(len(done), device=done.device).view(-1, *[1] * (done.dim() - 1))
        # last[t]: the latest step <= t that ended an episode, -1 if none.
        last = torch.where(done, steps, -1).cummax(0).values
        previous = torch.cat([torch.full_like(last[:1], -1), last[:-1]])
        # An episode ending at t returns sums[t] - sums[previous end], or running + sums[t] if it
        # began before these steps.
        before = torch.where(previous >= 0, sums.gather(0, previous.clamp(min=0)), -self.running)
        self.total += ((sums - before) * done).sum()
        self.count += done.sum()
        end = last[-1]
        self.running.copy_(
            torch.where(end >= 0, sums[-1] - sums.gather(0, end.clamp(min=0)[None])[0], self.running + sums[-1])
        )

    def add_step(self, rewards: torch.Tensor, done: torch.Tensor) -> None:
        """``add(rewards[None], done[None])`` of one step ``(num_envs,)``, bitwise the same for
        finite rewards, in 4 operations instead of some 20 (a trainer that accounts for each vector
        step as it comes, as DDPG's: at one step there are no sums or maxima over steps to take). A
        finished episode returns the running sum plus this reward; the running sum starts again."""
        self.running.add_(rewards)
        self.total += (self.running * done).sum()
        self.count += done.sum()
        self.running.masked_fill_(done, 0.0)

    def take(self) -> torch.Tensor:
        """The sum of the returns and the number of the episodes finished since the last call, as a
        device tensor ``[total, count]`` (nothing synchronised); then both are zero."""
        sums = torch.stack([self.total, self.count])
        self.total.zero_()
        self.count.zero_()
        return sums


def mean_and_count(total: float, count: float) -> tuple[float, int]:
    """The mean return and the number of episodes of a sum of returns over ``count`` episodes."""
    return total / max(count, 1.0), int(count)


def collect(
    sample,
    envs: GpuVectorEnv,
    rollout: Rollout,
    obs: torch.Tensor,
    stats: EpisodeStats,
    autocast=contextlib.nullcontext,
) -> None:
    """Fill ``rollout`` with actions drawn by ``sample`` (a policy's ``sample``, run under
    ``autocast()``) from ``obs``, which is advanced in place. Each step writes straight into the
    rollout's rows (``out=``, ``copy_``): in a captured rollout every kernel counts."""
    space = envs.single_action_space
    low = high = None
    if isinstance(space, spaces.Box):
        low = torch.as_tensor(space.low, device=envs.device)
        high = torch.as_tensor(space.high, device=envs.device)
    steps = rollout.obs.shape[0]
    rollout.obs[0].copy_(obs)
    with wide_mlp.frozen_weights():  # the policy changes at the update, not during the rollout
        for t in range(steps):
            with torch.no_grad(), autocast():
                action = sample(rollout.obs[t])
            # The Gaussian's sample is stored unclipped (its log-probability is the sample's); the env
            # gets it clipped.
            env_action = action.clamp(low, high) if low is not None else action
            next_obs, rewards, terminated, truncated, infos = envs.step(env_action)
            rollout.actions[t].copy_(action)
            rollout.rewards[t].copy_(rewards)
            torch.logical_or(terminated, truncated, out=rollout.dones[t])
            rollout.truncated[t].copy_(truncated)
            rollout.final_obs[t].copy_(infos["final_obs"])
            # The env overwrites its buffers at the next step: its observations are copied once, to
            # the row the next step reads (the last step's to ``obs``, where the next rollout starts).
            (rollout.obs[t + 1] if t + 1 < steps else obs).copy_(next_obs)
    stats.add(rollout.rewards, rollout.dones)


class PhaseTimes:
    """Seconds spent in each phase of training (rollout, update). On a GPU they are measured with
    CUDA events, read only when a history entry is made, so timing adds no synchronisation."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.seconds: dict[str, float] = {}
        self._pending: list[tuple[str, Callable[[], float]]] = []

    @contextlib.contextmanager
    def __call__(self, phase: str):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()

            def seconds() -> float:
                end.synchronize()
                return start.elapsed_time(end) / 1000

            self._pending.append((phase, seconds))
        else:
            start = time.perf_counter()
            yield
            seconds = time.perf_counter() - start
            self._pending.append((phase, lambda: seconds))

    def take(self) -> list[tuple[str, Callable[[], float]]]:
        """The phases timed since the last call (their seconds not read yet), for :meth:`read`."""
        taken, self._pending = self._pending, []
        return taken

    def read(self, taken: list[tuple[str, Callable[[], float]]]) -> dict[str, float]:
        """Total seconds per phase up to the end of the ``taken`` phases (waiting for them)."""
        for phase, seconds in taken:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds()
        return dict(self.seconds)


class Diverged(ArithmeticError):
    """Training produced non-finite losses or parameters; the message names them."""


class EntryNumbers:
    """What a history entry reads from the device, taken at the end of an iteration without waiting
    for it: each of ``stats``' episode sums (taken, so they start again from zero), ``losses``, the
    number of ``networks``' parameter tensors holding a NaN or an infinity, and the phases ``times``
    timed so far. On a GPU the numbers are copied into pinned host memory behind a CUDA event, so
    that the host can read them (:func:`pool_entry`) while the GPU runs the next rollout
    (:func:`iterate_overlapping`); on the CPU everything has already run. ``finite_losses``: a
    non-finite loss means divergence (DDPG's are NaN until its first update, by design)."""

    def __init__(
        self,
        stats: Sequence[EpisodeStats],
        losses: dict,
        times: PhaseTimes | None = None,
        networks: Sequence[torch.nn.Module] = (),
        finite_losses: bool = True,
    ):
        # In the entry's one copy to the host: checking the parameters costs no synchronisation of its own.
        finite = [p.detach().isfinite().all() for network in networks for p in network.parameters()]
        broken = torch.stack(finite).logical_not().sum().float().reshape(1) if finite else None
        numbers = torch.cat(
            [
                *(s.take() for s in stats),
                *(v.detach().float().reshape(1) for v in losses.values()),
                *([] if broken is None else [broken]),
            ]
        )
        self.groups, self.losses = len(stats), list(losses)
        self.checked, self.finite_losses = broken is not None, finite_losses
        self.times, self.timed = times, times.take() if times else []
        self.event, self.taken_at = None, time.perf_counter()
        if numbers.is_cuda:
            self.host = torch.empty(numbers.shape, dtype=numbers.dtype, pin_memory=True)
            self.host.copy_(numbers, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = numbers

    def read(self, start: float) -> tuple[list[float], dict[str, float]]:
        """The numbers, once the GPU has them, and the seconds (the iteration's end since ``start``,
        on this rank; ``<phase>_seconds`` with ``times``)."""
        if self.event is not None:
            self.event.synchronize()
            self.taken_at = time.perf_counter()  # the GPU's end of the iteration, as the host sees it
        phases = {f"{phase}_seconds": s for phase, s in self.times.read(self.timed).items()} if self.times else {}
        return self.host.tolist(), {"seconds": self.taken_at - start, **phases}


def iterate_overlapping(
    iterations: range,
    rollout: Callable[[], None],
    update: Callable[[int], dict],
    entry: Callable[[int, dict], Callable[[], None] | None],
    overlap: bool,
) -> None:
    """A trainer's loop: each of ``iterations`` runs ``rollout()`` then ``update(iteration)`` (which
    returns the losses); after it, ``entry(iteration, losses)`` takes the numbers of a history entry
    that is due (:class:`EntryNumbers`) and returns what finishes the entry (pool, log, save), or
    None when none is due.

    With ``overlap``, an entry is finished after the next iteration's rollout has been launched:
    the host then waits for the entry's numbers and pools them over the ranks while the GPU runs
    that rollout, instead of the GPU idling through that round trip. A rollout writes neither the
    parameters nor the optimizer state, so nothing the entry reads changes under it. Without
    ``overlap`` (where a checkpoint is saved with the entry: it is on disk before the run goes on,
    as it always was), each entry is finished before the next iteration starts."""
    finish = None
    for iteration in iterations:
        rollout()
        if finish is not None:
            finish()
        losses = update(iteration)
        finish = entry(iteration, losses)
        if finish is not None and not overlap:
            finish()
            finish = None
    if finish is not None:
        finish()


class IterationPhases:
    """A trainer's iteration in two parts: :meth:`collect` (``rollout()``), then :meth:`learn`
    (``schedule(iteration)`` and ``update()``, which returns the losses), with the seconds of each
    in ``times``. A trainer's subclass sets ``rollout``, ``update`` and ``times`` and defines
    ``schedule``."""

    rollout: Callable[[], dict]
    update: Callable[[], dict]
    times: PhaseTimes

    def schedule(self, iteration: int) -> None:
        raise NotImplementedError

    def collect(self) -> None:
        """An iteration's rollout."""
        with self.times("rollout"):
            self.rollout()

    def learn(self, iteration: int) -> dict[str, torch.Tensor]:
        """Iteration ``iteration``'s schedules and update, after its rollout; returns the update's losses."""
        self.schedule(iteration)
        with self.times("update"):
            return self.update()


def train_iterations(
    run,
    phases: IterationPhases,
    stats: Sequence[EpisodeStats],
    make_entry: Callable[[int, float, EntryNumbers], dict],
    *,
    modules: Sequence[torch.nn.Module],
    log_every: int,
    save,
    resume: dict | None,
) -> list[dict]:
    """A trainer's run (its ``config``, ``context``, ``parts``, ``first`` and ``iterations``)
    through its iterations from ``run.first`` to ``run.iterations`` (:func:`iterate_overlapping`),
    after ``resume``'s history is restored, ``modules``' parameters are broadcast from rank 0 and a
    fresh run's starting state is handed to ``save`` (on rank 0). Every ``log_every`` iterations
    and at the end, ``make_entry(env_steps, start, numbers)`` makes a history entry from ``stats``'
    episode sums and the update's losses (:class:`EntryNumbers`), and the training state goes to
    ``save``. Returns the history."""
    context, config = run.context, run.config
    history = restore(resume, **run.parts)
    context.broadcast_parameters(*modules)
    if resume is None and save is not None and context.is_main:  # the run's starting point
        save(training_state(0, history, context.world_size, **run.parts))
    begin = time.perf_counter() - (history[-1]["seconds"] if history else 0.0)

    def entry(iteration: int, losses: dict) -> Callable[[], None] | None:
        if (iteration + 1) % log_every and iteration + 1 != run.iterations:
            return None
        numbers = EntryNumbers(stats, losses, phases.times, networks=modules)

        def finish():
            history.append(make_entry((iteration + 1) * config.batch_size * context.world_size, begin, numbers))
            if save is not None and context.is_main:
                save(training_state(iteration + 1, history, context.world_size, **run.parts))

        return finish

    with config.matmul_precision():
        iterate_overlapping(range(run.first, run.iterations), phases.collect, phases.learn, entry, overlap=save is None)
    return history


def print_entry(entry: dict) -> None:
    """The default ``log`` of the trainers: one line per log interval."""
    print(
        f"steps {entry['env_steps']:>9,d}  return {entry['mean_return']:8.1f}  ({entry['episodes']} episodes)  "
        f"{entry['env_steps'] / entry['seconds']:,.0f} steps/s"
    )


def pool_entry(
    start: float, numbers: EntryNumbers, context: Context
) -> tuple[list[tuple[float, int]], dict[str, float], dict[str, float]]:
    """What a history entry reduces over the ranks of ``context``, in one read of this rank's
    ``numbers`` and one collective: each group's (mean return, episodes) pooled over the ranks, the
    losses averaged, and the seconds (``seconds``, and ``<phase>_seconds`` with times) the slowest
    rank's."""
    local, seconds = numbers.read(start)
    # Decided on the pooled numbers, so that every rank stops together rather than leaving the others
    # waiting in the next collective.
    sums, seconds = context.pool(local, {**seconds, "launcher_gone": float(context.launcher_gone())})
    if seconds.pop("launcher_gone"):
        raise LauncherGone(
            "the torchrun agent that started this job has died: its ranks stop, leaving the run folder "
            "(its checkpoint at the last log interval) to the next command"
        )
    broken = sums.pop() if numbers.checked else 0.0
    returns = [mean_and_count(*sums[2 * k : 2 * k + 2]) for k in range(numbers.groups)]
    averages = {name: total / context.world_size for name, total in zip(numbers.losses, sums[2 * numbers.groups :])}
    bad = [f"{name} {value}" for name, value in averages.items() if numbers.finite_losses and not math.isfinite(value)]
    if broken or bad:
        raise Diverged(", ".join(bad + (["non-finite parameters"] if broken else [])))
    return returns, averages, seconds


def log_entry(env_steps: int, start: float, numbers: EntryNumbers, log, context: Context = SINGLE) -> dict:
    """One history entry from ``numbers`` (of one :class:`EpisodeStats`; reading them is the only
    host synchronisation of a run), handed to ``log`` if given; with times, the seconds spent so
    far in each phase (``rollout_seconds``, ...). Every rank of ``context`` calls it: episode
    returns are pooled over the ranks, losses averaged, seconds the slowest rank's
    (:func:`pool_entry`); only rank 0 calls ``log``. ``env_steps``: of all ranks."""
    [(mean_return, episodes)], averages, seconds = pool_entry(start, numbers, context)
    entry = {
        "env_steps": env_steps,
        "seconds": seconds.pop("seconds"),
        "mean_return": mean_return,
        "episodes": episodes,
        **seconds,
        **averages,
    }
    if log is not None and context.is_main:
        log(entry)
    return entry
