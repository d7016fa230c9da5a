"""Lightning's checkpoints written the way a run folder's files are: whole or not at all.

Lightning's own ``TorchCheckpointIO`` (2.6) writes through an fsspec transaction, which for a local
path writes a temporary file in the system's temporary folder and then moves it into place: a move
across filesystems is a copy, which a killed process can leave half done, and nothing is flushed to
disk. :class:`AtomicCheckpointIO` writes with :func:`checkpoint.atomic_save` instead (a temporary
file beside the checkpoint, flushed, then renamed over it).
"""

from __future__ import annotations

from pathlib import Path

from gpu_marl_envs.baselines.checkpoint import atomic_save
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """``Trainer(plugins=[AtomicCheckpointIO()])``: every checkpoint the Trainer writes to a local
    path (``ModelCheckpoint``'s, ``trainer.save_checkpoint``'s) is replaced atomically; URLs
    (``s3://...``) are left to Lightning's own writer."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        if "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError(
                f"{type(self).__name__} takes no storage_options (got {storage_options!r}): it writes local files"
            )
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save(checkpoint, path)
