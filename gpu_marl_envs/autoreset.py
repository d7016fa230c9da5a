"""Gymnasium's autoreset modes as the integer codes the kernels branch on (written once here;
CUDA C receives them as -D definitions, Numba imports them)."""

import torch
from gymnasium.vector import AutoresetMode

AUTORESET_CODES = {
    AutoresetMode.NEXT_STEP: 0,
    AutoresetMode.SAME_STEP: 1,
    AutoresetMode.DISABLED: 2,
}


def parse_autoreset_mode(mode) -> AutoresetMode:
    try:
        return AutoresetMode(mode)
    except ValueError:
        valid = ", ".join(f"AutoresetMode.{m.name}" for m in AutoresetMode)
        raise ValueError(f"unknown autoreset_mode {mode!r}; use one of {valid}") from None


def select_resets(reset_mask: torch.Tensor, mask: torch.Tensor | None) -> None:
    """Write the reset kernels' input: every sub-env (``mask`` None) or those of ``mask``."""
    if mask is None:
        reset_mask.fill_(True)
    else:
        reset_mask.copy_(mask)
