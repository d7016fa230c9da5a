"""Helpers shared by the equivalence tests: random actions and comparisons whose failure message
names the first element that differs."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

# Twins run the same float32 operations in the same order; they differ only where a compiler
# fuses a multiply-add or a math library rounds sin/cos differently: a few ulps per step. The
# absolute term covers an observation near zero computed from a large state value: Pendulum's
# angle is never wrapped and grows past 60 rad in long episodes, where one ulp is 4e-6 and
# cos(theta) moves by as much.
TWIN_RTOL, TWIN_ATOL = 1e-5, 1e-5


def random_actions(space: spaces.Space, num_envs: int, generator: torch.Generator, device="cpu") -> torch.Tensor:
    """Valid discrete actions; continuous ones spread 50% past the bounds, to exercise clipping."""
    if isinstance(space, spaces.Discrete):
        return torch.randint(0, int(space.n), (num_envs,), generator=generator).to(device)
    low = torch.as_tensor(space.low) * 1.5
    high = torch.as_tensor(space.high) * 1.5
    return (low + (high - low) * torch.rand((num_envs, *space.shape), generator=generator)).to(device)


def random_group_actions(env, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Valid random actions of a batched multi-agent env (``GpuParallelEnv``) keyed by group,
    ``(num_envs, group_size, *action_shape)`` int64, contiguous, on the env's device."""
    actions = {}
    for group, agents in env.groups.items():
        space = env.action_space(agents[0])
        highs = [int(space.n)] if space.shape == () else [int(n) for n in space.nvec]
        columns = [torch.randint(0, h, (env.num_envs, len(agents)), generator=generator, device=env.device)
                   for h in highs]
        actions[group] = columns[0] if space.shape == () else torch.stack(columns, dim=-1)
    return actions


def assert_close(name: str, expected: torch.Tensor, actual: torch.Tensor, context: str, rtol=TWIN_RTOL, atol=TWIN_ATOL):
    expected, actual = expected.cpu(), actual.cpu()
    assert expected.shape == actual.shape, f"{context}: {name} shapes {tuple(expected.shape)} vs {tuple(actual.shape)}"
    if expected.dtype == torch.bool or not expected.is_floating_point():
        bad = expected != actual
    else:
        bad = ~torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol)
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        where = f"env {index[0]}" + (f", feature {index[1]}" if len(index) > 1 else "")
        raise AssertionError(f"{context}: {name} differ first at {where}: expected {expected[index].item()!r}, "
                             f"got {actual[index].item()!r} ({int(bad.sum())} elements differ)")


def compare_step(reference, twin, context: str) -> None:
    """Compare two ``step`` results (obs, rewards, terminated, truncated, infos)."""
    for name, e, a in zip(("observations", "rewards", "terminated", "truncated"), reference[:4], twin[:4]):
        assert_close(name, e, a, context)
    assert reference[4].keys() == twin[4].keys(), f"{context}: infos keys {reference[4].keys()} vs {twin[4].keys()}"
    if "_final_obs" in reference[4]:
        mask = reference[4]["_final_obs"]
        assert_close("infos['_final_obs']", mask, twin[4]["_final_obs"], context)
        assert_close("infos['final_obs']", reference[4]["final_obs"][mask], twin[4]["final_obs"][mask], context)


def snapshot(step_result):
    """Clone a step's outputs (the env overwrites them in place on the next call)."""
    obs, rewards, terminated, truncated, infos = step_result
    return (obs.clone(), rewards.clone(), terminated.clone(), truncated.clone(), {k: v.clone() for k, v in infos.items()})


def state_matrix(env) -> np.ndarray:
    """(num_envs, num_fields) float64 copy of the env's state, in state_fields order."""
    state = env.get_state()
    return torch.stack([state[f] for f in env.state_fields], dim=1).double().cpu().numpy()
