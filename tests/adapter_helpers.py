"""What the TorchRL and skrl adapters' tests share, in a module of its own so that each
runs where only its own library is installed: small games, an exact comparison, a policy network."""

from torch import nn

from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.envs.tag_gridworld import TagGridworldParams

# Small games: every rule (tags, exits, game ends by tagging and by time) within a few steps.
SMALL_TAG = {
    "TagContinuous-v0": TagContinuousParams(
        num_taggers=2,
        num_runners=3,
        num_other_agents_observed=4,
        grid_length=3.0,
        tagging_distance=0.3,
        episode_length=12,
    ),
    "TagGridworld-v0": TagGridworldParams(num_taggers=3, grid_length=4, episode_length=12),
}
# Games of Box actions and the settings that give them: a test game of two groups with one Box, and
# MPE2's cooperative navigation with its continuous actions (Box(0, 1, (5,))).
BOX_GAMES = {"glide/Glide-v0": {}, "gpu_marl_envs/SimpleSpread-v3": {"continuous_actions": True}}


def assert_equal(name, expected, actual):
    assert expected.shape == actual.shape, f"{name}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    bad = expected != actual
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{name} differs first at {index}: {actual[index].item()!r}, expected "
            f"{expected[index].item()!r} ({int(bad.sum())} elements differ)"
        )


def mlp(n_in: int, n_out: int, hidden: int = 64) -> nn.Module:
    return nn.Sequential(
        nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_out)
    )
