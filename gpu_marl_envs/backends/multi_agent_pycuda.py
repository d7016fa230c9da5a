"""CUDA C backend for multi-agent games: a game's .cu file compiled per params (the params are
compile-time constants) and loaded on the primary context, launched on torch's current stream
(``cuda_driver``) with a team of threads per env, one block per env or several (``games_per_block``)."""

from __future__ import annotations

import functools
import math
import re
import struct

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.backends import current_stream_getter
from gpu_marl_envs.backends.cuda_driver import PROGRAMMATIC_ARCH, PreparedLaunch
from gpu_marl_envs.backends.pycuda_backend import (
    _pack,
    c_type,
    code_of,
    compile_module,
    runtime_definitions,
    with_header,
)
from gpu_marl_envs.multi_agent_buffers import (
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


def _literal(value) -> str:
    """A C literal that is exactly ``value``, floats rounded once to float32 (hexadecimal literals)."""
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"({float(np.float32(value)).hex()}f)"
    if isinstance(value, (tuple, list)):
        return "{" + ", ".join(_literal(v) for v in value) + "}"
    raise TypeError(f"a kernel constant is a bool, an int, a float or a tuple of numbers; got {value!r}")


_BLOCK_WIDE = re.compile(r"\b(threadIdx|blockDim|__syncthreads)\b")
"""What a game's .cu may not use when several envs share a block (their team's lanes instead)."""


def check_games_per_block(definition, params, cuda_file) -> None:
    """Refuses, in one line, a packed game (``games_per_block > 1``) that cannot run packed."""
    games, threads = definition.games_per_block(params), definition.block_threads(params)
    if games == 1:
        return
    if not (isinstance(games, int) and games > 1 and threads <= 32 and threads & (threads - 1) == 0):
        raise ValueError(
            f"{definition.id}: games_per_block {games!r} needs an int >= 1 and, above 1, block_threads a power "
            f"of two up to 32 (a slice of one warp per env); got block_threads {threads}"
        )
    if definition.dynamic_shared_bytes(params):
        raise ValueError(f"{definition.id}: games_per_block {games} with dynamic shared memory (a block per env only)")
    code = code_of(cuda_file.read_text())
    used = _BLOCK_WIDE.search(code)
    if used:
        raise ValueError(
            f"{definition.id}: games_per_block {games}, but {cuda_file.name} uses {used.group(1)}, which spans "
            "the block's envs: write gme_lane(), gme_lanes() and gme_sync() (kernels/multi_agent.cuh)"
        )


def kernel_source(spec: RegisteredEnv, params, warp_stores: bool = False) -> str:
    """A game's .cu source preceded by what Python knows: ``#define`` lines of the runtime's constants
    and the game's (not -D options: nvcc splits those at commas, and the tables are brace lists), and
    the state struct ``GmeState`` (a pointer per state field, typed as the reference's tensors) with
    the kernels' state parameters. ``warp_stores``: the staged step stores by warp
    (``multi_agent_buffers.stores_by_warp``)."""
    definition = spec.definition
    check_games_per_block(definition, params, spec.kernels.cuda)
    constants = runtime_definitions()
    groups = list(definition.agent_groups(params).values())  # consecutive agents, in order
    games, lanes = definition.games_per_block(params), definition.block_threads(params)
    if warp_stores and not can_store_by_warp(definition, params, games, lanes):
        raise ValueError(f"{definition.id}'s step cannot store by warp for these params (can_store_by_warp)")
    constants.update(
        GME_KERNEL_NAME=spec.kernel_name,
        GME_GAME_THREADS=str(lanes),
        GME_GAMES_PER_BLOCK=str(games),
        GME_STAGED=_literal(stages_rows(definition, params, games, lanes)),
        GME_WARP_STORES=_literal(warp_stores),
        GME_BLOCK_THREADS=str(definition.block_threads(params) * definition.games_per_block(params)),
        GME_NUM_GROUPS=str(len(groups)),
        GME_NUM_AGENTS=str(params.num_agents),
        GME_ACTION_SIZE=str(math.prod(definition.action_shape(params))),
        GME_ACTION_TYPE="float" if definition.continuous_actions(params) else "long long",
        GME_GROUP_BEGINS=_literal([ids.start for ids in groups]),
        GME_GROUP_SIZES=_literal([len(ids) for ids in groups]),
        GME_OBS_SIZE=str(definition.obs_size(params)),
        GME_MASK_SIZE=str(definition.mask_size(params)),
        GME_NUM_METRICS=str(len(definition.episode_metrics(params))),
    )
    for name, value in definition.kernel_constants(params).items():
        constants[f"{definition.constant_prefix}_{name}"] = _literal(value)
    pointers = [
        f"{c_type(dtype, f'{definition.id} state field {name!r}')}* {name}"
        for name, dtype in definition.state_dtypes(params).items()
    ]
    constants.update(
        GME_STATE_PARAMETERS=", ".join(pointers), GME_STATE_ARGUMENTS="{" + ", ".join(definition.state_fields) + "}"
    )
    return with_header(
        spec.kernels.cuda, constants, f"struct GmeState {{ {'; '.join(pointers)}; }};\n", multi_agent=True
    )


@functools.cache
def _module(spec: RegisteredEnv, params, device_index: int, warp_stores: bool):
    """One compiled module per game, params, device and way of storing (the binary is also cached on
    disk: backends/nvrtc.py)."""
    return compile_module(kernel_source(spec, params, warp_stores), spec.kernels.cuda, device_index)


class MultiAgentPycudaBackend:
    name = "pycuda"
    graph_by_default = False  # see PycudaBackend

    def __init__(self, spec: RegisteredEnv, params, buffers: MultiAgentBuffers, autoreset_mode: AutoresetMode):
        definition = spec.definition
        device = buffers.observations.device
        num_envs = buffers.observations.shape[0]
        games = definition.games_per_block(params)
        warp_stores = stores_by_warp(definition, params, games, definition.block_threads(params), num_envs, device)
        module = _module(spec, params, device.index, warp_stores)
        step_kernel = module.get_function(f"{spec.kernel_name}_step")
        reset_kernel = module.get_function(f"{spec.kernel_name}_reset")
        shared_bytes = definition.dynamic_shared_bytes(params)
        static = max(kernel.get_attribute("SHARED_SIZE_BYTES") for kernel in (step_kernel, reset_kernel))
        check_shared_memory(definition, params, device, self.name, static)
        if shared_bytes + static > MAX_SHARED_BYTES:
            # Beyond 48 KiB a kernel must opt in (up to shared_memory_limit, checked above).
            for kernel in (step_kernel, reset_kernel):
                kernel.set_attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES", shared_bytes)

        values = buffers.tensors()
        values["state"] = buffers.state_arrays()  # a struct of pointers: the same bytes as one pointer each
        values["num_envs"] = num_envs
        values["autoreset_mode"] = AUTORESET_CODES[autoreset_mode]
        groups = list(definition.agent_groups(params).values())
        # The kernel's GmeActions (kernels/multi_agent.cuh): a pointer, an env stride and an agent
        # stride per group; struct's native mode aligns them as C does.
        self._actions_layout = struct.Struct(f"{len(groups)}P{2 * len(groups)}q")
        self._step_buffer, self._actions_offset = _pack(STEP_ARGUMENTS, values, self._actions_layout)
        reset_buffer, _ = _pack(RESET_ARGUMENTS, values)
        blocks, threads = -(-num_envs // games), definition.block_threads(params) * games
        stream = current_stream_getter(device.index)
        # The step waits for the grid before it where it is built for such an architecture (multi_agent.cuh).
        programmatic = step_kernel.get_attribute("PTX_VERSION") >= PROGRAMMATIC_ARCH
        self._step = PreparedLaunch(
            step_kernel, blocks, threads, self._step_buffer, shared_bytes, stream, programmatic=programmatic
        )
        self.reset = PreparedLaunch(reset_kernel, blocks, threads, reset_buffer, shared_bytes, stream)
        action_size = math.prod(definition.action_shape(params))
        item_bytes = definition.action_dtype(params).itemsize
        row = params.num_agents * action_size
        # step's one (num_envs, num_agents, action_size) buffer as groups: byte offsets of their columns.
        self._column_offsets = [ids.start * action_size * item_bytes for ids in groups]
        self._buffer_strides = [row] * len(groups) + [action_size] * len(groups)

    def step(self, actions: torch.Tensor) -> None:
        """One step from the contiguous (num_envs, num_agents, action_size) ``actions`` (int64, or
        float32 for a ``Box`` game)."""
        base = actions.data_ptr()
        self._actions_layout.pack_into(
            self._step_buffer,
            self._actions_offset,
            *[base + offset for offset in self._column_offsets],
            *self._buffer_strides,
        )
        self._step()

    @staticmethod
    def reads_in_place(actions: torch.Tensor, row_strides: tuple[int, ...]) -> bool:
        """Whether :meth:`step_groups` takes a group's ``actions`` as they lie: any env stride, each
        env's row contiguous (``row_strides``: a contiguous row's strides)."""
        return actions.is_contiguous() or actions.stride()[1:] == row_strides

    def step_groups(self, group_actions: list[torch.Tensor]) -> None:
        """One step from each group's ``(num_envs, size, ...)`` actions, read where they lie
        (:meth:`reads_in_place`), a narrower group's agents at its own width."""
        self._actions_layout.pack_into(
            self._step_buffer,
            self._actions_offset,
            *[t.data_ptr() for t in group_actions],
            *[t.stride(0) for t in group_actions],
            *[t.stride(1) for t in group_actions],
        )
        self._step()
