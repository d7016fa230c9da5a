"""PettingZooParallelEnv and the PettingZoo registry: PettingZoo's API and seed tests for every game
through ``pettingzoo.make``, CovidEconomy's action masks and episode metrics in the infos, errors.
(Tag's own behaviour: tests/test_tag_parallel_env.py.) About 2 s on a CPU."""

import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pettingzoo
import pytest
import torch
from gymnasium.vector import AutoresetMode
from pettingzoo.test import parallel_api_test, parallel_seed_test

import gpu_marl_envs
from gpu_marl_envs.envs import covid_economy as ce
from gpu_marl_envs.envs import tag_continuous as tc
from gpu_marl_envs.envs import tag_gridworld as tg
from gpu_marl_envs.envs.covid_economy_constants import initial_state_values
from gpu_marl_envs.envs.covid_economy_params import EPISODE_METRICS
from gpu_marl_envs.parallel_env import get_game
from gpu_marl_envs.registration import parallel_env_ids, register_game

COVID = "gpu_marl_envs/CovidEconomy-v0"
# Short cooldown and subsidy interval: both masks open and close within a short episode.
SMALL_COVID = ce.CovidEconomyParams(episode_length=30, action_cooldown=4, subsidy_interval=7)
SMALL_PARAMS = {
    "gpu_marl_envs/TagContinuous-v0": tc.TagContinuousParams(
        num_taggers=2, num_runners=3, num_other_agents_observed=2, episode_length=30, tagging_distance=0.15
    ),
    "gpu_marl_envs/TagGridworld-v0": tg.TagGridworldParams(grid_length=4, episode_length=20),
    COVID: SMALL_COVID,
}


def test_every_game_is_registered_with_pettingzoo():
    for env_id in parallel_env_ids():
        assert env_id in pettingzoo.parallel_registry, env_id
        env = pettingzoo.make("parallel", env_id)
        assert isinstance(env, gpu_marl_envs.PettingZooParallelEnv)
        assert env.params == get_game(env_id).params_type()  # the published defaults
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # registering the same again changes nothing (PettingZoo would warn)
        for spec in gpu_marl_envs.GAMES.values():
            namespace = spec.id.rpartition("/")[0]
            register_game(spec.definition, namespace=namespace, cuda=spec.kernels.cuda, numba=spec.kernels.numba)
    # PettingZoo's id forms: its "_v0" spelling, and no version (the highest).
    for env_id in ("gpu_marl_envs/CovidEconomy_v0", "gpu_marl_envs/CovidEconomy"):
        assert pettingzoo.make("parallel", env_id).metadata["name"] == "covid_economy_v0"


@pytest.mark.parametrize("env_id", parallel_env_ids())
def test_pettingzoo_api_and_seed_tests_through_the_registry(env_id):
    params = SMALL_PARAMS.get(env_id)  # small where given, else the game's defaults
    env = pettingzoo.make("parallel", env_id, params=params)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parallel_api_test(env, num_cycles=100)
    # The only warning is ours, about the probe option the API test passes to reset.
    messages = [str(w.message) for w in caught]
    assert messages == ["PettingZooParallelEnv.reset supports no options; ignored ['options']"], messages
    parallel_seed_test(lambda: pettingzoo.make("parallel", env_id, params=params), num_cycles=30)


def test_max_cycles_sets_the_episode_length():
    env = pettingzoo.make("parallel", COVID, params=SMALL_COVID, max_cycles=5)
    assert env.params == dataclasses.replace(SMALL_COVID, episode_length=5)
    env.reset()
    steps = 0
    while env.agents:
        env.step(dict.fromkeys(env.agents, 0))
        steps += 1
    assert steps == 5


def covid_episode(env, seed=0):
    """Play one CovidEconomy episode with actions sampled within the masks; return every step."""
    observations, infos = env.reset(seed=seed)
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(seed + i)
    steps = [(observations, None, infos)]
    while env.agents:
        actions = {agent: env.action_space(agent).sample(infos[agent]["action_mask"]) for agent in env.agents}
        observations, rewards, terminations, truncations, infos = env.step(actions)
        steps.append((observations, actions, infos, rewards, terminations, truncations))
    return steps


def test_covid_action_masks_in_the_infos():
    env = pettingzoo.make("parallel", COVID, params=SMALL_COVID)
    steps = covid_episode(env)
    p = SMALL_COVID
    cooldown = np.zeros(p.num_states, dtype=np.int64)  # the module docstring's rule, replayed
    planner_opened = governor_closed = 0
    for t, (observations, actions, infos, *_) in enumerate(steps):
        if actions is not None:
            for i in range(p.num_states):
                if t == cooldown[i] + 1:
                    cooldown[i] += p.action_cooldown if actions[f"governor_{i}"] != 0 else 1
        for agent in env.possible_agents:
            mask = infos[agent]["action_mask"]
            assert mask.dtype == np.int8 and mask.shape == (env.action_space(agent).n,), agent
            # The observation ends with the same mask, as floats.
            assert np.array_equal(observations[agent][-mask.size :], mask.astype(np.float32)), (t, agent)
            assert mask[0] == 1, (t, agent)  # "keep" / "no subsidy" is always allowed
        planner_open = t % p.subsidy_interval == 0
        assert (infos["planner_0"]["action_mask"][1:] == planner_open).all(), t
        planner_opened += planner_open
        for i in range(p.num_states):
            free = t >= cooldown[i]
            assert (infos[f"governor_{i}"]["action_mask"][1:] == free).all(), (t, i)
            governor_closed += not free
    assert planner_opened == 5 and governor_closed > 0


def test_covid_episode_metrics_in_the_final_infos():
    env = pettingzoo.make("parallel", COVID, params=SMALL_COVID)
    steps = covid_episode(env, seed=3)
    for t, step in enumerate(steps[1:-1], start=1):
        assert all("episode" not in info for info in step[2].values()), t
    _, _, final, *_ = steps[-1]
    assert set(final) == set(env.possible_agents)
    metrics = set(EPISODE_METRICS)
    for agent, info in final.items():
        assert set(info["episode"]) == {"return", *metrics}, agent
        assert all(isinstance(v, float) for v in info["episode"].values()), agent
        assert {k: info["episode"][k] for k in metrics} == {k: final["planner_0"]["episode"][k] for k in metrics}
        total = np.sum([np.float32(step[3][agent]) for step in steps[1:]], dtype=np.float64)
        assert info["episode"]["return"] == pytest.approx(total, rel=1e-5), agent

    # The same actions through the batched env give the same totals (the runtime's, from the state).
    batched = gpu_marl_envs.make_parallel(COVID, 1, params=SMALL_COVID, autoreset_mode=AutoresetMode.DISABLED)
    batched.reset(seed=3)
    for step in steps[1:]:
        _, _, _, _, infos = batched.step({a: torch.tensor([v]) for a, v in step[1].items()})
    assert bool(infos["planner_0"]["_episode"][0])
    for agent in env.possible_agents:
        expected = {name: float(value[0]) for name, value in infos[agent]["episode"].items()}
        assert final[agent]["episode"] == expected, agent
    # Deaths are D_end - D_start summed over states (the accumulator sums each day's increase).
    state = batched.get_state()
    start = initial_state_values(SMALL_COVID)["deaths"].astype(np.float64).sum()
    assert final["planner_0"]["episode"]["deaths"] == pytest.approx(
        state["deaths"].double().sum().item() - start, rel=1e-4
    )


def test_masked_actions_are_accepted():
    # As in the dynamics, a masked action is no error; it does what the covid docstring says: a
    # governor's sets the level, the planner's is ignored.
    env = pettingzoo.make("parallel", COVID, params=SMALL_COVID)
    env.reset()
    _, _, _, _, infos = env.step({**dict.fromkeys(env.agents, 10), "planner_0": 5})
    assert not infos["governor_0"]["action_mask"][1:].any() and not infos["planner_0"]["action_mask"][1:].any()
    observations, *_ = env.step({**dict.fromkeys(env.agents, 3), "planner_0": 20})
    s = SMALL_COVID.num_states
    assert observations["governor_0"][s + 9] == np.float32(0.3)  # level 3 / 10
    assert observations["governor_0"][s + 11] == np.float32(0.25)  # subsidy level 5 / 20


def test_bad_arguments_and_actions():
    with pytest.raises(ValueError, match="unknown multi-agent env"):
        gpu_marl_envs.PettingZooParallelEnv("CovidEconomy-v9")
    with pytest.raises(TypeError, match="CovidEconomyParams"):
        pettingzoo.make("parallel", COVID, params=tc.TagContinuousParams())
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_cycles"):
            pettingzoo.make("parallel", COVID, max_cycles=bad)
    with pytest.raises(ValueError, match=r"render_mode must be None or one of \[\]"):
        pettingzoo.make("parallel", COVID, render_mode="rgb_array")
    env = pettingzoo.make("parallel", COVID, params=SMALL_COVID)
    first, _ = env.reset(seed=0)
    actions = dict.fromkeys(env.agents, 0)
    for agent, bad in (
        ("planner_0", 21),
        ("governor_7", 11),
        ("governor_7", -1),
        ("planner_0", 1.0),
        ("planner_0", [1]),
        ("governor_0", None),
    ):
        with pytest.raises(ValueError, match=agent):
            env.step({**actions, agent: bad})
    # Rejected steps changed nothing: the first real step is step 1.
    observations, *_ = env.step(actions)
    t = SMALL_COVID.num_states + 8
    assert first["governor_0"][t] == 0 and observations["governor_0"][t] == np.float32(1 / 30)


def test_the_entry_point_imports_a_games_package_as_make_parallel_does():
    # In a fresh interpreter where the package (tests/rally) is importable but not imported:
    # PettingZoo's make finds only registered ids (PettingZoo 1.27 has no hook to import a package),
    # while PettingZooParallelEnv, the registry's entry point, imports the id's namespace, which
    # registers it there too.
    script = """
import pettingzoo
from pettingzoo.env_registry.exceptions import NamespaceNotFound
from gpu_marl_envs.pettingzoo_env import PettingZooParallelEnv
try:
    pettingzoo.make("parallel", "rally/Rally-v0")
    raise SystemExit("pettingzoo.make found an id no package has registered yet")
except NamespaceNotFound:
    pass
assert PettingZooParallelEnv("rally/Rally-v0").possible_agents == ["agent_0", "agent_1", "agent_2"]
assert type(pettingzoo.make("parallel", "rally/Rally-v0")) is PettingZooParallelEnv
"""
    tests = Path(__file__).resolve().parent
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tests), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
