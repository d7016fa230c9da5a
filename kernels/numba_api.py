"""The one place that imports Numba's CUDA target.

numba-cuda is in maintenance mode; when its successor (numba-cuda-mlir) gains a simulator, the
switch is this import.
"""

from numba import cuda
from numba.cuda.core.errors import NumbaPerformanceWarning

__all__ = ["cuda", "NumbaPerformanceWarning"]
