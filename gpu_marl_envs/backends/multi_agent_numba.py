"""Numba CUDA backend for multi-agent games: ``kernels/<game>_numba.py`` kernels built per params
(``make_kernels(constants)``), one block per env, launched on torch's current stream.

On a CPU device it runs only under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
"""

from __future__ import annotations

import functools
import importlib

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.backends.numba_backend import NumbaLauncher
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition
from gpu_marl_envs.multi_agent_buffers import MAX_SHARED_BYTES, MultiAgentBuffers, reset_arguments, step_arguments


@functools.lru_cache(maxsize=None)
def _kernels(definition: MultiAgentDefinition, params):
    """The (step, reset) kernels of a game for these params, built once per process."""
    module = importlib.import_module(f"gpu_marl_envs.kernels.{definition.kernel_name}_numba")
    return module.make_kernels(definition.kernel_constants(params))


class MultiAgentNumbaBackend:
    name = "numba"
    graph_by_default = True  # see NumbaBackend

    def __init__(self, definition: MultiAgentDefinition, params, buffers: MultiAgentBuffers,
                 autoreset_mode: AutoresetMode):
        self._step_kernel, self._reset_kernel = _kernels(definition, params)
        device = buffers.observations.device
        num_envs = buffers.observations.shape[0]
        threads = definition.block_threads(params)
        if device.type != "cuda":
            # The simulator runs a Python thread per CUDA thread: no more than there are agents.
            threads = min(threads, params.num_agents)
        shared_bytes = definition.dynamic_shared_bytes(params)
        self._launcher = NumbaLauncher(device, blocks=num_envs, threads=threads, shared_bytes=shared_bytes)
        # Actions go into a buffer of our own (the CUDA graph's input; see NumbaBackend).
        self.actions_buffer = torch.zeros((num_envs, params.num_agents, *definition.action_shape(params)),
                                          dtype=torch.int64, device=device)
        views = {name: self._launcher.view(tensor) for name, tensor in buffers.tensors().items()}
        views["actions"] = self._launcher.view(self.actions_buffer)
        views["num_envs"] = np.int32(num_envs)
        views["autoreset_mode"] = np.int32(AUTORESET_CODES[autoreset_mode])
        self._step_args = tuple(views[name] for name in step_arguments(definition, params))
        self._reset_args = tuple(views[name] for name in reset_arguments(definition, params))
        if device.type == "cuda" and shared_bytes + definition.shared_bytes(params) > MAX_SHARED_BYTES:
            # Beyond 48 KiB a kernel must opt in (up to shared_memory_limit, checked by the env).
            from gpu_marl_envs.kernels.numba_api import allow_dynamic_shared_memory

            for kernel, args in ((self._step_kernel, self._step_args), (self._reset_kernel, self._reset_args)):
                allow_dynamic_shared_memory(kernel, args, shared_bytes)

    def step(self, actions: torch.Tensor) -> None:
        if actions is not self.actions_buffer:
            self.actions_buffer.copy_(actions)
        self._launcher.launch(self._step_kernel, self._step_args)

    def reset(self) -> None:
        self._launcher.launch(self._reset_kernel, self._reset_args)
