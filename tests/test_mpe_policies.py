"""SimpleSpread's reference policies (gpu_marl_envs.mpe_policies): the assignment is optimal, the
controller brings agents to rest on their landmarks in both action modes, the scripted policy beats
the random one by far, and the score's arithmetic. CPU, small batches."""

import itertools
import math

import numpy as np
import pytest
import torch

from gpu_marl_envs import mpe_policies as mp
from gpu_marl_envs.envs import mpe_physics as mpe
from gpu_marl_envs.parallel_env import make_parallel


def params(**settings):
    return mp.spread_params(**settings)


def spread_env(num_envs: int, **settings):
    p = params(**settings)
    return p, make_parallel(mp.ENV_ID, num_envs, device="cpu", params=p)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_assignment_is_optimal(n):
    rng = np.random.default_rng(n)
    games = 200 if n < 6 else 50  # the brute force below is Python's
    cost = rng.uniform(0, 3, (games, n, n)).astype(np.float32)
    cost[:20] = np.round(cost[:20])  # ties: the total is still the least
    got = mp.optimal_assignment(torch.from_numpy(cost)).numpy()
    assert got.shape == (games, n)
    assert (np.sort(got, axis=1) == np.arange(n)).all(), "each landmark goes to one agent"
    rows = np.arange(n)
    totals = np.take_along_axis(cost, got[:, :, None], 2)[:, :, 0].sum(1, dtype=np.float64)
    best = np.array(
        [min(c[rows, list(perm)].sum(dtype=np.float64) for perm in itertools.permutations(rows)) for c in cost]
    )
    np.testing.assert_allclose(totals, best, rtol=1e-6)


def test_assignment_batch_dimensions_and_ties():
    cost = torch.zeros(2, 3, 4, 4)
    got = mp.optimal_assignment(cost)
    assert got.shape == (2, 3, 4)
    assert (got == torch.arange(4)).all(), "a tie goes to the first permutation"
    eye = torch.ones(3, 3) - torch.eye(3)[[2, 0, 1]]  # the free assignment: agent 0 -> 2, 1 -> 0, 2 -> 1
    assert mp.optimal_assignment(eye).tolist() == [2, 0, 1]


def test_large_n_refused():
    with pytest.raises(ValueError, match="N <= 8"):
        mp.optimal_assignment(torch.zeros(9, 9))
    with pytest.raises(ValueError, match="N <= 8"):
        mp.ScriptedSpread(params(N=9))
    with pytest.raises(ValueError, match="square"):
        mp.optimal_assignment(torch.zeros(3, 4))


def test_observed_offsets_reconstruct_the_world():
    p, env = spread_env(16, N=4)
    obs, _ = env.reset_groups(seed=3)
    state = env.get_state()
    agents, landmarks = mp.observed_offsets(p.N, obs["agents"])  # (E, viewer, n, 2)
    positions = torch.stack([state["x"], state["y"]], -1)
    true_landmarks = torch.stack([state["landmark_x"], state["landmark_y"]], -1)
    torch.testing.assert_close(agents, positions[:, None] - positions[:, :, None], atol=1e-6, rtol=0)
    torch.testing.assert_close(landmarks, true_landmarks[:, None] - positions[:, :, None], atol=1e-6, rtol=0)


def test_every_view_gives_the_same_assignment():
    """view="own": each agent's own plan agrees with agent 0's (near ties aside: none in these games)."""
    p, env = spread_env(2000, N=4)
    obs, _ = env.reset_groups(seed=5)
    central = mp.ScriptedSpread(p).assignment(obs)
    own = mp.ScriptedSpread(p, view="own").assignment(obs)
    assert (central.sort(1).values == torch.arange(p.N)).all()
    assert (own == central).float().mean() == 1.0


def simulate_braking(speed: float, brake: float) -> float:
    """Distance covered from the next position on, moving at ``speed`` then braking at ``brake``."""
    keep, b, travelled = 1.0 - mpe.DAMPING, mpe.DT * brake, 0.0
    while speed > 0:
        travelled += mpe.DT * speed
        speed = max(keep * speed - b, 0.0) if keep * speed > b else 0.0
    return travelled


@pytest.mark.parametrize("brake", [2.5, 5.0])
def test_desired_velocity_is_the_braking_distance_inverse(brake):
    distances = torch.tensor([0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0], dtype=torch.float64)
    speeds = mp.desired_velocity(distances, brake)
    for d, v in zip(distances.tolist(), speeds.tolist()):
        assert simulate_braking(v, brake) == pytest.approx(d, abs=1e-9)
        assert simulate_braking(v * 1.01 + 1e-3, brake) > d  # any faster overshoots


@pytest.mark.parametrize("continuous", [False, True])
def test_controller_reaches_and_stops_at_landmarks(continuous):
    """From crafted states (agents anywhere, moving fast in any direction; landmarks far apart, so
    no contact at the end), every agent comes to rest on its landmark and stays there."""
    num_envs, steps = 64, 40
    p, env = spread_env(num_envs, N=3, continuous_actions=continuous, max_cycles=steps)
    env.reset_groups(seed=0)
    g = torch.Generator().manual_seed(1)
    corners = torch.tensor([[-0.8, -0.8], [0.8, -0.7], [0.1, 0.9]])
    landmarks = corners[torch.stack([torch.randperm(3, generator=g) for _ in range(num_envs)])]
    state = {
        "x": torch.rand(num_envs, 3, generator=g) * 2 - 1,
        "y": torch.rand(num_envs, 3, generator=g) * 2 - 1,
        "vx": torch.rand(num_envs, 3, generator=g) * 4 - 2,
        "vy": torch.rand(num_envs, 3, generator=g) * 4 - 2,
        "landmark_x": landmarks[..., 0].contiguous(),
        "landmark_y": landmarks[..., 1].contiguous(),
        "t": torch.zeros(num_envs, dtype=torch.int32),
    }
    obs = {"agents": torch.stack(list(env.set_state(state).values()), 1)}
    policy = mp.ScriptedSpread(p)
    nearest = []
    for _ in range(steps):
        obs, *_ = env.step_groups(policy(obs))
        s = env.get_state()
        agents = torch.stack([s["x"], s["y"]], -1)
        marks = torch.stack([s["landmark_x"], s["landmark_y"]], -1)
        nearest.append(mp.distance_matrix(agents, marks).min(1).values.max(1).values)  # worst landmark per game
    nearest = torch.stack(nearest)  # (steps, E)
    # Box lands exactly; Discrete moves change the speed by 0.5 a step: they hover within 0.05 (module docstring).
    settled = 1e-3 if continuous else 0.06
    assert (nearest[-15:] < settled).all(), f"worst final distance {nearest[-1].max():.3f}"
    speed = torch.hypot(s["vx"], s["vy"])
    assert speed.max() < (1e-3 if continuous else 0.6)
    # Every landmark has its own agent: the assignment is kept to the end.
    assert (mp.ScriptedSpread(p).assignment(obs).sort(1).values == torch.arange(3)).all()


@pytest.mark.parametrize("continuous", [False, True])
def test_policies_actions(continuous):
    p, env = spread_env(32, N=3, continuous_actions=continuous)
    obs, _ = env.reset_groups(seed=0)
    for policy in (mp.ScriptedSpread(p), mp.RandomPolicy(p, seed=4)):
        actions = policy(obs)["agents"]
        if continuous:
            assert actions.shape == (32, 3, 5) and actions.dtype == torch.float32
            assert ((actions >= 0) & (actions <= 1)).all()
        else:
            assert actions.shape == (32, 3) and actions.dtype == torch.int64
            assert ((actions >= 0) & (actions < 5)).all()
    first, again = mp.RandomPolicy(p, seed=4)(obs), mp.RandomPolicy(p, seed=4)(obs)
    assert torch.equal(first["agents"], again["agents"])
    with pytest.raises(ValueError, match="shape"):
        mp.ScriptedSpread(params(N=4))(obs)


def test_random_policy_is_uniform():
    for continuous in (False, True):
        p = params(continuous_actions=continuous)
        obs = {"agents": torch.zeros(4000, 3, p.obs_dim)}
        actions = mp.RandomPolicy(p)(obs)["agents"]
        if continuous:
            assert abs(actions.mean().item() - 0.5) < 0.01
        else:
            counts = torch.bincount(actions.flatten(), minlength=5) / actions.numel()
            assert (counts - 0.2).abs().max() < 0.01


@pytest.mark.parametrize("continuous", [False, True])
def test_scripted_beats_random(continuous):
    refs = mp.reference_returns(params(continuous_actions=continuous), num_episodes=64)
    random, scripted = refs["random"], refs["scripted"]
    assert scripted.mean_return > random.mean_return + 10  # about -26 against -6 to -8
    assert scripted.final_distance < 0.1 < random.final_distance
    assert scripted.covered > 0.8
    assert random.episodes == scripted.episodes == 64
    # The same seeds give the same episodes.
    again = mp.evaluate(
        mp.ScriptedSpread(params(continuous_actions=continuous)),
        num_episodes=64,
        seed=mp.EVALUATION_SEED,
        params=params(continuous_actions=continuous),
    )
    assert again == scripted


def test_normalised_score():
    assert mp.normalised_score(-26.0, -26.0, -6.0) == 0.0
    assert mp.normalised_score(-6.0, -26.0, -6.0) == 1.0
    assert mp.normalised_score(-16.0, -26.0, -6.0) == pytest.approx(0.5)
    assert mp.normalised_score(-4.0, -26.0, -6.0) == pytest.approx(1.1)
    assert mp.normalised_score(-30.0, -26.0, -6.0) == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="exceed"):
        mp.normalised_score(-10.0, -6.0, -6.0)
    with pytest.raises(ValueError, match="finite"):
        mp.normalised_score(math.nan, -26.0, -6.0)


def test_spread_params():
    assert mp.spread_params(N=5).N == 5
    assert mp.spread_params(params(local_ratio=0.2), N=4).local_ratio == 0.2
    with pytest.raises(ValueError, match="unknown"):
        mp.spread_params(num_agents=3)


@pytest.mark.parametrize("continuous", [False, True])
def test_agents_on_close_landmarks_keep_apart(continuous):
    """Two landmarks 0.2 apart: their agents settle near them, but not within 0.3 of each other
    (the collision penalty), and collide less on the way than agents aiming at the centres."""
    num_envs, steps = 8, 30
    p, env = spread_env(num_envs, N=3, continuous_actions=continuous, max_cycles=steps)
    env.reset_groups(seed=0)
    state = {
        "x": torch.tensor([[-0.5, 0.5, 0.0]]).expand(num_envs, 3),
        "y": torch.tensor([[-0.5, -0.5, 0.5]]).expand(num_envs, 3),
        "vx": torch.zeros(num_envs, 3),
        "vy": torch.zeros(num_envs, 3),
        "landmark_x": torch.tensor([[-0.1, 0.1, 0.0]]).expand(num_envs, 3),
        "landmark_y": torch.tensor([[0.0, 0.0, 0.8]]).expand(num_envs, 3),
        "t": torch.zeros(num_envs, dtype=torch.int32),
    }
    collisions = {}
    for spacing in (None, 0.0):
        obs = {"agents": torch.stack(list(env.set_state(state).values()), 1)}
        policy = mp.ScriptedSpread(p, spacing=spacing)
        collisions[spacing] = 0.0
        for _ in range(steps - 1):
            obs, *_ = env.step_groups(policy(obs))
            collisions[spacing] += mp._close_pairs(env.get_state()).sum().item()
        s = env.get_state()
        agents = torch.stack([s["x"], s["y"]], -1)
        marks = torch.stack([s["landmark_x"], s["landmark_y"]], -1)
        near = mp.distance_matrix(agents, marks).min(1).values  # (E, landmarks)
        assert (near[:, 2] < 0.06).all()
        if spacing is None:
            assert (mp._close_pairs(s) == 0).all(), "no collision at the end"
            assert (near[:, :2] < 0.15).all()
    assert collisions[None] < collisions[0.0]
