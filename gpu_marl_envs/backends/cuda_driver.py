"""The CUDA C backends' kernels as the CUDA driver loads and launches them, through cuda-bindings (as
``kernels/numba_api.PreparedLaunch`` launches Numba's): a compiled module loaded on the primary
context torch uses, a kernel launched on torch's current stream, whichever stream that is.

pycuda launches only on streams it created. On any other stream of torch's (a CUDA graph's capture,
say) the backends used to order a pycuda stream after torch's and back with events. A captured step
then took 1.1 to 1.5 µs longer than one launched on the capturing stream itself, though the graph
held the same kernel nodes (H200, 100 steps a graph: SimpleSpread at 2,000 games 4.26 against 3.07
µs a step, speaker-listener 4.68 against 3.55, SimpleSpread at 65,536 games 8.91 against 7.50;
docs/benchmarks/mpe.md, "CUDA C launched on torch's stream"). pycuda keeps the compile where NVRTC
cannot be loaded (``pycuda_backend.compile_module``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

# cuLaunchKernel's `extra` options (cuda.h's CU_LAUNCH_PARAM_*): the parameters as one buffer.
_BUFFER_POINTER, _BUFFER_SIZE, _END = 1, 2, 0


PROGRAMMATIC_ARCH = 90
"""The first GPU architecture (major * 10 + minor) with programmatic dependent launch
(:class:`ProgrammaticLaunches`; PTX's griddepcontrol)."""


def _driver():
    from cuda.bindings import driver

    return driver


def _check(result: tuple, call: str):
    """The values a cuda-bindings call returns after its error code; raises on an error."""
    error, *values = result
    if error != _driver().CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{call} failed: {error.name}")
    return values[0] if len(values) == 1 else None


class Function:
    """A kernel of a :class:`Module`."""

    def __init__(self, handle):
        self.handle = handle

    def get_attribute(self, name: str) -> int:
        """The driver's ``CU_FUNC_ATTRIBUTE_<name>`` of the kernel (``SHARED_SIZE_BYTES``, say)."""
        return _check(_driver().cuFuncGetAttribute(_attribute(name), self.handle), f"cuFuncGetAttribute({name})")

    def set_attribute(self, name: str, value: int) -> None:
        _check(_driver().cuFuncSetAttribute(self.handle, _attribute(name), value), f"cuFuncSetAttribute({name})")


def _attribute(name: str):
    return getattr(_driver().CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")


class Module:
    """A compiled ``image`` (cubin, or PTX that the driver compiles) loaded on the primary context of
    CUDA device ``device_index``, the context torch uses. The context is made current for the load
    only; the caller's current context is left as it was."""

    def __init__(self, image: bytes, device_index: int):
        cu = _driver()
        device = _check(cu.cuDeviceGet(device_index), "cuDeviceGet")
        # Retained and never released: the module lives as long as the process (the backends cache it).
        context = _check(cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        _check(cu.cuCtxPushCurrent(context), "cuCtxPushCurrent")
        try:
            self._module = _check(cu.cuModuleLoadData(image), "cuModuleLoadData")
        finally:
            _check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")

    def get_function(self, name: str) -> Function:
        handle = _check(_driver().cuModuleGetFunction(self._module, name.encode()), f"cuModuleGetFunction({name})")
        return Function(handle)


class ProgrammaticLaunches:
    """A kernel's launches by programmatic dependent launch (compute capability 9.0 on):
    ``cuLaunchKernelEx`` with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``, one launch
    config a stream (by raw handle), made at its first launch there. The driver then prepares the
    launch while the grid before it on the stream still runs, and starts it as that grid ends, where a
    plain launch waits for the end first. The kernel must wait for that grid itself before it reads
    memory (``griddepcontrol.wait``: multi_agent.cuh's gme_after_previous_grid, numba_api's
    after_previous_grid); it does not signal the next grid early, so the next one still starts at its end.

    Captured steps back to back (H200, 100 a CUDA graph, CUDA C): SimpleSpread 2.56 against 2.82 µs a
    step at 2,000 games and 7.18 against 7.41 at 65,536; speaker-listener (Box) 1.44 against 2.08 and
    3.29 against 3.95. Signalled at the kernel's start instead (griddepcontrol.launch_dependents: the
    next grid's blocks are then placed beside this grid's, and wait there), SimpleSpread at 65,536 games
    took 8.5 µs (docs/benchmarks/mpe.md)."""

    def __init__(self, grid: int, block: int, shared_bytes: int):
        self.launch = _driver().cuLaunchKernelEx
        self._shape, self._configs = (grid, block, shared_bytes), {}

    def config(self, stream: int):
        """The launch config on the stream whose raw handle is ``stream``."""
        config = self._configs.get(stream)
        if config is None:
            cu = _driver()
            grid, block, shared_bytes = self._shape
            config = cu.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
            config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
            config.sharedMemBytes = shared_bytes
            config.hStream = cu.CUstream(stream)
            attribute = cu.CUlaunchAttribute()
            attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attribute.value.programmaticStreamSerializationAllowed = 1
            config.attrs, config.numAttrs = [attribute], 1
            self._configs[stream] = config
        return config


class PreparedLaunch:
    """``function`` launched by one driver call (``cuLaunchKernel``) with a fixed grid and block on
    ``buffer``, the kernel's parameters packed in C's layout (``pycuda_backend._pack``), on the stream
    whose raw handle ``stream()`` returns. A launch reads the buffer as it is then: a step's actions
    pointers are rewritten in it in place. ``programmatic``: launched as :class:`ProgrammaticLaunches`
    says (the kernel waits for the grid before it)."""

    def __init__(
        self,
        function: Function,
        grid: int,
        block: int,
        buffer: bytearray,
        shared_bytes: int,
        stream: Callable[[], int],
        programmatic: bool = False,
    ):
        self._launch, self._function = _driver().cuLaunchKernel, function.handle
        self._programmatic = ProgrammaticLaunches(grid, block, shared_bytes) if programmatic else None
        self._grid, self._block, self._shared_bytes, self._stream = grid, block, shared_bytes, stream
        self._data = (ctypes.c_char * len(buffer)).from_buffer(buffer)  # the bytearray's own memory
        self._size = ctypes.c_size_t(len(buffer))
        self._extra = (ctypes.c_void_p * 5)(
            _BUFFER_POINTER, ctypes.addressof(self._data), _BUFFER_SIZE, ctypes.addressof(self._size), _END
        )
        self._address = ctypes.addressof(self._extra)

    def __call__(self) -> None:
        if self._programmatic is not None:
            launches = self._programmatic
            (error,) = launches.launch(launches.config(self._stream()), self._function, 0, self._address)
            if error:
                raise RuntimeError(f"cuLaunchKernelEx failed: {error.name}")
            return
        (error,) = self._launch(
            self._function,
            self._grid,
            1,
            1,
            self._block,
            1,
            1,
            self._shared_bytes,
            self._stream(),
            0,  # no kernelParams: the parameters are in `extra`'s buffer
            self._address,
        )
        if error:  # CUDA_SUCCESS is 0
            raise RuntimeError(f"cuLaunchKernel failed: {error.name}")
