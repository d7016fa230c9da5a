"""docs/cleanrl_ppo.py, the CleanRL-style PPO example, runs end to end on a tiny budget (discrete and
continuous actions): the file users copy must not rot."""

import importlib.util
import math
import pathlib
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "cleanrl_ppo.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("cleanrl_ppo", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through sys.modules
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


# Pendulum's episodes last 200 steps: 4 rollouts of 50 steps end one per sub-env in the last rollout.
@pytest.mark.parametrize(
    "env_id, num_steps, iterations", [("gpu_marl_envs/CartPole-v1", 32, 8), ("gpu_marl_envs/Pendulum-v1", 50, 4)]
)
def test_example_runs(example, env_id, num_steps, iterations, capsys):
    args = example.Args(
        env_id=env_id,
        device="cpu",
        total_timesteps=8 * num_steps * iterations,
        num_envs=8,
        num_steps=num_steps,
        update_epochs=2,
        num_minibatches=2,
    )
    stats = example.main(args)
    assert stats["iteration"] == iterations and stats["global_step"] == args.total_timesteps
    assert stats["episodes"] > 0 and math.isfinite(stats["episodic_return"])
    assert f"iteration {iterations}/{iterations}" in capsys.readouterr().out


def test_command_line_arguments(example, monkeypatch):
    monkeypatch.setattr("sys.argv", ["cleanrl_ppo.py", "--num-envs", "4", "--learning-rate", "3e-4"])
    args = example.parse_args()
    assert args.num_envs == 4 and args.learning_rate == 3e-4 and args.env_id == "gpu_marl_envs/CartPole-v1"
