"""Off-policy training on the GPU (issue 43): DDPG and TD3 run eagerly against their iterations
replayed as CUDA graphs, in one process, and their learning checks.

Throughput (the default): each case trains with ``ddpg.train`` as ``gpu-marl-train`` does, once
with ``cuda_graph=False`` (eager PyTorch: the issue's baseline, a kernel launch at a time) and once
captured, after a short warm-up run of each kind (CUDA's and cuBLAS's start, the env kernels'
compilation), each timed from the call to its return with ``torch.cuda.synchronize()`` before and
after. "wall" is that time (env construction and graph capture included, the evaluation not); runs
log 50 history entries, as ``gpu-marl-train`` does; env steps/s and gradient steps/s are taken
between the first entry after ``learning_starts`` and the graphs' capture (the update graphs are
captured at their second use, within ``policy_frequency + 1`` learning iterations) and the last
entry, where every iteration acts and learns; the greedy
return is ``ddpg.evaluate``'s over 16 episodes (seed 10,000). The cases: the shipped Pendulum
configs of DDPG and TD3 (8 envs, 20k env steps, 4 gradient steps an iteration) and a many-env
Pendulum config (1,024 envs, 8 gradient steps of 4,096 transitions an iteration) of each.
``--compile`` adds a third run of each, captured with ``compile = true`` (``torch.compile`` of the
losses, as LeanRL pairs it with CUDA graphs; its wall time includes compiling).

``--learning``: the shipped Pendulum and MountainCarContinuous configs of DDPG and TD3, captured,
for 3 seeds each, each run's greedy return (``ddpg.evaluate``, 100 episodes) against the issue's
targets, mean of the seeds: Pendulum >= -200, MountainCarContinuous >= 90. ``--set key=value``
(``gpu-marl-train``'s overrides, e.g. ``total_timesteps=30000``) changes every run's config.

Each result is printed as it comes and the files rewritten after every case.

    python benchmarks/offpolicy_throughput.py --out offpolicy.md --json offpolicy.json
    python benchmarks/offpolicy_throughput.py --learning --out learning.md --json learning.json
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import time

import torch
from gpu_marl_envs.baselines import ddpg
from report import add_output_options, gpu_hardware, save, shipped

TARGETS = {"Pendulum-v1": -200.0, "MountainCarContinuous-v0": 90.0}
"""The issue's learning targets: the greedy return's mean over 3 seeds within the shipped budget."""
LEARNING_CONFIGS = (
    "pendulum_ddpg.toml",
    "pendulum_td3.toml",
    "mountain_car_continuous_ddpg.toml",
    "mountain_car_continuous_td3.toml",
)
ENTRIES = 50
"""History entries of a run (gpu-marl-train's log interval: a fiftieth of the run)."""


def many_envs(name: str):
    """A shipped Pendulum config at 1,024 envs, each iteration 8 gradient steps of 4,096 transitions."""
    num_envs = 1024
    return shipped(
        name,
        [
            f"num_envs={num_envs}",
            "batch_size=4096",
            "gradient_steps=8",
            f"learning_starts={num_envs * 20}",
            f"total_timesteps={num_envs * 400}",
        ],
    )


def cases(quick: bool):
    """(label, env, config): each is run eager and captured."""
    for name, label in (("pendulum_ddpg.toml", "DDPG"), ("pendulum_td3.toml", "TD3")):
        _, env, config = shipped(name)
        if quick:
            config = dataclasses.replace(config, total_timesteps=config.total_timesteps // 4)
        yield f"{label} Pendulum, shipped config ({config.num_envs} envs)", env, config
    for name, label in (("pendulum_ddpg.toml", "DDPG"), ("pendulum_td3.toml", "TD3")):
        _, env, config = many_envs(name)
        if quick:
            config = dataclasses.replace(config, total_timesteps=config.total_timesteps // 4)
        yield (
            f"{label} Pendulum, {config.num_envs:,} envs x {config.gradient_steps} steps of {config.batch_size:,}",
            env,
            config,
        )


def release() -> None:
    """Free the last run's graphs and buffers before the next is timed."""
    gc.collect()
    torch.cuda.empty_cache()


def timed(env_id: str, config: ddpg.DDPGConfig, episodes: int = 16) -> dict:
    """One run of ``config``: its wall time, throughput after its second history entry and greedy return."""
    release()
    log_every = max(1, config.num_iterations // ENTRIES)
    torch.cuda.synchronize()
    begin = time.perf_counter()
    actor, history = ddpg.train(env_id, config, device="cuda", log_every=log_every, log=None)
    torch.cuda.synchronize()
    wall = time.perf_counter() - begin
    captured_by = config.learning_starts + (config.policy_frequency + 1) * config.num_envs
    first, last = next(entry for entry in history if entry["env_steps"] >= captured_by), history[-1]
    env_steps_per_s = (last["env_steps"] - first["env_steps"]) / (last["seconds"] - first["seconds"])
    returns = ddpg.evaluate(actor, env_id, num_episodes=episodes, device="cuda")
    return {
        "wall_s": wall,
        "env_steps_per_s": env_steps_per_s,
        "gradient_steps_per_s": env_steps_per_s / config.num_envs * config.gradient_steps,
        "greedy_return": returns.mean().item(),
        "last_training_return": last["mean_return"],
    }


def warm_up(env_id: str, config: ddpg.DDPGConfig) -> None:
    """A short run of each kind: the process's first pays for CUDA's start and the env kernels' compilation."""
    short = dataclasses.replace(
        config,
        total_timesteps=config.num_envs * 40,
        learning_starts=config.num_envs * 10,
        buffer_size=config.num_envs * 40,
    )
    for captured in (False, True):
        ddpg.train(env_id, dataclasses.replace(short, cuda_graph=captured), device="cuda", log_every=10, log=None)


def throughput(args, hardware: str) -> None:
    header = [
        f"Off-policy training on {hardware}",
        "",
        "| configuration | run | wall | env steps/s | gradient steps/s | greedy return | speed-up (wall) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(header), flush=True)
    rows, results = [], []
    warmed = False
    for label, env_id, config in cases(args.quick):
        if args.only and args.only not in label:
            continue
        if not warmed:
            warm_up(env_id, config)
            warmed = True
        runs = {
            "eager": dataclasses.replace(config, cuda_graph=False),
            "CUDA graphs": dataclasses.replace(config, cuda_graph=True),
        }
        if args.compile:
            runs["CUDA graphs + torch.compile"] = dataclasses.replace(config, cuda_graph=True, compile=True)
        measured = {}
        for run, run_config in runs.items():
            result = measured[run] = timed(env_id, run_config)
            gain = "" if run == "eager" else f"{measured['eager']['wall_s'] / result['wall_s']:.1f}x"
            row = (
                f"| {label} | {run} | {result['wall_s']:.2f} s | {result['env_steps_per_s']:,.0f} | "
                f"{result['gradient_steps_per_s']:,.0f} | {result['greedy_return']:.1f} | {gain} |"
            )
            print(row, flush=True)
            rows.append(row)
        results.append({"label": label, "config": dataclasses.asdict(config), "runs": measured})
        save(args, "\n".join(header + rows) + "\n", {"hardware": hardware, "results": results})


def learning(args, hardware: str) -> None:
    header = [
        f"Learning checks on {hardware}: greedy return (100 episodes) of the shipped configs, CUDA graphs",
        "",
        "| config | env | seeds | greedy returns | mean | target | met | wall per run |",
        "|---|---|---|---|---:|---:|---|---:|",
    ]
    rows, results = [], []
    for name in LEARNING_CONFIGS:
        if args.only and args.only not in name:
            continue
        runs = []
        for seed in range(args.seeds):
            _, env_id, config = shipped(name, args.set, seed=seed)
            release()
            begin = time.perf_counter()
            actor, history = ddpg.train(
                env_id, config, device="cuda", log_every=max(1, config.num_iterations // ENTRIES), log=None
            )
            torch.cuda.synchronize()
            wall = time.perf_counter() - begin
            greedy = ddpg.evaluate(actor, env_id, num_episodes=100, device="cuda").mean().item()
            runs.append(
                {"seed": seed, "greedy_return": greedy, "wall_s": wall, "curve": [h["mean_return"] for h in history]}
            )
            print(f"{name} seed {seed}: greedy return {greedy:.1f} ({wall:.1f} s)", flush=True)
        returns = [r["greedy_return"] for r in runs]
        mean, target = statistics.mean(returns), TARGETS[env_id]
        listed = ", ".join(f"{value:.1f}" for value in returns)
        wall = statistics.mean(r["wall_s"] for r in runs)
        row = (
            f"| {name} | {env_id} | {args.seeds} | {listed} | {mean:.1f} | >= {target:g} | "
            f"{'yes' if mean >= target else 'no'} | {wall:.1f} s |"
        )
        print(row, flush=True)
        rows.append(row)
        results.append({"config": name, "env": env_id, "mean_greedy_return": mean, "target": target, "runs": runs})
        save(args, "\n".join(header + rows) + "\n", {"hardware": hardware, "results": results})
    print("\n".join(header + rows), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_options(parser)
    parser.add_argument("--learning", action="store_true", help="the learning checks instead of the timings")
    parser.add_argument("--seeds", type=int, default=3, help="runs per config of --learning (default 3)")
    parser.add_argument("--quick", action="store_true", help="timed runs of a quarter of their length")
    parser.add_argument("--compile", action="store_true", help="also a captured run with torch.compile")
    parser.add_argument("--only", help="the cases (or --learning's config files) whose name contains this text")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="--learning: a config override for every run"
    )
    args = parser.parse_args()
    hardware = gpu_hardware()
    (learning if args.learning else throughput)(args, hardware)


if __name__ == "__main__":
    main()
