"""Registers every env with Gymnasium as ``gpu_marl_envs/<id>``: ``make`` gives a numpy
:class:`~gpu_marl_envs.single_env.GpuEnv`, ``make_vec`` a torch :class:`~gpu_marl_envs.vector_env.GpuVectorEnv`."""

import gymnasium

from gpu_marl_envs.envs import ENVS

NAMESPACE = "gpu_marl_envs"


def register_envs() -> None:
    for env_id, definition in ENVS.items():
        full_id = f"{NAMESPACE}/{env_id}"
        if full_id in gymnasium.registry:
            continue
        gymnasium.register(
            id=full_id,
            entry_point="gpu_marl_envs.single_env:GpuEnv",
            vector_entry_point="gpu_marl_envs.vector_env:GpuVectorEnv",
            # The envs truncate by themselves at params.max_episode_steps (make_vec's
            # max_episode_steps= overrides it): a TimeLimit wrapper or an injected default
            # would override a user's params.
            max_episode_steps=None,
            kwargs={"env_id": env_id},
        )
