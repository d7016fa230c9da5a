"""baselines/obs_norm.py: the running statistics against numpy's over the rows seen, weights,
clipping, checkpoints, and a multi-agent run that normalises one policy's observations."""

import numpy as np
import pytest
import torch
from gpu_marl_envs.baselines import multi_agent
from gpu_marl_envs.baselines.models import ActorCritic
from gpu_marl_envs.baselines.obs_norm import ObservationNormalizer
from gymnasium import spaces

from tests.test_multi_agent_training import config


def test_merged_batches_give_the_mean_and_variance_of_all_rows_that_count():
    generator = torch.Generator().manual_seed(0)
    norm = ObservationNormalizer(3)
    scale, offset = torch.tensor([1e-2, 5.0, 1.0]), torch.tensor([0.0, 100.0, -2.0])
    batches = [torch.randn(2, 50, 3, generator=generator) * scale + offset for _ in range(3)]
    weights = [torch.rand(2, 50, generator=generator) > 0.3 for _ in range(3)]
    for rows, counted in zip(batches, weights):
        norm.update(rows, counted.float())
    kept = np.concatenate([rows[counted].numpy() for rows, counted in zip(batches, weights)]).astype(np.float64)
    assert norm.count.item() == len(kept)
    np.testing.assert_allclose(norm.mean.numpy(), kept.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), kept.var(0), rtol=1e-6)
    scaled = norm(torch.from_numpy(kept).float())
    np.testing.assert_allclose(scaled.mean(0).numpy(), 0.0, atol=1e-4)
    np.testing.assert_allclose(scaled.std(0, unbiased=False).numpy(), 1.0, rtol=1e-3)


def test_a_batch_without_rows_that_count_changes_nothing():
    norm = ObservationNormalizer(2)
    norm.update(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
    before = {name: value.clone() for name, value in norm.state_dict().items()}
    norm.update(torch.tensor([[50.0, 50.0]]), torch.zeros(1))
    for name, value in norm.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_features_far_from_what_was_seen_are_clipped():
    norm = ObservationNormalizer(1)
    norm.update(torch.tensor([[0.0], [2.0]]))  # mean 1, variance 1
    assert norm(torch.tensor([[1e6], [-1e6], [3.0]])).flatten().tolist() == [10.0, -10.0, 2.0]


def test_the_statistics_are_saved_with_the_policy():
    policy = ActorCritic(3, spaces.Discrete(2), (16, 16), normalize_observations=True)
    policy.obs_norm.update(torch.randn(40, 3) * 7 + 3)
    restored = ActorCritic(3, spaces.Discrete(2), (16, 16), normalize_observations=True)
    restored.load_state_dict(policy.state_dict())
    obs = torch.randn(5, 3)
    assert torch.equal(restored.value(obs), policy.value(obs))
    with pytest.raises(RuntimeError, match="obs_norm"):  # a checkpoint without the statistics is refused
        restored.load_state_dict(ActorCritic(3, spaces.Discrete(2), (16, 16)).state_dict())


def test_a_run_merges_every_rollout_into_its_policys_statistics():
    policies = {"taggers": {"hidden": [16], "normalize_observations": True}, "runners": {"hidden": [16]}}
    run = config(policies=policies, num_envs=4, num_steps=8, total_timesteps=64)  # two rollouts
    trained, history = multi_agent.train("TagContinuous-v0", run, backend="torch", log=None)
    taggers = trained["taggers"].obs_norm
    # Two taggers in each of 4 games for 16 steps; a tagger never leaves the game, so every row counts.
    assert taggers.count.item() == 2 * 4 * 16
    assert torch.all(taggers.var >= 0) and taggers.var.max() > 0 and trained["runners"].obs_norm is None
    assert all(np.isfinite(value) for entry in history for value in entry.values())
