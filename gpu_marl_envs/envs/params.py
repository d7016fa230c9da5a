"""A params dataclass declared once: each field's range beside it, checked on construction; float
fields held as float32 values; the kernels' constants derived from its fields.

    @params_dataclass
    class CoverParams:
        num_agents: int = param(3, ge=1)
        grid_length: int = param(4, ge=1)
        episode_length: int = param(25, ge=1)

``CoverParams(num_agents=0)`` raises ``ValueError: CoverParams.num_agents must be >= 1, got 0``. The
same checks run on ``dataclasses.replace``, hence on every setting a user passes (``make_parallel(...,
num_agents=0)``). A game's cross-field checks stay in its own ``__post_init__``, which runs after them.

Why float32 values: every backend computes in float32, the kernels with each constant rounded once.
A params object holding those rounded values hands the torch reference the same numbers (``x *
p.damping`` in torch multiplies by the float32 the kernels use), with no rounding in the rules.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from typing import Any

import numpy as np

from gpu_marl_envs.validation import check_params_numbers

RANGE = "range"
"""The key of a field's :class:`Range` in its ``dataclasses.field`` metadata."""


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a number may take: bounds ``gt`` / ``ge`` below and ``lt`` / ``le`` above, each optional."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def __contains__(self, value) -> bool:
        return (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
        )

    def __str__(self) -> str:
        low = ("(", self.gt) if self.gt is not None else ("[", self.ge) if self.ge is not None else None
        high = (")", self.lt) if self.lt is not None else ("]", self.le) if self.le is not None else None
        if low and high:
            return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
        if low:
            return f"{'>' if low[0] == '(' else '>='} {low[1]}"
        return f"{'<' if high[0] == ')' else '<='} {high[1]}"


def param(default: Any, *, gt=None, ge=None, lt=None, le=None) -> Any:
    """A params field with its default and range (``param(0.5, ge=0, le=1)``: ``[0, 1]``), checked by
    :func:`params_dataclass` on construction."""
    if gt is not None and ge is not None or lt is not None and le is not None:
        raise ValueError("a range has one lower bound (gt or ge) and one upper bound (lt or le)")
    return dataclasses.field(default=default, metadata={RANGE: Range(gt, ge, lt, le)})


def params_dataclass(cls: type) -> type:
    """``cls`` as a frozen dataclass that checks itself on construction: every number of the type its
    annotation says (float32's range for floats, int32's for ints: the kernels' types), every field
    made with :func:`param` within its range, with a one-line ``ValueError`` naming the field, the
    value and the range; then each float field is replaced by its float32 value; then ``cls``'s own
    ``__post_init__``, if it has one, runs (cross-field checks)."""
    own_post_init = cls.__dict__.get("__post_init__")

    def __post_init__(self):
        check_params(self)
        if own_post_init is not None:
            own_post_init(self)

    cls.__post_init__ = __post_init__
    return dataclasses.dataclass(frozen=True)(cls)


def check_declaration(params_type: type) -> None:
    """``ValueError`` where fields declare ranges (:func:`param`) that nothing would check: a params
    class not made by :func:`params_dataclass` (``register_env``/``register_game`` call this)."""
    ranged = [f.name for f in dataclasses.fields(params_type) if RANGE in f.metadata]
    post_init = getattr(params_type, "__post_init__", None)
    checked = getattr(post_init, "__qualname__", "") == f"{params_dataclass.__name__}.<locals>.__post_init__"
    if ranged and not checked:
        raise ValueError(
            f"{params_type.__name__} declares ranges ({', '.join(ranged)}) that nothing checks: decorate it "
            "with @params_dataclass (gpu_marl_envs.envs.params) rather than @dataclass"
        )


def check_params(params) -> None:
    """What :func:`params_dataclass` runs on construction (see there); float fields rounded in place."""
    check_params_numbers(params)
    kinds = declared_kinds(type(params))
    for f in dataclasses.fields(params):
        if not f.init:
            continue
        value = getattr(params, f.name)
        if kinds[f.name] == "float":
            value = float(np.float32(value))
            object.__setattr__(params, f.name, value)  # frozen: the one write, during construction
        allowed = f.metadata.get(RANGE)
        if allowed is not None and value not in _rounded(allowed, kinds[f.name]):
            raise ValueError(f"{type(params).__name__}.{f.name} must be {allowed}, got {value!r}")


def _rounded(allowed: Range, kind: str) -> Range:
    """A float field's range with its bounds as float32 (``le=0.1`` admits 0.1, which is float32's 0.1
    once rounded)."""
    if kind != "float":
        return allowed
    return Range(*(None if bound is None else float(np.float32(bound)) for bound in dataclasses.astuple(allowed)))


@functools.cache
def declared_kinds(params_type: type) -> dict[str, str]:
    """Each field's declared type and each property's return type, by name (``"float"``, ``"int"``,
    ...; string annotations read as written, as ``validation.check_params_numbers`` reads them): a
    constant's type is its declared one (``gravity: float = 10`` is a float)."""
    kinds = {f.name: _name(f.type) for f in dataclasses.fields(params_type)}
    for name, member in vars(params_type).items():
        if isinstance(member, property) and member.fget is not None:
            kinds.setdefault(name, _name(member.fget.__annotations__.get("return")))
    return kinds


def _name(annotation) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")


def params_constants(params, **derived) -> dict[str, Any]:
    """The kernels' constants of a params dataclass (``MultiAgentDefinition.kernel_constants``'s
    default): each field holding a bool, an int, a float or a tuple of numbers, and the runtime's
    ``num_agents`` and ``episode_length`` (properties too), as ``UPPER_CASE`` constants
    (``grid_length`` -> ``GRID_LENGTH``), typed by their declaration (a float field's value is a
    float32 value even where an int was given); then ``derived``, constants a game computes
    (``params_constants(p, DIM=2 + 4 * p.num_agents)``), added or replacing those of the same name.
    Fields of other types (a string, an enum) are left out: a game derives the constants they imply."""
    kinds = declared_kinds(type(params))
    names = [f.name for f in dataclasses.fields(params)] + [
        name for name in ("num_agents", "episode_length") if not any(f.name == name for f in dataclasses.fields(params))
    ]
    constants = {}
    for name in names:
        value = getattr(params, name, None)
        if kinds.get(name) == "float" and isinstance(value, numbers.Real) and not isinstance(value, bool):
            constants[name.upper()] = float(np.float32(value))
        elif isinstance(value, (bool, np.bool_, numbers.Real)) or (
            isinstance(value, tuple) and all(isinstance(v, numbers.Real) for v in value)
        ):
            constants[name.upper()] = value
    return constants | derived
