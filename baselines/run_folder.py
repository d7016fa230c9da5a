"""A run's folder: the files ``gpu-marl-train`` writes there, and how it writes them so that no
run loses, truncates or mixes into another's.

- One process writes a run folder at a time: it holds :class:`FolderLock` (``fcntl.flock`` on
  ``.lock`` there, which names the holder) from its first write to its last; another is refused with
  one line naming the holder. The lock ends with its process, however that ends.
- A folder *holds a run* when it holds :data:`CHECKPOINT` (a run writes it first). A new run refuses
  such a folder (the command says to continue it with ``--resume`` or replace it with
  ``--overwrite``), and refuses a folder of other files, run-named or not, naming them
  (:func:`check_new_run`): it cannot tell whose they are. :func:`remove_run` (``--overwrite``)
  removes a run's files, TensorBoard's event files among them, and nothing else of the folder.
- Every file is written whole or not at all (:func:`atomic_write`: a temporary file beside it,
  then a rename); a process killed mid-write leaves a temporary ``.<name>.*.tmp``, which the next
  command in the folder removes (:func:`remove_temporaries`). A write that fails (disk full, file
  size limit, permission) raises :class:`RunFolderError` naming the file and the system's reason.
- ``metrics.csv`` and TensorBoard's events hold each history entry once, in order, across resumes
  and restarts (:class:`MetricsWriter`).
"""

from __future__ import annotations

import csv
import fcntl
import io
import os
import shlex
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

LIGHTNING_CHECKPOINT = "lightning.ckpt"
"""Lightning's checkpoint of a ``gpu-marl-train --lightning`` run (:mod:`gpu_marl_envs.baselines.lightning.command`)."""

CHECKPOINT = "checkpoint.pt"
LOCK = ".lock"
"""The file :class:`FolderLock` locks, describing its holder; a killed holder leaves it, stale and unlocked."""
TENSORBOARD = "tensorboard"
TENSORBOARD_EVENTS = "events.out.tfevents.*"
"""The files TensorBoard's ``SummaryWriter`` writes in its folder (a user's subfolders are theirs)."""

RUN_FILES = (
    CHECKPOINT,
    "config.toml",
    "metrics.csv",
    "learning_curve.png",
    TENSORBOARD,
    "animation.gif",
    LIGHTNING_CHECKPOINT,
)
"""What a run leaves in its folder (``animation.gif``: ``--evaluate`` of a Tag run)."""


class RunFolderError(ValueError):
    """A run folder that cannot be used as asked; the message says why and what to do."""


class RunStopped(RuntimeError):
    """A run that stopped before its end (a write failed, training diverged, its launcher died);
    the message (one line) says why and what its folder keeps."""


def held_files(folder: Path) -> list[str]:
    """The :data:`RUN_FILES` in ``folder``."""
    return [name for name in RUN_FILES if (folder / name).exists()]


def other_files(folder: Path) -> list[str]:
    """What ``folder`` holds besides a run's files (:data:`RUN_FILES` and TensorBoard's events in
    ``tensorboard/``) and hidden files, as paths relative to it (``tensorboard/exp_2024``), sorted.
    Hidden files are this module's own (the lock, interrupted writes' temporaries) or a folder's
    housekeeping (``.gitkeep``, ``.DS_Store``): nothing a run mixes with, and no run removes them."""
    if not folder.is_dir():
        return []
    names = [path.name for path in folder.iterdir() if path.name not in RUN_FILES and not path.name.startswith(".")]
    board = folder / TENSORBOARD
    if board.is_dir() and not board.is_symlink():
        names += [f"{TENSORBOARD}/{path.name}" for path in board.iterdir() if not path.match(TENSORBOARD_EVENTS)]
    return sorted(names)


def check_new_run(folder: Path, overwrite: bool, resume_hint: str = "--resume") -> bool:
    """:class:`RunFolderError` unless a new run may write in ``folder``: one that does not exist, or
    holds nothing but hidden files, or holds a run (:data:`CHECKPOINT`) that
    ``overwrite`` replaces, whatever else is beside it (kept). A folder of other files, with or
    without run-named ones, is refused, naming them: whose they are cannot be told, and
    ``--overwrite`` removes only a run's files. Returns whether the new run replaces one."""
    if (folder / CHECKPOINT).exists():
        if not overwrite:
            raise RunFolderError(
                f"{folder} holds a run already ({', '.join(held_files(folder))}): continue it with "
                f"{resume_hint} {folder / CHECKPOINT}, replace it with --overwrite, or pass another --out"
            )
        return True
    found = sorted(held_files(folder) + other_files(folder))
    if found:
        shown = ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
        raise RunFolderError(
            f"{folder} holds files but no run of gpu-marl-train (no {CHECKPOINT}): {shown}; a run writes "
            "only into a new or empty folder or its own: pass another --out"
        )
    return False


def check_writable(folder: Path) -> None:
    """:class:`RunFolderError` unless ``folder`` is a folder this process can write in, or can be
    made (its nearest existing parent is one)."""
    limit = _name_max(folder)
    for part in folder.parts:
        # Longer names fail in every call that takes the path (ENAMETOOLONG), exists() included.
        if len(os.fsencode(part)) > limit:
            raise RunFolderError(
                f"--out: the name {part[:20]}...{part[-10:]} has {len(os.fsencode(part))} bytes; the "
                f"filesystem takes names of up to {limit}"
            )
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise RunFolderError(f"--out {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunFolderError(f"--out {folder}: cannot write in {existing} (permission denied)")


def _name_max(folder: Path) -> int:
    """The longest file name (in bytes) the filesystem of ``folder``'s nearest existing parent takes."""
    existing = Path(os.path.abspath(folder))
    while not os.path.isdir(existing) and existing != existing.parent:  # (isdir is False for a name too long)
        existing = existing.parent
    try:
        return os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255  # POSIX's NAME_MAX on every common filesystem


def remove_run(folder: Path, keep: tuple[str, ...] = ()) -> None:
    """Remove the run of ``folder`` (one that ``--overwrite`` replaces): its :data:`RUN_FILES` but
    ``keep`` (the new run's checkpoint, written first), TensorBoard's event files (the
    ``tensorboard`` folder too once empty), and nothing else: a user's files beside them stay."""
    for name in held_files(folder):
        path = folder / name
        if name in keep:
            continue
        if name == TENSORBOARD and path.is_dir() and not path.is_symlink():
            for events in path.glob(TENSORBOARD_EVENTS):
                events.unlink()
            if not any(path.iterdir()):
                path.rmdir()
        else:
            path.unlink()


class FolderLock:
    """This process's hold on a run folder: an exclusive ``fcntl.flock`` on its :data:`LOCK` file,
    which then describes the holder (pid, host, when, command) for the one refused, and which
    :meth:`release` removes. The system releases the lock when the process ends, however it ends, so
    a killed run leaves a stale file but no lock. flock locks are advisory: they stop every
    ``gpu-marl-train``, not other programs."""

    def __init__(self, folder: Path, wait: float = 0.0):
        """Take the lock of ``folder`` (an existing folder), trying for up to ``wait`` seconds (a
        torchrun restart, whose first attempt's rank 0 may still be ending); :class:`RunFolderError`
        naming the holder if another process holds it."""
        self.path = folder / LOCK
        deadline = time.monotonic() + wait
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError as error:
                raise RunFolderError(f"cannot write {self.path}: {error.strerror or error}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise RunFolderError(in_use(folder, holder)) from None
                time.sleep(0.1)
                continue
            # The holder before may have removed the file it locked after this process opened it:
            # the lock counts only on the file the path names now.
            try:
                current = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)
        self.fd = fd
        command = shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
        when = time.strftime("%Y-%m-%d %H:%M:%S")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {when}: {command}\n".encode(), 0)

    def release(self) -> None:
        """Remove the lock file, then let go (in this order: see :meth:`__init__`)."""
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = None


def check_unlocked(folder: Path) -> None:
    """:class:`RunFolderError` naming the holder if a process holds ``folder``'s lock (writes nothing:
    a shared lock tried and dropped on the existing lock file)."""
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # no lock file (or none this process can read): no run has held the folder
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunFolderError(in_use(folder, _holder(fd))) from None
    finally:
        os.close(fd)


def in_use(folder: Path, holder: str) -> str:
    return (
        f"{folder} is in use by another gpu-marl-train ({holder or 'its holder has not described itself yet'}): "
        "wait for it to end or stop it, or pass another --out"
    )


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def remove_temporaries(folder: Path) -> None:
    """Remove what :func:`atomic_write` left behind in ``folder`` when a process was killed mid-write."""
    for name in RUN_FILES:
        for path in folder.glob(f".{name}.*.tmp"):
            path.unlink(missing_ok=True)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write(file)`` into a new temporary file beside ``path``, flushed to disk, then renamed to
    ``path``: ``path`` holds its old contents or the whole new ones, whatever happens. The file gets
    the permissions a plain ``open`` would give it. A write the system refuses (disk full, file size
    limit, permission, a read-only folder) raises :class:`RunFolderError` naming ``path`` and why."""
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise RunFolderError(f"cannot write {path}: {error.strerror or error}") from None
    file = _RecordingFile(os.fdopen(handle, "wb"))
    try:
        with file.file:
            write(file)
            file.flush()
            os.fsync(file.file.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException as error:
        os.unlink(temporary)
        # torch.save reports a refused write as "unexpected pos 63552 vs 63440": the system's own reason is
        # the OSError the file raised under it.
        cause = error if isinstance(error, OSError) else file.error
        if cause is not None:
            raise RunFolderError(f"cannot write {path}: {cause.strerror or cause}") from None
        raise


class _RecordingFile:
    """A binary file whose first refused write is kept (``error``), for writers that hide it."""

    def __init__(self, file: BinaryIO):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as error:
            self.error = self.error or error
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
