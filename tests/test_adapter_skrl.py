"""The skrl adapter: outputs in skrl's shapes and spaces (read back with skrl's own space utilities),
against the env's own on crafted episodes, observations that outlive the next step, skrl's reset
convention, bad use, skrl's PPO learning CartPole through ``SequentialTrainer``, IPPO with
per-group policies on Tag, and games of Box actions (Glide-v0, SimpleSpread-v3's continuous actions)
with the global state, trained by MAPPO. About 6 s on an idle two-core machine."""

from __future__ import annotations

import contextlib
import time

import glide  # noqa: F401  (registers glide/Glide-v0, a test game of Box actions)
import pytest
import torch
from adapter_helpers import BOX_GAMES, SMALL_TAG, assert_equal, mlp
from gpu_marl_envs.adapters.skrl import SkrlParallelEnv, SkrlVectorEnv, make_skrl_env
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from harness import random_actions
from skrl import config
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch import MultiAgentEnvWrapper, Wrapper
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, GaussianMixin, Model, MultiCategoricalMixin
from skrl.multi_agents.torch.ippo import IPPO, IPPO_CFG
from skrl.multi_agents.torch.mappo import MAPPO, MAPPO_CFG
from skrl.trainers.torch import SequentialTrainer
from skrl.utils import set_seed
from skrl.utils.spaces.torch import flatten_tensorized_space, tensorize_space
from test_vector_api import MAX_STEPS, arrange_vector_endings

from gpu_marl_envs import GpuVectorEnv, make_parallel
from gpu_marl_envs.checker import random_space_actions

SEED = 3
SAME_STEP = AutoresetMode.SAME_STEP
SKRL_ENV = {"autoreset_mode": SAME_STEP, "observation_buffers": 2}  # what the adapters need of an env


def skrl_actions(space: spaces.Space, num_envs: int, generator: torch.Generator) -> torch.Tensor:
    """Actions as skrl's models give them: ``(num_envs, 1)`` for Discrete spaces."""
    actions = random_actions(space, num_envs, generator)
    return actions.unsqueeze(-1) if isinstance(space, spaces.Discrete) else actions


def game_actions(space: spaces.Space, num_envs: int, generator: torch.Generator) -> torch.Tensor:
    """The env's form: ``(num_envs,)`` for Discrete, ``(num_envs, k)`` for MultiDiscrete."""
    if isinstance(space, spaces.MultiDiscrete):
        return torch.stack([torch.randint(0, int(n), (num_envs,), generator=generator) for n in space.nvec], 1)
    return random_actions(space, num_envs, generator)


@contextlib.contextmanager
def skrl_key(seed: int):
    """skrl's global seed, which its wrappers (and ours) take for their first reset when made."""
    key, config.torch.key = config.torch.key, seed
    try:
        yield
    finally:
        config.torch.key = key


def vector_pair(env_id, num_envs=3):
    envs = [GpuVectorEnv(env_id, num_envs, device="cpu", max_episode_steps=MAX_STEPS, **SKRL_ENV) for _ in range(2)]
    with skrl_key(SEED):
        adapter = SkrlVectorEnv(envs[0])
    adapter.reset()
    envs[1].reset(seed=SEED)
    return adapter, envs[0], envs[1]


def experiment(cfg, tmp_path):
    cfg.experiment.directory = str(tmp_path)
    cfg.experiment.write_interval = 0  # no TensorBoard (its tracking reads values back every step)
    cfg.experiment.checkpoint_interval = 0
    return cfg


TRAINER = {"headless": True, "disable_progressbar": True, "close_environment_at_exit": False}


# -- outputs ---------------------------------------------------------------------------------------


def test_outputs_have_skrls_shapes_and_spaces(env_id):
    env = make_skrl_env(env_id, 5, device="cpu")
    assert isinstance(env, Wrapper)
    raw = GpuVectorEnv(env_id, 1, device="cpu")
    assert env.observation_space == raw.single_observation_space and env.action_space == raw.single_action_space
    assert env.num_envs == 5 and env.num_agents == 1 and env.device == torch.device("cpu") and env.state_space is None
    observations, infos = env.reset()
    assert isinstance(infos, dict)
    # skrl's own space utilities read the observations back unchanged.
    assert torch.equal(flatten_tensorized_space(tensorize_space(env.observation_space, observations)), observations)
    outputs = env.step(skrl_actions(env.action_space, 5, torch.Generator().manual_seed(0)))
    for name, value, shape, dtype in zip(
        ("observations", "rewards", "terminated", "truncated"),
        outputs[:4],
        ((5, *env.observation_space.shape), (5, 1), (5, 1), (5, 1)),
        (torch.float32, torch.float32, torch.bool, torch.bool),
    ):
        assert value.shape == shape and value.dtype == dtype and value.device == env.device, (
            f"{name}: {tuple(value.shape)} {value.dtype} on {value.device}"
        )
    assert env.state() is None


def test_endings_match_the_env(env_id):
    adapter, env, twin = vector_pair(env_id)
    actions = random_actions(env.single_action_space, 3, torch.Generator().manual_seed(0))
    terminated, truncated = arrange_vector_endings(env, env_id, actions)
    arrange_vector_endings(twin, env_id, actions)
    skrl_form = actions.unsqueeze(-1) if isinstance(env.single_action_space, spaces.Discrete) else actions
    observations, rewards, term, trunc, infos = adapter.step(skrl_form.clone())
    expected = twin.step(actions)
    assert_equal("terminated", terminated.unsqueeze(-1), term)
    assert_equal("truncated", truncated.unsqueeze(-1), trunc)
    assert_equal("rewards", expected[1].unsqueeze(-1), rewards)
    # Same-step reset: the reset observations, the final ones in the infos.
    assert_equal("observations", expected[0], observations)
    assert_equal("infos['_final_obs']", terminated | truncated, infos["_final_obs"])
    assert_equal("infos['final_obs']", expected[4]["final_obs"][:2], infos["final_obs"][:2])


def test_observations_outlive_the_next_step():
    # skrl's trainers record (observations, next_observations) after the step that follows.
    adapter, env, twin = vector_pair("CartPole-v1", num_envs=4)
    generator = torch.Generator().manual_seed(2)
    previous, _ = adapter.reset()
    expected_previous = previous.clone()
    for step in range(6):
        actions = skrl_actions(adapter.action_space, 4, generator)
        observations = adapter.step(actions)[0]
        assert_equal(f"step {step}: the previous observations", expected_previous, previous)
        assert_equal(f"step {step}: observations", twin.step(actions.view(4))[0], observations)
        previous, expected_previous = observations, observations.clone()


def test_reset_resets_once_with_skrls_seed():
    set_seed(11)
    first = make_skrl_env("Pendulum-v1", 4, device="cpu")
    observations, _ = first.reset()
    reference = GpuVectorEnv("Pendulum-v1", 4, device="cpu")
    assert_equal("first reset", reference.reset(seed=11)[0], observations)
    stepped = first.step(torch.zeros(4, 1))[0].clone()
    assert_equal("reset after stepping returns the current observations", stepped, first.reset()[0])


# -- bad use -----------------------------------------------------------------------------------


def test_bad_use_gives_clear_errors_and_changes_nothing():
    raw = GpuVectorEnv("CartPole-v1", 4, device="cpu", **SKRL_ENV)
    env = SkrlVectorEnv(raw)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(4, 1, dtype=torch.int64))
    env.reset()
    state = raw.get_state()
    bad_actions = {
        "shape": (torch.zeros(4, 3, dtype=torch.int64), ValueError, r"shape \(4, 1\)"),
        "dtype": (torch.zeros(4, 1), TypeError, r"torch\.int64"),
        "device": (torch.zeros(4, 1, dtype=torch.int64, device="meta"), ValueError, r"on meta but the env is on cpu"),
    }
    for name, (action, error, message) in bad_actions.items():
        with pytest.raises(error, match=message):
            env.step(action)
        for field, values in raw.get_state().items():
            assert torch.equal(values, state[field]), f"a refused step ({name}) changed {field}"
    with pytest.raises(ValueError, match="AutoresetMode.SAME_STEP"):
        SkrlVectorEnv(GpuVectorEnv("CartPole-v1", 2, device="cpu"))
    with pytest.raises(ValueError, match="observation_buffers=2"):
        SkrlVectorEnv(GpuVectorEnv("CartPole-v1", 2, device="cpu", autoreset_mode=SAME_STEP))
    with pytest.raises(ValueError, match="observation_buffers=2"):
        SkrlParallelEnv(make_parallel("TagGridworld-v0", 2, device="cpu", autoreset_mode=SAME_STEP))
    with pytest.raises(TypeError, match="wraps a GpuParallelEnv"):
        SkrlParallelEnv(raw)
    games = make_skrl_env("TagGridworld-v0", 2, device="cpu")
    games.reset()
    with pytest.raises(ValueError, match=r"missing \['runner_0'\]"):
        games.step({agent: torch.zeros(2, 1, dtype=torch.int64) for agent in games.possible_agents[:-1]})
    with pytest.raises(ValueError, match=r"actions\['tagger_0'\] must have shape \(2, 1\)"):
        games.step({agent: torch.zeros(2, 5, dtype=torch.int64) for agent in games.possible_agents})


# -- learning ------------------------------------------------------------------------------------


class Policy(CategoricalMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        CategoricalMixin.__init__(self, unnormalized_log_prob=True)
        self.net = mlp(observation_space.shape[0], action_space.n)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class MultiPolicy(MultiCategoricalMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        MultiCategoricalMixin.__init__(self, unnormalized_log_prob=True)
        self.net = mlp(observation_space.shape[0], int(action_space.nvec.sum()), hidden=32)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device, hidden=64):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = mlp(observation_space.shape[0], 1, hidden=hidden)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def greedy_returns(policy: Model, seed: int, num_envs: int = 64) -> torch.Tensor:
    """Each sub-env's return of its first episode, acting greedily, from a fresh reset with ``seed``."""
    with skrl_key(seed):
        env = make_skrl_env("CartPole-v1", num_envs, device="cpu")
    observations, _ = env.reset()
    returns, playing = torch.zeros(num_envs), torch.ones(num_envs, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(500):
            logits, _ = policy.compute({"observations": observations})
            observations, rewards, terminated, truncated, _ = env.step(logits.argmax(-1, keepdim=True))
            returns += rewards.view(-1) * playing
            playing &= ~(terminated | truncated).view(-1)
    return returns


# Frames at the first evaluation >= 475 (mean return there), on this machine (torch 2.13, CPU):
# seed 0: 24,576 (479.0), 1: 32,768 (487.3), 2: 40,960 (495.0), 3: 24,576 (499.9), 4: 40,960 (492.7),
# 5: 40,960 (498.0).
# Trained to the end of 150,000 frames and evaluated once, seeds 1 to 5 ended at 486 to 500 and seed
# 0 at 163: PPO on CartPole can lose the top after reaching it.
PPO_SEEDS = [0]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("seed", PPO_SEEDS)
def test_ppo_learns_cartpole(seed, tmp_path):
    """skrl's PPO and SequentialTrainer through the adapter reach a mean return of at least 475 on
    CartPole-v1 within 150,000 frames: the greedy policy is evaluated on 64 fresh episodes every 4
    updates (8,192 frames) from the 8th on (the trainer runs 4 updates per ``train()`` call; the
    adapter's ``reset()`` after the first lets each call carry on where the last one stopped)."""
    num_envs, rollouts, frames, epochs = 32, 64, 150_000, 4
    set_seed(seed)
    env = make_skrl_env("CartPole-v1", num_envs, device="cpu")
    models = {
        "policy": Policy(env.observation_space, env.action_space, env.device),
        "value": Value(env.observation_space, env.action_space, env.device),
    }
    updates = frames // (num_envs * rollouts)
    # skrl steps its learning-rate scheduler once per epoch: anneal to 0 over every epoch of the run.
    cfg = experiment(
        PPO_CFG(
            rollouts=rollouts,
            learning_epochs=epochs,
            mini_batches=4,
            learning_rate=2.5e-3,
            learning_rate_scheduler=torch.optim.lr_scheduler.LinearLR,
            learning_rate_scheduler_kwargs={"start_factor": 1.0, "end_factor": 0.0, "total_iters": updates * epochs},
            entropy_loss_scale=0.01,
            value_loss_scale=0.5,
            value_clip=0.0,
        ),
        tmp_path,
    )
    agent = PPO(
        models=models,
        memory=RandomMemory(memory_size=rollouts, num_envs=num_envs, device=env.device),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=env.device,
        cfg=cfg,
    )
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4 * rollouts, **TRAINER})
    start, results = time.perf_counter(), []
    for done in range(4, updates + 1, 4):
        trainer.train()
        if done >= 8:
            results.append((done * num_envs * rollouts, greedy_returns(models["policy"], 10_000 + seed).mean().item()))
            if results[-1][1] >= 475:
                break
    assert results[-1][1] >= 475, f"seed {seed}: (frames, mean return) {results} in {time.perf_counter() - start:.0f} s"


# -- multi-agent ---------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", sorted(SMALL_TAG))
def test_agent_outputs_match_the_game(env_id):
    games = [make_parallel(env_id, 4, device="cpu", params=SMALL_TAG[env_id], **SKRL_ENV) for _ in range(2)]
    with skrl_key(SEED):
        adapter = SkrlParallelEnv(games[0])
    twin = games[1]
    assert isinstance(adapter, MultiAgentEnvWrapper)
    assert adapter.possible_agents == twin.possible_agents and adapter.num_agents == len(twin.possible_agents)
    assert adapter.observation_spaces == {a: twin.observation_space(a) for a in twin.possible_agents}
    assert adapter.action_spaces == {a: twin.action_space(a) for a in twin.possible_agents}
    observations, _ = adapter.reset()
    expected, _ = twin.reset(seed=SEED)
    for agent in twin.possible_agents:
        assert_equal(f"{agent}: reset observations", expected[agent], observations[agent])
    generator = torch.Generator().manual_seed(4)
    for step in range(15):
        actions = {a: game_actions(twin.action_space(a), 4, generator) for a in twin.possible_agents}
        skrl_form = {a: v.unsqueeze(-1) if v.dim() == 1 else v for a, v in actions.items()}
        outputs = adapter.step(skrl_form)
        expected = twin.step(actions)
        for agent in twin.possible_agents:
            for name, want, got in zip(
                ("observations", "rewards", "terminated", "truncated"), expected[:4], outputs[:4]
            ):
                want = want[agent] if name == "observations" else want[agent].unsqueeze(-1)
                assert_equal(f"step {step}, {agent}: {name}", want, got[agent])
            assert got[agent].shape[-1] == 1
        assert set(outputs[4]) == set(twin.groups), "infos keyed by group"
        state = adapter.state()
        assert state.keys() == set(twin.possible_agents)
        assert all(value is state[twin.possible_agents[0]] for value in state.values()), "one tensor for all"
        assert_equal(f"step {step}: state", twin.state(), state[twin.possible_agents[0]])
    assert adapter.state_spaces == {agent: twin.state_space for agent in twin.possible_agents}


def test_agent_observations_outlive_the_next_step_and_actions_come_in_either_form():
    # Per-agent views of the env's two observation buffers, used in turn; a group's actions are
    # checked on their stack, and agent by agent where agents give different forms or shapes.
    games = [
        make_parallel("TagGridworld-v0", 4, device="cpu", **SKRL_ENV, params=SMALL_TAG["TagGridworld-v0"])
        for _ in range(2)
    ]
    with skrl_key(SEED):
        adapter = SkrlParallelEnv(games[0])
    twin = games[1]
    previous, _ = adapter.reset()
    twin.reset(seed=SEED)
    expected_previous = {agent: obs.clone() for agent, obs in previous.items()}
    generator = torch.Generator().manual_seed(5)
    for step in range(15):
        actions = {a: game_actions(twin.action_space(a), 4, generator) for a in twin.possible_agents}
        # skrl's (num_envs, 1) for every agent but the first, which gives the env's (num_envs,)
        skrl_form = {a: v if a == twin.possible_agents[0] else v.unsqueeze(-1) for a, v in actions.items()}
        observations = adapter.step(skrl_form)[0]
        expected = twin.step(actions)[0]
        for agent in twin.possible_agents:
            assert_equal(f"step {step}, {agent}: the previous observations", expected_previous[agent], previous[agent])
            assert_equal(f"step {step}, {agent}: observations", expected[agent], observations[agent])
        previous, expected_previous = observations, {agent: obs.clone() for agent, obs in observations.items()}
    state = games[0].get_state()
    wrong = {a: torch.zeros(4, 1, dtype=torch.int64) for a in twin.possible_agents}
    wrong["runner_0"] = torch.zeros(4, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"actions\['runner_0'\] must have shape \(4, 1\)"):
        adapter.step(wrong)
    for field, values in games[0].get_state().items():
        assert torch.equal(values, state[field]), f"a refused step changed {field}"


def empty_kwargs(agents) -> dict:
    """skrl 2.1.1 reads an empty dict as a per-agent mapping that lacks every agent: its
    keyword-argument fields get one (empty) entry per agent."""
    names = (
        "learning_rate_scheduler_kwargs",
        "observation_preprocessor_kwargs",
        "state_preprocessor_kwargs",
        "value_preprocessor_kwargs",
    )
    return {name: {agent: {} for agent in agents} for name in names}


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("env_id", sorted(SMALL_TAG))
def test_ippo_with_per_group_policies_on_tag(env_id, tmp_path):
    run_ippo(env_id, "cpu", tmp_path)


def run_ippo(env_id, device, tmp_path):
    """Three updates of skrl's IPPO, one policy and one critic per agent group."""
    set_seed(0)
    env = make_skrl_env(env_id, 16, device=device, params=SMALL_TAG[env_id])
    groups = {group: agents for group, agents in env.groups.items()}
    models = {}
    for agents in groups.values():
        obs_space, action_space = env.observation_space(agents[0]), env.action_space(agents[0])
        policy_type = MultiPolicy if isinstance(action_space, spaces.MultiDiscrete) else Policy
        # One policy and one critic per group: the group's agents share the model instances.
        shared = {
            "policy": policy_type(obs_space, action_space, env.device),
            "value": Value(obs_space, action_space, env.device, hidden=32),
        }
        models.update({agent: shared for agent in agents})
    memories = {agent: RandomMemory(memory_size=8, num_envs=16, device=env.device) for agent in env.possible_agents}
    no_kwargs = empty_kwargs(env.possible_agents)
    cfg = experiment(
        IPPO_CFG(
            rollouts=8, learning_epochs=2, mini_batches=2, learning_rate=3e-3, entropy_loss_scale=0.01, **no_kwargs
        ),
        tmp_path,
    )
    agent = IPPO(
        possible_agents=env.possible_agents,
        models=models,
        memories=memories,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg,
    )
    before = {
        group: [p.detach().clone() for p in models[agents[0]]["policy"].parameters()]
        for group, agents in groups.items()
    }
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3 * 8, **TRAINER}).train()
    for group, agents in groups.items():
        policy = models[agents[0]]["policy"]
        assert all(models[a]["policy"] is policy for a in agents), "one policy per group"
        assert any(not torch.equal(a, b) for a, b in zip(before[group], policy.parameters())), f"{group} did not train"
        assert all(torch.isfinite(p).all() for p in policy.parameters())


# -- games of Box actions, the global state -------------------------------------------------------


@pytest.mark.parametrize("env_id", sorted(BOX_GAMES))
def test_box_actions_and_the_state_match_the_game(env_id):
    """skrl's float actions ``(num_envs, d)`` per agent, past the bounds on some steps and NaN on
    others, step the game as the batched env stepped with the same tensors does (no cast: the states
    agree bitwise; the game's rules clip and read NaN as 0). ``state()`` is the game's state, one
    tensor for every agent, and like the observations it stays unchanged through the next step."""
    games = [
        make_parallel(env_id, 4, device="cpu", validate_actions=False, **BOX_GAMES[env_id], **SKRL_ENV)
        for _ in range(2)
    ]
    with skrl_key(SEED):
        adapter = SkrlParallelEnv(games[0])
    twin = games[1]
    first = twin.possible_agents[0]
    assert adapter.state_spaces == {agent: twin.state_space for agent in twin.possible_agents}
    with pytest.raises(RuntimeError, match=r"call reset\(\) before state\(\)"):
        adapter.state()
    adapter.reset()
    twin.reset(seed=SEED)
    previous = adapter.state()[first]
    assert_equal("state after reset", twin.state(), previous)
    expected_previous = previous.clone()
    generator = torch.Generator().manual_seed(6)
    games_ended = 0
    for step in range(30):
        actions = {}
        for agent in twin.possible_agents:
            space = twin.action_space(agent)
            actions[agent] = random_space_actions(space, (4,), generator, past_bounds=0.5 * (step % 3 == 1))
            if step % 3 == 2:
                nan = torch.rand(actions[agent].shape, generator=generator) < 0.2
                actions[agent] = actions[agent].masked_fill(nan, float("nan"))
            assert actions[agent].dtype == torch.float32 and actions[agent].shape == (4, *space.shape)
        outputs = adapter.step({agent: value.clone() for agent, value in actions.items()})
        expected = twin.step(actions)
        context = f"{env_id}, step {step}"
        for agent in twin.possible_agents:
            assert_equal(f"{context}, {agent}: observations", expected[0][agent], outputs[0][agent])
            for k, name in enumerate(("rewards", "terminated", "truncated"), start=1):
                assert_equal(f"{context}, {agent}: {name}", expected[k][agent].unsqueeze(-1), outputs[k][agent])
        for name, values in twin.get_state().items():
            assert_equal(f"{context}: state field {name}", values, games[0].get_state()[name])
        state = adapter.state()
        assert all(value is state[first] for value in state.values()), "one tensor for every agent"
        assert_equal(f"{context}: state", twin.state(), state[first])
        assert_equal(f"{context}: the previous state", expected_previous, previous)
        previous, expected_previous = state[first], state[first].clone()
        games_ended += int(outputs[4][next(iter(twin.groups))]["_final_obs"].sum())
    assert games_ended >= 4, "every game ends within the steps (Glide: 5 steps, SimpleSpread: 25)"


class GaussianPolicy(GaussianMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        GaussianMixin.__init__(self, clip_actions=True)  # skrl's way to keep actions within the Box
        self.net = mlp(observation_space.shape[0], self.num_actions, hidden=32)
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {"log_std": self.log_std}


class StateValue(DeterministicMixin, Model):
    """MAPPO's centralised critic: a value from the game's global state."""

    def __init__(self, state_space, action_space, device):
        Model.__init__(self, observation_space=state_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = mlp(state_space.shape[0], 1, hidden=32)

    def compute(self, inputs, role=""):
        return self.net(inputs["states"]), {}


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("env_id", sorted(BOX_GAMES))
def test_mappo_with_gaussian_policies_and_a_state_critic_on_box_games(env_id, tmp_path):
    """Three updates of skrl's MAPPO: a Gaussian policy per group, one critic on the global state
    for every agent; the actions recorded are float32 values within the Box."""
    set_seed(0)
    env = make_skrl_env(env_id, 8, device="cpu", **BOX_GAMES[env_id])
    first = env.possible_agents[0]
    critic = StateValue(env.state_space(first), env.action_space(first), env.device)
    models = {}
    for agents in env.groups.values():
        policy = GaussianPolicy(env.observation_space(agents[0]), env.action_space(agents[0]), env.device)
        models.update({agent: {"policy": policy, "value": critic} for agent in agents})
    memories = {agent: RandomMemory(memory_size=8, num_envs=8, device=env.device) for agent in env.possible_agents}
    no_kwargs = empty_kwargs(env.possible_agents)
    cfg = experiment(
        MAPPO_CFG(rollouts=8, learning_epochs=2, mini_batches=2, learning_rate=3e-3, **no_kwargs), tmp_path
    )
    agent = MAPPO(
        possible_agents=env.possible_agents,
        models=models,
        memories=memories,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg,
    )
    before = [p.detach().clone() for p in critic.parameters()]
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3 * 8, **TRAINER}).train()
    assert any(not torch.equal(a, b) for a, b in zip(before, critic.parameters())), "the critic did not train"
    for uid in env.possible_agents:
        space = env.action_space(uid)
        actions = memories[uid].get_tensor_by_name("actions")
        states = memories[uid].get_tensor_by_name("states")
        assert actions.dtype == torch.float32 and not torch.equal(actions, actions.round())
        assert (actions >= torch.as_tensor(space.low)).all() and (actions <= torch.as_tensor(space.high)).all()
        assert states.shape[-1] == env.state_space(uid).shape[0] and states.abs().sum() > 0


# -- on a GPU (pytest -m gpu) ---------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "TagContinuous-v0", "SimpleSpread-v3"])
def test_steps_without_host_synchronisation_on_cuda(env_id, cuda_device):
    # SimpleSpread-v3 with its Box actions, and the state read after each step as skrl's trainers do.
    settings = {"continuous_actions": True} if env_id == "SimpleSpread-v3" else {}
    env = make_skrl_env(
        env_id, 4096 if env_id in ("CartPole-v1", "Pendulum-v1") else 256, device=cuda_device, **settings
    )
    env.reset()
    generator = torch.Generator().manual_seed(0)
    if isinstance(env, SkrlParallelEnv):
        actions = [
            {a: game_actions(env.action_space(a), env.num_envs, generator).to(cuda_device) for a in env.possible_agents}
            for _ in range(4)
        ]
    else:
        actions = [skrl_actions(env.action_space, env.num_envs, generator).to(cuda_device) for _ in range(4)]
    for k in range(3):  # warm-up: kernel compilation, CUDA-graph capture
        env.step(actions[k % 4])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for k in range(40):
            outputs = env.step(actions[k % 4])
            state = env.state()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(v.is_cuda for v in (outputs[0].values() if isinstance(outputs[0], dict) else [outputs[0]]))
    assert state is None if env_id in ("CartPole-v1", "Pendulum-v1") else all(v.is_cuda for v in state.values())


@pytest.mark.gpu
def test_actions_on_another_device_are_refused_on_cuda(cuda_device):
    env = make_skrl_env("CartPole-v1", 8, device=cuda_device)
    env.reset()
    with pytest.raises(ValueError, match=r"on cpu but the env is on cuda"):
        env.step(torch.zeros(8, 1, dtype=torch.int64))


@pytest.mark.gpu
def test_ppo_and_ippo_train_on_cuda(cuda_device, tmp_path):
    run_ippo("TagContinuous-v0", cuda_device, tmp_path)
    set_seed(0)
    env = make_skrl_env("CartPole-v1", 1024, device=cuda_device)
    models = {
        "policy": Policy(env.observation_space, env.action_space, env.device),
        "value": Value(env.observation_space, env.action_space, env.device),
    }
    agent = PPO(
        models=models,
        memory=RandomMemory(memory_size=16, num_envs=1024, device=env.device),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=env.device,
        cfg=experiment(PPO_CFG(rollouts=16), tmp_path),
    )
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 48, **TRAINER}).train()
    assert all(p.is_cuda and torch.isfinite(p).all() for p in models["policy"].parameters())
