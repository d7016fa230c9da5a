"""The TorchRL adapter: TorchRL's own checker on every registered env, outputs against the env's own
on crafted episodes (final observations, termination and truncation apart), the fast ``step`` and
``step_and_maybe_reset`` against TorchRL's own ``EnvBase.step`` and ``step_mdp``, resets through
``"_reset"``, seeding, bad use, a PPO loop of TorchRL's parts that learns CartPole, per-group
policies on Tag, and games of Box actions (Glide-v0, SimpleSpread-v3's continuous actions) with the
global state at the root. About 9 s on an idle two-core machine."""

from __future__ import annotations

import time

import glide  # noqa: F401  (registers glide/Glide-v0, a test game of Box actions)
import pytest
import torch
from adapter_helpers import BOX_GAMES, SMALL_TAG, assert_equal, mlp
from conftest import ENV_IDS
from gpu_marl_envs.adapters.torchrl import TorchRLParallelEnv, TorchRLVectorEnv, make_torchrl_env
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from harness import random_actions
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from test_vector_api import MAX_STEPS, arrange_vector_endings
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import Bounded, Categorical, MultiCategorical, Unbounded
from torchrl.envs import EnvBase, StepCounter, TransformedEnv
from torchrl.envs.utils import ExplorationType, check_env_specs, set_exploration_type
from torchrl.modules import MultiAgentMLP, NormalParamExtractor, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from gpu_marl_envs import GpuVectorEnv, make_parallel
from gpu_marl_envs.checker import random_space_actions
from gpu_marl_envs.registration import parallel_env_ids

SEED = 3
SAME_STEP = AutoresetMode.SAME_STEP


def vector_pair(env_id, num_envs=3, **kwargs):
    """An adapter and a twin env of the same id and seed, stepped by hand for reference."""
    envs = [
        GpuVectorEnv(env_id, num_envs, device="cpu", autoreset_mode=SAME_STEP, max_episode_steps=MAX_STEPS, **kwargs)
        for _ in range(2)
    ]
    adapter = TorchRLVectorEnv(envs[0])
    adapter.set_seed(SEED)
    envs[1].reset(seed=SEED)
    return adapter, envs[0], envs[1]


def parallel_pair(env_id, num_envs=4):
    envs = [
        make_parallel(env_id, num_envs, device="cpu", autoreset_mode=SAME_STEP, params=SMALL_TAG[env_id])
        for _ in range(2)
    ]
    adapter = TorchRLParallelEnv(envs[0])
    adapter.set_seed(SEED)
    envs[1].reset_groups(seed=SEED)
    return adapter, envs[1]


# -- TorchRL's checker, specs ---------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ENV_IDS + parallel_env_ids())
def test_check_env_specs_passes(env_id):
    env = make_torchrl_env(env_id, 4, device="cpu")
    check_env_specs(env, seed=SEED, break_when_any_done="both")


def test_specs_come_from_the_spaces(env_id):
    raw = GpuVectorEnv(env_id, 5, device="cpu", autoreset_mode=SAME_STEP)
    env = TorchRLVectorEnv(raw)
    observation = env.observation_spec["observation"]
    assert isinstance(observation, Bounded) and observation.shape == (5, *raw.single_observation_space.shape)
    assert torch.equal(observation.space.low[0], torch.as_tensor(raw.single_observation_space.low))
    assert torch.equal(observation.space.high[0], torch.as_tensor(raw.single_observation_space.high))
    space = raw.single_action_space
    if isinstance(space, spaces.Discrete):
        assert isinstance(env.action_spec, Categorical) and env.action_spec.n == space.n
        assert env.action_spec.shape == (5,) and env.action_spec.dtype == torch.int64
    else:
        assert isinstance(env.action_spec, Bounded) and env.action_spec.shape == (5, *space.shape)
        assert torch.equal(env.action_spec.space.high[0], torch.as_tensor(space.high))
    assert env.reward_spec.shape == (5, 1)
    assert set(env.done_keys) == {"done", "terminated", "truncated"}


@pytest.mark.parametrize("env_id", sorted(SMALL_TAG))
def test_agent_groups_have_the_vmas_layout(env_id):
    adapter, twin = parallel_pair(env_id)
    groups = twin.groups
    assert adapter.group_map == groups
    for group, agents in groups.items():
        shape = (4, len(agents))
        obs_space, action_space = twin.observation_space(agents[0]), twin.action_space(agents[0])
        assert adapter.observation_spec[group, "observation"].shape == (*shape, *obs_space.shape)
        assert adapter.observation_spec[group, "mask"].shape == shape
        action = adapter.full_action_spec[group, "action"]
        if isinstance(action_space, spaces.MultiDiscrete):
            assert isinstance(action, MultiCategorical) and action.shape == (*shape, len(action_space.nvec))
        else:
            assert isinstance(action, Categorical) and action.n == action_space.n and action.shape == shape
        assert adapter.full_reward_spec[group, "reward"].shape == (*shape, 1)
        for flag in ("done", "terminated", "truncated"):
            assert adapter.full_done_spec[group, flag].shape == (*shape, 1)
    assert set(adapter.action_keys) == {(group, "action") for group in groups}
    for flag in ("done", "terminated", "truncated"):
        assert adapter.full_done_spec[flag].shape == (4, 1), "the game's own flags sit at the root"


# -- outputs against the env's own -----------------------------------------------------------------


def test_final_observations_and_flags_match_the_env(env_id):
    adapter, env, twin = vector_pair(env_id)
    actions = random_actions(env.single_action_space, 3, torch.Generator().manual_seed(0))
    terminated, truncated = arrange_vector_endings(env, env_id, actions)
    arrange_vector_endings(twin, env_id, actions)
    data, following = adapter.step_and_maybe_reset(TensorDict({"action": actions.clone()}, batch_size=[3]))
    obs, rewards, term, trunc, infos = twin.step(actions)
    assert infos["_final_obs"][:2].all()
    ended = infos["_final_obs"].unsqueeze(-1)
    assert_equal("('next', 'observation')", torch.where(ended, infos["final_obs"], obs), data["next", "observation"])
    assert_equal("final observations", infos["final_obs"][:2], data["next", "observation"][:2])
    assert_equal("('next', 'reward')", rewards.unsqueeze(-1), data["next", "reward"])
    assert_equal("('next', 'terminated')", terminated.unsqueeze(-1), data["next", "terminated"])
    assert_equal("('next', 'truncated')", truncated.unsqueeze(-1), data["next", "truncated"])
    assert_equal("('next', 'done')", (terminated | truncated).unsqueeze(-1), data["next", "done"])
    # The step's own flags, before any reset: truncation is not reported as termination.
    assert_equal("env terminated", terminated, term)
    assert_equal("env truncated", truncated, trunc)
    # Carrying on: the env's reset observations, flags cleared.
    assert_equal("observation after the step", obs, following["observation"])
    for flag in ("done", "terminated", "truncated"):
        assert not following[flag].any(), f"{flag} must be cleared after the env's reset"


def test_the_generic_reset_path_agrees_with_the_fast_one():
    # TransformedEnv takes TorchRL's generic maybe_reset (any_done, then reset with "_reset"): it must
    # not reset a second time the sub-envs that the env reset within the step.
    fast = make_torchrl_env("CartPole-v1", 6, device="cpu", max_episode_steps=9)
    generic = TransformedEnv(make_torchrl_env("CartPole-v1", 6, device="cpu", max_episode_steps=9), StepCounter())
    fast.set_seed(SEED)
    generic.set_seed(SEED)
    policy = TensorDictModule(lambda obs: (obs[:, 2] > 0).long(), in_keys=["observation"], out_keys=["action"])
    runs = [env.rollout(40, policy, break_when_any_done=False) for env in (fast, generic)]
    assert runs[0]["next", "done"].sum() > 6, "episodes must end inside the rollout"
    for key in (
        "observation",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "terminated"),
        ("next", "truncated"),
    ):
        assert_equal(str(key), runs[0][key], runs[1][key])


def assert_same_tensordicts(context, expected, actual):
    keys = set(expected.keys(True, True))
    assert set(actual.keys(True, True)) == keys, (
        f"{context}: keys {sorted(map(str, actual.keys(True, True)))}, expected {sorted(map(str, keys))}"
    )
    for key in keys:
        assert actual[key].dtype == expected[key].dtype, f"{context}: {key} dtype"
        assert_equal(f"{context}: {key}", expected[key], actual[key])


def twin_adapters(env_id, num_envs=4):
    """Two adapters of the same seed and, for vector envs, first actions on which sub-envs 0 and 1
    end by termination and by truncation (None for the games: theirs end within 15 steps)."""
    if env_id in SMALL_TAG:
        return parallel_pair(env_id, num_envs)[0], parallel_pair(env_id, num_envs)[0], None
    (first_adapter, first_env, _), (second_adapter, second_env, _) = (vector_pair(env_id, num_envs) for _ in range(2))
    actions = random_actions(first_env.single_action_space, num_envs, torch.Generator().manual_seed(0))
    for env in (first_env, second_env):
        arrange_vector_endings(env, env_id, actions)
    return first_adapter, second_adapter, actions


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCarContinuous-v0", *sorted(SMALL_TAG)])
def test_the_fast_step_gives_what_torchrls_own_step_gives(env_id):
    # step() leaves out EnvBase.step's checks and completions, which have nothing to do on this env's
    # outputs: on twin adapters, its results equal those of TorchRL's own EnvBase.step, through
    # episodes that end by termination and by truncation.
    fast, generic, first_actions = twin_adapters(env_id)
    torch.manual_seed(0)  # the specs' random actions
    seen = {"terminated": False, "truncated": False}
    for step in range(15):
        actions = fast.full_action_spec.rand()
        if step == 0 and first_actions is not None:
            actions["action"] = first_actions
        stepped = fast.step(actions.clone())
        expected = EnvBase.step(generic, actions.clone())
        assert_same_tensordicts(f"{env_id}, step {step}", expected, stepped)
        for flag in seen:
            seen[flag] |= bool(stepped["next", flag].any())
    assert all(seen.values()), f"episodes must end both ways within the steps: {seen}"


@pytest.mark.parametrize("env_id", ["CartPole-v1", "TagContinuous-v0"])
def test_step_and_maybe_reset_carries_entries_over_as_step_mdp_does(env_id):
    # The second tensordict is step_mdp's, with the env's current observations and flags in place of
    # those of "next": the same keys, the input's other entries carried over (a policy's output, a
    # collector's nested entries: copied tensordicts, as step_mdp copies them).
    env, _, first_actions = twin_adapters(env_id)
    data = TensorDict(batch_size=[4])  # no reset: it would undo the endings arranged for the first step
    group = next(iter(env.group_map)) if env_id in SMALL_TAG else None
    seen = {"terminated": False, "truncated": False}
    for step in range(15):
        data.update(env.full_action_spec.rand())
        if step == 0 and first_actions is not None:
            data["action"] = first_actions
        data["log_prob"] = torch.randn(4)
        data["collector", "traj_ids"] = torch.arange(4)
        if group:
            data[group, "logits"] = torch.randn(4, len(env.group_map[group]), 3)
        stepped, following = env.step_and_maybe_reset(data)
        expected = env.step_mdp(stepped)
        assert set(following.keys(True, True)) == set(expected.keys(True, True)), f"step {step}: keys"
        carried = ["log_prob", ("collector", "traj_ids"), *([(group, "logits")] if group else [])]
        for key in carried:
            assert following[key] is stepped[key], f"step {step}: {key} carried over"
        assert following["collector"] is not stepped["collector"], "a nested tensordict is copied, not shared"
        # The entries made with the step's own, against those the reset path reads from the env.
        current = env._outputs(env._current_entries())
        for key in current.keys(True, True):
            assert_equal(f"step {step}: {key} against the reset path", current[key], following[key])
        for flag in seen:
            seen[flag] |= bool(stepped["next", flag].any())
        data = following
    assert all(seen.values()), f"episodes must end both ways within the steps: {seen}"


def test_partial_reset_through_reset_key():
    adapter, env, twin = vector_pair("CartPole-v1", num_envs=4)
    actions = torch.zeros(4, dtype=torch.int64)
    data = adapter.reset()
    twin.reset()
    for _ in range(2):
        data["action"] = actions
        _, data = adapter.step_and_maybe_reset(data)
        twin.step(actions)
    mask = torch.tensor([False, True, False, True])
    data["_reset"] = mask.unsqueeze(-1)
    before = data["observation"].clone()
    data = adapter.reset(data)
    obs, _ = twin.reset(options={"reset_mask": mask})
    assert_equal("observation", obs, data["observation"])
    assert_equal("sub-envs reset", mask, (data["observation"] != before).any(1))
    assert not data["done"].any()
    for name, values in twin.get_state().items():
        assert_equal(f"state {name}", values, env.get_state()[name])


@pytest.mark.parametrize("env_id", sorted(SMALL_TAG))
def test_agent_outputs_match_the_game(env_id):
    adapter, twin = parallel_pair(env_id)
    torch.manual_seed(1)  # the specs' random actions
    data = adapter.reset()
    twin.reset_groups()
    saw = {"left": False, "game over": False}
    for step in range(30):
        actions = {group: adapter.full_action_spec[group, "action"].rand() for group in twin.groups}
        for group in actions:
            data[group, "action"] = actions[group].clone()
        active_before = {group: data[group, "mask"].clone() for group in twin.groups}
        data, following = adapter.step_and_maybe_reset(data)
        obs, rewards, term, trunc, infos = twin.step_groups(actions)
        ended = next(iter(infos.values()))["_final_obs"]
        context = f"{env_id}, step {step}"
        game_truncated = torch.cat(list(trunc.values()), 1).any(1)
        assert_equal(f"{context}: done", ended.unsqueeze(-1), data["next", "done"])
        assert_equal(f"{context}: truncated", game_truncated.unsqueeze(-1), data["next", "truncated"])
        assert_equal(f"{context}: terminated", (ended & ~game_truncated).unsqueeze(-1), data["next", "terminated"])
        for group in twin.groups:
            final = ended.view(-1, 1, 1)
            assert_equal(
                f"{context}: {group} observation",
                torch.where(final, infos[group]["final_obs"], obs[group]),
                data["next", group, "observation"],
            )
            assert_equal(f"{context}: {group} reward", rewards[group].unsqueeze(-1), data["next", group, "reward"])
            assert_equal(f"{context}: {group} terminated", term[group].unsqueeze(-1), data["next", group, "terminated"])
            assert_equal(f"{context}: {group} truncated", trunc[group].unsqueeze(-1), data["next", group, "truncated"])
            assert_equal(f"{context}: {group} mask", ~term[group], data["next", group, "mask"])
            assert_equal(f"{context}: {group} carried on", obs[group], following[group, "observation"])
            assert_equal(f"{context}: {group} mask carried on", infos[group]["active"], following[group, "mask"])
            assert_equal(f"{context}: {group} left", ~infos[group]["active"], following[group, "done"].squeeze(-1))
            saw["left"] |= bool((active_before[group] & term[group] & ~ended.unsqueeze(-1)).any())
        saw["game over"] |= bool((ended & ~game_truncated).any())
        data = following
    assert saw["game over"], "a game must end by tagging within the steps"
    # The gridworld has one runner: its tag ends the game.
    assert saw["left"] or env_id == "TagGridworld-v0", "a runner must leave an ongoing game within the steps"


def test_agent_level_reset_requests_reset_no_game():
    adapter, twin = parallel_pair("TagContinuous-v0")
    data = adapter.reset()
    before = data["runners", "observation"].clone()
    request = data.clone()
    request["runners", "_reset"] = torch.ones(4, 3, 1, dtype=torch.bool)
    after = adapter.reset(request)
    assert_equal("runners' observations", before, after["runners", "observation"])


def test_seeding_gives_the_same_trajectories():
    runs = []
    for seed in (5, 5, 6):
        env = make_torchrl_env("Acrobot-v1", 4, device="cpu")
        env.set_seed(seed)
        torch.manual_seed(0)  # the rollout's random actions
        runs.append(env.rollout(20, break_when_any_done=False))
    assert torch.equal(runs[0]["next", "observation"], runs[1]["next", "observation"])
    assert not torch.equal(runs[0]["observation"][:, 0], runs[2]["observation"][:, 0]), "another seed, other starts"


# -- bad use -----------------------------------------------------------------------------------


def test_bad_use_gives_clear_errors_and_changes_nothing():
    raw = GpuVectorEnv("CartPole-v1", 4, device="cpu", autoreset_mode=SAME_STEP)
    env = TorchRLVectorEnv(raw)
    data = env.reset()
    state = raw.get_state()
    bad_actions = {
        "shape": (torch.zeros(4, 2, dtype=torch.int64), ValueError, r"shape \(4,\)"),
        "dtype": (torch.zeros(4), TypeError, r"torch\.int64"),
        "device": (torch.zeros(4, dtype=torch.int64, device="meta"), ValueError, r"on meta but the env is on cpu"),
    }
    for name, (action, error, message) in bad_actions.items():
        with pytest.raises(error, match=message):
            env.step(TensorDict({"action": action}, batch_size=[4]))
        for field, values in raw.get_state().items():
            assert torch.equal(values, state[field]), f"a refused step ({name}) changed {field}"
    with pytest.raises(RuntimeError, match="shape==env.batch_size"):
        env.step(TensorDict({"action": torch.zeros(3, dtype=torch.int64)}, batch_size=[3]))
    with pytest.raises(ValueError, match=r"make the env on cuda"):
        env.to("cuda")
    assert data["observation"].shape == (4, 4)


def test_wrapping_needs_same_step_autoreset():
    with pytest.raises(ValueError, match="AutoresetMode.SAME_STEP"):
        TorchRLVectorEnv(GpuVectorEnv("CartPole-v1", 2, device="cpu"))
    with pytest.raises(TypeError, match="wraps a GpuParallelEnv"):
        TorchRLParallelEnv(GpuVectorEnv("CartPole-v1", 2, device="cpu", autoreset_mode=SAME_STEP))
    with pytest.raises(ValueError, match="drop the argument"):
        make_torchrl_env("CartPole-v1", 2, device="cpu", autoreset_mode=AutoresetMode.NEXT_STEP)


# -- learning ------------------------------------------------------------------------------------


def first_episode_returns(env, policy, steps: int) -> torch.Tensor:
    """Each sub-env's return of its first episode in a deterministic rollout from a fresh reset."""
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        data = env.rollout(steps, policy, break_when_any_done=False)
    rewards, done = data["next", "reward"].squeeze(-1), data["next", "done"].squeeze(-1).long()
    before = done.cumsum(1) - done  # episodes that ended before each step
    return (rewards * (before == 0)).sum(1)


# Frames at the first evaluation >= 475 (mean return there), on this machine (torch 2.13, CPU):
# seed 0: 34,816 (491.2), 1: 34,816 (488.1), 2: 26,624 (496.3), 3: 51,200 (500.0), 4: 43,008 (488.5),
# 5: 116,736 (487.5); the GPU machine's CPU (torch 2.11) gave the same picture for seeds 4 to 9.
# Trained for a fixed 150,000 frames and evaluated once at the end, some seeds ended far below 475
# (seed 1: 164): PPO on CartPole can lose the top after reaching it.
PPO_SEEDS = [0]


@pytest.mark.parametrize("seed", PPO_SEEDS)
def test_ppo_learns_cartpole(seed, one_thread):
    """TorchRL's PPO parts (Collector, GAE, ClipPPOLoss) through the adapter reach a mean return of
    at least 475 on CartPole-v1 within 200,000 frames: the deterministic policy is evaluated on 64
    fresh episodes every 4 iterations (8,192 frames) from the 9th iteration (18,432 frames) on."""
    num_envs, steps, frames, epochs, minibatches = 64, 32, 200_000, 4, 4
    torch.manual_seed(seed)
    env = make_torchrl_env("CartPole-v1", num_envs, device="cpu")
    env.set_seed(seed)
    actor = ProbabilisticActor(
        TensorDictModule(mlp(4, 2), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        spec=env.action_spec,
        return_log_prob=True,
    )
    critic = ValueOperator(mlp(4, 1), in_keys=["observation"])
    iterations = frames // (num_envs * steps)
    collector = Collector(
        env,
        actor,
        frames_per_batch=num_envs * steps,
        total_frames=iterations * num_envs * steps,
        auto_register_policy_transforms=False,
    )
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic, average_gae=True)
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=0.2,
        entropy_coeff=0.0,
        critic_coeff=0.5,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    optimizer = torch.optim.Adam(loss.parameters(), lr=2.5e-3)
    schedule = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.0, total_iters=iterations)
    evaluation = make_torchrl_env("CartPole-v1", 64, device="cpu")
    start, results = time.perf_counter(), []
    for iteration, batch in enumerate(collector):
        with torch.no_grad():
            advantage(batch)
        samples = batch.reshape(-1)
        for _ in range(epochs):
            for index in torch.randperm(len(samples)).chunk(minibatches):
                losses = loss(samples[index])
                optimizer.zero_grad()
                (losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]).backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
                optimizer.step()
        schedule.step()
        if iteration >= 8 and iteration % 4 == 0:
            evaluation.set_seed(10_000 + seed)
            results.append(
                ((iteration + 1) * num_envs * steps, first_episode_returns(evaluation, actor, 500).mean().item())
            )
            if results[-1][1] >= 475:
                break
    collector.shutdown()
    assert results[-1][1] >= 475, f"seed {seed}: (frames, mean return) {results} in {time.perf_counter() - start:.0f} s"


# -- multi-agent: per-group policies on Tag ------------------------------------------------------


def group_actor(env, group: str) -> ProbabilisticActor:
    """One policy per group, its parameters shared by the group's agents; MultiDiscrete actions as
    independent categoricals, one per component; Box actions from a TanhNormal within the bounds."""
    spec = env.full_action_spec[group, "action"]
    obs_dim = env.observation_spec[group, "observation"].shape[-1]
    n_agents = env.observation_spec[group, "observation"].shape[-2]
    if isinstance(spec, Bounded):
        net = MultiAgentMLP(
            obs_dim, 2 * spec.shape[-1], n_agents=n_agents, centralized=False, share_params=True, depth=1, num_cells=32
        )
        module = TensorDictModule(
            nn.Sequential(net, NormalParamExtractor()),
            in_keys=[(group, "observation")],
            out_keys=[(group, "loc"), (group, "scale")],
        )
        return ProbabilisticActor(
            module,
            in_keys={"loc": (group, "loc"), "scale": (group, "scale")},
            out_keys=[(group, "action")],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": spec.space.low[0, 0], "high": spec.space.high[0, 0]},
            return_log_prob=True,
            log_prob_key=(group, "log_prob"),
        )
    multi = isinstance(spec, MultiCategorical)  # (a subclass of Categorical)
    nvec = [int(n) for n in spec.nvec.reshape(-1, spec.shape[-1])[0]] if multi else [int(spec.n)]
    net = MultiAgentMLP(
        obs_dim, sum(nvec), n_agents=n_agents, centralized=False, share_params=True, depth=1, num_cells=32
    )
    if not multi:

        def distribution(logits):
            return torch.distributions.Categorical(logits=logits)
    else:
        assert len(set(nvec)) == 1, "equal components (Tag's acceleration and turn levels)"

        def distribution(logits):
            return torch.distributions.Independent(
                torch.distributions.Categorical(logits=logits.unflatten(-1, (len(nvec), nvec[0]))), 1
            )

    module = TensorDictModule(net, in_keys=[(group, "observation")], out_keys=[(group, "logits")])
    return ProbabilisticActor(
        module,
        in_keys={"logits": (group, "logits")},
        out_keys=[(group, "action")],
        distribution_class=distribution,
        return_log_prob=True,
        log_prob_key=(group, "log_prob"),
    )


@pytest.mark.parametrize("env_id", sorted(SMALL_TAG))
def test_per_group_ppo_smoke_run_on_tag(env_id, one_thread):
    run_per_group_ppo(env_id, "cpu")


def run_per_group_ppo(env_id, device, settings=None, state_critic=False):
    """Three iterations of TorchRL's collector, GAE and ClipPPOLoss with one policy and one critic
    per agent group (parameters shared by the group's agents); with ``state_critic`` the critics read
    the game's global state (``"state"``, MAPPO's centralised critic) instead of the observations."""
    torch.manual_seed(0)
    settings = {"params": SMALL_TAG[env_id]} if settings is None else settings
    env = make_torchrl_env(env_id, 16, device=device, return_state=state_critic, **settings)
    actors = {group: group_actor(env, group).to(device) for group in env.group_map}
    if state_critic:
        critics = {
            group: TensorDictModule(
                StateValue(env.observation_spec["state"].shape[-1], len(agents)).to(device),
                in_keys=["state"],
                out_keys=[(group, "state_value")],
            )
            for group, agents in env.group_map.items()
        }
    else:
        critics = {
            group: TensorDictModule(
                MultiAgentMLP(
                    env.observation_spec[group, "observation"].shape[-1],
                    1,
                    n_agents=len(agents),
                    centralized=True,
                    share_params=True,
                    depth=1,
                    num_cells=32,
                    device=device,
                ),
                in_keys=[(group, "observation")],
                out_keys=[(group, "state_value")],
            )
            for group, agents in env.group_map.items()
        }
    collector = Collector(
        env,
        TensorDictSequential(*actors.values()),
        frames_per_batch=16 * 8,
        total_frames=16 * 8 * 3,
        auto_register_policy_transforms=False,
    )
    losses, optimizers = {}, {}
    for group in env.group_map:
        losses[group] = ClipPPOLoss(actors[group], critics[group], entropy_coeff=0.01, normalize_advantage=False)
        losses[group].set_keys(
            action=(group, "action"),
            sample_log_prob=(group, "log_prob"),
            value=(group, "state_value"),
            reward=(group, "reward"),
            done=(group, "done"),
            terminated=(group, "terminated"),
            advantage=(group, "advantage"),
            value_target=(group, "value_target"),
        )
        losses[group].make_value_estimator(gamma=0.99, lmbda=0.95)
        optimizers[group] = torch.optim.Adam(losses[group].parameters(), lr=3e-3)
    before = {group: [p.detach().clone() for p in losses[group].parameters()] for group in env.group_map}
    iterations = 0
    for batch in collector:
        assert batch.batch_size == (16, 8)
        for group, agents in env.group_map.items():
            assert batch["next", group, "reward"].shape == (16, 8, len(agents), 1)
            action, spec = batch[group, "action"], env.full_action_spec[group, "action"]
            if isinstance(spec, Bounded):  # float32 values within the bounds, not indices
                assert action.dtype == torch.float32 and not torch.equal(action, action.round())
                assert (action >= spec.space.low[0, 0]).all() and (action <= spec.space.high[0, 0]).all()
            with torch.no_grad():
                losses[group].value_estimator(
                    batch,
                    params=losses[group].critic_network_params,
                    target_params=losses[group].target_critic_network_params,
                )
            out = losses[group](batch)
            total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
            assert torch.isfinite(total), f"{group}: loss {total}"
            optimizers[group].zero_grad()
            total.backward()
            optimizers[group].step()
        iterations += 1
    collector.shutdown()
    assert iterations == 3
    for group in env.group_map:
        changed = any(not torch.equal(a, b) for a, b in zip(before[group], losses[group].parameters()))
        assert changed, f"{group}'s policy and critic did not train"


# -- games of Box actions, the global state ------------------------------------------------------


@pytest.mark.parametrize("return_state", [False, True], ids=["", "state"])
@pytest.mark.parametrize("env_id", sorted(BOX_GAMES))
def test_check_env_specs_passes_on_box_games(env_id, return_state):
    env = make_torchrl_env(env_id, 4, device="cpu", return_state=return_state, **BOX_GAMES[env_id])
    check_env_specs(env, seed=SEED, break_when_any_done="both")


@pytest.mark.parametrize("env_id", parallel_env_ids())
def test_check_env_specs_passes_with_the_state(env_id):
    check_env_specs(make_torchrl_env(env_id, 2, device="cpu", return_state=True), seed=SEED)


@pytest.mark.parametrize("env_id", sorted(BOX_GAMES))
def test_box_games_have_bounded_float32_actions_and_a_state_at_the_root(env_id):
    env = make_torchrl_env(env_id, 4, device="cpu", return_state=True, **BOX_GAMES[env_id])
    raw = env._env
    for group, agents in env.group_map.items():
        space = raw.action_space(agents[0])
        action = env.full_action_spec[group, "action"]
        assert isinstance(action, Bounded) and action.dtype == torch.float32
        assert action.shape == (4, len(agents), *space.shape)
        assert torch.equal(action.space.low[0, 0], torch.as_tensor(space.low))
        assert torch.equal(action.space.high[0, 0], torch.as_tensor(space.high))
        # Every bound infinite: Unbounded, as TorchRL's Gym and PettingZoo wrappers convert such a Box.
        assert isinstance(env.observation_spec[group, "observation"], Unbounded)
    state = env.observation_spec["state"]
    assert isinstance(state, Unbounded) and state.dtype == torch.float32
    assert state.shape == (4, *raw.state_space.shape)
    without = make_torchrl_env(env_id, 4, device="cpu", **BOX_GAMES[env_id])
    assert "state" not in without.observation_spec.keys(), "return_state=False, as TorchRL's PettingZoo wrapper"
    with pytest.raises(ValueError, match="return_state applies to multi-agent games"):
        make_torchrl_env("CartPole-v1", 2, device="cpu", return_state=True)


@pytest.mark.parametrize("env_id", sorted(BOX_GAMES))
def test_box_actions_and_the_state_match_the_game(env_id):
    """Float actions from the specs, past the bounds on some steps and NaN on others, step the game
    as the batched env stepped with the same tensors does (no cast: the states agree bitwise; the
    game's rules clip and read NaN as 0); ``"state"`` is the game's state, the final one under
    ``"next"`` where a game ended."""
    envs = [
        make_parallel(env_id, 4, device="cpu", autoreset_mode=SAME_STEP, validate_actions=False, **BOX_GAMES[env_id])
        for _ in range(2)
    ]
    adapter, twin = TorchRLParallelEnv(envs[0], return_state=True), envs[1]
    adapter.set_seed(SEED)
    twin.reset_groups(seed=SEED)
    data = adapter.reset()
    twin.reset_groups()
    assert_equal("state after reset", twin.state(), data["state"])
    torch.manual_seed(1)  # the specs' random actions
    generator = torch.Generator().manual_seed(2)
    games_ended = 0
    for step in range(30):
        actions = {group: adapter.full_action_spec[group, "action"].rand() for group in twin.groups}
        for group, agents in twin.groups.items():
            if step % 3 == 1:  # past the bounds
                actions[group] = random_space_actions(twin.action_space(agents[0]), (4, len(agents)), generator, 0.5)
            elif step % 3 == 2:  # some NaN
                nan = torch.rand(actions[group].shape, generator=generator) < 0.2
                actions[group] = actions[group].masked_fill(nan, float("nan"))
            assert actions[group].dtype == torch.float32
            data[group, "action"] = actions[group].clone()
        data, following = adapter.step_and_maybe_reset(data)
        obs, rewards, _, _, infos = twin.step_groups(actions)
        ended = next(iter(infos.values()))["_final_obs"]
        context = f"{env_id}, step {step}"
        for group in twin.groups:
            final = torch.where(ended.view(-1, 1, 1), infos[group]["final_obs"], obs[group])
            assert_equal(f"{context}: {group} observation", final, data["next", group, "observation"])
            assert_equal(f"{context}: {group} reward", rewards[group].unsqueeze(-1), data["next", group, "reward"])
            assert_equal(f"{context}: {group} carried on", obs[group], following[group, "observation"])
        for name, values in twin.get_state().items():
            assert_equal(f"{context}: state field {name}", values, envs[0].get_state()[name])
        state = torch.where(ended.unsqueeze(-1), twin.final_state(), twin.state())
        assert_equal(f"{context}: ('next', 'state')", state, data["next", "state"])
        # The default state: every agent's observation side by side (final ones where a game ended).
        agents_side_by_side = torch.cat([data["next", g, "observation"].flatten(1) for g in twin.groups], 1)
        assert_equal(f"{context}: ('next', 'state') as observations", agents_side_by_side, data["next", "state"])
        assert_equal(f"{context}: state carried on", twin.state(), following["state"])
        games_ended += int(ended.sum())
        data = following
    assert games_ended >= 4, "every game ends within the steps (Glide: 5 steps, SimpleSpread: 25)"


class StateValue(nn.Module):
    """A centralised critic: each agent's value from the game's global state ``(..., S)`` -> ``(..., n, 1)``."""

    def __init__(self, state_size: int, n_agents: int):
        super().__init__()
        self.net = mlp(state_size, n_agents, hidden=32)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.net(state).unsqueeze(-1)


@pytest.mark.parametrize("env_id", sorted(BOX_GAMES))
def test_per_group_ppo_with_tanh_normal_policies_and_a_state_critic(env_id, one_thread):
    run_per_group_ppo(env_id, "cpu", settings=BOX_GAMES[env_id], state_critic=True)


# -- on a GPU (pytest -m gpu) ---------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("env_id", ENV_IDS + parallel_env_ids())
def test_check_env_specs_passes_on_cuda(env_id, cuda_device):
    check_env_specs(make_torchrl_env(env_id, 256, device=cuda_device), seed=SEED, break_when_any_done="both")


@pytest.mark.gpu
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "TagContinuous-v0", "SimpleSpread-v3"])
def test_steps_without_host_synchronisation_on_cuda(env_id, cuda_device):
    # SimpleSpread-v3 with its Box actions and the global state at the root.
    settings = {"continuous_actions": True, "return_state": True} if env_id == "SimpleSpread-v3" else {}
    num_envs = 4096 if env_id in ("CartPole-v1", "Pendulum-v1") else 256
    env = make_torchrl_env(env_id, num_envs, device=cuda_device, **settings)
    data = env.reset()
    actions = [env.full_action_spec.rand() for _ in range(4)]
    for k in range(3):  # warm-up: kernel compilation, CUDA-graph capture
        data.update(actions[k % 4])
        _, data = env.step_and_maybe_reset(data)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for k in range(40):
            data.update(actions[k % 4])
            step, data = env.step_and_maybe_reset(data)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert step["next", "done"].device.type == "cuda" and data.device == env.device


@pytest.mark.gpu
def test_actions_on_another_device_are_refused_on_cuda(cuda_device):
    env = make_torchrl_env("CartPole-v1", 8, device=cuda_device)
    env.reset()
    with pytest.raises(ValueError, match=r"on cpu but the env is on cuda"):
        env.step(TensorDict({"action": torch.zeros(8, dtype=torch.int64)}, batch_size=[8]))
    with pytest.raises(ValueError, match=r"make the env on cpu"):
        env.to("cpu")


@pytest.mark.gpu
def test_collector_and_ppo_loss_run_on_cuda(cuda_device):
    env = make_torchrl_env("CartPole-v1", 1024, device=cuda_device)
    actor = ProbabilisticActor(
        TensorDictModule(mlp(4, 2).to(cuda_device), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        spec=env.action_spec,
        return_log_prob=True,
    )
    critic = ValueOperator(mlp(4, 1).to(cuda_device), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic)
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    collector = Collector(
        env, actor, frames_per_batch=1024 * 32, total_frames=1024 * 32 * 3, auto_register_policy_transforms=False
    )
    for batch in collector:
        assert batch.device == cuda_device or batch["observation"].is_cuda
        advantage(batch)
        out = loss(batch.reshape(-1))
        (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
    collector.shutdown()
    assert batch["next", "done"].any(), "CartPole episodes end within 96 steps of random play"
    run_per_group_ppo("TagContinuous-v0", cuda_device)


def test_torchrls_own_gym_env_makes_ours():
    """TorchRL's GymEnv passes Gymnasium arguments that our envs do not take, and retries without
    each one that a TypeError calls an "unexpected keyword argument", as Python words it."""
    from torchrl.envs import GymEnv

    env = GymEnv("gpu_marl_envs/CartPole-v1")
    assert env.rollout(3)["next", "reward"].shape == (3, 1)
