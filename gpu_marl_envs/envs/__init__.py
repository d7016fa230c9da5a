"""The env definitions, by Gymnasium id (without the ``gpu_marl_envs/`` namespace)."""

from gpu_marl_envs.envs.acrobot import ACROBOT
from gpu_marl_envs.envs.cartpole import CARTPOLE
from gpu_marl_envs.envs.definition import EnvDefinition
from gpu_marl_envs.envs.mountain_car import MOUNTAIN_CAR
from gpu_marl_envs.envs.mountain_car_continuous import MOUNTAIN_CAR_CONTINUOUS
from gpu_marl_envs.envs.pendulum import PENDULUM

ENVS: dict[str, EnvDefinition] = {
    d.id: d for d in (ACROBOT, CARTPOLE, MOUNTAIN_CAR, MOUNTAIN_CAR_CONTINUOUS, PENDULUM)
}


def get_definition(env_id: str) -> EnvDefinition:
    name = env_id.split("/", 1)[-1]
    if name not in ENVS:
        raise ValueError(f"unknown env {env_id!r}; available: {', '.join(sorted(ENVS))}")
    return ENVS[name]
