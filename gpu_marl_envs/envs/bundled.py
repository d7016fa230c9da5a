"""Registers the envs and games this package ships, through the public API any package uses
(:func:`gpu_marl_envs.register_env`, :func:`gpu_marl_envs.register_game`); ``import gpu_marl_envs``
runs it. Their kernels are ``kernels/<file>.cu`` and ``kernels/<file>_numba.py``."""

from importlib import resources

from gpu_marl_envs.envs.acrobot import ACROBOT
from gpu_marl_envs.envs.cartpole import CARTPOLE
from gpu_marl_envs.envs.covid_economy import COVID_ECONOMY
from gpu_marl_envs.envs.mountain_car import MOUNTAIN_CAR
from gpu_marl_envs.envs.mountain_car_continuous import MOUNTAIN_CAR_CONTINUOUS
from gpu_marl_envs.envs.pendulum import PENDULUM
from gpu_marl_envs.envs.simple_speaker_listener import SIMPLE_SPEAKER_LISTENER
from gpu_marl_envs.envs.simple_spread import SIMPLE_SPREAD
from gpu_marl_envs.envs.simple_tag import SIMPLE_TAG
from gpu_marl_envs.envs.tag_continuous import TAG_CONTINUOUS
from gpu_marl_envs.envs.tag_gridworld import TAG_GRIDWORLD
from gpu_marl_envs.registration import NAMESPACE, register_env, register_game

KERNELS = resources.files("gpu_marl_envs.kernels")


def _register() -> None:
    for definition, file in (
        (ACROBOT, "acrobot"),
        (CARTPOLE, "cartpole"),
        (MOUNTAIN_CAR, "mountain_car"),
        (MOUNTAIN_CAR_CONTINUOUS, "mountain_car_continuous"),
        (PENDULUM, "pendulum"),
    ):
        register_env(
            definition, namespace=NAMESPACE, cuda=KERNELS / f"{file}.cu", numba=f"gpu_marl_envs.kernels.{file}_numba"
        )
    for definition, file in (
        (TAG_CONTINUOUS, "tag_continuous"),
        (TAG_GRIDWORLD, "tag_gridworld"),
        (COVID_ECONOMY, "covid_economy"),
        (SIMPLE_SPREAD, "simple_spread"),
        (SIMPLE_TAG, "simple_tag"),
        (SIMPLE_SPEAKER_LISTENER, "simple_speaker_listener"),
    ):
        register_game(
            definition, namespace=NAMESPACE, cuda=KERNELS / f"{file}.cu", numba=f"gpu_marl_envs.kernels.{file}_numba"
        )


_register()
