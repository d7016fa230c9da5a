"""``check_env`` fails where a kernel differs from its reference, saying where: a registered copy of
CartPole whose Numba kernel pays twice the reward, and of TagGridworld whose Numba kernel moves the
last agent the wrong way. (Every kernel of the package passes it: test_twins.py, test_multi_agent_twins.py.)"""

import sys
import textwrap

import pytest
from conftest import KERNEL_BACKENDS_HERE

from gpu_marl_envs import check_env, registration
from gpu_marl_envs.envs.cartpole import CARTPOLE
from gpu_marl_envs.envs.tag_gridworld import TAG_GRIDWORLD, TagGridworldParams

pytestmark = pytest.mark.skipif("numba" not in KERNEL_BACKENDS_HERE, reason="needs Numba's CUDA simulator")
NAMESPACE = "checker_tests"


@pytest.fixture
def broken(tmp_path, monkeypatch):
    """Registers ``NAMESPACE/<definition id>`` with a Numba module of ``source``; removed afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def register(definition, module: str, source: str):
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        register = (
            registration.register_game if isinstance(definition, type(TAG_GRIDWORLD)) else registration.register_env
        )
        return register(definition, namespace=NAMESPACE, numba=module).id

    yield register
    for registry in (registration.ENVS, registration.GAMES):
        for key in [key for key in registry if key.startswith(NAMESPACE)]:
            del registry[key]
    for module in [name for name in sys.modules if name.startswith("broken_")]:
        del sys.modules[module]


def test_a_kernel_that_differs_is_named_with_the_step_and_state(broken):
    env_id = broken(
        CARTPOLE,
        "broken_cartpole_numba",
        """
        import numpy as np
        from gpu_marl_envs.kernels.cartpole_numba import observe, reset, step as reference_step
        from gpu_marl_envs.kernels.numba_api import cuda

        @cuda.jit(device=True)
        def step(state, n, i, actions, p):
            reward, terminated = reference_step(state, n, i, actions, p)
            return reward * np.float32(2.0), terminated
    """,
    )
    with pytest.raises(
        AssertionError,
        match=r"CartPole-v1 numba NEXT_STEP, step 0: rewards differs first at \[0\] "
        r"\(env 0\): reference 1.0, twin 2.0; 3 element\(s\) differ\. Env 0's "
        r"state before this step: \{'x': ",
    ):
        check_env(env_id, CARTPOLE.make_params(max_episode_steps=5), num_steps=8, rtol=1e-5, atol=1e-5)


def test_a_game_kernel_that_differs_names_the_agent(broken):
    env_id = broken(
        TAG_GRIDWORLD,
        "broken_gridworld_numba",
        """
        from gpu_marl_envs.kernels import tag_gridworld_numba
        from gpu_marl_envs.kernels.numba_api import cuda

        def game_functions(c):
            functions = tag_gridworld_numba.game_functions(c)
            runner, step_env = c.NUM_AGENTS - 1, functions.step_env

            @cuda.jit(device=True)
            def wrong_way(state, sh, e, actions, rewards):
                if cuda.threadIdx.x == 0:  # the runner's +x as -x, before the step reads it
                    actions[e, runner] = 2 if actions[e, runner] == 1 else actions[e, runner]
                cuda.syncthreads()
                return step_env(state, sh, e, actions, rewards)

            return functions._replace(step_env=wrong_way)
    """,
    )
    params = TagGridworldParams(num_taggers=2, grid_length=3, episode_length=4, random_start=True)
    # Every agent observes the runner's cell (the full observation): the taggers' rows differ first.
    with pytest.raises(
        AssertionError,
        match=r"NEXT_STEP, step 0: observations\[taggers\] differs first at "
        r"\[\d+, 0, 2\] \(env \d+, tagger_0, element \(2,\)\)",
    ):
        check_env(env_id, params, num_envs=4, num_steps=8)


def test_episodes_must_end_within_the_steps_checked(broken):
    env_id = registration.register_env(CARTPOLE, namespace=NAMESPACE, numba="gpu_marl_envs.kernels.cartpole_numba").id
    with pytest.raises(AssertionError, match="no episode ended within 2 steps"):
        check_env(env_id, num_steps=2, rtol=1e-5, atol=1e-5)


def test_a_difference_from_a_crafted_start_names_the_start(broken):
    from rally.game import RALLY, RallyParams

    env_id = broken(
        RALLY,
        "broken_rally_numba",
        """
        from gpu_marl_envs.kernels.numba_game import numba_game
        from rally import rally_numba

        @numba_game
        def game_functions(c):
            rally = rally_numba.game_functions(c)
            shared, reset_env, observe_env = rally.shared, rally.reset_env, rally.observe_env

            def step_env(state, sh, e, actions, rewards):
                terminated, truncated = rally.step_env(state, sh, e, actions, rewards)
                return False, terminated or truncated  # a gathered rally truncated, not terminated

            return locals()
    """,
    )
    params = RallyParams(num_agents=3, episode_length=4)

    def gathered(state: dict) -> dict:  # every agent at one point: the game ends on the next step
        return {**state, "x": state["x"][:, :1].expand_as(state["x"]), "y": state["y"][:, :1].expand_as(state["y"])}

    with pytest.raises(AssertionError, match=r"Rally-v0 numba NEXT_STEP from start 'gathered', step 0: terminations"):
        check_env(env_id, params, num_envs=2, num_steps=2, start={"gathered": gathered})
