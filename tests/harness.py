"""Helpers shared by the equivalence tests: random actions and comparisons whose failure message
names the first element that differs."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import numpy as np
import torch

from gpu_marl_envs.checker import random_actions, random_group_actions  # noqa: F401  (the tests' too)

# Twins run the same float32 operations in the same order; they differ only where a compiler
# fuses a multiply-add or a math library rounds sin/cos differently: a few ulps per step. The
# absolute term covers an observation near zero computed from a large state value: Pendulum's
# angle is never wrapped and grows past 60 rad in long episodes, where one ulp is 4e-6 and
# cos(theta) moves by as much.
TWIN_RTOL, TWIN_ATOL = 1e-5, 1e-5


def assert_close(name: str, expected: torch.Tensor, actual: torch.Tensor, context: str, rtol=TWIN_RTOL, atol=TWIN_ATOL):
    assert expected.shape == actual.shape, f"{context}: {name} shapes {tuple(expected.shape)} vs {tuple(actual.shape)}"
    # Compared where expected lies, copied to the host only to report: on a GPU, host compares of
    # every output at every step tied the GPU tests to the host's CPU threads (ten test processes
    # side by side, each with an OpenMP thread per core, ran 100 times slower).
    actual = actual.to(expected.device)
    if expected.dtype == torch.bool or not expected.is_floating_point():
        bad = expected != actual
    else:
        bad = ~torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol)
    if bad.any():
        expected, actual, bad = expected.cpu(), actual.cpu(), bad.cpu()
        index = tuple(int(i) for i in bad.nonzero()[0])
        where = f"env {index[0]}" + (f", feature {index[1]}" if len(index) > 1 else "")
        raise AssertionError(
            f"{context}: {name} differ first at {where}: expected {expected[index].item()!r}, "
            f"got {actual[index].item()!r} ({int(bad.sum())} elements differ)"
        )


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
    return (
        obs.clone(),
        rewards.clone(),
        terminated.clone(),
        truncated.clone(),
        {k: v.clone() for k, v in infos.items()},
    )


def state_matrix(env) -> np.ndarray:
    """(num_envs, num_fields) float64 copy of the env's state, in state_fields order."""
    state = env.get_state()
    return torch.stack([state[f] for f in env.state_fields], dim=1).double().cpu().numpy()


def game_twins(env_id, num_envs, params, backend, mode, cuda_graph, reference_pairs, reference_envs=256):
    """A game of ``num_envs`` envs on ``backend`` and its torch reference over the first ``k`` of
    them, both on the GPU, without action checks: ``(kernel_env, reference, k)``; ``k`` is as many
    envs as the reference may hold, at most ``reference_envs`` of ``reference_pairs`` agent pairs."""
    from gpu_marl_envs import GpuParallelEnv

    device = torch.device("cuda")
    kernel_env = GpuParallelEnv(
        env_id,
        num_envs,
        device=device,
        backend=backend,
        params=params,
        autoreset_mode=mode,
        validate_actions=False,
        cuda_graph=cuda_graph,
    )
    k = min(num_envs, reference_envs, max(1, reference_pairs // params.num_agents**2))
    reference = GpuParallelEnv(
        env_id,
        k,
        device=device,
        backend="torch",
        params=params,
        autoreset_mode=mode,
        validate_actions=False,
        cuda_graph=False,
    )
    return kernel_env, reference, k


def child_steps(backend: str) -> str:
    """Python source for a child process (the on-disk kernel cache tests): CartPole-v1 (64 envs) and
    SimpleSpread-v3 (16 games) on ``backend``, reset from seed 1 and stepped 30 times, leaving
    ``env``, ``observations``, ``game`` and ``group_observations``; ``torch`` and ``gpu_marl_envs``
    imported before it."""
    return f"""env = gpu_marl_envs.GpuVectorEnv("CartPole-v1", 64, device="cuda", backend="{backend}")
observations, _ = env.reset(seed=1)
for _ in range(30):
    observations, *_ = env.step(torch.ones(64, dtype=torch.long, device="cuda"))
game = gpu_marl_envs.make_parallel("gpu_marl_envs/SimpleSpread-v3", 16, device="cuda", backend="{backend}")
group_observations, _ = game.reset_groups(seed=1)
for k in range(30):
    actions = {{g: torch.full((16, len(agents)), k % 5, device="cuda") for g, agents in game.groups.items()}}
    group_observations, *_ = game.step_groups(actions)
torch.cuda.synchronize()
"""


def run_child(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``script`` (Python source) run by a fresh process with ``args`` as its arguments and the
    environment ``env`` (this one's by default), from outside the checkout, whose gpu_marl_envs/
    folder would shadow the installed package; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode == 0, done.stderr
    return done


def run_twice(script: str, env: dict[str, str]) -> tuple[dict, dict]:
    """The JSON each of two fresh processes running ``script`` (Python source) prints last, with the
    environment ``env``: a first process that fills a cache and a second that should load from it."""
    first, second = (json.loads(run_child(script, env=env).stdout.splitlines()[-1]) for _ in range(2))
    return first, second
