"""Checks of user input that name the fix. Metadata checks (type, device, shape, dtype) cost no
device work; value checks (``check_values``) cost one device-to-host synchronisation."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import rng


def check_num_envs(num_envs) -> int:
    """``num_envs`` as a Python int: an int >= 1 (numpy's integers too, not a bool)."""
    if isinstance(num_envs, (bool, np.bool_)) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    return int(num_envs)


def check_params_numbers(params) -> None:
    """Every float field of an env's params dataclass is a finite number that float32 holds, and
    every int field an int that int32 holds, every bool field a bool: the kernels read them as float32
    and int32 (a NaN gravity would make NaN observations and episodes that never end; a string "False"
    would be true). ``ValueError`` names the field."""
    name = type(params).__name__
    for f in dataclasses.fields(params):
        value, kind = getattr(params, f.name), f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "float":
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
                raise ValueError(f"{name}.{f.name} must be a number, got {value!r}")
            if not abs(value) <= FLOAT32_MAX:  # NaN fails too
                raise ValueError(f"{name}.{f.name} must be a finite number within float32's range, got {value}")
        elif kind == "int":
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name}.{f.name} must be an integer, got {value!r}")
            if not INT32.min <= value <= INT32.max:
                raise ValueError(f"{name}.{f.name} must fit in int32, got {value}")
        elif kind == "bool" and not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name}.{f.name} must be a bool, got {value!r}")


FLOAT32_MAX = float(np.finfo(np.float32).max)
INT32 = np.iinfo(np.int32)


def exact_cast(value: torch.Tensor, dtype: torch.dtype, what: str) -> torch.Tensor:
    """``value`` as ``dtype``, or ``ValueError`` naming ``what`` where an integer dtype cannot hold
    a value (a cast would wrap it: 2**40 as int32 is 0). Floats beyond float32's range become
    infinities, which the callers' finiteness checks refuse."""
    if dtype.is_floating_point or dtype == torch.bool or value.numel() == 0:
        return value.to(dtype)
    info = torch.iinfo(dtype)
    if value.min() < info.min or value.max() > info.max:
        raise ValueError(
            f"{what} must lie in [{info.min}, {info.max}] ({dtype}), got {value.min().item()} to {value.max().item()}"
        )
    return value.to(dtype)


def action_dtype(space: spaces.Space) -> torch.dtype:
    """The batched action dtype: int64 for Discrete (as Gymnasium samples), float32 for Box."""
    return torch.int64 if isinstance(space, spaces.Discrete) else torch.float32


def zero_actions(space: spaces.Space, num_envs: int, device: torch.device) -> torch.Tensor:
    return torch.zeros((num_envs, *space.shape), dtype=action_dtype(space), device=device)


def actions_on_device(actions, device: torch.device):
    """A numpy array of actions (``envs.action_space.sample()``) as a tensor on ``device``: one
    host-to-device copy, dtype kept (the checks that follow name a wrong one). Anything else as given."""
    if isinstance(actions, np.ndarray):
        return torch.as_tensor(actions, device=device)
    return actions


def action_bounds(space: spaces.Space, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A ``Box``'s bounds as tensors on ``device`` (made once per env: ``check_actions`` compares every
    step's actions with them); ``None`` for other spaces."""
    if not isinstance(space, spaces.Box):
        return None
    return torch.as_tensor(space.low, device=device), torch.as_tensor(space.high, device=device)


def check_actions(
    actions,
    space: spaces.Space,
    num_envs: int,
    device: torch.device,
    check_values: bool,
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``actions`` checked for type, device, shape and dtype; with ``check_values``, values too:
    discrete ones in range, continuous ones finite and within the ``Box``'s ``bounds`` (from
    :func:`action_bounds`). Nothing is stepped when a check fails."""
    discrete = isinstance(space, spaces.Discrete)
    dtype = action_dtype(space)
    shape = (num_envs, *space.shape)
    actions = actions_on_device(actions, device)
    if not isinstance(actions, torch.Tensor):
        raise TypeError(
            f"actions must be a torch.Tensor (or a numpy array, copied to the device) of shape {shape} and dtype "
            f"{dtype} on {device}, got {type(actions).__name__}; convert with torch.as_tensor(actions, "
            f"dtype={dtype}, device='{device}') or wrap the env in gymnasium.wrappers.vector.ArrayConversion "
            "for numpy I/O"
        )
    if actions.device != device:
        raise ValueError(f"actions are on {actions.device} but the env is on {device}; use actions.to('{device}')")
    if tuple(actions.shape) != shape:
        raise ValueError(
            f"actions must have shape {shape} (num_envs, *single_action_space.shape), got {tuple(actions.shape)}"
        )
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
            low, high = bounds
            # One reduction and one read-back for NaN, infinities and the range alike.
            bad = ~torch.isfinite(actions) | (actions < low) | (actions > high)
            if bad.any():
                index = tuple(int(i) for i in bad.nonzero()[0])
                element = index[1:]
                value = actions[index].item()
                lo, hi = low[element].item(), high[element].item()
                where = f"env {index[0]}" + (
                    f", element {element[0] if len(element) == 1 else element}" if actions.dim() > 1 else ""
                )
                raise ValueError(
                    f"actions must be finite and lie in the action space's bounds [{lo}, {hi}]; {where} "
                    f"got {value} (no env was stepped)"
                )
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


def reset_mask_option(options, num_envs: int, device: torch.device) -> torch.Tensor | None:
    """The ``reset_mask`` of ``reset(options=...)``, checked (None: every sub-env); the only option."""
    return check_reset_mask(check_options(options, ("reset_mask",)).get("reset_mask"), num_envs, device)


def check_reset_mask(mask, num_envs: int, device: torch.device) -> torch.Tensor | None:
    if mask is None:
        return None
    mask = torch.as_tensor(mask, device=device)
    if mask.dtype != torch.bool or tuple(mask.shape) != (num_envs,):
        raise ValueError(
            f"reset_mask must be a bool tensor of shape ({num_envs},), got {mask.dtype} {tuple(mask.shape)}"
        )
    if not mask.any():
        raise ValueError("reset_mask selects no sub-env; pass at least one True (or no reset_mask)")
    return mask


def check_env_ids(env_ids, num_envs: int, device: torch.device) -> torch.Tensor:
    """int64 indices from ``None`` (every sub-env), indices, or a bool mask of shape ``(num_envs,)``."""
    if env_ids is None:
        return torch.arange(num_envs, device=device)
    ids = torch.as_tensor(env_ids, device=device)
    if ids.dtype == torch.bool:
        if tuple(ids.shape) != (num_envs,):
            raise ValueError(f"a bool env_ids mask must have shape ({num_envs},), got {tuple(ids.shape)}")
        return ids.nonzero().flatten()
    if ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 1:
        raise ValueError("env_ids must be a 1-D sequence of ints or a bool mask")
    if len(ids) and (ids.min() < 0 or ids.max() >= num_envs):
        raise ValueError(f"env_ids must lie in [0, {num_envs - 1}]")
    if len(torch.unique(ids)) != len(ids):
        raise ValueError("env_ids must not repeat")
    return ids.to(torch.int64)


def sub_env_seeds(seed, num_envs: int, device: torch.device) -> torch.Tensor:
    """int64 ``(num_envs,)`` seeds: sub-env ``i`` gets ``seed + i`` (as Gymnasium's vector envs), or
    one seed each from a sequence."""
    n = num_envs
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        seed = int(seed)
        if seed < 0 or seed + n - 1 > rng.MAX_SEED:
            raise ValueError(f"seed must lie in [0, 2**63 - num_envs] (sub-env i gets seed + i), got {seed}")
        return seed + torch.arange(n, dtype=torch.int64, device=device)
    if isinstance(seed, Sequence) and len(seed) == n and all(isinstance(s, (int, np.integer)) for s in seed):
        if min(seed) < 0 or max(seed) > rng.MAX_SEED:
            raise ValueError(f"seeds must lie in [0, 2**63 - 1], got {seed!r}")
        return torch.tensor([int(s) for s in seed], dtype=torch.int64, device=device)
    raise ValueError(f"seed must be None, an int or a sequence of {n} ints, got {seed!r}")
