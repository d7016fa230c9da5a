"""A trained policy's optimizer as Lightning steps it: one ``step()`` is the policy's whole update on
an iteration's rollout.

Why not one Lightning step per gradient step: on CUDA the update (PPO's ``update_epochs x
num_minibatches`` minibatch steps, A2C's one step) replays as one CUDA graph, which runs no Python,
so no per-step Python of Lightning's (its step counter, its hooks) could run inside it; a
Lightning step around each gradient step would mean no update graph, several times slower (the
README's eager baseline). Stepping once per update keeps the graph, and Lightning still sees, counts
and checkpoints one optimizer per trained policy: ``trainer.global_step`` advances by one per
trained policy and iteration.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from gpu_marl_envs.baselines.checkpoint import load_optimizer
from gpu_marl_envs.baselines.optimizers import Optimizer


class RolloutUpdate:
    """``optimizer`` (:mod:`gpu_marl_envs.baselines.optimizers`) with ``update`` (a trainer's update
    phase for its policy, returning the loss terms) as its step. Everything else is the
    optimizer's: parameter groups (its learning rate), state, defaults and state dict, which
    Lightning's checkpoints save and restore."""

    def __init__(self, optimizer: Optimizer, update: Callable[[], dict[str, torch.Tensor]]):
        # Not named `optimizer`: Lightning's wrapper (a subclass of this class) has its own attribute of that name.
        self.base = optimizer
        self.update = update

    @property
    def param_groups(self) -> list[dict]:
        return self.base.param_groups

    @property
    def state(self) -> dict:
        return self.base.state

    @property
    def defaults(self) -> dict:
        return self.base.defaults

    def step(self, closure: Callable[[], object] | None = None) -> dict[str, torch.Tensor]:
        """The policy's update; returns its last gradient step's loss terms. ``closure`` (Lightning
        passes one, which runs its ``on_before_optimizer_step`` hooks) is called first, as
        ``torch.optim`` calls it: before the gradients of this update exist."""
        if closure is not None:
            closure()
        return self.update()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base.zero_grad(set_to_none)

    def state_dict(self) -> dict:
        return self.base.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        # Keeps the learning-rate tensor that a captured update reads.
        load_optimizer(self.base, state_dict)
