"""Keyword settings: every maker takes the params' fields as keywords, applied on top of ``params=``
and validated as ``params=`` is (issue 24)."""

import dataclasses
import inspect
import math
import re

import gymnasium as gym
import numpy as np
import pettingzoo
import pytest
from gymnasium.envs.classic_control import CartPoleEnv, Continuous_MountainCarEnv, MountainCarEnv, PendulumEnv

import gpu_marl_envs
from gpu_marl_envs import PendulumParams, TagContinuousParams, registration

PENDULUM = "gpu_marl_envs/Pendulum-v1"
TAG = "gpu_marl_envs/TagContinuous-v0"


def make_env(**kwargs):
    return gym.make(PENDULUM, **kwargs).unwrapped


def make_vec(**kwargs):
    return gym.make_vec(PENDULUM, 2, device="cpu", **kwargs)


def make_games(**kwargs):
    return gpu_marl_envs.make_parallel(TAG, 2, device="cpu", **kwargs)


def make_game(**kwargs):
    return pettingzoo.make("parallel", TAG, **kwargs)


def make_tag_game(**kwargs):
    return gpu_marl_envs.TagParallelEnv("continuous", **kwargs)


SINGLE_AGENT = [make_env, make_vec]
MULTI_AGENT = [make_games, make_game, make_tag_game]


@pytest.mark.parametrize("make", MULTI_AGENT)
def test_tags_observed_others_follow_the_agent_counts(make):
    """num_other_agents_observed defaults to WarpDrive's 10, or every other agent where there are
    fewer: a small game needs no third setting (issue 45); a count given is kept, and checked."""
    small = make(num_runners=5, num_taggers=2)
    assert small.params.num_other_agents_observed == 6 and small.params.obs_dim == 7 * 6 + 1
    assert make(num_runners=200).params.num_other_agents_observed == 10
    assert make(num_runners=5, num_taggers=2, num_other_agents_observed=3).params.num_other_agents_observed == 3
    with pytest.raises(ValueError, match=r"num_other_agents_observed must be <= num_taggers \+ num_runners - 1 = 6"):
        make(num_runners=5, num_taggers=2, num_other_agents_observed=7)


@pytest.mark.parametrize("make", SINGLE_AGENT)
def test_a_keyword_gives_the_params_of_params_equals(make):
    assert make(g=9.81).params == make(params=PendulumParams(g=9.81)).params == PendulumParams(g=9.81)
    assert make(g=9.81).params.g == 9.81


@pytest.mark.parametrize("make", MULTI_AGENT)
def test_a_game_keyword_gives_the_params_of_params_equals(make):
    game = make(num_runners=20)
    assert game.params == make(params=TagContinuousParams(num_runners=20)).params
    assert game.params.num_runners == 20
    assert len(game.possible_agents) == TagContinuousParams().num_taggers + 20


def test_the_setting_reaches_the_dynamics():
    """Pendulum with g=0 and g=10 from the same state: only gravity tells their next states apart."""
    states = {}
    for g in (0.0, 10.0):
        env = make_env(g=g)
        env.reset(seed=0)
        env.set_state({"theta": 1.0, "theta_dot": 0.0})
        obs, *_ = env.step(np.zeros(1, dtype=np.float32))
        states[g] = obs
    # From rest with no torque, theta_dot after one step is 3 g / (2 l) sin(theta) dt.
    assert states[0.0][2] == 0.0
    assert states[10.0][2] == pytest.approx(3 * 10.0 / 2 * math.sin(1.0) * 0.05, rel=1e-5)


@pytest.mark.parametrize("make", SINGLE_AGENT + MULTI_AGENT)
def test_an_unknown_keyword_is_refused_naming_it_and_the_valid_ones(make):
    with pytest.raises(TypeError) as error:
        make(gravity_typo=1.0)
    message = str(error.value)
    assert "got an unexpected keyword argument 'gravity_typo'" in message, "not in Python's words"
    params_type = PendulumParams if make in SINGLE_AGENT else TagContinuousParams
    listed = re.search(r"its fields: ([\w, ]+)\)", message).group(1).split(", ")
    assert listed == [field.name for field in dataclasses.fields(params_type)]


@pytest.mark.parametrize("make", SINGLE_AGENT)
def test_a_bad_value_is_refused_as_params_equals_refuses_it(make):
    with pytest.raises(ValueError) as by_params:
        PendulumParams(g=float("nan"))
    with pytest.raises(ValueError) as by_keyword:
        make(g=float("nan"))
    assert str(by_params.value) in str(by_keyword.value)
    assert "PendulumParams.g" in str(by_keyword.value)


@pytest.mark.parametrize("make", MULTI_AGENT)
def test_a_bad_game_value_is_refused_as_params_equals_refuses_it(make):
    with pytest.raises(ValueError) as by_params:
        TagContinuousParams(num_runners=0)
    with pytest.raises(ValueError) as by_keyword:
        make(num_runners=0)
    assert str(by_keyword.value) == str(by_params.value)


@pytest.mark.parametrize("make", SINGLE_AGENT)
def test_keywords_apply_on_top_of_params(make):
    params = make(params=PendulumParams(m=2.0, g=5.0), g=9.81, l=0.5).params
    assert (params.m, params.g, params.l) == (2.0, 9.81, 0.5)
    assert params.dt == PendulumParams().dt


@pytest.mark.parametrize("make", MULTI_AGENT)
def test_game_keywords_apply_on_top_of_params(make):
    params = make(params=TagContinuousParams(num_taggers=3, num_runners=50), num_runners=8).params
    assert (params.num_taggers, params.num_runners) == (3, 8)


@pytest.mark.parametrize(
    ("env_id", "gymnasium_env", "name", "value"),
    [
        ("gpu_marl_envs/Pendulum-v1", PendulumEnv, "g", 9.81),
        ("gpu_marl_envs/CartPole-v1", CartPoleEnv, "sutton_barto_reward", True),
        ("gpu_marl_envs/MountainCar-v0", MountainCarEnv, "goal_velocity", 0.01),
        ("gpu_marl_envs/MountainCarContinuous-v0", Continuous_MountainCarEnv, "goal_velocity", 0.01),
    ],
)
def test_gymnasium_names_are_settings(env_id, gymnasium_env, name, value):
    """The keyword Gymnasium's own env takes is ours too, by gym.make and make_vec."""
    assert name in inspect.signature(gymnasium_env.__init__).parameters
    assert getattr(gym.make(env_id, **{name: value}).unwrapped.params, name) == value
    assert getattr(gym.make_vec(env_id, 2, device="cpu", **{name: value}).params, name) == value


@pytest.mark.parametrize("maker", ["make_sb3_env", "make_torchrl_env", "make_skrl_env"])
def test_the_adapters_makers_take_keywords(maker):
    """The adapters' makers pass keywords on to the batched env's maker: the setting arrives, an
    unknown name is refused as there."""
    from gpu_marl_envs import adapters

    make = getattr(adapters, maker)
    single = make("gpu_marl_envs/CartPole-v1", 2, device="cpu", sutton_barto_reward=True)
    game = make(TAG, 2, device="cpu", num_runners=5)
    # SB3 reads a wrapped env's attributes with get_attr; TorchRL's and skrl's wrappers keep the env as _env.
    params = (lambda e: e.get_attr("params")[0]) if maker == "make_sb3_env" else (lambda e: e._env.params)
    assert params(single).sutton_barto_reward is True
    assert params(game).num_runners == 5
    with pytest.raises(TypeError, match="'gravity_typo'"):
        make("gpu_marl_envs/CartPole-v1", 2, device="cpu", gravity_typo=1.0)


def test_a_flag_must_be_a_bool():
    # The kernels read it as an int32 truth value: a string "False" would switch it on.
    with pytest.raises(ValueError, match="CartPoleParams.sutton_barto_reward must be a bool, got 'False'"):
        gym.make("gpu_marl_envs/CartPole-v1", sutton_barto_reward="False")


def test_the_params_classes_are_exported():
    # The package's own envs and games (other tests register games of their own, e.g. glide/Glide-v0).
    by_id = {
        spec.id: spec.definition.params_type
        for spec in (*gpu_marl_envs.ENVS.values(), *gpu_marl_envs.GAMES.values())
        if spec.id.startswith(f"{registration.NAMESPACE}/")
    }
    exported = {name: getattr(gpu_marl_envs, name) for name in gpu_marl_envs.__all__ if name.endswith("Params")}
    assert sorted(exported.values(), key=lambda t: t.__name__) == sorted(by_id.values(), key=lambda t: t.__name__)
    assert all(
        by_id[f"gpu_marl_envs/{name.removesuffix('Params')}-v{v}"] is exported[name]
        for name, v in [("CartPoleParams", 1), ("PendulumParams", 1), ("TagContinuousParams", 0)]
    )
