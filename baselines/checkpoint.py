"""What a training run saves so that it can go on later, and how that file is written and read back.

A trainer's state is the ``state_dict()`` of each of its parts (networks, optimizers, a replay
buffer) plus the iteration it reached, the number of ranks that reached it (an iteration of ``W``
ranks is ``W`` ranks' env steps) and its history. A resumed run loads them and continues at the
next iteration, on the same number of ranks or another one where the checkpoint's env steps make
whole iterations of it; its envs start afresh (reset with seeds past the ones the run used so far,
see ``distributed.Context``), so the learning-rate schedule and the step count continue but
episodes in progress are not carried over.

A checkpoint file (:func:`save_checkpoint`) is such a state, the command's header (algorithm, env,
config, who wrote it) and ``"sha256"``, a digest of everything else in it, the tensors' bytes
included: :func:`load_checkpoint` refuses a file whose contents no longer match it (a flipped
byte, a truncated copy) with one line that says so, as it does for every file it cannot read. Files
are written whole or not at all (:func:`atomic_save`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
from pathlib import Path

import torch
from gpu_marl_envs.baselines.optimizers import Optimizer
from gpu_marl_envs.baselines.run_folder import atomic_write

DIGEST = "sha256"
"""The key of a checkpoint's digest of its other contents."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message (one line) says why."""


def training_state(iteration: int, history: list[dict], world_size: int, **parts) -> dict:
    """``{"iteration": ..., "world_size": ..., "history": ..., name: part.state_dict(), ...}``:
    ``iteration`` iterations of ``world_size`` ranks done."""
    return {
        "iteration": iteration,
        "world_size": world_size,
        "history": list(history),
        **{name: part.state_dict() for name, part in parts.items()},
    }


def resumed_iteration(state: dict | None, world_size: int, steps_per_iteration: int) -> int:
    """The iteration a run of ``world_size`` ranks, each stepping ``steps_per_iteration`` env steps
    an iteration, starts at when resumed from ``state`` (0 for a fresh run). A state written by
    another number of ranks continues after the same env steps, which must be a whole number of
    this run's iterations; otherwise the error says which numbers of ranks can resume it."""
    if state is None:
        return 0
    missing = sorted({"iteration", "world_size"} - set(state))
    if missing:
        raise ValueError(f"cannot resume: the checkpoint holds no training state (no {missing})")
    done = state["iteration"] * state["world_size"] * steps_per_iteration  # env steps of all ranks
    if done % (world_size * steps_per_iteration):
        raise ValueError(
            f"cannot resume on {world_size} ranks: the checkpoint ends after {state['iteration']} "
            f"iterations of {state['world_size']} ranks, which is no whole number of iterations of "
            f"{world_size} ranks; resume on a number of ranks that divides "
            f"{state['iteration'] * state['world_size']}"
        )
    return done // (world_size * steps_per_iteration)


def restore(state: dict | None, **parts) -> list[dict]:
    """Load ``state[name]`` into each part; returns the history so far (empty for a fresh run)."""
    if state is None:
        return []
    missing = sorted({"iteration", "history", *parts} - set(state))
    if missing:
        raise CheckpointError(f"cannot resume: the checkpoint lacks {missing} (was it written by another trainer?)")
    for name, part in parts.items():
        with fitting(f"cannot resume: the checkpoint's {name}"):
            if isinstance(part, Optimizer):
                load_optimizer(part, state[name])
            else:
                part.load_state_dict(state[name])
    return list(state["history"])


@contextlib.contextmanager
def fitting(what: str):
    """:class:`CheckpointError` (one line: ``what`` and the first of torch's reasons) for a state
    that does not fit the part it is loaded into (``load_state_dict``'s size mismatches, missing
    or unexpected keys): a checkpoint whose config and weights disagree."""
    try:
        yield
    except (RuntimeError, ValueError, KeyError, TypeError) as error:
        reasons = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = reasons[1] if len(reasons) > 1 and reasons[0].startswith("Error(s) in loading") else reasons[0]
        raise CheckpointError(f"{what} does not fit the run's config: {reason}") from None


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


def digest(checkpoint: dict) -> str:
    """SHA-256 of everything in ``checkpoint`` but its digest: every tensor's dtype, shape and bytes,
    every other value's type and ``repr`` (exact for Python's numbers), in order."""
    hasher = hashlib.sha256()
    _feed(hasher, {key: value for key, value in checkpoint.items() if key != DIGEST})
    return hasher.hexdigest()


def _feed(hasher, value) -> None:
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        hasher.update(f"tensor {flat.dtype} {tuple(value.shape)};".encode())
        hasher.update(flat.view(torch.uint8).numpy())
    elif isinstance(value, dict):
        hasher.update(f"dict {len(value)};".encode())
        for key, item in value.items():
            _feed(hasher, key)
            _feed(hasher, item)
    elif isinstance(value, (list, tuple)):
        hasher.update(f"{type(value).__name__} {len(value)};".encode())
        for item in value:
            _feed(hasher, item)
    elif type(value) in (type(None), bool, int, float, str):
        hasher.update(f"{type(value).__name__} {value!r};".encode())
    else:
        # Only what torch.load(weights_only=True) reads back (torch.__version__ is a str subclass it refuses).
        raise TypeError(
            f"a checkpoint holds tensors, numbers, strings, lists, tuples and dicts, not {type(value).__name__}"
        )


def save_checkpoint(checkpoint: dict, path: Path) -> None:
    """Write ``checkpoint`` with its digest to ``path`` (:func:`atomic_save`)."""
    atomic_save({**checkpoint, DIGEST: digest(checkpoint)}, path)


def load_checkpoint(path, map_location="cpu") -> dict:
    """The checkpoint at ``path``, its digest checked; :class:`CheckpointError` (one line) for a
    missing, unreadable, foreign or damaged file. Loaded with ``weights_only=True``: a damaged or
    foreign file cannot run code."""
    path = Path(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path} is a folder, not a checkpoint file") from None
    except PermissionError:
        raise CheckpointError(f"cannot read {path}: permission denied") from None
    except Exception as error:  # torch.load raises a dozen types for a damaged file
        if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:
            raise CheckpointError(f"cannot read {path}: {error.strerror}") from None
        raise CheckpointError(
            f"{path} cannot be read as a checkpoint: it is damaged or truncated, or not a file "
            f"of gpu-marl-train ({type(error).__name__})"
        ) from None
    if not isinstance(checkpoint, dict) or DIGEST not in checkpoint:
        raise CheckpointError(
            f"{path} is not a checkpoint of gpu-marl-train: it holds no {DIGEST} digest of its contents"
        )
    if digest(checkpoint) != checkpoint[DIGEST]:
        raise CheckpointError(f"{path} is damaged: its contents no longer match the {DIGEST} digest saved with them")
    return checkpoint


def atomic_save(obj, path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then a rename: ``path`` holds the old
    file or the whole new one, whatever happens (:func:`run_folder.atomic_write`)."""
    atomic_write(Path(path), lambda file: torch.save(obj, file))
