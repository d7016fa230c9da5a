"""Backend selection: ``"torch"`` (reference, CPU and GPU), ``"numba"`` (Numba CUDA kernels) and
``"pycuda"`` (CUDA C kernels). Each backend module is imported only when asked for, so the
optional CUDA packages stay optional."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import torch

# Fastest first: the default is the first one available on the device. The module of each backend
# tells whether it can run (``availability``); single-agent envs and multi-agent games each have
# their backend classes.
BACKENDS = {
    "pycuda": "gpu_marl_envs.backends.pycuda_backend",
    "numba": "gpu_marl_envs.backends.numba_backend",
    "torch": "gpu_marl_envs.backends.torch_backend",
}
BACKEND_CLASSES = {
    "single_agent": {
        "pycuda": "gpu_marl_envs.backends.pycuda_backend:PycudaBackend",
        "numba": "gpu_marl_envs.backends.numba_backend:NumbaBackend",
        "torch": "gpu_marl_envs.backends.torch_backend:TorchBackend",
    },
    "multi_agent": {
        "pycuda": "gpu_marl_envs.backends.multi_agent_pycuda:MultiAgentPycudaBackend",
        "numba": "gpu_marl_envs.backends.multi_agent_numba:MultiAgentNumbaBackend",
        "torch": "gpu_marl_envs.backends.multi_agent_torch:MultiAgentTorchBackend",
    },
}


def current_stream_getter(device_index: int) -> Callable[[], int]:
    """A call of no arguments that returns the handle of torch's current stream on a CUDA device, for
    the kernel backends' launches. ``torch.cuda.current_stream()`` builds a Python ``Stream`` (~5 µs,
    as much as a launch); the raw getter is what torch's own compiled kernels use, bound here to the
    device without a Python frame of ours (at small batches a launch's every frame counts)."""
    return functools.partial(torch._C._cuda_getCurrentRawStream, device_index)


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot run here; the message says what to install or change."""


# Which registered kernel source each kernel backend compiles (``registration.KernelSources``).
SOURCES = {"pycuda": ("cuda", "CUDA C"), "numba": ("numba", "Numba")}


def unavailable_reason(name: str, device: torch.device, spec=None) -> str | None:
    """Why backend ``name`` cannot run on ``device`` (for the registered env ``spec``, where given),
    saying what to install or change; None where it can."""
    if name == "torch":
        return None
    if spec is not None:
        field, language = SOURCES[name]
        if getattr(spec.kernels, field) is None:
            kind = "game" if spec.is_game else "env"
            return f"{spec.id} was registered without {language} kernels (register_{kind}(..., {field}=...))"
    return importlib.import_module(BACKENDS[name]).availability(device)


def available_backends(device: torch.device | str) -> list[str]:
    device = torch.device(device)
    return [name for name in BACKENDS if unavailable_reason(name, device) is None]


def resolve_backend(name: str | None, device: torch.device, spec):
    """The backend class for ``name`` on ``device`` (``None``: the fastest available there) for the
    registered env or game ``spec`` (a ``registration.RegisteredEnv``)."""
    if name is None:
        # Kernel backends on the CPU would be the simulator: never a sensible default.
        candidates = list(BACKENDS) if device.type == "cuda" else ["torch"]
        name = next(n for n in candidates if unavailable_reason(n, device, spec) is None)
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(map(repr, BACKENDS))} or None")
    problem = unavailable_reason(name, device, spec)
    if problem is not None:
        raise BackendUnavailableError(f"backend {name!r} is not available on {device}: {problem}")
    kind = "multi_agent" if spec.is_game else "single_agent"
    module_name, class_name = BACKEND_CLASSES[kind][name].split(":")
    return getattr(importlib.import_module(module_name), class_name)
