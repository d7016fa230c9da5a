"""Numba CUDA backend for multi-agent games: a game's Numba module's device functions
(``game_functions(c)``) in the framework's kernels, built per params, a block per env or several
envs' teams to a block (``games_per_block``), launched on torch's current stream.

On a CPU device it runs only under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
"""

from __future__ import annotations

import functools
import importlib
import math

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.backends.cuda_driver import PROGRAMMATIC_ARCH
from gpu_marl_envs.backends.numba_backend import NumbaLauncher, simulator_enabled
from gpu_marl_envs.multi_agent_buffers import (
    GROUP_ARGUMENTS,
    MAX_SHARED_BYTES,
    RESET_ARGUMENTS,
    STEP_ARGUMENTS,
    MultiAgentBuffers,
    can_store_by_warp,
    check_shared_memory,
    stages_rows,
    stores_by_warp,
)
from gpu_marl_envs.registration import RegisteredEnv


def _packing(spec: RegisteredEnv, module, params) -> tuple[int, int]:
    """``(game_threads, games_per_block)`` of the Numba kernels: the definition's packing for a game
    whose Numba module is written for it (``PACKS_GAMES``; multi_agent_numba.py) on a GPU, else a
    block per env of ``game_threads`` threads. The simulator has no warp barrier: a block per env there."""
    definition = spec.definition
    games = definition.games_per_block(params)
    if games > 1 and getattr(module, "PACKS_GAMES", False) and not simulator_enabled():
        return definition.block_threads(params), games
    threads = definition.block_threads(params)
    if games > 1:
        # A game packed for CUDA C whose Numba module is not (no PACKS_GAMES) runs a block per
        # env: its team (a slice of a warp) gets the whole warp. On an H200 SimpleSpread's 4-lane
        # blocks stepped 65,536 games in 327 µs, its 32-lane blocks in 202 µs: more lanes per
        # block shorten each game's loops, and the blocks an SM holds at once are the same 32.
        threads = 32
    if simulator_enabled():
        # The simulator runs a Python thread per CUDA thread. Half as many as the game has agents
        # make every thread handle two agents or more: the path a GPU takes only for games
        # larger than their block, which the tests thus cover on the CPU.
        threads = max(1, min(threads, (params.num_agents + 1) // 2))
    return threads, 1


def _action_layout(definition, params):
    """The game's :class:`~gpu_marl_envs.kernels.multi_agent_numba.ActionLayout`."""
    from gpu_marl_envs.kernels.multi_agent_numba import ActionLayout

    shape = tuple(definition.action_shape(params))  # () or (d,): register_game refuses the rest
    spaces = definition.action_spaces(params)
    groups = definition.agent_groups(params).items()
    return ActionLayout(shape, tuple((ids.start, len(ids), math.prod(spaces[name].shape)) for name, ids in groups))


def _game_module(spec: RegisteredEnv):
    module = importlib.import_module(spec.kernels.numba)
    if not hasattr(module, "game_functions"):
        raise AttributeError(
            f"{module.__name__} (the Numba module of {spec.id}) defines no game_functions(c): "
            "it returns the game's GameFunctions (docs/custom_env.md)"
        )
    return module


def _staged(spec: RegisteredEnv, params) -> bool:
    """Whether the Numba step of a game stages its rows (``stages_rows``, for its packing)."""
    game_threads, games_per_block = _packing(spec, _game_module(spec), params)
    return stages_rows(spec.definition, params, games_per_block, game_threads)


def _can_store_by_warp(spec: RegisteredEnv, params) -> bool:
    """Whether the Numba step of a game has a build that stores by warp (``can_store_by_warp``)."""
    game_threads, games_per_block = _packing(spec, _game_module(spec), params)
    return can_store_by_warp(spec.definition, params, games_per_block, game_threads)


@functools.cache
def _kernels(spec: RegisteredEnv, params, warp_stores: bool, programmatic: bool = False):
    """The (step, reset) kernels of a game for these params and way of storing
    (``multi_agent_buffers.stores_by_warp``) and their packing (:func:`_packing`), built once per
    process; ``programmatic``: the step launched by programmatic dependent launch."""
    from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions, make_multi_agent_kernels, typed_constants

    module = _game_module(spec)
    game_threads, games_per_block = _packing(spec, module, params)
    constants = spec.definition.kernel_constants(params)
    framework = {
        "GME_GAME_THREADS": game_threads,
        "GME_GAMES_PER_BLOCK": games_per_block,
        "GME_WARP_STORES": warp_stores,
    }
    reserved = [name for name in framework if name in constants]
    if reserved:
        raise ValueError(f"{spec.id}'s kernel constants name {', '.join(reserved)}, which the framework sets")
    constants = {**constants, **framework}
    functions = module.game_functions(typed_constants(constants))
    if not isinstance(functions, GameFunctions):
        raise TypeError(f"{module.__name__}.game_functions must return a GameFunctions, got {type(functions).__name__}")
    layout = _action_layout(spec.definition, params)
    kernels = make_multi_agent_kernels(
        functions,
        params.num_agents,
        spec.kernel_name,
        layout,
        game_threads,
        games_per_block,
        spec.definition.obs_size(params) if _staged(spec, params) else 0,
        warp_stores,
        programmatic,
    )
    return (*kernels, game_threads, games_per_block)


class MultiAgentNumbaBackend:
    name = "numba"
    # A CUDA graph by default, unlike NumbaBackend: on an H200 at 2,000 MPE games a replay took 4-7
    # µs less a step than the prepared launch (SimpleTag 23.5-24.0 µs against 28.2-29.4; not traced).
    graph_by_default = True

    def __init__(self, spec: RegisteredEnv, params, buffers: MultiAgentBuffers, autoreset_mode: AutoresetMode):
        definition = spec.definition
        device = buffers.observations.device
        num_envs = buffers.observations.shape[0]
        lanes, games = _packing(spec, _game_module(spec), params)
        warp_stores = stores_by_warp(definition, params, games, lanes, num_envs, device)
        # Numba builds for the device's own architecture.
        major, minor = torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0)
        programmatic = 10 * major + minor >= PROGRAMMATIC_ARCH
        step_kernel, reset_kernel, game_threads, games_per_block = _kernels(spec, params, warp_stores, programmatic)
        threads = game_threads * games_per_block
        shared_bytes = definition.dynamic_shared_bytes(params)
        blocks = (num_envs + games_per_block - 1) // games_per_block
        launcher = NumbaLauncher(device, blocks=blocks, threads=threads, shared_bytes=shared_bytes)
        # The parallel env gathers every group's actions here: the CUDA graph's input, which a
        # prepared launch reads in place.
        self.actions_buffer = torch.zeros(
            (num_envs, params.num_agents, *definition.action_shape(params)),
            dtype=definition.action_dtype(params),
            device=device,
        )
        views = {name: launcher.view(tensor) for name, tensor in buffers.tensors().items()}
        views["state"] = tuple(launcher.view(tensor) for tensor in buffers.state_arrays())
        # Games without action masks or episode totals get a one-element array they never read (kept
        # here: the views do not hold their tensors).
        self._absent = {
            name: torch.zeros((1, 1), dtype=dtype, device=device)
            for name, dtype in (("action_masks", torch.bool), ("episode_totals", torch.float32))
            if name not in views
        }
        views.update({name: launcher.view(tensor) for name, tensor in self._absent.items()})
        views["actions"] = launcher.view(self.actions_buffer)
        # What step_groups' launch reads in place of each group's actions: on a GPU their data
        # pointers are replaced by the group tensors' at each launch; in the simulator these buffers
        # receive copies. Their (num_envs, agents * width) shapes are the kernel's.
        self._group_buffers = [
            torch.zeros((num_envs, agents * width), dtype=self.actions_buffer.dtype, device=device)
            for _, agents, width in _action_layout(definition, params).groups
        ]
        views["group_actions"] = tuple(launcher.view(buffer) for buffer in self._group_buffers)
        views["num_envs"] = np.int32(num_envs)
        views["autoreset_mode"] = np.int32(AUTORESET_CODES[autoreset_mode])
        views["from_groups"] = np.int32(0)
        step_args = tuple(views[name] for name in STEP_ARGUMENTS + GROUP_ARGUMENTS)
        groups_args = (*step_args[:-1], np.int32(1))
        reset_args = tuple(views[name] for name in RESET_ARGUMENTS)
        if device.type == "cuda":
            from gpu_marl_envs.kernels.numba_api import allow_dynamic_shared_memory, static_shared_bytes

            kernels = ((step_kernel, step_args), (reset_kernel, reset_args))
            static = max(static_shared_bytes(kernel, args) for kernel, args in kernels)
            check_shared_memory(definition, params, device, self.name, static)
            if shared_bytes + static > MAX_SHARED_BYTES:
                # Beyond 48 KiB a kernel must opt in (up to shared_memory_limit, checked above).
                for kernel, args in kernels:
                    allow_dynamic_shared_memory(kernel, args, shared_bytes)
        # step(actions) and reset() are the prepared launches themselves: at small batches a step is
        # host time, and a method around each would add a Python frame to every step.
        self.step = launcher.prepare(step_kernel, step_args, (STEP_ARGUMENTS.index("actions"),), programmatic)
        # The same kernel, copying each env's actions from the groups' own tensors first.
        self._step_groups = launcher.prepare(step_kernel, groups_args, (len(STEP_ARGUMENTS),), programmatic)
        self.reset = launcher.prepare(reset_kernel, reset_args)

    @staticmethod
    def reads_in_place(actions: torch.Tensor, row_strides: tuple[int, ...]) -> bool:
        """Whether :meth:`step_groups` takes a group's ``actions`` as they lie: contiguous ones (a
        launch's arrays keep the shapes and strides they were prepared with)."""
        return actions.is_contiguous()

    def step_groups(self, group_actions: list[torch.Tensor]) -> None:
        """One step from each group's own contiguous ``(num_envs, agents, ...)`` actions, read where
        they lie, in one launch (the kernel reads a game of one group from its tensor, and copies
        each env's actions of several groups into the actions buffer first)."""
        self._step_groups(*group_actions)
