"""What the adapters to outside RL libraries cost, measured on the GPU.

1. Env-steps/s of each adapter's step against the raw ``GpuVectorEnv.step`` (tensors on the device,
   SAME_STEP autoreset, no action check: the configuration the adapters run) in the same run, at
   4,096 and 65,536 sub-envs of CartPole-v1. Each adapter is fed what its library feeds it (SB3:
   numpy actions, numpy results; TorchRL: ``step_and_maybe_reset`` on a tensordict, as its
   collectors call it; skrl: ``(num_envs, 1)`` action tensors). Baseline: SB3's ``DummyVecEnv`` of 64 Gymnasium CartPoles.
2. SB3 PPO wall time for the same number of env steps, through the adapter and through SB3's own
   ``DummyVecEnv`` of 64 Gymnasium CartPoles (SB3's policy on the CPU in every case, as SB3 advises
   for MLP policies), with the deterministic return reached.

Timing: warm-up, then the median of repeats of a loop bracketed by ``torch.cuda.synchronize()``.

    python benchmarks/adapter_throughput.py --out docs/benchmarks/adapters-h100.md \
        --json docs/benchmarks/adapters-h100.json

Each adapter adds itself to ``ADAPTERS`` (a step section) and, where its library trains, to the
training section.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

import gpu_marl_envs
from gpu_marl_envs import GpuVectorEnv

ENV_ID = "CartPole-v1"
POOL = 16  # actions made beforehand, cycled, so the loops time the env and the adapter alone


def time_loop(step: Callable[[int], None], steps: int, repeats: int, device: torch.device) -> float:
    """Median seconds of ``steps`` calls of ``step(k)``."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    results = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for k in range(steps):
            step(k)
        sync()
        results.append(time.perf_counter() - start)
    return statistics.median(results)


def rate(step: Callable[[int], None], num_envs: int, device: torch.device, min_seconds: float, repeats: int) -> float:
    """Env-steps/s of ``step``, its loop sized to last about ``min_seconds``."""
    time_loop(step, 20, 1, device)  # warm-up: compilation, CUDA graph capture, allocator
    probe = time_loop(step, 20, 1, device) / 20
    steps = max(20, int(min_seconds / max(probe, 1e-7)))
    return num_envs * steps / time_loop(step, steps, repeats, device)


# -- step: raw env and each adapter ----------------------------------------------------------------

def raw_step(num_envs: int, device: torch.device) -> Callable[[int], None]:
    env = GpuVectorEnv(ENV_ID, num_envs, device=device, autoreset_mode=AutoresetMode.SAME_STEP,
                       validate_actions=False)
    env.reset(seed=0)
    generator = torch.Generator(device=device).manual_seed(0)
    pool = [torch.randint(0, 2, (num_envs,), generator=generator, device=device) for _ in range(POOL)]
    return lambda k: env.step(pool[k % POOL])


def sb3_step(num_envs: int, device: torch.device) -> Callable[[int], None]:
    """``step_async`` + ``step_wait`` of the SB3 adapter: numpy actions in, numpy outputs and infos out."""
    from gpu_marl_envs.adapters import make_sb3_env

    env = make_sb3_env(ENV_ID, num_envs, device=device)
    env.seed(0)
    env.reset()
    rng = np.random.default_rng(0)
    pool = [rng.integers(0, 2, num_envs) for _ in range(POOL)]

    def step(k: int) -> None:
        env.step_async(pool[k % POOL])
        env.step_wait()

    return step


def torchrl_step(num_envs: int, device: torch.device) -> Callable[[int], None]:
    """``step_and_maybe_reset`` of the TorchRL adapter, as TorchRL's collectors and ``rollout`` call
    it: the action written into the tensordict of the previous call, the next one kept."""
    from gpu_marl_envs.adapters import make_torchrl_env

    env = make_torchrl_env(ENV_ID, num_envs, device=device)
    env.set_seed(0)
    generator = torch.Generator(device=device).manual_seed(0)
    pool = [torch.randint(0, 2, (num_envs,), generator=generator, device=device) for _ in range(POOL)]
    state = {"data": env.reset()}

    def step(k: int) -> None:
        data = state["data"]
        data.set("action", pool[k % POOL])
        state["data"] = env.step_and_maybe_reset(data)[1]

    return step


def skrl_step(num_envs: int, device: torch.device) -> Callable[[int], None]:
    """``step`` of the skrl adapter with actions shaped as skrl's categorical models give them."""
    from gpu_marl_envs.adapters import make_skrl_env

    env = make_skrl_env(ENV_ID, num_envs, device=device)
    env.reset()
    generator = torch.Generator(device=device).manual_seed(0)
    pool = [torch.randint(0, 2, (num_envs, 1), generator=generator, device=device) for _ in range(POOL)]
    return lambda k: env.step(pool[k % POOL])


# name -> (num_envs, device) -> step(k)
ADAPTERS: dict[str, Callable[[int, torch.device], Callable[[int], None]]] = {
    "sb3": sb3_step, "torchrl": torchrl_step, "skrl": skrl_step}


def sb3_dummy_vec_env_rate(num_envs: int, min_seconds: float, repeats: int) -> float:
    """SB3's DummyVecEnv of Gymnasium's own CartPole (numpy, one Python env per sub-env)."""
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(ENV_ID, n_envs=num_envs, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    pool = [rng.integers(0, 2, num_envs) for _ in range(POOL)]
    return rate(lambda k: env.step(pool[k % POOL]), num_envs, torch.device("cpu"), min_seconds, repeats)


# -- training: SB3 PPO -------------------------------------------------------------------------------

def sb3_ppo(vec_env, n_steps: int, timesteps: int, seed: int) -> dict:
    """SB3 PPO with rl-zoo's CartPole-v1 settings (batch 256 per minibatch, 20 epochs), its policy on
    the CPU; wall time of ``learn`` and the deterministic mean return over 16 episodes after it."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    model = PPO("MlpPolicy", vec_env, n_steps=n_steps, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
                ent_coef=0.0, learning_rate=lambda p: 1e-3 * p, clip_range=lambda p: 0.2 * p, seed=seed,
                device="cpu")
    start = time.perf_counter()
    model.learn(timesteps)
    seconds = time.perf_counter() - start
    mean, std = evaluate_policy(model, make_vec_env(ENV_ID, n_envs=16, seed=1000), n_eval_episodes=16,
                                deterministic=True)
    return {"seconds": seconds, "env_steps_per_s": model.num_timesteps / seconds, "timesteps": model.num_timesteps,
            "eval_return_mean": mean, "eval_return_std": std}


def sb3_training(device: torch.device, timesteps: int, seed: int) -> list[dict]:
    from stable_baselines3.common.env_util import make_vec_env

    from gpu_marl_envs.adapters import make_sb3_env

    cases = [  # (name, vec_env, n_envs, n_steps): 4,096 transitions per update in each case
        ("SB3 DummyVecEnv, Gymnasium CartPole", make_vec_env(ENV_ID, n_envs=64, seed=seed), 64, 64),
        ("SB3 adapter", make_sb3_env(ENV_ID, 64, device=device), 64, 64),
        ("SB3 adapter", make_sb3_env(ENV_ID, 256, device=device), 256, 16),
    ]
    results = []
    for name, vec_env, n_envs, n_steps in cases:
        result = {"setup": name, "n_envs": n_envs, "n_steps": n_steps, **sb3_ppo(vec_env, n_steps, timesteps, seed)}
        print(json.dumps(result), flush=True)
        results.append(result)
    return results


# -- report --------------------------------------------------------------------------------------------

def hardware(device: torch.device) -> dict:
    import skrl
    import stable_baselines3
    import tensordict
    import torchrl

    return {
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
        "torch": torch.__version__, "gymnasium": gymnasium.__version__, "stable_baselines3": stable_baselines3.__version__,
        "torchrl": torchrl.__version__, "tensordict": tensordict.__version__, "skrl": skrl.__version__,
        "gpu_marl_envs": gpu_marl_envs.__version__,
    }


def markdown(report: dict) -> str:
    hw = report["hardware"]
    lines = [f"# Adapter overhead: {hw['gpu'] or 'CPU'}", "",
             f"torch {hw['torch']}, Gymnasium {hw['gymnasium']}, Stable-Baselines3 {hw['stable_baselines3']}, "
             f"TorchRL {hw['torchrl']} (TensorDict {hw['tensordict']}), skrl {hw['skrl']}, "
             f"Python {hw['python']}. `{report['command']}`", "",
             f"## Step ({ENV_ID}): adapter against the raw `step()`", "",
             "| adapter | sub-envs | raw `step()` env-steps/s | adapter env-steps/s | adapter / raw |",
             "|---|---:|---:|---:|---:|"]
    for row in report["steps"]:
        lines.append(f"| {row['adapter']} | {row['num_envs']:,} | {row['raw_env_steps_per_s']:,.0f} | "
                     f"{row['adapter_env_steps_per_s']:,.0f} | {row['ratio']:.0%} |")
    base = report["baseline"]
    lines += ["", f"Baseline: SB3 `DummyVecEnv` of {base['num_envs']} Gymnasium CartPoles (CPU): "
              f"{base['env_steps_per_s']:,.0f} env-steps/s.", ""]
    if report["training"]:
        lines += [f"## SB3 PPO on {ENV_ID}, {report['training'][0]['timesteps']:,} env steps", "",
                  "| setup | sub-envs x steps per rollout | wall s | env-steps/s | eval return |",
                  "|---|---:|---:|---:|---:|"]
        for row in report["training"]:
            lines.append(f"| {row['setup']} | {row['n_envs']:,} x {row['n_steps']} | {row['seconds']:.1f} | "
                         f"{row['env_steps_per_s']:,.0f} | {row['eval_return_mean']:.1f} ± {row['eval_return_std']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--adapters", nargs="+", default=list(ADAPTERS), choices=list(ADAPTERS))
    parser.add_argument("--min-seconds", type=float, default=1.0, help="length of one timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--train-timesteps", type=int, default=200_000, help="0 skips the training section")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the markdown table here")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    device = torch.device(args.device)

    steps = []
    for num_envs in args.num_envs:
        raw = rate(raw_step(num_envs, device), num_envs, device, args.min_seconds, args.repeats)
        for name in args.adapters:
            adapted = rate(ADAPTERS[name](num_envs, device), num_envs, device, args.min_seconds, args.repeats)
            row = {"adapter": name, "num_envs": num_envs, "raw_env_steps_per_s": raw,
                   "adapter_env_steps_per_s": adapted, "ratio": adapted / raw}
            print(json.dumps(row), flush=True)
            steps.append(row)
    baseline = {"num_envs": 64, "env_steps_per_s": sb3_dummy_vec_env_rate(64, args.min_seconds, args.repeats)}
    print(json.dumps({"baseline": baseline}), flush=True)
    training = sb3_training(device, args.train_timesteps, args.seed) if args.train_timesteps else []

    report = {"hardware": hardware(device), "command": " ".join(["python", *sys.argv]), "steps": steps,
              "baseline": baseline, "training": training}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    text = markdown(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
