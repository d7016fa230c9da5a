"""CUDA C compiled in this process by NVRTC (NVIDIA's runtime compiler, through cuda-bindings) into the
machine code of one GPU architecture, and kept on disk so that a later process loads it.

The CUDA C backends compiled with nvcc, through pycuda's ``SourceModule``: a separate process, which
pycuda also runs once to preprocess the source (its cache's key) and once more for ``nvcc --version``.
In a fresh process on an H200 (CartPole-v1's kernels) that took 1.05 s with an empty cache and 0.18 s
with a filled one, most of a cold start's set-up (issue 44). NVRTC is the same compiler (NVVM, then
ptxas) as a library call; the cache key is what it reads: the source, the headers it includes in
quotes (found as the compiler finds them, hashed by content), the options, NVRTC's version and the
architecture.

Where NVRTC cannot be loaded (cuda-bindings built for another CUDA major version than the NVRTC
installed, say) the backends compile with nvcc, through pycuda (``pycuda_backend.compile_module``).

The cache lives in ``$XDG_CACHE_HOME/gpu_marl_envs/cubin`` (``~/.cache`` without it), one file per
key, written whole and then renamed, so that processes compiling the same kernels at once (a torchrun
job) never read a partial file. Where it cannot be written, each process compiles.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
import warnings
from pathlib import Path

# A quoted #include: the headers the compiler looks up in the includer's folder and the -I folders.
_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


@functools.cache
def unavailable_reason() -> str | None:
    """Why NVRTC cannot compile here (cuda-bindings, or an NVRTC library of its CUDA major version,
    missing); None where it can."""
    try:
        from cuda.bindings import nvrtc

        _check(nvrtc.nvrtcVersion())
    except Exception as error:  # ImportError, or the library not found when first called
        return f"NVRTC could not be loaded through cuda-bindings ({type(error).__name__}: {error})"
    return None


def binary(source: str, name: str, include_dirs: list[str], capability: tuple[int, int]) -> bytes:
    """The machine code (cubin) of ``source`` for a GPU of compute ``capability``, or its PTX where
    this NVRTC predates that GPU (the driver then compiles it); ``name`` is the file compile errors
    name. Raises RuntimeError with the compiler's log where the source does not compile."""
    from cuda.bindings import nvrtc

    version = _check(nvrtc.nvrtcVersion())
    supported = _check(nvrtc.nvrtcGetSupportedArchs())
    arch = capability[0] * 10 + capability[1]
    # Newer than this NVRTC knows: PTX of the newest architecture it knows, which the driver compiles.
    target = f"sm_{arch}" if arch in supported else f"compute_{max(a for a in supported if a <= arch)}"
    # -default-device: a function declared without __device__ (a constexpr helper, say) is a device
    # function, as nvcc lets device code use it in constant expressions; NVRTC refuses host functions.
    options = [f"--gpu-architecture={target}", "-default-device", *(f"-I{folder}" for folder in include_dirs)]
    key = hashlib.sha256(repr((version, options)).encode())
    key.update(source.encode())
    for header in _quoted_headers(source, include_dirs):
        key.update(str(header).encode() + b"\0" + header.read_bytes())
    path = _cache_dir() / f"{key.hexdigest()}.{'cubin' if target.startswith('sm_') else 'ptx'}"
    if path.is_file():
        return path.read_bytes()
    code = _compile(nvrtc, source, name, options, cubin=target.startswith("sm_"))
    _store(path, code)
    return code


def _compile(nvrtc, source: str, name: str, options: list[str], cubin: bool) -> bytes:
    program = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    try:
        encoded = [option.encode() for option in options]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = _check(nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            _check(nvrtc.nvrtcGetProgramLog(program, log))
            raise RuntimeError(f"NVRTC could not compile {name} ({' '.join(options)}):\n{log.decode(errors='replace')}")
        get_size, get = (
            (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if cubin else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
        )
        code = b" " * _check(get_size(program))
        _check(get(program, code))
        return code
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _check(returned):
    """The value of a cuda-bindings call that returns ``(result, value)`` or ``(result,)``, raising on
    an error result."""
    result, *value = returned
    if result.value != 0:
        raise RuntimeError(f"NVRTC call failed: {result.name}")
    return tuple(value) if len(value) > 1 else value[0] if value else None


def _quoted_headers(source: str, include_dirs: list[str]) -> list[Path]:
    """Every header ``source`` includes in quotes, directly or through another header, as the
    compiler resolves it: the includer's folder first (none for the source itself), then
    ``include_dirs`` in order. One not found is left out (the compile then fails on it)."""
    found: list[Path] = []
    pending = [(source, None)]
    while pending:
        text, folder = pending.pop()
        for name in _QUOTED_INCLUDE.findall(text):
            candidates = ([folder] if folder else []) + [Path(d) for d in include_dirs]
            header = next((c / name for c in candidates if (c / name).is_file()), None)
            if header is not None and header.resolve() not in found:
                found.append(header.resolve())
                pending.append((header.read_text(), header.parent))
    return found


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpu_marl_envs" / "cubin"


def _store(path: Path, code: bytes) -> None:
    partial = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".partial", delete=False) as file:
            partial = Path(file.name)
            file.write(code)
        os.replace(partial, path)
    except OSError as error:
        if partial is not None:
            partial.unlink(missing_ok=True)
        warnings.warn(f"compiled CUDA C not cached ({error}): each process compiles it", stacklevel=3)
