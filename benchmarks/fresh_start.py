"""Time to a CartPole return of 475 as the first run of a fresh process (issue: <= 3 s).

Each seed runs in a new Python process: ``import torch`` (timed apart, not counted), then wall
time from the call to ``ppo.train`` (PureJaxRL's config, logging every iteration) to the end of the
first iteration whose finished episodes average >= 475, which is what a user waits for. The run
stops there. Also reported: whether ``torch._dynamo`` (PyTorch's compiler, ~5 s to import on the
GPU hosts) was imported, and where the time goes: the device's context (the first tensor on it),
``ppo.start`` (the env and its kernels built, the networks and the optimizer), the first iteration
(the CUDA graphs captured, then run) and the median of the later iterations (``ppo.train`` is
``ppo.start`` then ``on_policy.iterate``: the child calls the two itself to time them apart).

    python benchmarks/fresh_start.py --seeds 0 1 2

A baseline from other code: run it with ``PYTHONPATH`` pointing at that code's install (for
``docs/benchmarks/training.md`` on an H100, the commit before the trainers' own optimizers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

THRESHOLD = 475.0


def child(seed: int, device: str) -> dict:
    start = time.perf_counter()
    import torch  # timed apart: every PyTorch program pays it before its own code

    imported = time.perf_counter() - start
    from gpu_marl_envs.baselines import on_policy, ppo

    reached, entries = {}, []  # entries: seconds since the start at each iteration's log entry

    class Reached(Exception):
        pass

    def log(entry):
        entries.append(time.perf_counter() - start)
        if entry["mean_return"] >= THRESHOLD:
            reached.update(seconds=entries[-1], env_steps=entry["env_steps"])
            raise Reached

    start = time.perf_counter()
    torch.zeros(1, device=device)  # the device's context: the first thing ppo.train would do on it
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    context = time.perf_counter() - start
    run, update = ppo.start("CartPole-v1", ppo.PPOConfig(seed=seed), device=device)
    started = time.perf_counter() - start
    try:
        on_policy.iterate(run, update, log_every=1, log=log, save=None, resume=None)
    except Reached:
        pass
    later = [b - a for a, b in zip(entries, entries[1:])]
    return {
        "seed": seed,
        "import_torch_s": imported,
        "to_threshold_s": reached.get("seconds"),
        "env_steps": reached.get("env_steps"),
        "dynamo_imported": "torch._dynamo" in sys.modules,
        "context_s": context,
        "start_s": started - context,
        "first_iteration_s": entries[0] - started if entries else None,
        "later_iteration_ms": 1000 * statistics.median(later) if later else None,
        "iterations": len(entries),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # one seed, in this process
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.device)))
        return
    for seed in args.seeds:
        out = subprocess.run(
            [sys.executable, __file__, "--device", args.device, "--child", str(seed)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        to = "not reached" if r["to_threshold_s"] is None else f"{r['to_threshold_s']:.2f} s ({r['env_steps']:,} steps)"
        phases = (
            f"context {r['context_s']:.2f} s, ppo.start {r['start_s']:.2f} s, first iteration "
            f"{r['first_iteration_s']:.2f} s, then {r['later_iteration_ms']:.1f} ms an iteration "
            f"({r['iterations']} iterations)"
            if r["later_iteration_ms"] is not None
            else "fewer than two iterations"
        )
        print(
            f"seed {seed}: to {THRESHOLD:g}: {to}; {phases}; import torch {r['import_torch_s']:.2f} s; "
            f"torch._dynamo imported: {r['dynamo_imported']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
