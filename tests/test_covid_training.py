"""Training on CovidEconomy-v0 (``baselines/multi_agent.py``, ``baselines/models.py``): action masks
in sampling, log-probabilities, entropies and greedy actions; the masks a rollout stores are those
its update uses; groups sharing a policy must share spaces; entropy schedules; a short run on the
torch reference whose governors never act inside their cooldown; the trainer's episode returns
against the runtime's; ``gpu-marl-train`` with each shipped config, and a checkpoint evaluated from
outside and by ``--evaluate`` (returns per group, no animation). About 40 s on 2 CPU cores.
"""

from __future__ import annotations

import pytest
import torch
from gpu_marl_envs.baselines import multi_agent, run_config, train
from gpu_marl_envs.baselines.checkpoint import load_checkpoint
from gpu_marl_envs.baselines.models import ActorCritic
from gpu_marl_envs.baselines.rollout import EpisodeStats, mean_and_count
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.parallel_env import GpuParallelEnv

ENV = "CovidEconomy-v0"
# Short episodes, cooldowns and subsidy intervals, so that a few steps see every rule.
SMALL_GAME = {"episode_length": 10, "action_cooldown": 3, "subsidy_interval": 4}
GROUPS = {"planner": "planner", "governors": "governors"}


def config(policies=None, env_params=SMALL_GAME, **run):
    run = {"num_envs": 2, "num_steps": 12, "total_timesteps": 48, **run}
    policies = policies or {name: {"hidden": [16]} for name in GROUPS}
    return multi_agent.MultiAgentConfig.from_dict(
        {"hyperparameters": run, "groups": GROUPS, "policies": policies, "env_params": env_params}
    )


def random_masks(rows: int, nvec: list[int], allowed: float = 0.3) -> torch.Tensor:
    """Bool ``(rows, sum(nvec))``: each action allowed with probability ``allowed``, and at least
    one action of each component allowed in every row."""
    masks = torch.rand(rows, sum(nvec)) < allowed
    for part in masks.split(nvec, dim=-1):  # views: writing them writes masks
        part[torch.arange(rows), torch.randint(0, part.shape[-1], (rows,))] = True
    return masks


def masked_reference(logits: torch.Tensor, masks: torch.Tensor, actions: torch.Tensor, nvec: list[int]):
    """Log-probability and entropy of each row, from log_softmax over the allowed actions alone."""
    log_probs, entropies = [], []
    for row in range(len(logits)):
        log_prob = entropy = 0.0
        for i, (scores, allowed) in enumerate(zip(logits[row].split(nvec), masks[row].split(nvec))):
            allowed_ids = allowed.nonzero().flatten()
            lp = scores[allowed_ids].log_softmax(-1)
            action = int(actions[row] if actions.dim() == 1 else actions[row, i])
            log_prob += lp[(allowed_ids == action).nonzero().item()]
            entropy -= (lp.exp() * lp).sum()
        log_probs.append(log_prob)
        entropies.append(entropy)
    return torch.stack(log_probs), torch.stack(entropies)


# -- the masked distribution ---------------------------------------------------------------------


@pytest.mark.parametrize("space", [spaces.Discrete(11), spaces.MultiDiscrete([3, 5])], ids=str)
def test_masked_sampling_never_picks_a_masked_action(space):
    torch.manual_seed(0)
    net = ActorCritic(6, space, (16,))
    obs, masks = torch.randn(2048, 6), random_masks(2048, net.nvec)
    for _ in range(20):
        actions = net.sample(obs, masks).view(2048, -1)
        offsets = torch.tensor([0, *net.nvec[:-1]]).cumsum(0)
        assert masks.gather(1, actions + offsets).all(), "a masked action was drawn"
        assert masks.gather(1, net.greedy(obs, masks).view(2048, -1) + offsets).all(), "greedy chose a masked action"
    # Even where the network strongly prefers a forbidden action.
    with torch.no_grad():
        net.actor[-1].bias[0] = 1e4
    forbid_first = torch.ones(2048, sum(net.nvec), dtype=torch.bool)
    forbid_first[:, 0] = False
    assert (net.sample(obs, forbid_first).view(2048, -1)[:, 0] != 0).all()
    assert (net.greedy(obs, forbid_first).view(2048, -1)[:, 0] != 0).all()


def test_masked_sampling_follows_the_softmax_over_the_allowed_actions():
    torch.manual_seed(1)
    net = ActorCritic(6, spaces.Discrete(11), (16,))
    obs = torch.randn(1, 6).expand(40_000, 6)
    mask = torch.zeros(11, dtype=torch.bool)
    mask[[0, 3, 4, 9]] = True
    counts = torch.bincount(net.sample(obs, mask.expand(40_000, 11)), minlength=11).float() / 40_000
    with torch.no_grad():
        expected = torch.zeros(11)
        expected[mask] = net.actor(obs[0])[mask].softmax(-1)
    torch.testing.assert_close(counts, expected, atol=0.01, rtol=0)  # 4 sigma of a 40,000-draw frequency


@pytest.mark.parametrize("space", [spaces.Discrete(11), spaces.MultiDiscrete([3, 5])], ids=str)
def test_masked_log_probs_and_entropies_are_finite_and_over_the_allowed_actions(space):
    torch.manual_seed(2)
    net = ActorCritic(6, space, (16,))
    obs, masks = torch.randn(64, 6), random_masks(64, net.nvec)
    actions = net.sample(obs, masks)
    _, log_probs, entropy, _ = net.action_and_value(obs, actions, action_mask=masks)
    expected_log_probs, expected_entropy = masked_reference(net.actor(obs), masks, actions, net.nvec)
    torch.testing.assert_close(log_probs, expected_log_probs)
    torch.testing.assert_close(entropy, expected_entropy)
    (log_probs.sum() + entropy.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in net.actor.parameters()), "a gradient is not finite"
    # bfloat16 forward passes (the bf16 option): still finite.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, log_probs, entropy, _ = net.action_and_value(obs, actions, action_mask=masks)
    assert torch.isfinite(log_probs).all() and torch.isfinite(entropy).all()


def test_without_a_mask_sampling_is_unchanged():
    """No mask: the same Gumbel-max draw, bit for bit, as before masks existed."""
    net = ActorCritic(6, spaces.Discrete(11), (16,))
    obs = torch.randn(256, 6)
    torch.manual_seed(3)
    actions = net.sample(obs)
    torch.manual_seed(3)
    with torch.no_grad():
        logits = net.actor(obs)
        expected = (logits - torch.rand_like(logits).log().neg().log()).argmax(-1)
    assert torch.equal(actions, expected)


def test_a_gaussian_policy_refuses_a_mask():
    net = ActorCritic(3, spaces.Box(-1, 1, (2,)), (8,))
    with pytest.raises(ValueError, match="Discrete and MultiDiscrete"):
        net.sample(torch.zeros(1, 3), torch.ones(1, 2, dtype=torch.bool))


def test_a_rollout_stores_masks_of_discrete_spaces_only():
    with pytest.raises(TypeError, match="Discrete action spaces only"):
        multi_agent.PolicyRollout.allocate(
            3, 2, 4, 6, spaces.MultiDiscrete([3, 3]), "cpu", episode_length=10, masked=True
        )


def test_the_update_scores_actions_under_the_masks_the_rollout_stored():
    torch.manual_seed(4)
    net = ActorCritic(6, spaces.Discrete(5), (16,))
    rollout = multi_agent.PolicyRollout.allocate(3, 2, 4, 6, spaces.Discrete(5), "cpu", episode_length=10, masked=True)
    rollout.obs.normal_()
    rollout.action_masks.copy_(random_masks(24, [5], allowed=0.4).view(3, 2, 4, 5))
    rollout.actions.copy_(net.sample(rollout.obs, rollout.action_masks))
    log_probs, _ = rollout.old_policy(net.action_and_value)
    expected, _ = masked_reference(
        net.actor(rollout.flat("obs")), rollout.flat("action_masks"), rollout.flat("actions"), [5]
    )
    torch.testing.assert_close(log_probs.flatten(), expected.detach())
    # PPO's ratio is 1 under the stored masks; without them it would not be.
    settings, weights = multi_agent.PolicyConfig(), torch.ones(24)
    rows = torch.arange(24)
    args = (
        net,
        rollout.flat("obs"),
        rollout.flat("actions"),
        log_probs.flatten(),
        torch.randn(24),
        torch.randn(24),
        weights,
        settings,
        settings.ent_coef,
    )
    _, stats = multi_agent.masked_ppo_loss(*args, **rollout.mask_argument(rows))
    assert stats["approx_kl"] == 0 and stats["clip_fraction"] == 0
    _, unmasked = multi_agent.masked_ppo_loss(*args)
    assert unmasked["approx_kl"] > 0


# -- configuration -------------------------------------------------------------------------------


def test_groups_with_different_spaces_cannot_share_a_policy():
    shared = multi_agent.MultiAgentConfig.from_dict(
        {"groups": {"planner": "all", "governors": "all"}, "policies": {"all": {}}}
    )
    with pytest.raises(ValueError) as error:
        multi_agent.make_policies(ENV, shared)
    message = str(error.value)
    assert "'planner'" in message and "'governors'" in message and "Discrete(21)" in message
    assert "different policies" in message


def test_entropy_schedules():
    settings = multi_agent.PolicyConfig(ent_coef=((0, 0.5), (100, 0.05)))
    assert [settings.entropy_coefficient(steps) for steps in (0, 50, 100, 1000)] == pytest.approx(
        [0.5, 0.275, 0.05, 0.05]
    )
    assert multi_agent.PolicyConfig(ent_coef=0.2).entropy_coefficient(10**9) == 0.2
    for bad in (((10, 0.5),), ((0, 0.5), (0, 0.1)), ((0, -1.0),), ((0, 0.5), (10,)), ()):
        with pytest.raises(ValueError, match="ent_coef must be a number >= 0 or a list of"):
            multi_agent.PolicyConfig(ent_coef=bad)
    tables = {"groups": GROUPS, "policies": {"planner": {"ent_coef": [[0, 0.5], [10, 0.1]]}, "governors": {}}}
    assert multi_agent.MultiAgentConfig.from_dict(tables).policies["planner"].ent_coef == ((0, 0.5), (10, 0.1))


# -- why the shipped configs discount by 0.995 ------------------------------------------------------


def test_at_a_discount_of_0_98_most_governors_gain_by_opening_early():
    """With every other state at level 6 and no subsidy, a governor that opens fully (level 1)
    gains in its 0.98-discounted return in most states (32 of 51 when written), in few at 0.995
    (8) or undiscounted (7): the shipped configs' reason for gamma = 0.995 (their comment)."""
    p = multi_agent.game_params(ENV, config(env_params={}))
    s = p.num_states
    target = torch.full((s + 1, s), 6)  # env i < s: governor i opens; env s: nobody does
    target[torch.arange(s), torch.arange(s)] = 1
    env = GpuParallelEnv(ENV, s + 1, device="cpu", backend="torch", params=p, autoreset_mode=AutoresetMode.DISABLED)
    obs, infos = env.reset_groups(seed=0)
    rewards = []
    for _ in range(p.episode_length):
        level = torch.round(obs["governors"][:, :, s + 9] * p.num_stringency_levels).long()
        act = infos["governors"]["action_mask"][:, :, 1] & (level != target)  # a mask allows 0 only, or all
        obs, reward, _, _, infos = env.step_groups(
            {"governors": torch.where(act, target, 0), "planner": torch.zeros(s + 1, 1, dtype=torch.int64)}
        )
        rewards.append(reward["governors"].clone())
    rewards = torch.stack(rewards)  # (T, envs, governors)

    def gainers(gamma: float) -> int:
        returns = (rewards * gamma ** torch.arange(p.episode_length, dtype=torch.float32)[:, None, None]).sum(0)
        return int((returns[torch.arange(s), torch.arange(s)] > returns[s]).sum())

    counts = {gamma: gainers(gamma) for gamma in (0.98, 0.995, 1.0)}
    assert counts[0.98] > s // 2 and counts[0.995] < s // 5 and counts[1.0] < s // 5, counts


# -- training on the torch reference ---------------------------------------------------------------


class Recording(ActorCritic):
    """An ActorCritic that keeps every observation, mask and action of its sampling and greedy calls."""

    def __init__(self, *args):
        super().__init__(*args)
        self.calls = {"sample": [], "greedy": []}

    def sample(self, obs, action_mask=None):
        action = super().sample(obs, action_mask)
        self.calls["sample"].append((obs.clone(), action_mask.clone(), action.clone()))
        return action

    def greedy(self, obs, action_mask=None):
        action = super().greedy(obs, action_mask)
        self.calls["greedy"].append((obs.clone(), action_mask.clone(), action.clone()))
        return action


def test_training_and_evaluation_act_within_the_masks():
    p = multi_agent.game_params(ENV, config())
    models = {
        "governors": Recording(p.governor_obs_dim, spaces.Discrete(11), (16,)),
        "planner": Recording(p.planner_obs_dim, spaces.Discrete(21), (16,)),
    }
    run = config(
        policies={
            "planner": {"hidden": [16], "ent_coef": [[0, 0.5], [48, 0.05]]},
            "governors": {"algorithm": "a2c", "hidden": [16]},
        }
    )
    policies, history = multi_agent.train(ENV, run, backend="torch", models=models, log_every=1, log=None)
    returns = multi_agent.evaluate(policies, ENV, run, num_episodes=2, device="cpu")
    for name, model in models.items():
        for call, records in model.calls.items():
            obs, masks, actions = (torch.cat([r[k] for r in records]) for k in range(3))
            assert masks.gather(-1, actions[..., None]).all(), f"{name}'s {call} chose a masked action"
            # The mask given is the one of the observed state (the observation ends with it).
            assert torch.equal(masks, obs[..., -masks.shape[-1] :] > 0.5), f"{name}'s {call} got another state's mask"
            assert (~masks.all(-1)).any(), f"no {name} was ever masked during {call}: the test checks nothing"
    governor_draws = torch.cat([actions for _, _, actions in models["governors"].calls["sample"]])
    assert (governor_draws > 0).any(), "the governors never acted: no cooldown was exercised"
    assert history[-1]["env_steps"] == 48 and history[-1]["episodes"] > 0
    assert history[-1]["mean_return"] == history[-1]["mean_return/planner"], "the planner's return is reported"
    assert all(torch.isfinite(torch.tensor(v)) for entry in history for v in entry.values()), history
    assert set(returns) == {"planner", "governors"} and all(torch.isfinite(torch.tensor(v)) for v in returns.values())


class RecordingEnv(GpuParallelEnv):
    """The env, keeping the runtime's per-agent episode returns wherever an episode ended."""

    ended: list

    def step_groups(self, actions):
        outputs = super().step_groups(actions)
        infos = outputs[-1]
        for group, info in infos.items():
            done = info["_episode"]
            self.ended.append((group, info["episode"]["return"][done].mean(-1).clone()))
        return outputs


def test_the_trainers_returns_are_the_runtimes_episode_returns():
    """``mean_return/<group>`` comes from :class:`EpisodeStats` over the rollout's rewards (a few
    kernels per rollout); it equals the mean of the runtime's ``infos[group]["episode"]["return"]``
    over the episodes that ended, episodes spanning two rollouts included."""
    run = config(num_steps=7)
    env = RecordingEnv(
        ENV,
        2,
        device="cpu",
        backend="torch",
        params=multi_agent.game_params(ENV, run),
        autoreset_mode=AutoresetMode.SAME_STEP,
        validate_actions=False,
    )
    env.ended = []
    policies = multi_agent.make_policies(ENV, run)
    slots = multi_agent.policy_slots(ENV, run)
    rollouts = {
        name: multi_agent.PolicyRollout.allocate(
            7, 2, len(env.groups[name]), space.shape[0], action_space, "cpu", 10, masked=True
        )
        for name, (space, action_space) in multi_agent.policy_spaces(ENV, run).items()
    }
    obs, infos = env.reset_groups(seed=0)
    inputs = {name: multi_agent.PolicyInputs.of(groups, obs, infos) for name, groups in slots.items()}
    stats = {group: EpisodeStats(2, "cpu") for group in GROUPS}
    for _ in range(3):  # 21 steps: episodes end at steps 10 and 20, each spanning two rollouts
        multi_agent.collect(
            env, {name: policy.sample for name, policy in policies.items()}, slots, rollouts, inputs, stats
        )
    for group in GROUPS:
        ended = torch.cat([returns for g, returns in env.ended if g == group])
        mean, count = mean_and_count(*stats[group].take().tolist())
        assert count == len(ended) == 4
        assert mean == pytest.approx(ended.mean().item(), rel=1e-5)


# -- the command -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["covid_economy_a2c.toml", "covid_economy_ppo.toml"])
def test_shipped_config_trains_and_its_checkpoint_evaluates(name, tmp_path, capsys):
    out = tmp_path / "run"
    sets = [
        "num_envs=2",
        "num_steps=6",
        "total_timesteps=24",
        "env_params.episode_length=8",
        "policies.planner.hidden=[8]",
        "policies.governors.hidden=[8]",
    ]
    source = ["--env", ENV] if run_config.DEFAULT_CONFIGS[ENV] == name else ["--config", str(run_config.CONFIGS / name)]
    argv = [*source, *[a for s in sets for a in ("--set", s)], "--device", "cpu", "--out", str(out)]
    assert train.main(argv) == 0
    printed = capsys.readouterr().out
    assert "greedy mean return per agent: planner" in printed
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"mean_return/planner", "mean_return/governors", "planner/entropy", "governors/value_loss"} <= set(header)
    # The resolved config (the A2C file's entropy schedule included) reads back as the same config.
    _, _, written = run_config.build_config(run_config.read_config(out / "config.toml"), [], None)
    _, _, expected = run_config.build_config(run_config.read_config(run_config.CONFIGS / name), sets, None)
    assert written == expected
    assert isinstance(written.policies["planner"].ent_coef, tuple) == (name == "covid_economy_a2c.toml")

    # From outside: the checkpoint's policies, evaluated greedily within the masks; the dynamics and
    # greedy actions are deterministic, so they reproduce the command's own evaluation.
    policies, env_id, config_ = train.load_policies(load_checkpoint(out / "checkpoint.pt"), "cpu")
    returns = multi_agent.evaluate(policies, env_id, config_, device="cpu")
    per_group = f"planner {returns['planner']:.2f}, governors {returns['governors']:.2f}"
    assert per_group in printed
    # The command's evaluation (16 games, as above): the returns per group and no animation, as
    # the game has no renderer.
    assert train.main(["--evaluate", str(out / "checkpoint.pt"), "--episodes", "16", "--device", "cpu"]) == 0
    assert capsys.readouterr().out == f"{ENV}: greedy mean return per agent over 16 games: {per_group}\n"
    assert not list(tmp_path.rglob("*.gif")) and not list(tmp_path.rglob("*.mp4"))
