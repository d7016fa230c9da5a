"""The trainers' settings, typed and bounded in one place.

Every config dataclass (``PPOConfig``, ``A2CConfig``, ``DDPGConfig``, ``PolicyConfig``,
``MultiAgentConfig``, ``MADDPGConfig``, ``maddpg.PolicySettings``) calls :func:`check` from
``__post_init__``: each field's value must have the field's annotated type and lie in the range
that :data:`RANGES` gives its name (a name means the same in every config: ``gamma`` is always a
discount). Types are strict, as TOML's are: a boolean
is ``True`` or ``False`` (not ``1``, not ``"false"``), an int is not a bool, a float may be written
as an int, a tuple is a tuple (:func:`as_annotated` turns TOML's arrays into tuples first).

``--set key=value`` gives text; :func:`read` turns it into a value of the field's type: TOML
(``3``, ``1e-3``, ``[64, 64]``), bare words as strings (``exploration=ou``), and for a field that
takes a boolean ``true``/``false`` in any capitalisation, so that Python's ``False`` reads as
false rather than as a (truthy) string.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from typing import Literal, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def _finite_at_least(low: float, strict: bool = False):
    return lambda v: math.isfinite(v) and (v > low if strict else v >= low)


# field name -> (what it must be, the test its value passes), checked after its type.
RANGES = {
    **dict.fromkeys(
        (
            "num_envs",
            "num_steps",
            "total_timesteps",
            "num_minibatches",
            "update_epochs",
            "buffer_size",
            "batch_size",
            "gradient_steps",
            "policy_frequency",
        ),
        ("an int >= 1", lambda v: v >= 1),
    ),
    "learning_starts": ("an int >= 0", lambda v: v >= 0),
    # Seeds as numpy's: every seed derived from it (ranks, resumes, sub-envs) stays far inside int64.
    "seed": ("an int in [0, 2**32 - 1]", lambda v: 0 <= v < 2**32),
    # Larger learning rates and clip ranges only overflow: Adam steps each weight by about the
    # learning rate, and PPO's ratio is clamped to [1 - clip_coef, 1 + clip_coef], no clipping at 1.
    **dict.fromkeys(
        ("learning_rate", "actor_lr", "critic_lr", "clip_coef"), ("a number in (0, 1]", lambda v: 0 < v <= 1)
    ),
    "rms_prop_eps": ("a finite number > 0", _finite_at_least(0, strict=True)),
    **dict.fromkeys(("gamma", "gae_lambda"), ("a number in [0, 1]", lambda v: 0 <= v <= 1)),
    **dict.fromkeys(("tau", "ou_theta"), ("a number in (0, 1]", lambda v: 0 < v <= 1)),
    **dict.fromkeys(
        ("vf_coef", "exploration_noise", "policy_noise", "noise_clip", "preactivation_penalty"),
        ("a finite number >= 0", _finite_at_least(0)),
    ),
    # A schedule (a tuple of points, PolicyConfig's) is checked by PolicyConfig.
    "ent_coef": ("a finite number >= 0", lambda v: isinstance(v, tuple) or _finite_at_least(0)(v)),
    "max_grad_norm": ("a number > 0 (inf: no clipping)", lambda v: v > 0),
    "max_std": ("a number > 0 (inf: a free std)", lambda v: isinstance(v, tuple) or v > 0),
    "hidden": (
        "a non-empty tuple of layer widths >= 1 (TOML: a list, e.g. [64, 64])",
        lambda v: len(v) > 0 and min(v) >= 1,
    ),
}


def check(config) -> None:
    """``ValueError`` naming the first field of the dataclass ``config`` whose value has not its
    annotated type or lies outside its range (:data:`RANGES`)."""
    hints = field_types(type(config))
    for f in dataclasses.fields(config):
        value, annotation = getattr(config, f.name), hints[f.name]
        rule = RANGES.get(f.name)
        if not matches(value, annotation) or (rule is not None and not rule[1](value)):
            raise ValueError(
                f"{type(config).__name__}.{f.name} must be {rule[0] if rule else describe(annotation)}, got {value!r}"
            )


def matches(value, annotation) -> bool:
    """Whether ``value`` has the type ``annotation`` (bool, int, float, str, ``Literal``, unions,
    tuples, dicts) as TOML would give it."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    if annotation is str:
        return isinstance(value, str)
    if origin is Literal:
        return any(type(value) is type(option) and value == option for option in arguments)
    if origin in (Union, types.UnionType):
        return any(matches(value, option) for option in arguments)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(arguments) == 2 and arguments[1] is Ellipsis:
            return all(matches(item, arguments[0]) for item in value)
        return len(value) == len(arguments) and all(matches(v, a) for v, a in zip(value, arguments))
    if annotation is dict or origin is dict:
        return isinstance(value, dict)  # its contents are the config's to check
    raise TypeError(f"no rule for a setting of type {annotation}")


def describe(annotation) -> str:
    """What a value of ``annotation`` is, in TOML's words: ``true or false``, ``an int``, ..."""
    options = _options(annotation)
    return ", ".join(options[:-1]) + " or " + options[-1] if len(options) > 1 else options[0]


def _options(annotation) -> list[str]:
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return ["true", "false"]
    if origin in (Union, types.UnionType):
        return [option for member in arguments for option in _options(member)]
    if origin is Literal:
        return [_literal(option) for option in arguments]
    if origin is tuple:
        return [f"a tuple (TOML: a list) of {describe(arguments[0]).removeprefix('an ').removeprefix('a ')}s"]
    return [{int: "an int", float: "a number", str: "a string"}.get(annotation, "a table")]


def _literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def accepts_bool(annotation) -> bool:
    if annotation is bool:
        return True
    return typing.get_origin(annotation) in (Union, types.UnionType) and any(
        accepts_bool(option) for option in typing.get_args(annotation)
    )


def read(text: str, annotation=None):
    """The value of ``--set key=TEXT`` for a field of type ``annotation`` (None: unknown, then
    TOML or a bare string). Not checked: the config's :func:`check` does that."""
    text = text.strip()
    if annotation is not None and accepts_bool(annotation) and text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def as_annotated(value, annotation):
    """``value`` as TOML gives it, with its lists turned into tuples where ``annotation`` (or one
    of its union's members) is a tuple, at every depth: ``[[0, 0.5], [100, 0.1]]`` for
    ``tuple[tuple[int, float], ...]``. Anything else is returned as it is, for :func:`check`."""
    if not isinstance(value, list):
        return value
    union = typing.get_origin(annotation) in (Union, types.UnionType)
    for option in typing.get_args(annotation) if union else (annotation,):
        if typing.get_origin(option) is tuple:
            arguments = typing.get_args(option)
            if len(arguments) == 2 and arguments[1] is Ellipsis:
                return tuple(as_annotated(item, arguments[0]) for item in value)
            if len(arguments) == len(value):
                return tuple(as_annotated(item, a) for item, a in zip(value, arguments))
    return value


def field_types(config_type) -> dict:
    """Field name -> annotation of a config dataclass."""
    return typing.get_type_hints(config_type)
