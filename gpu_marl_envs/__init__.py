"""gpu_marl_envs: RL environments whose whole step runs as batched GPU kernels.

``import gpu_marl_envs`` registers the envs with Gymnasium::

    envs = gymnasium.make_vec("gpu_marl_envs/CartPole-v1", num_envs=65536, device="cuda")
"""

from gpu_marl_envs.backends import BackendUnavailableError, available_backends
from gpu_marl_envs.envs import ENVS
from gpu_marl_envs.registration import register_envs
from gpu_marl_envs.single_env import GpuEnv
from gpu_marl_envs.vector_env import GpuVectorEnv

__version__ = "0.1.0"
__all__ = ["ENVS", "BackendUnavailableError", "GpuEnv", "GpuVectorEnv", "available_backends", "register_envs"]

register_envs()
