import os

import torch

if not torch.cuda.is_available():  # Numba's kernels run in its CUDA simulator (set before numba is imported)
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
