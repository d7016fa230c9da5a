"""The ``gpu-marl-train`` command with tiny budgets: the files a run leaves, evaluation of its
checkpoint, and clear errors for bad configs."""

import csv
import subprocess
import sys

import pytest
import torch
from gpu_marl_envs.baselines import checkpoint, plotting, run_config, train
from PIL import Image


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "gpu_marl_envs.baselines.train", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    "config, overrides",
    [
        ("cartpole_ppo.toml", ["num_steps=16"]),
        ("acrobot_a2c.toml", ["num_steps=16"]),
        ("pendulum_ddpg.toml", ["learning_starts=512", "batch_size=64"]),
        ("pendulum_td3.toml", ["learning_starts=1536", "batch_size=32", "gradient_steps=1"]),
    ],
)
def test_training_run_leaves_metrics_curve_and_checkpoint(config, overrides, tmp_path):
    path = run_config.CONFIGS / config
    out = tmp_path / "run"
    sets = [arg for override in overrides for arg in ("--set", override)]
    result = run(
        "--config",
        str(path),
        "--set",
        "total_timesteps=2048",
        *sets,
        "--seed",
        "3",
        "--device",
        "cpu",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    assert "greedy mean return" in result.stdout
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert rows and int(rows[-1]["env_steps"]) <= 2048 and float(rows[-1]["seconds"]) > 0
    curve = Image.open(out / "learning_curve.png")
    assert curve.format == "PNG" and curve.size == (plotting.WIDTH, plotting.HEIGHT)
    resolved = run_config.tomllib.loads((out / "config.toml").read_text())
    assert resolved["hyperparameters"]["seed"] == 3 and resolved["hyperparameters"]["total_timesteps"] == 2048
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=False)
    assert checkpoint["config"]["total_timesteps"] == 2048 and checkpoint["history"]
    evaluation = run("--evaluate", str(out / "checkpoint.pt"), "--episodes", "2", "--device", "cpu")
    assert evaluation.returncode == 0, evaluation.stderr
    assert "mean return" in evaluation.stdout


def test_checkpoint_round_trip_gives_the_same_policy(tmp_path):
    result = run("--env", "CartPole-v1", "--set", "total_timesteps=1024", "--device", "cpu", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    agent, env = train.load_agent(checkpoint.load_checkpoint(tmp_path / "checkpoint.pt"), "cpu")
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["model"]
    assert env == "CartPole-v1"
    for name, value in agent.state_dict().items():
        assert torch.equal(value, saved[name]), name


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "CartPole-v1", "--set", "bogus=1"], "unknown ppo hyper-parameters"),
        (["--env", "CartPole-v1", "--set", "num_envs=0"], "num_envs"),
        (["--env", "CartPole-v1", "--set", "novalue"], "key=value"),
        (["--env", "MountainCar-v0"], "no shipped config"),
    ],
)
def test_bad_configs_get_clear_errors(args, message, tmp_path):
    result = run(*args, "--device", "cpu", "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_bad_config_files(tmp_path):
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("env = \n")
    unknown_key = tmp_path / "unknown.toml"
    unknown_key.write_text('env = "CartPole-v1"\nalgorithm = "ppo"\nschedule = 1\n')
    bad_algorithm = tmp_path / "algorithm.toml"
    bad_algorithm.write_text('env = "CartPole-v1"\nalgorithm = "trpo"\n')
    for path, message in [
        (bad_toml, "not valid TOML"),
        (unknown_key, "unknown top-level keys"),
        (bad_algorithm, "algorithm must be one of"),
        (tmp_path / "missing.toml", "cannot read"),
    ]:
        result = run("--config", str(path), "--device", "cpu", "--out", str(tmp_path / "run"))
        assert result.returncode == 2 and message in result.stderr, (path, result.stderr)


def test_atomic_save_keeps_the_old_file_on_failure(tmp_path):
    path = tmp_path / "checkpoint.pt"
    checkpoint.atomic_save({"a": 1}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle")

    with pytest.raises(RuntimeError):
        checkpoint.atomic_save({"a": Unpicklable()}, path)
    assert torch.load(path, weights_only=True) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"], "a failed save left a temporary file"


@pytest.mark.parametrize(
    "env_args",
    [
        ["--env", "gpu_marl_envs/CartPole-v1", "--set", "num_steps=16"],  # the id as gym.make takes it
        [
            "--env",
            "TagContinuous-v0",
            "--set",
            "num_envs=2",
            "--set",
            "num_steps=8",
            "--set",
            "env_params.num_taggers=1",
            "--set",
            "env_params.num_runners=2",
            "--set",
            "env_params.num_other_agents_observed=2",
            "--set",
            "policies.taggers.hidden=[8]",
            "--set",
            "policies.runners.hidden=[8]",
        ],
    ],
    ids=["ppo", "tag"],
)
def test_resume_continues_a_run_in_its_folder(env_args, tmp_path):
    out = tmp_path / "run"
    first = run(*env_args, "--set", "total_timesteps=256", "--device", "cpu", "--out", str(out))
    assert first.returncode == 0, first.stderr
    saved = torch.load(out / "checkpoint.pt", weights_only=False)
    rows_before = list(csv.DictReader(open(out / "metrics.csv")))
    resumed = run("--resume", str(out / "checkpoint.pt"), "--set", "total_timesteps=512", "--device", "cpu")
    assert resumed.returncode == 0, resumed.stderr
    again = torch.load(out / "checkpoint.pt", weights_only=False)
    assert again["iteration"] == 2 * saved["iteration"]
    assert again["history"][: len(saved["history"])] == saved["history"]
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert rows[: len(rows_before)] == rows_before and int(rows[-1]["env_steps"]) == again["history"][-1]["env_steps"]
    assert again["history"][-1]["env_steps"] > saved["history"][-1]["env_steps"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    steps = [e.step for e in events.Scalars("mean_return")]
    assert sorted(steps) == [int(row["env_steps"]) for row in rows], "each entry once in TensorBoard"
    # Resumed once more, finished: it says so and trains (and writes) nothing.
    finished = run("--resume", str(out / "checkpoint.pt"), "--device", "cpu")
    assert finished.returncode == 0 and "the run has finished" in finished.stdout, finished.stdout + finished.stderr
    assert "--set total_timesteps=N (N > 512)" in finished.stdout
    assert torch.load(out / "checkpoint.pt", weights_only=False)["history"] == again["history"]
    assert list(csv.DictReader(open(out / "metrics.csv"))) == rows


def test_resume_keeps_the_config(tmp_path):
    out = tmp_path / "run"
    assert (
        run("--env", "CartPole-v1", "--set", "total_timesteps=512", "--device", "cpu", "--out", str(out)).returncode
        == 0
    )
    for extra, message in [
        (["--set", "num_envs=8"], "only --set total_timesteps"),
        (["--seed", "4"], "only --set total_timesteps"),
    ]:
        result = run("--resume", str(out / "checkpoint.pt"), *extra, "--device", "cpu")
        assert result.returncode == 2 and message in result.stderr, result.stderr
    checkpoint.save_checkpoint({"model": {}}, tmp_path / "weights.pt")
    result = run("--resume", str(tmp_path / "weights.pt"), "--device", "cpu", "--out", str(tmp_path / "new"))
    assert result.returncode == 2 and "holds no training state to resume from" in result.stderr, result.stderr


def test_metrics_go_to_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    result = run(
        "--env",
        "CartPole-v1",
        "--set",
        "total_timesteps=1024",
        "--set",
        "num_steps=16",
        "--device",
        "cpu",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    returns = events.Scalars("mean_return")
    assert [e.step for e in returns] == [int(row["env_steps"]) for row in rows]
    assert [e.value for e in returns] == pytest.approx([float(row["mean_return"]) for row in rows])
    assert "value_loss" in events.Tags()["scalars"]
