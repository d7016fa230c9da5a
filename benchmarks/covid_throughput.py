"""CovidEconomy env-steps/s and agent-steps/s through the public batched ``step_groups``, actions
already on the device, against the bandwidth roofline of the bytes a step must move.

Sizes: 60 envs (the original's WarpDrive run), 1,000, 10,000 and 100,000. Timing as in
``tag_throughput.py`` (warm-up, repeats bracketed by ``torch.cuda.synchronize()``, median). Baselines
in the same run: the GPU's device-to-device copy bandwidth (``throughput.copy_bandwidth``) and the
torch reference backend (CUDA-graphed).

Bytes a step must move per env (:func:`bytes_per_env_step`): the actions read; the observations,
action masks, rewards, per-agent and per-env flags written; the running returns read and written;
every state field read and written except the two rings, of which a step touches one slot each
(read the level 29 days back and the change 600 days back, write today's); the episode totals
and returns rows are written only at an episode's end (1 step in 540) and are left out.

    python benchmarks/covid_throughput.py --out covid.md --json covid.json   # results: docs/benchmarks/covid.md
"""

from __future__ import annotations

import argparse

import torch
from report import add_output_options, gpu_hardware, save
from tag_throughput import pool, time_steps
from throughput import copy_bandwidth

import gpu_marl_envs
from gpu_marl_envs import GpuParallelEnv

ENV_ID = "CovidEconomy-v0"
SIZES = (60, 1_000, 10_000, 100_000)
RINGS = ("stringency", "stringency_changes")


def bytes_per_env_step(env: GpuParallelEnv) -> int:
    """The bytes one env's step must read and write (see the module docstring)."""
    b = env._buffers
    state = b.state

    def per_env(tensor: torch.Tensor) -> int:
        return tensor[0].numel() * tensor.element_size()

    moved = per_env(env._actions)
    moved += sum(
        per_env(t)
        for t in (
            b.observations,
            b.action_masks,
            b.rewards,
            b.agent_terminated,
            b.agent_truncated,
            b.terminated,
            b.truncated,
        )
    )
    moved += 2 * per_env(b.running_returns)
    for name in env.state_fields:
        tensor = getattr(state, name)
        if name in RINGS:
            slot = tensor[0, 0]  # one slot: (S,)
            moved += 2 * 2 * slot.numel() * slot.element_size()  # read an old slot, write today's
        else:
            moved += 2 * per_env(tensor)
    return moved


def state_bytes_per_env(env: GpuParallelEnv) -> int:
    """Resident bytes per env: the state and every buffer of the batch."""
    return sum(
        t[0].numel() * t.element_size()
        for t in env._buffers.tensors().values()
        if isinstance(t, torch.Tensor) and t.dim() > 0
    )


def measure(num_envs: int, backend: str, validate: bool, min_seconds: float, repeats: int) -> dict:
    env = GpuParallelEnv(ENV_ID, num_envs, device="cuda", backend=backend, validate_actions=validate)
    env.reset(seed=0)
    actions = pool(env, by_agent=False)
    time_steps(env.step_groups, actions, 10, 1)  # warm-up: compilation, graph capture, caches
    probe = time_steps(env.step_groups, actions, 10, 1) / 10
    steps = max(10, int(min_seconds / max(probe, 1e-7)))
    seconds = time_steps(env.step_groups, actions, steps, repeats)
    moved, resident = bytes_per_env_step(env), state_bytes_per_env(env)
    num_agents = env.max_num_agents
    env.close()
    rate = num_envs * steps / seconds
    return {
        "num_envs": num_envs,
        "backend": backend,
        "validate_actions": validate,
        "steps": steps,
        "us_per_step": 1e6 * seconds / steps,
        "env_steps_per_s": rate,
        "agent_steps_per_s": rate * num_agents,
        "bytes_per_env_step": moved,
        "bytes_per_env": resident,
        "bytes_per_s": rate * moved,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=None, help="default: every backend available on the GPU")
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    add_output_options(parser, min_seconds=0.3, repeats=5)
    args = parser.parse_args()
    hardware = gpu_hardware()
    backends = args.backends or gpu_marl_envs.available_backends("cuda")
    ceiling = copy_bandwidth("cuda")
    print(f"# {hardware}; device-to-device copy {ceiling / 1e9:.0f} GB/s (read + written)", flush=True)

    results = []
    for num_envs in args.sizes:
        runs = [(b, False) for b in backends] + [(backends[0], True)]
        for backend, validate in runs:
            try:
                r = measure(num_envs, backend, validate, args.min_seconds, args.repeats)
            except torch.cuda.OutOfMemoryError as error:
                print(f"{num_envs:7d} {backend:7s} out of GPU memory: {str(error).splitlines()[0]}", flush=True)
                torch.cuda.empty_cache()
                continue
            r["roofline_fraction"] = r["bytes_per_s"] / ceiling
            results.append(r)
            print(
                f"{num_envs:7d} {backend:7s} validate={validate!s:5s} {r['us_per_step']:9.1f} µs/step "
                f"{r['env_steps_per_s'] / 1e6:9.3f} M env-steps/s {r['agent_steps_per_s'] / 1e6:9.1f} M agent-steps/s "
                f"{r['bytes_per_s'] / 1e9:7.0f} GB/s ({100 * r['roofline_fraction']:.0f}% of copy)",
                flush=True,
            )

    first = results[0] if results else {}
    lines = [
        f"Hardware: {hardware}; device-to-device copy {ceiling / 1e9:.0f} GB/s (bytes read + written), "
        "measured in the same run. Command: `python benchmarks/covid_throughput.py`. Torch = the reference "
        f"backend (CUDA-graphed). A step must move {first.get('bytes_per_env_step', 0):,} bytes per env; "
        f"an env holds {first.get('bytes_per_env', 0):,} bytes (state and buffers).",
        "",
        "| envs | backend | validate | µs/step | env-steps/s | agent-steps/s | GB/s moved | of copy bandwidth |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['num_envs']:,} | {r['backend']} | {r['validate_actions']} | {r['us_per_step']:.1f} | "
            f"{r['env_steps_per_s'] / 1e6:.3f} M | {r['agent_steps_per_s'] / 1e6:.1f} M | "
            f"{r['bytes_per_s'] / 1e9:.0f} | {100 * r['roofline_fraction']:.0f}% |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    save(args, table, {"hardware": hardware, "copy_bytes_per_s": ceiling, "results": results})


if __name__ == "__main__":
    main()
