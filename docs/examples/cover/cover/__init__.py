"""Cover-v0: ``import cover`` registers it (``gpu_marl_envs.make_parallel("cover/Cover-v0", ...)``)."""

from pathlib import Path

import gpu_marl_envs
from cover.game import COVER

gpu_marl_envs.register_game(
    COVER, namespace="cover", cuda=Path(__file__).with_name("cover.cu"), numba="cover.cover_numba"
)
