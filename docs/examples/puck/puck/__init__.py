"""Puck-v0: ``import puck`` registers it (``gymnasium.make_vec("puck/Puck-v0", ...)``)."""

from pathlib import Path

import gpu_marl_envs
from puck.env import PUCK

gpu_marl_envs.register_env(PUCK, namespace="puck", cuda=Path(__file__).with_name("puck.cu"), numba="puck.puck_numba")
