"""rgb_array frames of the classic-control envs: the same pixels as Gymnasium's own env in the same
state, for the numpy env and for chosen sub-envs of the batch; and the recorders people use with
them (Gymnasium's RecordVideo, SB3's make_vec_env + VecVideoRecorder) run over ours."""

import re

import gymnasium
import numpy as np
import pytest
import torch
from harness import random_actions

from gpu_marl_envs import GpuVectorEnv

STEPS = 12


def state_of(env) -> np.ndarray:
    return np.array(list(env.get_state().values()), dtype=np.float64)


def first_difference(expected: np.ndarray, actual: np.ndarray) -> str:
    if expected.shape != actual.shape:
        return f"shapes {expected.shape} vs {actual.shape}"
    bad = np.argwhere((expected != actual).any(axis=-1))
    if not len(bad):
        return ""
    y, x = bad[0]
    return f"{len(bad)} pixels differ, first at (row {y}, column {x}): {expected[y, x]} vs {actual[y, x]}"


def test_frames_match_gymnasium(env_id):
    """Each step Gymnasium's env is given our state and both take the same action; the frames of the
    reset state and of every step are pixel for pixel Gymnasium's (Pendulum's torque arrow included)."""
    ours = gymnasium.make(f"gpu_marl_envs/{env_id}", render_mode="rgb_array")
    theirs = gymnasium.make(env_id, render_mode="rgb_array").unwrapped
    assert ours.metadata["render_fps"] == theirs.metadata["render_fps"]
    theirs.reset(seed=3)
    ours.reset(seed=3)
    ours.unwrapped.set_state(dict(zip(ours.unwrapped.get_state(), theirs.state.astype(np.float32).tolist())))
    theirs.state = state_of(ours.unwrapped)
    generator = torch.Generator().manual_seed(0)
    for t in range(STEPS + 1):
        if t:
            action = random_actions(ours.action_space, 1, generator)[0].numpy()
            action = int(action) if isinstance(ours.action_space, gymnasium.spaces.Discrete) else action
            theirs.state = state_of(ours.unwrapped)
            ours.step(action)
            theirs.step(action)
        mismatch = first_difference(theirs.render(), ours.render())
        assert not mismatch, f"{env_id} step {t}: {mismatch}"


def test_batch_renders_chosen_sub_envs(env_id):
    """``render_env_indices`` picks the sub-envs; each frame is Gymnasium's own in that sub-env's state
    (and, for Pendulum, with its last torque)."""
    chosen = (4, 1)
    batch = GpuVectorEnv(env_id, 5, device="cpu", render_mode="rgb_array", render_env_indices=list(chosen))
    batch.reset(seed=7)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        actions = random_actions(batch.single_action_space, 5, generator)
        batch.step(actions)
    frames = batch.render()
    assert isinstance(frames, tuple) and len(frames) == len(chosen)
    theirs = gymnasium.make(env_id, render_mode="rgb_array").unwrapped
    theirs.reset(seed=0)
    state = batch.get_state()
    for frame, index in zip(frames, chosen):
        theirs.state = np.array([float(values[index]) for values in state.values()])
        if env_id == "Pendulum-v1":
            theirs.last_u = float(actions[index].clamp(-2.0, 2.0)[0])  # Gymnasium draws the clipped torque
        mismatch = first_difference(theirs.render(), frame)
        assert not mismatch, f"{env_id} sub-env {index}: {mismatch}"


def test_render_mode_none_renders_nothing(env_id):
    assert GpuVectorEnv(env_id, 2, device="cpu").render() is None
    assert gymnasium.make(f"gpu_marl_envs/{env_id}").unwrapped.render() is None


@pytest.mark.parametrize("indices", [5, [0, 5], [], [1, 1], -1, True, [0.5]])
def test_bad_render_env_indices(indices):
    with pytest.raises(ValueError, match=re.escape("render_env_indices must be an int or a non-empty sequence")):
        GpuVectorEnv("CartPole-v1", 5, device="cpu", render_mode="rgb_array", render_env_indices=indices)


def test_gymnasium_record_video(tmp_path):
    env = gymnasium.wrappers.RecordVideo(
        gymnasium.make("gpu_marl_envs/CartPole-v1", render_mode="rgb_array"),
        str(tmp_path / "videos"),
        episode_trigger=lambda episode: True,
        disable_logger=True,
    )
    env.reset(seed=0)
    for _ in range(20):
        if any(env.step(env.action_space.sample())[2:4]):
            break
    env.close()
    videos = list((tmp_path / "videos").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000, videos


@pytest.mark.parametrize("maker", ["make_vec_env", "make_sb3_env"])
def test_sb3_video_recorder(maker, tmp_path):
    """SB3's own helper asks each env for render_mode="rgb_array"; the SB3 adapter draws the sub-envs
    of render_env_indices. SB3 tiles the frames and its recorder writes them."""
    from gpu_marl_envs.adapters import make_sb3_env
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecVideoRecorder

    if maker == "make_vec_env":
        vec_env = make_vec_env("gpu_marl_envs/CartPole-v1", n_envs=8, seed=0)
        tiles = (3, 3)  # 8 frames of 600 x 400, tiled 3 x 3
    else:
        vec_env = make_sb3_env(
            "gpu_marl_envs/CartPole-v1", 8, device="cpu", render_mode="rgb_array", render_env_indices=[0, 5]
        )
        tiles = (2, 1)
    assert vec_env.render_mode == "rgb_array"
    recorder = VecVideoRecorder(vec_env, str(tmp_path), record_video_trigger=lambda step: step == 0, video_length=10)
    recorder.reset()
    for _ in range(12):
        recorder.step(np.array([vec_env.action_space.sample() for _ in range(8)]))
    assert vec_env.render().shape == (tiles[0] * 400, tiles[1] * 600, 3)
    recorder.close()
    videos = list(tmp_path.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000, videos
