"""A run that cannot go on says so in one line and leaves its folder as it was (or, once begun,
with its last good checkpoint): a diverged run, a write the system refuses, a torchrun agent that
died under its ranks, and the inputs that used to end in tracebacks (a non-UTF-8 config, a folder
name too long, an infinite collective timeout, a checkpoint whose weights do not fit its config,
an env count no memory holds). Tiny CPU runs, in this process or, where the system must act (a
file-size limit, a killed parent), in real child processes."""

import math
import os
import resource
import signal
import subprocess
import sys
import time

import pytest
import torch
from gpu_marl_envs.baselines import checkpoint, rollout
from gpu_marl_envs.baselines.distributed import Context
from test_run_folder import TINY, command, env_steps, files, refused

TRAIN = [sys.executable, "-m", "gpu_marl_envs.baselines.train"]


def stopped(code: int, err: str, message: str, expected_code: int = 1) -> bool:
    """Exit 1 (the run began, then stopped) with one line on stderr, after the progress bar, that holds ``message``."""
    last = err.strip().splitlines()[-1] if err.strip() else ""
    return code == expected_code and message in last and "Traceback" not in err


def test_a_diverged_run_stops_and_keeps_its_last_good_checkpoint(tmp_path, capsys):
    """A value loss scaled to overflow float32 makes every loss and then every weight NaN at the
    first update: the run stops at the entry that sees it, and its checkpoint keeps its start."""
    out = tmp_path / "run"
    code, _, err = command(capsys, *TINY, "--set", "vf_coef=1e38", "--out", out)
    assert stopped(code, err, "training diverged: policy_loss nan"), err
    assert "non-finite parameters" in err and f"{out / 'checkpoint.pt'} keeps its last good state (0 env steps)" in err
    kept = checkpoint.load_checkpoint(out / "checkpoint.pt")
    assert kept["iteration"] == 0 and all(v.isfinite().all() for v in kept["model"].values())
    assert not (out / "learning_curve.png").exists() and not (out / ".lock").exists()
    code, printed, err = command(capsys, "--evaluate", out / "checkpoint.pt", "--episodes", "2", "--device", "cpu")
    assert code == 0 and "mean return" in printed, err


def test_the_check_reads_the_parameters_in_the_entrys_copy():
    """One NaN weight is enough, with finite losses; DDPG's placeholder NaN losses are not divergence."""
    network = torch.nn.Linear(2, 2)
    stats = rollout.EpisodeStats(1, "cpu")
    finite = {"loss": torch.tensor(0.5)}
    assert rollout.pool_entry(0.0, rollout.EntryNumbers([stats], finite, networks=[network]), Context())
    placeholder = {"critic_loss": torch.tensor(math.nan)}
    rollout.pool_entry(
        0.0, rollout.EntryNumbers([stats], placeholder, networks=[network], finite_losses=False), Context()
    )
    with torch.no_grad():
        network.weight[1, 0] = math.inf
    with pytest.raises(rollout.Diverged, match="^non-finite parameters$"):
        rollout.pool_entry(0.0, rollout.EntryNumbers([stats], finite, networks=[network]), Context())


def file_size_limit(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_write_the_system_refuses_is_one_line(tmp_path):
    """A file-size limit (as a full disk) met at the first checkpoint leaves no folder; met later, the
    run stops with its last checkpoint whole. torch.save alone says "unexpected pos"."""
    first, later = tmp_path / "first", tmp_path / "later"
    run = subprocess.run(
        [*TRAIN, *TINY, "--out", first], preexec_fn=file_size_limit(4096), capture_output=True, text=True
    )
    assert run.returncode == 2 and run.stderr.strip().splitlines()[-1] == (
        f"gpu-marl-train: error: cannot write {first / 'checkpoint.pt'}: File too large"
    ), run.stderr
    assert not first.exists()
    # A limit below a checkpoint of one history entry (a run of one iteration's), above the starting one's.
    probe = subprocess.run(
        [*TRAIN, *TINY, "--set", "total_timesteps=64", "--out", tmp_path / "probe"], capture_output=True
    )
    assert probe.returncode == 0
    limit = (tmp_path / "probe" / "checkpoint.pt").stat().st_size - 16
    run = subprocess.run(
        [*TRAIN, *TINY, "--out", later], preexec_fn=file_size_limit(limit), capture_output=True, text=True
    )
    assert stopped(
        run.returncode, run.stderr, f"cannot write {later / 'checkpoint.pt'}: File too large; the run stopped"
    ), run.stderr
    assert checkpoint.load_checkpoint(later / "checkpoint.pt")["iteration"] == 0
    assert not list(later.glob(".checkpoint.pt.*.tmp")) and not (later / ".lock").exists()


def test_ranks_whose_torchrun_agent_died_stop(tmp_path):
    """As a SIGKILLed torchrun agent leaves its ranks: a rank (TORCHELASTIC_RUN_ID set, as torchrun
    sets it) whose parent dies stops at its next log interval with one line, releasing the folder,
    which a --resume then continues."""
    out = tmp_path / "run"
    long_run = [*TRAIN, *TINY, "--set", "total_timesteps=12800", "--out", str(out)]  # an entry every 4 iterations
    agent = subprocess.Popen(
        ["sh", "-c", '"$@" >/dev/null 2>"$0.err" & echo $!; wait', str(tmp_path / "rank"), *long_run],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TORCHELASTIC_RUN_ID": "job-1"},
    )
    rank = int(agent.stdout.readline())
    deadline = time.monotonic() + 120
    while not (out / "metrics.csv").exists() or not env_steps(out):
        assert time.monotonic() < deadline, "the rank wrote no entry"
        time.sleep(0.2)
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    while os.path.exists(f"/proc/{rank}") and "zombie" not in open(f"/proc/{rank}/status").read():
        assert time.monotonic() < deadline + 60, "the orphaned rank trained on"
        time.sleep(0.2)
    err = (tmp_path / "rank.err").read_text()
    assert "the torchrun agent that started this job has died: its ranks stop" in err.strip().splitlines()[-1], err
    assert not (out / ".lock").exists()
    resumed = subprocess.run(
        [*TRAIN, "--resume", out / "checkpoint.pt", "--set", "total_timesteps=" + str(env_steps(out)[-1] + 128)],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]


def test_inputs_that_were_tracebacks_are_one_line(tmp_path, capsys):
    config = tmp_path / "latin1.toml"
    config.write_bytes('env = "CartPole-v1"\nalgorithm = "ppo"\n# café\n'.encode("latin-1"))
    long_name = tmp_path / ("r" * 300)
    cases = {
        "non-UTF-8 config": (["--config", config, "--device", "cpu"], "is not UTF-8 text, as TOML must be: byte 0xe9"),
        "folder name too long": ([*TINY, "--out", long_name], "has 300 bytes; the filesystem takes names of up to 255"),
        "infinite collective timeout": (
            [*TINY, "--collective-timeout", "inf"],
            "--collective-timeout must be a number",
        ),
        "NaN collective timeout": ([*TINY, "--collective-timeout", "nan"], "--collective-timeout must be a number"),
        "no memory holds it": (
            [*TINY, "--set", "num_envs=1000000000000", "--set", "total_timesteps=16000000000000"],
            "GiB for one rollout's observations",
        ),
        "learning rate that overflows": (
            [*TINY, "--set", "learning_rate=1e308"],
            "learning_rate must be a number in (0, 1]",
        ),
        "clip range that overflows": ([*TINY, "--set", "clip_coef=1e300"], "clip_coef must be a number in (0, 1]"),
    }
    for case, (args, message) in cases.items():
        out = [] if "--out" in args else ["--out", tmp_path / "run"]
        code, _, err = command(capsys, *args, *out)
        assert refused(code, err, message), (case, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latin1.toml"], "a refused command wrote"
    code, _, err = command(capsys, "--evaluate", long_name / "checkpoint.pt", "--device", "cpu")
    assert refused(code, err, "File name too long"), err


def test_a_forged_checkpoint_whose_weights_do_not_fit_is_one_line(tmp_path, capsys):
    """Its digest is valid (saved by save_checkpoint), its config names other layer widths than its weights."""
    out = tmp_path / "run"
    assert command(capsys, *TINY, "--out", out)[0] == 0
    saved = checkpoint.load_checkpoint(out / "checkpoint.pt")
    forged = {k: v for k, v in saved.items() if k != checkpoint.DIGEST}
    forged["config"] = {**forged["config"], "hidden": [32, 32]}
    checkpoint.save_checkpoint(forged, tmp_path / "forged.pt")
    before = files(out)
    for args in (
        ["--evaluate", tmp_path / "forged.pt"],
        ["--resume", tmp_path / "forged.pt", "--out", tmp_path / "again", "--set", "total_timesteps=512"],
    ):
        code, _, err = command(capsys, *args, "--device", "cpu")
        # (A resume finds it as its trainer loads the state, below its progress bar.)
        assert stopped(code, err, "does not fit the run's config: size mismatch for", expected_code=2), (args, err)
    assert files(out) == before and not (tmp_path / "again").exists()
    header = {"env": ("Nope-v0", "unknown env 'Nope-v0'"), "algorithm": ("sac", "algorithm must be one of")}
    for key, (value, message) in header.items():
        checkpoint.save_checkpoint({**forged, key: value}, tmp_path / f"{key}.pt")
        code, _, err = command(capsys, "--evaluate", tmp_path / f"{key}.pt", "--device", "cpu")
        assert refused(code, err, message), (key, err)
