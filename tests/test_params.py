"""Params declared once (``gpu_marl_envs.envs.params``): ranges checked with one line naming the field,
the value and the range; floats held as float32 values; the kernels' constants and a single-agent
env's kernel params derived from the fields."""

import dataclasses

import glide  # noqa: F401  (registers glide/Glide-v0)
import numpy as np
import pytest
from glide.game import GLIDE, GlideParams

import gpu_marl_envs
from gpu_marl_envs.envs.definition import number_fields
from gpu_marl_envs.envs.params import Range, param, params_constants, params_dataclass


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"num_gliders": 0}, "GlideParams.num_gliders must be >= 1, got 0"),
        ({"damping": 1.5}, "GlideParams.damping must be in [0, 1], got 1.5"),
        ({"accel": 0}, "GlideParams.accel must be > 0, got 0.0"),
        ({"accel": float("nan")}, "GlideParams.accel must be a finite number within float32's range, got nan"),
        ({"episode_length": 2.5}, "GlideParams.episode_length must be an integer, got 2.5"),
    ],
)
def test_a_value_out_of_its_range_is_refused_in_one_line(settings, message):
    with pytest.raises(ValueError) as error:
        GlideParams(**settings)
    assert str(error.value) == message
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):  # settings too
        gpu_marl_envs.make_parallel("glide/Glide-v0", 1, device="cpu", **settings)


def test_float_fields_hold_the_float32_values_the_kernels_use():
    p = GlideParams(damping=0.1, accel=1)
    assert p.damping == float(np.float32(0.1)) != 0.1 and isinstance(p.accel, float)
    assert dataclasses.replace(p, num_gliders=2).damping == p.damping  # rounding twice changes nothing
    assert GlideParams(damping=0.1, accel=1) == GlideParams(damping=float(np.float32(0.1)), accel=1.0)


def test_a_float_bound_admits_its_own_value():
    @params_dataclass
    class Capped:
        rate: "float" = param(0.1, le=0.1)  # 0.1 rounds up to float32's 0.10000000149... (a string
        # annotation, as under `from __future__ import annotations`, declares a float too)

    assert Capped().rate == float(np.float32(0.1))


@pytest.mark.parametrize(
    "bounds, text",
    [
        ({"ge": 1}, ">= 1"),
        ({"gt": 0}, "> 0"),
        ({"le": 2}, "<= 2"),
        ({"lt": 2}, "< 2"),
        ({"ge": 0, "le": 1}, "in [0, 1]"),
        ({"gt": 0, "le": 1}, "in (0, 1]"),
    ],
)
def test_a_range_says_what_it_admits(bounds, text):
    assert str(Range(**bounds)) == text


def test_a_range_has_one_bound_on_each_side():
    with pytest.raises(ValueError, match="one lower bound"):
        param(1, gt=0, ge=0)


def test_the_kernels_constants_are_the_params_in_upper_case():
    # The fields, then num_agents (a property here); floats as float32 values.
    assert GLIDE.kernel_constants(GlideParams(damping=0.1)) == {
        "NUM_GLIDERS": 3,
        "EPISODE_LENGTH": 5,
        "DAMPING": float(np.float32(0.1)),
        "ACCEL": 0.25,
        "NUM_AGENTS": 4,
    }
    assert params_constants(GlideParams(), ACCEL=2.0, DIM=7) == {
        "NUM_GLIDERS": 3,
        "EPISODE_LENGTH": 5,
        "DAMPING": 0.5,
        "ACCEL": 2.0,
        "NUM_AGENTS": 4,
        "DIM": 7,
    }


def test_a_plain_dataclass_gets_its_constants_typed_by_declaration():
    @dataclasses.dataclass(frozen=True)
    class Plain:
        num_agents: int = 2
        episode_length: int = 3
        gravity: float = 10  # an int where a float is declared: the kernels get a float
        walls: tuple = (1.0, 2.0)
        name: str = "plain"  # no number: left out

    constants = params_constants(Plain())
    assert constants == {"NUM_AGENTS": 2, "EPISODE_LENGTH": 3, "GRAVITY": 10.0, "WALLS": (1.0, 2.0)}
    assert isinstance(constants["GRAVITY"], float)
    assert number_fields(Plain) == ("num_agents", "episode_length", "gravity")


def test_ranges_on_a_class_that_checks_none_are_refused_at_registration():
    @dataclasses.dataclass(frozen=True)
    class Unchecked:
        num_gliders: int = param(3, ge=1)
        episode_length: int = 5
        damping: float = 0.5
        accel: float = 0.25
        num_agents: int = 4

    unchecked = dataclasses.replace(GLIDE, id="Unchecked-v0", params_type=Unchecked)
    with pytest.raises(ValueError, match=r"Unchecked declares ranges \(num_gliders\) that nothing checks"):
        gpu_marl_envs.register_game(unchecked, namespace="params_tests")
