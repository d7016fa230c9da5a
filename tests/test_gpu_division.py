"""The kernels' float32 division on a GPU (``pytest -m gpu``): ``gme_divide`` (kernels/float32.cuh)
and its Numba twin (``numba_api.divide``) with a corrected reciprocal, for every one of the 2**32
float32 dividends, against the GPU's own correctly rounded division. ``float32.corrected_reciprocal``
proves the correction for the dividends within ``CORRECTED_DIVIDENDS`` on the CPU (one binade, scaled
by powers of two); this checks the kernels' code itself, every branch and special value included."""

import functools

import numpy as np
import pytest
import torch

from gpu_marl_envs import float32
from gpu_marl_envs.backends import pycuda_backend
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams

pytestmark = pytest.mark.gpu

DEFAULTS = TagContinuousParams()
# TagContinuous's position and direction scales, and divisors below, at and above one.
DIVISORS = [DEFAULTS.position_scale, DEFAULTS.two_pi, 1.5, 0.1, 1000.0]

SOURCE = """
#include "float32.cuh"
extern "C" __global__ void count_mismatches(float divisor, float reciprocal, unsigned long long* count) {
    unsigned long long mismatches = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (1ull << 32);
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float x = __uint_as_float((unsigned)i);
        float got = gme_divide(x, divisor, reciprocal, false), want = __fdiv_rn(x, divisor);
        mismatches += __float_as_uint(got) != __float_as_uint(want) && !(got != got && want != want);
    }
    if (mismatches) atomicAdd(count, mismatches);
}
"""


@functools.cache
def _cuda_c_kernel():
    import pycuda.autoprimaryctx  # noqa: F401  (torch's primary context)
    from pycuda.compiler import SourceModule

    defines = "".join(f"#define {k} {v}\n" for k, v in pycuda_backend.runtime_definitions().items())
    module = SourceModule(defines + SOURCE, include_dirs=[pycuda_backend.kernel_dir()], no_extern_c=True)
    return module.get_function("count_mismatches")


@functools.cache
def _numba_kernel():
    from gpu_marl_envs.kernels.numba_api import cuda, divide, float_as_int, int_as_float

    @cuda.jit
    def count_mismatches(divisor, reciprocal, count):
        for i in range(cuda.grid(1), 2**32, cuda.gridsize(1)):
            x = int_as_float(np.int32(i - 2**31))
            got, want = divide(x, divisor, reciprocal, False), x / divisor
            if float_as_int(got) != float_as_int(want) and not (got != got and want != want):
                cuda.atomic.add(count, 0, 1)

    return count_mismatches


@pytest.mark.parametrize("divisor", DIVISORS)
def test_cuda_c_division_by_a_corrected_reciprocal_is_exact_for_every_float(divisor, cuda_device):
    pytest.importorskip("pycuda")
    count = torch.zeros(1, dtype=torch.int64, device=cuda_device)
    reciprocal = float32.corrected_reciprocal(divisor)
    assert reciprocal != 0.0
    _cuda_c_kernel()(
        np.float32(divisor), np.float32(reciprocal), np.uintp(count.data_ptr()), block=(256, 1, 1), grid=(4096, 1)
    )
    torch.cuda.synchronize()
    assert count.item() == 0


@pytest.mark.parametrize("divisor", DIVISORS)
def test_numba_division_by_a_corrected_reciprocal_is_exact_for_every_float(divisor, cuda_device):
    pytest.importorskip("numba.cuda")
    count = torch.zeros(1, dtype=torch.int64, device=cuda_device)
    reciprocal = float32.corrected_reciprocal(divisor)
    _numba_kernel()[4096, 256](np.float32(divisor), np.float32(reciprocal), count)
    torch.cuda.synchronize()
    assert count.item() == 0
