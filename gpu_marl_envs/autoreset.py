"""Gymnasium's autoreset modes as the integer codes the kernels branch on (written once here;
CUDA C receives them as -D definitions, Numba imports them)."""

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
