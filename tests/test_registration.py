"""The public registration API (``register_env``, ``register_game``) as another package uses it, the
lookups by id, and the errors that name the fix. The example packages of the tutorial run their own
tests in tests/test_examples.py."""

import dataclasses
import sys
import textwrap
import warnings

import gymnasium
import pettingzoo
import pytest
import torch

import gpu_marl_envs
from gpu_marl_envs import registration
from gpu_marl_envs.backends import BackendUnavailableError
from gpu_marl_envs.envs.cartpole import CARTPOLE
from gpu_marl_envs.envs.tag_gridworld import TAG_GRIDWORLD
from gpu_marl_envs.registration import register_env, register_game

NAMESPACE = "registration_tests"


@pytest.fixture
def scratch():
    """Registrations under NAMESPACE are removed afterwards (here and from Gymnasium's and PettingZoo's registries)."""
    yield NAMESPACE
    for registry in (registration.ENVS, registration.GAMES, gymnasium.registry, pettingzoo.parallel_registry):
        for key in [key for key in registry if key.startswith(NAMESPACE)]:
            del registry[key]


def test_an_env_registered_from_elsewhere_works_everywhere(scratch):
    spec = register_env(CARTPOLE, namespace=scratch)  # a reference only: no kernels
    assert spec.id == f"{scratch}/CartPole-v1" and gpu_marl_envs.ENVS[spec.id] is spec
    envs = gymnasium.make_vec(spec.id, num_envs=3, device="cpu")
    assert envs.unwrapped.num_envs == 3 and envs.unwrapped.metadata["render_modes"] == ["rgb_array"]
    assert gymnasium.make(spec.id).reset(seed=0)[0].shape == (4,)
    with pytest.raises(
        BackendUnavailableError, match=r"without Numba kernels \(register_env\(\.\.\., numba=\.\.\.\)\)"
    ):
        gpu_marl_envs.GpuVectorEnv(spec.id, 2, device="cpu", backend="numba")
    # The same name in two namespaces: a bare name is ambiguous, whole ids are not.
    with pytest.raises(ValueError, match="several namespaces"):
        gpu_marl_envs.GpuVectorEnv("CartPole-v1", 2, device="cpu")
    assert gpu_marl_envs.GpuVectorEnv("gpu_marl_envs/CartPole-v1", 2, device="cpu").num_envs == 2


def test_a_game_registered_from_elsewhere_works_everywhere(scratch):
    spec = register_game(
        TAG_GRIDWORLD,
        namespace=scratch,
        cuda=gpu_marl_envs.GAMES["gpu_marl_envs/TagGridworld-v0"].kernels.cuda,
        numba="gpu_marl_envs.kernels.tag_gridworld_numba",
    )
    assert registration.is_game(spec.id) and not registration.is_game("gpu_marl_envs/CartPole-v1")
    env = gpu_marl_envs.make_parallel(spec.id, 2, device="cpu")
    assert env.metadata["name"] == "tag_gridworld_v0"
    game = pettingzoo.make("parallel", spec.id)
    assert isinstance(game, gpu_marl_envs.PettingZooParallelEnv) and game.possible_agents[-1] == "runner_0"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same registration again changes nothing, and warns nowhere
        register_game(TAG_GRIDWORLD, namespace=scratch, cuda=spec.kernels.cuda, numba=spec.kernels.numba)
    with pytest.warns(UserWarning, match="replacing the registered"):
        register_game(TAG_GRIDWORLD, namespace=scratch, cuda=spec.kernels.cuda)


def test_an_unknown_namespace_is_imported_as_a_package(scratch, tmp_path, monkeypatch):
    (tmp_path / f"{scratch}.py").write_text(
        textwrap.dedent(f"""
        from gpu_marl_envs.envs.cartpole import CARTPOLE
        from gpu_marl_envs import register_env
        register_env(CARTPOLE, namespace={scratch!r})
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, scratch, raising=False)
    env = gpu_marl_envs.GpuVectorEnv(f"{scratch}/CartPole-v1", 2, device="cpu")
    assert env.num_envs == 2
    with pytest.raises(ValueError, match="unknown env 'no_such_package/CartPole-v1'"):
        gpu_marl_envs.GpuVectorEnv("no_such_package/CartPole-v1", 2, device="cpu")


def test_a_game_without_numba_kernels_names_the_argument(scratch):
    spec = register_game(TAG_GRIDWORLD, namespace=scratch)
    with pytest.raises(BackendUnavailableError, match=r"register_game\(\.\.\., numba=\.\.\.\)"):
        gpu_marl_envs.make_parallel(spec.id, 1, device="cpu", backend="numba")


@dataclasses.dataclass(frozen=True)
class NoAgentsParams:
    episode_length: int = 5


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: register_env(TAG_GRIDWORLD, namespace=NAMESPACE), TypeError, "registers with register_game"),
        (lambda: register_game(CARTPOLE, namespace=NAMESPACE), TypeError, "registers with register_env"),
        (lambda: register_env(CARTPOLE, namespace="a/b"), ValueError, "your package's name"),
        (
            lambda: register_env(dataclasses.replace(CARTPOLE, id="CartPole"), namespace=NAMESPACE),
            ValueError,
            "a name and a version, as 'Cover-v0'",
        ),
        (lambda: register_env(CARTPOLE, namespace=NAMESPACE, cuda="nowhere/cartpole.cu"), ValueError, "not one"),
        (lambda: register_env(CARTPOLE, namespace=NAMESPACE, numba=torch), TypeError, "dotted name"),
        (
            lambda: register_env(dataclasses.replace(CARTPOLE, kernel_params=("gravity",)), namespace=NAMESPACE),
            ValueError,
            "must include 'max_episode_steps'",
        ),
        (
            lambda: register_game(dataclasses.replace(TAG_GRIDWORLD, params_type=NoAgentsParams), namespace=NAMESPACE),
            ValueError,
            "needs an int attribute num_agents",
        ),
        (
            lambda: register_game(
                dataclasses.replace(TAG_GRIDWORLD, agent_groups=lambda p: {"all": range(1, 5)}), namespace=NAMESPACE
            ),
            ValueError,
            "contiguous ranges covering 0 .. num_agents - 1",
        ),
    ],
)
def test_bad_registrations_name_the_fix(scratch, call, error, message):
    with pytest.raises(error, match=message):
        call()
    assert not any(key.startswith(NAMESPACE) for key in (*registration.ENVS, *registration.GAMES))


def test_ids_of_one_kind_are_refused_as_the_other():
    with pytest.raises(ValueError, match="is a multi-agent game: use make_parallel"):
        gpu_marl_envs.GpuVectorEnv("gpu_marl_envs/TagGridworld-v0", 1, device="cpu")
    with pytest.raises(ValueError, match="is a single-agent env: use gymnasium.make_vec"):
        gpu_marl_envs.make_parallel("CartPole-v1", 1, device="cpu")


def test_gymnasium_lists_every_env_and_game():
    listed = gymnasium.pprint_registry(disable_print=True)
    missing = [key for key in (*gpu_marl_envs.ENVS, *gpu_marl_envs.GAMES) if key not in listed]
    assert not missing, f"gymnasium.pprint_registry() leaves out {missing}"


@pytest.mark.parametrize(
    "make",
    [
        lambda id: gymnasium.make(id),
        lambda id: gymnasium.make_vec(id, num_envs=2),
        lambda id: gymnasium.make_vec(id, num_envs=2, vectorization_mode="sync"),
    ],
    ids=["make", "make_vec", "make_vec_sync"],
)
def test_gymnasium_makers_point_a_game_to_its_makers(make):
    game = "gpu_marl_envs/TagContinuous-v0"
    with pytest.raises(
        ValueError,
        match=rf"{game} is a multi-agent game, not a Gymnasium env: make it with "
        rf"gpu_marl_envs\.make_parallel\('{game}', num_envs\)",
    ):
        make(game)


CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]


@pytest.mark.parametrize("name", CLASSIC)
def test_specs_carry_gymnasiums_episode_length_and_threshold(name):
    """As the installed Gymnasium's own specs say, so that tools reading a spec (TimeAwareObservation,
    solved-checks) work; gymnasium.make's TimeLimit of it ends an episode where the env does."""
    ours, theirs = gymnasium.spec(f"gpu_marl_envs/{name}"), gymnasium.spec(name)
    assert (ours.max_episode_steps, ours.reward_threshold) == (theirs.max_episode_steps, theirs.reward_threshold)
    env = gymnasium.wrappers.TimeAwareObservation(gymnasium.make(f"gpu_marl_envs/{name}"))
    env.reset(seed=0)
    env.action_space.seed(0)
    env.unwrapped.set_state(env.unwrapped.get_state(), elapsed_steps=ours.max_episode_steps - 3)
    # The env's own count says 3 steps are left; the TimeLimit counts from its reset: the env ends it.
    ends = [env.step(env.action_space.sample())[2:4] for _ in range(3)]
    assert ends[-1] == (False, True) or ends[-1][0], f"{name}: no truncation at the env's limit: {ends}"


def test_make_vec_keeps_a_users_episode_length():
    """The spec's length is not passed to make_vec's env over params= (nor is a TimeLimit added there)."""
    from gpu_marl_envs.envs.pendulum import PendulumParams

    envs = gymnasium.make_vec(
        "gpu_marl_envs/Pendulum-v1", num_envs=2, device="cpu", params=PendulumParams(max_episode_steps=7)
    )
    envs.reset(seed=0)
    truncated = [envs.step(torch.zeros(2, 1))[3].tolist() for _ in range(7)]
    assert truncated == [[False, False]] * 6 + [[True, True]]
    long = gymnasium.make("gpu_marl_envs/Pendulum-v1")
    long.reset(seed=0)
    assert [long.step([0.0])[3] for _ in range(200)].index(True) == 199, "gymnasium.make's episode is not 200 steps"
