"""The one place that imports Numba's CUDA target.

numba-cuda is in maintenance mode; when its successor (numba-cuda-mlir) gains a simulator, the
switch is this import.
"""

import ast
import ctypes
import functools
import hashlib
import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numba import cuda
from numba.cuda.core import config
from numba.cuda.core.errors import NumbaPerformanceWarning

from gpu_marl_envs import float32

__all__ = [
    "I64",
    "U",
    "GlobalTables",
    "cuda",
    "NumbaPerformanceWarning",
    "PreparedLaunch",
    "add_rn",
    "agent_rows",
    "allow_dynamic_shared_memory",
    "assume",
    "divide",
    "flat",
    "fma_rn",
    "inline_device",
    "mul_rn",
    "named_kernel",
    "sources_key",
    "staged_rows",
    "static_shared_bytes",
    "warp_sync",
]


# The bundled kernels' index type (docs/custom_env.md, "Numba as fast as CUDA C"): unsigned 32-bit,
# as CUDA C's, so that Numba adds no negative-index wraparound to an access and LLVM keeps the
# index arithmetic in 32 bits where it can. Their loops over a block's threads are while loops of
# it: a range with a runtime step, range(tid, n, blockDim.x), compiles to code for a negative step
# too: several times the instructions (six in a one-line loop).
U = np.uint32

# The counter of a team's loop whose step is a constant (a packed team's lanes): int64 from the
# unsigned lane, I64(lane()), stepped by I64(lanes()). A uint32 counter may wrap, so LLVM cannot count
# such a loop's passes: it keeps the loop, a back edge a pass and each store's 64-bit address
# computed afresh, where nvcc unrolls its int counter (whose overflow C leaves undefined) into
# stores at constant offsets. From values known not negative, the int64 sums need no wraparound.
I64 = np.int64


def named_kernel(function, name: str, launch_bounds: tuple[int, ...] | None = None):
    """``function`` as a CUDA kernel called ``name`` (profilers show the name it is compiled under),
    compiled for ``launch_bounds`` (max threads per block, min blocks per SM) where given, and
    cached on disk by Numba across processes. ``function`` must read a :func:`sources_key` of
    everything it is compiled from (see there). The simulator compiles nothing (and its ``jit`` has
    no such arguments)."""
    function.__name__ = function.__qualname__ = name
    if config.ENABLE_CUDASIM:
        return cuda.jit(function)
    options = {} if launch_bounds is None else {"launch_bounds": launch_bounds}
    try:
        return cuda.jit(function, cache=True, **options)
    except RuntimeError as error:  # no folder to cache in: beside the kernels' source, nor the user's
        warnings.warn(
            f"{error}; Numba compiles the kernels in each process (set NUMBA_CACHE_DIR to a writable folder)",
            stacklevel=2,
        )
        return cuda.jit(function, **options)


def sources_key(functions, settings=None) -> int:
    """A digest of what a kernel built around ``functions`` (device functions) is compiled from
    beyond its own code: the source files of their modules and of the modules these import, and
    ``settings`` (by ``repr``: the launch bounds, the constants the shell is built for). Imports are
    followed through the functions' own packages and this package's kernels; a module of the rest of
    this package is taken as it is (its constants, not its imports). A kernel shell reads the digest
    (a closure variable), so that Numba's on-disk cache, which keys a kernel on its code and its
    closure's contents, keys it on these too: a closure pickles a module-level device function by
    reference, and Numba stamps only the kernel's own file, so an edit to a rules module, to a
    helper's or to a constant imported by name would otherwise reload a stale kernel
    (``benchmarks/experiments/numba_cache_key.py``)."""
    this = __package__.partition(".")[0]
    roots = [getattr(function, "py_func", function).__module__ for function in functions]
    followed = {name.partition(".")[0] for name in roots} - {this}
    # Rules in a module of their own (not a package) import their neighbours as top-level modules
    # (not so for one installed among other packages).
    modules = [sys.modules[top] for top in followed if not hasattr(sys.modules[top], "__path__")]
    files = [getattr(module, "__file__", None) for module in modules]
    neighbours = {Path(file).parent for file in files if file and "site-packages" not in file}
    pending, sources = list(roots), {}
    while pending:
        name = pending.pop()
        module = sys.modules.get(name)  # (a module never imported is no part of the kernel)
        path = getattr(module, "__file__", None)
        top = name.partition(".")[0]
        if path and Path(path).parent in neighbours:
            followed.add(top)
        if name in sources or module is None or (top not in followed and top != this):
            continue
        sources[name] = source = Path(path).read_bytes() if path else b""
        if top not in followed and not name.startswith(__package__):
            continue  # the rest of this package: the file itself
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                pending += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), module.__package__)
                submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in sys.modules]
                pending += submodules if len(submodules) == len(node.names) else [base, *submodules]
    digest = hashlib.sha256(repr(settings).encode())
    for name in sorted(sources):
        digest.update(f"{name}\0{len(sources[name])}\0".encode())
        digest.update(sources[name])
    return int.from_bytes(digest.digest()[:7], "little")  # fits an int64


def inline_device(function):
    """A device function that NVVM always inlines, so that the local arrays its callers hand it
    stay in registers (the simulator, which runs Python, has no such option)."""
    if config.ENABLE_CUDASIM:
        return cuda.jit(device=True)(function)
    return cuda.jit(device=True, forceinline=True)(function)


class GlobalTables:
    """Read-only arrays (rules' constants) in global memory, as CUDA C's ``__device__ const`` tables:
    ``POPULATION = tables.add(values)`` gives a device function that returns the array, called
    where it is read (``POPULATION()[i]``). An array a device function closes over is Numba's
    constant: it lies in constant memory, which serves one address per instruction of a warp, so a
    table read at each thread's own index (``POPULATION[i]`` in thread i) is served 32 times over;
    global memory serves the warp at once, and NVVM reads a constant global through the read-only
    cache. The tables of one ``GlobalTables`` lie in one global variable, so that a thread's reads
    of several at one index share an address (a register pair) and differ by constant offsets. The
    simulator has no memory spaces: there ``add`` returns a function returning the array."""

    ALIGNMENT = 16  # bytes, each table's start

    def __init__(self):
        self.arrays = []  # (what Numba's cache key pickles: the same in every process)

    def add(self, values):
        values = np.ascontiguousarray(values)
        if values.dtype.byteorder == ">" or values.dtype.kind not in "biuf":
            raise TypeError(f"a table of native numbers, not {values.dtype}")
        index = len(self.arrays)
        self.arrays.append(values)
        if config.ENABLE_CUDASIM:

            @cuda.jit(device=True)
            def table():
                return values

            return table
        return _global_table(self, index)

    def layout(self) -> tuple[str, bytes, list[int]]:
        """The variable's name (a digest of its bytes), its bytes and each table's offset in them."""
        data, offsets = bytearray(), []
        for values in self.arrays:
            data += bytes(-len(data) % self.ALIGNMENT)
            offsets.append(len(data))
            data += values.tobytes()
        return f"_gme_tables_{hashlib.sha256(data).hexdigest()[:16]}", bytes(data), offsets


def _global_table(tables: GlobalTables, index: int):
    """The intrinsic that returns table ``index`` of ``tables`` (see :class:`GlobalTables`)."""
    from llvmlite import ir
    from numba.cuda import cgutils, types
    from numba.cuda.cudadrv import nvvm
    from numba.cuda.extending import intrinsic
    from numba.cuda.np.numpy_support import from_dtype

    values = tables.arrays[index]
    array_type = types.Array(from_dtype(values.dtype), values.ndim, "C", readonly=True)

    def codegen(context, builder, signature, args):
        # The tables as they are now: every add comes before the first compile.
        name, data, offsets = tables.layout()
        variable = builder.module.globals.get(name)  # one copy a module however often it is called
        if variable is None:
            initializer = ir.Constant(ir.ArrayType(ir.IntType(8), len(data)), bytearray(data))
            variable = cgutils.add_global_variable(builder.module, initializer.type, name, nvvm.ADDRSPACE_GLOBAL)
            variable.linkage = "linkonce_odr"  # one copy in the linked kernel, not one per function
            variable.global_constant = True
            variable.initializer = initializer
            variable.align = tables.ALIGNMENT
        byte = ir.IntType(8)
        start = builder.gep(variable, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), offsets[index])])
        pointer = builder.addrspacecast(start, ir.PointerType(byte), "generic")
        array = context.make_array(array_type)(context, builder)
        context.populate_array(
            array,
            data=builder.bitcast(pointer, array.data.type),
            shape=[context.get_constant(types.intp, n) for n in values.shape],
            strides=[context.get_constant(types.intp, n) for n in values.strides],
            itemsize=context.get_constant(types.intp, values.itemsize),
            parent=array.parent,
            meminfo=None,
        )
        return array._getvalue()

    def table(typingctx):
        return array_type(), codegen

    digest = hashlib.sha256(f"{values.dtype.str}{values.shape}".encode() + values.tobytes()).hexdigest()[:16]
    table.__name__ = table.__qualname__ = f"gme_table_{index}_{digest}"
    table = intrinsic(table)
    # Numba's on-disk cache keys a kernel on its closure, pickled: an intrinsic pickles with an id
    # drawn at random unless it has one already (its contents' digest, the same in every process).
    table._set_uuid(table.__name__)
    return table


# assume(condition): no instruction, but the code after it is compiled as if ``condition`` held (LLVM's
# llvm.assume), e.g. an array's shape a constant where Numba would read it at run time. A condition
# that does not hold makes the kernel's behaviour undefined; the simulator asserts it.
if config.ENABLE_CUDASIM:

    @cuda.jit(device=True)
    def assume(condition):
        assert condition

else:
    from llvmlite import ir as _ir
    from numba.cuda import types as _types
    from numba.cuda.extending import intrinsic as _intrinsic

    @_intrinsic
    def _assume(typingctx, condition):
        def codegen(context, builder, signature, args):
            void = _ir.FunctionType(_ir.VoidType(), [_ir.IntType(1)])
            builder.call(builder.module.declare_intrinsic("llvm.assume", fnty=void), [args[0]])
            return context.get_dummy_value()

        return _types.none(_types.boolean), codegen

    # (Numba's on-disk cache keys a kernel on its closure, pickled: an intrinsic pickles with an id
    # drawn at random unless it has one already.)
    _assume._set_uuid(f"{__name__}._assume")

    @inline_device
    def assume(condition):
        _assume(condition)


# warp_sync(): a barrier of the calling warp (CUDA C's __syncwarp()): its lanes wait for each other,
# and what each wrote to shared or global memory is visible to the others after it. The simulator
# has no warps: there it is a block barrier, so every thread of the block must reach it as many
# times (a kernel's loops around it take as many passes in every warp).
if config.ENABLE_CUDASIM:

    @cuda.jit(device=True)
    def warp_sync():
        cuda.syncthreads()

else:

    @inline_device
    def warp_sync():
        cuda.syncwarp(U(0xFFFFFFFF))


# after_previous_grid(): where the kernel is launched by programmatic dependent launch
# (gpu_marl_envs/backends/cuda_driver.ProgrammaticLaunches, compute capability 9.0 on), it waits for
# the grid before it on the stream to end and its writes to be visible (PTX's griddepcontrol.wait:
# multi_agent.cuh's gme_after_previous_grid); call it before any read of global memory, and only in a
# build for such a device (the instruction exists from sm_90). The simulator runs a kernel at a time.
if config.ENABLE_CUDASIM:

    @cuda.jit(device=True)
    def after_previous_grid():
        pass

else:

    @_intrinsic
    def _grid_dependency_wait(typingctx):
        def codegen(context, builder, signature, args):
            wait = _ir.InlineAsm(_ir.FunctionType(_ir.VoidType(), []), "griddepcontrol.wait;", "~{memory}", True)
            builder.call(wait, [])
            return context.get_dummy_value()

        return _types.none(), codegen

    _grid_dependency_wait._set_uuid(f"{__name__}._grid_dependency_wait")

    @inline_device
    def after_previous_grid():
        _grid_dependency_wait()


# agent_rows(agents, size): a device function ``rows(values)`` that views an ``(E, agents * size)``
# C-contiguous array as ``(E, agents, size)``, its own values. Not ``reshape``, which Numba compiles
# as a call to a helper it never inlines, the shape and strides on the stack (docs/custom_env.md,
# "Numba as fast as CUDA C", rule 2): the view's array is built in place, its shape constants.
if config.ENABLE_CUDASIM:

    def agent_rows(agents: int, size: int):
        @cuda.jit(device=True)
        def rows(values):
            return values.reshape((values.shape[0], agents, size))

        return rows

else:

    @functools.cache
    def agent_rows(agents: int, size: int):
        from numba.cuda.core.imputils import impl_ret_borrowed
        from numba.cuda.np.arrayobj import make_array, populate_array

        @_intrinsic
        def rows(typingctx, values):
            view = values.copy(ndim=3)

            def codegen(context, builder, signature, args):
                source = make_array(signature.args[0])(context, builder, args[0])
                target = make_array(view)(context, builder)
                i64 = _ir.IntType(64)
                itemsize = source.itemsize
                populate_array(
                    target,
                    data=source.data,
                    shape=[builder.extract_value(source.shape, 0), _ir.Constant(i64, agents), _ir.Constant(i64, size)],
                    strides=[
                        builder.extract_value(source.strides, 0),
                        builder.mul(itemsize, _ir.Constant(i64, size)),
                        itemsize,
                    ],
                    itemsize=itemsize,
                    meminfo=source.meminfo,
                    parent=source.parent,
                )
                return impl_ret_borrowed(context, builder, view, target._getvalue())

            return view(values), codegen

        rows._set_uuid(f"{__name__}.agent_rows.{agents}.{size}")  # (as _assume's)
        return rows


# flat(values): a C-contiguous 2-D array's values as one row (as agent_rows, not reshape), so that a loop
# over several rows' floats indexes them from one offset (multi_agent_numba's staged store).
if config.ENABLE_CUDASIM:

    @cuda.jit(device=True)
    def flat(values):
        return values.reshape(-1)

else:

    @_intrinsic
    def flat(typingctx, values):
        from numba.cuda.core.imputils import impl_ret_borrowed
        from numba.cuda.np.arrayobj import make_array, populate_array

        view = values.copy(ndim=1)

        def codegen(context, builder, signature, args):
            source = make_array(signature.args[0])(context, builder, args[0])
            target = make_array(view)(context, builder)
            populate_array(
                target,
                data=source.data,
                shape=[builder.mul(builder.extract_value(source.shape, 0), builder.extract_value(source.shape, 1))],
                strides=[source.itemsize],
                itemsize=source.itemsize,
                meminfo=source.meminfo,
                parent=source.parent,
            )
            return impl_ret_borrowed(context, builder, view, target._getvalue())

        return view(values), codegen

    flat._set_uuid(f"{__name__}.flat")  # (as _assume's: the staged store's closure holds it)


# A packed block's staged rows as the env's rows (multi_agent.cuh's gme_multi_agent_step passes the
# team's row of a shared array where a game writes its observations or rewards): staged_rows(tile,
# team, e, like) is an array of like's type, shape and strides whose row e is row `team` of the 1-D
# shared `tile` (rows as long as like's: all of its elements past the first axis), so that a game
# writing like[e, k] writes the tile. Only row
# e may be indexed: the view's data pointer is the tile's row minus e rows (the sum with row e's
# offset lands in the tile). A block of one env is never staged: the simulator, which runs
# a block per env, has no twin of it.
if config.ENABLE_CUDASIM:

    def staged_rows(tile, team, e, like):
        raise NotImplementedError("the simulator runs a block per env, whose rows are never staged")

else:

    @_intrinsic
    def staged_rows(typingctx, tile, team, e, like):
        from numba.cuda import types
        from numba.cuda.core.imputils import impl_ret_borrowed
        from numba.cuda.np.arrayobj import make_array, populate_array

        def codegen(context, builder, signature, args):
            source = make_array(signature.args[0])(context, builder, args[0])
            rows_like = make_array(signature.args[3])(context, builder, args[3])
            target = make_array(signature.return_type)(context, builder)
            team_row, env_row = (
                context.cast(builder, v, t, types.int64) for v, t in zip(args[1:3], signature.args[1:3])
            )
            row = builder.extract_value(rows_like.shape, 1)  # elements (like is C-contiguous)
            for axis in range(2, signature.args[3].ndim):  # an (E, N, size) array's rows: N * size
                row = builder.mul(row, builder.extract_value(rows_like.shape, axis))
            populate_array(
                target,
                # A GEP (not inbounds: it may pass the tile's start) keeps the pointer's origin in
                # the shared array, so that NVVM still stores to shared memory (STS, not generic ST).
                data=builder.gep(source.data, [builder.mul(builder.sub(team_row, env_row), row)]),
                shape=rows_like.shape,
                strides=rows_like.strides,
                itemsize=source.itemsize,
                meminfo=None,
                parent=None,
            )
            return impl_ret_borrowed(context, builder, signature.return_type, target._getvalue())

        return like(tile, team, e, like), codegen


# Products and sums that must be rounded separately (the reference's float32 arithmetic): NVVM
# fuses a * b + c into an FMA, but never libdevice's fmul_rn/fadd_rn (CUDA C's __fmul_rn/__fadd_rn);
# fma_rn is a fused multiply-add, rounded once (the simulator's cuda.fma rounds the product first).
# float_as_int/int_as_float reinterpret a float32's bits as an int32 and back (CUDA C's
# __float_as_int/__int_as_float), e.g. to order non-negative floats as integers.
if config.ENABLE_CUDASIM:
    # The simulator runs numpy float32 operations, each rounded (libdevice has no simulator twin).
    @cuda.jit(device=True)
    def mul_rn(a, b):
        return a * b

    @cuda.jit(device=True)
    def add_rn(a, b):
        return a + b

    @cuda.jit(device=True)
    def fma_rn(a, b, c):
        return np.float32(float32.fma(a, b, c))

    @cuda.jit(device=True)
    def float_as_int(v):
        return np.float32(v).view(np.int32)

    @cuda.jit(device=True)
    def int_as_float(v):
        return np.int32(v).view(np.float32)
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True)
    def mul_rn(a, b):
        return libdevice.fmul_rn(a, b)

    @cuda.jit(device=True)
    def add_rn(a, b):
        return libdevice.fadd_rn(a, b)

    @cuda.jit(device=True)
    def fma_rn(a, b, c):
        return libdevice.fmaf_rn(a, b, c)

    @cuda.jit(device=True)
    def float_as_int(v):
        return libdevice.float_as_int(v)

    @cuda.jit(device=True)
    def int_as_float(v):
        return libdevice.int_as_float(v)


_ZERO, _ONE = np.float32(0.0), np.float32(1.0)
_CORRECTED_LOW, _CORRECTED_HIGH = (np.float32(v) for v in float32.CORRECTED_DIVIDENDS)


@inline_device
def divide(x, divisor, reciprocal, exact):
    """``x / divisor`` as a true float32 division, the twin of ``gme_divide`` in kernels/float32.cuh
    (which says how ``reciprocal`` and ``exact``, constants of the caller, choose the way)."""
    if reciprocal != _ZERO:
        q = mul_rn(x, reciprocal)
        if exact:
            return q
        magnitude = abs(x)
        if magnitude >= _CORRECTED_LOW and magnitude <= _CORRECTED_HIGH:
            return fma_rn(fma_rn(-q, divisor, x), reciprocal, q)
        return q if x == _ZERO else x / divisor
    zero = x == _ZERO
    quotient = (_ONE if zero else x) / divisor
    return mul_rn(x, divisor) if zero else quotient


def _compiled(kernel, args):
    return kernel.compile(tuple(kernel.typeof_pyval(arg) for arg in args))


def static_shared_bytes(kernel, args) -> int:
    """The static shared memory of ``kernel`` compiled for ``args`` (compiling it if needed)."""
    return _compiled(kernel, args).shared_mem_per_block


def allow_dynamic_shared_memory(kernel, args, nbytes: int) -> None:
    """Let ``kernel``, compiled for ``args``, launch with ``nbytes`` of dynamic shared memory: beyond
    48 KiB a CUDA kernel must opt in. numba-cuda 0.30 sets no such attribute itself (only the
    carveout, through the same driver call), hence the compiled kernel's function handle."""
    from numba.cuda.cudadrv.driver import binding, driver

    function = _compiled(kernel, args)._codelibrary.get_cufunc()
    attribute = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attribute, nbytes, function.handle, function.device.id)


class PreparedLaunch:
    """``kernel``, compiled for ``args``, launched with a fixed grid by one driver call
    (``cuLaunchKernel``) on the arguments packed once. Numba's own launch types and packs every
    argument again at each call; a step's kernel has some twenty arrays, and that Python work, not
    the GPU, set the Numba backends' time per step on small batches. This is what the CUDA C
    backend's prepared launch does (``pycuda_backend._pack``).

    The arguments are packed once, by the code Numba's own launch packs them with (an array becomes
    its data model's fields, one parameter each; ``_prepare_args``, private: numba-cuda 0.30 has no
    public prepared launch, and the GPU tests run every Numba kernel through this one).

    ``patched``: the positions among ``args`` of arrays (or tuples of arrays) whose data pointers
    each call may replace (the step's actions), with arrays of the same dtypes and shapes.
    ``stream``: called at each launch for the raw handle of the stream to launch on (default: the
    legacy default stream). ``programmatic``: launched by programmatic dependent launch
    (``cuda_driver.ProgrammaticLaunches``: the kernel calls :func:`after_previous_grid` first)."""

    def __init__(
        self,
        kernel,
        args,
        blocks: int,
        threads: int,
        shared_bytes: int = 0,
        patched: tuple[int, ...] = (),
        stream: Callable[[], int] = lambda: 0,
        programmatic: bool = False,
    ):
        from numba.cuda.cudadrv.driver import binding

        from gpu_marl_envs.backends.cuda_driver import ProgrammaticLaunches

        compiled = _compiled(kernel, args)
        compiled.bind()  # the module loaded in the current context
        self._launch, self._stream = binding.cuLaunchKernel, stream
        # Numba loads a kernel as a library's (cuLibraryLoadData): its handle is a CUkernel, which
        # the driver resolves to the current context's function at every launch. Resolved once
        # here, a launch costs ~0.9 µs less (H200, benchmarks/experiments/numba_launch.py).
        kernel_handle = binding.CUkernel(int(compiled._codelibrary.get_cufunc().handle))
        error, self._function = binding.cuKernelGetFunction(kernel_handle)
        if error != binding.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuKernelGetFunction failed: {error.name}")
        self._blocks, self._threads, self._shared_bytes = blocks, threads, shared_bytes
        self._programmatic = ProgrammaticLaunches(blocks, threads, shared_bytes) if programmatic else None
        self._args = args  # what the packed pointers point into (a params record Numba allocated)
        values, patched_slots = [], []
        for position, (kind, value) in enumerate(zip(compiled.argument_types, args)):
            first = len(values)
            compiled._prepare_args(kind, value, 0, [], values)
            if position not in patched:
                continue
            for array in value if isinstance(value, tuple) else (value,):
                # The one parameter of the array's that holds its data pointer.
                pointer = array.__cuda_array_interface__["data"][0]
                slots = [first + i for i, v in enumerate(values[first:]) if isinstance(v, int) and v == pointer]
                if len(slots) != 1:
                    raise RuntimeError(f"cannot find argument {position}'s data pointer among its Numba parameters")
                patched_slots.append(slots[0])
        # Python ints are pointer-sized parameters (as Numba's own launch passes them).
        values = [value if isinstance(value, ctypes._SimpleCData) else ctypes.c_ssize_t(value) for value in values]
        # Every value in one buffer, each at an offset of a multiple of its size, and the driver's
        # pointers into it: a Numba array is 7 parameters or more (CartPole's step has 97), and as
        # ctypes objects of their own they lay scattered over the heap, where a step's other host
        # work evicts them from the caches between launches.
        offsets, size = [], 0
        for value in values:
            size += -size % ctypes.sizeof(value)
            offsets.append(size)
            size += ctypes.sizeof(value)
        self._storage = (ctypes.c_uint64 * max(1, -(-size // 8)))()
        base = ctypes.addressof(self._storage)
        for value, offset in zip(values, offsets):
            ctypes.memmove(base + offset, ctypes.addressof(value), ctypes.sizeof(value))
        self._patched = [ctypes.c_uint64.from_buffer(self._storage, offsets[slot]) for slot in patched_slots]
        self._pointers = (ctypes.c_void_p * len(values))(*(base + offset for offset in offsets))
        self._address = ctypes.addressof(self._pointers)

    def __call__(self, *tensors) -> None:
        """Launch, reading the patched arrays (in the order of their positions, a tuple's in its
        order) in ``tensors``' places where given (anything with ``data_ptr()``). Kept to one Python
        frame: at small batches a step's time is this call's."""
        for parameter, tensor in zip(self._patched, tensors):
            parameter.value = tensor.data_ptr()
        if self._programmatic is not None:
            launches = self._programmatic
            (error,) = launches.launch(launches.config(self._stream()), self._function, self._address, 0)
            if error:
                raise RuntimeError(f"cuLaunchKernelEx failed: {error.name}")
            return
        (error,) = self._launch(
            self._function,
            self._blocks,
            1,
            1,
            self._threads,
            1,
            1,
            self._shared_bytes,
            self._stream(),
            self._address,
            0,  # no "extra" options (an int: the binding takes no None there)
        )
        if error:  # CUDA_SUCCESS is 0
            raise RuntimeError(f"cuLaunchKernel failed: {error.name}")
