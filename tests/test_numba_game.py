"""``numba_game``: a game's Numba module from one decorator (``kernels/numba_game.py``). The games that
use it (Cover-v0, Glide-v0, Rally-v0) are checked against their references by their own tests; these
cover what the simulator would not show."""

import inspect
import types

import pytest
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions, typed_constants
from gpu_marl_envs.kernels.numba_game import cuda, int32, numba_game

CONSTANTS = typed_constants({"K": 2.0})


def python_function(device_function):
    """The Python function a compiled device function runs (Numba's ``py_func``, the simulator's ``fn``)."""
    return getattr(device_function, "py_func", None) or device_function.fn


@numba_game
def with_a_helper(c):
    def helper(x):
        return x * c.K

    def reset_env(state, sh, e, seed, episode):
        state[0][e] = helper(state[0][e])

    def step_env(state, sh, e, actions, rewards):
        return False, True

    def observe_env(state, sh, e, obs, masks):
        obs[e, 0] = helper(state[0][e])

    launch_bounds = (64, 2)
    speculative_step = True
    return locals()


def test_the_factorys_functions_are_device_functions_calling_each_other_compiled():
    functions = with_a_helper(CONSTANTS)
    assert isinstance(functions, GameFunctions) and functions.launch_bounds == (64, 2)
    assert functions.speculative_step is True  # a flag, taken as it is
    # On a GPU Numba compiles reset_env with what its variable `helper` holds then: the compiled
    # helper (the simulator would run a plain Python function as well, and hide the difference).
    for name in ("reset_env", "observe_env"):
        helper = inspect.getclosurevars(python_function(getattr(functions, name))).nonlocals["helper"]
        assert not isinstance(helper, types.FunctionType), name


def test_two_shared_arrays_on_one_line_are_refused():
    @numba_game
    def aliased(c):
        def shared():
            return cuda.shared.array(1, int32), cuda.shared.array(1, int32)

        def reset_env(state, sh, e, seed, episode):
            pass

        def step_env(state, sh, e, actions, rewards):
            return False, True

        def observe_env(state, sh, e, obs, masks):
            pass

        return locals()

    with pytest.raises(ValueError, match="two cuda.shared.array on one line"):
        aliased(CONSTANTS)


def test_a_factory_without_the_games_functions_or_locals_is_refused():
    @numba_game
    def no_step(c):
        def reset_env(state, sh, e, seed, episode):
            pass

        def observe_env(state, sh, e, obs, masks):
            pass

        return locals()

    @numba_game
    def no_locals(c):
        pass

    with pytest.raises(ValueError, match="defines no step_env"):
        no_step(CONSTANTS)
    with pytest.raises(TypeError, match="must end with `return locals\\(\\)`"):
        no_locals(CONSTANTS)
