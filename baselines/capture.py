"""Replaying a trainer's phase (a whole rollout, a whole update) as one CUDA graph.

A phase is a function without arguments that reads and writes only tensors that live for the whole
run (the env's buffers, the rollout storage, the parameters and optimizer state) and returns a dict
of tensors. Its first call runs eagerly on a side stream (it compiles kernels, creates the
optimizer's state and the gradients, fills cuBLAS's workspace), the second captures it, and every
call from then on replays the graph: one launch instead of thousands. What a replay returns are the
same tensors each time, overwritten by the next replay.

So that a captured phase stays valid, it must not synchronise with the host, branch in Python on
tensor values, or allocate a tensor that outlives it; Python numbers it reads are frozen at capture
(schedule values such as the learning rate are device tensors, updated in place between calls).
On the CPU, or with ``enabled=False``, the phase simply runs each time.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch

Phase = Callable[[], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class CaptureOptions:
    """How the on-policy trainers run their phases (fields shared by their configs)."""

    cuda_graph: bool = True
    """On CUDA, replay each rollout and each update as one CUDA graph (ignored on the CPU)."""
    compile: bool = False
    """``torch.compile`` the policy, the advantages and the loss, fusing their small kernels
    (compiling takes a minute or so)."""
    tf32: bool = True
    """Float32 matrix products on TF32 tensor cores (10-bit mantissa inputs, float32 accumulation),
    as JAX does by default on NVIDIA GPUs (and PyTorch did before 1.12): several times faster for
    wide networks; false: full float32 products."""

    bf16: bool = False
    """Run the policies' forward passes (the rollout's sampling; values, log-probabilities and
    losses in the update) in bfloat16 autocast: half the memory traffic of wide networks'
    activations and faster tensor-core products, at bfloat16's 8-bit mantissa. The sampling noise,
    the advantages, the parameters, gradients and optimizer stay float32. Off by default."""

    def autocast(self, device: torch.device):
        """A context for the policies' forward passes: bfloat16 autocast when ``bf16``, else nothing.
        (Only forward passes: PyTorch advises against running backward under autocast.)"""
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def compiled(self, fn):
        return torch.compile(fn) if self.compile else fn

    @contextlib.contextmanager
    def matmul_precision(self):
        """The run's float32 matmul precision, restored afterwards (torch's setting is global)."""
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before)


def make_optimizer(optimizer_type, parameters, learning_rate: float, device: torch.device, captured: bool, **kwargs):
    """``optimizer_type`` (Adam, RMSprop) whose learning rate a captured update can see change:
    in a graph it is a device tensor (set it with :func:`set_learning_rate`). On CUDA, Adam runs
    its fused implementation (one kernel per step instead of a dozen)."""
    if device.type == "cuda" and optimizer_type is torch.optim.Adam:
        kwargs["fused"] = True
    if captured:
        return optimizer_type(parameters, lr=torch.tensor(learning_rate, device=device), capturable=True, **kwargs)
    return optimizer_type(parameters, lr=learning_rate, **kwargs)


def set_learning_rate(optimizer: torch.optim.Optimizer, value: float) -> None:
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)  # in place: the captured update reads this tensor
        else:
            group["lr"] = value


class Branches:
    """Independent pieces of a phase (one per policy) on CUDA streams of their own, forked from the
    current stream and joined back into it. Inside a captured phase they become parallel branches
    of the graph, so one policy's small kernels no longer wait for the other's; on the CPU they
    simply run one after another.

        with branches.fork():
            for name in names:
                with branches.branch(name):
                    ...  # reads what the current stream wrote before the fork; the current stream sees it after
    """

    def __init__(self, names, device: torch.device):
        self.streams = {name: torch.cuda.Stream(device) for name in names} if device.type == "cuda" else {}

    @contextlib.contextmanager
    def fork(self):
        if not self.streams:
            yield
            return
        current = torch.cuda.current_stream()
        for stream in self.streams.values():
            stream.wait_stream(current)
        yield
        for stream in self.streams.values():
            current.wait_stream(stream)

    def branch(self, name):
        return torch.cuda.stream(self.streams[name]) if self.streams else contextlib.nullcontext()


class GraphedPhase:
    def __init__(self, phase: Phase, device: torch.device, enabled: bool = True):
        self.phase = phase
        self.enabled = enabled and device.type == "cuda"
        self.device = device
        self._graph: torch.cuda.CUDAGraph | None = None
        self._outputs: dict[str, torch.Tensor] = {}
        self._warmed_up = False

    def __call__(self) -> dict[str, torch.Tensor]:
        if not self.enabled:
            return self.phase()
        if not self._warmed_up:
            # Warm-up on a side stream, as torch.cuda.graphs' documentation asks.
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                outputs = self.phase()
            torch.cuda.current_stream(self.device).wait_stream(side)
            self._warmed_up = True
            return outputs
        if self._graph is None:
            self._graph = torch.cuda.CUDAGraph()
            # Capture records the work without doing it: the replay below does this call's work.
            with torch.cuda.graph(self._graph):
                self._outputs = self.phase()
        self._graph.replay()
        return self._outputs
