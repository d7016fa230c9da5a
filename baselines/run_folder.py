"""A run's folder: the files ``gpu-marl-train`` writes there, and how it writes them so that no
run loses, truncates or mixes into another's.

- A folder *holds a run* when any of :data:`RUN_FILES` is in it. A new run refuses such a folder
  (the command says to continue it with ``--resume`` or replace it with ``--overwrite``);
  :func:`remove_run` (``--overwrite``) removes those files and nothing else of the folder.
- Every file is written whole or not at all (:func:`atomic_write`: a temporary file beside it,
  then a rename); a process killed mid-write leaves a temporary ``.<name>.*.tmp``, which the next
  run in the folder removes (:func:`remove_temporaries`).
- ``metrics.csv`` and TensorBoard's events hold each history entry once, in order, across resumes
  and restarts (:class:`MetricsWriter`).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

LIGHTNING_CHECKPOINT = "lightning.ckpt"
"""Lightning's checkpoint of a ``gpu-marl-train --lightning`` run (:mod:`gpu_marl_envs.baselines.lightning.command`)."""

RUN_FILES = (
    "checkpoint.pt",
    "config.toml",
    "metrics.csv",
    "learning_curve.png",
    "tensorboard",
    "animation.gif",
    LIGHTNING_CHECKPOINT,
)
"""What a run leaves in its folder (``animation.gif``: ``--evaluate`` of a Tag run)."""


class RunFolderError(ValueError):
    """A run folder that cannot be used as asked; the message says why and what to do."""


def held_files(folder: Path) -> list[str]:
    """The :data:`RUN_FILES` in ``folder`` (none: it holds no run)."""
    return [name for name in RUN_FILES if (folder / name).exists()]


def check_writable(folder: Path) -> None:
    """:class:`RunFolderError` unless ``folder`` is a folder this process can write in, or can be
    made (its nearest existing parent is one)."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise RunFolderError(f"--out {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunFolderError(f"--out {folder}: cannot write in {existing} (permission denied)")


def remove_run(folder: Path) -> None:
    """Remove the :data:`RUN_FILES` of ``folder`` (a run that ``--overwrite`` replaces), and only them."""
    for name in held_files(folder):
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def remove_temporaries(folder: Path) -> None:
    """Remove what :func:`atomic_write` left behind in ``folder`` when a process was killed mid-write."""
    for name in RUN_FILES:
        for path in folder.glob(f".{name}.*.tmp"):
            path.unlink(missing_ok=True)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write(file)`` into a new temporary file beside ``path``, flushed to disk, then renamed to
    ``path``: ``path`` holds its old contents or the whole new ones, whatever happens. The file gets
    the permissions a plain ``open`` would give it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: Path, text: str) -> None:
    """``text`` (UTF-8) to ``path``, atomically."""
    atomic_write(path, lambda file: file.write(text.encode()))


class MetricsWriter:
    """Each history entry as a row of ``metrics.csv`` and, where TensorBoard is installed, as
    scalars of an event file in ``tensorboard/`` (x axis: env steps).

    ``earlier``: None for a new run (``metrics.csv`` must not exist), else the entries of the run
    this one continues (a resume or a restart). ``metrics.csv`` is then rewritten with exactly those
    rows (atomically), so that rows logged after the checkpoint by a run that was then killed are
    dropped, and new rows follow them. In TensorBoard, ``same_folder`` (the earlier entries are in
    this folder's events already) purges the events past the last earlier entry
    (``SummaryWriter(purge_step=...)``) rather than writing the earlier ones again."""

    def __init__(self, folder: Path, earlier: list[dict] | None, same_folder: bool = True):
        path = folder / "metrics.csv"
        self.csv = None  # made at the first row, with that entry's keys as the header, unless earlier has rows
        if earlier is None:
            self.file = open(path, "x", newline="")
        else:
            text = io.StringIO()
            if earlier:
                self.csv = csv.DictWriter(text, fieldnames=list(earlier[0]))
                self.csv.writeheader()
                self.csv.writerows(earlier)
            write_text(path, text.getvalue())
            self.file = open(path, "a", newline="")
            if self.csv is not None:
                self.csv = csv.DictWriter(self.file, fieldnames=list(earlier[0]))
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # TensorBoard is optional (the [tensorboard] extra)
            self.tensorboard = None
        else:
            purge = (earlier[-1]["env_steps"] + 1 if earlier else 0) if earlier is not None and same_folder else None
            self.tensorboard = SummaryWriter(str(folder / "tensorboard"), purge_step=purge)
            if not same_folder:
                for entry in earlier or []:
                    self._add_scalars(entry)

    def write(self, entry: dict) -> None:
        if self.csv is None:
            self.csv = csv.DictWriter(self.file, fieldnames=list(entry))
            self.csv.writeheader()
        self.csv.writerow(entry)
        self.file.flush()
        if self.tensorboard is not None:
            self._add_scalars(entry)
            self.tensorboard.flush()

    def _add_scalars(self, entry: dict) -> None:
        for key, value in entry.items():
            if key != "env_steps":
                self.tensorboard.add_scalar(key, value, entry["env_steps"])

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
