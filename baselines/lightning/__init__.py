"""The bundled trainers under PyTorch Lightning's Trainer (``pip install gpu_marl_envs[lightning]``):
its loop, callbacks, loggers, checkpoints and DDP around the trainers' own on-device iterations.

    import lightning.pytorch as pl
    from gpu_marl_envs.baselines.lightning import TrainingStats, module_from_config

    module = module_from_config(env="TagContinuous-v0", overrides=["num_envs=100"])
    pl.Trainer(max_epochs=1, callbacks=[TrainingStats()]).fit(module)

What maps to what, and why: :mod:`.modules`; the tutorial: ``docs/lightning.md``.
"""

from gpu_marl_envs.baselines.lightning.callbacks import TrainingStats
from gpu_marl_envs.baselines.lightning.checkpoint_io import AtomicCheckpointIO
from gpu_marl_envs.baselines.lightning.modules import (
    CHECKPOINT_KEY,
    DDPGModule,
    MultiAgentModule,
    OnPolicyModule,
    TrainingModule,
    module_from_config,
    training_module,
)
from gpu_marl_envs.baselines.lightning.rollout_update import RolloutUpdate

__all__ = [
    "CHECKPOINT_KEY",
    "AtomicCheckpointIO",
    "DDPGModule",
    "MultiAgentModule",
    "OnPolicyModule",
    "RolloutUpdate",
    "TrainingModule",
    "TrainingStats",
    "module_from_config",
    "training_module",
]
