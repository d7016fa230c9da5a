"""Per-group policies on the Tag games (``baselines/multi_agent.py``): the per-agent transition mask
and truncation bootstrap on a hand-made case, the group -> policy map, config errors, the command
with each shipped Tag config, and a short learning check."""

import dataclasses

import pytest
import torch
from gpu_marl_envs.baselines import multi_agent, run_config, train
from gpu_marl_envs.baselines.gae import compute_gae
from gpu_marl_envs.baselines.rollout import EpisodeStats, mean_and_count
from gymnasium import spaces

# A TagContinuous small enough for a CPU test.
SMALL_CONTINUOUS = {"num_taggers": 2, "num_runners": 3, "num_other_agents_observed": 2, "episode_length": 8}
SEPARATE = {"taggers": "taggers", "runners": "runners"}


def config(groups=SEPARATE, policies=None, env_params=SMALL_CONTINUOUS, **run):
    run = {"num_envs": 4, "num_steps": 8, "total_timesteps": 64, **run}
    policies = policies or {name: {"hidden": [16]} for name in set(groups.values())}
    return multi_agent.MultiAgentConfig.from_dict(
        {"hyperparameters": run, "groups": groups, "policies": policies, "env_params": env_params}
    )


# -- mask and bootstrap on a scripted game --------------------------------------------------------


class ScriptedEnv:
    """Stands in for ``GpuParallelEnv.step_groups``: one game, groups ``taggers`` (1 agent) and
    ``runners`` (3 agents), a scripted list of step outputs."""

    def __init__(self, steps):
        self.steps = iter(steps)

    def step_groups(self, actions):
        return next(self.steps)


def scripted_step(rewards, terminated, truncated, active, final_feature=None):
    """One step's outputs from per-agent lists ``[tagger, runner_0, runner_1, runner_2]``."""

    def split(values, dtype=torch.float32):
        t = torch.tensor([values], dtype=dtype)
        return {"taggers": t[:, :1], "runners": t[:, 1:]}

    ended = final_feature is not None
    final = split(final_feature or [0.0] * 4)
    infos = {
        group: {
            "active": flags,
            "final_obs": final[group].unsqueeze(-1).repeat(1, 1, 3),
            "_final_obs": torch.tensor([ended]),
        }
        for group, flags in split(active, torch.bool).items()
    }
    obs = {group: torch.zeros(1, n, 3) for group, n in (("taggers", 1), ("runners", 3))}
    return obs, split(rewards), split(terminated, torch.bool), split(truncated, torch.bool), infos


class FeaturePolicy(torch.nn.Module):
    """V(obs) = obs[..., 0]; every action 0, with log-probability 0."""

    def sample(self, obs):
        return torch.zeros((*obs.shape[:-1], 2), dtype=torch.int64)

    def value(self, obs):
        return obs[..., 0]

    def action_and_value(self, obs, action=None):
        zeros = torch.zeros(obs.shape[:-1])
        return self.sample(obs), zeros, zeros, self.value(obs)


def test_rollout_masks_inactive_agents_and_bootstraps_truncations_only():
    gamma = 0.5
    steps = [
        # step 0: runner_0 is tagged (terminated).
        scripted_step([1, 2, 3, 4], [0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]),
        # step 1: the game truncates; runner_0 was out, runner_2 is tagged on this last step
        # (terminated and truncated); the game resets, so everyone is active after it.
        scripted_step([5, 0, 7, 8], [0, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1], final_feature=[10, 20, 30, 40]),
    ]
    slots = {"shared": {"taggers": slice(0, 1), "runners": slice(1, 4)}}
    policy = FeaturePolicy()
    rollout = multi_agent.PolicyRollout.allocate(2, 1, 4, 3, spaces.MultiDiscrete([21, 21]), "cpu", episode_length=2)
    state = multi_agent.PolicyInputs(
        obs=torch.zeros(1, 4, 3), active=torch.ones(1, 4, dtype=torch.bool), groups=slots["shared"]
    )
    stats = {group: EpisodeStats(1, "cpu") for group in ("taggers", "runners")}
    multi_agent.collect(
        ScriptedEnv(steps), {"shared": policy.sample}, slots, {"shared": rollout}, {"shared": state}, stats
    )

    assert rollout.weights[:, 0].tolist() == [[1, 1, 1, 1], [1, 0, 1, 1]], "runner_0 counts only before its tag"
    assert rollout.dones[:, 0].tolist() == [[0, 1, 0, 0], [1, 1, 1, 1]]
    # Truncated while in the game: + gamma * V(final obs). Tagged (even on the last step) or out: no bootstrap.
    rewards, _ = rollout.bootstrap(policy.value, state.obs, gamma)
    assert rewards[:, 0].tolist() == [[1, 2, 3, 4], [5 + gamma * 10, 0, 7 + gamma * 30, 8]]
    assert state.active.all(), "the reset game's agents all count again"
    assert mean_and_count(*stats["taggers"].take().tolist()) == (6.0, 1)
    assert mean_and_count(*stats["runners"].take().tolist()) == (pytest.approx((2 + 10 + 12) / 3), 1)

    # Rows of agents out of the game change neither the loss nor its gradient.
    net = multi_agent.make_policies("TagContinuous-v0", config(), models=None)["taggers"]
    obs, actions = torch.randn(8, net.critic[0].in_features), torch.randint(0, 21, (8, 2))
    advantages, returns, old_log_probs = torch.randn(8), torch.randn(8), torch.randn(8)
    weights = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0], dtype=torch.float32)
    garbage = weights == 0
    for loss_fn, settings in [
        (multi_agent.masked_ppo_loss, multi_agent.PolicyConfig()),
        (multi_agent.masked_a2c_loss, multi_agent.PolicyConfig(algorithm="a2c")),
    ]:
        gradients = []
        for scale in (0.0, 1e3):
            noisy = [x + scale * garbage.view(-1, *[1] * (x.dim() - 1)) for x in (obs, advantages, returns)]
            net.zero_grad()
            if loss_fn is multi_agent.masked_ppo_loss:
                loss, terms = loss_fn(
                    net, noisy[0], actions, old_log_probs, noisy[1], noisy[2], weights, settings, settings.ent_coef
                )
            else:
                _, log_probs, entropy, values = net.action_and_value(noisy[0], actions)
                loss, terms = loss_fn(
                    log_probs, entropy, values, noisy[1], noisy[2], weights, settings, settings.ent_coef
                )
            # The terms an update returns keep no autograd graph alive into the next update.
            assert not any(term.requires_grad for term in terms.values()), loss_fn.__name__
            loss.backward()
            gradients.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
        torch.testing.assert_close(gradients[0], gradients[1], msg=f"{loss_fn.__name__} reads masked rows")


def test_a_policy_of_one_group_reads_the_envs_buffers():
    env = multi_agent.GpuParallelEnv(
        "TagContinuous-v0",
        2,
        device="cpu",
        backend="torch",
        params=multi_agent.game_params("TagContinuous-v0", config()),
    )
    obs, infos = env.reset_groups(seed=0)
    own = multi_agent.PolicyInputs.of({"runners": slice(0, 3)}, obs, infos)
    assert own.obs is obs["runners"] and own.active is infos["runners"]["active"] and not own.groups
    shared = multi_agent.PolicyInputs.of({"taggers": slice(0, 2), "runners": slice(2, 5)}, obs, infos)
    obs, _, _, _, infos = env.step_groups(
        {group: torch.zeros(2, n, 2, dtype=torch.int64) for group, n in (("taggers", 2), ("runners", 3))}
    )
    assert torch.equal(own.obs, obs["runners"]), "the env's buffers, updated in place by the step"
    shared.refresh(obs, infos)
    assert torch.equal(shared.obs, torch.cat([obs["taggers"], obs["runners"]], dim=1))


def test_gae_streams_stop_at_each_agents_own_end():
    # Agent 0 terminates at t=0; agent 1 runs on. (T=2, E=1, A=2)
    rewards = torch.tensor([[[1.0, 1.0]], [[0.0, 1.0]]])
    values = torch.zeros(2, 1, 2)
    dones = torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]]])
    advantages, _ = compute_gae(rewards, values, dones, torch.tensor([[5.0, 5.0]]), gamma=0.5, gae_lambda=1.0)
    assert advantages[:, 0].tolist() == [[1.0, 1.0 + 0.5 * (1.0 + 0.5 * 5.0)], [0.0, 1.0 + 0.5 * 5.0]]


# -- policies ----------------------------------------------------------------------------------------


def test_groups_share_a_network_or_get_their_own():
    shared = config(groups={"taggers": "shared", "runners": "shared"})
    assert list(multi_agent.make_policies("TagContinuous-v0", shared)) == ["shared"]
    assert multi_agent.policy_slots("TagContinuous-v0", shared) == {
        "shared": {"taggers": slice(0, 2), "runners": slice(2, 5)}
    }
    separate = multi_agent.make_policies("TagContinuous-v0", config())
    assert separate["taggers"] is not separate["runners"]


def test_a_policy_that_does_not_train_keeps_its_parameters():
    runners = multi_agent.make_policies("TagContinuous-v0", config())["runners"]  # a custom module, plugged in
    before = {name: p.clone() for name, p in runners.state_dict().items()}
    run = config(policies={"taggers": {"hidden": [16]}, "runners": {"hidden": [16], "train": False}})
    policies, history = multi_agent.train(
        "TagContinuous-v0", run, backend="torch", models={"runners": runners}, log=None
    )
    assert policies["runners"] is runners
    for name, value in runners.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert "taggers/policy_loss" in history[-1] and not any(key.startswith("runners/") for key in history[-1])
    assert history[-1]["env_steps"] == 64 and "mean_return/runners" in history[-1]


# -- config errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hyperparameters": {"learning_rate": 1e-3}}, "is a policy setting"),
        ({"policies": {"taggers": {"bogus": 1}, "runners": {}}}, "unknown settings ['bogus'] in [policies.taggers]"),
        ({"policies": {"taggers": {"algorithm": "a2c", "update_epochs": 2}, "runners": {}}}, "apply to PPO only"),
        ({"policies": {"taggers": {"algorithm": "trpo"}, "runners": {}}}, 'algorithm must be "ppo" or "a2c"'),
        ({"policies": {"taggers": {}}}, "add a [policies.runners] table"),
        ({"policies": {"taggers": {}, "runners": {}, "spare": {}}}, "policy 'spare' serves no group"),
        ({"policies": {"taggers": {"gamma": 2}, "runners": {}}}, "gamma must be a number in [0, 1]"),
        ({"policies": {"taggers": {"critic": "global"}, "runners": {}}}, 'critic must be "local" or "centralised"'),
        ({"extra": {}}, "unknown tables"),
    ],
)
def test_bad_configs_name_the_fix(change, message):
    tables = {
        "hyperparameters": {"num_envs": 2, "num_steps": 4, "total_timesteps": 8},
        "groups": dict(SEPARATE),
        "policies": {"taggers": {}, "runners": {}},
        **change,
    }
    with pytest.raises(ValueError) as error:
        multi_agent.MultiAgentConfig.from_dict(tables)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "groups, env_params, message",
    [
        ({"taggers": "taggers"}, {}, "missing ['runners']"),
        ({**SEPARATE, "chasers": "taggers"}, {}, "unknown ['chasers']"),
        (SEPARATE, {"num_hunters": 3}, "unknown env_params ['num_hunters']"),
    ],
)
def test_configs_must_fit_the_game(groups, env_params, message):
    tables = {"groups": groups, "policies": {name: {} for name in set(groups.values())}, "env_params": env_params}
    with pytest.raises(ValueError) as error:
        multi_agent.game_params("TagContinuous-v0", multi_agent.MultiAgentConfig.from_dict(tables))
    assert message in str(error.value)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "TagContinuous-v0", "--set", "policies.taggers.bogus=1"], "unknown settings ['bogus']"),
        (["--env", "TagContinuous-v0", "--set", "learning_rate=1e-3"], "policies.<name>.learning_rate"),
        (["--env", "TagContinuous-v0", "--set", "taggers.learning_rate=1e-3"], "dotted key into a table"),
        (["--env", "TagContinuous-v0", "--set", "env_params.num_hunters=3"], "unknown env_params"),
        (["--env", "CartPole-v1", "--set", "policies.a.gamma=0.9"], "unknown ppo hyper-parameters"),
    ],
)
def test_the_command_reports_bad_multi_agent_settings(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        train.main([*args, "--device", "cpu", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_multi_agent_tables_need_a_multi_agent_game():
    with pytest.raises(run_config.ConfigError, match="apply to multi-agent games only"):
        run_config.build_config({"env": "CartPole-v1", "algorithm": "ppo", "groups": {}}, [], None)


# -- the command -------------------------------------------------------------------------------------

SMALL = {
    "tag_continuous_a2c.toml": SMALL_CONTINUOUS,
    "tag_continuous_ppo.toml": SMALL_CONTINUOUS,
    "tag_gridworld_a2c.toml": {"grid_length": 4, "episode_length": 8},
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_shipped_tag_config_trains_saves_and_evaluates(name, tmp_path, capsys):
    out = tmp_path / "run"
    sets = [f"env_params.{key}={value}" for key, value in SMALL[name].items()]
    sets += ["num_envs=2", "num_steps=8", "total_timesteps=32"]
    raw = run_config.tomllib.loads((run_config.CONFIGS / name).read_text())
    sets += [f"policies.{policy}.hidden=[8]" for policy in raw["policies"]]
    argv = ["--config", str(run_config.CONFIGS / name), *[a for s in sets for a in ("--set", s)], "--seed", "1"]
    assert train.main([*argv, "--device", "cpu", "--out", str(out)]) == 0
    assert "greedy mean return per agent: taggers" in capsys.readouterr().out
    assert {"config.toml", "metrics.csv", "learning_curve.png", "checkpoint.pt"} <= {p.name for p in out.iterdir()}
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"env_steps", "mean_return", "mean_return/taggers", "mean_return/runners"} <= set(header)
    # The resolved config reads back as the same config.
    _, env, config = run_config.build_config(run_config.read_config(out / "config.toml"), [], None)
    _, _, expected = run_config.build_config(run_config.read_config(run_config.CONFIGS / name), sets, 1)
    assert env == raw["env"] and config == expected

    assert train.main(["--evaluate", str(out / "checkpoint.pt"), "--episodes", "2", "--device", "cpu"]) == 0
    assert "taggers" in capsys.readouterr().out
    assert (out / "animation.gif").stat().st_size > 0


# -- learning ----------------------------------------------------------------------------------------


def taggers_learning_run(device="cpu", backend="torch", policy_settings=None, **run_settings) -> list[float]:
    """The taggers' return per log entry: 2 taggers chase 10 slow runners (acting at random,
    untrained) in a 10 x 10 arena for 64,000 env steps (``policy_settings``: more PolicyConfig
    settings for both policies)."""
    game = {
        "num_taggers": 2,
        "num_runners": 10,
        "grid_length": 10.0,
        "episode_length": 50,
        "num_other_agents_observed": 5,
        "tagging_distance": 0.05,
        "skill_level_runner": 0.05,
    }
    settings = {"learning_rate": 3e-3, "anneal_lr": False, **(policy_settings or {})}
    run = config(
        policies={"taggers": settings, "runners": {**settings, "train": False}},
        env_params=game,
        num_envs=32,
        num_steps=50,
        total_timesteps=64_000,
        seed=0,
    )
    _, history = multi_agent.train(
        "TagContinuous-v0",
        dataclasses.replace(run, **run_settings),
        device=device,
        backend=backend,
        log_every=2,
        log=None,
    )
    return [entry["mean_return/taggers"] for entry in history]


def test_tag_taggers_return_rises_over_a_short_run():
    returns = taggers_learning_run()
    # Seeds 0-4 went from 9.8-12.5 to a last-three mean of 17.7-19.9 (about 10 s each on 2 cores).
    assert sum(returns[-3:]) / 3 > returns[0] + 4, returns


def test_tag_taggers_learn_with_warpdrives_network():
    """The same check with WarpDrive's network: hidden layers shared by the actor and the critic,
    ReLU activations (the Tag A2C config's)."""
    returns = taggers_learning_run(policy_settings={"shared_hidden": True, "activation": "relu"})
    assert sum(returns[-3:]) / 3 > returns[0] + 4, returns


def test_bf16_updates_run_on_the_cpu():
    for algorithm in ("ppo", "a2c"):
        policies = {name: {"algorithm": algorithm, "hidden": [16]} for name in ("taggers", "runners")}
        run = dataclasses.replace(config(policies=policies, num_envs=4, num_steps=8, total_timesteps=64), bf16=True)
        _, history = multi_agent.train("TagContinuous-v0", run, backend="torch", log_every=1, log=None)
        assert all(torch.isfinite(torch.tensor(value)) for entry in history for value in entry.values()), history


# -- on the GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["pycuda", "numba"])
@pytest.mark.parametrize(
    "algorithm, network, num_envs",
    [("ppo", {}, 16), ("a2c", {}, 16), ("a2c", {"shared_hidden": True, "activation": "relu"}, 256)],
    ids=["ppo", "a2c", "a2c-warpdrive-network"],
)
def test_captured_training_matches_eager(algorithm, network, num_envs, backend, cuda_device):
    """Rollouts and updates replayed as CUDA graphs draw the same random numbers and do the same
    arithmetic as eager runs: the histories agree closely (games short enough to end in a rollout).
    WarpDrive's network runs 256 games: each policy's update then has at least 4,096 rows, so the
    aligned layers, the ReLU epilogue, the frozen rollout weights and the fused A2C loss run."""
    run = config(
        policies={name: {"algorithm": algorithm, "hidden": [16], **network} for name in ("taggers", "runners")},
        num_envs=num_envs,
        num_steps=8,
        total_timesteps=num_envs * 8 * 5,
    )
    histories = [
        multi_agent.train(
            "TagContinuous-v0",
            dataclasses.replace(run, cuda_graph=graphed),
            device=cuda_device,
            backend=backend,
            log_every=1,
            log=None,
        )[1]
        for graphed in (True, False)
    ]
    assert histories[0][-1]["episodes"] > 0
    for graphed, eager in zip(*histories):
        for key in ("mean_return/taggers", "mean_return/runners", "episodes", "taggers/value_loss", "runners/entropy"):
            assert graphed[key] == pytest.approx(eager[key], rel=1e-3, abs=1e-4), (key, graphed, eager)


@pytest.mark.gpu
@pytest.mark.parametrize("bf16", [False, True])
def test_tag_taggers_learn_on_the_gpu(bf16, cuda_device):
    """The CPU learning check on the GPU (CUDA graphs, TF32), with and without bfloat16 updates."""
    returns = taggers_learning_run(cuda_device, None, bf16=bf16)
    assert sum(returns[-3:]) / 3 > returns[0] + 4, returns
