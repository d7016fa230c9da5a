"""Glide-v0, a test game of Box actions: ``import glide`` registers it (as docs/examples' games do)."""

from pathlib import Path

import gpu_marl_envs
from glide.game import GLIDE

gpu_marl_envs.register_game(
    GLIDE, namespace="glide", cuda=Path(__file__).with_name("glide.cu"), numba="glide.glide_numba"
)
