"""Rally-v0, a test game of MultiDiscrete actions written with the framework's least glue:
``import rally`` registers it (as docs/examples' games do)."""

from pathlib import Path

import gpu_marl_envs
from rally.game import RALLY

gpu_marl_envs.register_game(
    RALLY, namespace="rally", cuda=Path(__file__).with_name("rally.cu"), numba="rally.rally_numba"
)
