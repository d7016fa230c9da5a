"""The registry of envs and games, each with its kernel sources, and their registration with
Gymnasium and PettingZoo.

A package registers its envs and games as this one does its own (``gpu_marl_envs/envs/bundled.py``)::

    gpu_marl_envs.register_game(COVER, namespace="cover", cuda=Path(__file__).with_name("cover.cu"),
                                numba="cover.cover_numba")

Then, by the id ``"<namespace>/<definition.id>"`` (``"cover/Cover-v0"``):

- a single-agent env (:func:`register_env`) is in Gymnasium's registry: ``gymnasium.make`` gives a
  numpy :class:`~gpu_marl_envs.single_env.GpuEnv`, ``gymnasium.make_vec`` a torch
  :class:`~gpu_marl_envs.vector_env.GpuVectorEnv`;
- a multi-agent game (:func:`register_game`) is in PettingZoo's registry of parallel envs:
  ``pettingzoo.make("parallel", id)`` gives one game as a numpy
  :class:`~gpu_marl_envs.pettingzoo_env.PettingZooParallelEnv` (PettingZoo's ``max_cycles=`` sets the
  episode length); :func:`~gpu_marl_envs.parallel_env.make_parallel` gives a torch
  :class:`~gpu_marl_envs.parallel_env.GpuParallelEnv` of ``num_envs`` games. It is in Gymnasium's
  registry too, so that ``gymnasium.pprint_registry()`` lists every env and ``gymnasium.make`` or
  ``make_vec`` of a game's id says where to make it (rather than suggesting a similar name);
- the adapters (``gpu_marl_envs.adapters``) and ``gpu-marl-train`` take the id.

Neither Gymnasium nor PettingZoo imports packages by itself: the registering package is imported
first. The lookups here do it for an id whose namespace is not registered yet, importing the module
of that name (the namespace is the registering package's name by convention), so that whatever
takes an id through them needs no import: ``make_parallel``, ``GpuParallelEnv``, ``GpuVectorEnv``,
``PettingZooParallelEnv``, ``check_env``, the adapters and a training config's ``env =
"cover/Cover-v0"``. Gymnasium's and PettingZoo's ``make`` look the id up in their own registries
first, before any code of ours runs: ``gymnasium.make("puck:puck/Puck-v0")`` imports ``puck`` by
Gymnasium's own ``module:id`` form; PettingZoo 1.27 has no such form nor a hook, so
``pettingzoo.make("parallel", "cover/Cover-v0")`` finds a package's games once it is imported (or
once ``PettingZooParallelEnv("cover/Cover-v0")`` has imported it). A bare name (``"CartPole-v1"``)
finds the one registered id of that name.

The registry is a leaf of the package: it holds definitions and looks them up, and constructs no
env (``make_parallel`` lives with ``GpuParallelEnv``, ``GpuVectorEnv`` is Gymnasium's entry point by
name), so that the env classes import it and not the other way round (``tests/test_imports.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import warnings
from pathlib import Path
from typing import Any

import gymnasium
import pettingzoo
from gymnasium.envs.registration import parse_env_id

from gpu_marl_envs.envs.definition import EnvDefinition
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition
from gpu_marl_envs.envs.params import check_declaration

NAMESPACE = "gpu_marl_envs"


@dataclasses.dataclass(frozen=True)
class KernelSources:
    """Where an env's kernels are: ``None`` where it has none (that backend is then unavailable)."""

    cuda: Any
    """The CUDA C file (pycuda backend), a ``pathlib.Path`` or an ``importlib.resources`` file: the rules'
    struct, around which the framework includes its header (``multi_agent.cuh``, ``classic.cuh``) and
    declares the kernels (``pycuda_backend.rules_source``); it may ``#include`` the framework's other
    headers and files of its own folder."""
    numba: str | None
    """The Numba module's dotted name (numba backend), imported when that backend is first used."""


@dataclasses.dataclass(frozen=True)
class RegisteredEnv:
    """An entry of :data:`ENVS` or :data:`GAMES`."""

    id: str
    """``"<namespace>/<definition.id>"``."""
    definition: EnvDefinition | MultiAgentDefinition
    kernels: KernelSources

    @property
    def is_game(self) -> bool:
        return isinstance(self.definition, MultiAgentDefinition)

    @property
    def kernel_name(self) -> str:
        """The kernels' base name, from the id's name: ``cover`` for ``Cover-v0``, ``tag_continuous`` for
        ``TagContinuous-v0``; the kernels are ``<kernel_name>_step`` and ``<kernel_name>_reset``."""
        return snake_case(parse_env_id(self.id)[1])


ENVS: dict[str, RegisteredEnv] = {}
"""The single-agent envs, by id."""
GAMES: dict[str, RegisteredEnv] = {}
"""The multi-agent games, by id."""


def snake_case(name: str) -> str:
    """``"TagContinuous"`` -> ``"tag_continuous"`` (also ``"CartPole"`` -> ``"cart_pole"``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace("-", "_").lower()


def register_env(definition: EnvDefinition, *, namespace: str, cuda=None, numba: str | None = None) -> RegisteredEnv:
    """Register a single-agent env as ``"<namespace>/<definition.id>"`` here and with Gymnasium.

    Args:
        definition: the env (params, spaces, torch reference; ``docs/custom_env.md``).
        namespace: by convention the registering package's name.
        cuda: the path of its CUDA C file (a ``pathlib.Path`` or ``importlib.resources`` file), or
            ``None`` for no pycuda backend.
        numba: the dotted name of its Numba module, or ``None`` for no numba backend.

    Registering an id again with the same definition and sources changes nothing; with others it
    replaces the entry, with a warning (as Gymnasium does).
    """
    if not isinstance(definition, EnvDefinition):
        hint = (
            "; a MultiAgentDefinition registers with register_game"
            if isinstance(definition, MultiAgentDefinition)
            else ""
        )
        raise TypeError(f"register_env takes an EnvDefinition, got {type(definition).__name__}{hint}")
    _check_env(definition)
    entry = _entry(definition, namespace, cuda, numba, ENVS, GAMES)
    if entry.id not in gymnasium.registry:
        gymnasium.register(
            id=entry.id,
            entry_point="gpu_marl_envs.single_env:GpuEnv",
            vector_entry_point="gpu_marl_envs.vector_env:GpuVectorEnv",
            # The spec states the default episode length (tools read it: TimeAwareObservation), so
            # gymnasium.make wraps the env in a TimeLimit of it (or of make's max_episode_steps=),
            # which ends an episode where the env's own truncation at params.max_episode_steps does
            # by default: an episode ends at the smaller of the two. The env's max_episode_steps=None
            # in kwargs keeps make_vec from passing the spec's length on, over a user's params=.
            max_episode_steps=_defaults(definition).max_episode_steps,
            reward_threshold=definition.reward_threshold,
            kwargs={"env_id": entry.id, "max_episode_steps": None},
        )
    return entry


def register_game(
    definition: MultiAgentDefinition, *, namespace: str, cuda=None, numba: str | None = None
) -> RegisteredEnv:
    """Register a multi-agent game as ``"<namespace>/<definition.id>"`` here and with PettingZoo.
    The arguments are :func:`register_env`'s, with a :class:`MultiAgentDefinition`."""
    if not isinstance(definition, MultiAgentDefinition):
        hint = "; an EnvDefinition registers with register_env" if isinstance(definition, EnvDefinition) else ""
        raise TypeError(f"register_game takes a MultiAgentDefinition, got {type(definition).__name__}{hint}")
    _check_game(definition)
    entry = _entry(definition, namespace, cuda, numba, GAMES, ENVS)
    if entry.id not in pettingzoo.parallel_registry:  # registering twice would warn
        pettingzoo.register(
            "parallel",
            entry.id,
            entry_point="gpu_marl_envs.pettingzoo_env:PettingZooParallelEnv",
            kwargs={"env_id": entry.id},
        )
    # In Gymnasium's registry too, with entry points that say where to make it: as Gymnasium itself
    # registers ids it cannot make (Reacher-v2 raises, naming mujoco-py).
    if entry.id not in gymnasium.registry:
        gymnasium.register(
            id=entry.id,
            entry_point="gpu_marl_envs.registration:game_in_gymnasium",
            vector_entry_point="gpu_marl_envs.registration:game_in_gymnasium",
            max_episode_steps=None,
            kwargs={"env_id": entry.id},
        )
    return entry


def game_in_gymnasium(env_id: str, **_) -> None:
    """The entry points of a game's id in Gymnasium's registry: a game is no Gymnasium env, and
    ``gymnasium.make``/``make_vec`` of its id say so and where to make it (any arguments ignored)."""
    raise ValueError(
        f"{env_id} is a multi-agent game, not a Gymnasium env: make it with "
        f"gpu_marl_envs.make_parallel({env_id!r}, num_envs) (batched, torch) or "
        f"pettingzoo.make('parallel', {env_id!r}) (one game, numpy)"
    )


def _defaults(definition):
    check_declaration(definition.params_type)
    try:
        return definition.params_type()
    except Exception as error:
        raise ValueError(f"{definition.id}: params_type() must build the default params, got {error!r}") from error


def _check_env(definition: EnvDefinition) -> None:
    """What the runtime relies on, checked where it is cheap (``check_env`` tests the rest)."""
    params = _defaults(definition)
    if "max_episode_steps" not in definition.kernel_params:
        raise ValueError(
            f"{definition.id}: kernel_params must include 'max_episode_steps' (an int field of "
            f"{definition.params_type.__name__}): the kernels truncate episodes by it"
        )
    names = (*definition.state_fields, *definition.kernel_params)
    if not definition.state_fields or not all(name.isidentifier() for name in names):
        raise ValueError(
            f"{definition.id}: state_fields (not empty) and kernel_params must be identifiers: they "
            f"name kernel variables; got {names}"
        )
    definition.kernel_values(params)  # every kernel param is a number of its declared type


def _check_game(definition: MultiAgentDefinition) -> None:
    """What the runtime relies on, checked where it is cheap (``check_env`` tests the rest)."""
    from gpu_marl_envs.multi_agent_buffers import MultiAgentBuffers

    params = _defaults(definition)
    for attribute in ("num_agents", "episode_length"):
        value = getattr(params, attribute, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"{definition.id}: {definition.params_type.__name__} needs an int attribute "
                f"{attribute} >= 1 (a field or a property), got {value!r}"
            )
    groups = definition.agent_groups(params)
    ids = [i for group in groups.values() for i in group]
    if ids != list(range(params.num_agents)) or any(group.step != 1 for group in groups.values()):
        raise ValueError(
            f"{definition.id}: agent_groups must give contiguous ranges covering 0 .. num_agents - 1 "
            f"= {params.num_agents - 1} in order, got {groups}"
        )
    definition.continuous_actions(params)  # refuses action spaces the framework cannot run
    if (definition.global_state is None) != (definition.global_state_space is None):
        raise ValueError(f"{definition.id}: global_state and global_state_space are given together or not at all")
    fields = definition.state_fields
    runtime = {field.name for field in dataclasses.fields(MultiAgentBuffers)} | {
        "num_envs",
        "actions",
        "autoreset_mode",
    }
    if "t" not in fields or not all(f.isidentifier() and f not in runtime for f in fields):
        raise ValueError(
            f"{definition.id}: {definition.state_type.__name__} needs the int32 field t, and fields "
            f"named as identifiers, none as the runtime's buffers ({sorted(runtime)}); got {fields}"
        )


def _entry(definition, namespace, cuda, numba, registry: dict, other: dict) -> RegisteredEnv:
    if not isinstance(namespace, str) or not re.fullmatch(r"[\w.-]+", namespace):
        raise ValueError(
            f"namespace must be a name of letters, digits, '_', '.' or '-' (your package's name), got {namespace!r}"
        )
    env_id = f"{namespace}/{definition.id}"
    try:
        parsed = parse_env_id(env_id)
    except gymnasium.error.Error:
        parsed = None
    if parsed is None or parsed[0] != namespace or parsed[2] is None:
        raise ValueError(
            f"{type(definition).__name__}.id must be a name and a version, as 'Cover-v0', got {definition.id!r}"
        )
    if isinstance(cuda, (str, os.PathLike)):
        cuda = Path(cuda)
    if cuda is not None:
        if not all(hasattr(cuda, name) for name in ("is_file", "read_text", "name")):
            raise TypeError(
                f"cuda must be the path of a .cu file (a pathlib.Path or an importlib.resources file), "
                f"got {type(cuda).__name__}"
            )
        if not cuda.is_file() or not cuda.name.endswith(".cu"):
            raise ValueError(f"cuda must be the path of a .cu file; {cuda} is not one")
    if numba is not None and not isinstance(numba, str):
        raise TypeError(
            f"numba must be the dotted name of the Numba module (e.g. 'cover.cover_numba'), imported "
            f"only when the numba backend is used; got {type(numba).__name__}"
        )
    if env_id in other:
        raise ValueError(f"{env_id} is already registered as a {'game' if other is GAMES else 'single-agent env'}")
    entry = RegisteredEnv(env_id, definition, KernelSources(cuda, numba))
    if registry.get(env_id, entry) != entry:
        warnings.warn(f"replacing the registered {env_id}", stacklevel=3)
    registry[env_id] = entry
    return entry


def env_spec(env_id: str) -> RegisteredEnv:
    """The registered single-agent env ``env_id`` (see the module's docstring for the id forms)."""
    return _lookup(env_id, ENVS, "env", GAMES, "a multi-agent game: use make_parallel or GpuParallelEnv")


def game_spec(env_id: str) -> RegisteredEnv:
    """The registered multi-agent game ``env_id`` (see the module's docstring for the id forms)."""
    return _lookup(env_id, GAMES, "multi-agent env", ENVS, "a single-agent env: use gymnasium.make_vec or GpuVectorEnv")


def is_game(env_id) -> bool:
    """Whether ``env_id`` names a registered multi-agent game (rather than a single-agent env)."""
    if not isinstance(env_id, str):
        return False
    _import_namespace(env_id)
    return _find(env_id, GAMES) is not None


def _import_namespace(env_id: str) -> None:
    namespace = env_id.rpartition("/")[0]
    if namespace and not any(key.startswith(namespace + "/") for key in (*ENVS, *GAMES)):
        try:
            importlib.import_module(namespace)
        except ModuleNotFoundError as error:
            if error.name != namespace:
                raise  # the package exists and failed to import: its error is the one to read


def _find(env_id: str, registry: dict) -> str | None:
    if env_id in registry:
        return env_id
    if "/" not in env_id:
        named = [key for key in registry if key.rpartition("/")[2] == env_id]
        if len(named) > 1:
            raise ValueError(f"{env_id!r} is registered in several namespaces: {named}; give the whole id")
        return named[0] if named else None
    return None


def _lookup(env_id, registry: dict, kind: str, other: dict, other_hint: str) -> RegisteredEnv:
    if not isinstance(env_id, str):
        raise TypeError(f"the id of a {kind} must be a str, got {type(env_id).__name__}")
    _import_namespace(env_id)
    key = _find(env_id, registry)
    if key is None:
        hint = f"; {env_id} is {other_hint}" if _find(env_id, other) is not None else ""
        raise ValueError(f"unknown {kind} {env_id!r}{hint}; available: {', '.join(sorted(registry))}")
    return registry[key]


def parallel_env_ids() -> list[str]:
    """The ids of the registered multi-agent games, in registration order."""
    return list(GAMES)
