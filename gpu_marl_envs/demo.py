"""A first look: every env, batched on the best device here, stepped with random actions.

    python -m gpu_marl_envs.demo [--num-envs N] [--steps T]

Prints each env's throughput and the mean return of the episodes that ended (a sanity check
that the dynamics and autoreset run: random CartPole returns ~22, MountainCar -200; "none ended"
where ``--steps`` is shorter than every episode), then the same for the multi-agent games (Tag,
CovidEconomy; ``--num-games`` of them), with each group's reward per agent and step.
"""

from __future__ import annotations

import argparse
import time

import torch
from tqdm import tqdm

import gpu_marl_envs
from gpu_marl_envs.checker import random_space_actions


def run(env_id: str, num_envs: int, steps: int, device: str) -> dict:
    env = gpu_marl_envs.GpuVectorEnv(env_id, num_envs, device=device, validate_actions=False)
    env.reset(seed=0)
    space = env.single_action_space
    generator = torch.Generator(device=env.device).manual_seed(0)
    episode_return = torch.zeros(num_envs, device=env.device)
    finished_return = torch.zeros((), device=env.device)
    finished = torch.zeros((), device=env.device)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    elapsed = 0.0
    for _ in tqdm(range(steps), desc=f"{env_id:26s}", unit="step", leave=False):
        if space.shape:
            actions = (torch.rand((num_envs, *space.shape), generator=generator, device=env.device) * 2 - 1) * float(
                space.high[0]
            )
        else:
            actions = torch.randint(0, int(space.n), (num_envs,), generator=generator, device=env.device)
        sync()
        start = time.perf_counter()
        _, rewards, terminated, truncated, _ = env.step(actions)
        sync()
        elapsed += time.perf_counter() - start
        # Episode bookkeeping on the device (NEXT_STEP autoreset: the ending step carries its reward).
        episode_return += rewards
        done = terminated | truncated
        finished_return += (episode_return * done).sum()
        finished += done.sum()
        episode_return *= ~done
    episodes = int(finished.item())
    return {
        "env": env_id,
        "backend": env.backend,
        "device": str(env.device),
        "rate": num_envs * steps / elapsed,
        "mean_return": (finished_return / finished).item() if episodes else None,
        "episodes": episodes,
    }


def random_group_actions(env, infos: dict, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Uniform random actions of every group; where a game masks actions (CovidEconomy's governors
    in their cooldown), uniform over the allowed ones."""
    actions = {}
    for group, agents in env.groups.items():
        space = env.action_space(agents[0])
        mask = infos[group].get("action_mask")
        if mask is not None:  # (games, agents, actions): one draw per agent among its allowed actions
            draws = torch.multinomial(mask.flatten(0, 1).float(), 1, generator=generator)
            actions[group] = draws.view(mask.shape[:2])
            continue
        actions[group] = random_space_actions(space, (env.num_envs, len(agents)), generator)
    return actions


def run_game(env_id: str, num_games: int, steps: int, device: str) -> dict:
    env = gpu_marl_envs.make_parallel(env_id, num_games, device=device, validate_actions=False)
    _, infos = env.reset_groups(seed=0)
    generator = torch.Generator(device=env.device).manual_seed(0)
    reward_sums = {group: torch.zeros((), device=env.device) for group in env.groups}
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    elapsed = 0.0
    for _ in tqdm(range(steps), desc=f"{env_id:26s}", unit="step", leave=False):
        actions = random_group_actions(env, infos, generator)
        sync()
        start = time.perf_counter()
        _, rewards, _, _, infos = env.step_groups(actions)
        sync()
        elapsed += time.perf_counter() - start
        for group in env.groups:
            reward_sums[group] += rewards[group].sum()
    per_agent_step = {
        group: reward_sums[group].item() / (num_games * steps * len(agents)) for group, agents in env.groups.items()
    }
    return {
        "env": env_id,
        "backend": env.backend,
        "rate": num_games * steps / elapsed,
        "rewards": per_agent_step,
        "agents": env.max_num_agents,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gpu = torch.cuda.is_available()
    parser.add_argument("--num-envs", type=int, default=65536 if gpu else 4096)
    parser.add_argument("--steps", type=int, default=1000 if gpu else 250)
    parser.add_argument("--num-games", type=int, default=1000 if gpu else 16, help="Tag games")
    parser.add_argument("--device", default="cuda" if gpu else "cpu")
    args = parser.parse_args()
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU (no GPU found: torch backend)"
    print(
        f"gpu_marl_envs {gpu_marl_envs.__version__} on {where}: {args.num_envs:,} envs x {args.steps} steps, "
        "random actions"
    )
    print(f"{'env':26s} {'backend':8s} {'env-steps/s':>14s} {'episodes':>10s} {'mean return':>12s}")
    for env_id in sorted(spec.definition.id for spec in gpu_marl_envs.ENVS.values()):
        r = run(env_id, args.num_envs, args.steps, args.device)
        # No episode may end within --steps (MountainCar's last 200): then there is no mean to show.
        mean = f"{r['mean_return']:12.1f}" if r["episodes"] else f"{'none ended':>12s}"
        print(f"{r['env']:26s} {r['backend']:8s} {r['rate']:14,.0f} {r['episodes']:10,d} {mean}")
    print(
        f"\nMulti-agent games, {args.num_games:,} games x {args.steps} steps, random actions (allowed ones where "
        "a game masks actions)"
    )
    print(f"{'env':26s} {'backend':8s} {'agents':>6s} {'env-steps/s':>14s}  reward per agent and step, by group")
    for env_id in sorted(spec.definition.id for spec in gpu_marl_envs.GAMES.values()):
        r = run_game(env_id, args.num_games, args.steps, args.device)
        rewards = ", ".join(f"{group} {value:.3f}" for group, value in r["rewards"].items())
        print(f"{r['env']:26s} {r['backend']:8s} {r['agents']:6d} {r['rate']:14,.0f}  {rewards}")
    print(
        "(env-steps/s times step() alone; benchmarks/throughput.py, tag_throughput.py and covid_throughput.py "
        "measure it properly)"
    )


if __name__ == "__main__":
    main()
