"""gpu_marl_envs: RL environments whose whole step runs as batched GPU kernels.

``import gpu_marl_envs`` registers the envs with Gymnasium::

    envs = gymnasium.make_vec("gpu_marl_envs/CartPole-v1", num_envs=65536, device="cuda")

and the multi-agent games with PettingZoo; it provides them batched and as one PettingZoo ``ParallelEnv``::

    games = gpu_marl_envs.make_parallel("gpu_marl_envs/TagContinuous-v0", num_envs=1000, device="cuda")
    game = pettingzoo.make("parallel", "gpu_marl_envs/CovidEconomy-v0")  # a PettingZooParallelEnv
    game = gpu_marl_envs.TagParallelEnv("continuous")
"""

from gpu_marl_envs.backends import BackendUnavailableError, available_backends
from gpu_marl_envs.envs import ENVS
from gpu_marl_envs.parallel_env import GpuParallelEnv
from gpu_marl_envs.pettingzoo_env import PettingZooParallelEnv
from gpu_marl_envs.registration import make_parallel, register_envs
from gpu_marl_envs.single_env import GpuEnv
from gpu_marl_envs.tag_parallel_env import TagParallelEnv
from gpu_marl_envs.vector_env import GpuVectorEnv

__version__ = "0.1.0"
__all__ = ["ENVS", "BackendUnavailableError", "GpuEnv", "GpuParallelEnv", "GpuVectorEnv", "PettingZooParallelEnv",
           "TagParallelEnv", "available_backends", "make_parallel", "register_envs"]

register_envs()
