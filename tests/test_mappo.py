"""MAPPO (``PolicyConfig.critic = "centralised"``) and Box actions in the multi-agent trainer: the
centralised critic's input (the game's global state and the agent's one-hot id) and shapes, the
states a rollout keeps, a critic that sees what an agent cannot, learning on a Box game, greedy Box
actions, the shipped MPE configs, and ``gpu-marl-train``'s checkpoints (``--resume``,
``--evaluate``) with a centralised critic."""

import dataclasses

import glide  # noqa: F401  (registers glide/Glide-v0, a test game of Box actions)
import numpy as np
import pytest
import torch
from gpu_marl_envs.baselines import checkpoint, multi_agent, run_config, train
from gpu_marl_envs.baselines.gae import compute_gae
from gpu_marl_envs.baselines.models import ActorCritic, CentralisedActorCritic, CentralisedCritic
from gymnasium import spaces

from gpu_marl_envs import registration, rng
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition
from gpu_marl_envs.parallel_env import GpuParallelEnv

GLIDE = "glide/Glide-v0"


def config(env_params, groups, policies, **run):
    run = {"num_envs": 4, "num_steps": 8, "total_timesteps": 64, **run}
    return multi_agent.MultiAgentConfig.from_dict(
        {"hyperparameters": run, "groups": groups, "policies": policies, "env_params": env_params}
    )


# -- the critic ------------------------------------------------------------------------------------


def test_the_centralised_critic_is_an_mlp_on_the_state_and_the_one_hot_id():
    torch.manual_seed(0)
    critic = CentralisedCritic(state_size=5, agents=3, hidden=(8, 8))
    assert critic.input.in_features == 5 + 3
    state = torch.randn(4, 5)
    # The same network on the concatenation [state, one-hot id], agent by agent.
    expected = torch.stack(
        [
            critic.rest(critic.input(torch.cat([state, torch.eye(3)[i].expand(4, 3)], dim=1))).squeeze(-1)
            for i in range(3)
        ],
        dim=1,
    )
    torch.testing.assert_close(critic(state), expected)
    torch.testing.assert_close(critic(state[None].expand(2, 4, 5)), expected.expand(2, 4, 3))
    # Rows of the flattened (game, agent) grid: fewer rows than games (the rows' states gathered),
    # and more (every game's state projected once, then picked).
    for rows in (torch.tensor([11, 0, 4]), torch.tensor([7, 2, 9, 1, 3, 3])):
        torch.testing.assert_close(critic(state, rows), expected.flatten()[rows])
    # One agent: no id.
    assert CentralisedCritic(state_size=5, agents=1, hidden=(8,)).input.in_features == 5
    assert CentralisedCritic(state_size=5, agents=1, hidden=(8,))(state).shape == (4, 1)


def test_mappo_policies_read_the_games_state_and_their_agents_ids():
    groups = {"adversaries": "adversaries", "agents": "agents"}
    mappo = config({}, groups, {name: {"critic": "centralised", "hidden": [16]} for name in groups})
    policies = multi_agent.make_policies("SimpleTag-v3", mappo)
    state_size = GpuParallelEnv("SimpleTag-v3", 1, device="cpu").state_space.shape[0]  # 62: every observation
    assert isinstance(policies["adversaries"], CentralisedActorCritic)
    assert policies["adversaries"].critic.input.in_features == state_size + 3, "3 adversaries share a network"
    assert policies["agents"].critic.input.in_features == state_size, "a network of one agent: no id"
    assert policies["adversaries"].actor[0].in_features == 16, "the actor reads the agent's own observation"
    ippo = config({}, groups, {name: {"hidden": [16]} for name in groups})
    assert all(type(p) is ActorCritic for p in multi_agent.make_policies("SimpleTag-v3", ippo).values())
    with pytest.raises(ValueError, match='critic = "centralised" but its module is an ActorCritic'):
        multi_agent.make_policies(
            "SimpleTag-v3", mappo, models={"agents": multi_agent.make_policies("SimpleTag-v3", ippo)["agents"]}
        )


def test_a_rollout_keeps_each_games_state_and_final_state_once():
    run_settings = config(
        {"N": 3, "max_cycles": 5},
        {"agents": "agents"},
        {"agents": {"critic": "centralised", "hidden": [16]}},
        num_envs=3,
        num_steps=12,
        total_timesteps=36,
    )
    run = multi_agent.start("SimpleSpread-v3", run_settings, device="cpu", backend="torch")
    assert run.states.states.shape == (12, 3, 54), "(steps, games, state): one state per game, not per agent"
    first = run.env.state().clone()
    multi_agent.Phases(run).collect()
    rollout, states = run.rollouts["agents"], run.states
    torch.testing.assert_close(states.states[0], first)
    # SimpleSpread's state is every agent's observation side by side.
    torch.testing.assert_close(states.states, rollout.obs.flatten(-2))
    over = rollout.game_over
    assert over.sum() == 2 * 3, "every game ended twice (5-step episodes)"
    torch.testing.assert_close(states.final_states[over], rollout.final_obs.flatten(-2)[over])


# -- a critic that sees what an agent cannot -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BitParams:
    num_agents: int = 2
    episode_length: int = 4


@dataclasses.dataclass
class BitState:
    bit: torch.Tensor  # float32 (E,): 0 or 1, drawn at reset
    t: torch.Tensor  # int32 (E,)


def _bit_step(p, state, actions):
    t = state.t + 1
    rewards = state.bit[:, None].expand(-1, p.num_agents).clone()
    return BitState(state.bit, t), rewards, torch.zeros_like(t, dtype=torch.bool), t >= p.episode_length


def _bit_observe(p, state):
    # Agent 0 sees the bit; agent 1 sees 0 in its place. Both see the time.
    t = state.t.to(torch.float32) / p.episode_length
    return {"agents": torch.stack([torch.stack([state.bit, t], 1), torch.stack([torch.zeros_like(t), t], 1)], 1)}


HIDDEN_BIT = MultiAgentDefinition(
    id="HiddenBit-v0",
    params_type=BitParams,
    state_type=BitState,
    agent_groups=lambda p: {"agents": range(p.num_agents)},
    observation_spaces=lambda p: {"agents": spaces.Box(-np.inf, np.inf, (2,), np.float32)},
    action_spaces=lambda p: {"agents": spaces.Discrete(2)},
    reset=lambda p, key, n: BitState(
        (rng.uniform_from_key(key, 0, 0.0, 1.0) < 0.5).to(torch.float32),
        torch.zeros(n, dtype=torch.int32, device=key.device),
    ),
    step=_bit_step,
    observe=_bit_observe,
)


@pytest.fixture
def hidden_bit(monkeypatch):
    """HiddenBit-v0 in the registry for one test: both agents earn the bit (0 or 1, drawn at reset)
    every step, whatever they do; only agent 0 observes it."""
    monkeypatch.setitem(
        registration.GAMES,
        "tests/HiddenBit-v0",
        registration.RegisteredEnv("tests/HiddenBit-v0", HIDDEN_BIT, registration.KernelSources(None, None)),
    )


@pytest.mark.usefixtures("hidden_bit", "one_thread")
def test_a_centralised_critic_predicts_the_returns_an_agents_observation_cannot():
    value_losses = {}
    for critic in ("local", "centralised"):
        policy = {"critic": critic, "hidden": [32], "learning_rate": 1e-2, "anneal_lr": False, "num_minibatches": 2}
        run = config(
            {}, {"agents": "shared"}, {"shared": policy}, num_envs=32, num_steps=8, total_timesteps=32 * 8 * 25
        )
        _, history = multi_agent.train("tests/HiddenBit-v0", run, backend="torch", log_every=5, log=None)
        value_losses[critic] = history[-1]["shared/value_loss"]
    # Agent 1's local critic can only learn the mean return; the state tells the centralised one the bit.
    # (Measured with seeds 0-2: local 0.57-0.69, centralised 0.001.)
    assert value_losses["centralised"] < 0.2 * value_losses["local"], value_losses


# -- Box actions -----------------------------------------------------------------------------------


def glide_config(critic="centralised", **run):
    policy = {"critic": critic, "hidden": [32, 32], "learning_rate": 3e-3, "ent_coef": 0.0, "num_minibatches": 1}
    return config({"episode_length": 10}, {"gliders": "shared", "leaders": "shared"}, {"shared": policy}, **run)


@pytest.mark.usefixtures("one_thread")
def test_mappo_learns_a_box_game_and_acts_greedily_with_the_mean():
    run = glide_config(num_envs=16, num_steps=10, total_timesteps=16 * 10 * 12)
    policies, history = multi_agent.train(GLIDE, run, backend="torch", log_every=3, log=None)
    policy = policies["shared"]
    returns = [entry["mean_return"] for entry in history]
    # Pushing towards the origin: measured with seeds 0-2, -12.8 to -13.5 over the first 3 iterations,
    # -6.4 to -6.6 over the last 3; greedy -1.8 (the gliders).
    assert returns[-1] > returns[0] + 4, returns
    evaluation = multi_agent.evaluate(policies, GLIDE, run, 4, device="cpu")
    assert evaluation["gliders"] > returns[0] + 4, evaluation
    # Greedy actions: the Gaussian's mean, clipped into the Box.
    obs, infos = GpuParallelEnv(GLIDE, 2, device="cpu").reset_groups(seed=0)
    slots = multi_agent.policy_slots(GLIDE, run)
    box = {"shared": spaces.Box(-1.0, 1.0, (2,), np.float32)}
    with torch.no_grad():
        policy.actor[-1].bias.fill_(5.0)  # a mean far outside the Box
        actions = multi_agent.greedy_actions(policies, slots, obs, infos, box)
        assert actions["gliders"].dtype == torch.float32 and actions["gliders"].shape == (2, 3, 2)
        assert (actions["gliders"] == 1.0).all() and (actions["leaders"] == 1.0).all()
        unclipped = multi_agent.greedy_actions(policies, slots, obs, infos)
        torch.testing.assert_close(unclipped["leaders"], policy.greedy(obs["leaders"]))


@pytest.mark.usefixtures("one_thread")
def test_a_beta_policy_learns_a_box_game_and_acts_inside_the_box():
    run = glide_config(num_envs=16, num_steps=10, total_timesteps=16 * 10 * 12)
    beta = dataclasses.replace(run.policies["shared"], distribution="beta")
    run = dataclasses.replace(run, policies={"shared": beta})
    policies, history = multi_agent.train(GLIDE, run, backend="torch", log_every=1, log=None)
    returns = [entry["mean_return"] for entry in history]
    # Measured with seeds 0-2: -11.3 to -12.1 over the first 3 iterations, -7.4 to -7.9 over the
    # last 3; greedy -4.5 to -4.7 (the gliders).
    assert np.mean(returns[-3:]) > np.mean(returns[:3]) + 2.5, returns
    policy = policies["shared"]
    obs, infos = GpuParallelEnv(GLIDE, 2, device="cpu").reset_groups(seed=0)
    slots = multi_agent.policy_slots(GLIDE, run)
    with torch.no_grad():
        # Concentrations near (21, 1): means near 21 / 22 of the way up, the greedy actions near 0.91.
        policy.actor[-1].bias.copy_(torch.tensor([20.0, 20.0, -20.0, -20.0]))
        actions = multi_agent.greedy_actions(policies, slots, obs, infos)
    for group in ("gliders", "leaders"):
        assert ((actions[group] > 0.85) & (actions[group] < 1.0)).all(), actions[group]
    run = multi_agent.start(GLIDE, dataclasses.replace(run, num_envs=8, num_steps=6), device="cpu")
    multi_agent.Phases(run).collect()
    rollout = run.rollouts["shared"]
    assert ((rollout.actions > -1.0) & (rollout.actions < 1.0)).all()
    assert torch.equal(rollout.env_actions(0), rollout.actions[0]), "nothing clipped"


def test_std_bound_schedules():
    settings = multi_agent.PolicyConfig(max_std=((0, 0.5), (100, 0.1)))
    assert [settings.std_bound(steps) for steps in (0, 50, 100, 1000)] == pytest.approx([0.5, 0.3, 0.1, 0.1])
    assert multi_agent.PolicyConfig(max_std=0.5).std_bound(10**9) == 0.5
    for bad in (((10, 0.5),), ((0, 0.5), (0, 0.1)), ((0, 0.5), (10, 0.0)), ((0, 0.5), (10,)), ()):
        with pytest.raises(ValueError, match="max_std must be a number > 0 .* or a list of"):
            multi_agent.PolicyConfig(max_std=bad)
    tables = {"agents": {"max_std": [[0, 0.5], [10, 0.2]]}}
    run = config({}, {"gliders": "agents", "leaders": "agents"}, tables)
    assert run.policies["agents"].max_std == ((0, 0.5), (10, 0.2))
    free = ActorCritic(3, spaces.Box(0.0, 1.0, (2,), np.float32))
    with pytest.raises(ValueError, match="set_max_std needs a Gaussian head with a bounded std"):
        free.set_max_std(0.2)


@pytest.mark.usefixtures("one_thread")
def test_a_scheduled_std_bound_moves_with_the_run():
    run = glide_config(num_envs=16, num_steps=10, total_timesteps=16 * 10 * 4)
    schedule = ((0, 0.5), (16 * 10 * 4, 0.1))
    run = dataclasses.replace(run, policies={"shared": dataclasses.replace(run.policies["shared"], max_std=schedule)})
    policies, history = multi_agent.train(GLIDE, run, backend="torch", log_every=1, log=None)
    # The last iteration starts at 3 * 160 env steps: a bound of 0.5 - 0.4 * 3 / 4 = 0.2.
    policy = policies["shared"]
    assert policy.log_max_std.exp().item() == pytest.approx(0.2)
    assert (policy.gaussian_log_std().exp() < 0.2).all()
    # The entropy each iteration logs (two components, the std near its bound: sigmoid(p) near
    # sigmoid(1) after a few steps of Adam) falls with the bound's log: by 2 * log(0.5 / 0.2) in all.
    entropies = [entry["shared/entropy"] for entry in history]
    assert entropies[0] - entropies[-1] == pytest.approx(2 * np.log(0.5 / 0.2), abs=0.1), entropies


def test_a_scheduled_std_bound_is_set_before_each_rollout_a_resumed_runs_first_too():
    run = glide_config(num_envs=4, num_steps=5, total_timesteps=4 * 5 * 10)  # 20 env steps an iteration
    run = dataclasses.replace(
        run, policies={"shared": dataclasses.replace(run.policies["shared"], max_std=((0, 0.5), (200, 0.1)))}
    )
    started = multi_agent.start(GLIDE, run, device="cpu")
    started.first = 5  # as a run resumed after 5 iterations
    phases, policy = multi_agent.Phases(started), started.policies["shared"]
    phases.collect()  # iteration 5's rollout, at 100 env steps: 0.5 - 0.4 / 2
    assert policy.log_max_std.exp().item() == pytest.approx(0.3)
    phases.learn(5)  # its update under the same bound
    assert policy.log_max_std.exp().item() == pytest.approx(0.3)
    phases.collect()
    assert policy.log_max_std.exp().item() == pytest.approx(0.26)
    # A head without a bound (Discrete actions) ignores the schedule, as it ignores a number.
    discrete = config(
        {"max_cycles": 6, "continuous_actions": False},
        {"agents": "shared"},
        {"shared": {"critic": "centralised", "hidden": [8], "max_std": [[0, 0.5], [10, 0.1]]}},
    )
    multi_agent.Phases(multi_agent.start("SimpleSpread-v3", discrete, device="cpu")).collect()


def test_normalised_values_merge_the_rollouts_returns_and_scale_the_critics_targets():
    # One PPO epoch of one minibatch, so that the logged value loss is the first gradient step's,
    # before any change to the critic; 6-step rollouts of 10-step episodes: no truncation to bootstrap.
    policy = {"critic": "local", "hidden": [16], "normalize_values": True, "update_epochs": 1, "num_minibatches": 1}
    run_settings = config(
        {"episode_length": 10},
        {"gliders": "shared", "leaders": "shared"},
        {"shared": policy},
        num_envs=4,
        num_steps=6,
        total_timesteps=24,
    )
    run = multi_agent.start(GLIDE, run_settings, device="cpu", backend="torch")
    policy = run.policies["shared"]
    assert "value_norm.mean" in policy.state_dict(), "the statistics are saved with the weights"
    norm = policy.value_norm
    with torch.no_grad():  # statistics of earlier rollouts: count 50, mean -3, variance 4
        norm.count.fill_(50.0), norm.mean.fill_(-3.0), norm.var.fill_(4.0)
    phases = multi_agent.Phases(run)
    phases.collect()
    rollout = run.rollouts["shared"]
    assert not rollout.dones.any()
    with torch.no_grad():  # the critic's outputs mapped back: raw * 2 - 3
        values = policy.value(rollout.obs) * 2.0 - 3.0
        next_value = policy.value(run.inputs["shared"].obs) * 2.0 - 3.0
        raw = policy.value(rollout.flat("obs"))
    _, returns = compute_gae(rollout.rewards, values, rollout.dones, next_value, 0.99, 0.95)
    returns, weights = returns.flatten().double(), rollout.flat("weights").double()
    n = weights.sum()
    batch_mean = (weights * returns).sum() / n
    batch_var = (weights * (returns - batch_mean) ** 2).sum() / n
    losses = phases.update_policy("shared")
    # Chan et al.'s merge of the two sets of moments, written out.
    count = 50.0 + n
    mean = (50.0 * -3.0 + n * batch_mean) / count
    var = (50.0 * 4.0 + n * batch_var + (batch_mean + 3.0) ** 2 * 50.0 * n / count) / count
    torch.testing.assert_close(norm.count, count)
    torch.testing.assert_close(norm.mean, mean.view(1))
    torch.testing.assert_close(norm.var, var.view(1))
    # The critic's loss compares its raw outputs with the returns on the merged statistics' scale.
    targets = ((returns - mean) / torch.sqrt(var + 1e-8)).float()
    expected = 0.5 * (weights.float() * (raw - targets) ** 2).sum() / weights.float().sum()
    torch.testing.assert_close(losses["shared/value_loss"], expected)


def test_box_rollouts_keep_the_samples_and_the_env_gets_them_clipped():
    run = multi_agent.start(GLIDE, glide_config("local", num_envs=8, num_steps=6, total_timesteps=48), device="cpu")
    with torch.no_grad():
        run.policies["shared"].log_std.fill_(1.0)  # samples of std e: many outside [-1, 1]
    multi_agent.Phases(run).collect()
    actions = run.rollouts["shared"].actions
    assert actions.dtype == torch.float32 and actions.shape == (6, 8, 4, 2)
    assert (actions.abs() > 1).any(), "the rollout keeps the Gaussian's samples"
    assert torch.equal(run.rollouts["shared"].env_actions(0), actions[0].clamp(-1, 1))


# -- the shipped configs and the command -----------------------------------------------------------

MPE_CONFIGS = sorted(
    path.name for path in run_config.CONFIGS.iterdir() if path.name.endswith(("mappo.toml", "ippo.toml"))
)


@pytest.mark.parametrize("name", MPE_CONFIGS)
def test_shipped_mpe_configs_follow_the_mappo_paper(name):
    raw = run_config.read_config(run_config.CONFIGS / name)
    if not multi_agent.is_game(raw["env"]):
        pytest.skip(f"{raw['env']} is not a game here yet")
    _, _, settings = run_config.build_config(raw, [], None)
    assert settings.total_timesteps <= 20_000_000 and settings.num_steps == 25
    for policy in settings.policies.values():
        assert policy.critic == ("centralised" if "mappo" in name else "local")
        assert (policy.learning_rate, policy.gamma, policy.gae_lambda, policy.num_minibatches) == (7e-4, 0.99, 0.95, 1)
        assert policy.hidden == (64, 64) and policy.update_epochs in (10, 15)


def test_the_box_config_is_the_paper_config_with_its_measured_changes():
    # simple_spread_v3_mappo_box.toml says what it changes and why (docs/benchmarks/mpe.md): nothing else may differ.
    def settings(name):
        _, _, config = run_config.build_config(run_config.read_config(run_config.CONFIGS / name), [], None)
        tables = run_config.config_dict(config)
        return {
            (table, key): value
            for table, values in tables.items()
            if table != "policies"
            for key, value in values.items()
        } | {("policies", key): value for key, value in tables["policies"]["agents"].items()}

    paper, box = settings("simple_spread_v3_mappo.toml"), settings("simple_spread_v3_mappo_box.toml")
    assert paper.keys() == box.keys()
    changed = {key: (paper[key], box[key]) for key in paper if paper[key] != box[key]}
    assert changed == {
        ("env_params", "continuous_actions"): (False, True),
        ("policies", "anneal_lr"): (False, True),
        ("policies", "num_minibatches"): (1, 2),
        ("policies", "max_std"): (0.5, 0.75),
        ("policies", "normalize_observations"): (False, True),
        ("policies", "normalize_values"): (False, True),
    }


@pytest.mark.usefixtures("one_thread")
def test_mappo_checkpoints_resume_and_evaluate_through_the_command(tmp_path, capsys):
    out = tmp_path / "run"
    sets = ["num_envs=4", "num_steps=5", "total_timesteps=40", "policies.agents.hidden=[8]", "env_params.max_cycles=5"]
    sets += ["env_params.continuous_actions=true", "policies.agents.normalize_observations=true"]
    sets += ["policies.agents.max_std=[[0, 0.5], [80, 0.1]]"]
    argv = [
        "--config",
        str(run_config.CONFIGS / "simple_spread_v3_mappo.toml"),
        *[a for s in sets for a in ("--set", s)],
    ]
    assert train.main([*argv, "--device", "cpu", "--out", str(out)]) == 0
    saved = checkpoint.load_checkpoint(out / "checkpoint.pt")
    assert saved["policy/agents"]["critic.input.weight"].shape == (8, 54 + 3), "the state and 3 agents' ids"
    assert "critic.state_norm.mean" in saved["policy/agents"], "the state's normalisation is saved too"
    assert 'critic = "centralised"' in (out / "config.toml").read_text()

    policies, env, settings = train.load_policies(saved, "cpu")
    assert env == "SimpleSpread-v3" and isinstance(policies["agents"], CentralisedActorCritic)
    # The std's bound where the run stood (40 env steps of the schedule's 80: 0.3), not its first.
    assert policies["agents"].log_max_std.exp().item() == pytest.approx(0.3)
    for key, value in policies["agents"].state_dict().items():
        assert torch.equal(value, saved["policy/agents"][key]), key

    resumed = ["--resume", str(out / "checkpoint.pt"), "--set", "total_timesteps=80", "--device", "cpu"]
    assert train.main(resumed) == 0
    again = checkpoint.load_checkpoint(out / "checkpoint.pt")
    assert (
        again["iteration"] == 2 * saved["iteration"] and again["history"][: len(saved["history"])] == saved["history"]
    )
    assert not torch.equal(again["policy/agents"]["critic.input.weight"], saved["policy/agents"]["critic.input.weight"])
    capsys.readouterr()
    assert train.main(["--evaluate", str(out / "checkpoint.pt"), "--episodes", "2", "--device", "cpu"]) == 0
    assert "SimpleSpread-v3: greedy mean return per agent over 2 games: agents" in capsys.readouterr().out


@pytest.mark.usefixtures("one_thread")
def test_mappo_through_lightning_is_multi_agent_train():
    pl = pytest.importorskip("lightning.pytorch")
    from gpu_marl_envs.baselines.lightning import training_module

    policies = {
        "adversaries": {"critic": "centralised", "hidden": [8], "num_minibatches": 2, "update_epochs": 2},
        "agents": {"algorithm": "a2c", "critic": "centralised", "hidden": [8]},
    }
    groups = {"adversaries": "adversaries", "agents": "agents"}
    run = config({"max_cycles": 5}, groups, policies, num_envs=2, num_steps=8, total_timesteps=2 * 8 * 3)
    trained, history = multi_agent.train("SimpleTag-v3", run, log_every=1, log=None)
    module = training_module("SimpleTag-v3", run)
    quiet = {
        "logger": False,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
    }
    pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, log_every_n_steps=1, **quiet).fit(module)
    assert [entry["env_steps"] for entry in module.history] == [entry["env_steps"] for entry in history]
    for name, policy in trained.items():
        for key, value in policy.state_dict().items():
            assert torch.equal(module.policies[name].state_dict()[key], value), f"{name}.{key}"


# -- on the GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
@pytest.mark.parametrize(
    "env_id, head",
    [
        ("SimpleSpread-v3", {}),
        (GLIDE, {}),
        (GLIDE, {"distribution": "beta"}),
        (GLIDE, {"max_std": [[0, 0.5], [16 * 8 * 5, 0.1]]}),
    ],
    ids=["discrete", "gaussian", "beta", "std-schedule"],
)
def test_captured_mappo_matches_eager(env_id, head, algorithm, cuda_device):
    """A centralised critic's rollout (the states read in the graph) and update replayed as CUDA
    graphs do the same arithmetic as eager runs, for discrete and Box actions (Gaussian and Beta:
    the Beta's draws from the generator's graph-safe state; a Gaussian whose std's bound moves on
    a schedule between replays)."""
    policy = {"algorithm": algorithm, "critic": "centralised", "hidden": [16], "normalize_observations": True}
    policy.update(head)
    if env_id == GLIDE:
        run = config({"episode_length": 6}, {"gliders": "shared", "leaders": "shared"}, {"shared": policy})
    else:
        run = config({"max_cycles": 6, "continuous_actions": False}, {"agents": "shared"}, {"shared": policy})
    run = dataclasses.replace(run, num_envs=16, num_steps=8, total_timesteps=16 * 8 * 5)
    histories = [
        multi_agent.train(
            env_id, dataclasses.replace(run, cuda_graph=graphed), device=cuda_device, log_every=1, log=None
        )[1]
        for graphed in (True, False)
    ]
    assert histories[0][-1]["episodes"] > 0
    for graphed, eager in zip(*histories):
        for key in ("mean_return", "episodes", "shared/value_loss", "shared/entropy", "shared/policy_loss"):
            assert graphed[key] == pytest.approx(eager[key], rel=1e-3, abs=1e-4), (key, graphed, eager)
