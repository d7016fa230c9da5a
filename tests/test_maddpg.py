"""MADDPG (``baselines/maddpg.py``) with tiny budgets: the joint critic's split first layer against the
plain MLP on the concatenation, acting within the Box and the joint transitions the replay keeps
(successors of ended games are their final observations and states), the TD target's bootstrap
(kept where truncated, dropped where terminated), the updates (only trained policies move; TD3's
settings), ``gpu-marl-train`` with ``algorithm = "maddpg"`` (files, ``--evaluate``, ``--resume``),
and clear errors for bad configs. On a GPU: captured iterations give bitwise the eager parameters."""

import argparse
import dataclasses

import glide  # noqa: F401  (registers glide/Glide-v0, a test game of Box actions)
import pytest
import torch
from gpu_marl_envs.baselines import checkpoint, maddpg, maddpg_config, multi_agent, run_config, train
from gpu_marl_envs.baselines.joint_replay import JointReplay

GLIDE = "glide/Glide-v0"
SPREAD = {"N": 3, "max_cycles": 4, "continuous_actions": True}


def config(env_params=None, groups=None, policies=None, **run) -> maddpg_config.MADDPGConfig:
    run = {
        "num_envs": 4,
        "total_timesteps": 64,
        "learning_starts": 16,
        "buffer_size": 64,
        "batch_size": 8,
        "gradient_steps": 2,
        **run,
    }
    return maddpg_config.MADDPGConfig.from_dict(
        {
            "hyperparameters": run,
            "env_params": SPREAD if env_params is None else env_params,
            "groups": groups or {"agents": "agents"},
            "policies": policies or {"agents": {"hidden": [8]}},
        }
    )


def glide_config(policies=None, **run) -> maddpg_config.MADDPGConfig:
    return config(
        {"num_gliders": 2, "episode_length": 3},
        {"gliders": "gliders", "leaders": "leaders"},
        policies or {"gliders": {"hidden": [8]}, "leaders": {"hidden": [8]}},
        **run,
    )


# -- the critic ------------------------------------------------------------------------------------


def test_the_joint_critic_is_an_mlp_on_state_joint_action_and_id():
    torch.manual_seed(0)
    # Two agents of the policy at columns 1-2 and 5-6 of a joint action of 7 (another policy's between).
    columns = torch.tensor([[1, 2], [5, 6]])
    critic = maddpg.JointCritic(state_size=3, action_size=7, columns=columns, hidden=(8, 8))
    state, actions, own = torch.randn(5, 3), torch.randn(5, 7), torch.randn(5, 2, 2)

    def plain(state, actions, agent):  # the MLP on the concatenation [s, a, onehot(i)]
        onehot = torch.nn.functional.one_hot(torch.full((5,), agent), 2).float()
        hidden = critic.input(torch.cat([state, actions, onehot], dim=1))
        return critic.rest(hidden).squeeze(-1)

    values = critic(state, actions)
    assert values.shape == (5, 2)
    for agent in range(2):
        torch.testing.assert_close(values[:, agent], plain(state, actions, agent), msg=f"agent {agent}")
        # The actor's loss: agent i's own action swapped in, the others' as stored.
        swapped = actions.clone()
        swapped[:, columns[agent]] = own[:, agent]
        torch.testing.assert_close(
            critic(state, actions, own)[:, agent], plain(state, swapped, agent), msg=f"agent {agent} with its own"
        )


def test_a_policy_of_one_agent_gets_no_id():
    critic = maddpg.JointCritic(state_size=3, action_size=4, columns=torch.tensor([[0, 1]]), hidden=(8,))
    assert critic.input.in_features == 3 + 4
    assert critic(torch.randn(6, 3), torch.randn(6, 4)).shape == (6, 1)


def test_the_layout_places_each_groups_actions_in_the_game_order():
    layout = maddpg.Layout.of(GLIDE, glide_config())
    assert layout.action_size == 3 * 2
    assert layout.columns["gliders"].tolist() == [[0, 1], [2, 3]]
    assert layout.columns["leaders"].tolist() == [[4, 5]]
    joint = layout.joint({"gliders": torch.arange(8.0).view(2, 2, 2), "leaders": 10 + torch.arange(4.0).view(2, 1, 2)})
    assert joint.tolist() == [[0, 1, 2, 3, 10, 11], [4, 5, 6, 7, 12, 13]]


# -- acting and the replay -------------------------------------------------------------------------


def test_acting_stays_in_the_box_and_keeps_final_observations_as_successors():
    run = maddpg.start("SimpleSpread-v3", config(num_envs=3, buffer_size=32), device="cpu")
    steps = 9  # max_cycles 4: games end at steps 4 and 8
    for t in range(steps):
        maddpg.act(run, random=t < 2)
    fields = {name: field[: steps * 3].view(steps, 3, *field.shape[1:]) for name, field in run.replay.fields.items()}
    assert int(run.replay.size) == steps * 3 and int(run.replay.position) == steps * 3
    assert fields["actions"].shape == (steps, 3, 3 * 5)
    assert fields["actions"].min() >= 0 and fields["actions"].max() <= 1, "clipped into Box(0, 1)"
    obs, successors = fields["obs/agents"], fields["next_obs/agents"]
    assert obs.shape == (steps, 3, 3, 18)
    ended = [3, 7]  # the steps whose successors are final observations
    for t in range(steps - 1):
        same = torch.equal(successors[t], obs[t + 1])
        assert same == (t not in ended), f"step {t}: successor {'differs from' if same else 'is'} the next observation"
    # The default state is every agent's observation side by side, successors included.
    torch.testing.assert_close(fields["next_state"], successors.flatten(2), rtol=0, atol=0)
    torch.testing.assert_close(fields["state"], obs.flatten(2), rtol=0, atol=0)
    assert fields["weight/agents"].eq(1).all() and not fields["terminated/agents"].any()


def test_the_replay_rings_and_draws_only_stored_items():
    replay = JointReplay(5, {"x": ((), torch.float32)}, "cpu")
    for value in range(3):
        slots = replay.slots(2)
        replay.write("x", slots, torch.full((2,), float(value)))
        replay.advance(2)
    assert replay.fields["x"].tolist() == [2, 0, 1, 1, 2] and int(replay.size) == 5 and int(replay.position) == 1
    fresh = JointReplay(5, {"x": ((), torch.float32)}, "cpu")
    fresh.write("x", fresh.slots(2), torch.tensor([7.0, 8.0]))
    fresh.advance(2)
    assert set(fresh.take("x", fresh.sample(200)).tolist()) == {7.0, 8.0}
    restored = JointReplay(5, {"x": ((), torch.float32)}, "cpu")
    restored.load_state_dict(fresh.state_dict())
    assert restored.fields["x"].tolist()[:2] == [7.0, 8.0] and int(restored.size) == 2
    with pytest.raises(ValueError, match="exceeds the capacity 5"):
        replay.slots(6)


# -- the updates -----------------------------------------------------------------------------------


def batch_of(run: maddpg.Run, terminated: bool) -> dict:
    """A batch of 4 made-up joint transitions of SimpleSpread (N = 3)."""
    torch.manual_seed(1)
    return {
        "state": torch.randn(4, 54),
        "next_state": torch.randn(4, 54),
        "actions": torch.rand(4, 15),
        "obs/agents": torch.randn(4, 3, 18),
        "next_obs/agents": torch.randn(4, 3, 18),
        "reward/agents": torch.randn(4, 3),
        "weight/agents": torch.ones(4, 3),
        "terminated/agents": torch.full((4, 3), terminated),
    }


@pytest.mark.parametrize("terminated", [True, False])
def test_the_td_target_bootstraps_unless_terminated(terminated):
    run = maddpg.start("SimpleSpread-v3", config(), device="cpu")
    policy, batch = run.policies["agents"], batch_of(run, terminated)
    with torch.no_grad():
        next_joint = run.layout.joint({"agents": policy.target_actor(batch["next_obs/agents"])})
        q = policy.critics[0](batch["state"], batch["actions"])
        next_q = policy.target_critics[0](batch["next_state"], next_joint)
    # A truncated transition (not terminated) is bootstrapped from its successor: a time limit is no
    # property of the state.
    target = batch["reward/agents"] + (0.0 if terminated else run.config.gamma) * next_q
    maddpg.update_critics(run, "agents", batch, next_joint)
    torch.testing.assert_close(run.losses["agents/critic_loss"], ((q - target) ** 2).mean())


def test_the_actor_loss_is_minus_q_of_its_own_action_plus_the_penalty():
    run = maddpg.start("SimpleSpread-v3", config(policies={"agents": {"preactivation_penalty": 0.5}}), device="cpu")
    policy, batch = run.policies["agents"], batch_of(run, terminated=False)
    with torch.no_grad():
        own = policy.actor(batch["obs/agents"])
        q = policy.critics[0](batch["state"], batch["actions"], own)
        penalty = policy.actor.net(batch["obs/agents"]).square().mean()
    maddpg.update_actor(run, "agents", batch)
    torch.testing.assert_close(run.losses["agents/actor_loss"], -q.mean() + 0.5 * penalty)
    assert all(p.grad is None or not p.grad.any() for p in policy.critics.parameters()), "the critic stays put"


def test_training_moves_only_trained_policies_and_follows_with_the_targets():
    run_config_ = glide_config(
        total_timesteps=40, policies={"gliders": {"hidden": [8]}, "leaders": {"hidden": [8], "train": False}}
    )
    run = maddpg.start(GLIDE, run_config_, device="cpu")
    before = {name: [p.clone() for p in policy.actor.parameters()] for name, policy in run.policies.items()}
    phases = maddpg.Phases(run)
    for iteration in range(run.iterations):
        phases.iteration(iteration)
    assert run.updates == (run.iterations - 4) * 2  # learning after 16 of 40 env steps (4 iterations)
    moved = {
        name: any(not torch.equal(a, b) for a, b in zip(before[name], policy.actor.parameters()))
        for name, policy in run.policies.items()
    }
    assert moved == {"gliders": True, "leaders": False}
    gliders = run.policies["gliders"]
    for online, target in zip(gliders.critics.parameters(), gliders.target_critics.parameters()):
        assert not torch.equal(online, target) and not target.requires_grad
    assert "leaders/critic_loss" not in run.losses and torch.isfinite(run.losses["gliders/actor_loss"])


def test_td3_settings_train_two_critics_with_a_delayed_actor():
    run = maddpg.start(
        GLIDE, glide_config(twin_critics=True, policy_noise=0.2, policy_frequency=2, gradient_steps=3), device="cpu"
    )
    assert len(run.policies["gliders"].critics) == 2
    phases = maddpg.Phases(run)
    for iteration in range(run.iterations):
        phases.iteration(iteration)
    # Three gradient steps an iteration, the actor every second: the cycle's offsets 0 and 1 recur.
    assert sorted(phases.updates) == [0, 1]
    assert all(torch.isfinite(value) for value in run.losses.values()), run.losses


# -- the command -----------------------------------------------------------------------------------


def command(*args):
    return train.main([*args, "--device", "cpu"])


def test_gpu_marl_train_runs_evaluates_and_resumes_maddpg(tmp_path, capsys):
    out = tmp_path / "run"
    sets = ["total_timesteps=64", "num_envs=4", "learning_starts=16", "buffer_size=64", "batch_size=8"]
    sets += ["env_params.max_cycles=4", "policies.agents.hidden=[8]"]
    args = [arg for value in sets for arg in ("--set", value)]
    config_path = run_config.CONFIGS / "simple_spread_v3_maddpg.toml"
    assert command("--config", str(config_path), *args, "--out", str(out)) == 0
    assert "greedy mean return per agent: agents" in capsys.readouterr().out
    saved = checkpoint.load_checkpoint(out / "checkpoint.pt")
    assert saved["algorithm"] == "maddpg" and saved["iteration"] == 16
    assert {"policy/agents", "critic/agents", "target_actor/agents", "critic_optimizer/agents", "replay"} <= set(saved)
    assert saved["replay"]["size"] == 64 and (out / "learning_curve.png").exists()
    assert command("--evaluate", str(out / "checkpoint.pt"), "--episodes", "2") == 0
    assert "greedy mean return per agent over 2 games: agents" in capsys.readouterr().out
    assert command("--resume", str(out / "checkpoint.pt"), "--set", "total_timesteps=96") == 0
    again = checkpoint.load_checkpoint(out / "checkpoint.pt")
    steps = [entry["env_steps"] for entry in again["history"]]
    assert again["iteration"] == 24 and steps == [4 * k for k in range(1, 25)]
    assert again["history"][len(saved["history"]) - 1]["seconds"] == saved["history"][-1]["seconds"]
    assert again["replay"]["size"] == 64 and again["replay"]["position"] == (96 % 64)


def test_a_resumed_run_loads_its_replay_and_counts_its_updates():
    states = []
    maddpg.train("SimpleSpread-v3", config(), device="cpu", log_every=8, log=None, save=states.append)
    middle = states[1]  # after 8 of 16 iterations
    run = maddpg.start("SimpleSpread-v3", config(), device="cpu", resume=middle)
    checkpoint.restore(middle, **run.parts)
    assert run.first == 8 and run.updates == (8 - 4) * 2
    assert int(run.replay.size) == 32 and torch.equal(run.replay.fields["state"][:32], middle["replay"]["state"])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["env_params.continuous_actions=false"], "maddpg needs Box actions; SimpleSpread-v3's group 'agents' has"),
        (["num_steps=5"], "unknown maddpg run setting 'num_steps' in [hyperparameters]"),
        (["policies.agents.clip_coef=0.2"], "unknown settings ['clip_coef'] in [policies.agents] of a maddpg config"),
        (["actor_lr=1e-3"], "actor_lr is a policy setting: put it in [policies.<name>]"),
        (["buffer_size=8"], "buffer_size (8) must hold one iteration (num_envs = 1024)"),
        (["policy_noise=-1"], "MADDPGConfig.policy_noise must be a finite number >= 0, got -1"),
        (["policies.agents.max_grad_norm=0"], "PolicySettings.max_grad_norm must be a number > 0"),
        (["groups.agents=other"], "group 'agents' uses policy 'other', which has no settings"),
    ],
)
def test_bad_maddpg_configs_get_one_line(overrides, message):
    raw = run_config.read_config(run_config.CONFIGS / "simple_spread_v3_maddpg.toml")
    with pytest.raises(run_config.ConfigError) as error:
        algorithm, env, built = run_config.build_config(raw, overrides, None)
        run_config.check_env(algorithm, env, built)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_command_refuses_several_processes_for_maddpg(tmp_path):
    path = run_config.CONFIGS / "simple_spread_v3_maddpg.toml"
    args = argparse.Namespace(
        device="cpu", lightning=False, resume=None, config=str(path), env=None, set=[], seed=None,
        out=str(tmp_path / "run"), overwrite=False,
    )  # fmt: skip
    with pytest.raises(run_config.ConfigError, match=r"maddpg trains in one process without Lightning: drop --nproc"):
        train.plan_run(args, world_size=2, local_processes=1)


def test_shipped_maddpg_configs_read_back_as_written():
    for name in ("simple_spread_v3_maddpg.toml", "simple_tag_v3_maddpg.toml"):
        algorithm, env, built = run_config.build_config(run_config.read_config(run_config.CONFIGS / name), [], None)
        run_config.check_env(algorithm, env, built)
        assert isinstance(built, maddpg_config.MADDPGConfig) and built.env_params["continuous_actions"] is True
        again = run_config.build_config(run_config.tomllib.loads(run_config.to_toml(algorithm, env, built)), [], None)
        assert again == (algorithm, env, built), name


def test_trained_actors_act_greedily_through_multi_agent_evaluate():
    run_config_ = glide_config(total_timesteps=24)
    actors, history = maddpg.train(GLIDE, run_config_, device="cpu", log_every=2, log=None)
    assert history[-1]["env_steps"] == 24 and history[-1]["episodes"] > 0
    returns = multi_agent.evaluate(actors, GLIDE, run_config_, 3, device="cpu")
    assert set(returns) == {"gliders", "leaders"} and all(value < 0 for value in returns.values())


# -- on the GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("env_id", ["SimpleSpread-v3", "SimpleTag-v3"])
@pytest.mark.parametrize("td3", [False, True])
def test_captured_maddpg_matches_eager_bitwise(env_id, td3, cuda_device):
    """The same seed eagerly and with every acting step and update replayed as CUDA graphs: the
    graphs launch the same kernels with the same random numbers, so the parameters agree bit for
    bit (random acting, learning, the actors' delay cycle and the soft updates all run)."""
    env_params = {"max_cycles": 6, "continuous_actions": True}
    if env_id == "SimpleSpread-v3":
        groups, policies = {"agents": "agents"}, {"agents": {"hidden": [32, 32]}}
    else:
        groups = {"adversaries": "adversaries", "agents": "agents"}
        policies = {"adversaries": {"hidden": [32, 32]}, "agents": {"hidden": [32, 32]}}
    extra = {"twin_critics": True, "policy_noise": 0.2, "policy_frequency": 2, "gradient_steps": 3} if td3 else {}
    run_config_ = config(
        env_params, groups, policies, num_envs=64, total_timesteps=64 * 12, learning_starts=64 * 3,
        buffer_size=512, batch_size=128, **extra,
    )  # fmt: skip
    runs = []
    for graphed in (True, False):
        actors, history = maddpg.train(
            env_id, dataclasses.replace(run_config_, cuda_graph=graphed), device=cuda_device, log_every=4, log=None
        )
        runs.append((actors, history))
    (graphed_actors, graphed_history), (eager_actors, eager_history) = runs
    assert graphed_history[-1]["episodes"] > 0
    for name in graphed_actors:
        for (key, a), b in zip(graphed_actors[name].state_dict().items(), eager_actors[name].state_dict().values()):
            assert torch.equal(a, b), f"{name}.{key}: captured and eager differ by {(a - b).abs().max().item()}"
    for graphed, eager in zip(graphed_history, eager_history):
        for key, value in eager.items():
            if "seconds" not in key:
                assert graphed[key] == value or (value != value and graphed[key] != graphed[key]), (key, graphed, eager)
