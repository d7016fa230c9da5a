"""``gpu-marl-train --lightning``: a trainer function with the bundled trainers' interface whose
training runs through Lightning's Trainer, so that the command's run folder (checkpoint, config,
metrics, curve), its resumes and torchrun's restarts work as for the trainers themselves.

The run folder also receives ``lightning.ckpt``, Lightning's checkpoint of the same state, written
(atomically, :class:`AtomicCheckpointIO`) after the command's ``checkpoint.pt`` at the start and at
each log interval; ``Trainer.fit(module, ckpt_path=...)`` continues it. ``checkpoint.pt`` stays the
run's own: ``--resume`` and restarts continue from it.
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning.pytorch as pl
import torch
from gpu_marl_envs.baselines.lightning.checkpoint_io import AtomicCheckpointIO
from gpu_marl_envs.baselines.lightning.modules import training_module


class HandOver(pl.Callback):
    """Hands the module's training state to ``save`` (rank 0's; None on the others) at the start
    of a fresh run, each new history entry to ``log`` and the state to ``save`` after it, then has
    the Trainer write its checkpoint to ``checkpoint`` (every rank takes part): the order in which
    ``train`` hands them over."""

    def __init__(self, log, save, checkpoint: Path, fresh: bool):
        # Not `self.log`: Lightning sets every callback's `log` to the module's.
        self.hand_log, self.hand_save, self.checkpoint, self.fresh = log, save, checkpoint, fresh

    def on_train_start(self, trainer: pl.Trainer, pl_module) -> None:
        self.seen = len(pl_module.history)
        if self.fresh:  # the run's starting point
            self._save(trainer, pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if len(pl_module.history) == self.seen:
            return
        if self.hand_log is not None:
            for entry in pl_module.history[self.seen :]:
                self.hand_log(entry)
        self.seen = len(pl_module.history)
        self._save(trainer, pl_module)

    def _save(self, trainer: pl.Trainer, pl_module) -> None:
        if self.hand_save is not None:
            self.hand_save(pl_module.training_state())
        trainer.save_checkpoint(self.checkpoint)


def trainer_options(device) -> dict:
    """The Trainer's accelerator, devices and strategy for this process: under torchrun, DDP over
    its ranks (``LOCAL_WORLD_SIZE`` devices on each of ``WORLD_SIZE / LOCAL_WORLD_SIZE`` hosts, one
    per rank, in the process group the command has formed); else ``device`` alone."""
    device = torch.device(device)
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    world_size, local = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if world_size > 1:
        return {"accelerator": accelerator, "devices": local, "num_nodes": world_size // local, "strategy": "ddp"}
    return {"accelerator": accelerator, "devices": [device.index or 0] if device.type == "cuda" else 1}


def train(env_id: str, config, *, checkpoint: Path, device, log, resume: dict | None, log_every: int, save=None):
    """Train ``config`` on ``env_id`` through Lightning's Trainer, as the trainers' ``train``
    (``log``, ``save``, ``resume``, ``log_every``), with Lightning's checkpoint at ``checkpoint``;
    returns ``(policy or policies, history)`` on ``device``."""
    # The command reports the entries itself (metrics.csv, its progress line): no self.log.
    module = training_module(env_id, config, resume=resume, log_mean_return=False)
    trainer = pl.Trainer(
        **trainer_options(device),
        max_epochs=1,
        log_every_n_steps=log_every,
        # The command writes the metrics, shows the progress and keeps the checkpoints.
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=checkpoint.parent,
        plugins=[AtomicCheckpointIO()],
        callbacks=[HandOver(log, save, checkpoint, fresh=resume is None)],
    )
    trainer.fit(module)
    # Lightning moves the module to the CPU when fitting ends; the command evaluates on the device.
    module.to(device)
    return module.trained(), module.history
