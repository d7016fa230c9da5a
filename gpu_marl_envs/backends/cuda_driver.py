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


class PreparedLaunch:
    """``function`` launched by one driver call (``cuLaunchKernel``) with a fixed grid and block on
    ``buffer``, the kernel's parameters packed in C's layout (``pycuda_backend._pack``), on the stream
    whose raw handle ``stream()`` returns. A launch reads the buffer as it is then: a step's actions
    pointers are rewritten in it in place."""

    def __init__(
        self, function: Function, grid: int, block: int, buffer: bytearray, shared_bytes: int, stream: Callable[[], int]
    ):
        self._launch, self._function = _driver().cuLaunchKernel, function.handle
        self._grid, self._block, self._shared_bytes, self._stream = grid, block, shared_bytes, stream
        self._data = (ctypes.c_char * len(buffer)).from_buffer(buffer)  # the bytearray's own memory
        self._size = ctypes.c_size_t(len(buffer))
        self._extra = (ctypes.c_void_p * 5)(
            _BUFFER_POINTER, ctypes.addressof(self._data), _BUFFER_SIZE, ctypes.addressof(self._size), _END
        )
        self._address = ctypes.addressof(self._extra)

    def __call__(self) -> None:
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
