"""Time to a CartPole return of 475 as the first run of a fresh process (issue: <= 3 s).

Each seed runs in a new Python process: ``import torch`` (timed apart, not counted), then wall
time from the call to ``ppo.train`` (PureJaxRL's config, logging every iteration) to the end of the
first iteration whose finished episodes average >= 475, which is what a user waits for. The run
stops there. Also reported: whether ``torch._dynamo`` (PyTorch's compiler, ~5 s to import on the
GPU hosts) was imported.

    python benchmarks/fresh_start.py --seeds 0 1 2

A baseline from other code: run it with ``PYTHONPATH`` pointing at that code's install (for
``docs/benchmarks/training.md`` on an H100, the commit before the trainers' own optimizers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

THRESHOLD = 475.0


def child(seed: int, device: str) -> dict:
    start = time.perf_counter()
    import torch  # noqa: F401  (timed apart: every PyTorch program pays it before its own code)

    imported = time.perf_counter() - start
    from gpu_marl_envs.baselines import ppo

    reached = {}

    class Reached(Exception):
        pass

    def log(entry):
        if entry["mean_return"] >= THRESHOLD:
            reached.update(seconds=time.perf_counter() - start, env_steps=entry["env_steps"])
            raise Reached

    start = time.perf_counter()
    try:
        ppo.train("CartPole-v1", ppo.PPOConfig(seed=seed), device=device, log=log, log_every=1)
    except Reached:
        pass
    return {
        "seed": seed,
        "import_torch_s": imported,
        "to_threshold_s": reached.get("seconds"),
        "env_steps": reached.get("env_steps"),
        "dynamo_imported": "torch._dynamo" in sys.modules,
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
        print(
            f"seed {seed}: to {THRESHOLD:g}: {to}; import torch {r['import_torch_s']:.2f} s; "
            f"torch._dynamo imported: {r['dynamo_imported']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
