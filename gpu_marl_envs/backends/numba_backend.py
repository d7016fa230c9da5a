"""Numba CUDA backend: an env's Numba device functions in the template's kernels
(``kernels/classic_numba.py``), launched on torch's current stream.

On a CPU device it runs only under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), which the
tests use to check the kernels without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import warnings

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.backends import current_stream_getter
from gpu_marl_envs.buffers import RESET_ARGUMENTS, STEP_ARGUMENTS, THREADS_PER_BLOCK, ClassicBuffers
from gpu_marl_envs.registration import RegisteredEnv
from gpu_marl_envs.validation import zero_actions


def simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def availability(device: torch.device) -> str | None:
    """None if usable on ``device``, else what to do about it."""
    try:
        from gpu_marl_envs.kernels.numba_api import cuda
    except ImportError:
        return "the numba backend needs numba-cuda: pip install 'gpu_marl_envs[cuda]'"
    if device.type == "cuda":
        return None if cuda.is_available() else "Numba finds no CUDA driver or GPU"
    if simulator_enabled():
        return None
    return (
        "the numba backend needs a CUDA device; on the CPU it runs only under Numba's CUDA "
        "simulator (set NUMBA_ENABLE_CUDASIM=1 before importing numba; slow, for tests)"
    )


class NumbaLauncher:
    """Launches Numba kernels with a fixed grid on torch's current stream of ``device`` (or in the
    simulator, on host arrays, when ``device`` is the CPU)."""

    def __init__(self, device: torch.device, blocks: int, threads: int, shared_bytes: int = 0):
        """``shared_bytes``: each block's dynamic shared memory."""
        from gpu_marl_envs.kernels.numba_api import cuda

        self._cuda = cuda
        self._device = device
        self._on_gpu = device.type == "cuda"
        self._blocks, self._threads, self._shared_bytes = blocks, threads, shared_bytes

    def view(self, tensor: torch.Tensor):
        """The array a kernel receives for ``tensor`` (no copy)."""
        if self._on_gpu:
            return self._cuda.as_cuda_array(tensor, sync=False)
        return tensor.numpy()  # the simulator works on host arrays in place

    def prepare(self, kernel, args: tuple, patched: tuple[int, ...] = (), programmatic: bool = False):
        """A launch of ``kernel`` on ``args`` (views), called as ``launch(*tensors)``: ``patched``
        are the positions among ``args`` of views (or tuples of views) that ``tensors`` (contiguous,
        each of its view's dtype and size) stand in for, in order; the kernel reads them in their
        place (in the simulator: copied in). ``programmatic``: launched by programmatic dependent
        launch (``cuda_driver.ProgrammaticLaunches``; a GPU's launch only)."""
        if self._on_gpu:
            from gpu_marl_envs.kernels.numba_api import PreparedLaunch

            stream = current_stream_getter(self._device.index)
            return PreparedLaunch(
                kernel, args, self._blocks, self._threads, self._shared_bytes, patched, stream, programmatic
            )

        from gpu_marl_envs.kernels.numba_api import NumbaPerformanceWarning

        views = [view for i in patched for view in (args[i] if isinstance(args[i], tuple) else (args[i],))]

        def simulate(*tensors: torch.Tensor) -> None:
            for view, tensor in zip(views, tensors):
                view[...] = tensor.numpy().reshape(view.shape)
            with warnings.catch_warnings():
                # Small batches make small grids by design, not by a tuning mistake.
                warnings.simplefilter("ignore", NumbaPerformanceWarning)
                with _simulator_core():
                    kernel[self._blocks, self._threads, 0, self._shared_bytes](*args)

        return simulate


@contextlib.contextmanager
def _simulator_core():
    """Keep a simulated launch's threads on the caller's core (Linux): the simulator runs a Python
    thread per CUDA thread, and on several cores they hand the GIL back and forth across cores, which
    made one step of a 300-agent game take 1 s or 200 s from run to run on two cores (on one: 1-2 s).
    New threads inherit the affinity of the thread that starts them; the caller's is restored after."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    cores = os.sched_getaffinity(0)  # 0: the calling thread
    os.sched_setaffinity(0, {min(cores)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)


@functools.cache
def _kernels(spec: RegisteredEnv):
    """The (step, reset) kernels of an env: the template's shells around the device functions
    ``reset``, ``step`` and ``observe`` of its Numba module, built once per process."""
    from gpu_marl_envs.kernels.classic_numba import make_classic_kernels

    module = importlib.import_module(spec.kernels.numba)
    missing = [name for name in ("reset", "step", "observe") if not hasattr(module, name)]
    if missing:
        raise AttributeError(
            f"{module.__name__} (the Numba module of {spec.id}) defines no {', '.join(missing)}: "
            "it needs the device functions reset, step and observe (docs/custom_env.md)"
        )
    return make_classic_kernels(module.reset, module.step, module.observe, spec.definition.obs_dim, spec.kernel_name)


class NumbaBackend:
    name = "numba"
    # No CUDA graph by default: like the CUDA C backend's, the prepared launch costs less than a
    # graph replay plus the copy of the actions into the graph's input buffer.
    graph_by_default = False

    def __init__(
        self, spec: RegisteredEnv, params, buffers: ClassicBuffers, autoreset_mode: AutoresetMode, action_space
    ):
        from gpu_marl_envs.kernels.numba_api import cuda

        definition = spec.definition
        step_kernel, reset_kernel = _kernels(spec)
        on_gpu = buffers.state.is_cuda
        num_envs = buffers.state.shape[1]
        # The simulator runs a Python thread per CUDA thread: no idle ones there. The kernels work
        # with any block size up to THREADS_PER_BLOCK (their shared memory is sized for it).
        threads = THREADS_PER_BLOCK if on_gpu else min(THREADS_PER_BLOCK, num_envs)
        launcher = NumbaLauncher(buffers.state.device, blocks=(num_envs + threads - 1) // threads, threads=threads)

        record = definition.params_record(params)
        # Numba reads the state as one flat array of rows; the kernels index state[field * n + env].
        views = {name: launcher.view(tensor) for name, tensor in buffers.tensors().items()}
        views["state"] = launcher.view(buffers.state.view(-1))
        views["num_envs"] = np.int32(num_envs)
        views["autoreset_mode"] = np.int32(AUTORESET_CODES[autoreset_mode])
        views["params"] = cuda.to_device(record) if on_gpu else record
        # The prepared launch's actions: a step's launch reads its own actions in their place (on a
        # GPU) or copies them in (in the simulator).
        self._actions = zero_actions(action_space, num_envs, buffers.state.device)
        views["actions"] = launcher.view(self._actions)
        # step(actions) and reset() are the prepared launches themselves: at 4,096 envs a step is
        # host time, and a method around each would add a Python frame to every step.
        self.step = launcher.prepare(
            step_kernel, tuple(views[name] for name in STEP_ARGUMENTS), (STEP_ARGUMENTS.index("actions"),)
        )
        self.reset = launcher.prepare(reset_kernel, tuple(views[name] for name in RESET_ARGUMENTS))
