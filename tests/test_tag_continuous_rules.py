"""TagContinuous's torch reference against the rules of ``../shared/specs/tag.md``, on hand-built
states small enough to check by hand. Agents standing still (speed 0, acceleration 0, "no change"
actions) stay exactly where they are, so tags and rewards follow from the crafted positions alone."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from gpu_marl_envs import rng
from gpu_marl_envs.envs import tag_continuous_reference as tc
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams, TagContinuousState
from gpu_marl_envs.envs.tag_continuous_kernel_layout import kernel_constants
from gpu_marl_envs.envs.tag_continuous_params import agent_type, level_deltas

F32 = np.float32
TWO_PI = F32(2 * math.pi)
DIMS = ("env", "agent", "feature")


def make_state(x, y, *, direction=0.0, speed=0.0, acceleration=0.0, in_game=True, t=0) -> TagContinuousState:
    """A state from per-agent lists (one env) or per-env lists of them; scalars broadcast."""
    x = torch.tensor(x, dtype=torch.float32)
    x = x[None] if x.dim() == 1 else x

    def field(value, dtype):
        return torch.as_tensor(value, dtype=dtype).expand_as(x).clone()

    return TagContinuousState(
        x=x,
        y=field(y, torch.float32),
        direction=field(direction, torch.float32),
        speed=field(speed, torch.float32),
        acceleration=field(acceleration, torch.float32),
        in_game=field(in_game, torch.bool),
        t=torch.as_tensor(t, dtype=torch.int32).expand(x.shape[0]).clone(),
    )


def no_op(state: TagContinuousState) -> torch.Tensor:
    return torch.zeros((*state.x.shape, 2), dtype=torch.int64)


def check(name, actual, expected, rtol=0.0, atol=0.0):
    """Values equal (or close, given a tolerance); the message names the first env/agent/feature that differs."""
    expected = torch.as_tensor(np.asarray(expected), dtype=actual.dtype)
    expected = expected.expand_as(actual) if expected.dim() == 0 else expected
    assert actual.shape == expected.shape, (
        f"TagContinuous {name}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    )
    if actual.is_floating_point():
        bad = ~torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol)
    else:
        bad = actual != expected
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        where = ", ".join(f"{d} {i}" for d, i in zip(DIMS, index))
        raise AssertionError(
            f"TagContinuous {name} differs at {where}: expected {expected[index].item()!r}, "
            f"got {actual[index].item()!r} ({int(bad.sum())} elements differ)"
        )


# -- tagging ---------------------------------------------------------------------------------------


def test_one_tagger_tagging_two_runners_is_paid_twice():
    # Tagging radius 0.02 * 20 = 0.4. Tagger 0 has runners 2 and 3 within it; runner 4 is far;
    # runner 5 is out of the game already (no step reward, no tag).
    p = TagContinuousParams(
        num_taggers=2,
        num_runners=4,
        num_other_agents_observed=3,
        step_penalty_for_tagger=-0.5,
        step_reward_for_runner=0.25,
    )
    state = make_state(
        [5.0, 15.0, 5.125, 5.0, 10.0, 5.0],
        [5.0, 15.0, 5.0, 5.25, 10.0, 5.0],
        in_game=[True, True, True, True, True, False],
    )
    before = make_state(state.x.tolist(), state.y.tolist(), in_game=state.in_game.tolist())
    nxt, rewards, terminated, truncated = tc.step(p, state, no_op(state))
    check("rewards", rewards, [[-0.5 + 20.0, -0.5, 0.25 - 10.0, 0.25 - 10.0, 0.25, 0.0]])
    check("in_game", nxt.in_game, [[True, True, False, False, True, False]])
    check("runners_in_game", tc.runners_in_game(p, nxt), [1])
    check("terminated", terminated, [False])
    check("truncated", truncated, [False])
    check("t", nxt.t, [1])
    for name in ("x", "y", "in_game", "t"):  # step is pure: the input state is untouched
        check(f"input state {name}", getattr(state, name), getattr(before, name))


def test_two_taggers_each_tag_a_runner_in_the_same_step():
    p = TagContinuousParams(num_taggers=2, num_runners=3, num_other_agents_observed=3)
    state = make_state([2.0, 12.0, 2.25, 12.0, 7.0], [2.0, 12.0, 2.0, 11.75, 7.0])
    nxt, rewards, terminated, _ = tc.step(p, state, no_op(state))
    check("rewards", rewards, [[10.0, 10.0, -10.0, -10.0, 0.0]])
    check("in_game", nxt.in_game, [[True, True, False, False, True]])
    check("terminated", terminated, [False])


def test_equidistant_runner_goes_to_the_lowest_tagger_id_and_nearest_wins():
    # Env 0: taggers 1 and 2 are both 0.25 from runner 3 (tagger 0 far): tagger 1 gets it.
    # Env 1: tagger 1 at 0.125 beats tagger 0 at 0.25 despite its higher id.
    p = TagContinuousParams(num_taggers=3, num_runners=1, num_other_agents_observed=3)
    state = make_state(
        [[1.0, 4.75, 5.25, 5.0], [4.75, 5.125, 15.0, 5.0]], [[1.0, 5.0, 5.0, 5.0], [5.0, 5.0, 15.0, 5.0]]
    )
    _, rewards, _, _ = tc.step(p, state, no_op(state))
    check("rewards", rewards, [[0.0, 10.0, 0.0, -10.0], [0.0, 10.0, 0.0, -10.0]])


def test_tag_needs_distance_strictly_below_the_radius():
    # Radius 0.0625 * 4 = 0.25 exactly (binary fractions): at 0.25 no tag, just inside it a tag.
    p = TagContinuousParams(
        num_taggers=1, num_runners=2, grid_length=4.0, tagging_distance=0.0625, num_other_agents_observed=2
    )
    state = make_state([1.0, 1.25, 3.0], [1.0, 1.0, 2.0])
    state_inside = make_state([1.0, 1.25, 3.0], [1.0, 1.0, 2.0])
    state_inside.x[0, 1] = float(np.nextafter(F32(1.25), F32(0)))
    for s, expected in ((state, [0.0, 0.0, 0.0]), (state_inside, [10.0, -10.0, 0.0])):
        _, rewards, _, _ = tc.step(p, s, no_op(s))
        check("rewards at the radius", rewards, [expected])


def test_runner_exit_and_the_in_game_count():
    p = TagContinuousParams(num_taggers=1, num_runners=3, num_other_agents_observed=3, step_reward_for_runner=0.5)
    state = make_state([5.0, 5.125, 5.0, 15.0], [5.0, 5.0, 5.125, 15.0], speed=[0.0, 0.0, 0.0, 0.0], acceleration=0.0)
    check("runners_in_game before", tc.runners_in_game(p, state), [3])
    nxt, rewards, _, _ = tc.step(p, state, no_op(state))
    check("rewards", rewards, [[20.0, 0.5 - 10.0, 0.5 - 10.0, 0.5]])
    check("runners_in_game after", tc.runners_in_game(p, nxt), [1])
    check("speed of exited runners", nxt.speed, [[0.0, 0.0, 0.0, 0.0]])
    # Out of the game, a runner is neither tagged again nor paid, though the tagger still stands on it.
    nxt2, rewards2, _, _ = tc.step(p, nxt, no_op(nxt))
    check("rewards next step", rewards2, [[0.0, 0.0, 0.0, 0.5]])
    check("runners_in_game next step", tc.runners_in_game(p, nxt2), [1])

    # Without exits the runner stays in the game and is tagged again every step it is in reach.
    stay = TagContinuousParams(
        num_taggers=1, num_runners=3, num_other_agents_observed=3, runner_exits_game_after_tagged=False
    )
    nxt, rewards, terminated, _ = tc.step(stay, state, no_op(state))
    check("rewards without exits", rewards, [[20.0, -10.0, -10.0, 0.0]])
    check("in_game without exits", nxt.in_game, [[True, True, True, True]])
    _, rewards, _, _ = tc.step(stay, nxt, no_op(nxt))
    check("rewards without exits, next step", rewards, [[20.0, -10.0, -10.0, 0.0]])


def test_last_runner_tagged_terminates_the_env_not_truncates():
    # Env 0 loses its last runner; env 1's runner is out of reach. Env 2 loses it at t == T:
    # terminated, not truncated, and no end-of-game reward for the runner that left.
    p = TagContinuousParams(num_taggers=1, num_runners=2, num_other_agents_observed=2, episode_length=10)
    state = make_state(
        [[5.0, 5.125, 9.0], [5.0, 9.0, 1.0], [5.0, 5.125, 9.0]],
        [[5.0, 5.0, 9.0], [5.0, 9.0, 1.0], [5.0, 5.0, 9.0]],
        in_game=[[True, True, False], [True, True, False], [True, True, False]],
        t=[3, 3, 9],
    )
    nxt, rewards, terminated, truncated = tc.step(p, state, no_op(state))
    check("terminated", terminated, [True, False, True])
    check("truncated", truncated, [False, False, False])
    check("rewards", rewards, [[10.0, -10.0, 0.0], [0.0, 0.0, 0.0], [10.0, -10.0, 0.0]])
    check("runners_in_game", tc.runners_in_game(p, nxt), [0, 1, 0])


# -- movement ----------------------------------------------------------------------------------------


def test_edge_hit_and_clipping_on_each_side():
    # Speed 1 (the maximum) along 0, pi, pi/2, 3 pi/2 from half a unit inside each edge: each leaves
    # the arena by half a unit and is clipped back; agent 4 stands still. Env 1: agent 0 lands exactly
    # on x = L, which is inside (no hit).
    p = TagContinuousParams(num_taggers=2, num_runners=3, num_other_agents_observed=3, edge_hit_penalty=-1.0)
    half_pi, pi = F32(math.pi / 2), F32(math.pi)
    direction = [0.0, pi, half_pi, 3 * half_pi, 0.0]
    state = make_state(
        [[19.5, 0.5, 10.0, 10.0, 5.0], [19.0, 0.5, 10.0, 10.0, 5.0]],
        [[10.0, 10.0, 19.5, 0.5, 5.0], [10.0, 10.0, 19.5, 0.5, 5.0]],
        direction=direction,
        speed=[1.0, 1.0, 1.0, 1.0, 0.0],
    )
    nxt, rewards, _, _ = tc.step(p, state, no_op(state))
    check("rewards", rewards, [[-1.0, -1.0, -1.0, -1.0, 0.0], [0.0, -1.0, -1.0, -1.0, 0.0]])
    check("x", nxt.x, [[20.0, 0.0, 10.0, 10.0, 5.0], [20.0, 0.0, 10.0, 10.0, 5.0]], atol=1e-5)
    check("y", nxt.y, [[10.0, 10.0, 20.0, 0.0, 5.0], [10.0, 10.0, 20.0, 0.0, 5.0]], atol=1e-5)
    check(
        "clipped coordinates exact",
        torch.stack([nxt.x[:, 0], nxt.x[:, 1], nxt.y[:, 2], nxt.y[:, 3]], 1),
        [[20.0, 0.0, 20.0, 0.0]] * 2,
    )


def test_speed_clip_and_acceleration_reset_at_both_bounds():
    # Runners' maximum speed is 0.5 (skill 0.5), the tagger's 1.0. Acceleration index 20 is +0.1,
    # index 1 is -0.1, index 0 no change.
    p = TagContinuousParams(num_taggers=1, num_runners=4, num_other_agents_observed=3, skill_level_runner=0.5)
    deltas = p.acceleration_levels
    assert deltas[0] == 0 and deltas[1] == F32(-0.1) and deltas[20] == F32(0.1), f"acceleration table {deltas}"
    speed = F32([0.95, 0.45, 0.05, 0.2, 0.2])
    acceleration = F32([0.05, 0.0, -0.02, 0.05, 0.0])
    action = np.array([20, 20, 1, 0, 12])
    state = make_state(
        [2.0, 6.0, 10.0, 14.0, 18.0],
        [2.0, 6.0, 10.0, 14.0, 18.0],
        speed=speed.tolist(),
        acceleration=acceleration.tolist(),
    )
    actions = torch.zeros((1, 5, 2), dtype=torch.int64)
    actions[0, :, 0] = torch.from_numpy(action)
    nxt, _, _, _ = tc.step(p, state, actions)
    acc = acceleration + deltas[action]
    free_speed = speed + acc
    # tagger capped at 1.0; runner capped at 0.5; runner floored at 0; the last two inside the bounds.
    check("speed", nxt.speed, [[1.0, 0.5, 0.0, free_speed[3], free_speed[4]]])
    check("acceleration", nxt.acceleration, [[0.0, 0.0, 0.0, acc[3], acc[4]]])
    assert acc[3] == F32(0.05), "no-change action keeps the acceleration"


def test_direction_wraps_into_zero_two_pi():
    # Turn index 20 is +2.356, index 1 is -2.356. Agent 2: -1.0 from just under 1.0 gives -6e-8,
    # whose + 2 pi rounds to 2 pi itself: it must come back as 0, not 2 pi.
    p = TagContinuousParams(num_taggers=1, num_runners=2, num_other_agents_observed=2, min_turn=-1.0, max_turn=2.356)
    start = F32([6.0, 0.5, np.nextafter(F32(1.0), F32(0))])
    turn_index = np.array([20, 1, 1])
    turns = p.turn_levels[turn_index]
    assert turns[0] == F32(2.356) and turns[1] == F32(-1.0), f"turn table {p.turn_levels}"
    state = make_state([5.0, 10.0, 15.0], [5.0, 10.0, 15.0], direction=start.tolist())
    actions = torch.zeros((1, 3, 2), dtype=torch.int64)
    actions[0, :, 1] = torch.from_numpy(turn_index)
    nxt, _, _, _ = tc.step(p, state, actions)
    expected = [np.fmod(start[0] + turns[0], TWO_PI), start[1] + turns[1] + TWO_PI, 0.0]
    check("direction", nxt.direction, [expected])
    assert F32(start[2] + turns[2]) + TWO_PI == TWO_PI, "the crafted case must round to 2 pi"
    assert bool(((nxt.direction >= 0) & (nxt.direction < TWO_PI)).all()), f"directions {nxt.direction}"


def test_level_tables_are_numpy_linspace_rounded_once():
    p = TagContinuousParams(num_acceleration_levels=7, min_acceleration=-0.3, max_acceleration=0.2, num_turn_levels=1)
    expected = np.concatenate([[0.0], np.linspace(-0.3, 0.2, 7)]).astype(F32)
    check("acceleration_levels", torch.from_numpy(p.acceleration_levels), expected)
    check("turn_levels (one level)", torch.from_numpy(p.turn_levels), F32([0.0, p.min_turn]))
    index = torch.arange(8)
    check("level_deltas on tensors", level_deltas(-0.3, 0.2, 7, index), expected)


# -- end of the game ---------------------------------------------------------------------------------


def test_end_of_game_reward_at_t_equal_T_only_to_runners_in_the_game():
    # Env 0 reaches T: runner 1 still in (paid), runner 2 out since before (nothing), runner 3 tagged
    # now (penalty only). Env 1 is one step short of T: no end reward, not truncated.
    p = TagContinuousParams(
        num_taggers=1,
        num_runners=3,
        num_other_agents_observed=3,
        episode_length=20,
        end_of_game_reward_for_runner=2.0,
        step_reward_for_runner=0.25,
    )
    state = make_state(
        [[1.0, 10.0, 15.0, 1.125]] * 2,
        [[1.0, 10.0, 15.0, 1.0]] * 2,
        in_game=[[True, True, False, True]] * 2,
        t=[19, 18],
    )
    nxt, rewards, terminated, truncated = tc.step(p, state, no_op(state))
    check("rewards", rewards, [[10.0, 0.25 + 2.0, 0.0, 0.25 - 10.0], [10.0, 0.25, 0.0, 0.25 - 10.0]])
    check("terminated", terminated, [False, False])
    check("truncated", truncated, [True, False])
    check("t", nxt.t, [20, 19])


# -- agents out of the game --------------------------------------------------------------------------


def test_agents_out_of_the_game_are_frozen_and_observe_zeros():
    # Runner 2 is out, with a crafted nonzero motion state and active actions: nothing changes, no
    # reward (even with a step reward), and tagger 0 on top of it tags nothing. Tagger 1, set out of
    # the game by hand, is frozen too and does not tag runner 3 beside it.
    p = TagContinuousParams(
        num_taggers=2,
        num_runners=2,
        num_other_agents_observed=2,
        step_reward_for_runner=0.5,
        step_penalty_for_tagger=-0.5,
        use_full_observation=False,
    )
    state = make_state(
        [5.0, 12.0, 5.0, 12.125],
        [5.0, 12.0, 5.0, 12.0],
        direction=[0.0, 1.0, 1.0, 0.0],
        speed=[0.0, 0.3, 0.3, 0.0],
        acceleration=[0.0, 0.05, 0.05, 0.0],
        in_game=[True, False, False, True],
        t=4,
    )
    actions = torch.full((1, 4, 2), 7, dtype=torch.int64)
    actions[0, [0, 3]] = 0
    nxt, rewards, _, _ = tc.step(p, state, actions)
    for name in ("x", "y", "direction", "speed", "acceleration", "in_game"):
        check(f"{name} of out-of-game agents", getattr(nxt, name)[:, 1:3], getattr(state, name)[:, 1:3])
    check("rewards", rewards, [[-0.5, 0.0, 0.0, 0.5]])
    for full in (False, True):
        obs = tc.observe(dataclasses.replace(p, use_full_observation=full), nxt)
        check(f"observation of out-of-game agents (full={full})", obs[:, 1:3], 0.0)
        assert bool((obs[:, [0, 3], -1] == F32(5) / F32(500)).all()), f"in-game agents' t/T feature: {obs[0, :, -1]}"


# -- observations ------------------------------------------------------------------------------------


def features(p, state, e, i, j):
    """Agent i's 7 features of agent j in env e, in numpy float32 from the spec's formulas."""

    def v(name, k):
        return F32(getattr(state, name)[e, k].item())

    pos, spd = F32(math.sqrt(2) * p.grid_length), F32(p.max_speed + 1e-10)
    return F32(
        [
            (v("x", j) - v("x", i)) / pos,
            (v("y", j) - v("y", i)) / pos,
            (v("speed", j) - v("speed", i)) / spd,
            (v("acceleration", j) - v("acceleration", i)) / spd,
            (v("direction", j) - v("direction", i)) / TWO_PI,
            1.0 if j < p.num_taggers else 0.0,
            float(state.in_game[e, j]),
        ]
    )


def test_partial_observation_order_ties_and_zero_padding():
    # Agent 0 at (10, 10): agent 3 at 0.5, agents 1 and 2 tie at 1 (1 first), agent 4 out of the
    # game at 0.25 (not observed). Env 1: agents 3 and 4 out, so agent 0 sees 1, 2, then a zero slot.
    p = TagContinuousParams(num_taggers=2, num_runners=3, num_other_agents_observed=3, episode_length=8)
    assert p.obs_dim == 22
    xs, ys = [10.0, 11.0, 10.0, 10.0, 10.25], [10.0, 10.0, 11.0, 9.5, 10.0]
    state = make_state(
        [xs, xs],
        [ys, ys],
        direction=[0.5, 1.0, 2.0, 3.0, 4.0],
        speed=[0.1, 0.2, 0.3, 0.4, 0.5],
        acceleration=[0.0, -0.05, 0.05, 0.1, 0.0],
        in_game=[[True, True, True, True, False], [True, True, True, False, False]],
        t=2,
    )
    obs = tc.observe(p, state)
    check("observation shape", torch.tensor(obs.shape), [2, 5, 22])
    expected = np.concatenate([features(p, state, 0, 0, j) for j in (3, 1, 2)] + [[F32(2) / F32(8)]])
    check("env 0 agent 0 observation", obs[0, 0], expected, rtol=1e-6)
    expected = np.concatenate([features(p, state, 1, 0, j) for j in (1, 2)] + [np.zeros(7, F32), [F32(0.25)]])
    check("env 1 agent 0 observation (padded)", obs[1, 0], expected, rtol=1e-6)
    # Every agent in the game, checked against a brute-force order: (squared distance, id).
    for e in range(2):
        for i in range(5):
            if not state.in_game[e, i]:
                check(f"env {e} agent {i} (out) observation", obs[e, i], 0.0)
                continue
            others = [j for j in range(5) if j != i and state.in_game[e, j]]
            d2 = {j: (xs[j] - xs[i]) ** 2 + (ys[j] - ys[i]) ** 2 for j in others}
            order = sorted(others, key=lambda j: (d2[j], j))[:3]
            slots = [features(p, state, e, i, j) for j in order] + [np.zeros(7, F32)] * (3 - len(order))
            check(f"env {e} agent {i} observation", obs[e, i], np.concatenate(slots + [[F32(0.25)]]), rtol=1e-6)


def test_full_observation_layout_and_size():
    # Agent-major: slot m of agent i is the m-th other agent in id order; agent 2 is out of the game
    # (observed with in_game 0, observing zeros).
    p = TagContinuousParams(
        num_taggers=1, num_runners=3, use_full_observation=True, num_other_agents_observed=5, episode_length=4
    )
    assert p.obs_dim == 7 * 3 + 1
    state = make_state(
        [[1.0, 2.0, 3.0, 4.5], [9.0, 8.0, 7.0, 6.0]],
        [[0.5, 6.0, 7.0, 19.0], [1.0, 2.0, 3.0, 4.0]],
        direction=[[0.0, 1.5, 3.0, 6.0], [6.2, 0.0, 1.0, 2.0]],
        speed=[[0.0, 0.25, 0.5, 1.0], [1.0, 0.0, 0.5, 0.75]],
        acceleration=[[0.1, -0.1, 0.0, 0.05], [0.0, 0.0, 0.1, -0.05]],
        in_game=[[True, True, False, True], [True, True, True, True]],
        t=[1, 3],
    )
    obs = tc.observe(p, state)
    check("observation shape", torch.tensor(obs.shape), [2, 4, 22])
    for e in range(2):
        for i in range(4):
            if not state.in_game[e, i]:
                expected = np.zeros(22, F32)
            else:
                slots = [features(p, state, e, i, j) for j in range(4) if j != i]
                expected = np.concatenate(slots + [[F32(state.t[e].item()) / F32(4)]])
            check(f"env {e} agent {i} full observation", obs[e, i], expected, rtol=1e-6)


# -- reset -------------------------------------------------------------------------------------------


def keys(seeds, episodes=0):
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    return rng.key_hash(seeds, torch.full_like(seeds, episodes, dtype=torch.int32))


def test_reset_bounds_direction_set_and_draw_indices():
    p = TagContinuousParams()
    n, num_envs = p.num_agents, 64
    key = keys(torch.arange(num_envs))
    state = tc.reset(p, key, num_envs)
    for name in ("x", "y", "direction", "speed", "acceleration", "in_game"):
        assert getattr(state, name).shape == (num_envs, n), f"reset {name} shape {tuple(getattr(state, name).shape)}"
    assert state.x.dtype == torch.float32 and state.in_game.dtype == torch.bool and state.t.dtype == torch.int32
    for name in ("x", "y"):
        v = getattr(state, name)
        assert bool(((v >= 0) & (v < p.grid_length)).all()), f"reset {name} outside [0, L): {v.min()}, {v.max()}"
    allowed = torch.tensor([0.0, F32(math.pi / 2), F32(math.pi), F32(3 * math.pi / 2)])
    assert bool(torch.isin(state.direction, allowed).all()), f"reset directions {state.direction.unique()}"
    assert torch.equal(state.direction.unique(), allowed), "every starting direction should occur"
    check("reset speed", state.speed, 0.0)
    check("reset acceleration", state.acceleration, 0.0)
    check("reset in_game", state.in_game, True)
    check("reset t", state.t, 0)
    # The documented draw indices, which the kernels reproduce.
    a = torch.arange(n)
    k = key[:, None]
    check("reset x = draw a", state.x, rng.uniform_from_key(k, a, 0.0, 20.0))
    check("reset y = draw N + a", state.y, rng.uniform_from_key(k, a + n, 0.0, 20.0))
    quarter = torch.floor(rng.uniform_from_key(k, a + 2 * n, 0.0, 4.0))
    check("reset direction = draw 2N + a", state.direction, allowed[quarter.long()])


def test_reset_determinism_and_replicas():
    p = TagContinuousParams(num_taggers=2, num_runners=3, num_other_agents_observed=4)
    first = tc.reset(p, keys([5, 6, 7]), 3)
    again = tc.reset(p, keys([5, 6, 7]), 3)
    for name in ("x", "y", "direction"):
        check(f"reset {name} for equal keys", getattr(again, name), getattr(first, name))
    other_seed = tc.reset(p, keys([8, 9, 10]), 3)
    other_episode = tc.reset(p, keys([5, 6, 7], episodes=1), 3)
    for label, s in (("seeds", other_seed), ("episodes", other_episode)):
        assert not bool((s.x == first.x).all(dim=1).any()), f"reset x equal for different {label}: {s.x} vs {first.x}"
    for e in range(1, 3):  # replicas in one batch start differently (WarpDrive's did not)
        assert not torch.equal(first.x[e], first.x[0]), f"env {e} starts like env 0: {first.x}"
    with pytest.raises(ValueError, match="key must have shape"):
        tc.reset(p, keys([1, 2]), 3)


# -- params ------------------------------------------------------------------------------------------


def test_params_defaults_and_derived():
    p = TagContinuousParams()
    assert p.num_agents == 110 and p.obs_dim == 71, f"num_agents {p.num_agents}, obs_dim {p.obs_dim}"
    assert math.isclose(p.tagging_radius, 0.4), f"tagging_radius {p.tagging_radius}"
    assert F32(p.two_pi) == F32(6.2831854820251465) == 2 * F32(math.pi)
    assert TagContinuousParams(use_full_observation=True).obs_dim == 7 * 109 + 1
    check(
        "agent_type",
        agent_type(TagContinuousParams(num_taggers=2, num_runners=3, num_other_agents_observed=4)),
        [1, 1, 0, 0, 0],
    )


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_taggers=0), "num_taggers"),
        (dict(num_runners=0), "num_runners"),
        (dict(episode_length=0), "episode_length"),
        (dict(num_acceleration_levels=0), "num_acceleration_levels"),
        (dict(num_turn_levels=0), "num_turn_levels"),
        (dict(num_other_agents_observed=0), "num_other_agents_observed"),
        (dict(num_taggers=1, num_runners=2, num_other_agents_observed=3), "num_other_agents_observed"),
        (dict(num_taggers=2.0), "num_taggers"),
        (dict(use_full_observation=1), "use_full_observation"),
        (dict(tag_reward_for_tagger=-1.0), "tag_reward_for_tagger"),
        (dict(tag_penalty_for_runner=1.0), "tag_penalty_for_runner"),
        (dict(step_penalty_for_tagger=0.1), "step_penalty_for_tagger"),
        (dict(step_reward_for_runner=-0.1), "step_reward_for_runner"),
        (dict(edge_hit_penalty=0.5), "edge_hit_penalty"),
        (dict(end_of_game_reward_for_runner=-1.0), "end_of_game_reward_for_runner"),
        (dict(grid_length=0.0), "grid_length"),
        (dict(grid_length=math.inf), "grid_length"),
        (dict(max_speed=0.0), "max_speed"),
        (dict(skill_level_runner=0.0), "skill_level_runner"),
        (dict(tagging_distance=0.0), "tagging_distance"),
        (dict(min_acceleration=0.2), "min_acceleration"),
        (dict(min_turn=3.0), "min_turn"),
        (dict(max_turn=math.nan), "max_turn"),
        (dict(neighbour_search="kd-tree"), "neighbour_search"),
        (dict(neighbour_search=1), "neighbour_search"),
    ],
)
def test_params_reject_invalid_values(overrides, field):
    with pytest.raises(ValueError, match=rf"TagContinuousParams\.{field} must"):
        TagContinuousParams(**overrides)


def test_params_k_is_free_with_full_observation():
    p = TagContinuousParams(num_taggers=1, num_runners=2, use_full_observation=True)
    assert p.obs_dim == 7 * 2 + 1, f"obs_dim {p.obs_dim}"


def test_kernels_divide_by_a_scale_through_its_reciprocal():
    # A product with an exact reciprocal (a power of two) is the quotient's own float; any other
    # scale's float32 reciprocal is corrected (float32.corrected_reciprocal, tested in test_float32).
    def division(params, name):
        k = kernel_constants(params)
        return k[f"{name}_RECIPROCAL"], k[f"{name}_RECIPROCAL_EXACT"]

    p = TagContinuousParams()
    assert division(p, "SPEED_SCALE") == (1.0, True)  # max_speed 1 (+1e-10)
    assert division(p, "POSITION_SCALE") == (float(np.float32(1) / np.float32(p.position_scale)), False)
    assert division(p, "TWO_PI") == (float(np.float32(1) / np.float32(p.two_pi)), False)
    assert division(TagContinuousParams(max_speed=4.0), "SPEED_SCALE") == (0.25, True)
    for max_speed in (1.5, 3.0, 0.1):
        reciprocal = float(np.float32(1) / np.float32(TagContinuousParams(max_speed=max_speed).speed_scale))
        assert division(TagContinuousParams(max_speed=max_speed), "SPEED_SCALE") == (reciprocal, False)
    differences = torch.linspace(-3, 3, 10001, dtype=torch.float32)
    assert torch.equal(differences * np.float32(0.25), differences / np.float32(4.0))
