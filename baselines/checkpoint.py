"""What a training run saves so that it can go on later, and the atomic write of that file.

A trainer's state is the ``state_dict()`` of each of its parts (networks, optimizers, a replay
buffer) plus the iteration it reached and its history. A resumed run loads them and continues at
the next iteration; its envs start afresh (reset with a seed shifted past the first run's), so the
learning-rate schedule and the step count continue but episodes in progress are not carried over.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from gpu_marl_envs.baselines.optimizers import Optimizer


def training_state(iteration: int, history: list[dict], **parts) -> dict:
    """``{"iteration": ..., "history": ..., name: part.state_dict(), ...}``."""
    return {"iteration": iteration, "history": list(history), **{name: part.state_dict() for name, part in parts.items()}}


def resumed_iteration(state: dict | None) -> int:
    """The iteration a run resumed from ``state`` starts at (0 for a fresh run)."""
    if state is None:
        return 0
    if "iteration" not in state:
        raise ValueError("cannot resume: the checkpoint holds no training state (no 'iteration')")
    return int(state["iteration"])


def restore(state: dict | None, **parts) -> list[dict]:
    """Load ``state[name]`` into each part; returns the history so far (empty for a fresh run)."""
    if state is None:
        return []
    missing = sorted({"iteration", "history", *parts} - set(state))
    if missing:
        raise ValueError(f"cannot resume: the checkpoint lacks {missing} (was it written by another trainer?)")
    for name, part in parts.items():
        if isinstance(part, Optimizer):
            load_optimizer(part, state[name])
        else:
            part.load_state_dict(state[name])
    return list(state["history"])


def load_optimizer(optimizer: Optimizer | torch.optim.Optimizer, state: dict) -> None:
    """``optimizer.load_state_dict`` that keeps this optimizer's own learning-rate objects: a
    captured update reads its learning rate from a device tensor that must stay the same tensor,
    whatever device or form (float or tensor) the saved one had. ``state`` may come from one of
    :mod:`optimizers` or from the same ``torch.optim`` optimizer (checkpoints written before the
    trainers used :mod:`optimizers`)."""
    rates = [group["lr"] for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, rate in zip(optimizer.param_groups, rates):
        saved = float(group["lr"])
        if isinstance(rate, torch.Tensor):
            rate.fill_(saved)
            group["lr"] = rate
        else:
            group["lr"] = saved


def atomic_save(obj, path: Path) -> None:
    """Write to a temporary file in the same folder, then rename: a crash leaves the old file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(handle)
    try:
        torch.save(obj, temporary)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
