"""Training speed of the bundled trainers on the GPU: env-steps/s with the rollout/update breakdown,
and wall time until CartPole's mean training return first reaches 475.

Each configuration runs ``ppo.train`` / ``a2c.train`` as a user would, logging every iteration (one
host synchronisation per iteration, which the timing includes). Throughput is taken between the end
of the third iteration and the end of the run, so it excludes warm-up and graph capture; time to
threshold is wall time from the call to ``train`` (env construction, warm-up and capture included)
to the end of the first iteration whose finished episodes average >= 475. The in-run baseline is the
same trainer with ``cuda_graph=False`` (eager PyTorch); peer numbers (PureJaxRL, WarpDrive) are the
issue's, measured on an H200.

    python benchmarks/train_throughput.py --out docs/benchmarks/train-h200.md --json docs/benchmarks/train-h200.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from gpu_marl_envs.baselines import a2c, ppo

THRESHOLD = 475.0


def run(algorithm, env_id: str, config, *, stop_at_threshold: bool = False) -> dict:
    """Train once; returns throughput, breakdown and time to threshold (None if not reached)."""
    module = {"ppo": ppo, "a2c": a2c}[algorithm]
    reached, history = {}, []
    begin = time.perf_counter()

    def log(entry):
        history.append(entry)
        if entry["mean_return"] >= THRESHOLD and entry["episodes"] and "seconds" not in reached:
            reached.update(seconds=time.perf_counter() - begin, env_steps=entry["env_steps"])
            if stop_at_threshold:
                raise StopIteration

    try:
        module.train(env_id, config, device="cuda", log_every=1, log=log)
    except StopIteration:
        pass
    torch.cuda.synchronize()
    result = {"algorithm": algorithm, "env": env_id, "config": dataclasses.asdict(config),
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


def cases(quick: bool):
    purejaxrl = ppo.PPOConfig()  # PureJaxRL's CartPole defaults: 4 envs x 128 steps
    big = dataclasses.replace(purejaxrl, num_envs=4096, num_steps=128, total_timesteps=4096 * 128 * (8 if quick else 30))
    yield "PPO CartPole 4x128 (PureJaxRL defaults), to 475", "ppo", purejaxrl, True
    yield "PPO CartPole 4x128, eager (baseline)", "ppo", dataclasses.replace(purejaxrl, cuda_graph=False), True
    yield "PPO CartPole 4096x128", "ppo", big, False
    yield "PPO CartPole 4096x128, eager (baseline)", "ppo", dataclasses.replace(
        big, cuda_graph=False, total_timesteps=4096 * 128 * 6), False
    yield "PPO CartPole 4096x128, torch.compile", "ppo", dataclasses.replace(big, compile=True), False
    yield "PPO CartPole 4096x128, torch.compile + TF32", "ppo", dataclasses.replace(big, compile=True, tf32=True), False
    yield "PPO CartPole 4x128, TF32, to 475", "ppo", dataclasses.replace(purejaxrl, tf32=True), True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="markdown table")
    parser.add_argument("--json", help="raw results")
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--only", help="run the cases whose label contains this text")
    args = parser.parse_args()
    gpu = torch.cuda.get_device_name()
    rows, results = [], []
    for label, algorithm, config, to_threshold in cases(args.quick):
        if args.only and args.only not in label:
            continue
        result = {"label": label, **run(algorithm, "CartPole-v1", config, stop_at_threshold=to_threshold)}
        results.append(result)
        sps, tt = result.get("env_steps_per_s"), result["time_to_threshold_s"]
        speed = f"{sps / 1e6:.2f} M" if sps else "—"
        shares = f"{result['rollout_share']:.0%} / {result['update_share']:.0%}" if sps else "—"
        threshold = f"{tt:.2f} s ({result['steps_to_threshold']:,} steps)" if tt else "—"
        row = f"| {label} | {speed} | {shares} | {threshold} | {result['first_two_iterations_s']:.2f} s |"
        print(row, flush=True)
        rows.append(row)
    table = "\n".join([f"Training speed on {gpu} (torch {torch.__version__})", "",
                       "| configuration | env-steps/s | rollout / update | time to mean return 475 | first 2 iterations |",
                       "|---|---:|---:|---:|---:|", *rows])
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
