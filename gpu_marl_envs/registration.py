"""Registers the envs under the namespace ``gpu_marl_envs`` (``import gpu_marl_envs`` does it):

- every single-agent env with Gymnasium as ``gpu_marl_envs/<id>``: ``gymnasium.make`` gives a numpy
  :class:`~gpu_marl_envs.single_env.GpuEnv`, ``gymnasium.make_vec`` a torch
  :class:`~gpu_marl_envs.vector_env.GpuVectorEnv`;
- every multi-agent game in PettingZoo's registry of parallel envs, ``gpu_marl_envs/<id>``:
  ``pettingzoo.make("parallel", "gpu_marl_envs/CovidEconomy-v0")`` gives one game as a numpy
  :class:`~gpu_marl_envs.pettingzoo_env.PettingZooParallelEnv` (its keyword arguments; PettingZoo's
  ``max_cycles=`` sets the episode length); PettingZoo does not import packages by itself, so
  ``import gpu_marl_envs`` comes first;
- the batched games by the same ids through :func:`make_parallel` (a torch
  :class:`~gpu_marl_envs.parallel_env.GpuParallelEnv` of ``num_envs`` games).
"""

import gymnasium
import pettingzoo

from gpu_marl_envs.envs import ENVS

NAMESPACE = "gpu_marl_envs"


def register_envs() -> None:
    """Register the single-agent envs with Gymnasium and the games with PettingZoo (idempotent)."""
    from gpu_marl_envs.parallel_env import games

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
    for env_id in games():
        full_id = f"{NAMESPACE}/{env_id}"
        if full_id not in pettingzoo.parallel_registry:  # registering twice would warn
            pettingzoo.register("parallel", full_id, entry_point="gpu_marl_envs.pettingzoo_env:PettingZooParallelEnv",
                                kwargs={"env_id": env_id})


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
