"""Callbacks for the training modules."""

from __future__ import annotations

import lightning.pytorch as pl


class TrainingStats(pl.Callback):
    """Env steps per second and episode returns at each history entry of a training module (the
    role of WarpDrive's ``PerfStatsCallback``): ``env_steps_per_second`` (since the previous entry)
    goes to every logger, and rank 0 prints the entry as the trainer's ``log`` does (env
    steps, mean return per group, episodes, env steps per second since the start), unless
    ``verbose=False``. Entries come every ``Trainer(log_every_n_steps)`` iterations."""

    def __init__(self, verbose: bool = True):
        self.verbose = verbose

    def on_train_start(self, trainer: pl.Trainer, pl_module) -> None:
        self.seen = len(pl_module.history)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        history = pl_module.history
        if len(history) == self.seen:
            return
        entry, before = history[-1], (history[-2] if len(history) > 1 else {"env_steps": 0, "seconds": 0.0})
        rate = (entry["env_steps"] - before["env_steps"]) / max(entry["seconds"] - before["seconds"], 1e-9)
        for logger in trainer.loggers:  # as the module logs its entries (see there: self.log is slow)
            logger.log_metrics({"env_steps_per_second": rate}, step=batch)
        if self.verbose and trainer.is_global_zero:
            pl_module.print_entry(entry)
        self.seen = len(history)
