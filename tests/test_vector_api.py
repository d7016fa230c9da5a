"""The batched API contract of ``GpuVectorEnv``, for every env: ``make_vec``, spaces and output
types, Gymnasium's autoreset modes, seeding, explicit states, the numpy single env and numpy I/O.

Everything runs on the CPU with the torch backend; the parts the kernels implement themselves
(autoreset, truncation, reset masks) also run with each kernel backend available here (Numba under
the CUDA simulator: 3 sub-envs and a handful of steps, as the simulator is slow).
"""

from __future__ import annotations

import functools
import re
import sys

import gymnasium
import numpy as np
import pytest
import torch
from conftest import KERNEL_BACKENDS_HERE
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space
from harness import assert_close, random_actions, snapshot

from gpu_marl_envs import GpuEnv, GpuVectorEnv

N = 3  # sub-envs: 0 truncates, 1 terminates (where the env can), 2 runs on
MAX_STEPS = 4  # short episodes, so truncation and autoreset happen within a few steps
SEED = 42
EXACT = {"rtol": 0.0, "atol": 0.0}


@pytest.fixture(params=list(AutoresetMode), ids=lambda mode: mode.name)
def autoreset_mode(request):
    return request.param


@pytest.fixture(params=["torch", *KERNEL_BACKENDS_HERE])
def backend(request):
    """The torch reference and each kernel backend that runs here (for kernel-side behaviour)."""
    return request.param


# -- helpers ------------------------------------------------------------------------------------


def make_vec(
    env_id, num_envs=N, *, backend="torch", mode=AutoresetMode.NEXT_STEP, max_episode_steps=MAX_STEPS, **kwargs
) -> GpuVectorEnv:
    return gymnasium.make_vec(
        f"gpu_marl_envs/{env_id}",
        num_envs=num_envs,
        device="cpu",
        backend=backend,
        autoreset_mode=mode,
        max_episode_steps=max_episode_steps,
        **kwargs,
    )


def tolerance(backend: str) -> dict:
    """Same backend, same float32 operations: equal bits. A kernel backend against the torch
    reference: a few ulps (the twins' tolerance in harness.py)."""
    return EXACT if backend == "torch" else {}


def other_actions(actions: torch.Tensor, space: spaces.Space) -> torch.Tensor:
    """Actions that differ from ``actions`` in every sub-env."""
    if isinstance(space, spaces.Discrete):
        return (actions + 1) % int(space.n)
    return -actions - 0.5


def state_rows(state: dict[str, torch.Tensor]) -> list[dict[str, float]]:
    """``get_state()`` split into one ``{field: float}`` per sub-env."""
    num_envs = len(next(iter(state.values())))
    return [{name: float(values[i]) for name, values in state.items()} for i in range(num_envs)]


def assert_states_equal(expected: dict, actual: dict, context: str, rows=None) -> None:
    for name in expected:
        e, a = expected[name], actual[name]
        if rows is not None:
            e, a = e[rows], a[rows]
        assert_close(f"state field {name!r}", e, a, context, **EXACT)


def second_reset_observations(env_id, seed=SEED) -> tuple[torch.Tensor, dict]:
    """Observations and states of every sub-env's second episode under ``reset(seed=seed)``: what
    an autoreset or a masked reset must give after one seeded reset (torch reference)."""
    ref = make_vec(env_id)
    ref.reset(seed=seed)
    obs, _ = ref.reset()
    return obs.clone(), ref.get_state()


@functools.cache
def terminating_case(env_id):
    """``(state, action)``: a state (``{field: float}``) and a single action from which the next step
    terminates, or None where no state was found (an env that never terminates, as Pendulum).

    Found without knowing the env: reset states of a large batch (torch backend), each field
    scaled by a random factor in ``[-scale, scale]``, are stepped once with each of a few actions
    (every discrete action; a Box's low, zero and high). Large scales first: their terminations
    lie far past the boundary, so every backend agrees on them despite ulp-level differences.
    """
    n = 2048
    env = GpuVectorEnv(env_id, n, device="cpu", backend="torch", autoreset_mode=AutoresetMode.DISABLED)
    env.reset(seed=0)
    base = env.get_state()
    space = env.single_action_space
    if isinstance(space, spaces.Discrete):
        candidates = [torch.tensor(a, dtype=torch.int64) for a in range(int(space.n))]
    else:
        low = torch.as_tensor(space.low, dtype=torch.float32)
        high = torch.as_tensor(space.high, dtype=torch.float32)
        candidates = [high, low, torch.zeros_like(low)]
    generator = torch.Generator().manual_seed(0)
    for scale in (100.0, 30.0, 10.0, 3.0):
        state = {name: values * (2 * torch.rand(n, generator=generator) - 1) * scale for name, values in base.items()}
        for action in candidates:
            env.set_state(state)
            terminated = env.step(action.expand(n, *space.shape).contiguous())[2]
            if terminated.any():
                i = int(terminated.nonzero()[0, 0])
                return {name: float(values[i]) for name, values in state.items()}, action
    return None


def arrange_endings(env_id, reset_states: list[dict[str, float]], set_one, actions: torch.Tensor):
    """Make the next step end sub-envs 0 and 1 and let sub-env 2 run on.

    Sub-env 0 is put one step before truncation (its own reset state, ``MAX_STEPS - 1`` steps
    elapsed); sub-env 1 on a state that terminates next step with the action written into
    ``actions[1]`` (where the env never terminates: one step before truncation too). ``set_one(i,
    state, elapsed_steps)`` writes a sub-env's state. Returns the expected (terminated, truncated).
    """
    set_one(0, reset_states[0], MAX_STEPS - 1)
    case = terminating_case(env_id)
    if case is None:
        set_one(1, reset_states[1], MAX_STEPS - 1)
        return torch.tensor([False, False, False]), torch.tensor([True, True, False])
    state, action = case
    set_one(1, state, 0)
    actions[1] = action
    return torch.tensor([False, True, False]), torch.tensor([True, False, False])


def arrange_vector_endings(env: GpuVectorEnv, env_id, actions: torch.Tensor):
    def set_one(i, state, elapsed_steps):
        env.set_state({name: [value] for name, value in state.items()}, env_ids=[i], elapsed_steps=elapsed_steps)

    return arrange_endings(env_id, state_rows(env.get_state()), set_one, actions)


def step_actions(env, generator) -> torch.Tensor:
    return random_actions(env.single_action_space, env.num_envs, generator)


# -- make_vec, spaces, outputs --------------------------------------------------------------------


def test_make_vec_gives_a_gpu_vector_env_with_batched_spaces(env_id, autoreset_mode):
    env = make_vec(env_id, num_envs=5, mode=autoreset_mode)
    assert isinstance(env, GpuVectorEnv), f"make_vec gave {type(env).__name__}"
    assert env.num_envs == 5 and env.backend == "torch" and env.device == torch.device("cpu")
    assert env.observation_space == batch_space(env.single_observation_space, 5), (
        f"observation_space {env.observation_space} is not the batch of {env.single_observation_space}"
    )
    assert env.action_space == batch_space(env.single_action_space, 5), (
        f"action_space {env.action_space} is not the batch of {env.single_action_space}"
    )
    assert isinstance(env.single_observation_space, spaces.Box)
    assert env.single_observation_space.dtype == np.float32
    assert len(env.single_observation_space.shape) == 1
    assert env.metadata["autoreset_mode"] == autoreset_mode, f"metadata {env.metadata}"
    assert isinstance(env.metadata["autoreset_mode"], AutoresetMode)
    assert env.autoreset_mode == autoreset_mode
    assert env.params.max_episode_steps == MAX_STEPS, "make_vec's max_episode_steps must reach the env's params"


def test_outputs_have_documented_shapes_dtypes_and_device(env_id, autoreset_mode):
    n = 5
    env = make_vec(env_id, num_envs=n, mode=autoreset_mode)
    obs_dim = env.single_observation_space.shape[0]
    obs, infos = env.reset(seed=SEED)
    assert isinstance(obs, torch.Tensor) and isinstance(infos, dict)
    assert (obs.shape, obs.dtype, obs.device.type) == ((n, obs_dim), torch.float32, "cpu"), (
        f"reset observations: {tuple(obs.shape)} {obs.dtype} {obs.device}"
    )
    generator = torch.Generator().manual_seed(0)
    for t in range(MAX_STEPS + 1):
        obs, rewards, terminated, truncated, infos = env.step(step_actions(env, generator))
        for name, value, shape, dtype in (
            ("observations", obs, (n, obs_dim), torch.float32),
            ("rewards", rewards, (n,), torch.float32),
            ("terminated", terminated, (n,), torch.bool),
            ("truncated", truncated, (n,), torch.bool),
        ):
            assert isinstance(value, torch.Tensor), f"step {t}: {name} is a {type(value).__name__}"
            assert (tuple(value.shape), value.dtype, value.device.type) == (shape, dtype, "cpu"), (
                f"step {t}: {name} is {tuple(value.shape)} {value.dtype} {value.device}, expected {shape} {dtype} cpu"
            )
        if autoreset_mode == AutoresetMode.SAME_STEP:
            assert set(infos) == {"final_obs", "_final_obs"}, f"step {t}: SAME_STEP infos keys {sorted(infos)}"
            assert (tuple(infos["final_obs"].shape), infos["final_obs"].dtype) == ((n, obs_dim), torch.float32)
            assert (tuple(infos["_final_obs"].shape), infos["_final_obs"].dtype) == ((n,), torch.bool)
        else:
            assert infos == {}, f"step {t}: {autoreset_mode.name} infos {infos}"


def test_observations_lie_in_the_single_observation_space(env_id, autoreset_mode):
    n = 8
    env = make_vec(env_id, num_envs=n, mode=autoreset_mode)
    space = env.single_observation_space
    obs, _ = env.reset(seed=SEED)
    generator = torch.Generator().manual_seed(1)

    def check(rows: torch.Tensor, where: str, mask=None):
        for i, row in enumerate(rows):
            if mask is None or bool(mask[i]):
                assert space.contains(row.numpy()), f"{where}, env {i}: {row.tolist()} is not in {space}"

    check(obs, "reset")
    for t in range(3 * MAX_STEPS):
        obs, _, terminated, truncated, infos = env.step(step_actions(env, generator))
        check(obs, f"step {t}")
        if "final_obs" in infos:
            check(infos["final_obs"], f"step {t} final_obs", infos["_final_obs"])
        if autoreset_mode == AutoresetMode.DISABLED and (terminated | truncated).any():
            obs, _ = env.reset(options={"reset_mask": terminated | truncated})
            check(obs, f"masked reset after step {t}")


# -- autoreset ------------------------------------------------------------------------------------


def test_next_step_autoreset(env_id, backend):
    """The step after an ending one returns a reset observation, reward 0, terminated = truncated =
    False, and ignores that sub-env's action."""
    generator = torch.Generator().manual_seed(2)
    envs = [make_vec(env_id, backend=backend), make_vec(env_id, backend=backend)]
    ending_actions = step_actions(envs[0], generator)
    for env in envs:
        env.reset(seed=SEED)
        expected_terminated, expected_truncated = arrange_vector_endings(env, env_id, ending_actions)
    ends = [snapshot(env.step(ending_actions)) for env in envs]
    context = f"{env_id} {backend} ending step"
    assert_close("terminated", expected_terminated, ends[0][2], context)
    assert_close("truncated", expected_truncated, ends[0][3], context)

    # The next step: the twins get different actions; sub-envs 0 and 1 must not care.
    actions = step_actions(envs[0], generator)
    after = [
        snapshot(envs[0].step(actions)),
        snapshot(envs[1].step(other_actions(actions, envs[1].single_action_space))),
    ]
    fresh_obs, fresh_state = second_reset_observations(env_id)
    context = f"{env_id} {backend} step after the ending step"
    for i in (0, 1):
        assert_close(f"observations of env {i} (reset)", fresh_obs[i], after[0][0][i], context, **tolerance(backend))
        assert after[0][1][i].item() == 0.0, f"{context}: env {i} reward {after[0][1][i].item()}, expected 0"
        assert not after[0][2][i] and not after[0][3][i], (
            f"{context}: env {i} terminated/truncated set on its reset step"
        )
        assert_close(f"observations of env {i} under other actions", after[0][0][i], after[1][0][i], context, **EXACT)
    assert_states_equal(fresh_state, envs[0].get_state(), context, rows=[0, 1])
    assert not torch.equal(after[0][0][2], after[1][0][2]), (
        f"{context}: env 2 (not ending) gave the same observation under different actions"
    )


def test_same_step_autoreset(env_id, backend):
    """The ending step returns the reset observation, with the terminal one in infos["final_obs"]
    and infos["_final_obs"] set: compared with a NEXT_STEP twin given the same actions."""
    generator = torch.Generator().manual_seed(3)
    same = make_vec(env_id, backend=backend, mode=AutoresetMode.SAME_STEP)
    next_step = make_vec(env_id, backend=backend, mode=AutoresetMode.NEXT_STEP)
    actions = step_actions(same, generator)
    for env in (same, next_step):
        env.reset(seed=SEED)
        expected_terminated, expected_truncated = arrange_vector_endings(env, env_id, actions)
    ended = expected_terminated | expected_truncated
    s = snapshot(same.step(actions))
    n1 = snapshot(next_step.step(actions))
    context = f"{env_id} {backend} SAME_STEP ending step"
    assert_close("terminated", expected_terminated, s[2], context)
    assert_close("truncated", expected_truncated, s[3], context)
    assert_close("rewards (vs NEXT_STEP)", n1[1], s[1], context, **EXACT)
    assert_close("infos['_final_obs']", ended, s[4]["_final_obs"], context)
    assert_close(
        "infos['final_obs'] (vs NEXT_STEP's terminal observations)",
        n1[0][ended],
        s[4]["final_obs"][ended],
        context,
        **EXACT,
    )
    assert_close("observations of env 2 (running on)", n1[0][2], s[0][2], context, **EXACT)

    n2 = snapshot(next_step.step(step_actions(next_step, generator)))
    assert_close("observations (vs NEXT_STEP's reset step)", n2[0][ended], s[0][ended], context, **EXACT)
    rows = ended.nonzero().flatten().tolist()
    assert_states_equal(next_step.get_state(), same.get_state(), context + " (states)", rows=rows)

    s2 = snapshot(same.step(step_actions(same, generator)))
    context = f"{env_id} {backend} SAME_STEP step after"
    assert not s2[4]["_final_obs"].any(), f"{context}: _final_obs {s2[4]['_final_obs'].tolist()}, no episode ended"
    assert not (s2[2] | s2[3]).any(), f"{context}: terminated {s2[2].tolist()} truncated {s2[3].tolist()}"


def test_disabled_autoreset_and_reset_mask(env_id, backend):
    """DISABLED: an ended sub-env is not reset by step(); reset(options={"reset_mask": m}) resets
    exactly the sub-envs in m."""
    generator = torch.Generator().manual_seed(4)
    env = make_vec(env_id, backend=backend, mode=AutoresetMode.DISABLED)
    env.reset(seed=SEED)
    actions = step_actions(env, generator)
    expected_terminated, expected_truncated = arrange_vector_endings(env, env_id, actions)
    s1 = snapshot(env.step(actions))
    context = f"{env_id} {backend} DISABLED"
    assert_close("terminated", expected_terminated, s1[2], context)
    assert_close("truncated", expected_truncated, s1[3], context)
    terminal_state = env.get_state()

    # No reset: the next step continues from the terminal states, as a twin set to them does.
    actions = step_actions(env, generator)
    s2 = snapshot(env.step(actions))
    twin = make_vec(env_id, backend=backend, mode=AutoresetMode.DISABLED)
    twin.set_state(terminal_state)
    assert_close(
        "observations (vs stepping on from the terminal states)",
        twin.step(actions)[0],
        s2[0],
        context + " step after the ending step",
        **EXACT,
    )

    mask = torch.tensor([True, False, True])
    state_before = env.get_state()
    obs, infos = env.reset(options={"reset_mask": mask})
    fresh_obs, fresh_state = second_reset_observations(env_id)
    context += " masked reset"
    assert_close("observations of unmasked env 1", s2[0][1], obs[1], context, **EXACT)
    assert_states_equal(state_before, env.get_state(), context, rows=[1])
    assert_close("observations of masked envs 0, 2", fresh_obs[mask], obs[mask], context, **tolerance(backend))
    assert_states_equal(fresh_state, env.get_state(), context, rows=[0, 2])


def test_truncation_at_max_episode_steps(env_id, autoreset_mode):
    """A sub-env truncates on exactly its ``max_episode_steps``-th step, counted from ``set_state``'s
    ``elapsed_steps`` or from its (auto)reset."""
    env = make_vec(env_id, mode=autoreset_mode)
    env.reset(seed=SEED)
    start = env.get_state()
    env.set_state(start, elapsed_steps=torch.tensor([MAX_STEPS - 1, MAX_STEPS - 2, 0]))
    generator = torch.Generator().manual_seed(5)
    # Step t (1-based) truncates env 0 at 1, env 1 at 2 and env 2 at MAX_STEPS; env 0 truncates
    # again MAX_STEPS steps after its new episode began: its reset step (NEXT_STEP), the ending
    # step itself (SAME_STEP) or the masked reset after step 1 (DISABLED).
    again = {
        AutoresetMode.NEXT_STEP: 2 + MAX_STEPS,
        AutoresetMode.SAME_STEP: 1 + MAX_STEPS,
        AutoresetMode.DISABLED: 1 + MAX_STEPS,
    }[autoreset_mode]
    expected = {0: {1, again}, 1: {2}, 2: {MAX_STEPS}}
    for t in range(1, again + 1):
        _, _, terminated, truncated, _ = env.step(step_actions(env, generator))
        assert not terminated.any(), (
            f"{env_id}: a reset state terminated within {t} steps; this test needs one that does not"
        )
        for i in range(N):
            if autoreset_mode == AutoresetMode.DISABLED and i != 0 and t > min(expected[i]):
                continue  # an ended sub-env that nobody resets: Gymnasium leaves its next steps undefined
            assert bool(truncated[i]) == (t in expected[i]), (
                f"{env_id} {autoreset_mode.name}: env {i} truncated={bool(truncated[i])} at step {t}"
            )
        if autoreset_mode == AutoresetMode.DISABLED and t == 1:
            env.reset(options={"reset_mask": torch.tensor([True, False, False])})


def test_autoreset_matches_gymnasium_sync_vector_env(env_id, backend, autoreset_mode):
    """Gymnasium's own SyncVectorEnv over single GpuEnvs (same seeds, same states, same actions)
    is the reference for every mode; a masked reset after the ending step is mixed in, and in
    DISABLED mode every ended sub-env is reset by mask, as Gymnasium asks."""
    ours = make_vec(env_id, backend=backend, mode=autoreset_mode)
    theirs = SyncVectorEnv(
        [functools.partial(GpuEnv, env_id, max_episode_steps=MAX_STEPS) for _ in range(N)],
        autoreset_mode=autoreset_mode,
    )
    tol = tolerance(backend)
    obs, _ = ours.reset(seed=SEED)
    their_obs, _ = theirs.reset(seed=SEED)
    assert_close("reset observations", torch.as_tensor(their_obs), obs, f"{env_id} {backend} reset", **tol)

    generator = torch.Generator().manual_seed(6)
    actions = step_actions(ours, generator)
    arrange_vector_endings(ours, env_id, actions)
    arrange_endings(
        env_id,
        [env.get_state() for env in theirs.envs],
        lambda i, state, elapsed: theirs.envs[i].set_state(state, elapsed_steps=elapsed),
        actions.clone(),
    )

    for t in range(MAX_STEPS):
        context = f"{env_id} {backend} {autoreset_mode.name} step {t}"
        if t > 0:
            actions = step_actions(ours, generator)
        obs, rewards, terminated, truncated, infos = ours.step(actions)
        their = theirs.step(actions.numpy())
        assert_close("observations", torch.as_tensor(their[0]), obs, context, **tol)
        assert_close("rewards", torch.as_tensor(their[1]), rewards, context, **tol)
        assert_close("terminated", torch.as_tensor(their[2]), terminated, context)
        assert_close("truncated", torch.as_tensor(their[3]), truncated, context)
        if autoreset_mode == AutoresetMode.SAME_STEP:
            their_mask = torch.as_tensor(their[4].get("_final_obs", np.zeros(N, dtype=bool)))
            assert_close("infos['_final_obs']", their_mask, infos["_final_obs"], context)
            for i in their_mask.nonzero().flatten().tolist():
                assert_close(
                    f"infos['final_obs'][{i}]",
                    torch.as_tensor(their[4]["final_obs"][i]),
                    infos["final_obs"][i],
                    context,
                    **tol,
                )
        mask = torch.zeros(N, dtype=torch.bool)
        if t == 0:
            mask[0] = True  # a masked reset right after the ending step, in every mode
        if autoreset_mode == AutoresetMode.DISABLED:
            mask |= terminated | truncated
        if mask.any():
            obs, _ = ours.reset(options={"reset_mask": mask})
            their_obs, _ = theirs.reset(options={"reset_mask": mask.numpy()})
            assert_close("observations after reset(reset_mask)", torch.as_tensor(their_obs), obs, context, **tol)


# -- seeding --------------------------------------------------------------------------------------


def test_same_seed_gives_identical_trajectories(env_id, autoreset_mode):
    envs = [make_vec(env_id, num_envs=4, mode=autoreset_mode) for _ in range(2)]
    outputs = [env.reset(seed=SEED)[0].clone() for env in envs]
    assert_close("reset observations", outputs[0], outputs[1], f"{env_id} reset", **EXACT)
    generator = torch.Generator().manual_seed(7)
    for t in range(3 * MAX_STEPS):
        actions = step_actions(envs[0], generator)
        a, b = (snapshot(env.step(actions)) for env in envs)
        context = f"{env_id} {autoreset_mode.name} step {t}"
        for name, x, y in zip(("observations", "rewards", "terminated", "truncated"), a, b):
            assert_close(name, x, y, context, **EXACT)
        if autoreset_mode == AutoresetMode.DISABLED and (a[2] | a[3]).any():
            for env in envs:
                env.reset(options={"reset_mask": a[2] | a[3]})
    assert_states_equal(envs[0].get_state(), envs[1].get_state(), f"{env_id} final states")


def test_different_seeds_give_different_reset_observations(env_id):
    a = make_vec(env_id).reset(seed=1)[0]
    b = make_vec(env_id).reset(seed=2)[0]
    for i in range(N):
        assert not torch.equal(a[i], b[i]), f"{env_id}: env {i} has the same reset observation under seeds 1 and 2"
    for i in range(1, N):
        assert not torch.equal(a[0], a[i]), f"{env_id}: envs 0 and {i} of one batch start identically"


def test_sub_env_i_equals_a_single_env_seeded_with_seed_plus_i(env_id):
    vec = make_vec(env_id)
    singles = [gymnasium.make(f"gpu_marl_envs/{env_id}") for _ in range(N)]
    for episode in range(2):  # the seeded reset, then an unseeded one
        obs, _ = vec.reset(seed=SEED if episode == 0 else None)
        for i, single in enumerate(singles):
            single_obs, _ = single.reset(seed=SEED + i if episode == 0 else None)
            assert isinstance(single_obs, np.ndarray) and single_obs.dtype == np.float32
            assert_close(
                f"reset {episode} observations of env {i}",
                torch.as_tensor(single_obs),
                obs[i],
                f"{env_id} vs gymnasium.make seeded {SEED + i}",
                **EXACT,
            )


def test_reset_with_a_list_of_seeds(env_id):
    seeds = [5, 1000, 2**40]
    obs, _ = make_vec(env_id).reset(seed=seeds)
    for i, seed in enumerate(seeds):
        single_obs, _ = gymnasium.make(f"gpu_marl_envs/{env_id}").reset(seed=seed)
        assert_close(f"observations of env {i}", torch.as_tensor(single_obs), obs[i], f"{env_id} seed list", **EXACT)
    as_list, _ = make_vec(env_id).reset(seed=[SEED + i for i in range(N)])
    as_int, _ = make_vec(env_id).reset(seed=SEED)
    assert_close("observations", as_int, as_list, f"{env_id} seed={SEED} vs seed=[{SEED}, ...]", **EXACT)


def test_unseeded_reset_after_a_seeded_one_is_deterministic_and_new(env_id):
    envs = [make_vec(env_id) for _ in range(2)]
    seeded = [env.reset(seed=SEED)[0].clone() for env in envs]
    unseeded = [env.reset()[0].clone() for env in envs]
    assert_close("second reset observations", unseeded[0], unseeded[1], f"{env_id} reset(seed) then reset()", **EXACT)
    for i in range(N):
        assert not torch.equal(seeded[0][i], unseeded[0][i]), f"{env_id}: env {i}'s reset() repeated its seeded reset"


def test_seeded_masked_reset_reseeds_only_the_masked_sub_envs(env_id):
    env = make_vec(env_id)
    env.reset(seed=1)
    before = env.get_state()
    mask = torch.tensor([False, True, False])
    obs, _ = env.reset(seed=7, options={"reset_mask": mask})
    reference = make_vec(env_id).reset(seed=7)[0]
    assert_close("observations of masked env 1", reference[1], obs[1], f"{env_id} reset(seed=7, mask)", **EXACT)
    assert_states_equal(before, env.get_state(), f"{env_id} unmasked envs after reset(seed=7, mask)", rows=[0, 2])
    # Later unseeded resets go on from each sub-env's own seed: 1 + i for the unmasked, 7 + 1 for env 1.
    obs, _ = env.reset()
    expected, _ = second_reset_observations(env_id, seed=1)
    assert_close("observations of unmasked envs 0, 2", expected[[0, 2]], obs[[0, 2]], f"{env_id} reset()", **EXACT)
    expected, _ = second_reset_observations(env_id, seed=7)
    assert_close("observations of env 1", expected[1], obs[1], f"{env_id} reset()", **EXACT)


def test_same_seed_same_reset_on_every_cpu_backend(env_id, backend):
    reference = make_vec(env_id)
    env = make_vec(env_id, backend=backend)
    obs = env.reset(seed=SEED)[0]
    # States come from the shared counter-based RNG: bit-identical; observations within ulps.
    assert_close(
        "reset observations", reference.reset(seed=SEED)[0], obs, f"{env_id} torch vs {backend}", **tolerance(backend)
    )
    assert_states_equal(reference.get_state(), env.get_state(), f"{env_id} torch vs {backend} reset states")


# -- explicit states ------------------------------------------------------------------------------


@pytest.mark.parametrize("selector", ["list", "tensor", "mask"])
def test_set_state_changes_only_the_chosen_sub_envs(env_id, selector):
    n = 4
    env = make_vec(env_id, num_envs=n)
    obs_before = env.reset(seed=1)[0].clone()
    state_before = env.get_state()
    source = make_vec(env_id, num_envs=n)
    source_obs = source.reset(seed=99)[0]
    source_state = source.get_state()
    chosen = [0, 2]
    env_ids = {"list": chosen, "tensor": torch.tensor(chosen), "mask": torch.tensor([i in chosen for i in range(n)])}[
        selector
    ]
    returned = env.set_state({name: values[chosen] for name, values in source_state.items()}, env_ids=env_ids)
    context = f"{env_id} set_state(env_ids={selector})"
    assert_states_equal(source_state, env.get_state(), context, rows=chosen)
    assert_states_equal(state_before, env.get_state(), context, rows=[1, 3])
    assert_close("observations of chosen envs", source_obs[chosen], returned[chosen], context, **EXACT)
    assert_close("observations of other envs", obs_before[[1, 3]], returned[[1, 3]], context, **EXACT)


def test_get_state_round_trip(env_id):
    env = make_vec(env_id, max_episode_steps=None)
    env.reset(seed=SEED)
    generator = torch.Generator().manual_seed(8)
    env.step(step_actions(env, generator))
    saved_obs = env.step(step_actions(env, generator))[0].clone()
    saved = env.get_state()
    for _ in range(3):
        env.step(step_actions(env, generator))
    assert any(not torch.equal(saved[k], v) for k, v in env.get_state().items()), "stepping changed no state"
    obs = env.set_state(saved)
    assert_states_equal(saved, env.get_state(), f"{env_id} get_state -> set_state")
    assert_close("observations", saved_obs, obs, f"{env_id} get_state -> set_state", **EXACT)
    assert all(v.shape == (N,) and v.dtype == torch.float32 for v in saved.values()), (
        f"get_state: {[(k, tuple(v.shape), v.dtype) for k, v in saved.items()]}"
    )
    assert list(saved) == list(env.state_fields)


def test_a_state_set_into_two_envs_steps_identically(env_id):
    envs = [make_vec(env_id, mode=AutoresetMode.DISABLED) for _ in range(2)]
    envs[0].reset(seed=1)
    envs[1].reset(seed=2)
    source = make_vec(env_id)
    source.reset(seed=3)
    state = source.get_state()
    elapsed = torch.tensor([0, 1, MAX_STEPS - 2])
    for env in envs:
        env.set_state(state, elapsed_steps=elapsed)
    generator = torch.Generator().manual_seed(9)
    for t in range(MAX_STEPS):
        actions = step_actions(envs[0], generator)
        a, b = (snapshot(env.step(actions)) for env in envs)
        for name, x, y in zip(("observations", "rewards", "terminated", "truncated"), a, b):
            assert_close(name, x, y, f"{env_id} step {t} from a state set into envs seeded 1 and 2", **EXACT)
    assert a[3][2], f"{env_id}: env 2, set with elapsed_steps={MAX_STEPS - 2}, did not truncate"


def test_set_state_replaces_a_pending_autoreset(env_id):
    """In NEXT_STEP mode, set_state on a sub-env whose episode just ended starts the new episode
    there: its next step is a real step from that state, not a reset."""
    generator = torch.Generator().manual_seed(10)
    env = make_vec(env_id)
    env.reset(seed=SEED)
    start = env.get_state()
    env.set_state(start, elapsed_steps=MAX_STEPS - 1)
    env.step(step_actions(env, generator))  # every sub-env truncates
    env.set_state({name: values[[0]] for name, values in start.items()}, env_ids=[0])
    twin = make_vec(env_id)
    twin.set_state(start)
    actions = step_actions(env, generator)
    obs, rewards, _, _, _ = env.step(actions)
    expected, expected_rewards, _, _, _ = twin.step(actions)
    assert_close("observations of env 0", expected[0], obs[0], f"{env_id} step after set_state", **EXACT)
    assert_close("reward of env 0", expected_rewards[0], rewards[0], f"{env_id} step after set_state", **EXACT)
    assert rewards[1].item() == 0.0, f"{env_id}: env 1 should autoreset (reward 0), got {rewards[1].item()}"


# -- the single env ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pygame", ["installed", "missing"])
def test_single_env_passes_gymnasium_check_env(env_id, pygame, monkeypatch):
    """Render check included: with pygame the env declares and draws rgb_array frames; without it
    (no [render] extra) it declares no render mode and refuses one, naming the extra."""
    from gymnasium.utils.env_checker import check_env

    if pygame == "missing":
        monkeypatch.setitem(sys.modules, "pygame", None)  # as if not installed: importing it fails
    env = gymnasium.make(f"gpu_marl_envs/{env_id}")
    assert isinstance(env.unwrapped, GpuEnv), f"gymnasium.make gave {type(env.unwrapped).__name__}"
    check_env(env.unwrapped)
    assert env.unwrapped.metadata["render_modes"] == (["rgb_array"] if pygame == "installed" else [])
    if pygame == "missing":
        with pytest.raises(ValueError, match=re.escape("needs pygame: pip install gpu_marl_envs[render]")):
            gymnasium.make(f"gpu_marl_envs/{env_id}", render_mode="rgb_array")


def test_short_episode_via_make_with_time_limit(env_id):
    limit = 5
    env = gymnasium.make(f"gpu_marl_envs/{env_id}", max_episode_steps=limit)
    wrappers = []
    layer = env
    while isinstance(layer, gymnasium.Wrapper):
        wrappers.append(type(layer).__name__)
        layer = layer.env
    assert "TimeLimit" in wrappers, f"gymnasium.make(max_episode_steps={limit}) gave wrappers {wrappers}"
    obs, info = env.reset(seed=SEED)
    assert env.observation_space.contains(obs) and isinstance(info, dict)
    env.action_space.seed(SEED)
    for t in range(1, limit + 1):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs), f"{env_id} step {t}: {obs} not in {env.observation_space}"
        assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
        assert not terminated, f"{env_id}: terminated at step {t} from a reset state"
        assert truncated == (t == limit), f"{env_id}: truncated={truncated} at step {t} of a {limit}-step limit"
    obs, _ = env.reset()
    assert env.observation_space.contains(obs)
    assert not env.step(env.action_space.sample())[3], f"{env_id}: the TimeLimit did not restart after reset()"


# -- numpy I/O ------------------------------------------------------------------------------------


def test_array_conversion_gives_numpy_io(env_id):
    from gymnasium.wrappers.vector import ArrayConversion

    wrapped = ArrayConversion(make_vec(env_id), env_xp=torch, target_xp=np)
    twin = make_vec(env_id)
    obs, _ = wrapped.reset(seed=SEED)
    assert (
        isinstance(obs, np.ndarray)
        and obs.dtype == np.float32
        and obs.shape == (N, *twin.single_observation_space.shape)
    )
    assert_close(
        "reset observations", twin.reset(seed=SEED)[0], torch.as_tensor(obs), f"{env_id} ArrayConversion", **EXACT
    )
    wrapped.action_space.seed(0)
    for t in range(MAX_STEPS + 1):
        actions = wrapped.action_space.sample()
        assert isinstance(actions, np.ndarray)
        out = wrapped.step(actions)
        expected = twin.step(torch.as_tensor(actions))
        for name, value, dtype, ref in zip(
            ("observations", "rewards", "terminated", "truncated"),
            out[:4],
            (np.float32, np.float32, np.bool_, np.bool_),
            expected[:4],
        ):
            assert isinstance(value, np.ndarray) and value.dtype == dtype, (
                f"step {t}: {name} is {type(value).__name__} {getattr(value, 'dtype', '')}, expected numpy {dtype}"
            )
            assert_close(name, ref, torch.as_tensor(value), f"{env_id} ArrayConversion step {t}", **EXACT)
    obs, _ = wrapped.reset(options={"reset_mask": np.array([True, False, True])})
    assert isinstance(obs, np.ndarray) and obs.shape == (N, *twin.single_observation_space.shape)
