"""PPO on a batched gpu_marl_envs env, in the style of CleanRL: one file, one straight loop, tensors
on the env's device from end to end (no numpy, no per-step host sync).

The env runs with SAME_STEP autoreset: when a sub-env's episode ends, ``step`` returns the next
episode's first observation and keeps the last one in ``infos["final_obs"]``. A truncated episode
(time limit) did not end in the MDP, so its last reward is bootstrapped from the critic's value of
that final observation; a terminated one is not.

    OMP_NUM_THREADS=1 python docs/cleanrl_ppo.py   # CartPole, 100,000 steps on the CPU (measured below)
    python docs/cleanrl_ppo.py --device cuda --num-envs 4096 --total-timesteps 5000000
    python docs/cleanrl_ppo.py --env-id gpu_marl_envs/Pendulum-v1 --total-timesteps 500000

Discrete actions get a categorical policy, continuous ones a Gaussian with a learned log-std, whose
samples are clipped into the action space's bounds on the device by ``gpu_marl_envs.wrappers.ClipAction``
(as CleanRL's continuous PPO clips them with Gymnasium's; the env refuses actions past the bounds).

Measured with the first command (torch 2.13 on the CPU of a two-core machine shared with other
jobs): 16.4 to 16.9 s of wall time for seeds 1, 2 and 3, whose last iterations' mean episode returns
were 410.4, 486.7 and 131.6 (the maximum is 500: PPO on this budget reaches it on some seeds, not
all). One thread: torch's intra-op threads only add hand-offs to this small network's steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode
from torch import nn
from torch.distributions import Categorical, Normal

import gpu_marl_envs  # noqa: F401  (registers the gpu_marl_envs/ ids with Gymnasium)
from gpu_marl_envs import wrappers


@dataclass
class Args:
    env_id: str = "gpu_marl_envs/CartPole-v1"
    """the registered id of the env"""
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    """where the env and the networks run"""
    seed: int = 1
    """seed of the env (sub-env i gets seed + i) and of torch"""
    total_timesteps: int = 100_000
    """env steps over all sub-envs"""
    num_envs: int = 32
    """sub-envs stepped together"""
    num_steps: int = 64
    """steps per sub-env in each rollout"""
    learning_rate: float = 1e-3
    """Adam's learning rate, annealed linearly to 0"""
    gamma: float = 0.98
    """discount factor"""
    gae_lambda: float = 0.8
    """lambda of generalised advantage estimation"""
    num_minibatches: int = 8
    """minibatches per epoch"""
    update_epochs: int = 10
    """passes over each rollout"""
    clip_coef: float = 0.2
    """PPO's clipping of the probability ratio (and of the value update)"""
    ent_coef: float = 0.0
    """weight of the entropy bonus"""
    vf_coef: float = 0.5
    """weight of the value loss"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""


def layer(inputs: int, outputs: int, std: float = 2**0.5) -> nn.Linear:
    linear = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.zeros_(linear.bias)
    return linear


class Agent(nn.Module):
    def __init__(self, observation_space: gym.spaces.Box, action_space: gym.spaces.Space):
        super().__init__()
        obs_dim = observation_space.shape[0]
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        outputs = int(action_space.n) if self.discrete else action_space.shape[0]
        self.critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, outputs, 0.01))
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(outputs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def policy(self, obs: torch.Tensor):
        out = self.actor(obs)
        return Categorical(logits=out) if self.discrete else Normal(out, self.log_std.exp().expand_as(out))

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """``(action, log_prob, entropy, value)``; samples an action when none is given."""
        dist = self.policy(obs)
        if action is None:
            action = dist.sample()
        log_prob, entropy = dist.log_prob(action), dist.entropy()
        if not self.discrete:  # independent action components
            log_prob, entropy = log_prob.sum(-1), entropy.sum(-1)
        return action, log_prob, entropy, self.value(obs)


def main(args: Args) -> dict[str, float]:
    """Trains and returns the last iteration's statistics (``episodic_return``: mean return of the
    episodes that ended in it, ``nan`` if none did)."""
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    envs = gym.make_vec(
        args.env_id,
        num_envs=args.num_envs,
        vectorization_mode="vector_entry_point",
        device=device,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    if isinstance(envs.single_action_space, gym.spaces.Box):
        envs = wrappers.ClipAction(envs)
    agent = Agent(envs.single_observation_space, envs.single_action_space).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # Rollout storage, on the device.
    T, N = args.num_steps, args.num_envs
    batch_size = T * N
    minibatch_size = batch_size // args.num_minibatches
    iterations = args.total_timesteps // batch_size
    obs_buf = torch.zeros((T, N, *envs.single_observation_space.shape), device=device)
    actions_buf = torch.zeros(
        (T, N, *envs.single_action_space.shape), device=device, dtype=torch.int64 if agent.discrete else torch.float32
    )
    logprobs, rewards, dones, values = (torch.zeros((T, N), device=device) for _ in range(4))
    episode_return = torch.zeros(N, device=device)

    next_obs, _ = envs.reset(seed=args.seed)
    stats: dict[str, float] = {}
    start = time.time()
    for iteration in range(1, iterations + 1):
        for group in optimizer.param_groups:
            group["lr"] = args.learning_rate * (1.0 - (iteration - 1) / iterations)
        finished_returns, finished = torch.zeros((), device=device), torch.zeros((), device=device)

        # Rollout. The env overwrites its output tensors at every step, so they are copied into storage.
        for step in range(T):
            obs_buf[step] = next_obs
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
            actions_buf[step], logprobs[step], values[step] = action, logprob, value
            next_obs, reward, terminated, truncated, infos = envs.step(action)
            done = terminated | truncated
            # Truncation is not the MDP's end: bootstrap from the final observation's value.
            with torch.no_grad():
                final_value = agent.value(infos["final_obs"])
            rewards[step] = reward + args.gamma * final_value * (truncated & ~terminated)
            dones[step] = done.float()
            episode_return += reward
            finished_returns += (episode_return * done).sum()
            finished += done.sum()
            episode_return *= ~done

        # Generalised advantage estimation; dones[t] cuts the recursion after step t.
        with torch.no_grad():
            next_value = agent.value(next_obs)
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(N, device=device)
            for t in reversed(range(T)):
                following = next_value if t == T - 1 else values[t + 1]
                not_done = 1.0 - dones[t]
                delta = rewards[t] + args.gamma * following * not_done - values[t]
                last = delta + args.gamma * args.gae_lambda * not_done * last
                advantages[t] = last
            returns = advantages + values

        # PPO update over shuffled minibatches.
        b_obs = obs_buf.flatten(0, 1)
        b_actions = actions_buf.flatten(0, 1)
        b_logprobs, b_advantages, b_returns, b_values = (x.flatten() for x in (logprobs, advantages, returns, values))
        for _ in range(args.update_epochs):
            for idx in torch.randperm(batch_size, device=device).split(minibatch_size):
                _, new_logprob, entropy, new_value = agent.act(b_obs[idx], b_actions[idx])
                ratio = (new_logprob - b_logprobs[idx]).exp()
                adv = b_advantages[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                clipped_value = b_values[idx] + (new_value - b_values[idx]).clamp(-args.clip_coef, args.clip_coef)
                value_loss = (
                    0.5 * torch.max((new_value - b_returns[idx]) ** 2, (clipped_value - b_returns[idx]) ** 2).mean()
                )
                loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        # One host sync per iteration, for the log line.
        stats = {
            "iteration": iteration,
            "global_step": iteration * batch_size,
            "episodic_return": (finished_returns / finished).item(),
            "episodes": int(finished.item()),
            "steps_per_second": iteration * batch_size / (time.time() - start),
        }
        print(
            f"iteration {iteration}/{iterations}  step {stats['global_step']}  episodic_return "
            f"{stats['episodic_return']:.1f} ({stats['episodes']} episodes)  {stats['steps_per_second']:.0f} steps/s"
        )
    envs.close()
    return stats


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for field in dataclasses.fields(Args):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)
    return Args(**vars(parser.parse_args()))


if __name__ == "__main__":
    main(parse_args())
