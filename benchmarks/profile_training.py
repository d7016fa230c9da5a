"""Where a training iteration's milliseconds go (issue 44): shipped configs trained as a user would
(``gpu-marl-train``'s train functions, CUDA graphs on as shipped), a few iterations recorded under
``torch.profiler``, and per iteration:

- **wall**: ms per iteration from the run's own history (its entries' ``seconds``: each waits for
  the GPU's end of its iteration), over ``--iterations`` iterations after ``--warmup`` ones
  (graph capture and compilation done), without the profiler; **traced wall** likewise over the
  ``--iterations`` traced ones that follow (the profiler's own cost is the difference);
- **GPU busy**: the union of the traced kernels', memcpys' and memsets' intervals, per iteration;
- **host gap**: traced wall minus GPU busy, the time the GPU waits for the host (launches, Python,
  synchronisations);
- **kernels**: device events per iteration; **GPU time by category** (sums of durations: branches
  of a graph that run side by side can make them exceed GPU busy), and the kernels that take most.

Categories go by kernel name (``CATEGORIES``, first match wins, "other" for the rest). CUDA graph
replays hide their ops from the profiler's CPU side, but CUPTI still records the kernels they run,
by name. GAE's kernels are PyTorch's elementwise kernels, which no name tells apart: the script
brackets the trainers' ``compute_gae`` with a marker kernel on each side that nothing else runs
(``torch.cuda._sleep(0)``'s "spin_kernel" before, ``torch._assert_async`` of a true int16 after: two
launches more in the captured update) and counts what runs between them on a stream as GAE (while a
policy's GAE runs, also those of another policy's graph branch that the profile shows on the same
stream). On-policy runs also give their GPU-timed rollout and update ms
(``PhaseTimes``). Runs log every iteration as ``train_throughput.py``'s do (one host
synchronisation per iteration), DDPG every fiftieth of its run as ``gpu-marl-train`` does.

Cases (``--case``, default all): ``cartpole_ppo`` (``cartpole_ppo.toml`` at 4,096 envs x 128 steps:
train_throughput's "PPO CartPole 4096x128"), ``tag_a2c`` (``tag_continuous_a2c.toml``, WarpDrive's
A2C settings at 1,000 games x 50 steps, pycuda: train_throughput's ``tag_a2c(1000, 50)``),
``pendulum_ddpg`` (``pendulum_ddpg.toml`` as shipped). ``--set key=value`` overrides every case's
config. With ``--device cpu`` (tiny sizes through ``--set``) the "kernels" are the profile's CPU ops,
each with its time less that of the ops it calls: a check of the script, not a profile of anything.

    python benchmarks/profile_training.py --out profile.md --json profile.json --trace traces/
    python benchmarks/profile_training.py --device cpu --case cartpole_ppo --set num_envs=4 --set num_steps=8 \\
        --warmup 1 --iterations 2 --out profile.md
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import os
import re
import tempfile
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import torch
from gpu_marl_envs.baselines import ddpg, multi_agent, on_policy
from gpu_marl_envs.baselines.run_config import config_dict, train_function
from gpu_marl_envs.baselines.sizing import iteration_steps
from report import add_output_options, gpu_hardware, save, shipped
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from gpu_marl_envs.registration import env_spec, game_spec, is_game

CASES = {
    # The budget only has to cover a rollout here: the run's length is the windows' (profile_case).
    "cartpole_ppo": ("cartpole_ppo.toml", ["num_envs=4096", "num_steps=128", f"total_timesteps={4096 * 128}"], None),
    "tag_a2c": ("tag_continuous_a2c.toml", ["num_envs=1000", "num_steps=50"], "pycuda"),
    "pendulum_ddpg": ("pendulum_ddpg.toml", [], None),
}
"""name: (shipped config, overrides, backend on CUDA)."""

GAE = "GAE"
GAE_BEGIN, GAE_END = "profile_training.gae_begin", "profile_training.gae_end"
"""The CPU profile's ranges that mark GAE's start and end."""
MARKERS = {GAE_BEGIN: 1, GAE_END: -1, "spin_kernel": 1, "_assert_async_cuda_kernel<short>": -1}
"""Names (parts of the kernels' names on CUDA) of GAE's start (+1) and end (-1) markers. The end's
kernel asserts on an int16, a type no other assertion of the trainers uses (torch.multinomial's
asserts on a bool)."""
MEMORY_ACTIVITIES = {"gpu_memcpy": "memcpy/memset", "gpu_memset": "memcpy/memset"}
"""Device activities that are no kernels: categorised by their kind, not their name."""
CATEGORIES = (
    # torch._fused_adam_ (baselines/optimizers.py), and the foreach kernels of its step count,
    # gradient clipping and DDPG's soft target update; aten::_fused_adam_, aten::_foreach_* on the CPU.
    ("optimizer (fused Adam, foreach)", r"FusedAdam|fused_adam|multi_tensor_apply|_foreach_"),
    # cuBLAS (gemm, gemv, its split-K reduction; nvjet/xmma/cutlass on Hopper), the Triton fused MLP
    # passes of baselines/mlp_kernels.py (forward, backward) and policy_kernels.py's backward pieces.
    (
        "GEMM (cuBLAS, fused MLP)",
        r"gemm|gemv|splitK|nvjet|xmma|cutlass|cublas|^(forward|backward|activation_backward_and_bias|"
        r"tanh_value_head_backward)$|^aten::(mm|addmm|bmm|baddbmm)$",
    ),
    # Random draws (torch's distribution kernels, Philox), categorical sampling (policy_kernels'
    # gumbel_argmax, multinomial) and PPO's minibatch permutation (rand().argsort(): radix sorts).
    (
        "sampling/RNG",
        r"distribution_|philox|multinomial|gumbel|[Ss]ort|^aten::(rand|randn|rand_like|randn_like|normal_|"
        r"uniform_|exponential_|multinomial|argsort|sort)$",
    ),
    # PyTorch's elementwise, reduction, indexing, concatenation and scan kernels.
    (
        "elementwise/reduction",
        r"elementwise|reduce|Reduce|CatArrayBatchedCopy|index|gather|scatter|[Ss]oft[Mm]ax|scan|cumsum|"
        r"cummax|where|clamp|^aten::",
    ),
)
"""(category, pattern of kernel names on CUDA and of op names on the CPU), first match wins; before
them, GAE (between the markers) and the env's kernels (``<kernel_name>_step``, ``_reset``)."""
OTHER = "other"
TOP_KERNELS = 10


def env_category(env_id: str) -> tuple[str, str]:
    """The env's kernels: ``<kernel_name>_step`` and ``_reset`` (:attr:`RegisteredEnv.kernel_name`)."""
    spec = game_spec(env_id) if is_game(env_id) else env_spec(env_id)
    return "env step", rf"{spec.kernel_name}_(step|reset)"


@functools.cache
def true_on(device: torch.device) -> torch.Tensor:
    """A true int16 on ``device`` (made at the first, uncaptured, call: the graph then reads it)."""
    return torch.ones((), dtype=torch.int16, device=device)


def mark_gae(device: torch.device, begin: bool) -> None:
    """GAE's start or end in the profile: a range on the CPU, and on CUDA a kernel that only the
    markers run (see :data:`MARKERS`)."""
    with record_function(GAE_BEGIN if begin else GAE_END):
        if device.type == "cuda" and begin:
            torch.cuda._sleep(0)
        elif device.type == "cuda":
            torch._assert_async(true_on(device))


def marked(gae):
    """``gae`` between GAE's markers (see the module's docstring)."""

    def marked_gae(rewards, *args, **kwargs):
        mark_gae(rewards.device, begin=True)
        result = gae(rewards, *args, **kwargs)
        mark_gae(rewards.device, begin=False)
        return result

    return marked_gae


@dataclasses.dataclass
class Span:
    """One device event: a kernel, memcpy or memset on CUDA; an op on the CPU."""

    name: str
    start: int  # ns
    end: int
    lane: int  # the stream (CUDA) or thread (CPU) it ran on
    kind: str  # the profiler's activity type
    own: int  # ns of its own: its length, less (on the CPU) the ops it calls

    @property
    def marker(self) -> int:
        """+1 at GAE's start marker, -1 at its end marker, else 0."""
        return next((step for name, step in MARKERS.items() if name in self.name), 0)


def device_spans(trace: dict, device: torch.device) -> list[Span]:
    """The kernels, memcpys and memsets of a CUDA profile; on the CPU, the ops (and GAE markers),
    each owning its time less that of the ops it calls (so that nested ops are not counted twice).
    ``trace`` is the profile's Chrome trace (``export_chrome_trace``): its event kinds ("cat") are
    the same in every torch release, where ``_KinetoEvent``'s accessors are not (2.11 has no
    ``activity_type``)."""

    def span(event: dict) -> Span:
        start, length = round(1000 * event["ts"]), round(1000 * event["dur"])
        return Span(event["name"], start, start + length, event["tid"], event["cat"], own=length)

    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    if device.type == "cuda":
        return [span(e) for e in events if e.get("cat") in ("kernel", *MEMORY_ACTIVITIES)]
    ops = sorted(
        (span(e) for e in events if e.get("cat") == "cpu_op" or e["name"] in (GAE_BEGIN, GAE_END)),
        key=lambda s: (s.lane, s.start, -s.end),
    )
    open_ops: list[Span] = []  # the ops that contain the one at hand, innermost last
    for op in ops:
        while open_ops and (open_ops[-1].lane != op.lane or open_ops[-1].end <= op.start):
            open_ops.pop()
        if open_ops:
            open_ops[-1].own -= op.end - op.start
        open_ops.append(op)
    return ops


def busy_ns(spans: list[Span]) -> int:
    """The length of the union of the spans' intervals."""
    total, reached = 0, None
    for span in sorted(spans, key=lambda s: s.start):
        if reached is None or span.start > reached:
            total += span.end - span.start
            reached = span.end
        elif span.end > reached:
            total += span.end - reached
            reached = span.end
    return total


def categorise(spans: list[Span], patterns: list[tuple[str, re.Pattern]]) -> list[tuple[str, Span]]:
    """Each span's category: GAE from a start marker to an end marker on its lane (GAEs of several
    policies may overlap there), memcpy/memset by kind, else the first pattern its name matches,
    else "other"."""
    running = defaultdict(int)  # the GAEs under way on each lane
    named = []
    for span in sorted(spans, key=lambda s: (s.lane, s.start)):
        running[span.lane] += span.marker
        if span.marker or running[span.lane] > 0:
            named.append((GAE, span))
        elif span.kind in MEMORY_ACTIVITIES:
            named.append((MEMORY_ACTIVITIES[span.kind], span))
        else:
            named.append((next((c for c, p in patterns if p.search(span.name)), OTHER), span))
    return named


def breakdown(spans: list[Span], iterations: int, env_id: str, top_kernels: int = TOP_KERNELS) -> dict:
    """Per-iteration numbers of the traced spans (see the module's docstring), with the
    ``top_kernels`` kernels that take most."""
    patterns = [(c, re.compile(p)) for c, p in (env_category(env_id), *CATEGORIES)]
    by_category, by_kernel = defaultdict(int), defaultdict(lambda: [0, 0])
    for category, span in categorise(spans, patterns):
        by_category[category] += span.own
        kernel = by_kernel[(category, span.name)]
        kernel[0] += span.own
        kernel[1] += 1
    ms = 1e-6 / iterations
    order = [GAE, "env step", *(c for c, _ in CATEGORIES), "memcpy/memset", OTHER]
    top = sorted(by_kernel.items(), key=lambda item: -item[1][0])[:top_kernels]
    return {
        "gpu_busy_ms": busy_ns(spans) * ms,
        "kernels": len(spans) / iterations,
        "categories_ms": {c: by_category[c] * ms for c in order},
        "top_kernels": [
            {"name": name, "category": category, "ms": total * ms, "calls": calls / iterations}
            for (category, name), (total, calls) in top
        ],
    }


class Finished(Exception):
    """Raised from the trainer's log once the traced window is over: the run stops there."""


def warmup_default(config, extra: int) -> int:
    """Iterations before the windows: ``extra``, after DDPG's random-action iterations and the
    iterations in which each of its update graphs is captured (at its second use)."""
    if isinstance(config, ddpg.DDPGConfig):
        learning = -(-config.learning_starts // config.num_envs)
        return learning + 2 * config.policy_frequency + extra
    return extra


def profile_case(name: str, args, device: torch.device) -> dict:
    """Train case ``name`` until its traced window is over; returns its numbers."""
    file, overrides, backend = CASES[name]
    algorithm, env_id, config = shipped(file, [*overrides, *args.set])
    steps = iteration_steps(config)
    warmup = warmup_default(config, args.warmup)
    if isinstance(config, ddpg.DDPGConfig):
        log_every = max(1, config.num_iterations // 50)  # gpu-marl-train's
    else:
        log_every = 1
        # Enough iterations for the windows and their rounding to whole log intervals.
        config = dataclasses.replace(config, total_timesteps=steps * (warmup + 2 * args.iterations + 4))
    edges = []  # the history entries at the windows' edges (see log)
    spans: list[Span] = []
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.type == "cuda" else [])]

    def trace_ready(prof) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(args.trace or scratch) / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(path))
            spans.extend(device_spans(json.loads(path.read_text()), device))

    # One profiler step of warm-up (CUPTI's start, outside the traced window), then one recorded step.
    profiler = profile(
        activities=activities, schedule=schedule(wait=0, warmup=1, active=1, repeat=1), on_trace_ready=trace_ready
    )

    def log(entry: dict) -> None:
        """Edges: the untraced window's start and end (the profiler's warm-up starts), the traced
        window's start (one log interval later) and end; each at the first entry due."""
        done = entry["env_steps"] // steps
        if not edges:
            due = warmup
        else:
            due = edges[-1][0] + (1 if len(edges) == 2 else args.iterations)
        if done < due:
            return
        edges.append((done, entry))
        if len(edges) == 2:
            profiler.start()
        elif len(edges) >= 3:
            profiler.step()  # into the recorded step; at the last edge, out of it (trace_ready)
        if len(edges) == 4:
            profiler.stop()
            raise Finished

    with ExitStack() as stack:
        for module in (on_policy, multi_agent):  # the trainers that run GAE
            stack.enter_context(mock.patch.object(module, "compute_gae", marked(module.compute_gae)))
        try:
            train_function(algorithm, config)(
                env_id,
                config,
                device=device,
                backend=backend if device.type == "cuda" else None,
                log_every=log_every,
                log=log,
            )
        except Finished:
            pass
    if len(edges) < 4:
        raise SystemExit(f"{name}: the run ended before its traced window did")
    (untraced_begin, first), (untraced_end, second), (traced_begin, third), (traced_end, last) = edges
    untraced, traced = untraced_end - untraced_begin, traced_end - traced_begin
    result = {
        "case": name,
        "config_file": file,
        "env": env_id,
        "algorithm": algorithm,
        "overrides": [*overrides, *args.set],
        "config": config_dict(config),
        "warmup_iterations": untraced_begin,
        "untraced_iterations": untraced,
        "traced_iterations": traced,
        "wall_ms": 1000 * (second["seconds"] - first["seconds"]) / untraced,
        "traced_wall_ms": 1000 * (last["seconds"] - third["seconds"]) / traced,
        **breakdown(spans, traced, env_id, args.top),
    }
    result["host_gap_ms"] = result["traced_wall_ms"] - result["gpu_busy_ms"]
    for phase in ("rollout", "update"):
        key = f"{phase}_seconds"
        if key in first:
            result[f"{phase}_ms"] = 1000 * (second[key] - first[key]) / untraced
    return result


def markdown(hardware: str, results: list[dict]) -> str:
    def phases(r):
        return f"{r['rollout_ms']:.2f} / {r['update_ms']:.2f}" if "rollout_ms" in r else "—"

    lines = [
        f"Where a training iteration's time goes, on {hardware} (`benchmarks/profile_training.py`); ms per iteration",
        "",
        "| case | iterations (untraced, traced) | wall | traced wall | GPU busy | host gap | kernels | "
        "rollout / update (GPU) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r['case']} | {r['untraced_iterations']}, {r['traced_iterations']} | {r['wall_ms']:.3f} | "
            f"{r['traced_wall_ms']:.3f} | {r['gpu_busy_ms']:.3f} | {r['host_gap_ms']:.3f} | {r['kernels']:,.0f} | "
            f"{phases(r)} |"
            for r in results
        ),
        "",
        "GPU time by category, ms per iteration (share of the case's kernel time)",
        "",
        "| category | " + " | ".join(r["case"] for r in results) + " |",
        "|---|" + "---:|" * len(results),
    ]
    for category in results[0]["categories_ms"]:
        cells = []
        for r in results:
            total = sum(r["categories_ms"].values()) or 1.0
            cells.append(f"{r['categories_ms'][category]:.3f} ({r['categories_ms'][category] / total:.0%})")
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    for r in results:
        lines += [
            "",
            f"Kernels that take most in {r['case']}",
            "",
            "| kernel | category | ms per iteration | calls per iteration |",
            "|---|---|---:|---:|",
            *(f"| `{k['name'][:100]}` | {k['category']} | {k['ms']:.3f} | {k['calls']:g} |" for k in r["top_kernels"]),
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_options(parser)
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="a case to run (default: all)")
    parser.add_argument("--device", default="cuda", help="cuda (the default) or cpu (a check of the script)")
    parser.add_argument(
        "--warmup", type=int, default=5, help="iterations before the windows (DDPG: after it learns; default 5)"
    )
    parser.add_argument(
        "--iterations", type=int, default=10, help="iterations of each window, rounded up to log intervals (default 10)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every case"
    )
    parser.add_argument(
        "--top", type=int, default=TOP_KERNELS, help=f"kernels listed per case, most time first (default {TOP_KERNELS})"
    )
    parser.add_argument("--trace", metavar="DIR", help="also write each case's Chrome trace to DIR/<case>.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    # torch.profiler's own workaround where it knows CUDA graphs run (inductor's): CUPTI's teardown
    # after one profile can crash the next re-initialisation, and each case here is a profile.
    os.environ.setdefault("TEARDOWN_CUPTI", "0")
    hardware = gpu_hardware() if device.type == "cuda" else f"the CPU, torch {torch.__version__}"
    results = []
    for name in args.case or CASES:
        results.append(profile_case(name, args, device))
        text = markdown(hardware, results)
        print(text, flush=True)
        save(args, text, {"hardware": hardware, "results": results})  # after every case
        gc.collect()  # the stopped run's graphs and buffers, before the next case's
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
