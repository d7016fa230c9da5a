"""DDPG pieces on fixed inputs (the replay ring, soft updates, the TD target, the separation of the
actor's and the critic's updates), the transitions the trainer stores, smoke runs with tiny budgets
and a learning check on Pendulum-v1."""

import math
import re

import numpy as np
import pytest
import torch
from gpu_marl_envs.baselines import ddpg
from gpu_marl_envs.baselines.ddpg import (
    Actor,
    Critic,
    DDPGConfig,
    evaluate,
    soft_update,
    td_target,
    train,
    update_actor,
    update_critic,
)
from gpu_marl_envs.baselines.replay import ReplayBuffer, Transitions
from gymnasium import spaces
from torch import nn

PENDULUM_ACTIONS = spaces.Box(-2.0, 2.0, (1,), dtype=np.float32)


def numbered(ids, obs_size=2, action_size=1):
    """Transitions whose every field encodes the item's id, to tell stored items apart."""
    ids = torch.as_tensor(ids, dtype=torch.float32)
    return (
        ids[:, None].expand(-1, obs_size).clone(),
        -ids[:, None].expand(-1, action_size).clone(),
        ids * 10,
        ids[:, None].expand(-1, obs_size) + 0.5,
        ids.long() % 2 == 1,
    )


# -- replay buffer ---------------------------------------------------------------------------------


def test_replay_ring_wraps_round_and_keeps_the_newest():
    replay = ReplayBuffer(5, 2, 1, "cpu")
    for first in (0, 3, 6):  # batches of 3 into 5 slots: the second and third writes wrap round
        replay.add(*numbered(range(first, first + 3)))
    assert len(replay) == 5
    ids = replay.obs[:, 0]
    assert sorted(ids.tolist()) == [4, 5, 6, 7, 8], "the ring must hold the 5 newest items"
    assert ids.tolist() == [5, 6, 7, 8, 4], "items 5..8 overwrote slots 0..3 in order"
    # Every field of a slot belongs to the same transition.
    assert torch.equal(replay.actions[:, 0], -ids) and torch.equal(replay.rewards, ids * 10)
    assert torch.equal(replay.next_obs, replay.obs + 0.5) and torch.equal(replay.terminated, ids.long() % 2 == 1)


def test_replay_add_copies_its_inputs():
    replay = ReplayBuffer(4, 2, 1, "cpu")
    batch = numbered([1, 2])
    replay.add(*batch)
    batch[0].fill_(99.0)  # e.g. the env overwriting its observation buffer at the next step
    assert replay.obs[:2, 0].tolist() == [1.0, 2.0]


def test_replay_samples_only_stored_items():
    replay = ReplayBuffer(100, 2, 1, "cpu")
    replay.add(*numbered([1, 2, 3]))  # slots 3..99 hold zeros, never written
    batch = replay.sample(512, generator=torch.Generator().manual_seed(0))
    assert isinstance(batch, Transitions)
    assert [tuple(t.shape) for t in batch] == [(512, 2), (512, 1), (512,), (512, 2), (512,)]
    assert [t.dtype for t in batch] == [torch.float32] * 4 + [torch.bool]
    assert all(t.device == replay.device for t in batch)
    assert set(batch.obs[:, 0].tolist()) == {1.0, 2.0, 3.0}, "uniform over the 3 stored items, nothing else"
    assert torch.equal(batch.rewards, batch.obs[:, 0] * 10) and torch.equal(batch.actions[:, 0], -batch.obs[:, 0])
    again = replay.sample(512, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.obs, batch.obs), "a seeded generator must reproduce the sample"


def test_replay_rejects_bad_input():
    replay = ReplayBuffer(4, 2, 1, "cpu")
    with pytest.raises(ValueError, match="empty"):
        replay.sample(8)
    obs, actions, rewards, next_obs, terminated = numbered([1, 2])
    with pytest.raises(ValueError, match=r"actions has shape \(2,\), expected \(2, 1\)"):
        replay.add(obs, actions[:, 0], rewards, next_obs, terminated)
    with pytest.raises(ValueError, match="rewards has shape"):
        replay.add(obs, actions, rewards[:1], next_obs, terminated)
    with pytest.raises(ValueError, match="obs has shape"):
        replay.add(obs[:, :1], actions, rewards, next_obs, terminated)
    with pytest.raises(ValueError, match="exceeds the capacity 4"):
        replay.add(*numbered(range(5)))
    assert len(replay) == 0, "a rejected batch must leave the buffer as it was"
    with pytest.raises(ValueError, match="batch_size"):
        replay.sample(0)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0, 2, 1)


# -- networks and updates --------------------------------------------------------------------------


def test_actor_maps_tanh_onto_the_bounds():
    space = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 2.0], np.float32))
    actor = Actor(3, space, (8,))
    last = actor.net[-1]
    with torch.no_grad():
        last.weight.zero_()
        assert actor(torch.randn(4, 3)).tolist() == [[1.0, 1.0]] * 4, "tanh(0) is the middle of the bounds"
        last.bias.copy_(torch.tensor([50.0, -50.0]))
        assert actor(torch.randn(4, 3)).tolist() == [[3.0, 0.0]] * 4, "saturated tanh reaches the bounds"
    with pytest.raises(TypeError, match="Box"):
        Actor(3, spaces.Discrete(2))
    with pytest.raises(ValueError, match="finite"):
        Actor(3, spaces.Box(-np.inf, np.inf, (1,), dtype=np.float32))


def test_soft_update_follows_its_formula():
    torch.manual_seed(0)
    source, target = nn.Linear(3, 2), nn.Linear(3, 2)
    before = [p.clone() for p in target.parameters()]
    soft_update(target, source, 0.1)
    for old, new, online in zip(before, target.parameters(), source.parameters()):
        assert torch.allclose(new, 0.9 * old + 0.1 * online, rtol=0, atol=1e-6)
    soft_update(target, source, 1.0)
    assert all(torch.equal(t, s) for t, s in zip(target.parameters(), source.parameters()))


def test_td_target_bootstraps_on_truncation_only():
    # Both transitions come with the same Q'(s', mu'(s')) = 10; the first was cut by a time limit
    # (terminated False, whatever truncated said), the second reached a terminal state.
    rewards, next_q = torch.tensor([1.0, 1.0]), torch.tensor([10.0, 10.0])
    target = td_target(rewards, torch.tensor([False, True]), next_q, 0.9)
    assert target.tolist() == pytest.approx([1.0 + 0.9 * 10.0, 1.0])


def small_setup(seed=0):
    torch.manual_seed(seed)
    actor, critic = Actor(3, PENDULUM_ACTIONS, (16,)), Critic(3, 1, (16,))
    target_actor, target_critic = Actor(3, PENDULUM_ACTIONS, (16,)), Critic(3, 1, (16,))
    batch = Transitions(
        torch.randn(32, 3), torch.rand(32, 1) * 4 - 2, torch.randn(32), torch.randn(32, 3), torch.rand(32) < 0.5
    )
    return actor, critic, target_actor, target_critic, batch


def snapshot(*modules):
    return [p.detach().clone() for m in modules for p in m.parameters()]


def unchanged(before, *modules):
    return all(torch.equal(a, b) for a, b in zip(before, (p for m in modules for p in m.parameters())))


def test_actor_update_leaves_the_critic_alone():
    actor, critic, target_actor, target_critic, batch = small_setup()
    optimizer = torch.optim.Adam(actor.parameters(), lr=0.01)
    critic_before, actor_before = snapshot(critic, target_actor, target_critic), snapshot(actor)
    with torch.no_grad():
        expected_loss = -critic(batch.obs, actor(batch.obs)).mean()
    loss = update_actor(actor, optimizer, critic, batch.obs)
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-6), "the loss is -Q(s, mu(s))"
    assert unchanged(critic_before, critic, target_actor, target_critic)
    assert all(p.grad is None for p in critic.parameters()), "the actor's loss must leave no critic gradients"
    assert all(p.requires_grad for p in critic.parameters()), "the critic must be trainable again afterwards"
    assert not unchanged(actor_before, actor), "the actor must have moved"


def test_critic_update_leaves_the_actors_alone():
    actor, critic, target_actor, target_critic, batch = small_setup()
    optimizer = torch.optim.Adam(critic.parameters(), lr=0.01)
    actor_before, critic_before = snapshot(actor, target_actor, target_critic), snapshot(critic)
    with torch.no_grad():
        expected_target = td_target(
            batch.rewards, batch.terminated, target_critic(batch.next_obs, target_actor(batch.next_obs)), 0.9
        )
        expected_loss = ((critic(batch.obs, batch.actions) - expected_target) ** 2).mean()
    loss, _ = update_critic(critic, optimizer, target_actor, target_critic, batch, 0.9)
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-6), "the loss is the squared TD error"
    assert unchanged(actor_before, actor, target_actor, target_critic)
    assert all(p.grad is None for m in (actor, target_actor, target_critic) for p in m.parameters())
    assert not unchanged(critic_before, critic), "the critic must have moved"


# -- the trainer -----------------------------------------------------------------------------------


class RecordingReplay(ReplayBuffer):
    """Keeps a copy of every batch the trainer adds."""

    added: list = []

    def add(self, *fields):
        RecordingReplay.added.append([f.clone() for f in fields])
        super().add(*fields)


def test_trainer_stores_final_observations_and_terminated_only(monkeypatch):
    # Pendulum truncates every episode at step 200 and never terminates.
    RecordingReplay.added = []
    monkeypatch.setattr(ddpg, "ReplayBuffer", RecordingReplay)
    config = DDPGConfig(num_envs=2, total_timesteps=2 * 202, learning_starts=2 * 150, batch_size=8, hidden=(8,))
    train("Pendulum-v1", config, device="cpu", log=None)
    obs, actions, rewards, next_obs, terminated = (torch.stack(f) for f in zip(*RecordingReplay.added))
    assert not terminated.any(), "a truncated episode is no terminal state"
    assert (actions.abs() <= 2.0).all()
    # Within an episode the successor is the next step's observation ...
    assert torch.equal(next_obs[:199], obs[1:200]) and torch.equal(next_obs[200:-1], obs[201:])
    # ... at the truncation it is the final observation, not the reset one the env returned.
    assert not torch.allclose(next_obs[199], obs[200])
    # Pendulum's obs is (cos, sin, theta_dot) and theta moves by dt * the new theta_dot: the stored
    # successor continues the episode's last state.
    angle = lambda o: torch.atan2(o[..., 1], o[..., 0])  # noqa: E731
    turned = torch.remainder(angle(next_obs[199]) - angle(obs[199]) + math.pi, 2 * math.pi) - math.pi
    assert torch.allclose(turned, 0.05 * next_obs[199, :, 2], atol=1e-4)


@pytest.mark.parametrize("env_id, exploration", [("Pendulum-v1", "gaussian"), ("MountainCarContinuous-v0", "ou")])
def test_training_smoke(env_id, exploration):
    config = DDPGConfig(
        num_envs=4, total_timesteps=256, learning_starts=64, batch_size=32, hidden=(16, 16), exploration=exploration
    )
    actor, history = train(env_id, config, device="cpu", log_every=16, log=None)
    assert [h["env_steps"] for h in history] == [64, 128, 192, 256]
    assert set(history[0]) == {
        "env_steps",
        "seconds",
        "mean_return",
        "episodes",
        "critic_loss",
        "actor_loss",
        "q_value",
    }
    assert math.isnan(history[0]["critic_loss"]), "no update before learning_starts: the losses are NaN"
    for entry in history[1:]:
        assert all(math.isfinite(v) for v in entry.values()), entry
    returns = evaluate(actor, env_id, num_episodes=2, device="cpu")
    assert returns.shape == (2,) and torch.isfinite(returns).all()


def test_discrete_env_is_rejected():
    with pytest.raises(TypeError, match="Box action space"):
        train("CartPole-v1", DDPGConfig(total_timesteps=8, learning_starts=0), device="cpu", log=None)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("num_envs", 0, "num_envs must be an int >= 1"),
        ("batch_size", 2.5, "batch_size must be an int"),
        ("learning_starts", -1, "learning_starts must be an int >= 0"),
        ("total_timesteps", 2, "cover one vector step"),
        ("buffer_size", 2, "must hold one vector step"),
        ("gamma", 1.5, re.escape("gamma must be a number in [0, 1]")),
        ("tau", 0.0, re.escape("tau must be a number in (0, 1]")),
        ("actor_lr", 0.0, "actor_lr must be"),
        ("exploration", "uniform", '"gaussian" or "ou"'),
        ("exploration_noise", -0.1, "exploration_noise"),
        ("ou_theta", 0.0, "ou_theta"),
        ("policy_frequency", 0, "policy_frequency"),
        ("hidden", (), "hidden must be a non-empty tuple"),
        ("hidden", [64, 64], "hidden must be a non-empty tuple"),
    ],
)
def test_bad_config_is_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        DDPGConfig(**{"num_envs": 4, field: value})


class RandomPolicy(nn.Module):
    """Uniform random torques, through the same evaluation as the trained actor."""

    def greedy(self, obs):
        return torch.rand((obs.shape[0], 1), device=obs.device) * 4 - 2


def test_ddpg_learns_pendulum():
    # The shipped config: ~20 s on two CPU cores; greedy returns -116..-132 for seeds 0-7 (a random
    # policy: about -1200).
    from gpu_marl_envs.baselines import train as command

    algorithm, _, config = command.build_config(command.read_config(env="Pendulum-v1"), [], seed=0)
    assert algorithm == "ddpg"
    actor, history = train("Pendulum-v1", config, device="cpu", log=None)
    returns = evaluate(actor, "Pendulum-v1", num_episodes=16, device="cpu")
    torch.manual_seed(0)
    random_returns = evaluate(RandomPolicy(), "Pendulum-v1", num_episodes=16, device="cpu")
    assert random_returns.mean().item() < -900
    assert returns.mean().item() > -700, (
        f"greedy returns {returns.tolist()}; training curve {[round(h['mean_return']) for h in history]}"
    )
    assert returns.mean().item() > random_returns.mean().item() + 500


@pytest.mark.gpu
def test_training_smoke_on_gpu(cuda_device):
    replay = ReplayBuffer(16, 3, 1, cuda_device)
    replay.add(*(f.to(cuda_device) for f in numbered([1, 2, 3], obs_size=3)))
    assert all(t.device.type == "cuda" for t in replay.sample(8))
    config = DDPGConfig(
        num_envs=64, total_timesteps=64 * 32, learning_starts=64 * 8, batch_size=64, hidden=(32, 32), exploration="ou"
    )
    actor, history = train("Pendulum-v1", config, device=cuda_device, log_every=16, log=None)
    assert actor.action_scale.device.type == "cuda"
    assert all(math.isfinite(v) for v in history[-1].values()), history[-1]
    assert torch.isfinite(evaluate(actor, "Pendulum-v1", num_episodes=4, device=cuda_device)).all()
