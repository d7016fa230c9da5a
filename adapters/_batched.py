"""What the adapters share: making or unwrapping the batched env they run on.

Every adapter runs its env with ``AutoresetMode.SAME_STEP``, whose final observations stay on the
device: the libraries expect an env that resets its finished sub-envs within the step (SB3's
``VecEnv`` contract, skrl's trainers that never call ``reset`` again) or, as TorchRL's fast path,
gain from taking the reset observations straight from the env.
"""

from __future__ import annotations

from gymnasium.vector import AutoresetMode

from gpu_marl_envs.parallel_env import GpuParallelEnv, make_parallel
from gpu_marl_envs.registration import NAMESPACE, is_game
from gpu_marl_envs.vector_env import GpuVectorEnv


def is_multi_agent(env_id: str) -> bool:
    return is_game(env_id)


def make_batched_env(env_id: str, num_envs: int, **kwargs) -> GpuVectorEnv | GpuParallelEnv:
    """``GpuVectorEnv`` or ``GpuParallelEnv`` of ``env_id`` with SAME_STEP autoreset.

    ``validate_actions`` defaults to False here: actions sampled from a policy over the adapter's
    spaces are in range, and the check costs a device-to-host synchronisation per step (shape,
    dtype and device are checked either way).
    """
    if "autoreset_mode" in kwargs:
        raise ValueError("the adapters choose autoreset_mode themselves (AutoresetMode.SAME_STEP); drop the argument")
    kwargs = {"validate_actions": False, **kwargs, "autoreset_mode": AutoresetMode.SAME_STEP}
    if is_multi_agent(env_id):
        return make_parallel(env_id, num_envs, **kwargs)
    import gymnasium

    full_id = env_id if "/" in env_id else f"{NAMESPACE}/{env_id}"
    return gymnasium.make_vec(full_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs).unwrapped


def check_batched_env(env, expected: type, adapter: str, make: str):
    """The env under an adapter: of type ``expected`` (wrappers removed) and in SAME_STEP mode.
    ``make`` names the adapter module's factory for the error messages."""
    env = getattr(env, "unwrapped", env)
    if not isinstance(env, expected):
        raise TypeError(
            f"{adapter} wraps a {expected.__name__}, got {type(env).__name__}; "
            f"build one with {make}(env_id, num_envs, ...)"
        )
    if env.autoreset_mode != AutoresetMode.SAME_STEP:
        raise ValueError(
            f"{adapter} needs an env made with autoreset_mode=AutoresetMode.SAME_STEP, got "
            f"{env.autoreset_mode}; pass that to the env's constructor or use {make}(env_id, num_envs, ...)"
        )
    return env
