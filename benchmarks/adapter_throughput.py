"""What the adapters to outside RL libraries cost, measured on the GPU.

1. Env-steps/s of each adapter's step against the raw step (tensors on the device, SAME_STEP
   autoreset, no action check: the configuration the adapters run) in the same run, at 4,096 and
   65,536 sub-envs of each env of ``--envs``: CartPole-v1, whose raw step is a few microseconds, and
   two games whose raw step is heavier, TagContinuous-v0 (110 agents) and CovidEconomy-v0 (52 agents),
   through each adapter's multi-agent path. Each adapter is fed what its library feeds it (SB3:
   numpy actions, numpy results; TorchRL: ``step_and_maybe_reset`` on a tensordict, as its
   collectors call it; skrl: ``(num_envs, 1)`` action tensors of a Discrete space, one per agent in
   games). The raw step of a game is ``GpuParallelEnv.step_groups`` (what both adapters call); an
   env-step of a game steps all its agents. SB3's adapter is measured on single-agent envs only: for
   games its numpy interface moves every agent's observation through the host, which measures the
   host link rather than the adapter. ``torchrl-floor`` is TorchRL's own step on an env that does
   nothing (``torchrl_floor_step``): the most any TorchRL env can reach. Baseline: SB3's
   ``DummyVecEnv`` of 64 Gymnasium CartPoles.
2. SB3 PPO wall time for the same number of env steps, through the adapter and through SB3's own
   ``DummyVecEnv`` of 64 Gymnasium CartPoles (SB3's policy on the CPU in every case, as SB3 advises
   for MLP policies), with the deterministic return reached.

Timing: warm-up, then the median of repeats of a loop bracketed by ``torch.cuda.synchronize()``.

    python benchmarks/adapter_throughput.py --out adapters.md --json adapters.json  # docs/benchmarks/adapters.md

A smoke run of every code path on the CPU (torch backend; seconds):

    python benchmarks/adapter_throughput.py --device cpu --num-envs 8 --min-seconds 0.01 --repeats 1 \
        --train-timesteps 0

Each adapter adds itself to ``ADAPTERS`` (a step section) and, where its library trains, to the
training section.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable

import gymnasium
import numpy as np
import torch
from gpu_marl_envs.adapters._batched import is_multi_agent, make_batched_env
from gymnasium import spaces
from report import add_output_options, save

import gpu_marl_envs

ENV_ID = "CartPole-v1"  # of the baseline and the training section
ENV_IDS = ("CartPole-v1", "TagContinuous-v0", "CovidEconomy-v0")
POOL = 4  # action sets made beforehand, cycled, so the loops time the env and the adapter alone


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


def sample(space: spaces.Space, batch: tuple[int, ...], generator: torch.Generator, device) -> torch.Tensor:
    """Uniform valid actions of ``space`` with leading dims ``batch``, in the env's dtype."""
    if isinstance(space, spaces.Discrete):
        return torch.randint(int(space.n), batch, generator=generator, device=device)
    if isinstance(space, spaces.MultiDiscrete):
        return torch.stack([torch.randint(int(n), batch, generator=generator, device=device) for n in space.nvec], -1)
    low, high = (torch.as_tensor(bound, device=device) for bound in (space.low, space.high))
    return low + (high - low) * torch.rand((*batch, *space.shape), generator=generator, device=device)


def group_action_pool(env, device) -> list[dict[str, torch.Tensor]]:
    """``POOL`` sets of a game's actions keyed by group, ``(num_envs, group_size, ...)``."""
    generator = torch.Generator(device=device).manual_seed(0)
    return [
        {
            group: sample(env.action_space(agents[0]), (env.num_envs, len(agents)), generator, device)
            for group, agents in env.groups.items()
        }
        for _ in range(POOL)
    ]


def vector_action_pool(env, device) -> list[torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(0)
    return [sample(env.single_action_space, (env.num_envs,), generator, device) for _ in range(POOL)]


def raw_step(
    env_id: str, num_envs: int, device: torch.device, backend: str | None
) -> tuple[Callable[[int], None], str]:
    """``step`` (``step_groups`` for a game) of the env the adapters wrap, made as they make it, and
    the name of the backend it chose."""
    env = make_batched_env(env_id, num_envs, device=device, backend=backend)
    if is_multi_agent(env_id):
        env.reset_groups(seed=0)
        pool = group_action_pool(env, device)
        return (lambda k: env.step_groups(pool[k % POOL])), env.backend
    env.reset(seed=0)
    pool = vector_action_pool(env, device)
    return (lambda k: env.step(pool[k % POOL])), env.backend


def sb3_step(env_id: str, num_envs: int, device: torch.device, backend: str | None) -> Callable[[int], None]:
    """``step_async`` + ``step_wait`` of the SB3 adapter: numpy actions in, numpy outputs and infos out."""
    from gpu_marl_envs.adapters import make_sb3_env

    env = make_sb3_env(env_id, num_envs, device=device, backend=backend)
    env.seed(0)
    env.reset()
    pool = [actions.cpu().numpy() for actions in vector_action_pool(env.env, device)]

    def step(k: int) -> None:
        env.step_async(pool[k % POOL])
        env.step_wait()

    return step


def torchrl_action_pool(env, env_id: str, device: torch.device) -> list[dict]:
    """``POOL`` sets of actions keyed as the TorchRL adapter's tensordicts hold them."""
    if is_multi_agent(env_id):
        return [
            {(group, "action"): actions for group, actions in grouped.items()}
            for grouped in group_action_pool(env, device)
        ]
    return [{"action": actions} for actions in vector_action_pool(env, device)]


def torchrl_loop(env, pool: list[dict]) -> Callable[[int], None]:
    """``step_and_maybe_reset`` as TorchRL's collectors and ``rollout`` call it: the actions written
    into the tensordict of the previous call, the next one kept."""
    state = {"data": env.reset()}

    def step(k: int) -> None:
        data = state["data"]
        for key, actions in pool[k % POOL].items():
            data.set(key, actions)
        state["data"] = env.step_and_maybe_reset(data)[1]

    return step


def torchrl_step(env_id: str, num_envs: int, device: torch.device, backend: str | None) -> Callable[[int], None]:
    """``step_and_maybe_reset`` of the TorchRL adapter (see ``torchrl_loop``)."""
    from gpu_marl_envs.adapters import make_torchrl_env

    env = make_torchrl_env(env_id, num_envs, device=device, backend=backend)
    env.set_seed(0)
    return torchrl_loop(env, torchrl_action_pool(env._env, env_id, device))


def torchrl_floor_step(env_id: str, num_envs: int, device: torch.device, backend: str | None) -> Callable[[int], None]:
    """TorchRL's own ``EnvBase.step_and_maybe_reset`` on an env that does nothing: the TorchRL
    adapter with its specs, but with TorchRL's own ``step`` and ``step_and_maybe_reset`` and a
    ``_step`` that hands back outputs made once (nothing ends, so nothing resets). What TorchRL's
    step costs any env beyond the env's own work: no env steps faster through TorchRL than this."""
    from gpu_marl_envs.adapters.torchrl import TorchRLParallelEnv, TorchRLVectorEnv
    from torchrl.envs import EnvBase

    adapter_type = TorchRLParallelEnv if is_multi_agent(env_id) else TorchRLVectorEnv

    class NullEnv(adapter_type):
        step = EnvBase.step
        step_and_maybe_reset = EnvBase.step_and_maybe_reset

        def _step(self, tensordict):
            return self.outputs["next"]

        def _reset(self, tensordict=None, **kwargs):
            return self.outputs.exclude("next")

    env = NullEnv(make_batched_env(env_id, num_envs, device=device, backend=backend))
    env.outputs = env.fake_tensordict()
    return torchrl_loop(env, torchrl_action_pool(env._env, env_id, device))


def skrl_step(env_id: str, num_envs: int, device: torch.device, backend: str | None) -> Callable[[int], None]:
    """``step`` of the skrl adapter with actions shaped as skrl's models give them: ``(num_envs, 1)``
    for Discrete spaces, one contiguous tensor per agent in games."""
    from gpu_marl_envs.adapters import make_skrl_env

    env = make_skrl_env(env_id, num_envs, device=device, backend=backend)
    env.reset()

    def skrl_form(actions: torch.Tensor, space: spaces.Space) -> torch.Tensor:
        return actions.unsqueeze(-1) if isinstance(space, spaces.Discrete) else actions

    if is_multi_agent(env_id):
        pool = [
            {
                agent: skrl_form(grouped[group][:, i].contiguous(), env.action_space(agent))
                for group, agents in env.groups.items()
                for i, agent in enumerate(agents)
            }
            for grouped in group_action_pool(env._env, device)
        ]
    else:
        pool = [skrl_form(actions, env.action_space) for actions in vector_action_pool(env._env, device)]
    return lambda k: env.step(pool[k % POOL])


# name -> (env_id, num_envs, device, backend) -> step(k)
ADAPTERS: dict[str, Callable[[str, int, torch.device, str | None], Callable[[int], None]]] = {
    "sb3": sb3_step,
    "torchrl": torchrl_step,
    "torchrl-floor": torchrl_floor_step,
    "skrl": skrl_step,
}
SINGLE_AGENT_ONLY = {"sb3"}  # see the module docstring


def release(device: torch.device) -> None:
    """Free the last case's env before the next one is made (games of 65,536 envs hold GiBs)."""
    gc.collect()  # TorchRL's envs are nn.Modules in reference cycles
    if device.type == "cuda":
        torch.cuda.empty_cache()


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

    model = PPO(
        "MlpPolicy",
        vec_env,
        n_steps=n_steps,
        batch_size=256,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        learning_rate=lambda p: 1e-3 * p,
        clip_range=lambda p: 0.2 * p,
        seed=seed,
        device="cpu",
    )
    start = time.perf_counter()
    model.learn(timesteps)
    seconds = time.perf_counter() - start
    mean, std = evaluate_policy(
        model, make_vec_env(ENV_ID, n_envs=16, seed=1000), n_eval_episodes=16, deterministic=True
    )
    return {
        "seconds": seconds,
        "env_steps_per_s": model.num_timesteps / seconds,
        "timesteps": model.num_timesteps,
        "eval_return_mean": mean,
        "eval_return_std": std,
    }


def sb3_training(device: torch.device, timesteps: int, seed: int) -> list[dict]:
    from gpu_marl_envs.adapters import make_sb3_env
    from stable_baselines3.common.env_util import make_vec_env

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
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "skrl": skrl.__version__,
        "gpu_marl_envs": gpu_marl_envs.__version__,
    }


def markdown(report: dict) -> str:
    hw = report["hardware"]
    lines = [
        f"# Adapter overhead: {hw['gpu'] or 'CPU'}",
        "",
        f"torch {hw['torch']}, Gymnasium {hw['gymnasium']}, Stable-Baselines3 {hw['stable_baselines3']}, "
        f"TorchRL {hw['torchrl']} (TensorDict {hw['tensordict']}), skrl {hw['skrl']}, "
        f"Python {hw['python']}. `{report['command']}`",
        "",
        "## Step: adapter against the raw step",
        "",
        "An env-step of a game steps all its agents. `torchrl-floor`: TorchRL's own "
        "`step_and_maybe_reset` on an env that does nothing, with the TorchRL adapter's specs (the most "
        "any TorchRL env can reach).",
        "",
        "| adapter | env (backend) | sub-envs | raw step env-steps/s | adapter env-steps/s | adapter / raw |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in report["steps"]:
        lines.append(
            f"| {row['adapter']} | {row['env_id']} ({row['backend']}) | {row['num_envs']:,} | "
            f"{row['raw_env_steps_per_s']:,.0f} | {row['adapter_env_steps_per_s']:,.0f} | "
            f"{row['ratio']:.0%} |"
        )
    base = report["baseline"]
    lines += [
        "",
        f"Baseline: SB3 `DummyVecEnv` of {base['num_envs']} Gymnasium CartPoles (CPU): "
        f"{base['env_steps_per_s']:,.0f} env-steps/s.",
        "",
    ]
    if report["training"]:
        lines += [
            f"## SB3 PPO on {ENV_ID}, {report['training'][0]['timesteps']:,} env steps",
            "",
            "| setup | sub-envs x steps per rollout | wall s | env-steps/s | eval return |",
            "|---|---:|---:|---:|---:|",
        ]
        for row in report["training"]:
            lines.append(
                f"| {row['setup']} | {row['n_envs']:,} x {row['n_steps']} | {row['seconds']:.1f} | "
                f"{row['env_steps_per_s']:,.0f} | {row['eval_return_mean']:.1f} ± {row['eval_return_std']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", help="the envs' backend (default: the fastest on the device)")
    parser.add_argument("--envs", nargs="+", default=list(ENV_IDS), help=f"env ids (default: {' '.join(ENV_IDS)})")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--adapters", nargs="+", default=list(ADAPTERS), choices=list(ADAPTERS))
    parser.add_argument("--train-timesteps", type=int, default=200_000, help="0 skips the training section")
    parser.add_argument("--seed", type=int, default=0)
    add_output_options(parser, min_seconds=1.0, repeats=5)
    args = parser.parse_args()
    device = torch.device(args.device)

    steps = []
    for env_id in args.envs:
        adapters = [name for name in args.adapters if not (is_multi_agent(env_id) and name in SINGLE_AGENT_ONLY)]
        for num_envs in args.num_envs:
            step, backend = raw_step(env_id, num_envs, device, args.backend)
            raw = rate(step, num_envs, device, args.min_seconds, args.repeats)
            del step
            release(device)
            for name in adapters:
                step = ADAPTERS[name](env_id, num_envs, device, args.backend)
                adapted = rate(step, num_envs, device, args.min_seconds, args.repeats)
                del step
                release(device)
                row = {
                    "adapter": name,
                    "env_id": env_id,
                    "backend": backend,
                    "num_envs": num_envs,
                    "raw_env_steps_per_s": raw,
                    "adapter_env_steps_per_s": adapted,
                    "ratio": adapted / raw,
                }
                print(json.dumps(row), flush=True)
                steps.append(row)
    baseline = {"num_envs": 64, "env_steps_per_s": sb3_dummy_vec_env_rate(64, args.min_seconds, args.repeats)}
    print(json.dumps({"baseline": baseline}), flush=True)
    training = sb3_training(device, args.train_timesteps, args.seed) if args.train_timesteps else []

    report = {
        "hardware": hardware(device),
        "command": " ".join(["python", *sys.argv]),
        "steps": steps,
        "baseline": baseline,
        "training": training,
    }
    text = markdown(report)
    save(args, text, report)
    print(text)


if __name__ == "__main__":
    main()
