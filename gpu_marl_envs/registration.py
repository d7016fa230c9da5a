"""Registers every single-agent env with Gymnasium as ``gpu_marl_envs/<id>``: ``make`` gives a numpy
:class:`~gpu_marl_envs.single_env.GpuEnv`, ``make_vec`` a torch :class:`~gpu_marl_envs.vector_env.GpuVectorEnv`.

Multi-agent games have Gymnasium-style ids too (``gpu_marl_envs/TagContinuous-v0``), made by
:func:`make_parallel`. PettingZoo (1.27) keeps no registry of its own to add them to: its envs are
modules with a ``parallel_env()`` factory, which :class:`~gpu_marl_envs.tag_parallel_env.TagParallelEnv`
plays the part of.
"""

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


def parallel_env_ids() -> list[str]:
    from gpu_marl_envs.parallel_env import games

    return [f"{NAMESPACE}/{env_id}" for env_id in games()]


def make_parallel(env_id: str, num_envs: int = 1, **kwargs):
    """A batched multi-agent env, e.g. ``make_parallel("gpu_marl_envs/TagContinuous-v0", 1000,
    device="cuda")``: a :class:`~gpu_marl_envs.parallel_env.GpuParallelEnv` (its keyword arguments)."""
    from gpu_marl_envs.parallel_env import GpuParallelEnv

    namespace, _, name = env_id.rpartition("/")
    if namespace not in ("", NAMESPACE):
        raise ValueError(f"unknown namespace {namespace!r} in {env_id!r}; the ids are {parallel_env_ids()}")
    return GpuParallelEnv(name, num_envs, **kwargs)
