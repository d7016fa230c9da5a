"""gpu_marl_envs.wrappers against Gymnasium's own vector wrappers, on the same stream.

Two identical envs are seeded alike and given the same actions: one wrapped in our torch wrapper,
the other in ``ArrayConversion`` to numpy and Gymnasium's wrapper. Episode statistics (sums of the
same float32 rewards in float64, integer lengths), clipped and rescaled actions (the same float32
operations) must agree exactly. The normalisers' running statistics are reduced by torch in another
order than numpy's: float32 rounding, a few ulps per batch, gives them RTOL 1e-5 relative to the
values (ATOL 1e-6 for those near zero).
"""

import numpy as np
import pytest
import torch
from gymnasium.error import InvalidBound
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import vector as gym_vector
from harness import assert_close

from gpu_marl_envs import GpuVectorEnv, wrappers

NUM_ENVS, STEPS, SEED = 6, 120, 3
RTOL, ATOL = 1e-5, 1e-6


def twin_envs(env_id, mode, max_episode_steps=None):
    """Ours (torch) and the same env behind ArrayConversion (numpy), seeded alike."""

    def make():
        return GpuVectorEnv(
            env_id, NUM_ENVS, device="cpu", backend="torch", autoreset_mode=mode, max_episode_steps=max_episode_steps
        )

    return make(), gym_vector.ArrayConversion(make(), env_xp=torch, target_xp=np)


def action_stream(space, steps, scale=1.0):
    generator = torch.Generator().manual_seed(11)
    if hasattr(space, "n"):
        return [torch.randint(int(space.n), (NUM_ENVS,), generator=generator) for _ in range(steps)]
    low, high = torch.as_tensor(space.low) * scale, torch.as_tensor(space.high) * scale
    return [low + (high - low) * torch.rand((NUM_ENVS, *space.shape), generator=generator) for _ in range(steps)]


def run_both(ours, theirs, actions):
    """Yield (step, our step's outputs, theirs) for each action batch after one seeded reset."""
    assert_close(
        "reset observations", torch.as_tensor(theirs.reset(seed=SEED)[0]), ours.reset(seed=SEED)[0], "reset", RTOL, ATOL
    )
    for t, a in enumerate(actions):
        yield t, ours.step(a), theirs.step(a.numpy())


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
def test_record_episode_statistics_matches_gymnasium(mode):
    ours, theirs = twin_envs("CartPole-v1", mode, max_episode_steps=30)  # terminations and truncations
    ours, theirs = wrappers.RecordEpisodeStatistics(ours), gym_vector.RecordEpisodeStatistics(theirs)
    ended = 0
    actions = action_stream(ours.single_action_space, STEPS)
    for t, (_, _, _, _, info), (_, _, _, _, their_info) in run_both(ours, theirs, actions):
        context = f"{mode.name} step {t}"
        assert ("episode" in info) == ("episode" in their_info), f"{context}: 'episode' in one info only"
        if "episode" not in info:
            continue
        ended += int(info["_episode"].sum())
        assert_close("_episode", torch.as_tensor(their_info["_episode"]), info["_episode"].cpu(), context)
        assert_close("episode r", torch.as_tensor(their_info["episode"]["r"]), info["episode"]["r"], context, 0, 0)
        assert_close("episode l", torch.as_tensor(their_info["episode"]["l"]), info["episode"]["l"], context)
        assert info["episode"]["r"].dtype == torch.float64 and info["episode"]["l"].dtype == torch.int64
        t_ours = info["episode"]["t"]
        assert bool((t_ours[info["_episode"]] >= 0).all()) and bool((t_ours[~info["_episode"]] == 0).all()), context
    assert ended > NUM_ENVS, "too few episodes ended to compare"
    assert ours.episode_count == theirs.episode_count == ended
    assert list(ours.return_queue) == [float(r) for r in theirs.return_queue]
    assert list(ours.length_queue) == [int(n) for n in theirs.length_queue]
    assert len(ours.time_queue) == len(theirs.time_queue)


def test_record_episode_statistics_partial_reset_restarts_the_chosen_sub_envs():
    ours, theirs = twin_envs("CartPole-v1", AutoresetMode.DISABLED)
    ours, theirs = wrappers.RecordEpisodeStatistics(ours), gym_vector.RecordEpisodeStatistics(theirs)
    actions = action_stream(ours.single_action_space, 5)
    for _ in run_both(ours, theirs, actions):
        pass
    mask = np.array([True, False] * (NUM_ENVS // 2))
    ours.reset(options={"reset_mask": torch.as_tensor(mask)})
    theirs.reset(options={"reset_mask": mask})
    assert_close("episode_returns", torch.as_tensor(theirs.episode_returns), ours.episode_returns, "after the reset")
    assert_close("episode_lengths", torch.as_tensor(theirs.episode_lengths), ours.episode_lengths, "after the reset")


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "Pendulum-v1"])
def test_normalize_observation_matches_gymnasium(env_id):
    ours, theirs = twin_envs(env_id, AutoresetMode.NEXT_STEP)
    ours, theirs = wrappers.NormalizeObservation(ours), gym_vector.NormalizeObservation(theirs)
    assert ours.single_observation_space == theirs.single_observation_space
    for t, mine, other in run_both(ours, theirs, action_stream(ours.single_action_space, STEPS)):
        assert_close("normalised observations", torch.as_tensor(other[0]), mine[0], f"{env_id} step {t}", RTOL, ATOL)
    assert_close("mean", torch.as_tensor(theirs.obs_rms.mean), ours.obs_rms.mean, env_id, RTOL, ATOL)
    assert_close("var", torch.as_tensor(theirs.obs_rms.var), ours.obs_rms.var, env_id, RTOL, ATOL)
    assert float(ours.obs_rms.count) == theirs.obs_rms.count
    # Frozen statistics stay as they are, as Gymnasium's do.
    ours.update_running_mean = theirs.update_running_mean = False
    before = ours.obs_rms.mean.clone()
    for a in action_stream(ours.single_action_space, 3):
        assert_close("frozen", torch.as_tensor(theirs.step(a.numpy())[0]), ours.step(a)[0], env_id, RTOL, ATOL)
    assert torch.equal(before, ours.obs_rms.mean)


def test_normalize_observation_refuses_what_gymnasium_refuses():
    with pytest.raises(ValueError, match="NEXT_STEP or DISABLED"):
        wrappers.NormalizeObservation(
            GpuVectorEnv("CartPole-v1", 2, device="cpu", autoreset_mode=AutoresetMode.SAME_STEP)
        )
    envs = wrappers.NormalizeObservation(
        GpuVectorEnv("CartPole-v1", 2, device="cpu", autoreset_mode=AutoresetMode.DISABLED)
    )
    with pytest.raises(ValueError, match="does not support partial resets"):
        envs.reset(options={"reset_mask": torch.tensor([True, False])})
    with pytest.raises(InvalidBound, match="epsilon"):
        wrappers.NormalizeObservation(GpuVectorEnv("CartPole-v1", 2, device="cpu"), epsilon=0.0)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
def test_normalize_reward_matches_gymnasium(mode):
    ours, theirs = twin_envs("Pendulum-v1", mode, max_episode_steps=25)
    ours, theirs = wrappers.NormalizeReward(ours, gamma=0.9), gym_vector.NormalizeReward(theirs, gamma=0.9)
    for t, mine, other in run_both(ours, theirs, action_stream(ours.single_action_space, STEPS)):
        context = f"{mode.name} step {t}"
        assert mine[1].dtype == torch.float32
        assert_close("normalised rewards", torch.as_tensor(other[1]), mine[1], context, RTOL, ATOL)
        assert_close(
            "accumulated_reward",
            torch.as_tensor(theirs.accumulated_reward),
            ours.accumulated_reward,
            context,
            RTOL,
            ATOL,
        )
    assert_close("return var", torch.as_tensor(theirs.return_rms.var), ours.return_rms.var, mode.name, RTOL, 0)
    assert float(ours.return_rms.count) == theirs.return_rms.count


def test_normalize_reward_refuses_bad_arguments():
    envs = GpuVectorEnv("Pendulum-v1", 2, device="cpu")
    with pytest.raises(InvalidBound, match="gamma"):
        wrappers.NormalizeReward(envs, gamma=1.5)
    with pytest.raises(InvalidBound, match="epsilon"):
        wrappers.NormalizeReward(envs, epsilon=-1.0)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "MountainCarContinuous-v0"])
def test_clip_action_matches_gymnasium(env_id):
    ours, theirs = twin_envs(env_id, AutoresetMode.NEXT_STEP)
    ours, theirs = wrappers.ClipAction(ours), gym_vector.ClipAction(theirs)
    assert ours.single_action_space == theirs.single_action_space
    actions = action_stream(ours.env.single_action_space, 20, scale=3.0)  # most past the bounds
    for t, mine, other in run_both(ours, theirs, actions):
        assert_close(
            "clipped actions",
            torch.as_tensor(theirs.actions(actions[t].numpy())),
            ours.actions(actions[t]),
            f"step {t}",
            0,
            0,
        )
        assert_close("observations", torch.as_tensor(other[0]), mine[0], f"{env_id} step {t}", 0, 0)


@pytest.mark.parametrize(("min_action", "max_action"), [(-1.0, 1.0), (0, 5), (np.array([-0.5], np.float32), 3.0)])
def test_rescale_action_matches_gymnasium(min_action, max_action):
    ours, theirs = twin_envs("Pendulum-v1", AutoresetMode.NEXT_STEP)
    ours = wrappers.RescaleAction(ours, min_action, max_action)
    theirs = gym_vector.RescaleAction(theirs, min_action, max_action)
    assert ours.single_action_space == theirs.single_action_space
    actions = action_stream(ours.single_action_space, 20)
    for t, mine, other in run_both(ours, theirs, actions):
        assert_close(
            "rescaled actions",
            torch.as_tensor(theirs.actions(actions[t].numpy())),
            ours.actions(actions[t]),
            f"step {t}",
            0,
            0,
        )
        assert_close("observations", torch.as_tensor(other[0]), mine[0], f"step {t}", 0, 0)


def test_action_wrappers_refuse_what_gymnasium_refuses():
    with pytest.raises(InvalidBound, match="strictly smaller"):
        wrappers.RescaleAction(GpuVectorEnv("Pendulum-v1", 2, device="cpu"), 1.0, 1.0)
    with pytest.raises(TypeError, match="needs a Box action space"):
        wrappers.ClipAction(GpuVectorEnv("CartPole-v1", 2, device="cpu"))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_a_numpy_sample_of_the_action_space_steps_as_the_same_tensor(env_id):
    """``envs.step(envs.action_space.sample())``: the numpy array is copied to the device and acts
    as the same tensor would."""
    envs, twin = (GpuVectorEnv(env_id, 4, device="cpu") for _ in range(2))
    envs.reset(seed=1), twin.reset(seed=1)
    envs.action_space.seed(5)
    actions = envs.action_space.sample()
    assert isinstance(actions, np.ndarray)
    got, expected = envs.step(actions), twin.step(torch.as_tensor(actions))
    assert_close("observations", expected[0], got[0], env_id, 0, 0)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_sample_actions_draws_valid_actions_on_the_device(env_id):
    envs = GpuVectorEnv(env_id, 2000, device="cpu")
    actions = wrappers.sample_actions(envs, torch.Generator().manual_seed(0))
    assert actions.device == envs.device and actions.shape == (2000, *envs.single_action_space.shape)
    assert all(envs.single_action_space.contains(a) for a in actions.numpy()[:200])
    envs.reset(seed=0)
    envs.step(actions)  # the env's own checks accept them
    space = envs.single_action_space
    if hasattr(space, "n"):
        assert set(actions.tolist()) == set(range(int(space.n))), "every value drawn"
    else:  # uniform between the bounds: the mean in the middle
        middle = (torch.as_tensor(space.low) + torch.as_tensor(space.high)) / 2
        assert torch.allclose(actions.mean(0), middle, atol=0.1 * float(space.high[0] - space.low[0]))


def test_sample_actions_follows_a_wrappers_action_space():
    """Through RescaleAction, the draws are in the wrapper's range; through ClipAction (unbounded,
    as in Gymnasium), normal."""
    rescaled = wrappers.RescaleAction(GpuVectorEnv("Pendulum-v1", 1000, device="cpu"), 10.0, 20.0)
    actions = wrappers.sample_actions(rescaled, torch.Generator().manual_seed(0))
    assert actions.min() >= 10.0 and actions.max() <= 20.0
    clipped = wrappers.ClipAction(GpuVectorEnv("Pendulum-v1", 4000, device="cpu"))
    actions = wrappers.sample_actions(clipped, torch.Generator().manual_seed(0))
    assert abs(float(actions.mean())) < 0.1 and abs(float(actions.std()) - 1) < 0.1
