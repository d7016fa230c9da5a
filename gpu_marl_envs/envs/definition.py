"""What the runtime needs to know about a single-agent env: a small, plain description.

An env module (e.g. ``cartpole.py``) holds its params dataclass, spaces and a torch reference of
``reset``/``step``/``observe``, and exports one :class:`EnvDefinition`. Everything about batching,
autoreset, seeding, devices and backends lives in the runtime, written once.

State layout (shared by every backend): one float32 tensor of shape ``(len(state_fields),
num_envs)``, a row per field, so a thread per env reads and writes coalesced memory.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

# uniform(draw, low, high) -> float32 tensor (num_envs,): the runtime binds seeds and episodes.
Uniform = Callable[[int, float, float], torch.Tensor]


def _declared_type(params_type: type, name: str) -> type:
    """The annotation of a params field, or the return annotation of a derived property."""
    hints = typing.get_type_hints(params_type)
    if name in hints:
        return hints[name]
    return typing.get_type_hints(getattr(params_type, name).fget).get("return", float)


def number_fields(params_type: type) -> tuple[str, ...]:
    """The fields of a params dataclass declared bool, int or float, in order."""
    return tuple(
        f.name for f in dataclasses.fields(params_type) if _declared_type(params_type, f.name) in (bool, int, float)
    )


@dataclass(frozen=True)
class EnvDefinition:
    id: str
    """Name and version without the namespace, e.g. ``"CartPole-v1"``."""
    params_type: type
    """Frozen dataclass of the env's constants; validates itself in ``__post_init__``."""
    state_fields: tuple[str, ...]
    """Names of the state rows, in order."""
    observation_space: Callable[[Any], spaces.Box]
    action_space: Callable[[Any], spaces.Space]
    reset: Callable[[SimpleNamespace, Uniform, int], torch.Tensor]
    """Torch reference: ``(p, uniform, num_envs) -> state (F, num_envs)``."""
    step: Callable[[SimpleNamespace, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    """Torch reference: ``(p, state, actions) -> (next_state, rewards, terminated)``. Actions are
    already sanitised (discrete clamped into range, NaN replaced by 0). It must not synchronise
    with the host (no ``.item()``, no ``if tensor.any()``): on GPUs it is captured in a CUDA graph."""
    observe: Callable[[SimpleNamespace, torch.Tensor], torch.Tensor]
    """Torch reference: ``(p, state) -> observations (num_envs, obs_dim)``."""
    kernel_params: tuple[str, ...] = ()
    """Params fields and properties the step needs, in the order of the kernels' params struct
    (``GmeParams`` in CUDA C, the record ``p`` in Numba). Floats reach every backend as float32, ints
    as int32, bools as int32 0 or 1 (C's truth value; a bool field would be one byte and pad the struct).
    Left empty: every bool, int and float field of :attr:`params_type`, in the order declared."""
    gymnasium_original: str | None = None
    """The id of the Gymnasium env this one reproduces (``"CartPole-v1"``): its own renderer draws
    this env's frames (``render_mode="rgb_array"``); ``None``: an env without frames."""
    reward_threshold: float | None = None
    """The mean return at which the task counts as solved (Gymnasium's ``EnvSpec.reward_threshold``:
    the original's for a reproduction), or ``None``."""

    def __post_init__(self):
        if not self.kernel_params:
            object.__setattr__(self, "kernel_params", number_fields(self.params_type))

    @property
    def obs_dim(self) -> int:
        """Observation length (fixed per env); the kernels get it from here."""
        return self.observation_space(self.params_type()).shape[0]

    def kernel_values(self, params: Any) -> dict[str, np.float32 | np.int32]:
        """The kernels' scalars, typed by their declared type (not the value's: ``gravity=10``
        must still reach the kernels as a float) as every backend receives them."""
        values = {}
        for name in self.kernel_params:
            value = getattr(params, name)
            declared = _declared_type(self.params_type, name)
            if declared is bool:
                if not isinstance(value, (bool, np.bool_)):
                    raise ValueError(f"{self.params_type.__name__}.{name} must be a bool, got {value!r}")
                values[name] = np.int32(value)
            elif declared is int:
                if isinstance(value, bool) or int(value) != value:
                    raise ValueError(f"{self.params_type.__name__}.{name} must be an integer, got {value!r}")
                values[name] = np.int32(value)
            else:
                values[name] = np.float32(value)
        return values

    def torch_params(self, params: Any) -> SimpleNamespace:
        """The same scalars for the torch reference (Python numbers holding float32 values)."""
        return SimpleNamespace(**{k: v.item() for k, v in self.kernel_values(params).items()})

    def params_record(self, params: Any) -> np.ndarray:
        """One-element structured array laid out like the kernels' params struct. Aligned (as a C
        struct is; with 4-byte fields that adds no padding): Numba reads a packed record byte by byte."""
        values = self.kernel_values(params)
        dtype = np.dtype([(k, type(v)) for k, v in values.items()], align=True)
        return np.array([tuple(values.values())], dtype=dtype)

    def make_params(self, params: Any = None, **settings: Any) -> Any:
        """``params`` (default: the defaults) with ``settings``, fields of :attr:`params_type` by name
        (``make_params(g=9.81)``), applied on top: see :func:`apply_settings`."""
        return apply_settings(self.params_type, params, settings)


def apply_settings(params_type: type, params: Any, settings: dict[str, Any]) -> Any:
    """``params`` with ``settings`` replacing fields of the same names; with ``params`` None,
    ``params_type(**settings)``, so that a field whose default depends on others (Tag's
    ``num_other_agents_observed`` on the agent counts) follows the settings.

    The one place where ``params=`` and keyword settings meet, for single-agent envs and games alike:
    ``dataclasses.replace`` builds a new instance, so its ``__post_init__`` validates the settings
    exactly as it validates ``params=``. An unknown name raises ``TypeError`` naming it and listing
    the valid ones, in Python's words ("got an unexpected keyword argument", which callers such as
    TorchRL's ``GymEnv`` match): a misspelt setting (or a misspelt argument of the env, which ends up
    here) must not pass silently.
    """
    if params is not None and not isinstance(params, params_type):
        raise TypeError(f"params must be a {params_type.__name__}, got {type(params).__name__}")
    valid = [field.name for field in dataclasses.fields(params_type) if field.init]
    unknown = [name for name in settings if name not in valid]
    if unknown:
        raise TypeError(
            f"got an unexpected keyword argument{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
            f"neither an argument of the env nor a field of {params_type.__name__} (its fields: "
            f"{', '.join(valid)})"
        )
    if params is None:
        return params_type(**settings)
    return dataclasses.replace(params, **settings) if settings else params
