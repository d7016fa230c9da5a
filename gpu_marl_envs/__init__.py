"""gpu_marl_envs: RL environments whose whole step runs as batched GPU kernels.

``import gpu_marl_envs`` registers the envs with Gymnasium::

    envs = gymnasium.make_vec("gpu_marl_envs/CartPole-v1", num_envs=65536, device="cuda")

and the multi-agent games with PettingZoo; it provides them batched and as one PettingZoo ``ParallelEnv``::

    games = gpu_marl_envs.make_parallel("gpu_marl_envs/TagContinuous-v0", num_envs=1000, device="cuda")
    game = pettingzoo.make("parallel", "gpu_marl_envs/CovidEconomy-v0")  # a PettingZooParallelEnv
    game = gpu_marl_envs.TagParallelEnv("continuous")

Settings are the fields of an env's params dataclass (``gpu_marl_envs.PendulumParams`` ...), given
as keywords or as ``params=``::

    env = gymnasium.make("gpu_marl_envs/Pendulum-v1", g=9.81)

Gymnasium's vector wrappers for these torch tensors, with their state on the env's device, and a
sampler of actions drawn there: :mod:`gpu_marl_envs.wrappers` (Gymnasium's own compute with numpy).

Other packages add their own envs and games with :func:`register_env` and :func:`register_game`
(``docs/custom_env.md``) and test their kernels with :func:`check_env`.
"""

from gpu_marl_envs.backends import BackendUnavailableError, available_backends
from gpu_marl_envs.checker import check_env
from gpu_marl_envs.envs import bundled  # noqa: F401  (registers the package's own envs and games)

# The bundled envs' params (bundled has imported their modules already: these imports cost nothing).
from gpu_marl_envs.envs.acrobot import AcrobotParams
from gpu_marl_envs.envs.cartpole import CartPoleParams
from gpu_marl_envs.envs.covid_economy_params import CovidEconomyParams
from gpu_marl_envs.envs.mountain_car import MountainCarParams
from gpu_marl_envs.envs.mountain_car_continuous import MountainCarContinuousParams
from gpu_marl_envs.envs.pendulum import PendulumParams
from gpu_marl_envs.envs.simple_speaker_listener import SimpleSpeakerListenerParams
from gpu_marl_envs.envs.simple_spread import SimpleSpreadParams
from gpu_marl_envs.envs.simple_tag import SimpleTagParams
from gpu_marl_envs.envs.tag_continuous_params import TagContinuousParams
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams
from gpu_marl_envs.parallel_env import GpuParallelEnv, make_parallel
from gpu_marl_envs.pettingzoo_env import PettingZooParallelEnv
from gpu_marl_envs.registration import ENVS, GAMES, register_env, register_game
from gpu_marl_envs.single_env import GpuEnv
from gpu_marl_envs.tag_parallel_env import TagParallelEnv
from gpu_marl_envs.vector_env import GpuVectorEnv

__version__ = "0.1.0"
__all__ = [
    "ENVS",
    "GAMES",
    "AcrobotParams",
    "BackendUnavailableError",
    "CartPoleParams",
    "CovidEconomyParams",
    "GpuEnv",
    "GpuParallelEnv",
    "GpuVectorEnv",
    "MountainCarContinuousParams",
    "MountainCarParams",
    "PendulumParams",
    "PettingZooParallelEnv",
    "SimpleSpeakerListenerParams",
    "SimpleSpreadParams",
    "SimpleTagParams",
    "TagContinuousParams",
    "TagGridworldParams",
    "TagParallelEnv",
    "available_backends",
    "check_env",
    "make_parallel",
    "register_env",
    "register_game",
]
