"""The one place that imports Numba's CUDA target.

numba-cuda is in maintenance mode; when its successor (numba-cuda-mlir) gains a simulator, the
switch is this import.
"""

from numba import cuda

__all__ = ["cuda"]
