"""TagGridworld's torch reference against the rules of ../shared/specs/tag.md, on hand-made states.

Expected values are written out by hand (rewards as float32 sums, as the env computes them), so a
mistake in the reference cannot hide behind a check that recomputes it the same way.
"""

import dataclasses

import numpy as np
import pytest
import torch

from gpu_marl_envs import rng
from gpu_marl_envs.envs import tag_gridworld as tg

STAY, PLUS_X, MINUS_X, PLUS_Y, MINUS_Y = range(5)  # the spec's order, restated so a swap in the env shows
F32 = np.float32
P = tg.TagGridworldParams()  # 4 taggers (ids 0..3), runner id 4, L = 100, T = 100
L, T, RUNNER = P.grid_length, P.episode_length, P.runner_id
TAG, PENALTY, COST, WALL = (
    F32(P.tag_reward_for_tagger),
    F32(P.tag_penalty_for_runner),
    F32(P.step_cost_for_tagger),
    F32(P.wall_hit_penalty),
)


def state(xs, ys, t=0):
    """A state from per-env lists of x and y cells (one list per env) and one t for all envs."""
    x = torch.tensor(xs, dtype=torch.int32)
    return tg.TagGridworldState(
        x=x, y=torch.tensor(ys, dtype=torch.int32), t=torch.full((x.shape[0],), t, dtype=torch.int32)
    )


def actions(rows):
    return torch.tensor(rows, dtype=torch.int64)


def assert_equal(got, expected, what):
    """Exact equality, naming the first differing element (env, agent, feature) in the message."""
    expected = torch.as_tensor(np.asarray(expected)).to(got.dtype)
    assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    differ = (got != expected).nonzero()
    if differ.numel():
        index = tuple(differ[0].tolist())
        raise AssertionError(
            f"{what}{list(index)}: got {got[index].item()!r}, expected {expected[index].item()!r} "
            f"({differ.shape[0]} elements differ)"
        )


# Agents far from each other and from the walls: taggers on a diagonal, the runner apart.
FREE_X = [[10, 20, 30, 40, 70]]
FREE_Y = [[10, 20, 30, 40, 90]]


# ---- moves -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action, dx, dy", [(STAY, 0, 0), (PLUS_X, 1, 0), (MINUS_X, -1, 0), (PLUS_Y, 0, 1), (MINUS_Y, 0, -1)]
)
def test_each_action_moves_one_cell(action, dx, dy):
    s = state(FREE_X, FREE_Y)
    nxt, rewards, terminated, truncated = tg.step(P, s, actions([[action] * 5]))
    assert_equal(nxt.x, [[x + dx for x in FREE_X[0]]], f"x after action {action}")
    assert_equal(nxt.y, [[y + dy for y in FREE_Y[0]]], f"y after action {action}")
    assert_equal(nxt.t, [1], "t after one step")
    assert_equal(rewards, [[-COST] * 4 + [COST]], f"rewards after action {action} (no wall, no tag)")


def test_step_does_not_modify_its_input():
    s = state(FREE_X, FREE_Y, t=3)
    tg.step(P, s, actions([[PLUS_X] * 5]))
    assert_equal(s.x, FREE_X, "input x after step")
    assert_equal(s.y, FREE_Y, "input y after step")
    assert_equal(s.t, [3], "input t after step")


# ---- walls -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "side, x0, y0, action",
    [
        ("x = 0", 0, 50, MINUS_X),
        ("x = L", L, 50, PLUS_X),
        ("y = 0", 50, 0, MINUS_Y),
        ("y = L", 50, L, PLUS_Y),
    ],
)
def test_move_into_a_wall_is_clipped_and_penalised_once(side, x0, y0, action):
    # Tagger 0 walks into the wall; the others stay away from walls and from the runner.
    s = state([[x0, 20, 30, 40, 70]], [[y0, 20, 30, 40, 90]])
    nxt, rewards, _, _ = tg.step(P, s, actions([[action, STAY, STAY, STAY, STAY]]))
    assert_equal(nxt.x[:, 0], [x0], f"tagger x after hitting wall {side}")
    assert_equal(nxt.y[:, 0], [y0], f"tagger y after hitting wall {side}")
    assert_equal(rewards, [[-COST - WALL, -COST, -COST, -COST, COST]], f"rewards after hitting wall {side}")


@pytest.mark.parametrize(
    "x0, y0, action",
    [(0, 50, PLUS_Y), (L, 50, MINUS_Y), (50, 0, PLUS_X), (50, L, MINUS_X), (0, 0, PLUS_X), (L, L, MINUS_Y)],
)
def test_moves_along_or_away_from_a_wall_are_free(x0, y0, action):
    s = state([[x0, 20, 30, 40, 70]], [[y0, 20, 30, 40, 90]])
    _, rewards, _, _ = tg.step(P, s, actions([[action, STAY, STAY, STAY, STAY]]))
    assert_equal(rewards[:, 0], [-COST], f"tagger reward moving {action} from ({x0}, {y0})")


def test_runner_pays_the_wall_penalty_too():
    s = state([[10, 20, 30, 40, 0]], [[10, 20, 30, 40, 0]])
    nxt, rewards, _, _ = tg.step(P, s, actions([[STAY, STAY, STAY, STAY, MINUS_X]]))
    assert_equal(nxt.x[:, RUNNER], [0], "runner x after hitting x = 0")
    assert_equal(rewards, [[-COST, -COST, -COST, -COST, COST - WALL]], "rewards after the runner hits x = 0")


def test_clipped_on_two_axes_pays_the_penalty_once():
    # A Discrete(5) move changes one axis, so only a hand-set state outside the grid gets two axes
    # clipped: tagger 0 at (L, -1) moving +x is clipped back on x and on y.
    s = state([[L, 20, 30, 40, 70]], [[-1, 20, 30, 40, 90]])
    nxt, rewards, _, _ = tg.step(P, s, actions([[PLUS_X, STAY, STAY, STAY, STAY]]))
    assert_equal(nxt.x[:, 0], [L], "tagger x clipped to L")
    assert_equal(nxt.y[:, 0], [0], "tagger y clipped to 0")
    assert_equal(rewards, [[-COST - WALL, -COST, -COST, -COST, COST]], "rewards when clipped on two axes")


# ---- tags ------------------------------------------------------------------------------------------


def test_tag_by_one_tagger_rewards_every_tagger_once():
    # Tagger 2 steps onto the runner's cell; the others are far away.
    s = state([[10, 20, 49, 40, 50]], [[10, 20, 50, 40, 50]])
    _, rewards, terminated, truncated = tg.step(P, s, actions([[STAY, STAY, PLUS_X, STAY, STAY]]))
    assert_equal(rewards, [[TAG, TAG, TAG, TAG, -PENALTY]], "rewards on a tag by tagger 2")
    assert_equal(terminated, [True], "terminated on a tag")
    assert_equal(truncated, [False], "truncated on a tag")


def test_tag_by_two_taggers_pays_each_reward_once():
    s = state([[49, 51, 30, 40, 50]], [[50, 50, 30, 40, 50]])
    _, rewards, terminated, _ = tg.step(P, s, actions([[PLUS_X, MINUS_X, STAY, STAY, STAY]]))
    assert_equal(rewards, [[TAG, TAG, TAG, TAG, -PENALTY]], "rewards on a tag by taggers 0 and 1 at once")
    assert_equal(terminated, [True], "terminated on a double tag")


def test_runner_stepping_onto_a_tagger_is_tagged():
    s = state([[10, 20, 30, 40, 41]], [[10, 20, 30, 40, 40]])
    _, rewards, terminated, _ = tg.step(P, s, actions([[STAY, STAY, STAY, STAY, MINUS_X]]))
    assert_equal(rewards, [[TAG, TAG, TAG, TAG, -PENALTY]], "rewards when the runner walks onto tagger 3")
    assert_equal(terminated, [True], "terminated when the runner walks onto tagger 3")


def test_swapping_cells_is_not_a_tag():
    # Tags are checked on the cells after the move: tagger 3 and the runner pass each other.
    s = state([[10, 20, 30, 40, 41]], [[10, 20, 30, 40, 40]])
    _, rewards, terminated, _ = tg.step(P, s, actions([[STAY, STAY, STAY, PLUS_X, MINUS_X]]))
    assert_equal(rewards, [[-COST] * 4 + [COST]], "rewards when tagger 3 and the runner swap cells")
    assert_equal(terminated, [False], "terminated when tagger 3 and the runner swap cells")


def test_tag_and_wall_penalty_add():
    # Tagger 0 tags at the x = 0 wall while walking into it; tagger 1 hits y = L; the rest stay.
    s = state([[0, 20, 30, 40, 0]], [[5, L, 30, 40, 5]])
    _, rewards, terminated, _ = tg.step(P, s, actions([[MINUS_X, PLUS_Y, STAY, STAY, STAY]]))
    assert_equal(rewards, [[TAG - WALL, TAG - WALL, TAG, TAG, -PENALTY]], "rewards on a tag with wall hits")
    assert_equal(terminated, [True], "terminated on a tag at the wall")


def test_no_tag_costs_taggers_and_pays_the_runner():
    # Adjacent (and diagonal) is not a tag: only the same cell counts.
    s = state([[49, 51, 50, 51, 50]], [[50, 51, 49, 49, 50]])
    _, rewards, terminated, truncated = tg.step(P, s, actions([[STAY] * 5]))
    assert_equal(rewards, [[-COST] * 4 + [COST]], "rewards without a tag")
    assert_equal(terminated, [False], "terminated without a tag")
    assert_equal(truncated, [False], "truncated at t = 1")


def test_rewards_follow_changed_params():
    p = tg.TagGridworldParams(
        num_taggers=1,
        tag_reward_for_tagger=3.0,
        tag_penalty_for_runner=2.0,
        step_cost_for_tagger=0.5,
        wall_hit_penalty=0.25,
    )
    s = state([[0, 5], [4, 5]], [[0, 5], [5, 5]])  # env 0: no tag, tagger hits a wall; env 1: tag
    _, rewards, terminated, _ = tg.step(p, s, actions([[MINUS_X, STAY], [PLUS_X, STAY]]))
    assert_equal(rewards, [[F32(-0.5) - F32(0.25), 0.5], [3.0, -2.0]], "rewards with non-default params")
    assert_equal(terminated, [False, True], "terminated with non-default params")


# ---- episode end -----------------------------------------------------------------------------------


def test_truncated_at_T_without_a_tag_and_not_before():
    s = state(FREE_X * 2, FREE_Y * 2)
    s.t = torch.tensor([T - 2, T - 1], dtype=torch.int32)
    nxt, _, terminated, truncated = tg.step(P, s, actions([[STAY] * 5] * 2))
    assert_equal(nxt.t, [T - 1, T], "t after the step")
    assert_equal(truncated, [False, True], "truncated reaching t = T - 1 and t = T")
    assert_equal(terminated, [False, False], "terminated without a tag")


def test_tag_at_T_terminates_and_does_not_truncate():
    s = state([[10, 20, 30, 49, 50]], [[10, 20, 30, 50, 50]], t=T - 1)
    _, rewards, terminated, truncated = tg.step(P, s, actions([[STAY, STAY, STAY, PLUS_X, STAY]]))
    assert_equal(terminated, [True], "terminated on a tag at t = T")
    assert_equal(truncated, [False], "truncated on a tag at t = T")
    assert_equal(rewards, [[TAG, TAG, TAG, TAG, -PENALTY]], "rewards on a tag at t = T")


def test_envs_of_a_batch_are_independent():
    # Env 0 tags, env 1 does not, env 2 truncates: one step, three outcomes.
    s = state([[49, 20, 30, 40, 50], FREE_X[0], FREE_X[0]], [[50, 20, 30, 40, 50], FREE_Y[0], FREE_Y[0]])
    s.t = torch.tensor([0, 0, T - 1], dtype=torch.int32)
    _, rewards, terminated, truncated = tg.step(P, s, actions([[PLUS_X, STAY, STAY, STAY, STAY]] * 3))
    assert_equal(terminated, [True, False, False], "terminated per env")
    assert_equal(truncated, [False, False, True], "truncated per env")
    assert_equal(rewards[:, RUNNER], [-PENALTY, COST, COST], "runner reward per env")


# ---- observations ----------------------------------------------------------------------------------


def test_full_observation_layout_and_values():
    p = tg.TagGridworldParams(num_taggers=2, grid_length=8, episode_length=16)  # N = 3
    s = state([[1, 2, 8]], [[4, 0, 6]], t=4)
    obs = tg.observe(p, s)
    assert p.obs_dim == 13, f"obs_dim {p.obs_dim}, expected 4N + 1 = 13"
    shared = [1 / 8, 2 / 8, 8 / 8, 4 / 8, 0 / 8, 6 / 8, 0, 0, 1]  # x_j/L, y_j/L, type_j (runner 1)
    expected = [[shared + one_hot + [4 / 16] for one_hot in ([1, 0, 0], [0, 1, 0], [0, 0, 1])]]
    assert obs.dtype == torch.float32, f"observation dtype {obs.dtype}"
    assert_equal(obs, np.array(expected, dtype=np.float32), "full observation [env, agent, feature]")


def test_full_observation_size_at_default_params():
    obs = tg.observe(P, tg.reset(P, torch.zeros(3, dtype=torch.int64), 3))
    assert tuple(obs.shape) == (3, 5, 21), f"observation shape {tuple(obs.shape)}, expected (3, 5, 4 * 5 + 1)"


def test_partial_observation_layout_and_values():
    p = tg.TagGridworldParams(num_taggers=3, grid_length=10, episode_length=20, use_full_observation=False)
    # Runner at (5, 5); taggers at squared distances 25, 8, 9: tagger 1 is nearest.
    s = state([[0, 7, 2, 5]], [[5, 7, 5, 5]], t=3)
    obs = tg.observe(p, s)
    assert p.obs_dim == 6, f"obs_dim {p.obs_dim}, expected 6"
    cells = np.array(
        [
            [
                [0, 5, 5, 5],  # taggers: own x, y; the runner's x, y
                [7, 7, 5, 5],
                [2, 5, 5, 5],
                [5, 5, 7, 7],  # runner: own x, y; its nearest tagger's (1) x, y
            ]
        ],
        dtype=np.float32,
    ) / F32(10)
    types = np.array([[[0], [0], [0], [1]]], dtype=np.float32)
    time = np.full((1, 4, 1), F32(3) / F32(20))
    assert_equal(obs, np.concatenate([cells, types, time], axis=2), "partial observation [env, agent, feature]")


@pytest.mark.parametrize(
    "xs, ys, nearest, why",
    [
        ([3, 5, 0], [3, 0, 0], 0, "Euclidean: 18 < 25 (Manhattan would pick tagger 1: 6 > 5)"),
        ([4, 5, 0], [4, 0, 0], 1, "Euclidean: 25 < 32 (Chebyshev would pick tagger 0: 4 < 5)"),
        ([3, 0, 0], [0, 3, 0], 0, "tie at distance 3: lowest id"),
        ([2, 2, 0], [2, 2, 0], 0, "two taggers on one cell: lowest id"),
    ],
)
def test_partial_target_of_the_runner_is_its_nearest_tagger(xs, ys, nearest, why):
    p = tg.TagGridworldParams(num_taggers=2, grid_length=8, use_full_observation=False)
    obs = tg.observe(p, state([xs], [ys]))
    target = obs[0, 2, 2:4] * 8
    assert_equal(target, [xs[nearest], ys[nearest]], f"runner's target cell ({why})")


def test_partial_targets_differ_per_env():
    p = tg.TagGridworldParams(num_taggers=2, grid_length=8, use_full_observation=False)
    obs = tg.observe(p, state([[1, 6, 0], [1, 6, 7]], [[0, 0, 0], [0, 0, 0]]))
    assert_equal(obs[:, 2, 2] * 8, [1, 6], "runner's target x per env")


# ---- reset -----------------------------------------------------------------------------------------


def _keys(seeds, episode=0):
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    return rng.key_hash(seeds, torch.full_like(seeds, episode, dtype=torch.int32))


@pytest.mark.parametrize("grid_length", [100, 7])
def test_reset_published_layout(grid_length):
    p = tg.TagGridworldParams(grid_length=grid_length)
    s = tg.reset(p, _keys([0, 1]), 2)
    half = grid_length // 2
    assert_equal(s.x, [[half] * 4 + [0]] * 2, "start x (taggers at L // 2, runner at 0)")
    assert_equal(s.y, [[half] * 4 + [0]] * 2, "start y (taggers at L // 2, runner at 0)")
    assert_equal(s.t, [0, 0], "start t")
    assert s.x.dtype == s.y.dtype == s.t.dtype == torch.int32, f"state dtypes {s.x.dtype}, {s.y.dtype}, {s.t.dtype}"
    assert_equal(s.agent_type, [0, 0, 0, 0, 1], "agent type (tagger 0, runner 1)")


def test_random_start_covers_every_cell_and_stays_in_bounds():
    p = tg.TagGridworldParams(grid_length=3, random_start=True)
    s = tg.reset(p, _keys(range(2000)), 2000)
    for name, cells in (("x", s.x), ("y", s.y)):
        counts = torch.bincount(cells.flatten().long(), minlength=4)
        assert cells.min() >= 0 and cells.max() <= 3, f"random start {name} outside [0, 3]: {counts.tolist()}"
        # 10000 draws over 4 cells: each within 10% of 2500.
        assert ((counts - 2500).abs() < 250).all(), f"random start {name} cell counts {counts.tolist()}"
    assert_equal(s.t, [0] * 2000, "start t")


def test_random_start_uses_the_documented_draws():
    p = tg.TagGridworldParams(grid_length=100, random_start=True)
    key = _keys([5, 6, 7])
    s = tg.reset(p, key, 3)
    for i in range(p.num_agents):
        for name, got, draw in (("x", s.x, 2 * i), ("y", s.y, 2 * i + 1)):
            u = rng.uniform_from_key(key, draw, 0.0, 101.0)
            assert_equal(got[:, i], torch.floor(u).clamp(max=100), f"agent {i} start {name} (draw {draw})")


def test_random_start_is_deterministic_per_key_and_differs_across_keys():
    p = tg.TagGridworldParams(random_start=True)
    a, b = tg.reset(p, _keys([1, 2]), 2), tg.reset(p, _keys([1, 2]), 2)
    assert_equal(a.x, b.x, "x from equal keys")
    assert_equal(a.y, b.y, "y from equal keys")
    other = tg.reset(p, _keys([1, 2], episode=1), 2)
    same = ((a.x == other.x) & (a.y == other.y)).float().mean().item()
    assert same < 0.2, f"{same:.0%} of agents start on the same cell for keys of different episodes"
    assert not torch.equal(a.x[0], a.x[1]), f"envs 0 and 1 (seeds 1, 2) start alike: {a.x.tolist()}"


# ---- params ----------------------------------------------------------------------------------------


def test_default_params_are_the_published_configuration():
    expected = dict(
        num_taggers=4,
        grid_length=100,
        episode_length=100,
        wall_hit_penalty=0.1,
        tag_reward_for_tagger=10.0,
        tag_penalty_for_runner=5.0,
        step_cost_for_tagger=0.01,
        use_full_observation=True,
        random_start=False,
    )
    got = dataclasses.asdict(P)
    for name, value in expected.items():
        assert got[name] == value, f"default {name}: {got[name]!r}, expected {value!r}"
    assert (P.num_agents, P.runner_id, P.obs_dim) == (5, 4, 21), (
        f"num_agents, runner_id, obs_dim = {(P.num_agents, P.runner_id, P.obs_dim)}, expected (5, 4, 21)"
    )
    groups = tg.agent_groups(P)
    assert groups == {"taggers": range(0, 4), "runners": range(4, 5)}, f"agent_groups {groups}"


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("num_taggers", 0, ">= 1"),
        ("num_taggers", 2.0, "integer"),
        ("grid_length", 0, ">= 1"),
        ("grid_length", 10.5, "integer"),
        ("grid_length", True, "integer"),
        ("grid_length", 2**24, "<= 16777215"),
        ("episode_length", 0, ">= 1"),
        ("episode_length", "100", "integer"),
        ("wall_hit_penalty", -0.1, ">= 0"),
        ("tag_reward_for_tagger", float("nan"), ">= 0"),
        ("tag_penalty_for_runner", -5.0, ">= 0"),
        ("step_cost_for_tagger", float("inf"), "finite"),
        ("step_cost_for_tagger", None, "number"),
        ("use_full_observation", 1, "bool"),
        ("random_start", "yes", "bool"),
    ],
)
def test_invalid_params_are_rejected_naming_field_and_rule(field, value, rule):
    with pytest.raises(ValueError) as error:
        tg.TagGridworldParams(**{field: value})
    message = str(error.value)
    assert f"TagGridworldParams.{field}" in message and rule in message, (
        f"error for {field}={value!r} should name the field and '{rule}': {message!r}"
    )


def test_spaces():
    assert tg.action_space(P).n == 5, f"action space {tg.action_space(P)}"
    space = tg.observation_space(dataclasses.replace(P, use_full_observation=False))
    assert space.shape == (6,) and space.dtype == np.float32, f"partial observation space {space}"
    obs = tg.observe(P, tg.reset(P, _keys([0]), 1))
    assert tg.observation_space(P).contains(obs[0, 0].numpy()), f"start observation {obs[0, 0]} outside the space"
