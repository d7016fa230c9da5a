"""The CUDA C backend's compiler (``backends/nvrtc.py``) without a GPU: the cache on disk is read back,
keyed on the headers' contents, never left partial; errors name the file and the line; a GPU newer
than NVRTC gets PTX. That every bundled .cu file compiles: ``test_kernel_abi.py``. On a GPU:
``test_gpu_nvrtc.py``."""

import warnings

import pytest

from gpu_marl_envs.backends import nvrtc
from gpu_marl_envs.backends.pycuda_backend import include_dirs, kernel_source
from gpu_marl_envs.registration import env_spec

pytestmark = pytest.mark.skipif(nvrtc.unavailable_reason() is not None, reason=str(nvrtc.unavailable_reason()))

H100 = (9, 0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "gpu_marl_envs" / "cubin"


@pytest.fixture
def compiles(monkeypatch):
    """The sources NVRTC compiled (the cache's misses), in order."""
    seen = []
    compile_ = nvrtc._compile

    def counted(library, source, name, options, cubin):
        seen.append(name)
        return compile_(library, source, name, options, cubin)

    monkeypatch.setattr(nvrtc, "_compile", counted)
    return seen


def _own_env(folder, header_value: str):
    """A .cu file of our own beside a header it includes in quotes."""
    (folder / "mine.cuh").write_text(f"#pragma once\n#define MINE {header_value}\n")
    return '#include "mine.cuh"\nextern "C" __global__ void k(float* x) { x[0] = MINE; }\n'


def test_a_second_compile_reads_the_cache(cache, compiles):
    spec = env_spec("CartPole-v1")
    source, folders = kernel_source(spec), include_dirs(spec.kernels.cuda)
    first = nvrtc.binary(source, "cartpole.cu", folders, H100)
    assert first.startswith(b"\x7fELF")  # a cubin
    assert [p.suffix for p in cache.iterdir()] == [".cubin"]
    assert nvrtc.binary(source, "cartpole.cu", folders, H100) == first
    assert compiles == ["cartpole.cu"]  # once


def test_an_edited_header_is_compiled_again(tmp_path, cache, compiles):
    folder = tmp_path / "env"
    folder.mkdir()
    source = _own_env(folder, "1.0f")
    one = nvrtc.binary(source, "mine.cu", [str(folder)], H100)
    assert nvrtc.binary(_own_env(folder, "1.0f"), "mine.cu", [str(folder)], H100) == one
    two = nvrtc.binary(_own_env(folder, "2.0f"), "mine.cu", [str(folder)], H100)
    assert compiles == ["mine.cu", "mine.cu"] and two != one
    assert len(list(cache.iterdir())) == 2


def test_a_compile_error_names_the_file_and_line(cache):
    source = 'extern "C" __global__ void k(float* x) {\n    x[0] = undeclared;\n}\n'
    with pytest.raises(RuntimeError, match=r"(?s)NVRTC could not compile broken\.cu.*broken\.cu\(2\).*undeclared"):
        nvrtc.binary(source, "broken.cu", [], H100)
    assert not cache.exists()  # nothing cached


def test_an_unwritable_cache_warns_and_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # no folder can be made under a file
    with pytest.warns(UserWarning, match="not cached"):
        code = nvrtc.binary('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n', "k.cu", [], H100)
    assert code.startswith(b"\x7fELF")


def test_no_partial_file_is_left_where_the_rename_fails(cache, monkeypatch):
    def refused(source, destination):
        raise PermissionError("rename refused")

    monkeypatch.setattr(nvrtc.os, "replace", refused)
    with pytest.warns(UserWarning, match="rename refused"):
        nvrtc.binary('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n', "k.cu", [], H100)
    assert list(cache.iterdir()) == []


def test_a_gpu_newer_than_nvrtc_gets_ptx(cache):
    from cuda.bindings import nvrtc as library

    newest = max(nvrtc._check(library.nvrtcGetSupportedArchs()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = nvrtc.binary('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n', "k.cu", [], (99, 9))
    assert b".entry k(" in code and f".target sm_{newest}".encode() in code
    assert [p.suffix for p in cache.iterdir()] == [".ptx"]
