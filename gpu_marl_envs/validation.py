"""Checks of user input that name the fix. Metadata checks (type, device, shape, dtype) cost no
device work; value checks (``check_values``) cost one device-to-host synchronisation."""

from __future__ import annotations

import torch
from gymnasium import spaces


def check_num_envs(num_envs) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    return num_envs


def action_dtype(space: spaces.Space) -> torch.dtype:
    """The batched action dtype: int64 for Discrete (as Gymnasium samples), float32 for Box."""
    return torch.int64 if isinstance(space, spaces.Discrete) else torch.float32


def zero_actions(space: spaces.Space, num_envs: int, device: torch.device) -> torch.Tensor:
    return torch.zeros((num_envs, *space.shape), dtype=action_dtype(space), device=device)


def check_actions(actions, space: spaces.Space, num_envs: int, device: torch.device, check_values: bool) -> torch.Tensor:
    discrete = isinstance(space, spaces.Discrete)
    dtype = action_dtype(space)
    shape = (num_envs, *space.shape)
    if not isinstance(actions, torch.Tensor):
        raise TypeError(
            f"actions must be a torch.Tensor of shape {shape} and dtype {dtype} on {device}, got "
            f"{type(actions).__name__}; convert with torch.as_tensor(actions, dtype={dtype}, device='{device}') "
            "or wrap the env in gymnasium.wrappers.vector.ArrayConversion for numpy I/O"
        )
    if actions.device != device:
        raise ValueError(f"actions are on {actions.device} but the env is on {device}; use actions.to('{device}')")
    if tuple(actions.shape) != shape:
        raise ValueError(f"actions must have shape {shape} (num_envs, *single_action_space.shape), got {tuple(actions.shape)}")
    if actions.dtype != dtype:
        fix = "actions.long()" if discrete else "actions.float()"
        raise TypeError(f"actions must have dtype {dtype}, got {actions.dtype}; use {fix}")
    if check_values:
        if discrete:
            bad = (actions < 0) | (actions >= space.n)
            if bad.any():
                env = int(bad.nonzero()[0, 0])
                raise ValueError(
                    f"actions must lie in [0, {space.n - 1}]; env {env} got {int(actions[env])} (no env was stepped)"
                )
        else:
            bad = torch.isnan(actions)
            if bad.any():
                env = int(bad.nonzero()[0, 0])
                raise ValueError(f"actions of env {env} contain NaN (no env was stepped)")
    return actions.contiguous()


def check_options(options, allowed: tuple[str, ...]) -> dict:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown reset options {unknown}; supported: {list(allowed)}")
    return options
