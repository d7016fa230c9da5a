"""A user's runs are kept whole by ``gpu-marl-train`` (in this process, tiny CPU runs): a run into a
folder that holds a run is refused and leaves every byte as it was, ``--overwrite`` replaces the
whole run (TensorBoard included), nothing is written before the checks pass and the trainer has
saved its starting state, every damaged or foreign checkpoint gets one line rather than a
traceback or garbage weights, and a resume continues one ``metrics.csv`` (rows logged after the
checkpoint by a killed run are dropped, TensorBoard's purged) and removes the temporaries of
interrupted writes."""

import csv
import subprocess
import sys
import time

import pytest
import torch
from gpu_marl_envs.baselines import checkpoint, ppo, run_config, train

TINY = ["--env", "CartPole-v1", "--set", "num_steps=16", "--set", "total_timesteps=256", "--device", "cpu"]


def command(capsys, *args) -> tuple[int, str, str]:
    """``gpu-marl-train ARGS`` in this process: exit code, stdout, stderr."""
    try:
        code = train.main([str(arg) for arg in args])
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def files(folder) -> dict:
    """Every file under ``folder`` and its bytes."""
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def env_steps(folder) -> list[int]:
    return [int(row["env_steps"]) for row in csv.DictReader(open(folder / "metrics.csv"))]


def tensorboard_steps(folder) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    return sorted(event.step for event in events.Scalars("mean_return"))


def refused(code: int, err: str, message: str) -> bool:
    """Exit 2 with one line on stderr that holds ``message``."""
    return code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_run_refuses_a_folder_that_holds_a_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert command(capsys, *TINY, "--seed", "5")[0] == 0
    folder = tmp_path / "runs" / "CartPole-v1-ppo-seed5"  # the default folder: a plain re-run lands there
    before = files(folder)
    assert {"checkpoint.pt", "config.toml", "metrics.csv", "learning_curve.png"} <= {str(p) for p in before}
    # The same command again, a failing device, a bad setting: refused, every byte kept.
    code, _, err = command(capsys, *TINY, "--seed", "5")
    assert refused(code, err, f"{folder.relative_to(tmp_path)} holds a run already"), err
    assert f"--resume {folder.relative_to(tmp_path) / 'checkpoint.pt'}" in err and "--overwrite" in err
    for bad in (["--device", "cuda:99"], ["--set", "gamma=2"]):
        code, _, err = command(capsys, *TINY, "--seed", "5", *bad)
        assert code == 2 and "Traceback" not in err, err
    assert files(folder) == before


def test_overwrite_replaces_the_whole_run_and_nothing_else(tmp_path, capsys):
    out = tmp_path / "run"
    assert command(capsys, *TINY, "--seed", "5", "--out", out)[0] == 0
    (out / "notes.txt").write_text("mine")
    (out / "tensorboard" / "exp_2024").mkdir()  # a user's own TensorBoard run beside ours
    (out / "tensorboard" / "exp_2024" / "events.out.tfevents.1.host").write_bytes(b"theirs")
    assert command(capsys, *TINY, "--set", "total_timesteps=128", "--seed", "6", "--out", out, "--overwrite")[0] == 0
    assert env_steps(out) == [64, 128] and tensorboard_steps(out) == [64, 128]
    assert len(list((out / "tensorboard").glob("events.*"))) == 1, "the old run's events were left beside the new ones"
    assert checkpoint.load_checkpoint(out / "checkpoint.pt")["config"]["seed"] == 6
    assert "seed = 6" in (out / "config.toml").read_text() and (out / "notes.txt").read_text() == "mine"
    assert (out / "tensorboard" / "exp_2024" / "events.out.tfevents.1.host").read_bytes() == b"theirs"
    assert not (out / ".lock").exists(), "a run that ended left its lock file"


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_folder_of_other_files_is_refused_naming_them(overwrite, tmp_path, capsys):
    """No checkpoint but a user's config.toml, metrics.csv and TensorBoard run (or unrelated files):
    not "a run" to --resume, not ours to --overwrite, not a place to put a run."""
    mixed, unrelated = tmp_path / "proj", tmp_path / "docs"
    (mixed / "tensorboard" / "exp_2024").mkdir(parents=True)
    (mixed / "config.toml").write_text("mine")
    (mixed / "metrics.csv").write_text("mine")
    unrelated.mkdir()
    (unrelated / "thesis.tex").write_text("mine")
    (unrelated / ".DS_Store").write_text("the folder's")  # hidden: not named, not a reason to refuse
    before = {folder: files(folder) for folder in (mixed, unrelated)}
    for folder, named in (
        (mixed, "config.toml, metrics.csv, tensorboard, tensorboard/exp_2024"),
        (unrelated, "thesis.tex"),
    ):
        code, _, err = command(capsys, *TINY, "--out", folder, *overwrite)
        assert refused(code, err, f"{folder} holds files but no run of gpu-marl-train (no checkpoint.pt): {named}"), err
        assert "--resume" not in err, err
        assert files(folder) == before[folder] and (mixed / "tensorboard" / "exp_2024").is_dir()


def test_a_folder_of_hidden_files_only_takes_a_run(tmp_path, capsys):
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / ".gitkeep").write_text("")
    assert command(capsys, *TINY, "--out", kept)[0] == 0
    assert (kept / ".gitkeep").exists() and (kept / "checkpoint.pt").exists()


def test_a_second_writer_is_refused_naming_the_holder(tmp_path, capsys):
    """Two commands into one folder at once: the one that takes the folder's lock writes, the other
    gets one line naming it, whether it starts before the first has written (it is then refused at
    its first write, under the lock) or after. Both are real processes."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "gpu_marl_envs.baselines.train", *TINY, "--out", str(out)]
    runs = [subprocess.Popen([*args, "--seed", str(seed)], stderr=subprocess.PIPE, text=True) for seed in (0, 5)]
    errors = [run.communicate(timeout=300)[1] for run in runs]
    codes = [run.returncode for run in runs]
    assert sorted(codes) == [0, 2], errors
    loser = errors[codes.index(2)].strip().splitlines()[-1]
    assert "is in use by another gpu-marl-train (pid" in loser or "holds a run already" in loser, loser
    seed = (0, 5)[codes.index(0)]
    assert checkpoint.load_checkpoint(out / "checkpoint.pt")["config"]["seed"] == seed
    assert f"seed = {seed}" in (out / "config.toml").read_text()
    assert len(list((out / "tensorboard").iterdir())) == 1 and env_steps(out) == [64, 128, 192, 256]
    # A holder that is still running: the refusal names it (pid, host, command), and writes nothing.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    before = files(out)
    for args in (
        ["--resume", out / "checkpoint.pt", "--set", "total_timesteps=512"],
        [*TINY, "--out", out, "--overwrite"],
    ):
        code, _, err = command(capsys, *args, "--device", "cpu")
        assert refused(code, err, f"{out} is in use by another gpu-marl-train (pid {holder.pid} on "), err
        assert "holding the lock" in err
    assert files(out) == before
    holder.communicate("", timeout=60)
    code, _, err = command(capsys, "--resume", out / "checkpoint.pt", "--set", "total_timesteps=384", "--device", "cpu")
    assert code == 0 and env_steps(out) == [64, 128, 192, 256, 320, 384], err


HOLD = """
import sys
from pathlib import Path
from gpu_marl_envs.baselines.run_folder import FolderLock
folder, sys.argv = Path(sys.argv[1]), ["holding the lock"]
lock = FolderLock(folder)
print("held", flush=True)
sys.stdin.read()
"""
"""A process that holds a folder's lock until its input ends, describing itself as "holding the lock"."""


def test_a_finished_run_resumed_finishes_what_a_kill_left(tmp_path, capsys):
    """Killed after its last checkpoint, while drawing its curve: the next command on the run draws
    it and removes the interrupted write's temporary, and still says the run has finished."""
    out = tmp_path / "run"
    assert command(capsys, *TINY, "--out", out)[0] == 0
    curve = (out / "learning_curve.png").read_bytes()
    (out / "learning_curve.png").unlink()
    (out / ".learning_curve.png.k1ll3d.tmp").write_bytes(curve[:100])
    code, printed, err = command(capsys, "--resume", out / "checkpoint.pt", "--device", "cpu")
    assert code == 0, err
    assert "removed the temporaries of interrupted writes; drew the missing learning_curve.png" in printed
    assert "the run has finished" in printed
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*")), "a temporary or the lock was left"


@pytest.mark.parametrize(
    "case", ["bad setting", "no such device", "unknown env", "ddpg without Box actions", "damaged checkpoint"]
)
def test_nothing_is_written_before_the_checks_pass(case, tmp_path, capsys):
    config = tmp_path / "config.toml"
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"PK\x03\x04" + bytes(100))
    args = {
        "bad setting": [*TINY, "--set", "hidden=[0]"],
        "no such device": [*TINY, "--device", "cuda:99"],
        "unknown env": ["--config", config, "--device", "cpu"],
        "ddpg without Box actions": ["--config", config, "--device", "cpu"],
        "damaged checkpoint": ["--resume", damaged, "--device", "cpu"],
    }[case]
    env, algorithm = ("Nope-v0", "ppo") if case == "unknown env" else ("CartPole-v1", "ddpg")
    config.write_text(f'env = "{env}"\nalgorithm = "{algorithm}"\n')
    code, _, err = command(capsys, *args, "--out", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def test_a_trainer_that_fails_before_its_first_save_leaves_no_folder(tmp_path, monkeypatch):
    def failing(env_id, config, **kwargs):
        raise RuntimeError("CUDA out of memory")  # as building a run's envs can, after every check passed

    monkeypatch.setitem(run_config.ALGORITHMS, "ppo", (ppo.PPOConfig, failing, None))
    with pytest.raises(RuntimeError, match="out of memory"):
        train.main([*TINY, "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


def test_damaged_and_foreign_checkpoints_get_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert command(capsys, *TINY, "--out", out)[0] == 0
    good = (out / "checkpoint.pt").read_bytes()
    flipped = bytearray(good)
    middle = len(good) // 2
    flipped[middle : middle + 400] = bytes(b ^ 0xFF for b in flipped[middle : middle + 400])  # the probe
    edited = torch.load(out / "checkpoint.pt", weights_only=True)
    edited["model"]["critic.0.weight"][0, 0] += 1.0  # one weight changed after the digest was taken
    cases = {
        "flipped.pt": bytes(flipped),
        "truncated.pt": good[: len(good) // 2],
        "empty.pt": b"",
        "text.pt": b"not a checkpoint",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    torch.save(edited, tmp_path / "edited.pt")
    torch.save({"model": {}}, tmp_path / "foreign.pt")
    messages = {
        "flipped.pt": "",
        "truncated.pt": "cannot be read as a checkpoint",
        "empty.pt": "cannot be read",
        "text.pt": "cannot be read",
        "edited.pt": "is damaged: its contents no longer match",
        "foreign.pt": "is not a checkpoint of gpu-marl-train",
        "missing.pt": "no checkpoint at",
        "": "is a folder, not a checkpoint file",
    }
    before = files(out)
    for name, message in messages.items():
        for args in (["--evaluate", tmp_path / name], ["--resume", tmp_path / name, "--out", out]):
            code, _, err = command(capsys, *args, "--device", "cpu")
            assert refused(code, err, message), (name, err)
    assert files(out) == before


def test_a_resume_continues_one_metrics_file(tmp_path, capsys):
    out = tmp_path / "run"
    assert command(capsys, *TINY, "--out", out)[0] == 0
    # As if killed after logging entries 3 and 4 but before saving them, in the middle of a write.
    saved = checkpoint.load_checkpoint(out / "checkpoint.pt")
    checkpoint.save_checkpoint(
        {**{k: v for k, v in saved.items() if k != checkpoint.DIGEST}, "iteration": 2, "history": saved["history"][:2]},
        out / "checkpoint.pt",
    )
    (out / ".checkpoint.pt.k1ll3d.tmp").write_bytes(b"half a checkpoint")
    assert env_steps(out) == [64, 128, 192, 256]
    # TensorBoard reads a folder's event files in the order of their names, which begin with the
    # second they were made in: a resume (a new file, whose first event purges the steps past the
    # checkpoint) comes later than its run in life, and must here too.
    time.sleep(1.1)
    code, _, err = command(capsys, "--resume", out / "checkpoint.pt", "--set", "total_timesteps=384", "--device", "cpu")
    assert code == 0, err
    assert env_steps(out) == tensorboard_steps(out) == [64, 128, 192, 256, 320, 384], "each entry once, in order"
    assert checkpoint.load_checkpoint(out / "checkpoint.pt")["iteration"] == 6
    assert not list(out.glob(".*.tmp")), "the interrupted write's temporary was left"
