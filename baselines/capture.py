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

Gradients: the trainers drop them (``zero_grad(set_to_none=True)``) before each backward pass, so
that the pass writes each one instead of adding it to a zeroed tensor (in place, as a gradient
kept from the step before would be): one zeroing kernel and an add per parameter fewer each
gradient step (the arithmetic is the same: ``0 + g`` is ``g``). In a captured phase the
gradients are then tensors of the graph's memory pool, made at capture and rewritten by every
replay: the exception to "nothing allocated outlives the phase", as in the whole-network capture
of ``torch.cuda.graphs``' documentation.

Work that a graph must not contain (a collective, when capturing it is off) goes through
:func:`between_graphs`: the capture is cut there, and the phase replays as a sequence of graphs
with that work run between them.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from gpu_marl_envs.baselines.fused_mlp import AUTO_MIN_ROWS
from gpu_marl_envs.baselines.optimizers import Optimizer

Phase = Callable[[], dict[str, torch.Tensor]]


@contextlib.contextmanager
def float32_matmul_precision(tf32: bool):
    """Float32 matrix products on TF32 tensor cores (``tf32``) or in full float32 inside the
    context, torch's global setting restored afterwards."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


@dataclass(frozen=True)
class CaptureOptions:
    """How the trainers run their phases (fields shared by their configs)."""

    cuda_graph: bool = True
    """On CUDA, replay each rollout and each update as one CUDA graph (DDPG and TD3: each vector
    step, and each iteration's gradient steps); ignored on the CPU."""
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
    fused_mlp: bool | Literal["auto"] = "auto"
    """Run the default actor and critic (two tanh hidden layers of one width up to 64) as two
    Triton kernels per pass (``fused_mlp.py``) that keep each block's activations in registers
    instead of writing every layer's to GPU memory. ``"auto"`` (the default): where they gain, i.e.
    float32 passes on CUDA with TF32 products, of policies of that shape whose update minibatches
    have at least ``fused_mlp.AUTO_MIN_ROWS`` rows, with Triton installed; ``true``: wherever they
    can run (a policy of another shape is an error); ``false``: PyTorch's layers. Passes under
    ``bf16`` or ``compile``, and on the CPU, run the layers whatever the setting."""
    graph_allreduce: bool | Literal["auto"] = "auto"
    """On several GPUs with ``cuda_graph``: true, the NCCL all-reduce that averages the ranks'
    gradients is captured inside the update's graph; false, the update's graph is cut at each
    all-reduce, which runs between the replays of the pieces (also for NCCL builds that cannot
    capture collectives; one more launch per gradient step). ``"auto"`` (the default): false for
    the single-agent trainers, true for the multi-agent one (:meth:`graph_allreduce_setting`). No
    effect on one GPU or the CPU."""

    def graph_allreduce_setting(self, multi_agent: bool) -> bool:
        """``graph_allreduce`` as a trainer applies it: ``"auto"`` is what measured faster on 2 and 4
        H100s in one call (docs/benchmarks/multi-gpu.md): PPO on CartPole scaled 1.90x and
        3.75x with the all-reduce between replays against 1.84x and 3.56x inside the graph; Tag's
        A2C 1.98x and 3.94x inside against 1.96x and 3.92x between (its policies' updates, forked
        branches of one graph, would run one after another if cut)."""
        return multi_agent if self.graph_allreduce == "auto" else self.graph_allreduce

    def fused_mlp_setting(self, minibatch_rows: int) -> bool | str:
        """``fused_mlp`` as the trainers apply it to a policy whose update minibatches have
        ``minibatch_rows`` rows: ``"auto"`` turns into false where the kernels do not gain, i.e.
        below ``fused_mlp.AUTO_MIN_ROWS`` rows (see there) and under ``tf32=false``, whose
        full-float32 products they run slower than cuBLAS does (on an H200, PPO on CartPole at
        4,096 x 128: 13.4 M env-steps/s against 18.8 M with PyTorch's layers, in separate runs)."""
        if self.fused_mlp == "auto" and (not self.tf32 or minibatch_rows < AUTO_MIN_ROWS):
            return False
        return self.fused_mlp

    def autocast(self, device: torch.device):
        """A context for the policies' forward passes: bfloat16 autocast when ``bf16``, else nothing.
        (Only forward passes: PyTorch advises against running backward under autocast.)"""
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def compiled(self, fn):
        return torch.compile(fn) if self.compile else fn

    def matmul_precision(self):
        """The run's float32 matmul precision, restored afterwards (torch's setting is global)."""
        return float32_matmul_precision(self.tf32)


def make_optimizer(
    optimizer_type: type[Optimizer], parameters, learning_rate: float, device: torch.device, captured: bool, **kwargs
) -> Optimizer:
    """``optimizer_type`` (:class:`~gpu_marl_envs.baselines.optimizers.Adam` or ``RMSprop``) whose
    learning rate a captured update can see change: in a graph it is a device tensor (set it with
    :func:`set_learning_rate`)."""
    rate = torch.tensor(learning_rate, device=device) if captured else learning_rate
    return optimizer_type(parameters, lr=rate, **kwargs)


def set_learning_rate(optimizer: Optimizer, value: float) -> None:
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
        try:
            yield
        finally:
            # Joined on an error too: a capture that a branch's error cuts short can then still be
            # ended, which also ends the capture's use of the CUDA random generator (an unended
            # one fails every later random draw of the process: "Offset increment outside graph
            # capture").
            for stream in self.streams.values():
                current.wait_stream(stream)

    def branch(self, name):
        return torch.cuda.stream(self.streams[name]) if self.streams else contextlib.nullcontext()


_capturing: contextvars.ContextVar[GraphedPhase | None] = contextvars.ContextVar("capturing", default=None)


def between_graphs(work: Callable[[], None]) -> None:
    """Run ``work`` (host-driven GPU work that must stay out of CUDA graphs) at this point of a
    phase: at once, unless a :class:`GraphedPhase` is being captured; then the capture is cut here
    and each replay runs the graph so far, ``work``, then the graph of the rest."""
    phase = _capturing.get()
    if phase is None:
        work()
    else:
        phase._cut(work)


class GraphedPhase:
    def __init__(self, phase: Phase, device: torch.device, enabled: bool = True):
        self.phase = phase
        self.enabled = enabled and device.type == "cuda"
        self.device = device
        self._graphs: list[torch.cuda.CUDAGraph] = []  # the pieces, replayed in order
        self._between: list[Callable[[], None]] = []  # the work after each piece but the last
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
        if not self._graphs:
            self._capture()
        for graph, work in zip(self._graphs, [*self._between, None]):
            graph.replay()
            if work is not None:
                work()
        return self._outputs

    @property
    def pieces(self) -> int:
        """The graphs a replay runs: 0 before the capture and after :meth:`release`."""
        return len(self._graphs)

    def release(self) -> None:
        """Free the captured graphs (a later call warms up and captures again). NCCL waits, when its
        process group is destroyed, for the graphs that captured its collectives: a run that ends
        while its phases stay referenced (a LightningModule after ``fit``) releases them here."""
        for graph in self._graphs:
            graph.reset()
        self._graphs, self._between, self._outputs, self._warmed_up = [], [], {}, False

    def _capture(self) -> None:
        """Capture records the work without doing it: the replay that follows does this call's work.
        What ``torch.cuda.graph`` does, with room for cuts: the pieces share one memory pool (a
        tensor made in one piece may be used in the next) and one capture stream."""
        torch.cuda.synchronize(self.device)
        # No automatic garbage collection during the capture: one there can free an earlier run's
        # CUDA graphs (a trainer's phases sit in reference cycles), and destroying a graph while a
        # stream captures is a CUDA error that invalidates the capture (seen on an H200: the third
        # of three MAPPO runs in one process failed its first update's capture, "operation not
        # permitted when stream is capturing", from CUDAGraph.reset). The collector runs again
        # after it. (Not a gc.collect() before it: some 90 ms a capture in a trainer's process,
        # against a fresh start's target of 2 s.)
        collecting = gc.isenabled()
        gc.disable()
        torch.cuda.empty_cache()
        self._pool = torch.cuda.graph_pool_handle()
        self._stream = torch.cuda.Stream(self.device)
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        token = _capturing.set(self)
        try:
            with torch.cuda.stream(self._stream):
                self._begin_piece()
                try:
                    self._outputs = self.phase()
                except BaseException:
                    # Ending a capture that the phase's error cut short can fail too (e.g. a stream
                    # of the phase's own left unjoined; Branches joins its streams even on errors):
                    # the phase's error (an out-of-memory, say) is the one to report, not
                    # "capturing stream has unjoined work".
                    with contextlib.suppress(Exception):
                        self._graphs[-1].capture_end()
                    raise
                self._graphs[-1].capture_end()
        except BaseException:
            self._graphs, self._between = [], []  # a failed capture leaves no partial graph to replay
            raise
        finally:
            _capturing.reset(token)
            if collecting:
                gc.enable()
        torch.cuda.current_stream(self.device).wait_stream(self._stream)

    def _begin_piece(self) -> None:
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(self._pool)
        self._graphs.append(graph)

    def _cut(self, work: Callable[[], None]) -> None:
        self._graphs[-1].capture_end()
        self._between.append(work)
        self._begin_piece()
