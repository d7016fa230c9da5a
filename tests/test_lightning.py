"""Training through PyTorch Lightning's Trainer (gpu_marl_envs.baselines.lightning): the same
parameters as the trainers' own ``train`` with the same seed, iteration by iteration; Tag's two
policies with two optimizers; Lightning's loggers, callbacks and checkpoints (resumed through
``ckpt_path``); two DDP processes on the CPU (gloo); ``gpu-marl-train --lightning``'s run folder;
clear errors. The same on CUDA with graphs under the gpu marker."""

from __future__ import annotations

import contextlib
import copy
import csv
import json
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from gpu_marl_envs.baselines import checkpoint, ddpg, multi_agent, ppo, train
from gpu_marl_envs.baselines.lightning import (
    CHECKPOINT_KEY,
    AtomicCheckpointIO,
    RolloutUpdate,
    TrainingStats,
    module_from_config,
    training_module,
)
from gpu_marl_envs.baselines.run_config import ConfigError, build_config, read_config
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

# Tiny training loops: one torch thread, which a busy machine does not stall (conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")
WORKER = Path(__file__).with_name("lightning_worker.py")
QUIET = {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False, "enable_model_summary": False}


def trainer(device="cpu", **options) -> pl.Trainer:
    accelerator = "gpu" if torch.device(device).type == "cuda" else "cpu"
    return pl.Trainer(
        accelerator=accelerator, devices=1, **{"max_epochs": 1, "log_every_n_steps": 1, **QUIET, **options}
    )


def parameters(modules: dict) -> dict[str, torch.Tensor]:
    return {
        f"{name}.{key}": value.detach().clone()
        for name, module in modules.items()
        for key, value in module.state_dict().items()
    }


DDPG_NETWORKS = ("model", "critic", "target_actor", "target_critic")
"""The networks of a DDPG or TD3 training state."""


def saved_parameters(state: dict) -> dict[str, torch.Tensor]:
    """The networks of a training state (the trainers' ``save``), copied (they are the live tensors)."""
    return {
        f"{name}.{key}": value.clone()
        for name, part in state.items()
        if name in DDPG_NETWORKS or name.startswith("policy/")
        for key, value in part.items()
    }


def without_timings(history: list[dict]) -> list[dict]:
    return [{key: value for key, value in entry.items() if not key.endswith("seconds")} for entry in history]


class Stop(Exception):
    pass


def train_iterations(trainer_module, env_id: str, config, iterations: int, device="cpu"):
    """The trainer's own ``train`` for its first ``iterations``: the networks after each, and the history."""
    states, history = [], []

    def save(state):
        if state["iteration"] > 0:
            states.append(saved_parameters(state))
        if state["iteration"] == iterations:
            raise Stop

    with contextlib.suppress(Stop):
        trainer_module.train(env_id, config, device=device, log_every=1, log=history.append, save=save)
    return states, history


class Snapshots(pl.Callback):
    """The networks after every training step."""

    def __init__(self):
        self.states = []

    def on_train_batch_end(self, trainer, module, *args):
        self.states.append(saved_parameters(module.training_state()))


def assert_same(expected: list[dict], actual: list[dict]) -> None:
    assert len(expected) == len(actual) > 0, (len(expected), len(actual))
    for iteration, (a, b) in enumerate(zip(expected, actual)):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), f"after iteration {iteration + 1}, {key} differs"


README_RUN = ["total_timesteps=100000"]
"""The README's first command: the shipped CartPole config with 100k env steps (195 iterations)."""


def cartpole(device="cpu", iterations=4, log_mean_return=True):
    """The README's CartPole run for its first ``iterations`` (the learning-rate schedule is the
    full run's) through ``ppo.train`` and through Lightning (``max_steps``: one step an
    iteration); both networks and the greedy returns of both."""
    _, env_id, config = build_config(read_config(None, "CartPole-v1"), README_RUN, seed=0)
    expected, history = train_iterations(ppo, env_id, config, iterations, device)
    module, snapshots = training_module(env_id, config, log_mean_return=log_mean_return), Snapshots()
    fit = trainer(device, max_steps=iterations, callbacks=[snapshots])
    fit.fit(module)
    assert fit.global_step == iterations and module.next_iteration == iterations
    if log_mean_return:
        assert float(fit.callback_metrics["mean_return"]) == module.history[-1]["mean_return"]
    else:
        assert "mean_return" not in fit.callback_metrics
    assert_same(expected, snapshots.states)
    assert without_timings(module.history) == without_timings(history)
    agent = module.agent.to(device)  # Lightning moves the module to the CPU at the end
    trained = copy.deepcopy(agent)  # ppo.train's agent: its last saved parameters
    trained.load_state_dict({key.removeprefix("model."): value for key, value in expected[-1].items()})
    assert torch.equal(ppo.evaluate(agent, env_id, device=device), ppo.evaluate(trained, env_id, device=device))


def test_cartpole_through_lightning_is_ppo_train_iteration_by_iteration():
    """Equality, not a threshold: the integration changes nothing about learning. The README's
    budget is 195 iterations; the first 4 of that run (its schedule) keep the test short."""
    cartpole()


def test_without_self_log_the_run_is_the_same():
    """log_mean_return=False (gpu-marl-train --lightning's module) only leaves Lightning's metrics out."""
    cartpole(log_mean_return=False)


def off_policy(config_type, device="cpu") -> list[int]:
    """DDPG or TD3 on Pendulum through ``ddpg.train`` and through Lightning: every network (actor,
    critic or TD3's pair, targets) after every iteration, random acting first, then three gradient
    steps an iteration with the actor at every second; the same history. Returns the graphs each
    phase had at the last training step."""
    config = config_type(
        num_envs=4,
        total_timesteps=4 * 6,
        learning_starts=8,
        batch_size=8,
        buffer_size=64,
        gradient_steps=3,
        hidden=(8,),
    )
    expected, history = train_iterations(ddpg, "Pendulum-v1", config, 6, device)
    module, snapshots, pieces = training_module("Pendulum-v1", config), Snapshots(), PiecesAtEnd()
    fit = trainer(device, callbacks=[snapshots, pieces])
    fit.fit(module)
    assert module.algorithm == ("td3" if config_type is ddpg.TD3Config else "ddpg")
    assert fit.global_step == 4, "one Lightning step a learning iteration (the 3rd to the 6th)"
    assert_same(expected, snapshots.states)
    assert repr(without_timings(module.history)) == repr(without_timings(history))  # repr: the first losses are NaN
    assert [phase.pieces for phase in module.graphed_phases] == [0] * len(pieces.captured), "released at the end"
    return pieces.captured


@pytest.mark.parametrize("config_type", [ddpg.DDPGConfig, ddpg.TD3Config])
def test_ddpg_and_td3_through_lightning_are_train_iteration_by_iteration(config_type):
    assert off_policy(config_type) == [0, 0, 0, 0], "on the CPU: no graphs (the two kinds of acting, two updates)"


TAG = multi_agent.MultiAgentConfig.from_dict(
    {
        "hyperparameters": {"num_envs": 2, "num_steps": 8, "total_timesteps": 2 * 8 * 4},
        "groups": {"taggers": "taggers", "runners": "runners"},
        "policies": {
            "taggers": {
                "algorithm": "ppo",
                "hidden": [8],
                "num_minibatches": 2,
                "update_epochs": 2,
                "normalize_observations": True,
                "ent_coef": [[0, 0.5], [48, 0.05]],
            },
            "runners": {"algorithm": "a2c", "hidden": [8]},
        },
        "env_params": {"num_taggers": 1, "num_runners": 2, "num_other_agents_observed": 2},
    }
)


def test_tag_trains_its_two_policies_with_two_optimizers(tmp_path):
    expected, history = train_iterations(multi_agent, "TagContinuous-v0", TAG, 4)
    module, snapshots = training_module("TagContinuous-v0", TAG), Snapshots()
    start = copy.deepcopy(multi_agent.make_policies("TagContinuous-v0", TAG))  # not the run's: only their keys
    loggers = [CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")]
    fit = trainer(logger=loggers, callbacks=[snapshots, TrainingStats(verbose=False)])
    fit.fit(module)
    # One optimizer per policy, each the policy's Adam, stepped once per iteration (its update).
    assert [type(o) for o in fit.optimizers] == [RolloutUpdate, RolloutUpdate]
    assert [o.base for o in fit.optimizers] == [module.run.optimizers["taggers"], module.run.optimizers["runners"]]
    assert fit.global_step == 2 * 4
    assert set(module.state_dict()) == {f"policies.{key}" for key in parameters(start)}
    assert_same(expected, snapshots.states)
    assert without_timings(module.history) == without_timings(history)
    # Every entry in both loggers, with the callback's env steps per second.
    rows = list(csv.DictReader(open(Path(fit.loggers[0].log_dir) / "metrics.csv")))
    entries = [row for row in rows if row["env_steps"]]
    rates = [row for row in rows if row["env_steps_per_second"]]
    assert [(int(row["step"]), float(row["env_steps"])) for row in entries] == [(i, 16.0 * (i + 1)) for i in range(4)]
    assert all(row["mean_return/runners"] and row["taggers/approx_kl"] for row in entries)
    assert [int(row["step"]) for row in rates] == [0, 1, 2, 3] and all(
        float(row["env_steps_per_second"]) > 0 for row in rates
    )
    assert float(fit.callback_metrics["mean_return"]) == module.history[-1]["mean_return"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(fit.loggers[1].log_dir)
    events.Reload()
    assert [e.value for e in events.Scalars("env_steps")] == [16.0, 32.0, 48.0, 64.0]
    assert {"taggers/approx_kl", "runners/value_loss", "env_steps_per_second"} <= set(events.Tags()["scalars"])


CASES = {
    "ppo": (
        "CartPole-v1",
        ppo.PPOConfig(
            num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, num_minibatches=2, update_epochs=2, hidden=(8,)
        ),
    ),
    "ddpg": (
        "Pendulum-v1",
        ddpg.DDPGConfig(
            num_envs=4, total_timesteps=4 * 6, learning_starts=8, batch_size=8, buffer_size=64, hidden=(8, 8)
        ),
    ),
    "tag": ("TagContinuous-v0", TAG.__class__(**{**TAG.__dict__, "total_timesteps": 2 * 8 * 6})),
}


@pytest.mark.parametrize("case", CASES)
def test_resume_through_ckpt_path_continues_the_step_count(case, tmp_path):
    env_id, config = CASES[case]
    first = training_module(env_id, config)
    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    stopped = trainer(
        max_steps={"ppo": 3, "ddpg": 1, "tag": 6}[case],
        enable_checkpointing=True,
        callbacks=[every],
        plugins=[AtomicCheckpointIO()],
    )
    stopped.fit(first)
    # 3 iterations: PPO steps once an iteration, Tag twice, DDPG once from its 3rd (learning_starts): its
    # iteration's gradient steps, the critic's and the actor's, are one update.
    assert first.next_iteration == 3
    path = tmp_path / f"step={stopped.global_step}.ckpt"  # the last of those ModelCheckpoint wrote
    saved = torch.load(path, weights_only=False)
    assert saved[CHECKPOINT_KEY]["iteration"] == 3 and saved["global_step"] == stopped.global_step
    assert not list(tmp_path.glob(".*.tmp")), "a checkpoint left a temporary file"

    class Restored(pl.Callback):
        def on_train_start(self, trainer, module):
            self.global_step, self.iteration = trainer.global_step, module.next_iteration
            self.state = {key: value.clone() for key, value in module.state_dict().items()}

    restored, resumed = Restored(), training_module(env_id, config)
    continued = trainer(callbacks=[restored])
    continued.fit(resumed, ckpt_path=path)
    assert (restored.global_step, restored.iteration) == (stopped.global_step, 3)
    for key, value in saved["state_dict"].items():
        assert torch.equal(restored.state[key], value), key
    # It goes on to the end of the run: the step count and the history continue.
    assert resumed.next_iteration == 6
    assert continued.global_step == {"ppo": 6, "ddpg": 4, "tag": 12}[case]
    assert repr(resumed.history[:3]) == repr(first.history[:3])  # repr: DDPG's first losses are NaN
    assert [entry["env_steps"] for entry in resumed.history] == [
        config.num_envs * getattr(config, "num_steps", 1) * i for i in range(1, 7)
    ]


def test_resume_of_a_gpu_marl_train_checkpoint_trains_as_train_does():
    """``resume=`` (what ``gpu-marl-train --lightning --resume`` passes) continues a trainer's own
    checkpoint exactly as the trainer's ``train(resume=...)`` does."""
    env_id, config = CASES["ppo"]
    states = []

    def save(state):
        states.append(copy.deepcopy(state))
        if state["iteration"] == 2:
            raise Stop

    with pytest.raises(Stop):
        ppo.train(env_id, config, device="cpu", log_every=1, log=None, save=save)
    agent, history = ppo.train(env_id, config, device="cpu", log_every=1, log=None, resume=states[-1])
    module = training_module(env_id, config, resume=states[-1])
    trainer().fit(module)
    assert module.next_iteration == 6 and without_timings(module.history) == without_timings(history)
    assert all(torch.equal(value, agent.state_dict()[key]) for key, value in module.agent.state_dict().items())


def test_two_ddp_processes_keep_their_parameters_equal(tmp_path):
    run_ddp_worker(tmp_path, "cpu")


def run_ddp_worker(tmp_path, device: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(WORKER)]
    try:
        result = subprocess.run(
            [*command, "--out", str(tmp_path), "--device", device], capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired as timeout:  # what the ranks had reported by then (their progress lines)
        pytest.fail(
            f"the DDP run timed out; its stderr ended:\n{(timeout.stderr or b'').decode(errors='replace')[-4000:]}"
        )
    assert result.returncode == 0, result.stderr[-4000:]
    zero, one = (json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1))
    for case, iterations in (("ppo", 4), ("tag", 3)):
        for rank in (zero, one):
            # Every rank steps its own envs, and after every training step all hold the same parameters,
            # those of the trainers' own train() under torchrun, with the same (reduced) history.
            assert rank[case]["steps"] == rank[case]["iterations"] == iterations and rank[case]["mismatched"] == []
            assert rank[case]["same_as_train"] and rank[case]["same_history"], case
        assert zero[case]["first_obs"] != one[case]["first_obs"], f"{case}: the ranks' envs started alike"
    assert zero["tag"]["global_step"] == 2 * 3


def command(capsys, *args) -> tuple[int, str, str]:
    """``gpu-marl-train`` in this process: its exit code, stdout and stderr."""
    try:
        code = train.main([str(arg) for arg in args])
    except SystemExit as exit:  # the parser's exit on a bad argument
        code = exit.code
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_through_lightning_leaves_the_same_run(tmp_path, capsys):
    run = ["--env", "CartPole-v1", "--set", "total_timesteps=256", "--set", "num_steps=16", "--device", "cpu"]
    plain, lightning = tmp_path / "plain", tmp_path / "lightning"
    assert command(capsys, *run, "--out", plain)[0] == 0
    code, out, err = command(capsys, *run, "--out", lightning, "--lightning")
    assert code == 0, err[-3000:]
    assert sorted(p.name for p in lightning.iterdir()) == [
        "checkpoint.pt",
        "config.toml",
        "learning_curve.png",
        "lightning.ckpt",
        "metrics.csv",
        "tensorboard",
    ]
    ours, theirs = (checkpoint.load_checkpoint(folder / "checkpoint.pt") for folder in (plain, lightning))
    assert ours["iteration"] == theirs["iteration"] == 4 and theirs["written_by"]["lightning"]
    assert all(torch.equal(value, theirs["model"][key]) for key, value in ours["model"].items())
    assert without_timings(ours["history"]) == without_timings(theirs["history"])
    assert (plain / "config.toml").read_text() == (lightning / "config.toml").read_text()
    assert torch.load(lightning / "lightning.ckpt", weights_only=False)[CHECKPOINT_KEY]["iteration"] == 4
    code, out, err = command(capsys, "--evaluate", lightning / "checkpoint.pt", "--episodes", "2", "--device", "cpu")
    assert code == 0 and "mean return" in out, err
    # A folder holding a --lightning run is refused as any run's, and left as it was.
    before = {p.name: p.stat().st_mtime_ns for p in lightning.iterdir()}
    code, out, err = command(capsys, *run, "--out", lightning, "--lightning")
    assert code == 2 and "holds a run already" in err
    assert {p.name: p.stat().st_mtime_ns for p in lightning.iterdir()} == before
    # --resume continues it through Lightning from its checkpoint.pt.
    code, out, err = command(
        capsys,
        "--resume",
        lightning / "checkpoint.pt",
        "--set",
        "total_timesteps=384",
        "--device",
        "cpu",
        "--lightning",
    )
    assert code == 0, err[-3000:]
    assert checkpoint.load_checkpoint(lightning / "checkpoint.pt")["iteration"] == 6
    assert torch.load(lightning / "lightning.ckpt", weights_only=False)[CHECKPOINT_KEY]["iteration"] == 6


def test_clear_errors(capsys):
    env_id, config = CASES["ppo"]
    with pytest.raises(ValueError, match="precision='bf16-true'.*bf16 = true"):
        trainer(precision="bf16-true").fit(training_module(env_id, config))
    with pytest.raises(TypeError, match="no trainer takes a dict"):
        training_module(env_id, {"num_envs": 4})
    with pytest.raises(ConfigError, match="ddpg needs continuous"):
        training_module("CartPole-v1", ddpg.DDPGConfig())
    with pytest.raises(ConfigError, match='num_envs = "auto"'):
        module_from_config(env="CartPole-v1", overrides=("num_envs=auto",))
    module = module_from_config(env="CartPole-v1", overrides=("total_timesteps=1024", "num_steps=8"), seed=3)
    assert module.config.seed == 3 and module.config.num_steps == 8
    trained = training_module(env_id, config)
    trainer(max_steps=1).fit(trained)
    with pytest.raises(RuntimeError, match="has trained already"):
        trainer().fit(trained)
    code, _, err = command(capsys, "--evaluate", "x.pt", "--lightning")
    assert code == 2 and "--lightning trains" in err


class PiecesAtEnd(pl.Callback):
    """The graphs of each of the module's captured phases after its last training step."""

    def on_train_batch_end(self, trainer, module, *args):
        self.captured = [phase.pieces for phase in module.graphed_phases]


@pytest.mark.gpu
def test_cartpole_through_lightning_is_ppo_train_on_the_gpu(cuda_device):
    """With CUDA graphs (captured at the second iteration), the fused MLP and TF32, as on the CPU."""
    cartpole(cuda_device, iterations=6)


@pytest.mark.gpu
def test_tag_through_lightning_is_multi_agent_train_on_the_gpu(cuda_device):
    """Each policy's update replays as its own graph under Lightning (train() captures them together)."""
    expected, history = train_iterations(multi_agent, "TagContinuous-v0", TAG, 4, cuda_device)
    module, snapshots = training_module("TagContinuous-v0", TAG), Snapshots()
    pieces = PiecesAtEnd()
    trainer(cuda_device, callbacks=[snapshots, pieces]).fit(module)
    assert_same(expected, snapshots.states)
    assert without_timings(module.history) == without_timings(history)
    # Captured while training, freed when fitting ends (NCCL's teardown would wait for them under DDP).
    assert pieces.captured == [1, 1, 1] and [phase.pieces for phase in module.graphed_phases] == [0, 0, 0]


@pytest.mark.gpu
@pytest.mark.parametrize("config_type", [ddpg.DDPGConfig, ddpg.TD3Config])
def test_ddpg_and_td3_through_lightning_are_train_on_the_gpu(config_type, cuda_device):
    """Each phase captured at its second use: the random acting, the policy's and both update patterns."""
    assert off_policy(config_type, cuda_device) == [1, 1, 1, 1]


@pytest.mark.gpu
def test_two_gpus_keep_their_parameters_equal(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs (NCCL between them), this host has {torch.cuda.device_count()}")
    run_ddp_worker(tmp_path, "cuda")
