"""Training on several GPUs (or CPU processes) with ``torch.distributed``, launched by ``torchrun``.

Every process (a *rank*) runs the same trainer on its own device with its own envs: ``num_envs``
is per rank, ``total_timesteps`` counts the env steps of all ranks together. The ranks start from
rank 0's parameters, average their gradients before every optimizer step (so their parameters stay
identical), and reduce their metrics at each log interval; rank 0 alone calls ``log`` and
``save``. One process without ``torchrun`` is the same code with a world of one, where every
collective below is skipped.

    torchrun --standalone --nproc-per-node 2 -m gpu_marl_envs.baselines.train --env CartPole-v1

What a rank reads from ``torchrun`` (its environment variables ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_*``) is this module's business;
the trainers see a :class:`Context`.

Restarts (``torchrun --max-restarts N``): torchrun stops every rank when one fails and starts
them all again with the same command; the command resumes from the run's checkpoint. The process
group's ``timeout`` bounds how long a rank waits in a collective for a dead or frozen peer before
it fails, and with it the job or the restart. A restart must not reuse the first attempt's
rendezvous store (see :func:`launch_problem`).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from gpu_marl_envs.baselines.capture import between_graphs

RANK_SEED_STRIDE = 0x9E3779B9
"""The distance between the torch seeds of consecutive ranks (2**32 / golden ratio, odd)."""

DEFAULT_TIMEOUT = 600.0
"""Seconds a rank waits in a collective for the others (NCCL's default in PyTorch) before it fails."""
MAX_TIMEOUT = 365 * 24 * 3600.0
"""The longest timeout taken: a year (infinity overflows the process group's ``timedelta``)."""

UNNAMED_JOB = "none"
"""torchrun's ``--rdzv-id`` when none is given: the same for every job, so it names none."""


@dataclass(frozen=True)
class Context:
    """This process's place in a run, and the collectives the trainers use (no-ops on one rank)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device | None = None
    """The device this rank trains on (None on one rank without a choice: the env's default)."""
    launcher: int | None = None
    """Under ``torchrun``, the process id of its agent, which started this rank (its parent); else None."""

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes logs, curves and checkpoints."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def launcher_gone(self) -> bool:
        """Whether ``torchrun``'s agent that started this rank has died (the system gave this
        process another parent): the job is over, and a rank that trained on would write beside the
        next command in its folder. Checked at each history entry (:func:`rollout.pool_entry`)."""
        return self.launcher is not None and os.getppid() != self.launcher

    # -- seeds and sizes -------------------------------------------------------------------------

    def seed(self, seed: int, iteration: int = 0) -> int:
        """The seed of this rank's torch random numbers (sampling, shuffles, initial parameters
        before rank 0's are broadcast) in a run that starts at ``iteration`` (0, or where a resume
        continues): ``seed + iteration * world_size`` on rank 0 (so a fresh one-process run uses
        ``seed`` itself, and a start after the same env steps the same seed whatever the number of
        ranks), and ``RANK_SEED_STRIDE`` apart on the other ranks, far from any other start's seed.
        The stride is odd and below ``2**32``, so the ranks' seeds differ in their low 32 bits,
        all that torch's CPU generator (a Mersenne Twister) reads of a seed."""
        return seed + iteration * self.world_size + self.rank * RANK_SEED_STRIDE

    def env_seed(self, seed: int, iteration: int, num_envs: int) -> int:
        """The seed of this rank's ``num_envs`` envs when a run starts at ``iteration`` (0, or the
        iteration a resumed run continues from): sub-env ``i`` of rank ``r`` gets ``seed + (iteration
        * world_size + r) * num_envs + i`` (Gymnasium's vector seeding adds ``i``). ``iteration *
        world_size * num_envs`` is the number of sub-env rollouts the run has done, so no two
        sub-envs of a run share a seed, across ranks, resumes and resumes on other numbers of ranks."""
        return seed + (iteration * self.world_size + self.rank) * num_envs

    def iterations(self, total_timesteps: int, steps_per_iteration: int) -> int:
        """Iterations of a run of ``total_timesteps`` env steps over all ranks, where each rank
        steps ``steps_per_iteration`` per iteration; raises if that is not even one."""
        steps = steps_per_iteration * self.world_size
        if total_timesteps < steps:
            raise ValueError(
                f"total_timesteps ({total_timesteps}) must cover one iteration of all {self.world_size} "
                f"ranks ({steps_per_iteration} env steps each, {steps} in all)"
            )
        return total_timesteps // steps

    # -- collectives -----------------------------------------------------------------------------

    @property
    def _collective_device(self) -> torch.device:
        """Where tensors must be for the process group's backend: the GPU for NCCL, else the CPU."""
        if dist.get_backend() == dist.Backend.NCCL:
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def broadcast_parameters(self, *modules: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers into every rank's ``modules`` (in place)."""
        if not self.enabled:
            return
        with torch.no_grad():
            for module in modules:
                for tensor in [*module.parameters(), *module.buffers()]:
                    staged = tensor.detach().to(self._collective_device)
                    dist.broadcast(staged, src=0)
                    tensor.copy_(staged)

    def pool(self, sums: Sequence[float], maxima: Mapping[str, float]) -> tuple[list[float], dict[str, float]]:
        """Python numbers summed (``sums``) and maximised (``maxima``, by name) over the ranks, in one
        collective: a history entry's episode sums, losses and seconds. An all-gather, after which each
        rank adds the sums in rank order in float64, so that every rank reads the same values; on 4
        GPUs an entry was three collectives (sums, then seconds, then losses), each a host round trip
        while the GPUs idle."""
        sums, maxima = [float(v) for v in sums], dict(maxima)
        if not self.enabled:
            return sums, maxima
        device = self._collective_device
        # On a GPU, on a stream of its own: these host numbers wait for no GPU work, and so the
        # collective does not wait behind a rollout launched before it (rollout.iterate_overlapping).
        with torch.cuda.stream(torch.cuda.Stream(device)) if device.type == "cuda" else contextlib.nullcontext():
            local = torch.tensor([*sums, *maxima.values()], dtype=torch.float64, device=device)
            everyone = torch.empty(self.world_size * local.numel(), dtype=torch.float64, device=device)
            dist.all_gather_into_tensor(everyone, local)  # the ranks' vectors one after another (gloo: flat only)
            rows = everyone.view(self.world_size, -1).tolist()
        n = len(sums)
        totals = [sum(row[i] for row in rows) for i in range(n)]
        return totals, {name: max(row[n + k] for row in rows) for k, name in enumerate(maxima)}

    def sum_over_ranks(self, in_graph: bool = True):
        """A function that sums a tensor in place over the ranks (an all-reduce), issued where it
        is called (``in_graph``, so a captured phase captures it) or between the graphs of a cut
        phase (as :class:`GradientAverager` does); ``None`` on one process."""
        if not self.enabled:
            return None

        def all_reduce(tensor: torch.Tensor) -> None:
            def work():
                dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

            if in_graph:
                work()
            else:
                between_graphs(work)

        return all_reduce

    def agree(self, obj):
        """Rank 0's ``obj`` (any picklable value) on every rank: for decisions all ranks must share."""
        if not self.enabled:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=0, device=self._collective_device)
        return holder[0]

    def gather(self, obj) -> list:
        """Every rank's ``obj`` (any picklable value), in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        everyone = [None] * self.world_size
        dist.all_gather_object(everyone, obj)
        return everyone


SINGLE = Context()
"""A run of one process."""


def setup(device=None, timeout: float = DEFAULT_TIMEOUT) -> Context:
    """This process's :class:`Context`. Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment)
    it initialises the default process group unless it exists: NCCL when training on CUDA (``device``
    ``"cuda"``, or None with a GPU present), gloo on the CPU, with collectives that fail after
    ``timeout`` seconds of waiting; each rank trains on ``cuda:LOCAL_RANK``. Without ``torchrun``,
    and without a process group, a run of one process on ``device``. A process group created by the
    caller is used as it is."""
    if not dist.is_available():
        return Context(device=_as_device(device))
    if not dist.is_initialized():
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size == 1:
            return Context(device=_as_device(device), launcher=_launcher())
        problem = launch_problem()
        if problem is not None:
            raise RuntimeError(problem)
        local_rank = int(os.environ["LOCAL_RANK"])
        rank_device = _rank_device(device, local_rank, world_size)
        if rank_device.type == "cuda":
            torch.cuda.set_device(rank_device)
            # pycuda's primary-context helper picks the GPU named by CUDA_DEVICE (else GPU 0): the
            # pycuda backend's kernels must load on this rank's GPU.
            os.environ.setdefault("CUDA_DEVICE", str(local_rank))
            # NCCL's watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING, on by default) ends a rank whose
            # collective outlives the timeout.
            dist.init_process_group("nccl", device_id=rank_device, timeout=timedelta(seconds=timeout))
        else:
            dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
        return Context(dist.get_rank(), dist.get_world_size(), local_rank, rank_device, _launcher())
    world_size = dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    rank_device = _rank_device(device, local_rank, world_size) if world_size > 1 else _as_device(device)
    if world_size > 1 and rank_device.type == "cpu" and dist.get_backend() == dist.Backend.NCCL:
        raise ValueError(
            "the process group uses NCCL, which needs CUDA tensors: train on device='cuda', or "
            "initialise the process group with the gloo backend for CPU training"
        )
    if world_size > 1 and rank_device.type == "cuda":
        os.environ.setdefault("CUDA_DEVICE", str(rank_device.index))  # pycuda's kernels on this rank's GPU (above)
    return Context(dist.get_rank(), world_size, local_rank, rank_device, _launcher())


class LauncherGone(RuntimeError):
    """The ``torchrun`` agent of this rank's job has died: the rank stops (every rank, together)."""


def _launcher() -> int | None:
    """The pid of the ``torchrun`` agent that started this process (torchrun sets
    ``TORCHELASTIC_RUN_ID`` for its workers), else None."""
    return os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else None


def launch_problem() -> str | None:
    """Why this process's ``torchrun`` launch cannot restart its ranks safely, or None.

    With ``--max-restarts``, torchrun (2.13) hands its restarted ranks the same TCP store as the
    first attempt (its c10d rendezvous shares one store across rounds unless
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``; the static rendezvous always does), and the ranks'
    process group finds the first attempt's addresses there: gloo fails with "connectFullMesh ...
    Connection refused", NCCL likewise (pytorch/pytorch#135712). Without the shared store, rank 0
    hosts a fresh store at each attempt. A restarted job must also know its run folder by the job's
    name (``--rdzv-id``; ``--standalone`` makes one)."""
    if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) == 0:
        return None
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        return (
            "torchrun --max-restarts would restart the ranks on the first attempt's rendezvous store, where "
            "they fail to connect (pytorch/pytorch#135712): export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and use "
            "the c10d rendezvous (--standalone, or --rdzv-backend c10d)"
        )
    if os.environ.get("TORCHELASTIC_RUN_ID", UNNAMED_JOB) == UNNAMED_JOB:
        return "torchrun --max-restarts needs a name for the job, to find its run again: pass --rdzv-id <unique id>"
    return None


def job_id() -> str | None:
    """The ``torchrun`` job this process runs in (``TORCHELASTIC_RUN_ID``: the rendezvous id, a
    fresh UUID under ``--standalone``), the same across the job's restarts; None outside torchrun
    or where the id names no job (torchrun's default ``none``)."""
    job = os.environ.get("TORCHELASTIC_RUN_ID")
    return None if job in (None, UNNAMED_JOB) else job


def teardown() -> None:
    """Destroy the default process group, if there is one (every rank calls this at the end).

    Rank 0 may still be writing its curve or evaluating when the others finish: a barrier first.
    CUDA graphs that captured NCCL collectives hold the communicator until they are freed, and NCCL
    waits for them when it is destroyed: a garbage collection first frees the trainers' graphs."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        gc.collect()
        dist.destroy_process_group()


def _as_device(device) -> torch.device | None:
    return None if device is None else torch.device(device)


def _rank_device(device, local_rank: int, world_size: int) -> torch.device:
    requested = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if requested.type != "cuda":
        return requested
    if requested.index is not None and requested.index != local_rank:
        raise ValueError(
            f"with {world_size} ranks each rank trains on cuda:LOCAL_RANK (this one: cuda:{local_rank}), "
            f"not {requested}: pass device='cuda'"
        )
    return torch.device("cuda", local_rank)


class GradientAverager:
    """Averages the gradients of ``parameters`` over the ranks: one all-reduce of a flat buffer
    (the gradients copied in and back), called between ``loss.backward()`` and gradient clipping,
    so that every rank clips and steps with the same mean gradient.

    ``in_graph``: the all-reduce is issued where it is called, so a captured phase captures it
    (NCCL collectives can be captured in CUDA graphs). False: it runs through
    :func:`capture.between_graphs`, which cuts a captured phase there and runs the all-reduce
    between the replays of its pieces. Parameters without a gradient at that point (unused by the
    loss, on every rank alike) are left out."""

    def __init__(self, parameters, context: Context, in_graph: bool = True):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.context = context
        self.in_graph = in_graph
        self.flat = None
        if context.enabled and self.parameters:
            self.flat = torch.zeros(
                sum(p.numel() for p in self.parameters),
                dtype=self.parameters[0].dtype,
                device=self.parameters[0].device,
            )

    def __call__(self) -> None:
        if self.flat is None:
            return
        grads = [p.grad for p in self.parameters if p.grad is not None]
        flat = self.flat[: sum(g.numel() for g in grads)]
        torch.cat([g.reshape(-1) for g in grads], out=flat)
        if self.in_graph:
            self._all_reduce()
        else:
            between_graphs(self._all_reduce)
        flat.mul_(1.0 / self.context.world_size)
        # One multi-tensor copy rather than one per parameter: in a captured update, every kernel
        # of every gradient step is a graph node to launch.
        torch._foreach_copy_(grads, [part.view_as(g) for g, part in zip(grads, flat.split([g.numel() for g in grads]))])

    def _all_reduce(self) -> None:
        # The whole buffer, whichever prefix holds gradients now: the same call on every rank.
        dist.all_reduce(self.flat, op=dist.ReduceOp.SUM)
