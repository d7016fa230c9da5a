"""What the benchmark scripts share: the GPU they ran on, the shipped configs they run, their common options
and where their results go."""

from __future__ import annotations

import argparse
import contextlib
import json

import torch
from gpu_marl_envs.baselines.run_config import CONFIGS, build_config, read_config

import gpu_marl_envs.backends.multi_agent_numba as numba_backend
import gpu_marl_envs.backends.multi_agent_pycuda as pycuda_backend


def gpu_hardware() -> str:
    """``"<GPU>, <SMs> SMs, torch <version>"`` of CUDA device 0; exits where there is no GPU."""
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    props = torch.cuda.get_device_properties(0)
    return f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}"


def cuda_us(fn, repeats: int, warmup: int = 3) -> float:
    """µs per call of ``fn()`` on the GPU: ``warmup`` calls first (compiles, autotuning), then
    ``repeats`` timed with CUDA events, the device synchronised after."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return 1000 * start.elapsed_time(end) / repeats


def shipped(name: str, overrides: list[str] = (), seed: int | None = None):
    """A shipped config (``baselines/configs/<name>``) with ``--set``-style overrides: ``(algorithm, env, config)``."""
    return build_config(read_config(CONFIGS / name), list(overrides), seed)


def add_output_options(
    parser: argparse.ArgumentParser, min_seconds: float | None = None, repeats: int | None = None
) -> None:
    """The options the benchmarks share: ``--out`` and ``--json``, where :func:`save` writes, and
    where a benchmark times repeats, ``--min-seconds`` and ``--repeats`` with its defaults."""
    if min_seconds is not None:
        parser.add_argument(
            "--min-seconds",
            type=float,
            default=min_seconds,
            help=f"the least length of one timed repeat, in seconds (default {min_seconds:g})",
        )
    if repeats is not None:
        parser.add_argument(
            "--repeats", type=int, default=repeats, help=f"timed repeats, whose median is reported (default {repeats})"
        )
    parser.add_argument("--out", help="write the markdown table here")
    parser.add_argument("--json", help="write the raw results here")


def save(args, text: str, record: dict) -> None:
    """The markdown ``text`` to ``args.out`` and ``record`` to ``args.json``, each where given."""
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


@contextlib.contextmanager
def module_constants(module, **values):
    """A game module's kernel constants (not params: ``tag_continuous_kernel_layout.AGENTS_PER_CELL``,
    ``mpe_physics.PACKED_BLOCK_THREADS``, ...) set to ``values`` for the kernels built inside, as the
    sweeps of the rules' measurements need; the backends build kernels per params, so their caches
    are cleared on the way in and out."""
    chosen = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    pycuda_backend._module.cache_clear()
    numba_backend._kernels.cache_clear()
    try:
        yield
    finally:
        for name, value in chosen.items():
            setattr(module, name, value)
        pycuda_backend._module.cache_clear()
        numba_backend._kernels.cache_clear()
