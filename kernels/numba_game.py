"""A game's Numba module in one decorator, and what its device functions use in one import.

    from gpu_marl_envs.kernels.numba_game import cuda, int32, numba_game, uniform

    @numba_game
    def game_functions(c):
        N = c.NUM_AGENTS

        def shared():
            return (cuda.shared.array(1, int32),)

        def reset_env(state, sh, e, seed, episode): ...
        def step_env(state, sh, e, actions, rewards): ...
        def observe_env(state, sh, e, obs, masks): ...

        return locals()

``c`` is the game's ``kernel_constants(params)``, typed (``multi_agent_numba.typed_constants``); the
factory runs once per params and returns its ``locals()``. :func:`numba_game` compiles every function
defined inside it as a device function (helpers too: ``cell`` above ``reset_env``, called by name), and
hands the framework those named as :class:`~gpu_marl_envs.kernels.multi_agent_numba.GameFunctions`'
fields (``reset_env``, ``step_env``, ``observe_env``; optionally ``shared``, ``in_game``,
``totals_env``, ``store_warp`` (with :func:`team_store`'s functions), and ``launch_bounds``, a
tuple). A function already compiled inside it (say with ``numba_api.inline_device``) is taken as it
is.
"""

import functools
import inspect
import types

from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions, nan_to_zero, team_functions, team_store
from gpu_marl_envs.kernels.numba_api import I64, U, add_rn, cuda, divide, mul_rn
from gpu_marl_envs.kernels.rng_numba import uniform
from numba import float32, int32

__all__ = [
    "I64",
    "U",
    "add_rn",
    "cuda",
    "divide",
    "float32",
    "int32",
    "mul_rn",
    "nan_to_zero",
    "numba_game",
    "team_functions",
    "team_store",
    "uniform",
]

REQUIRED = ("reset_env", "step_env", "observe_env")


def numba_game(factory):
    """``factory(c) -> locals()`` as the ``game_functions(c) -> GameFunctions`` the numba backend calls
    (the module docstring says what it compiles and takes)."""

    @functools.wraps(factory)
    def game_functions(c) -> GameFunctions:
        names = factory(c)
        if not isinstance(names, dict):
            raise TypeError(f"{factory.__qualname__} must end with `return locals()`, got {type(names).__name__}")
        missing = [name for name in REQUIRED if name not in names]
        if missing:
            raise ValueError(
                f"{factory.__qualname__} defines no {', '.join(missing)}: a game defines {', '.join(REQUIRED)}"
            )
        inner = f"{factory.__qualname__}.<locals>."
        python = {
            name: value
            for name, value in names.items()
            if isinstance(value, types.FunctionType) and value.__qualname__.startswith(inner)
        }
        _check_shared_arrays(python.values())
        compiled = {name: cuda.jit(device=True)(function) for name, function in python.items()}
        # A function calls another of the factory through the factory's variable (a closure cell):
        # that variable must hold the compiled one, which Numba reads when it compiles the caller.
        by_id = {id(function): compiled[name] for name, function in python.items()}
        for function in python.values():
            for cell in function.__closure__ or ():
                try:
                    contents = cell.cell_contents
                except ValueError:  # a variable the factory had not bound yet
                    continue
                if id(contents) in by_id:
                    cell.cell_contents = by_id[id(contents)]
        devices = {name: compiled.get(name, names[name]) for name in GameFunctions._fields if name in names}
        return GameFunctions(**devices)

    return game_functions


def _check_shared_arrays(functions) -> None:
    """Numba's CUDA simulator tells shared arrays apart by the source line that makes them: two
    ``cuda.shared.array`` on one line would be one array there (and two on a GPU)."""
    for function in functions:
        try:
            lines, first = inspect.getsourcelines(function)
        except OSError:  # no source to read (made by exec): nothing to check
            continue
        for offset, line in enumerate(lines):
            if line.count("shared.array(") > 1:
                raise ValueError(
                    f"{inspect.getsourcefile(function)}:{first + offset}: two cuda.shared.array on one line; "
                    "Numba's CUDA simulator tells shared arrays apart by source line and would give them one "
                    "array: make each on a line of its own"
                )
