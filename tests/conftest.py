"""Shared parametrisation: every env x every backend that can run here.

Without a GPU, Numba kernels run under Numba's CUDA simulator and Triton kernels (the fused MLP)
in Triton's interpreter, both switched on before numba and triton are first imported (hence here,
at collection: the adapters' libraries import triton). ``pytest -m gpu`` on a CUDA machine runs the
GPU-marked tests with every backend on the device instead.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

import gpu_marl_envs  # noqa: E402

ENV_IDS = sorted(spec.definition.id for spec in gpu_marl_envs.ENVS.values())  # the registry's, by name
HAS_GPU = torch.cuda.is_available()
CPU_BACKENDS = gpu_marl_envs.available_backends("cpu")  # torch, and numba under the simulator
KERNEL_BACKENDS_HERE = [b for b in CPU_BACKENDS if b != "torch"]
GPU_BACKENDS = gpu_marl_envs.available_backends("cuda") if HAS_GPU else []


@pytest.fixture(autouse=True, scope="session")
def sb3_log_folder(tmp_path_factory):
    """Stable-Baselines3's loggers write into this session's temporary folder: without a folder of
    their own they would each leave an empty one in the system's (tempdir/SB3-<date>)."""
    folder = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3"))
    yield
    if folder is None:
        del os.environ["SB3_LOGDIR"]
    else:
        os.environ["SB3_LOGDIR"] = folder


@pytest.fixture(params=ENV_IDS)
def env_id(request):
    return request.param


@pytest.fixture
def full_float32():
    """Products in full float32 on both sides (TF32 would differ from the layers by its rounding)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


@pytest.fixture
def cuda_device():
    """For tests marked ``gpu``: fail, never skip, where no GPU is to be had."""
    assert HAS_GPU, "tests marked gpu need a CUDA GPU; without one run plain pytest (which deselects them)"
    return torch.device("cuda")


@pytest.fixture
def one_thread():
    """torch on one intra-op thread: loops of tiny tensors (the adapters' learning checks) only pay
    hand-offs for more, and stall on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
