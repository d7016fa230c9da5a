"""Env-steps/s through the public ``VectorEnv.step`` with actions already on the device.

For each env x num_envs, one env per backend: warm-up (kernel compilation, first launches), then
repeats of a timed loop bracketed by ``torch.cuda.synchronize()``, the backends in turns; the
median repeat is reported. Actions come from a small pool of random tensors made beforehand, so the
loop times the env alone.

Baselines measured in the same run: the GPU's device-to-device copy bandwidth (the ceiling for a
memory-bound step) and Gymnasium's own numpy ``CartPoleVectorEnv`` on one CPU core.

    python benchmarks/throughput.py --out throughput.md   # results: docs/benchmarks/classic-control.md
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch
from report import add_output_options, gpu_hardware, save

import gpu_marl_envs
from gpu_marl_envs import GpuVectorEnv

ACTION_POOL = 16


def bytes_per_step(env: GpuVectorEnv) -> int:
    """Bytes one env-step must move in the fused NEXT_STEP kernel (no reset that step):
    state read and written, action read, observation, reward and flags written, step counter read
    and written, the autoreset flag read and written."""
    b = env._buffers
    fields = b.state.shape[0]
    obs_dim = b.observations.shape[1]
    action_bytes = 8 if not env.single_action_space.shape else 4 * int(np.prod(env.single_action_space.shape))
    return 2 * 4 * fields + action_bytes + 4 * obs_dim + 4 + 1 + 1 + 2 * 4 + 2 * 1


def time_steps(env: GpuVectorEnv, actions: list[torch.Tensor], steps: int) -> float:
    """Seconds for ``steps`` calls of ``env.step``, bracketed by synchronize."""
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for s in range(steps):
        env.step(actions[s % ACTION_POOL])
    sync()
    return time.perf_counter() - start


def random_actions(env: GpuVectorEnv, seed: int) -> list[torch.Tensor]:
    g = torch.Generator(device=env.device).manual_seed(seed)
    space = env.single_action_space
    if not space.shape:
        return [
            torch.randint(0, int(space.n), (env.num_envs,), generator=g, device=env.device) for _ in range(ACTION_POOL)
        ]
    low = torch.as_tensor(space.low, device=env.device)
    high = torch.as_tensor(space.high, device=env.device)
    return [
        low + (high - low) * torch.rand((env.num_envs, *space.shape), generator=g, device=env.device)
        for _ in range(ACTION_POOL)
    ]


def measure_in_turns(
    env_id: str, backends: list[str], num_envs: int, device: str, validate: bool, min_seconds: float, repeats: int
) -> list[dict]:
    """One env per backend, timed in turns (a repeat of each, then the next repeat of each), so that
    the backends' rows of one size share the machine's moments: at small batches a step is host
    time, which drifts by whole µs from one second to the next."""
    runs = {}
    for backend in backends:
        env = GpuVectorEnv(env_id, num_envs, device=device, backend=backend, validate_actions=validate)
        env.reset(seed=0)
        actions = random_actions(env, 0)
        time_steps(env, actions, 20)  # warm-up: compilation, caches, allocator
        # Size the loop so one repeat lasts about min_seconds.
        probe = time_steps(env, actions, 20) / 20
        runs[backend] = (env, actions, max(20, int(min_seconds / max(probe, 1e-7))), [])
    for _ in range(repeats):
        for env, actions, steps, seconds in runs.values():
            seconds.append(time_steps(env, actions, steps))
    results = []
    for backend, (env, _, steps, seconds) in runs.items():
        median = statistics.median(seconds)
        rate = num_envs * steps / median
        results.append(
            {
                "env": env_id,
                "backend": backend,
                "num_envs": num_envs,
                "validate_actions": validate,
                "steps": steps,
                "seconds": median,
                "us_per_step": 1e6 * median / steps,
                "env_steps_per_s": rate,
                "bytes_per_env_step": bytes_per_step(env),
                "achieved_GBps": rate * bytes_per_step(env) / 1e9,
            }
        )
        env.close()
    return results


def copy_bandwidth(device: str) -> float:
    """Device-to-device copy, bytes read + written per second (the memory-bound ceiling)."""
    src = torch.empty(2**28, dtype=torch.float32, device=device)  # 1 GiB
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        dst.copy_(src)
    torch.cuda.synchronize()
    return 20 * 2 * src.numel() * 4 / (time.perf_counter() - start)


def gymnasium_numpy_cartpole(num_envs: int, min_seconds: float) -> float:
    """Env-steps/s of Gymnasium's own numpy CartPoleVectorEnv on the CPU (one process)."""
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    env = CartPoleVectorEnv(num_envs=num_envs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    pool = [rng.integers(0, 2, num_envs) for _ in range(ACTION_POOL)]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds:
        env.step(pool[steps % ACTION_POOL])
        steps += 1
    return num_envs * steps / (time.perf_counter() - start)


def markdown(results: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| env | backend | num_envs | validate_actions | µs/step | env-steps/s | bytes/env-step | GB/s |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['env']} | {r['backend']} | {r['num_envs']:,} | {r['validate_actions']} | {r['us_per_step']:.1f} | "
            f"{r['env_steps_per_s'] / 1e9:.3f} G | {r['bytes_per_env_step']} | {r['achieved_GBps']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=sorted(spec.definition.id for spec in gpu_marl_envs.ENVS.values()))
    parser.add_argument("--backends", nargs="+", default=None, help="default: every backend available on the device")
    parser.add_argument("--num-envs", nargs="+", type=int, default=[4096, 65536, 1048576])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--validate",
        choices=["off", "on", "both"],
        default="off",
        help="validate_actions setting(s) to time (on adds one host sync per step)",
    )
    add_output_options(parser, min_seconds=0.25, repeats=5)
    args = parser.parse_args()

    backends = args.backends or gpu_marl_envs.available_backends(args.device)
    validates = {"off": [False], "on": [True], "both": [False, True]}[args.validate]
    if args.device.startswith("cuda"):
        hardware = gpu_hardware()
        ceiling = copy_bandwidth(args.device)
        baseline = f"device-to-device copy: {ceiling / 1e9:.0f} GB/s (bytes read + written)"
    else:
        hardware = f"CPU ({platform.processor() or platform.machine()}), torch {torch.__version__}"
        ceiling, baseline = None, "no GPU"
    numpy_rate = gymnasium_numpy_cartpole(4096, 1.0)
    print(
        f"# {hardware}\n# baseline: {baseline}; Gymnasium numpy CartPoleVectorEnv (4096 envs, 1 CPU process): "
        f"{numpy_rate / 1e6:.1f} M env-steps/s",
        flush=True,
    )

    results = []
    for env_id in args.envs:
        for n in args.num_envs:
            for validate in validates:
                for r in measure_in_turns(env_id, backends, n, args.device, validate, args.min_seconds, args.repeats):
                    if ceiling:
                        r["fraction_of_copy_bandwidth"] = r["achieved_GBps"] * 1e9 / ceiling
                    results.append(r)
                    print(
                        f"{env_id:26s} {r['backend']:7s} {n:>9,} validate={validate!s:5s} "
                        f"{r['us_per_step']:9.1f} µs/step {r['env_steps_per_s'] / 1e9:8.3f} G env-steps/s "
                        f"{r['achieved_GBps']:7.0f} GB/s",
                        flush=True,
                    )

    header = (
        f"Hardware: {hardware}.  \nBaselines in the same run: {baseline}; Gymnasium's numpy "
        f"CartPoleVectorEnv, 4096 envs, one CPU process: {numpy_rate / 1e6:.1f} M env-steps/s."
    )
    table = markdown(results, header)
    print(table)
    save(args, table, {"hardware": hardware, "baseline": baseline, "gymnasium_numpy": numpy_rate, "results": results})


if __name__ == "__main__":
    main()
