"""Training speed of the bundled trainers on the GPU: env-steps/s with the rollout/update breakdown,
and wall time until CartPole's mean training return first reaches 475; Tag (TagContinuous, 10
taggers + 100 runners) with WarpDrive's published A2C configuration at WarpDrive's benchmark sizes.

Each configuration runs ``ppo.train`` / ``a2c.train`` as a user would, logging every iteration (one
host synchronisation per iteration, which the timing includes). Throughput is taken between the end
of the third iteration and the end of the run, so it excludes warm-up and graph capture; time to
threshold is wall time from the call to ``train`` (env construction, warm-up and capture included)
to the end of the first iteration whose finished episodes average >= 475. The in-run baseline is the
same trainer with ``cuda_graph=False`` (eager PyTorch); peer numbers (PureJaxRL, WarpDrive) are the
issue's, measured on an H200. Tag counts env steps as WarpDrive does: games x steps.

    python benchmarks/train_throughput.py --out train.md --json train.json   # results: docs/benchmarks/train-h100.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from gpu_marl_envs.baselines import a2c, multi_agent, ppo
from gpu_marl_envs.baselines.train import CONFIGS, build_config, read_config

THRESHOLD = 475.0


def run(algorithm, env_id: str, config, *, backend=None, stop_at_threshold: bool = False) -> dict:
    """Train once; returns throughput, breakdown and time to threshold (None if not reached)."""
    module = {"ppo": ppo, "a2c": a2c, "multi_agent": multi_agent}[algorithm]
    reached, history = {}, []
    begin = time.perf_counter()

    def log(entry):
        history.append(entry)
        if (env_id == "CartPole-v1" and entry["mean_return"] >= THRESHOLD and entry["episodes"]
                and "seconds" not in reached):
            reached.update(seconds=time.perf_counter() - begin, env_steps=entry["env_steps"])
            if stop_at_threshold:
                raise StopIteration

    try:
        module.train(env_id, config, device="cuda", backend=backend, log_every=1, log=log)
    except StopIteration:
        pass
    torch.cuda.synchronize()
    result = {"algorithm": algorithm, "env": env_id, "backend": backend, "config": dataclasses.asdict(config),
              "time_to_threshold_s": reached.get("seconds"), "steps_to_threshold": reached.get("env_steps"),
              "first_two_iterations_s": history[1]["seconds"] if len(history) > 1 else None}
    if len(history) > 3:
        first, last = history[2], history[-1]
        seconds = last["seconds"] - first["seconds"]
        result.update(
            env_steps_per_s=(last["env_steps"] - first["env_steps"]) / seconds,
            iteration_ms=1000 * seconds / (len(history) - 3),
            rollout_share=(last["rollout_seconds"] - first["rollout_seconds"]) / seconds,
            update_share=(last["update_seconds"] - first["update_seconds"]) / seconds,
            final_return=last["mean_return"])
    return result


def tag_a2c(num_envs: int, num_steps: int, iterations: int):
    """WarpDrive's published TagContinuous A2C configuration (the shipped tag_continuous_a2c.toml)
    at another number of games."""
    _, _, config = build_config(read_config(CONFIGS / "tag_continuous_a2c.toml"), [], None)
    return dataclasses.replace(config, num_envs=num_envs, num_steps=num_steps,
                               total_timesteps=num_envs * num_steps * iterations)


def cases(quick: bool):
    """(label, algorithm, env, config, backend, stop at the threshold)."""
    purejaxrl = ppo.PPOConfig()  # PureJaxRL's CartPole defaults: 4 envs x 128 steps
    big = dataclasses.replace(purejaxrl, num_envs=4096, num_steps=128, total_timesteps=4096 * 128 * (8 if quick else 30))
    # The first run of a process also pays for CUDA's and cuBLAS's start and the env kernel's compilation.
    yield "PPO CartPole 4x128 (PureJaxRL defaults), to 475, first run in the process", "ppo", "CartPole-v1", \
        purejaxrl, None, True
    yield "PPO CartPole 4x128 (PureJaxRL defaults), to 475", "ppo", "CartPole-v1", purejaxrl, None, True
    yield "PPO CartPole 4x128, to 475, seed 1", "ppo", "CartPole-v1", dataclasses.replace(purejaxrl, seed=1), None, True
    yield "PPO CartPole 4x128, eager (baseline), to 475", "ppo", "CartPole-v1", dataclasses.replace(
        purejaxrl, cuda_graph=False), None, True
    yield "PPO CartPole 4096x128", "ppo", "CartPole-v1", big, None, False
    yield "PPO CartPole 4096x128, eager (baseline)", "ppo", "CartPole-v1", dataclasses.replace(
        big, cuda_graph=False, total_timesteps=4096 * 128 * 6), None, False
    yield "PPO CartPole 4096x128, full float32 (no TF32)", "ppo", "CartPole-v1", dataclasses.replace(
        big, tf32=False), None, False
    yield "PPO CartPole 4096x128, bf16 updates", "ppo", "CartPole-v1", dataclasses.replace(big, bf16=True), None, False
    yield "PPO CartPole 4096x128, torch.compile", "ppo", "CartPole-v1", dataclasses.replace(big, compile=True), None, False
    yield "PPO CartPole 4096x128, bf16 updates + torch.compile", "ppo", "CartPole-v1", dataclasses.replace(
        big, bf16=True, compile=True), None, False
    cartpole_10k = a2c.A2CConfig(num_envs=10_000, num_steps=5, total_timesteps=10_000 * 5 * (20 if quick else 200))
    yield "A2C CartPole 10000x5", "a2c", "CartPole-v1", cartpole_10k, None, False
    iterations = 4 if quick else 12
    # WarpDrive's 100 games with its rollout of one whole episode (500 steps); at 1000 games the
    # same 50,000 env steps per update (50 steps per game).
    for num_envs, num_steps in ((100, 500), (1000, 50)):
        config = tag_a2c(num_envs, num_steps, iterations)
        for backend in ("pycuda", "numba"):
            yield (f"A2C TagContinuous {num_envs}x{num_steps} (WarpDrive config), {backend}", "multi_agent",
                   "TagContinuous-v0", config, backend, False)
        yield (f"A2C TagContinuous {num_envs}x{num_steps}, pycuda, bf16 updates", "multi_agent",
               "TagContinuous-v0", dataclasses.replace(config, bf16=True), "pycuda", False)
        yield (f"A2C TagContinuous {num_envs}x{num_steps}, pycuda, bf16 updates + torch.compile", "multi_agent",
               "TagContinuous-v0", dataclasses.replace(config, bf16=True, compile=True), "pycuda", False)
        yield (f"A2C TagContinuous {num_envs}x{num_steps}, pycuda, full float32 (no TF32)", "multi_agent",
               "TagContinuous-v0", dataclasses.replace(config, tf32=False), "pycuda", False)
        yield (f"A2C TagContinuous {num_envs}x{num_steps}, pycuda, eager (baseline)", "multi_agent",
               "TagContinuous-v0", dataclasses.replace(config, cuda_graph=False,
                                                       total_timesteps=num_envs * num_steps * 5), "pycuda", False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="markdown table")
    parser.add_argument("--json", help="raw results")
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--only", help="run the cases whose label contains this text")
    args = parser.parse_args()
    gpu = torch.cuda.get_device_name()
    rows, results = [], []
    for label, algorithm, env_id, config, backend, to_threshold in cases(args.quick):
        if args.only and args.only not in label:
            continue
        result = {"label": label, **run(algorithm, env_id, config, backend=backend, stop_at_threshold=to_threshold)}
        results.append(result)
        sps, tt = result.get("env_steps_per_s"), result["time_to_threshold_s"]
        speed = f"{sps / 1e6:.3g} M" if sps else "—"
        shares = f"{result['rollout_share']:.0%} / {result['update_share']:.0%}" if sps else "—"
        threshold = f"{tt:.2f} s ({result['steps_to_threshold']:,} steps)" if tt else "—"
        first_two = result["first_two_iterations_s"]
        row = f"| {label} | {speed} | {shares} | {threshold} | {f'{first_two:.2f} s' if first_two else '—'} |"
        print(row, flush=True)
        rows.append(row)
        save(args, gpu, rows, results)  # after every case: a run cut short keeps what it measured
    print("\n".join(table(gpu, rows)))


def table(gpu: str, rows: list[str]) -> list[str]:
    return [f"Training speed on {gpu} (torch {torch.__version__})", "",
            "| configuration | env-steps/s | rollout / update | time to mean return 475 | first 2 iterations |",
            "|---|---:|---:|---:|---:|", *rows]


def save(args, gpu: str, rows: list[str], results: list[dict]) -> None:
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(table(gpu, rows)) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
