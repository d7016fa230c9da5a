"""DDPG and TD3 pieces on fixed inputs (the replay ring, soft updates, the TD target, TD3's twin
critics and target smoothing, the separation of the actor's and the critic's updates), the
transitions the trainer stores, its schedule of actor updates, smoke runs with tiny budgets and a
learning check on Pendulum-v1; on a GPU, captured runs against eager ones."""

import copy
import dataclasses
import math
import re

import numpy as np
import pytest
import torch
from gpu_marl_envs.baselines import ddpg, run_config
from gpu_marl_envs.baselines.ddpg import (
    Actor,
    Critic,
    DDPGConfig,
    TD3Config,
    TwinCritic,
    critic_loss,
    evaluate,
    soft_update,
    td_target,
    train,
    update_actor,
    update_critic,
)
from gpu_marl_envs.baselines.replay import ReplayBuffer, Transitions
from gpu_marl_envs.baselines.rollout import EpisodeStats
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
    assert len(replay) == 5 and replay.position.item() == 4, "9 items into 5 slots: the next write goes to slot 4"
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


class RecordingCritic(nn.Module):
    """A target critic pair whose estimates are fixed rows (Q1' = 5, Q2' = 3) and which keeps the
    actions it is asked about."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def values(self, obs, actions):
        self.seen.append(actions.clone())
        return torch.tensor([5.0, 3.0])[:, None].expand(2, obs.shape[0])


def test_td3_target_takes_the_smaller_estimate_of_a_smoothed_action():
    torch.manual_seed(0)
    critic, target_actor, target_critic = TwinCritic(3, 1, (16,)), Actor(3, PENDULUM_ACTIONS, (16,)), RecordingCritic()
    with torch.no_grad():
        target_actor.net[-1].weight.zero_()
        target_actor.net[-1].bias.fill_(50.0)  # mu'(s') = 2, the upper bound
    batch = Transitions(
        torch.randn(512, 3), torch.rand(512, 1) * 4 - 2, torch.randn(512), torch.randn(512, 3), torch.rand(512) < 0.5
    )
    loss, q1_estimates = critic_loss(
        critic, target_actor, target_critic, batch, 0.9, policy_noise=10.0, noise_clip=0.25
    )
    # A huge std clipped at 0.25 half-ranges (0.5 in Pendulum's torque), added to 2 and clipped to [-2, 2].
    smoothed = target_critic.seen[0]
    assert smoothed.min().item() == pytest.approx(1.5) and smoothed.max().item() == 2.0
    assert (smoothed == 1.5).float().mean() > 0.3, "most of a std-10 noise is clipped at -0.5"
    target = td_target(batch.rewards, batch.terminated, torch.full((512,), 3.0), 0.9)  # min(5, 3)
    with torch.no_grad():
        q1, q2 = critic.q1(batch.obs, batch.actions), critic.q2(batch.obs, batch.actions)
    assert torch.equal(critic(batch.obs, batch.actions), q1), "the pair's value (the actor's objective) is Q1"
    expected = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6), "each critic regresses on the one target"
    assert torch.equal(q1_estimates, q1), "the second output is Q1's estimates"
    # Without smoothing the target actor's action is used as it is.
    critic_loss(critic, target_actor, target_critic, batch, 0.9)
    assert torch.equal(target_critic.seen[1], torch.full((512, 1), 2.0))


def test_td3_steps_move_both_critics_and_the_actor_follows_q1():
    actor, _, target_actor, _, batch = small_setup()
    critic, target_critic = TwinCritic(3, 1, (16,)), TwinCritic(3, 1, (16,))
    critic_before = snapshot(critic)
    update_critic(
        critic,
        torch.optim.Adam(critic.parameters(), lr=0.01),
        target_actor,
        target_critic,
        batch,
        0.9,
        policy_noise=0.2,
    )
    moved = [not torch.equal(a, b) for a, b in zip(critic_before, snapshot(critic))]
    assert all(moved), "both critics of the pair learn from the target"
    critic_before = snapshot(critic)
    with torch.no_grad():
        expected_loss = -critic.q1(batch.obs, actor(batch.obs)).mean()
    loss = update_actor(actor, torch.optim.Adam(actor.parameters(), lr=0.01), critic, batch.obs)
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-6), "the actor ascends Q1"
    assert unchanged(critic_before, critic)


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


def test_one_step_episode_sums_are_episode_stats_bitwise():
    """EpisodeStats.add_step, DDPG's accounting of one vector step, against EpisodeStats.add of the
    same step, over steps that end episodes in some envs and not in others."""
    generator = torch.Generator().manual_seed(0)
    fast, reference = EpisodeStats(16, "cpu"), EpisodeStats(16, "cpu")
    for step in range(50):
        rewards = torch.randn(16, generator=generator) * 10
        done = torch.rand(16, generator=generator) < 0.2
        fast.add_step(rewards, done)
        reference.add(rewards[None], done[None])
        for name in ("running", "total", "count"):
            assert torch.equal(getattr(fast, name), getattr(reference, name)), f"{name} differs at step {step}"


def test_actor_updates_follow_the_policy_frequency_across_iterations():
    # 3 critic steps an iteration, the actor at every 2nd of the run: the iterations' patterns
    # alternate, each its own phase (a graph on CUDA), and the counts are the eager counter's.
    config = DDPGConfig(
        num_envs=2,
        total_timesteps=2 * 7,
        learning_starts=3,
        batch_size=4,
        buffer_size=64,
        gradient_steps=3,
        hidden=(8,),
    )
    run = ddpg.start("Pendulum-v1", config, device="cpu")
    phases = ddpg.Phases(run)
    assert [run.learns(i) for i in range(3)] == [False, False, True], "learning starts at env step 4 >= 3"
    assert run.actor_steps(2) == (False, True, False) and run.actor_steps(3) == (True, False, True)
    for iteration in range(run.iterations):
        phases.collect(iteration)
        phases.update()
    assert len(run.replay) == 14 and len(phases.updates) == 2
    (critic_steps,) = {int(state["step"]) for state in run.critic_optimizer.state.values()}
    (actor_steps,) = {int(state["step"]) for state in run.actor_optimizer.state.values()}
    assert (critic_steps, actor_steps) == (5 * 3, 5 * 3 // 2)
    run.envs.close()


@pytest.mark.parametrize(
    "env_id, exploration, config_type",
    [
        ("Pendulum-v1", "gaussian", DDPGConfig),
        ("MountainCarContinuous-v0", "ou", DDPGConfig),
        ("Pendulum-v1", "gaussian", TD3Config),
    ],
)
def test_training_smoke(env_id, exploration, config_type):
    config = config_type(
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


@pytest.mark.parametrize(
    "name, env_id, algorithm",
    [
        ("pendulum_ddpg.toml", "Pendulum-v1", "ddpg"),
        ("pendulum_td3.toml", "Pendulum-v1", "td3"),
        ("mountain_car_continuous_ddpg.toml", "MountainCarContinuous-v0", "ddpg"),
        ("mountain_car_continuous_td3.toml", "MountainCarContinuous-v0", "td3"),
    ],
)
def test_shipped_configs_build(name, env_id, algorithm):
    built = run_config.build_config(run_config.read_config(run_config.CONFIGS / name), [], None)
    assert built[:2] == (algorithm, env_id)
    run_config.check_env(*built)
    config, td3 = built[2], algorithm == "td3"
    assert type(config) is (TD3Config if td3 else DDPGConfig)
    assert (config.twin_critics, config.policy_noise > 0) == (td3, td3), "TD3's settings on, DDPG's off"


def test_bf16_forward_passes_run_on_the_cpu():
    # A few iterations: bfloat16 products are slow on CPUs without native support.
    config = TD3Config(num_envs=2, total_timesteps=2 * 6, learning_starts=4, batch_size=4, hidden=(8,), bf16=True)
    actor, history = train("Pendulum-v1", config, device="cpu", log_every=3, log=None)
    assert all(math.isfinite(v) for v in history[-1].values()), history[-1]
    assert all(p.dtype == torch.float32 for p in actor.parameters()), "autocast leaves the parameters float32"


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
        ("policy_noise", -0.2, "policy_noise must be a finite number >= 0"),
        ("noise_clip", math.inf, "noise_clip must be a finite number >= 0"),
        ("twin_critics", 1, "twin_critics must be true or false"),
        ("fused_mlp", True, "DDPGConfig.fused_mlp = true: the fused kernels run tanh MLPs"),
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
    # The shipped config: ~20 s on two CPU cores; greedy returns -118, -119 and -133 for seeds 0-2
    # on one torch thread with the replay's device draw (-116..-132 for seeds 0-7 with the earlier
    # draw; a random policy: about -1200).
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


def leaves(value, path: str = "") -> dict:
    """The tensors and numbers of a nested training state (dicts, lists) by their path."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}/{key}").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, f"{path}/{i}").items()}
    return {path: value}


def final_state(env_id: str, config, device, backend: str) -> tuple[dict, list[dict]]:
    """A run's last training state (networks, optimizers, replay; copied) and its history without timings."""
    states = []
    _, history = train(
        env_id,
        config,
        device=device,
        backend=backend,
        log_every=8,
        log=None,
        save=lambda state: states.append(copy.deepcopy(state)),
    )
    timeless = [{key: value for key, value in entry.items() if key != "seconds"} for entry in history]
    return leaves({key: value for key, value in states[-1].items() if key != "history"}), timeless


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["pycuda", "numba", "torch"])
@pytest.mark.parametrize("algorithm", ["ddpg", "ddpg-ou", "td3"])
def test_captured_training_matches_eager_bitwise(algorithm, backend, cuda_device):
    """The same run with its iterations replayed as CUDA graphs and run eagerly: the graphs draw the
    same random numbers (exploration, replay draws, TD3's smoothing) and do the same arithmetic, so
    every parameter, optimizer state and stored transition is bitwise the same, and so is the
    history. Three gradient steps an iteration with the actor at every second make two update
    graphs, besides the random acting before learning_starts and the policy's after."""
    config = (TD3Config if algorithm == "td3" else DDPGConfig)(
        num_envs=64,
        total_timesteps=64 * 40,
        learning_starts=64 * 8,
        batch_size=64,
        buffer_size=64 * 32,  # the ring wraps round within the run
        gradient_steps=3,
        hidden=(32, 32),
        exploration="ou" if algorithm == "ddpg-ou" else "gaussian",
    )
    (graphed, graphed_history), (eager, eager_history) = (
        final_state("Pendulum-v1", dataclasses.replace(config, cuda_graph=captured), cuda_device, backend)
        for captured in (True, False)
    )
    assert graphed["/iteration"] == eager["/iteration"] == 40 and graphed.keys() == eager.keys()
    differ = [
        path
        for path, value in graphed.items()
        if not (torch.equal(value, eager[path]) if torch.is_tensor(value) else value == eager[path])
    ]
    assert differ == [], f"{len(differ)} of {len(graphed)} entries differ, first {differ[:5]}"
    assert repr(graphed_history) == repr(eager_history)  # repr: the losses before learning_starts are NaN
