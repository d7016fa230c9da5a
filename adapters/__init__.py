"""Adapters to outside RL libraries, one module each, imported lazily so that each library stays an
optional extra: ``from gpu_marl_envs.adapters import make_sb3_env`` imports Stable-Baselines3 only
then (``pip install gpu_marl_envs[sb3]``).
"""

from importlib import import_module

# name -> module (under gpu_marl_envs.adapters) that defines it
_LAZY = {
    "SB3VecEnv": "sb3",
    "SB3ParallelVecEnv": "sb3",
    "make_sb3_env": "sb3",
    "TorchRLVectorEnv": "torchrl",
    "TorchRLParallelEnv": "torchrl",
    "make_torchrl_env": "torchrl",
    "SkrlVectorEnv": "skrl",
    "SkrlParallelEnv": "skrl",
    "make_skrl_env": "skrl",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
