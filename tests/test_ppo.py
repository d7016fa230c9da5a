"""PPO pieces on fixed inputs (GAE against a plain loop, the clipped losses against their formulas,
the policy heads) and smoke runs with tiny budgets."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from gpu_marl_envs.baselines import a2c, ppo
from gpu_marl_envs.baselines.gae import compute_gae
from gpu_marl_envs.baselines.minibatches import Reorderable
from gpu_marl_envs.baselines.models import ActorCritic
from gpu_marl_envs.baselines.ppo import PPOConfig, evaluate, ppo_loss, train
from gpu_marl_envs.baselines.rollout import EpisodeStats, bootstrap_values, iterate_overlapping, mean_and_count
from gymnasium import spaces


def gae_loop(rewards, values, dones, next_value, gamma, lam):
    """Schulman et al.'s recursion written out per env and step in plain Python floats."""
    T, E = len(rewards), len(rewards[0])
    advantages = [[0.0] * E for _ in range(T)]
    for e in range(E):
        running = 0.0
        for t in reversed(range(T)):
            following = next_value[e] if t == T - 1 else values[t + 1][e]
            mask = 0.0 if dones[t][e] else 1.0
            delta = rewards[t][e] + gamma * following * mask - values[t][e]
            running = delta + gamma * lam * mask * running
            advantages[t][e] = running
    return advantages


def test_gae_matches_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    rewards, values = (
        torch.rand(7, 3, generator=g, dtype=torch.float64),
        torch.rand(7, 3, generator=g, dtype=torch.float64),
    )
    dones = torch.rand(7, 3, generator=g) < 0.3
    next_value = torch.rand(3, generator=g, dtype=torch.float64)
    advantages, returns = compute_gae(rewards, values, dones, next_value, 0.9, 0.8)
    expected = gae_loop(rewards.tolist(), values.tolist(), dones.tolist(), next_value.tolist(), 0.9, 0.8)
    assert torch.allclose(advantages, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    assert torch.equal(returns, advantages + values)
    assert dones.any() and not dones.all()


def test_gae_episode_end_stops_bootstrapping():
    rewards, values = torch.tensor([[1.0], [1.0]]), torch.tensor([[0.5], [0.5]])
    advantages, _ = compute_gae(rewards, values, torch.tensor([[True], [False]]), torch.tensor([10.0]), 1.0, 1.0)
    assert advantages[0, 0] == pytest.approx(0.5), "the value after an ended episode must not leak back"
    assert advantages[1, 0] == pytest.approx(1.0 + 10.0 - 0.5)


def test_episode_stats_of_whole_rollouts_match_a_plain_loop():
    # Episodes that end inside a rollout, span two rollouts, or span all three; integer rewards keep sums exact.
    generator = torch.Generator().manual_seed(3)
    rollouts = [
        (torch.randint(-3, 4, (T, 5), generator=generator).float(), torch.rand(T, 5, generator=generator) < 0.2)
        for T in (7, 1, 9)
    ]
    rollouts[0][1][:, 4] = False  # env 4 finishes its first episode in the last rollout
    stats, ended = EpisodeStats(5, "cpu"), []
    running = [0.0] * 5
    for rewards, dones in rollouts:
        stats.add(rewards, dones)
        for t in range(len(rewards)):
            for env in range(5):
                running[env] += rewards[t, env].item()
                if dones[t, env]:
                    ended.append(running[env])
                    running[env] = 0.0
    assert mean_and_count(*stats.take().tolist()) == (pytest.approx(sum(ended) / len(ended)), len(ended))
    assert stats.running.tolist() == running
    assert stats.take().tolist() == [0.0, 0.0], "take clears"


@pytest.mark.parametrize("max_per_column", [1, 2, 3, 9])
def test_bootstrap_values_only_where_truncated(max_per_column):
    # (T, envs, agents) columns with 0 .. max_per_column truncations each; V(obs) = a linear map of the obs.
    generator = torch.Generator().manual_seed(max_per_column)
    T, shape = 9, (4, 3)
    mask = torch.zeros(T, *shape, dtype=torch.bool)
    for column in range(12):
        count = column % (min(max_per_column, T) + 1)
        steps = torch.randperm(T, generator=generator)[:count]
        mask.view(T, -1)[steps, column] = True
    final_obs = torch.randn(T, *shape, 5, generator=generator)
    weights = torch.randn(5, generator=generator)

    def value(obs):
        assert obs.dim() == 2, "the critic gets a batch of rows"
        return obs @ weights

    expected = (final_obs @ weights) * mask
    torch.testing.assert_close(bootstrap_values(value, final_obs, mask, max_per_column), expected)


def test_clipped_losses_follow_their_formulas():
    torch.manual_seed(0)
    agent = ActorCritic(4, spaces.Discrete(2))
    obs = torch.randn(6, 4)
    actions = torch.tensor([0, 1, 0, 1, 1, 0])
    with torch.no_grad():
        _, log_probs, entropy, values = agent.action_and_value(obs, actions)
    # Old policy: probabilities twice and half the new ones, so the ratio is 0.5 or 2 (both clipped).
    old_log_probs = log_probs + torch.tensor([math.log(2), -math.log(2)] * 3)
    advantages = torch.tensor([1.0, -1.0, 2.0, 0.5, -0.5, 1.5])
    returns, old_values = values + 1.0, values - 0.5
    config = PPOConfig(clip_coef=0.2, clip_vloss=True, norm_adv=False, ent_coef=0.01, vf_coef=0.5)
    loss, stats = ppo_loss(agent, obs, actions, old_log_probs, advantages, returns, old_values, config)
    ratio = torch.tensor([0.5, 2.0] * 3)
    policy = torch.max(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2)).mean()
    clipped_values = old_values + (values - old_values).clamp(-0.2, 0.2)
    value = 0.5 * torch.max((values - returns) ** 2, (clipped_values - returns) ** 2).mean()
    assert stats["policy_loss"].item() == pytest.approx(policy.item(), rel=1e-5)
    assert stats["value_loss"].item() == pytest.approx(value.item(), rel=1e-5)
    assert loss.item() == pytest.approx((policy - 0.01 * entropy.mean() + 0.5 * value).item(), rel=1e-5)
    assert stats["clip_fraction"].item() == 1.0
    # The terms an update returns keep no autograd graph alive into the next update.
    assert not any(term.requires_grad for term in stats.values())


@pytest.mark.parametrize(
    "space, shape",
    [
        (spaces.Discrete(3), ()),
        (spaces.MultiDiscrete([4, 5]), (2,)),
        (spaces.Box(-2.0, 2.0, (2,), dtype=np.float32), (2,)),
    ],
)
def test_policy_heads(space, shape):
    agent = ActorCritic(3, space)
    obs = torch.randn(8, 3)
    action, log_prob, entropy, value = agent.action_and_value(obs)
    assert action.shape == (8, *shape) and log_prob.shape == entropy.shape == value.shape == (8,)
    _, again, _, _ = agent.action_and_value(obs, action)
    assert torch.allclose(log_prob, again), "the log-probability of a given action must be reproducible"
    assert agent.greedy(obs).shape == (8, *shape)


@pytest.mark.parametrize(
    "obs_shape, action_shape, action_dtype",
    [((4,), (), torch.int64), ((3,), (2,), torch.float32), ((2, 3), (2,), torch.int64)],
    ids=["cartpole-like", "box", "multi-discrete"],
)
def test_reordered_fields_are_the_indexed_rows_bitwise(obs_shape, action_shape, action_dtype):
    # 9, 9 and 12 columns (the last padded to 13), a bfloat16 field: each reordered field equals
    # indexing that field by the same rows, value for value, in its own dtype and shape, contiguous.
    g = torch.Generator().manual_seed(0)
    rows = 50
    obs = torch.randn(rows, *obs_shape, generator=g)
    actions = (
        torch.randint(0, 7, (rows, *action_shape), generator=g)
        if action_dtype == torch.int64
        else torch.randn(rows, *action_shape, generator=g)
    )
    log_probs = torch.randn(rows, generator=g).bfloat16()
    advantages, returns, values = torch.randn(3, rows, generator=g)
    fields = (obs, actions, log_probs, advantages, returns, values)
    order = torch.randperm(rows, generator=g)
    for got, field in zip(Reorderable(*fields).reordered(order), fields):
        assert got.dtype == field.dtype and got.is_contiguous()
        assert torch.equal(got, field[order])


def test_reordered_fields_need_as_many_rows_each():
    with pytest.raises(ValueError, match=r"fields of \[4, 3\] rows"):
        Reorderable(torch.zeros(4, 2), torch.zeros(3))


@pytest.mark.parametrize("max_std", [math.inf, 0.5])
def test_gaussian_head_is_torch_normal(max_std):
    # The written-out Gaussian (no torch.distributions: capturable) against torch's Normal, with a
    # free std (exp of log_std) and a bounded one (max_std * sigmoid(std_logit), MAPPO's head).
    agent = ActorCritic(3, spaces.Box(0.0, 1.0, (4,), dtype=np.float32), max_std=max_std)
    params = torch.tensor([-2.0, 0.0, 1.0, 30.0])  # the last: the std at its bound where bounded
    with torch.no_grad():
        (agent.log_std if max_std == math.inf else agent.std_logit).copy_(params)
    obs = torch.randn(6, 3)
    action, log_prob, entropy, _ = agent.action_and_value(obs)
    mean = agent.greedy(obs)
    std = params.exp() if max_std == math.inf else max_std * torch.sigmoid(params)
    normal = torch.distributions.Normal(mean, std)
    torch.testing.assert_close(log_prob, normal.log_prob(action).sum(-1))
    torch.testing.assert_close(entropy, normal.entropy().sum(-1))
    if max_std != math.inf:
        assert torch.all(agent.gaussian_log_std().exp() <= max_std)


def test_beta_head_is_the_scaled_beta_density():
    # The Beta head over Box(-2, 3): each component a Beta(1 + softplus(a), 1 + softplus(b)) on
    # [0, 1], scaled to the box, its density and entropy written out here from the Beta's formulas.
    agent = ActorCritic(3, spaces.Box(-2.0, 3.0, (4,), dtype=np.float32), distribution="beta")
    assert agent.actor[-1].out_features == 8, "two concentrations per component"
    with torch.no_grad():
        agent.actor[-1].bias.copy_(torch.tensor([-3.0, 0.0, 2.0, 8.0, 1.0, 0.0, -1.0, 5.0]))
    obs = torch.randn(500, 3)
    action, log_prob, entropy, _ = agent.action_and_value(obs)
    assert ((action > -2.0) & (action < 3.0)).all(), "draws inside the box, nothing to clip"
    a, b = (1.0 + torch.nn.functional.softplus(half) for half in agent.actor(obs).chunk(2, dim=-1))
    x = (action + 2.0) / 5.0
    log_beta = torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)
    density = (a - 1) * x.log() + (b - 1) * (1 - x).log() - log_beta - math.log(5.0)
    torch.testing.assert_close(log_prob, density.sum(-1))
    digamma = torch.digamma
    unit_entropy = log_beta - (a - 1) * digamma(a) - (b - 1) * digamma(b) + (a + b - 2) * digamma(a + b)
    torch.testing.assert_close(entropy, (unit_entropy + math.log(5.0)).sum(-1))
    torch.testing.assert_close(agent.greedy(obs), -2.0 + 5.0 * a / (a + b), msg="greedy: the mean")
    # The draws follow the means: component 3's (a = 1 + softplus(8), b = 1 + softplus(5)) near 0.73.
    assert abs(x[:, 3].mean().item() - (a / (a + b))[:, 3].mean().item()) < 0.02


@pytest.mark.parametrize(
    "space, max_std, message",
    [
        (spaces.Box(-np.inf, 1.0, (2,), dtype=np.float32), math.inf, "finite bounds"),
        (spaces.Discrete(3), math.inf, "finite bounds"),
        (spaces.Box(np.float32([0.0, 1.0]), np.float32([1.0, 1.0])), math.inf, "finite bounds"),
        (spaces.Box(0.0, 1.0, (2,), dtype=np.float32), 0.5, "max_std"),
    ],
)
def test_a_beta_head_is_refused_where_it_cannot_be(space, max_std, message):
    with pytest.raises(ValueError, match=message):
        ActorCritic(3, space, distribution="beta", max_std=max_std)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_training_smoke(env_id):
    config = PPOConfig(num_envs=4, num_steps=16, total_timesteps=256, num_minibatches=2, update_epochs=2)
    agent, history = train(env_id, config, device="cpu", log_every=2, log=None)
    assert [h["env_steps"] for h in history] == [128, 256]
    for entry in history:
        assert all(math.isfinite(v) for v in entry.values()), entry
    # Later epochs see a changed policy: the ratio is not stuck at 1.
    assert history[-1]["approx_kl"] > 0.0
    returns = evaluate(agent, env_id, num_episodes=2, device="cpu")
    assert returns.shape == (2,) and torch.isfinite(returns).all()


def test_an_entry_is_finished_after_the_next_rollout_only_without_a_checkpoint():
    """With ``overlap`` the host reads an entry while the next rollout runs; with a checkpoint due
    (no overlap) the entry and its save come before the next iteration starts."""

    def calls(overlap):
        order = []

        def entry(iteration, losses):
            order.append(f"entry {iteration}")
            return (lambda: order.append(f"finish {iteration}")) if iteration % 2 else None

        iterate_overlapping(
            range(4),
            lambda: order.append("rollout"),
            lambda iteration: order.append(f"update {iteration}") or {},
            entry,
            overlap,
        )
        return order

    first = ["rollout", "update 0", "entry 0", "rollout", "update 1", "entry 1"]
    last = ["update 2", "entry 2", "rollout", "update 3", "entry 3", "finish 3"]
    assert calls(overlap=True) == [*first, "rollout", "finish 1", *last]
    assert calls(overlap=False) == [*first, "finish 1", "rollout", *last]


@pytest.mark.parametrize("module", [ppo, a2c])
def test_overlapped_entries_equal_entries_before_the_next_iteration(module):
    """A run without ``save`` reads its entries while the next rollout runs; one with ``save``
    reads them first. The entries (all but the seconds) and the trained weights are the same."""
    config = dataclasses.replace(
        module.PPOConfig() if module is ppo else module.A2CConfig(), num_envs=4, num_steps=16, total_timesteps=320
    )
    saved = []
    runs = [
        module.train("CartPole-v1", config, device="cpu", log_every=2, log=None, save=save)
        for save in (None, saved.append)
    ]
    (agent, history), (agent_saved, history_saved) = runs
    untimed = [
        [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in hs] for hs in (history, history_saved)
    ]
    assert untimed[0] == untimed[1] and [h["env_steps"] for h in history] == [128, 256, 320]
    assert [s["iteration"] for s in saved] == [0, 2, 4, 5]
    for mine, theirs in zip(agent.state_dict().values(), agent_saved.state_dict().values()):
        assert torch.equal(mine, theirs)


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="multiple of num_minibatches"):
        PPOConfig(num_envs=3, num_steps=5, num_minibatches=4)
    with pytest.raises(ValueError, match="num_envs"):
        PPOConfig(num_envs=0)


# -- A2C -----------------------------------------------------------------------------------------


def test_a2c_loss_follows_its_formula():
    torch.manual_seed(1)
    agent = ActorCritic(4, spaces.Discrete(2))
    obs, actions = torch.randn(5, 4), torch.tensor([0, 1, 1, 0, 1])
    advantages, returns = torch.randn(5), torch.randn(5)
    config = a2c.A2CConfig(ent_coef=0.02, vf_coef=0.5)
    _, log_probs, entropy, values = agent.action_and_value(obs, actions)
    loss, stats = a2c.a2c_loss(log_probs, entropy, values, advantages, returns, config)
    log_probs, entropy, values = log_probs.detach(), entropy.detach(), values.detach()
    expected = -(advantages * log_probs).mean() - 0.02 * entropy.mean() + 0.5 * 0.5 * ((returns - values) ** 2).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert stats["value_loss"].item() == pytest.approx((0.5 * ((returns - values) ** 2).mean()).item(), rel=1e-6)


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "MountainCarContinuous-v0"])
def test_a2c_smoke(env_id):
    config = a2c.A2CConfig(num_envs=4, num_steps=5, total_timesteps=200)
    agent, history = a2c.train(env_id, config, device="cpu", log_every=5, log=None)
    assert [h["env_steps"] for h in history] == [100, 200]
    assert all(math.isfinite(v) for entry in history for v in entry.values())
    assert torch.isfinite(evaluate(agent, env_id, num_episodes=2, device="cpu")).all()


def test_a2c_bad_config_is_rejected():
    with pytest.raises(ValueError, match="cover one rollout"):
        a2c.A2CConfig(num_envs=8, num_steps=5, total_timesteps=10)


def test_ppo_learns_cartpole():
    # The README's main job: the shipped config (PureJaxRL's), 100k steps on the CPU (~25 s on two
    # cores). The criterion is the benchmarks' "time to 475": the first iteration whose finished
    # episodes average >= 475. Seeds 0-7 on one CPU thread reached it after 22k-60k steps. The greedy
    # return at 100k steps spreads more (358-500 over those seeds: this config oscillates late in a
    # run, on the GPU too), so it is held only to a bound that a policy which has not learned misses.
    config = PPOConfig(total_timesteps=100_000)
    agent, history = train("CartPole-v1", config, device="cpu", log=None, log_every=1)
    curve = [round(h["mean_return"]) for h in history]
    assert max(curve) >= 475, f"training curve {curve}"
    returns = evaluate(agent, "CartPole-v1", num_episodes=16, device="cpu")
    assert returns.mean().item() >= 300, f"greedy returns {returns.tolist()}; training curve {curve}"


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["pycuda", "numba", "torch"])
@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_captured_training_matches_eager(algorithm, backend, cuda_device):
    """The same run with rollouts and updates replayed as CUDA graphs and eagerly: the graphs draw
    the same random numbers and do the same arithmetic, so the histories agree closely."""
    module = {"ppo": ppo, "a2c": a2c}[algorithm]
    config_type = ppo.PPOConfig if algorithm == "ppo" else a2c.A2CConfig
    config = config_type(num_envs=64, num_steps=16, total_timesteps=64 * 16 * 6)
    runs = [
        module.train(
            "CartPole-v1",
            dataclasses.replace(config, cuda_graph=graphed),
            device=cuda_device,
            backend=backend,
            log_every=1,
            log=None,
        )[1]
        for graphed in (True, False)
    ]
    for graphed, eager in zip(*runs):
        for key in ("mean_return", "episodes", "value_loss", "entropy"):
            assert graphed[key] == pytest.approx(eager[key], rel=1e-3, abs=1e-4), (key, graphed, eager)


@pytest.mark.parametrize("module, config_type", [(ppo, PPOConfig), (a2c, a2c.A2CConfig)])
def test_bf16_updates_run_on_the_cpu(module, config_type):
    config = config_type(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3, bf16=True)
    agent, history = module.train("CartPole-v1", config, device="cpu", log_every=1, log=None)
    assert all(math.isfinite(v) for entry in history for v in entry.values()), history
    assert all(p.dtype == torch.float32 for p in agent.parameters()), "autocast leaves the parameters float32"
