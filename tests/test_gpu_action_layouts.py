"""How the kernels read actions (``pytest -m gpu``): the CUDA C step kernel reads each group's actions
where they lie (contiguous, or rows with any env stride), the Numba one contiguous ones; the other
layouts, ``validate_actions`` and the per-agent ``step`` go through one buffer of every agent's
actions. Every path steps twin envs of every game alike, in both action modes where a game has two."""

import pytest
import torch
from conftest import GPU_BACKENDS
from harness import random_group_actions

from gpu_marl_envs.parallel_env import GpuParallelEnv
from gpu_marl_envs.registration import GAMES

pytestmark = pytest.mark.gpu

NUM_ENVS = 64
KERNEL_BACKENDS = [b for b in GPU_BACKENDS if b != "torch"]


LAYOUTS = {
    "contiguous": lambda value: value,
    # Each env's row contiguous, rows twice as far apart: read in place too.
    "wide rows": lambda value: torch.cat([value, value], dim=1)[:, : value.shape[1]],
    # Not even a row contiguous: gathered into the buffer first.
    "strided": lambda value: torch.stack([value, value], dim=-1)[..., 0],
}


BOX_GAMES = ["SimpleSpread-v3", "SimpleTag-v3", "SimpleSpeakerListener-v4"]
"""Games with ``continuous_actions``; speaker-listener's groups have Box actions of two widths."""
CASES = [(game_id, {}) for game_id in GAMES] + [(game_id, {"continuous_actions": True}) for game_id in BOX_GAMES]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("game_id, settings", CASES, ids=[f"{g}{'-box' if s else ''}" for g, s in CASES])
def test_every_action_layout_steps_alike(game_id, settings, backend, cuda_device):
    envs = {
        name: GpuParallelEnv(
            game_id, NUM_ENVS, device=cuda_device, backend=backend, validate_actions=name == "validated", **settings
        )
        for name in [*LAYOUTS, "per agent", "validated"]
    }
    for env in envs.values():
        env.reset(seed=0)
    reference = envs["per agent"]
    generator = torch.Generator(device=cuda_device).manual_seed(1)
    for step in range(3):
        actions = random_group_actions(reference, generator)
        laid_out = {name: {g: layout(a) for g, a in actions.items()} for name, layout in LAYOUTS.items()}
        assert all(a.is_contiguous() for a in laid_out["contiguous"].values())
        assert not any(a.is_contiguous() for a in laid_out["wide rows"].values())
        per_agent = {
            agent: actions[group][:, k] for group, agents in reference.groups.items() for k, agent in enumerate(agents)
        }
        expected = reference.step(per_agent)
        outputs = {name: envs[name].step_groups(value) for name, value in laid_out.items()}
        outputs["validated"] = envs["validated"].step_groups(actions)
        for name, output in outputs.items():
            for k, what in enumerate(("observations", "rewards")):
                for group, agents in reference.groups.items():
                    want = torch.stack([expected[k][agent] for agent in agents], dim=1)
                    assert torch.equal(output[k][group], want), f"{name}, step {step}: {what}[{group}]"
