"""Tag env-steps/s and agent-steps/s through the public batched ``step_groups`` (and, at the small
sizes, the per-agent dict ``step``), actions already on the device.

Configurations (E envs x N agents): (100, 110), (1000, 110), (2000, 5), (65536, 5), WarpDrive's
headline (2000, 1000) with its default rules (tagged runners leave, so the games thin out) and with
every agent in play (``runner_exits_game_after_tagged=False``), and (100, 10000); each game at its
published params except for the agent counts. Timing as in ``throughput.py``: warm-up, repeats
bracketed by ``torch.cuda.synchronize()``, median. The torch reference backend (CUDA-graphed) on
the same GPU is the in-run baseline where its O(N^2) search fits; the peer numbers are quoted
(WarpDrive and JaxMARL on an H200 from the issues, WarpDrive's 2000 x 1000 on an A100 from its
paper). ``obs write`` is the time to fill the observation buffer once (a plain write at the
copy bandwidth): the least a step that writes every observation can take.

    python benchmarks/tag_throughput.py --out tag.md --json tag.json   # results: docs/benchmarks/tag.md
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from report import add_output_options, gpu_hardware, module_constants, save

import gpu_marl_envs
from gpu_marl_envs import GpuParallelEnv
from gpu_marl_envs.envs import tag_continuous_kernel_layout
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams

ACTION_POOL = 8
CONFIGS = [
    # (label, env id, num_envs, params, peer env-steps/s and who, from the issue)
    ("TagContinuous 100x110", "TagContinuous-v0", 100, TagContinuousParams(), (331e3, "WarpDrive CUDA C")),
    ("TagContinuous 1000x110", "TagContinuous-v0", 1000, TagContinuousParams(), (1.17e6, "WarpDrive Numba")),
    ("TagGridworld 2000x5", "TagGridworld-v0", 2000, TagGridworldParams(), (8.8e6, "WarpDrive Numba")),
    ("TagGridworld 65536x5", "TagGridworld-v0", 65536, TagGridworldParams(), (654e6, "JaxMARL simple_tag")),
    (
        "TagContinuous 2000x1000",
        "TagContinuous-v0",
        2000,
        TagContinuousParams(num_runners=990),
        (2.9e6, "WarpDrive A100"),
    ),
    (
        "TagContinuous 2000x1000 all in play",
        "TagContinuous-v0",
        2000,
        TagContinuousParams(num_runners=990, runner_exits_game_after_tagged=False),
        (2.9e6, "WarpDrive A100"),
    ),
    ("TagContinuous 100x10000", "TagContinuous-v0", 100, TagContinuousParams(num_runners=9990), None),
]
# The torch reference's nearest-others search holds E x N^2 pairs: run it only where they fit.
TORCH_MAX_PAIRS = 2 * 10**9


def tag_constants(**values):
    """TagContinuous's kernel-layout constants (``AGENTS_PER_CELL``, ``ROWS_BY_ID_MAX_AGENTS``, ...) set
    to ``values`` for the kernels built inside (:func:`report.module_constants`)."""
    return module_constants(tag_continuous_kernel_layout, **values)


def pool(env: GpuParallelEnv, by_agent: bool) -> list[dict]:
    g = torch.Generator(device=env.device).manual_seed(0)
    space = env.action_space(env.possible_agents[0])
    high = [int(space.n)] if space.shape == () else [int(n) for n in space.nvec]

    def draw(*shape):
        columns = [torch.randint(0, h, shape, generator=g, device=env.device) for h in high]
        return columns[0] if space.shape == () else torch.stack(columns, dim=-1)

    if by_agent:
        return [{a: draw(env.num_envs) for a in env.possible_agents} for _ in range(ACTION_POOL)]
    return [
        {group: draw(env.num_envs, len(agents)) for group, agents in env.groups.items()} for _ in range(ACTION_POOL)
    ]


def time_steps(step, actions: list[dict], steps: int, repeats: int) -> float:
    results = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for s in range(steps):
            step(actions[s % ACTION_POOL])
        torch.cuda.synchronize()
        results.append(time.perf_counter() - start)
    return statistics.median(results)


def measure(env_id, num_envs, params, backend, api, validate, min_seconds, repeats) -> dict:
    env = GpuParallelEnv(env_id, num_envs, device="cuda", backend=backend, params=params, validate_actions=validate)
    env.reset(seed=0)
    actions = pool(env, by_agent=api == "step")
    step = env.step if api == "step" else env.step_groups
    time_steps(step, actions, 10, 1)  # warm-up: compilation, graph capture, caches
    probe = time_steps(step, actions, 10, 1) / 10
    steps = max(10, int(min_seconds / max(probe, 1e-7)))
    seconds = time_steps(step, actions, steps, repeats)
    write = time_steps(lambda _: env._buffers.observations.zero_(), actions, steps, repeats)
    env.close()
    rate = num_envs * steps / seconds
    return {
        "env": env_id,
        "num_envs": num_envs,
        "num_agents": params.num_agents,
        "backend": backend,
        "api": api,
        "validate_actions": validate,
        "steps": steps,
        "us_per_step": 1e6 * seconds / steps,
        "us_obs_write": 1e6 * write / steps,
        "env_steps_per_s": rate,
        "agent_steps_per_s": rate * params.num_agents,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=None, help="default: every backend available on the GPU")
    parser.add_argument("--configs", nargs="+", default=None, help="labels to run (default: all)")
    add_output_options(parser, min_seconds=0.3, repeats=5)
    args = parser.parse_args()
    hardware = gpu_hardware()
    backends = args.backends or gpu_marl_envs.available_backends("cuda")
    print(f"# {hardware}", flush=True)

    results = []
    for label, env_id, num_envs, params, peer in CONFIGS:
        if args.configs and label not in args.configs:
            continue
        runs = [
            (b, "step_groups", False)
            for b in backends
            if b != "torch" or num_envs * params.num_agents**2 <= TORCH_MAX_PAIRS
        ]
        runs += [(backends[0], "step_groups", True)]
        if params.num_agents <= 110 and num_envs <= 1000:
            runs += [(backends[0], "step", False)]
        for backend, api, validate in runs:
            try:
                r = measure(env_id, num_envs, params, backend, api, validate, args.min_seconds, args.repeats)
            except torch.cuda.OutOfMemoryError as error:
                print(f"{label:36s} {backend:7s} {api:11s} out of GPU memory: {str(error).splitlines()[0]}", flush=True)
                torch.cuda.empty_cache()
                continue
            except ValueError as error:  # a game larger than the kernels allow
                print(f"{label:36s} {backend:7s} {api:11s} refused: {error}", flush=True)
                continue
            r["label"] = label
            if peer:
                r["peer_env_steps_per_s"], r["peer"] = peer
                r["vs_peer"] = r["env_steps_per_s"] / peer[0]
            results.append(r)
            print(
                f"{label:36s} {backend:7s} {api:11s} validate={validate!s:5s} {r['us_per_step']:9.1f} µs/step "
                f"{r['env_steps_per_s'] / 1e6:10.2f} M env-steps/s {r['agent_steps_per_s'] / 1e6:10.1f} M agent-steps/s"
                + (f"  {r['vs_peer']:.1f}x {peer[1]}" if peer else ""),
                flush=True,
            )

    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/tag_throughput.py`. Torch = the reference backend "
        "(CUDA-graphed) in the same run; peers: the issues' numbers on an H200, WarpDrive's 2000 x 1000 on an A100 "
        "(its paper).",
        "",
        "| config (E x N) | backend | API | validate | µs/step | obs write µs | env-steps/s | agent-steps/s "
        "| vs peer |",
        "|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        vs = f"{r['vs_peer']:.1f}x {r['peer']} ({r['peer_env_steps_per_s'] / 1e6:g} M)" if "peer" in r else "-"
        lines.append(
            f"| {r['label']} | {r['backend']} | {r['api']} | {r['validate_actions']} | {r['us_per_step']:.1f} | "
            f"{r['us_obs_write']:.1f} | "
            f"{r['env_steps_per_s'] / 1e6:.2f} M | {r['agent_steps_per_s'] / 1e6:.1f} M | {vs} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    save(args, table, {"hardware": hardware, "results": results})


if __name__ == "__main__":
    main()
