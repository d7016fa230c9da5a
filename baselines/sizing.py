"""``num_envs = "auto"``: the env count chosen by a short throughput sweep.

The sweep trains the run's own config (algorithm, network, env) for a few iterations at growing
env counts, powers of two, and measures env-steps/s once warm-up and CUDA-graph capture are over,
and on a GPU the memory the trainer held at its peak. It stops when the next count would not fit
the memory budget (predicted from the last count's peak, memory being linear in the count), or when
throughput has stopped growing: two counts in a row less than 10% faster than the best so far. It
picks the *smallest* count whose throughput is within 10% of the best measured: beyond that knee
more envs buy little speed but cost updates, each update consuming more env steps.

Under ``torchrun`` every rank runs the same trials in step (they train together) and rank 0's
measurements decide, so all ranks pick the same count; the count is per rank.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
from dataclasses import dataclass

import torch
from gpu_marl_envs.baselines.distributed import setup

AUTO = "auto"
TRIAL_ITERATIONS = 5  # the first two warm up and capture the CUDA graphs; the other three are timed
GAIN = 1.1  # a count is "faster" when it beats the best so far by this factor
NEAR_BEST = 0.9  # the pick: the smallest count with this fraction of the best throughput
BUDGET_FRACTION = 0.5  # the default memory budget: this fraction of the GPU's free memory


@dataclass
class Trial:
    num_envs: int
    env_steps_per_s: float | None = None
    peak_bytes: int | None = None  # GPU memory the trial's trainer held at its peak (None on the CPU)
    note: str = ""  # why it was not measured, or not eligible


def iteration_steps(config) -> int:
    """Env steps one rank takes per iteration: ``num_envs * num_steps`` for the on-policy
    trainers, ``num_envs`` for DDPG (one vector step per iteration)."""
    return config.num_envs * getattr(config, "num_steps", 1)


def check_fits(env_id: str, config, device) -> None:
    """``ValueError`` when a run of ``config`` cannot fit ``device``'s memory: its rollout's
    observations alone (4 bytes per float, per env step of an iteration; a game's agents read at
    least one float each) would exceed the device's whole memory, so that the allocation would fail
    with a traceback, or an out-of-memory kill, after the run began. A bound from below: a run that
    passes may still not fit. (With ``num_envs = "auto"`` the config holds the sweep's first count.)
    For maddpg the bound is its replay, which is allocated whole at the start."""
    from gpu_marl_envs.baselines import maddpg, maddpg_config, multi_agent

    from gpu_marl_envs.registration import env_spec

    target = torch.device(device)
    if target.type == "cuda":
        available = torch.cuda.get_device_properties(target).total_memory
    else:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if isinstance(config, maddpg_config.MADDPGConfig):
        needed = maddpg.replay_bytes(env_id, config)
        if needed > available:
            raise ValueError(
                f"buffer_size={config.buffer_size:,} needs {needed / 2**30:,.1f} GiB for the replay; "
                f"{target.type} has {available / 2**30:,.1f} GiB in all: lower buffer_size"
            )
        return
    if isinstance(config, multi_agent.MultiAgentConfig):
        floats = multi_agent.game_params(env_id, config).num_agents
    else:
        definition = env_spec(env_id).definition
        floats = int(math.prod(definition.observation_space(definition.params_type()).shape))
    needed = 4 * floats * iteration_steps(config)
    if needed > available:
        raise ValueError(
            f"num_envs={config.num_envs:,} needs at least {needed / 2**30:,.1f} GiB for one rollout's observations "
            f"({iteration_steps(config):,} env steps of {floats} floats); {target.type} has "
            f"{available / 2**30:,.1f} GiB in all: lower num_envs (or num_steps)"
        )


def candidates(device) -> list[int]:
    """The counts a sweep tries: 256 to 1,048,576 on a GPU, 4 to 1,024 on the CPU."""
    cuda = torch.device(device).type == "cuda" if device is not None else torch.cuda.is_available()
    return [2**k for k in (range(8, 21) if cuda else range(2, 11))]


def trial_config(config, num_envs: int, world_size: int = 1):
    """``config`` with ``num_envs`` and a run of :data:`TRIAL_ITERATIONS` iterations; DDPG learns
    from the first step (``learning_starts = 0``) so that its updates are timed too. Raises
    ``ValueError`` for a count the config cannot take."""
    per_iteration = iteration_steps(dataclasses.replace(config, num_envs=num_envs))
    changes = {"num_envs": num_envs, "total_timesteps": per_iteration * world_size * TRIAL_ITERATIONS}
    if hasattr(config, "learning_starts"):
        changes["learning_starts"] = 0
    return dataclasses.replace(config, **changes)


def measure(train, env_id: str, config, *, device=None, backend: str | None = None) -> Trial:
    """Train ``config`` (a :func:`trial_config`) and time its iterations after the second."""
    cuda = device is not None and torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    _, history = train(env_id, config, device=device, backend=backend, log_every=1, log=None)
    timed = history[1], history[-1]
    seconds = timed[1]["seconds"] - timed[0]["seconds"]
    trial = Trial(config.num_envs, (timed[1]["env_steps"] - timed[0]["env_steps"]) / seconds)
    if cuda:
        trial.peak_bytes = torch.cuda.max_memory_allocated(device) - before
    # The trial's graphs, envs and networks: freed before the next count is measured.
    del history
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return trial


def choose_num_envs(
    train,
    env_id: str,
    config,
    *,
    device=None,
    backend: str | None = None,
    memory_budget: int | None = None,
    counts: list[int] | None = None,
    report=print,
) -> int:
    """The env count per rank for ``config`` (an algorithm's config, its ``num_envs`` ignored)
    trained by ``train`` (``ppo.train``, ``a2c.train``, ``ddpg.train``, ``multi_agent.train``):
    see the module docstring. ``memory_budget``: bytes of GPU memory a trainer may hold (default:
    half the GPU's free memory when the sweep starts); ``counts``: the counts to try (default
    :func:`candidates`); ``report(line)`` receives the table and the decision (on rank 0 only).
    Counts too large for ``total_timesteps`` to cover one iteration are not tried."""
    context = setup(device)
    device = (
        context.device
        if context.device is not None
        else (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    )
    cuda = device.type == "cuda"
    if cuda and memory_budget is None:
        memory_budget = int(BUDGET_FRACTION * torch.cuda.mem_get_info(device)[0])
    say = report if context.is_main else (lambda line: None)
    trials: list[Trial] = []
    best: Trial | None = None
    slower = 0
    for num_envs in counts or candidates(device):
        try:
            context.iterations(config.total_timesteps, iteration_steps(dataclasses.replace(config, num_envs=num_envs)))
            trial = trial_config(config, num_envs, context.world_size)
        except ValueError as error:
            trials.append(Trial(num_envs, note=f"not tried: {error}"))
            continue
        measured = [t for t in trials if t.peak_bytes]
        if cuda and measured:
            last = measured[-1]
            predicted = last.peak_bytes * num_envs / last.num_envs
            if predicted > memory_budget:
                trials.append(Trial(num_envs, note=f"not tried: would need about {_gib(predicted)}"))
                break
        result = context.agree(dataclasses.astuple(measure(train, env_id, trial, device=device, backend=backend)))
        trials.append(Trial(*result))
        if cuda and trials[-1].peak_bytes > memory_budget:
            trials[-1].note = "over the memory budget"
            break
        if best is None or trials[-1].env_steps_per_s > GAIN * best.env_steps_per_s:
            slower = 0
        else:
            slower += 1
        if best is None or trials[-1].env_steps_per_s > best.env_steps_per_s:
            best = trials[-1]
        if slower == 2:
            break
    eligible = [t for t in trials if t.env_steps_per_s is not None and not t.note]
    if not eligible:
        raise ValueError(
            'num_envs = "auto" found no env count to use: '
            + "; ".join(f"{t.num_envs}: {t.note}" for t in trials)
            + " (set num_envs to a number)"
        )
    best = max(eligible, key=lambda t: t.env_steps_per_s)
    chosen = min(
        (t for t in eligible if t.env_steps_per_s >= NEAR_BEST * best.env_steps_per_s), key=lambda t: t.num_envs
    )
    say(
        f'num_envs = "auto": a sweep of {TRIAL_ITERATIONS}-iteration trials on {device}'
        + (f" ({context.world_size} ranks, env-steps/s of all)" if context.enabled else "")
        + (f", memory budget {_gib(memory_budget)}" if cuda else "")
    )
    for t in trials:
        speed = f"{t.env_steps_per_s:>14,.0f} env-steps/s" if t.env_steps_per_s is not None else " " * 26
        memory = f"  {_gib(t.peak_bytes):>10}" if t.peak_bytes is not None else ""
        say(f"  {t.num_envs:>9,d} envs {speed}{memory}  {t.note}".rstrip())
    say(
        f"num_envs = {chosen.num_envs:,}: the smallest count within {1 - NEAR_BEST:.0%} of the best throughput "
        f"measured ({best.env_steps_per_s:,.0f} env-steps/s with {best.num_envs:,} envs)"
        + ("" if best is chosen else "; more envs would buy little speed and cost updates")
    )
    return chosen.num_envs


def _gib(count: float) -> str:
    return f"{count / 2**30:.2f} GiB"
