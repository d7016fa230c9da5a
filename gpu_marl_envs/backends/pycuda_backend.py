"""CUDA C backend: ``kernels/<env>.cu`` compiled by pycuda on the primary context (the one torch
uses) and launched on torch's current stream.

The launch path is the cheapest pycuda offers: the argument buffer is packed once at construction
and only the actions pointer is rewritten per step.
"""

from __future__ import annotations

import functools
import struct
from importlib import resources

import torch
from gymnasium.vector import AutoresetMode

from gpu_marl_envs import rng
from gpu_marl_envs.autoreset import AUTORESET_CODES
from gpu_marl_envs.buffers import RESET_ARGUMENTS, STEP_ARGUMENTS, THREADS_PER_BLOCK, ClassicBuffers
from gpu_marl_envs.envs.definition import EnvDefinition


def _raw_current_stream(device_index: int) -> int:
    """The handle of torch's current stream. ``torch.cuda.current_stream()`` builds a Python
    ``Stream`` (~5 µs, as much as the launch itself); the raw getter is what torch's own compiled
    kernels use."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def availability(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "the pycuda backend needs a CUDA device"
    try:
        import pycuda.driver  # noqa: F401
    except ImportError as error:
        return f"the pycuda backend needs pycuda and a CUDA driver ({error}): pip install 'gpu_marl_envs[cuda]'"
    return None


def runtime_definitions() -> dict[str, str]:
    """The runtime's constants every .cu file is compiled with (RNG, autoreset codes)."""
    return {
        "GME_MIX_MUL_1": f"{rng.MIX_MUL_1:#x}u",
        "GME_MIX_MUL_2": f"{rng.MIX_MUL_2:#x}u",
        "GME_SEED_SALT": f"{rng.SEED_SALT:#x}u",
        **{f"GME_AUTORESET_{mode.name}": str(code) for mode, code in AUTORESET_CODES.items()},
    }


def compile_definitions(definition: EnvDefinition) -> list[str]:
    """-D options an env's .cu file is compiled with: the constants whose source of truth is Python."""
    constants = {
        **runtime_definitions(),
        "GME_OBS_DIM": str(definition.obs_dim),
        "GME_THREADS_PER_BLOCK": str(THREADS_PER_BLOCK),
    }
    return [f"-D{name}={value}" for name, value in constants.items()]


def kernel_dir() -> str:
    return str(resources.files("gpu_marl_envs.kernels"))


@functools.lru_cache(maxsize=None)
def _module(definition: EnvDefinition, device_index: int):
    """One compiled module per env kind and device, shared by every env instance."""
    import pycuda.autoprimaryctx  # noqa: F401  (retains the primary context torch already uses)
    from pycuda.compiler import SourceModule

    source = (resources.files("gpu_marl_envs.kernels") / f"{definition.kernel_name}.cu").read_text()
    return SourceModule(source, options=compile_definitions(definition), include_dirs=[kernel_dir()],
                        no_extern_c=True)


def _pack(names, values, actions_layout: struct.Struct = struct.Struct("P")) -> tuple[bytearray, int | None]:
    """Pack kernel arguments with the C ABI's natural alignment. The ``actions`` argument, rewritten
    at each step, gets ``actions_layout.size`` zero bytes, pointer-aligned; returns the buffer and that
    argument's byte offset (None if absent)."""
    fmt, data, actions_offset = "", [], None
    for name in names:
        if name == "actions":
            fmt += "0P"
            actions_offset = struct.calcsize(fmt)
            fmt += "%ds" % actions_layout.size
            data.append(bytes(actions_layout.size))
            continue
        value = values[name]
        if isinstance(value, torch.Tensor):
            fmt += "P"
            data.append(value.data_ptr())
        elif isinstance(value, bytes):  # the params struct, 4-byte fields
            fmt += "0i%ds" % len(value)
            data.append(value)
        else:
            fmt += "i"
            data.append(int(value))
    return bytearray(struct.pack(fmt, *data)), actions_offset


class StreamLauncher:
    """Launches pycuda kernels on torch's current stream of ``device``."""

    def __init__(self, device: torch.device):
        self._device = device
        self._own_stream = None  # a pycuda stream, used only when torch's current stream is not the default

    def launch(self, kernel, grid: tuple, block: tuple, buffer: bytearray, shared_bytes: int = 0) -> None:
        """``shared_bytes``: the block's dynamic shared memory."""
        if _raw_current_stream(self._device.index) == 0:
            kernel._launch_kernel(grid, block, bytes(buffer), shared_bytes, None)
            return
        # pycuda cannot launch on a stream it did not create: order our stream after torch's
        # current one and back again, through torch's view of our stream.
        import pycuda.driver as drv

        current = torch.cuda.current_stream(self._device)
        if self._own_stream is None:
            self._own_stream = drv.Stream()
            self._own_torch_stream = torch.cuda.ExternalStream(self._own_stream.handle, device=self._device)
        self._own_torch_stream.wait_stream(current)
        kernel._launch_kernel(grid, block, bytes(buffer), shared_bytes, self._own_stream)
        current.wait_stream(self._own_torch_stream)


class PycudaBackend:
    name = "pycuda"
    # No CUDA graph by default: the prepared launch costs less than a graph replay plus the copy
    # of the actions into the graph's input buffer.
    graph_by_default = False

    def __init__(self, definition: EnvDefinition, params, buffers: ClassicBuffers, autoreset_mode: AutoresetMode,
                 action_space):
        device = buffers.state.device
        torch.cuda.init()  # the primary context must exist before pycuda retains it
        module = _module(definition, device.index)  # resolve_device always names the index
        self._step_kernel = module.get_function(f"{definition.kernel_name}_step")
        self._reset_kernel = module.get_function(f"{definition.kernel_name}_reset")
        num_envs = buffers.state.shape[1]
        self._grid = ((num_envs + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, 1, 1)
        self._block = (THREADS_PER_BLOCK, 1, 1)

        values = dict(vars(buffers))
        values["num_envs"] = num_envs
        values["autoreset_mode"] = AUTORESET_CODES[autoreset_mode]
        values["params"] = definition.params_record(params).tobytes()
        self._step_buffer, self._actions_offset = _pack(STEP_ARGUMENTS, values)
        self._reset_buffer, _ = _pack(RESET_ARGUMENTS, values)
        self._launcher = StreamLauncher(device)

    def step(self, actions: torch.Tensor) -> None:
        struct.pack_into("P", self._step_buffer, self._actions_offset, actions.data_ptr())
        self._launcher.launch(self._step_kernel, self._grid, self._block, self._step_buffer)

    def reset(self) -> None:
        self._launcher.launch(self._reset_kernel, self._grid, self._block, self._reset_buffer)
