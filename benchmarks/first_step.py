"""The first step of a fresh process, per backend (issue 46's compile cost): what a user waits for
before an env or game steps once, in a new Python process, with empty kernel caches (new folders
for Numba's and pycuda's) and then again with the caches that run filled.

Each run imports torch (timed apart: every PyTorch program pays it), then times the package's
import, the device's context (the first tensor on it), the env's construction and reset (where the
kernels are compiled, or loaded from the caches) and its first step, to the device's
synchronisation.

    python benchmarks/first_step.py --backends pycuda numba --envs CartPole-v1 gpu_marl_envs/SimpleSpread-v3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

PHASES = ("import_package_s", "context_s", "build_s", "first_step_s")


def child(env_id: str, backend: str, device: str, num_envs: int) -> dict:
    start = time.perf_counter()
    import torch  # timed apart

    imported_torch = time.perf_counter() - start
    marks = [time.perf_counter()]
    import gpu_marl_envs
    from gpu_marl_envs.registration import is_game
    from gpu_marl_envs.validation import action_dtype, zero_actions

    def mark():
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        marks.append(time.perf_counter())

    marks.append(time.perf_counter())
    torch.zeros(1, device=device)
    mark()
    if is_game(env_id):
        env = gpu_marl_envs.make_parallel(env_id, num_envs, device=device, backend=backend, validate_actions=False)
        env.reset_groups(seed=0)
        mark()
        actions = {}
        for group, agents in env.groups.items():
            space = env.action_space(agents[0])
            shape = (num_envs, len(agents), *space.shape)
            actions[group] = torch.zeros(shape, dtype=action_dtype(space), device=device)
        env.step_groups(actions)
    else:
        env = gpu_marl_envs.GpuVectorEnv(env_id, num_envs, device=device, backend=backend, validate_actions=False)
        env.reset(seed=0)
        mark()
        env.step(zero_actions(env.single_action_space, num_envs, env.device))
    mark()
    phases = dict(zip(PHASES, (b - a for a, b in zip(marks, marks[1:]))))
    return {"import_torch_s": imported_torch, **phases, "total_s": marks[-1] - marks[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["pycuda", "numba"])
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "gpu_marl_envs/SimpleSpread-v3"])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", help="write every run's phases here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)  # env id and backend, in this process
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(*args.child, args.device, args.num_envs)))
        return
    print("| env | backend | caches | package import | context | build + reset | first step | total |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    records = []
    for env_id in args.envs:
        for backend in args.backends:
            with tempfile.TemporaryDirectory() as caches:
                # Numba's on-disk kernels, and pycuda's (its cache folder is the user's cache folder's).
                env = {**os.environ, "NUMBA_CACHE_DIR": f"{caches}/numba", "XDG_CACHE_HOME": f"{caches}/xdg"}
                for state in ("empty", "filled"):
                    command = [sys.executable, __file__, "--device", args.device, "--num-envs", str(args.num_envs)]
                    done = subprocess.run(
                        [*command, "--child", env_id, backend], capture_output=True, text=True, env=env, check=True
                    )
                    r = json.loads(done.stdout.strip().splitlines()[-1])
                    records.append({"env": env_id, "backend": backend, "caches": state, **r})
                    times = " | ".join(f"{r[phase]:.3f} s" for phase in (*PHASES, "total_s"))
                    print(f"| {env_id} | {backend} | {state} | {times} |", flush=True)
    if args.json:
        with open(args.json, "x") as f:  # never over an earlier record
            json.dump({"argv": sys.argv[1:], "runs": records}, f, indent=1)


if __name__ == "__main__":
    main()
