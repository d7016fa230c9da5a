"""Learning on SimpleTag-v3 (MPE2's simple_tag_v3): do trained predators catch trained prey more
often than random predators do? (Issue 42's target for simple_tag.)

For each algorithm's config (MAPPO and IPPO by default: ``baselines/configs/simple_tag_v3_*.toml``,
3 predators, 1 prey, 2 obstacles, both groups trained at once, each by its own policy) and seed, the
script trains with ``multi_agent.train`` (the trainer of ``gpu-marl-train``), then plays the same
``--eval-episodes`` games (one episode of ``max_cycles`` steps each, from ``--eval-seed``) in four
match-ups: trained or uniformly random predators against trained or uniformly random prey. Trained
policies act greedily (the most likely move; the Gaussian's mean clipped into the box for Box
actions).

A catch is one (predator, prey) pair in contact at one step: MPE2 pays every predator 10 per such
pair, so a predator's episode return divided by 10 is the episode's catches (no shaping: MPE2's
``adversary_0`` reward). The table gives the mean catches per episode of each match-up, mean ± std
over seeds; the target holds where "trained vs trained" exceeds "random vs trained".

    python benchmarks/mpe_tag_learning.py --device cuda --out tag.md --json tag.json
    # tiny, on the CPU (a test of the script, not of learning)
    python benchmarks/mpe_tag_learning.py --device cpu --total-timesteps 20000 --seeds 1 --eval-episodes 50
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from gpu_marl_envs.baselines import multi_agent
from gpu_marl_envs.baselines.run_config import build_config, read_config
from gymnasium import spaces
from report import add_output_options, save

from gpu_marl_envs.envs.simple_tag import CATCH_REWARD
from gpu_marl_envs.parallel_env import AutoresetMode, GpuParallelEnv

CONFIGS = Path(__file__).resolve().parent.parent / "baselines" / "configs"
DEFAULT_CONFIGS = {"MAPPO": CONFIGS / "simple_tag_v3_mappo.toml", "IPPO": CONFIGS / "simple_tag_v3_ippo.toml"}
PREDATORS, PREY = "adversaries", "agents"
MATCHUPS = [(True, True), (False, True), (True, False), (False, False)]
"""(predators trained, prey trained): the target compares the first two."""


def matchup_name(predators_trained: bool, prey_trained: bool) -> str:
    return f"{'trained' if predators_trained else 'random'} vs {'trained' if prey_trained else 'random'}"


def random_actions(space: spaces.Space, shape: tuple[int, ...], generator: torch.Generator, device) -> torch.Tensor:
    """Uniform actions of ``space`` for ``shape`` = (games, agents)."""
    if isinstance(space, spaces.Discrete):
        return torch.randint(int(space.n), shape, generator=generator, device=device)
    low = torch.as_tensor(space.low, device=device)
    high = torch.as_tensor(space.high, device=device)
    return low + (high - low) * torch.rand((*shape, *space.shape), generator=generator, device=device)


def catches(policies: dict, env_id: str, config, trained: dict[str, bool], episodes: int, seed: int, device) -> float:
    """Mean catches per episode on ``episodes`` games, each group trained (greedy) or random as ``trained`` says."""
    params = multi_agent.game_params(env_id, config)
    env = GpuParallelEnv(
        env_id,
        episodes,
        device=device,
        params=params,
        autoreset_mode=AutoresetMode.DISABLED,
        validate_actions=False,
    )
    slots = multi_agent.policy_slots(env_id, config)
    action_spaces = {name: space for name, (_, space) in multi_agent.policy_spaces(env_id, config).items()}
    generator = torch.Generator(device=env.device).manual_seed(seed)
    obs, infos = env.reset_groups(seed=seed)
    total = torch.zeros(episodes, device=env.device)
    for _ in range(params.max_cycles):
        actions = multi_agent.greedy_actions(policies, slots, obs, infos, action_spaces)
        for group, is_trained in trained.items():
            if not is_trained:
                shape = tuple(actions[group].shape[:2])
                actions[group] = random_actions(action_spaces[config.groups[group]], shape, generator, env.device)
        obs, rewards, terminated, truncated, infos = env.step_groups(actions)
        total += rewards[PREDATORS][:, 0] / CATCH_REWARD
    env.close()
    return total.mean().item()


def train_and_play(name: str, path: Path, seed: int, args) -> dict:
    overrides = list(args.set) + ([f"total_timesteps={args.total_timesteps}"] if args.total_timesteps else [])
    _, env_id, config = build_config(read_config(path), overrides, seed)
    if "SimpleTag" not in env_id:
        raise SystemExit(f"{path}: expected a config of SimpleTag-v3, got env {env_id!r}")
    begin = time.perf_counter()
    log_every = max(1, config.total_timesteps // config.batch_size // 10)

    def log(entry: dict) -> None:
        print(f"  {name} seed {seed}: {entry['env_steps']:>11,d} steps, {entry['seconds']:.0f} s", flush=True)

    policies, history = multi_agent.train(env_id, config, device=args.device, log_every=log_every, log=log)
    seconds = time.perf_counter() - begin
    for policy in policies.values():
        policy.eval()
    results = {}
    for predators_trained, prey_trained in MATCHUPS:
        trained = {PREDATORS: predators_trained, PREY: prey_trained}
        results[matchup_name(predators_trained, prey_trained)] = catches(
            policies, env_id, config, trained, args.eval_episodes, args.eval_seed, args.device
        )
    print(f"{name} seed {seed}: " + ", ".join(f"{k} {v:.2f}" for k, v in results.items()), flush=True)
    return {
        "algorithm": name,
        "seed": seed,
        "config": str(path),
        "settings": config.to_dict(),
        "env_steps": history[-1]["env_steps"] if history else 0,
        "seconds": seconds,
        "catches_per_episode": results,
        "history": history,
    }


def table(runs: list[dict], device: str, args) -> str:
    lines = [
        f"SimpleTag-v3 (3 predators, 1 prey, 2 obstacles), catches per episode (predator-prey pairs in "
        f"contact, summed over {args.eval_episodes:,} games' steps / games; eval seed {args.eval_seed}), {device}",
        "",
        "| algorithm | seeds | env steps | " + " | ".join(matchup_name(*m) for m in MATCHUPS) + " | target |",
        "|---|---:|---:|" + "---:|" * len(MATCHUPS) + "---|",
    ]
    for name in dict.fromkeys(run["algorithm"] for run in runs):
        group = [run for run in runs if run["algorithm"] == name]
        cells = []
        for matchup in MATCHUPS:
            values = [run["catches_per_episode"][matchup_name(*matchup)] for run in group]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.fmean(values):.2f} ± {spread:.2f}")
        means = {m: statistics.fmean(r["catches_per_episode"][matchup_name(*m)] for r in group) for m in MATCHUPS}
        met = means[(True, True)] > means[(False, True)]
        lines.append(
            f"| {name} | {len(group)} | {group[0]['env_steps']:,} | "
            + " | ".join(cells)
            + f" | {'met' if met else 'NOT met'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--algorithms", nargs="+", choices=list(DEFAULT_CONFIGS), default=list(DEFAULT_CONFIGS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=int, help="env steps per run (default: the config's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    parser.add_argument("--eval-episodes", type=int, default=1000)
    parser.add_argument("--eval-seed", type=int, default=20_000)
    add_output_options(parser)
    args = parser.parse_args(argv)
    device = torch.cuda.get_device_name() if str(args.device).startswith("cuda") else str(args.device)
    runs = []
    for name in args.algorithms:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            runs.append(train_and_play(name, DEFAULT_CONFIGS[name], seed, args))
            text = table(runs, device, args)
            save(args, text, {"device": device, "torch": torch.__version__, "runs": runs})
    print(text)


if __name__ == "__main__":
    main()
