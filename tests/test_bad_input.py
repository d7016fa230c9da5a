"""Bad input: every error is raised before anything changes, with a message that names the fix.

"Nothing changes" is checked against a twin: an env and its twin are brought to the same state
(same seed, same steps); after the bad call on the env, its observation buffer must hold what it
held before, its state must equal the twin's, and the following identical steps (through a
truncation and an autoreset of every sub-env, which read elapsed steps, pending autoresets, seeds
and reset counters) must give identical results.
"""

from __future__ import annotations

import dataclasses
import re

import gymnasium
import numpy as np
import pytest
import torch
from conftest import KERNEL_BACKENDS_HERE
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from harness import assert_close, random_actions, snapshot

from gpu_marl_envs import BackendUnavailableError, GpuVectorEnv
from gpu_marl_envs.envs.cartpole import CartPoleParams
from gpu_marl_envs.registration import env_spec

N = 3
MAX_STEPS = 4
SEED = 5
EXACT = {"rtol": 0.0, "atol": 0.0}


def make(env_id, num_envs=N, **kwargs) -> GpuVectorEnv:
    kwargs = {"device": "cpu", "backend": "torch", "max_episode_steps": MAX_STEPS, **kwargs}
    return GpuVectorEnv(env_id, num_envs, **kwargs)


class Twins:
    """An env and its twin in the same state: seeded, then one identical step."""

    def __init__(self, env_id, **kwargs):
        self.env_id = env_id
        self.env = make(env_id, **kwargs)
        self.twin = make(env_id, **kwargs)
        self.generator = torch.Generator().manual_seed(0)
        for env in (self.env, self.twin):
            env.reset(seed=SEED)
        self._step_both()

    @property
    def space(self) -> spaces.Space:
        return self.env.single_action_space

    def good_actions(self) -> torch.Tensor:
        return random_actions(self.space, N, self.generator)

    def _step_both(self):
        actions = self.good_actions()
        self.obs = self.env.step(actions)[0]  # the env's own observation buffer
        self.twin.step(actions)
        self.obs_before = self.obs.clone()

    def assert_unchanged(self, context: str) -> None:
        context = f"{self.env_id}: after {context}"
        assert_close("observation buffer", self.obs_before, self.obs, context, **EXACT)
        state, twin_state = self.env.get_state(), self.twin.get_state()
        for name in twin_state:
            assert_close(f"state field {name!r}", twin_state[name], state[name], context, **EXACT)
        for t in range(MAX_STEPS + 1):
            actions = self.good_actions()
            expected = snapshot(self.twin.step(actions))
            got = self.env.step(actions)
            for name, e, a in zip(("observations", "rewards", "terminated", "truncated"), expected, got):
                assert_close(name, e, a, f"{context}, following step {t} (vs the twin)", **EXACT)
        self._step_both()  # in step again, for the next bad call


@pytest.fixture
def twins(env_id) -> Twins:
    return Twins(env_id)


# -- actions --------------------------------------------------------------------------------------

ACTION_CASES = [
    "numpy_dtype",
    "list",
    "too_few_rows",
    "extra_dimension",
    "dtype",
    "device_meta",
    "bad_value_env1",
    "bad_value_env2",
    "bad_value_env2_inf",
]


def bad_actions(case: str, good: torch.Tensor, space: spaces.Space):
    """(bad actions, exception type, the phrase of the message that names the fix)."""
    discrete = isinstance(space, spaces.Discrete)
    expected_shape = re.escape(f"must have shape {(N, *space.shape)}")
    as_tensor = r"must be a torch\.Tensor.*torch\.as_tensor\(actions.*ArrayConversion"
    if case == "numpy_dtype":  # a numpy array is copied to the device, its dtype checked as a tensor's
        wrong = good.numpy().astype(np.int32 if discrete else np.float64)
        return wrong, TypeError, re.escape(f"use actions.{'long' if discrete else 'float'}()")
    if case == "list":
        return good.tolist(), TypeError, as_tensor
    if case == "too_few_rows":
        return good[:-1], ValueError, expected_shape
    if case == "extra_dimension":
        return good[None], ValueError, expected_shape
    if case == "dtype":
        if discrete:
            return good.to(torch.int32), TypeError, re.escape("use actions.long()")
        return good.to(torch.float64), TypeError, re.escape("use actions.float()")
    if case == "device_meta":
        return torch.empty_like(good, device="meta"), ValueError, re.escape("use actions.to('cpu')")
    env = 1 if case == "bad_value_env1" else 2
    bad = good.clone()
    if discrete:
        n = int(space.n)
        bad[env] = -1 if env == 1 else n if case == "bad_value_env2" else 2**40
        return bad, ValueError, re.escape(f"actions must lie in [0, {n - 1}]; env {env} got {int(bad[env])}")
    # NaN, past the bounds (Pendulum's torque 5.0 of at most 2), or infinite: each refused, naming the bounds.
    low, high = float(space.low[0]), float(space.high[0])
    bad[env] = {
        "bad_value_env1": float("nan"),
        "bad_value_env2": high + abs(high) + 1,
        "bad_value_env2_inf": -float("inf"),
    }[case]
    return (
        bad,
        ValueError,
        re.escape(
            f"actions must be finite and lie in the action space's bounds [{low}, {high}]; "
            f"env {env}, element 0 got {bad[env, 0].item()} (no env was stepped)"
        ),
    )


@pytest.mark.parametrize("case", ACTION_CASES)
def test_bad_actions_raise_and_change_nothing(twins, case):
    actions, error, phrase = bad_actions(case, twins.good_actions(), twins.space)
    with pytest.raises(error, match=phrase):
        twins.env.step(actions)
    twins.assert_unchanged(f"step() with bad actions ({case})")


@pytest.mark.parametrize("backend", ["torch", *KERNEL_BACKENDS_HERE])
def test_unvalidated_actions_act_clamped_or_as_zero(env_id, backend):
    """validate_actions=False: out-of-range discrete actions act as clamped into range, NaN
    continuous ones as 0, in the kernels as in the torch reference."""
    env = make(env_id, backend=backend, validate_actions=False)
    twin = make(env_id, backend=backend, validate_actions=False)
    for e in (env, twin):
        e.reset(seed=SEED)
    space = env.single_action_space
    generator = torch.Generator().manual_seed(1)
    good = random_actions(space, N, generator)
    bad = good.clone()
    if isinstance(space, spaces.Discrete):
        n = int(space.n)
        bad[0], bad[1], bad[2] = -1, n, -(2**40)
        sane = torch.tensor([0, n - 1, 0])
    else:
        bad[0] = float("nan")
        bad[2, 0] = float("nan")
        sane = torch.where(torch.isnan(bad), torch.zeros_like(bad), bad)
    expected = snapshot(twin.step(sane))
    got = env.step(bad)
    context = f"{env_id} {backend}: actions {bad.tolist()} vs {sane.tolist()}"
    for name, e, a in zip(("observations", "rewards", "terminated", "truncated"), expected, got):
        assert_close(name, e, a, context, **EXACT)


def test_unvalidated_actions_still_need_the_right_type_shape_and_dtype(env_id):
    env = make(env_id, validate_actions=False)
    env.reset(seed=SEED)
    good = random_actions(env.single_action_space, N, torch.Generator().manual_seed(2))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        env.step(good.tolist())
    with pytest.raises(ValueError, match="must have shape"):
        env.step(good[:-1])
    with pytest.raises(TypeError, match=r"use actions\.(long|float)\(\)"):
        env.step(good.to(torch.float64 if good.dtype == torch.int64 else torch.int64))


@pytest.mark.parametrize("kind", ["out_of_range", "not_finite"])
def test_single_env_rejects_bad_actions_and_changes_nothing(env_id, kind):
    env = gymnasium.make(f"gpu_marl_envs/{env_id}").unwrapped
    env.reset(seed=SEED)
    before = env.get_state()
    space = env.action_space
    if isinstance(space, spaces.Discrete):
        bad, phrase = int(space.n), rf"action must be an int in \[0, {int(space.n) - 1}\]"
    else:
        value = 2 * space.high + 1 if kind == "out_of_range" else np.full(space.shape, np.inf)  # Pendulum: 5.0
        bad, phrase = value.astype(np.float32), "must be finite and lie in the action space's bounds"
    with pytest.raises(ValueError, match=phrase):
        env.step(bad)
    assert env.get_state() == before, f"{env_id}: single env state {env.get_state()} changed from {before}"


def test_step_before_reset_raises(env_id):
    env = make(env_id)
    actions = random_actions(env.single_action_space, N, torch.Generator().manual_seed(3))
    with pytest.raises(RuntimeError, match=re.escape("call reset() before step()")):
        env.step(actions)
    with pytest.raises(ValueError, match="seed must"):
        env.reset(seed=-1)
    with pytest.raises(RuntimeError, match=re.escape("call reset() before step()")):
        env.step(actions)  # a failed reset readies nothing
    env.reset(seed=SEED)
    env.step(actions)


def test_step_after_a_first_reset_of_only_some_sub_envs_raises(env_id):
    """Sub-envs 1 and 2 were never reset (nor given a state): stepping them would step all-zero
    placeholder states. Gymnasium's SyncVectorEnv fails there too (its sub-envs' OrderEnforcing)."""
    env = make(env_id)
    env.reset(seed=SEED, options={"reset_mask": torch.tensor([True, False, False])})
    actions = random_actions(env.single_action_space, N, torch.Generator().manual_seed(4))
    with pytest.raises(RuntimeError, match=r"reset\(\)"):
        env.step(actions)


# -- construction ---------------------------------------------------------------------------------


@pytest.mark.parametrize("num_envs", [0, -1, True, 2.5, "3"], ids=repr)
def test_bad_num_envs(env_id, num_envs):
    with pytest.raises(ValueError, match=r"num_envs must be an int >= 1"):
        GpuVectorEnv(env_id, num_envs, device="cpu")
    with pytest.raises(ValueError, match=r"num_envs must be an int >= 1"):
        gymnasium.make_vec(f"gpu_marl_envs/{env_id}", num_envs=num_envs, device="cpu")


def test_num_envs_takes_numpy_integers(env_id):
    envs = gymnasium.make_vec(f"gpu_marl_envs/{env_id}", num_envs=np.int64(2), device="cpu")
    assert envs.num_envs == 2 and type(envs.num_envs) is int and envs.reset(seed=0)[0].shape[0] == 2


def test_unknown_backend(env_id):
    with pytest.raises(ValueError, match=r"unknown backend 'jax'; choose one of 'pycuda', 'numba', 'torch' or None"):
        make(env_id, backend="jax")


def test_unavailable_backend_says_what_to_change(env_id):
    with pytest.raises(
        BackendUnavailableError, match=r"backend 'pycuda' is not available on cpu: .*needs a CUDA device"
    ):
        make(env_id, backend="pycuda")


def test_cuda_device_without_a_gpu(env_id, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a GPU machine
    with pytest.raises(RuntimeError, match=re.escape("torch sees no CUDA GPU; use device='cpu'")):
        make(env_id, device="cuda")


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_unsupported_device(env_id, device):
    with pytest.raises(ValueError, match=re.escape("device must be 'cpu' or 'cuda[:N]'")):
        make(env_id, device=device)


def test_cuda_graph_on_the_cpu(env_id):
    with pytest.raises(ValueError, match="cuda_graph=True needs a CUDA device"):
        make(env_id, cuda_graph=True)


def test_unknown_env():
    with pytest.raises(ValueError, match=r"unknown env 'Nope-v0'; available: .*CartPole-v1"):
        GpuVectorEnv("Nope-v0", 2, device="cpu")


@pytest.mark.parametrize("mode", ["bogus", 3, None], ids=repr)
def test_bad_autoreset_mode(env_id, mode):
    with pytest.raises(ValueError, match=r"unknown autoreset_mode .*; use one of AutoresetMode\.NEXT_STEP"):
        make(env_id, autoreset_mode=mode)


def test_autoreset_mode_by_value_is_accepted(env_id):
    assert make(env_id, autoreset_mode="SameStep").autoreset_mode == AutoresetMode.SAME_STEP


def test_bad_params_object(env_id):
    params_type = env_spec(env_id).definition.params_type.__name__
    with pytest.raises(TypeError, match=f"params must be a {params_type}, got object"):
        make(env_id, params=object())


@pytest.mark.parametrize("max_episode_steps", [0, -5])
def test_bad_max_episode_steps(env_id, max_episode_steps):
    with pytest.raises(ValueError, match=r"max_episode_steps must be >= 1"):
        make(env_id, max_episode_steps=max_episode_steps)


@pytest.mark.parametrize(
    "field, value", [("masscart", -1.0), ("length", 0.0), ("tau", float("nan")), ("reset_bound", -0.1)]
)
def test_bad_cartpole_params(field, value):
    # CartPole's own rules; each env's params dataclass checks its fields the same way.
    with pytest.raises(ValueError, match=rf"CartPoleParams\.{field} must be"):
        CartPoleParams(**{field: value})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e39], ids=repr)
def test_params_refuse_numbers_the_kernels_cannot_hold(env_id, value):
    """Every float field of every env's params, as the kernels read it (float32): a NaN gravity made
    NaN observations and an episode that never ends."""
    params_type = env_spec(env_id).definition.params_type
    for field in dataclasses.fields(params_type):
        if field.type == "float":
            with pytest.raises(ValueError, match=rf"{params_type.__name__}\.{field.name} must be"):
                params_type(**{field.name: value})
    with pytest.raises(ValueError, match=rf"{params_type.__name__}\.max_episode_steps must fit in int32"):
        params_type(max_episode_steps=2**40)


def test_render_mode_human_is_refused(env_id):
    phrase = re.escape("use render_mode=None")
    with pytest.raises(ValueError, match=phrase):
        make(env_id, render_mode="human")
    with pytest.raises(ValueError, match=phrase):
        gymnasium.make_vec(f"gpu_marl_envs/{env_id}", num_envs=2, device="cpu", render_mode="human")
    # gymnasium.make itself serves "human" for an env that draws rgb_array frames: it wraps it in its
    # HumanRendering window (opened only at render time).
    env = gymnasium.make(f"gpu_marl_envs/{env_id}", render_mode="human")
    assert isinstance(env, gymnasium.wrappers.HumanRendering) and env.unwrapped.render_mode == "rgb_array"


# -- reset ----------------------------------------------------------------------------------------

RESET_CASES = {
    "unknown_option": (
        dict(options={"bogus": 1}),
        ValueError,
        re.escape("unknown reset options ['bogus']; supported: ['reset_mask']"),
    ),
    "options_not_a_dict": (dict(options=["reset_mask"]), TypeError, "options must be a dict or None"),
    "mask_too_long": (
        dict(options={"reset_mask": torch.ones(N + 1, dtype=torch.bool)}),
        ValueError,
        re.escape(f"reset_mask must be a bool tensor of shape ({N},)"),
    ),
    "mask_2d": (
        dict(options={"reset_mask": torch.ones(1, N, dtype=torch.bool)}),
        ValueError,
        re.escape(f"reset_mask must be a bool tensor of shape ({N},)"),
    ),
    "mask_int": (
        dict(options={"reset_mask": torch.ones(N, dtype=torch.int64)}),
        ValueError,
        re.escape(f"reset_mask must be a bool tensor of shape ({N},)"),
    ),
    "mask_float_numpy": (
        dict(options={"reset_mask": np.ones(N)}),
        ValueError,
        re.escape(f"reset_mask must be a bool tensor of shape ({N},)"),
    ),
    # Gymnasium's SyncVectorEnv refuses a mask that resets nothing.
    "mask_all_false": (dict(options={"reset_mask": torch.zeros(N, dtype=torch.bool)}), ValueError, "reset_mask"),
    "seed_negative": (dict(seed=-1), ValueError, re.escape("seed must lie in [0, 2**63 - num_envs]")),
    "seed_too_large": (dict(seed=2**63 - 2), ValueError, re.escape("seed must lie in [0, 2**63 - num_envs]")),
    "seed_float": (dict(seed=2.5), ValueError, f"seed must be None, an int or a sequence of {N} ints"),
    "seed_bool": (dict(seed=True), ValueError, f"seed must be None, an int or a sequence of {N} ints"),
    "seed_str": (dict(seed="abc"), ValueError, f"seed must be None, an int or a sequence of {N} ints"),
    "seed_list_too_short": (dict(seed=[1, 2]), ValueError, f"seed must be None, an int or a sequence of {N} ints"),
    "seed_list_of_floats": (dict(seed=[1.0, 2.0, 3.0]), ValueError, f"a sequence of {N} ints"),
    "seed_list_negative": (dict(seed=[1, -2, 3]), ValueError, re.escape("seeds must lie in [0, 2**63 - 1]")),
    "seed_bad_with_mask": (
        dict(seed=-1, options={"reset_mask": torch.tensor([True, False, True])}),
        ValueError,
        "seed must lie in",
    ),
}


@pytest.mark.parametrize("case", list(RESET_CASES))
def test_bad_reset_raises_and_changes_nothing(twins, case):
    kwargs, error, phrase = RESET_CASES[case]
    with pytest.raises(error, match=phrase):
        twins.env.reset(**kwargs)
    twins.assert_unchanged(f"reset() with {case}")


# -- set_state ------------------------------------------------------------------------------------


def bad_set_state(case: str, state: dict[str, torch.Tensor], fields):
    """(kwargs for set_state, exception type, the phrase naming the fix) for a good ``state``."""
    first = fields[0]
    needs = re.escape(f"state needs exactly the fields {list(fields)}")
    cases = {
        "missing_field": (
            dict(state={k: v for k, v in state.items() if k != first}),
            ValueError,
            needs + ".*" + re.escape(f"missing [{first!r}]"),
        ),
        "unknown_field": (
            dict(state={**state, "bogus": state[first]}),
            ValueError,
            needs + ".*" + re.escape("unknown ['bogus']"),
        ),
        "wrong_shape": (
            dict(state={**state, first: torch.zeros(N + 1)}),
            ValueError,
            re.escape(f"state[{first!r}] has shape ({N + 1},); expected ({N},)"),
        ),
        "wrong_shape_for_env_ids": (
            dict(state=state, env_ids=[0, 2]),
            ValueError,
            re.escape(f"state[{first!r}] has shape ({N},); expected (2,)"),
        ),
        "nan": (
            dict(state={**state, first: torch.tensor([0.0, float("nan"), 0.0])}),
            ValueError,
            "state values must be finite",
        ),
        "inf": (
            dict(state={**state, first: torch.tensor([0.0, 0.0, float("-inf")])}),
            ValueError,
            "state values must be finite",
        ),
        "env_ids_out_of_range": (
            dict(state=state, env_ids=[0, 1, N]),
            ValueError,
            re.escape(f"env_ids must lie in [0, {N - 1}]"),
        ),
        "env_ids_negative": (
            dict(state=state, env_ids=[-1, 0, 1]),
            ValueError,
            re.escape(f"env_ids must lie in [0, {N - 1}]"),
        ),
        "env_ids_repeated": (dict(state=state, env_ids=[0, 0, 1]), ValueError, "env_ids must not repeat"),
        "env_ids_float": (
            dict(state=state, env_ids=[0.0, 1.0, 2.0]),
            ValueError,
            "env_ids must be a 1-D sequence of ints or a bool mask",
        ),
        "env_ids_2d": (
            dict(state=state, env_ids=[[0, 1, 2]]),
            ValueError,
            "env_ids must be a 1-D sequence of ints or a bool mask",
        ),
        "env_ids_mask_wrong_shape": (
            dict(state=state, env_ids=[True, False]),
            ValueError,
            re.escape(f"a bool env_ids mask must have shape ({N},)"),
        ),
        "elapsed_negative": (
            dict(state=state, elapsed_steps=-1),
            ValueError,
            re.escape(f"elapsed_steps must lie in [0, {MAX_STEPS - 1}]"),
        ),
        "elapsed_at_limit": (
            dict(state=state, elapsed_steps=MAX_STEPS),
            ValueError,
            re.escape(f"elapsed_steps must lie in [0, {MAX_STEPS - 1}]"),
        ),
        "elapsed_wrong_shape": (dict(state=state, elapsed_steps=[1, 2]), ValueError, "elapsed_steps"),
        "elapsed_not_integral": (dict(state=state, elapsed_steps=1.5), ValueError, "elapsed_steps"),
        # Values the buffers' dtypes cannot hold: 2**40 wrapped to 0 in the int32 elapsed steps.
        "elapsed_beyond_int32": (
            dict(state=state, elapsed_steps=2**40),
            ValueError,
            re.escape(f"elapsed_steps must lie in [0, {MAX_STEPS - 1}]"),
        ),
        "elapsed_beyond_int64": (dict(state=state, elapsed_steps=2**70), ValueError, "elapsed_steps must be integers"),
        "beyond_float32": (
            dict(state={**state, first: torch.tensor([0.0, 1e39, 0.0], dtype=torch.float64)}),
            ValueError,
            "state values must be finite",
        ),
    }
    return cases[case]


SET_STATE_CASES = [
    "missing_field",
    "unknown_field",
    "wrong_shape",
    "wrong_shape_for_env_ids",
    "nan",
    "inf",
    "env_ids_out_of_range",
    "env_ids_negative",
    "env_ids_repeated",
    "env_ids_float",
    "env_ids_2d",
    "env_ids_mask_wrong_shape",
    "elapsed_negative",
    "elapsed_at_limit",
    "elapsed_wrong_shape",
    "elapsed_not_integral",
    "elapsed_beyond_int32",
    "elapsed_beyond_int64",
    "beyond_float32",
]


@pytest.mark.parametrize("case", SET_STATE_CASES)
def test_bad_set_state_raises_and_changes_nothing(twins, case):
    source = make(twins.env_id)
    source.reset(seed=SEED + 100)
    kwargs, error, phrase = bad_set_state(case, source.get_state(), twins.env.state_fields)
    with pytest.raises(error, match=phrase):
        twins.env.set_state(**kwargs)
    twins.assert_unchanged(f"set_state() with {case}")


CLOSED = "env is closed: close() freed its state; make a new env to go on"


def test_an_env_used_after_close_says_it_is_closed():
    """Every API (vector, single, batched games, PettingZoo's game), every call that reads the state."""
    import pettingzoo

    import gpu_marl_envs

    vector = make("CartPole-v1")
    vector.reset(seed=SEED)
    vector.close()
    actions = torch.zeros(N, dtype=torch.int64)
    for call in (lambda: vector.step(actions), vector.reset, vector.get_state, lambda: vector.set_state({})):
        with pytest.raises(RuntimeError, match=f"this CartPole-v1 {re.escape(CLOSED)}"):
            call()
    single = gymnasium.make("gpu_marl_envs/CartPole-v1")
    single.reset(seed=SEED)
    single.close()
    with pytest.raises(RuntimeError, match=re.escape(CLOSED)):
        single.step(0)
    games = gpu_marl_envs.make_parallel("gpu_marl_envs/TagGridworld-v0", 2, device="cpu")
    game = pettingzoo.make("parallel", "gpu_marl_envs/TagGridworld-v0")
    games.reset(seed=SEED)
    game.reset(seed=SEED)
    games.close()
    game.close()
    for call in (games.reset, lambda: games.step({}), game.reset):
        with pytest.raises(RuntimeError, match=f"this TagGridworld-v0 {re.escape(CLOSED)}"):
            call()
