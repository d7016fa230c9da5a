"""Training with two processes through torchrun and gloo on the CPU (2 and 4 GPUs and NCCL with the
gpu marker), single-agent and multi-agent (Tag, CovidEconomy): parameters identical on both ranks
after every optimizer step, metrics reduced over the ranks, rank 0 alone writing, a resume
restoring every rank; the ``--nproc-per-node`` shortcut of the command; two torchrun "nodes"
training as one node of two processes; a checkpoint resumed on another number of processes; a
killed or frozen rank restarted by torchrun (``--max-restarts``), the run completing as one;
``num_envs = "auto"``. About three minutes on two cores (each torchrun start imports torch three
times)."""

import csv
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gpu_marl_envs.baselines import ppo, run_config, sizing
from gpu_marl_envs.baselines.capture import GraphedPhase, between_graphs
from gpu_marl_envs.baselines.checkpoint import load_checkpoint
from gpu_marl_envs.baselines.distributed import Context

WORKER = Path(__file__).with_name("distributed_worker.py")
ELASTIC_WORKER = Path(__file__).with_name("elastic_worker.py")


def torchrun(*args, nproc: int = 2, timeout: int = 600, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def command(*args, timeout: int = 600):
    return subprocess.run(
        [sys.executable, "-m", "gpu_marl_envs.baselines.train", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_worker(tmp_path, algorithm: str, *extra, nproc: int = 2) -> list[dict]:
    result = torchrun(WORKER, "--algorithm", algorithm, "--out", tmp_path, *extra, nproc=nproc)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(nproc)]


MULTI_AGENT = ("tag", "covid")  # the multi-agent cases of the worker


def ranks_differ(algorithm: str, zero: dict, one: dict) -> bool:
    """Whether the ranks stepped envs of their own: their first observations differ, or in the
    multi-agent cases (TagGridworld and CovidEconomy start every game alike) what the policies saw
    next, after their own sampled actions."""
    if algorithm in MULTI_AGENT:
        return zero["inputs"] != one["inputs"]
    return zero["inputs"][0] != one["inputs"][0]


@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "ddpg", *MULTI_AGENT])
def test_two_ranks_keep_identical_parameters_and_reduce_metrics(algorithm, tmp_path):
    ranks = run_worker(tmp_path, algorithm, "--device", "cpu", "--every-step")
    zero, one = ranks
    assert zero["world_size"] == 2
    # Each rank steps its own envs ...
    assert ranks_differ(algorithm, zero, one)
    # ... and yet after every optimizer step both ranks hold the same parameters.
    assert zero["steps"] == one["steps"] > 0
    assert zero["mismatched_steps"] == one["mismatched_steps"] == []
    assert zero["parameters"] == one["parameters"]
    # Buffers too; in the "tag" case these include the taggers' observation statistics, which merge
    # both ranks' rollouts.
    assert zero["buffers"] == one["buffers"]
    # Metrics are reduced: both ranks hold the same history, counting the env steps of both.
    assert zero["history"] == one["history"] and len(zero["history"]) == 6
    steps = [h["env_steps"] for h in zero["history"]]
    assert steps == [steps[0] * (i + 1) for i in range(6)]
    assert zero["reductions"] == one["reductions"] == {"sums": [2.0, 3.0], "max": {"seconds": 1.0}}
    # Only rank 0 logs and saves; a resume restores every rank and continues the history.
    assert zero["logged"] == 6 and zero["saved"] == [0, 1, 2, 3, 4, 5, 6]  # 0: the fresh run's starting point
    assert one["logged"] == 0 and one["saved"] == []
    assert zero["restored_matches_checkpoint"] and one["restored_matches_checkpoint"]
    assert zero["history"][:3] == zero["first_history"]
    if algorithm == "covid":
        # Every rollout ends one 5-step game in each of the 2 games of each rank: pooled, 4 a log entry.
        assert [h["episodes"] for h in zero["history"]] == [4] * 6


def test_env_steps_and_seeds_of_ranks():
    one, two = Context(), Context(rank=1, world_size=2)
    assert one.seed(5) == 5 and two.seed(5) != Context(world_size=2).seed(5)
    # The ranks draw different random numbers on the CPU too (whose generator reads 32 bits of a seed).
    generators = [torch.Generator().manual_seed(Context(rank=r, world_size=4).seed(5)) for r in range(4)]
    draws = {tuple(torch.rand(4, generator=generator).tolist()) for generator in generators}
    assert len(draws) == 4
    # Sub-env seeds of a run never repeat across ranks and resumes.
    seeds = {Context(rank=r, world_size=2).env_seed(0, it, 4) + i for r in (0, 1) for it in (0, 3) for i in range(4)}
    assert len(seeds) == 16
    assert two.iterations(1000, 100) == 5
    with pytest.raises(ValueError, match="must cover one iteration of all 2 ranks"):
        two.iterations(150, 100)


SMALL_RUN = ["--env", "CartPole-v1", "--set", "num_steps=16", "--set", "num_envs=4", "--device", "cpu"]
"""2 ranks x 4 envs x 16 steps: 128 env steps an iteration, 16 optimizer steps (4 epochs x 4 minibatches)."""


def metrics(folder) -> list[dict]:
    """``metrics.csv``'s rows without the timings (the same training takes its own time each run)."""
    return [
        {key: value for key, value in row.items() if not key.endswith("seconds")}
        for row in csv.DictReader(open(folder / "metrics.csv"))
    ]


def tensorboard_steps(folder) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    return sorted(event.step for event in events.Scalars("mean_return"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def test_two_nodes_train_as_two_processes_and_resume_on_one(tmp_path):
    """Two torchrun "nodes" of one process each on localhost (c10d rendezvous) train exactly as one
    node of two processes; rank 0 alone writes; the 2-process checkpoint resumed in one process
    continues its env steps (its 4 iterations of 2 ranks are 8 of one)."""
    args = [*SMALL_RUN, "--set", "total_timesteps=512"]
    one_node = command("--nproc-per-node", "2", *args, "--out", tmp_path / "one")
    assert one_node.returncode == 0, one_node.stderr[-4000:]
    assert one_node.stdout.count("greedy mean return") == 1, "rank 0 alone evaluates and reports"
    rendezvous = [
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=localhost:{free_port()}",
        "--rdzv-id=two-nodes",
    ]
    # One thread per process, as torchrun sets it for a node of several (matrix products then sum alike).
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                *rendezvous,
                "-m",
                "gpu_marl_envs.baselines.train",
                *args,
                "--out",
                tmp_path / "two",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][1][-2000:] + outputs[1][1][-2000:]
    one, two = (load_checkpoint(tmp_path / name / "checkpoint.pt") for name in ("one", "two"))
    assert one["world_size"] == two["world_size"] == 2 and one["iteration"] == two["iteration"] == 4
    for name, value in one["model"].items():
        assert torch.equal(value, two["model"][name]), name
    assert metrics(tmp_path / "one") == metrics(tmp_path / "two")
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == [
        "checkpoint.pt",
        "config.toml",
        "learning_curve.png",
        "metrics.csv",
        "tensorboard",
    ]

    resumed = command(
        "--resume", tmp_path / "one" / "checkpoint.pt", "--set", "total_timesteps=1024", "--device", "cpu"
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    steps = [128, 256, 384, 512] + [512 + 64 * (i + 1) for i in range(8)]
    assert [int(row["env_steps"]) for row in metrics(tmp_path / "one")] == tensorboard_steps(tmp_path / "one") == steps
    again = load_checkpoint(tmp_path / "one" / "checkpoint.pt")
    assert (again["world_size"], again["iteration"]) == (1, 16) and again["history"][:4] == one["history"]


@pytest.mark.parametrize("failure", ["kill", "freeze"])
def test_a_failed_rank_is_restarted_and_the_run_completes(failure, tmp_path):
    """Under torchrun --max-restarts 1, rank 1 dies (SIGKILL) or freezes (which the 10 s collective
    timeout ends) after its 65th optimizer step, in iteration 5 of 8: torchrun restarts both ranks,
    which continue from the checkpoint of iteration 4, and the run ends with one metrics.csv and
    TensorBoard log holding each of its 8 entries once."""
    out = tmp_path / "run"
    result = torchrun(
        "--max-restarts=1",
        ELASTIC_WORKER,
        failure,
        4 * 16 + 1,
        *SMALL_RUN,
        "--set",
        "total_timesteps=1024",
        "--collective-timeout",
        "10",
        "--out",
        out,
        timeout=300,
        env={**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"torchrun restarted the job: {out} continues from its checkpoint at 512 env steps" in result.stdout
    steps = [128 * (i + 1) for i in range(8)]
    assert [int(row["env_steps"]) for row in metrics(out)] == tensorboard_steps(out) == steps
    saved = load_checkpoint(out / "checkpoint.pt")
    assert saved["iteration"] == 8 and [entry["env_steps"] for entry in saved["history"]] == steps


def test_restarts_on_the_first_attempts_store_are_refused(tmp_path):
    """torchrun shares its rendezvous store with restarted ranks unless told not to; they would
    fail to connect at the first restart (pytorch/pytorch#135712): refused before anything runs."""
    shared_store = {k: v for k, v in os.environ.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}
    result = torchrun(
        "--max-restarts=1",
        "-m",
        "gpu_marl_envs.baselines.train",
        *SMALL_RUN,
        "--set",
        "total_timesteps=256",
        "--out",
        tmp_path / "run",
        nproc=1,
        timeout=300,
        env=shared_store,
    )
    assert result.returncode != 0 and "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in result.stderr
    assert not (tmp_path / "run").exists()


def test_command_trains_a_multi_agent_game_with_two_processes(tmp_path):
    out = tmp_path / "run"
    sets = [
        "env_params.grid_length=4",
        "env_params.episode_length=8",
        "num_envs=2",
        "num_steps=8",
        "total_timesteps=64",
        "policies.shared.hidden=[8]",
    ]
    # --max-restarts: the shortcut starts torchrun so that a restart could connect (no restart happens here).
    result = command(
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "--env",
        "TagGridworld-v0",
        *[a for s in sets for a in ("--set", s)],
        "--device",
        "cpu",
        "--out",
        out,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.count("greedy mean return per agent: taggers") == 1, "rank 0 alone evaluates and reports"
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    # 2 ranks x 2 games x 8 steps an iteration; each entry once, with the groups' returns.
    assert [int(row["env_steps"]) for row in rows] == [32, 64]
    assert {"mean_return/taggers", "mean_return/runners", "shared/policy_loss"} <= set(rows[0])
    assert torch.load(out / "checkpoint.pt", weights_only=False)["iteration"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nproc-per-node", "2", "--env", "CartPole-v1", "--set", "total_timesteps=600"], "must cover one iteration"),
        (
            ["--nproc-per-node", "2", "--env", "TagGridworld-v0", "--set", "total_timesteps=300000"],
            "must cover one iteration",
        ),
        (["--nproc-per-node", "0", "--env", "CartPole-v1"], "--nproc-per-node must be >= 1"),
        (["--nproc-per-node", "2", "--evaluate", "checkpoint.pt"], "--evaluate runs in one process"),
        (["--max-restarts", "1", "--env", "CartPole-v1"], "--max-restarts goes with --nproc-per-node"),
    ],
)
def test_shortcut_checks_the_run_before_starting_processes(args, message, tmp_path):
    result = command(*args, "--device", "cpu", "--out", tmp_path / "run")
    assert result.returncode == 2 and message in result.stderr, result.stderr[-4000:]
    assert not (tmp_path / "run").exists()


def test_auto_num_envs_on_the_cpu(tmp_path):
    out = tmp_path / "run"
    result = command(
        "--env",
        "CartPole-v1",
        "--set",
        "num_envs=auto",
        "--set",
        "num_steps=8",
        "--set",
        "total_timesteps=4096",
        "--device",
        "cpu",
        "--out",
        out,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert 'num_envs = "auto": a sweep' in result.stdout and "the smallest count within 10%" in result.stdout
    resolved = run_config.tomllib.loads((out / "config.toml").read_text())["hyperparameters"]["num_envs"]
    assert resolved in sizing.candidates("cpu") and resolved * 8 <= 4096
    assert f"num_envs = {resolved:,}:" in result.stdout


def test_choose_num_envs_skips_counts_the_run_cannot_take():
    config = ppo.PPOConfig(num_steps=8, num_minibatches=2, update_epochs=1, hidden=(8,), total_timesteps=8 * 16)
    lines = []
    # 32 (more envs than total_timesteps covers in one iteration) comes second, so that the sweep's
    # early stop (two counts in a row without a gain, which timing noise can cause) cannot end it first.
    chosen = sizing.choose_num_envs(
        ppo.train, "CartPole-v1", config, device="cpu", counts=[4, 32, 8, 16], report=lines.append
    )
    assert chosen in (4, 8, 16)
    assert any(line.strip().startswith("32 envs") and "not tried" in line for line in lines), lines


def cut_phase(device):
    """A phase with host-driven work in its middle (as an all-reduce between graph replays): what
    the work sees and what follows it must be in order, replay after replay."""
    x = torch.zeros(4, device=device)
    seen = torch.zeros(4, device=device)
    log = []

    def work():
        seen.copy_(x * 2)  # outside the graph: runs between the pieces
        log.append(1)

    def phase():
        x.add_(1)
        between_graphs(work)
        return {"after": seen + x}

    return GraphedPhase(phase, torch.device(device)), log


def test_between_graphs_runs_the_work_in_place_outside_a_capture():
    phase, log = cut_phase("cpu")
    for calls in (1, 2, 3):
        assert phase()["after"].tolist() == [3.0 * calls] * 4 and len(log) == calls


@pytest.mark.gpu
def test_between_graphs_cuts_a_captured_phase(cuda_device):
    phase, log = cut_phase(cuda_device)
    # warm-up (eager), capture (which does the call's work by replaying), then replays
    for calls in (1, 2, 3, 4):
        assert phase()["after"].tolist() == [3.0 * calls] * 4 and len(log) == calls
    assert len(phase._graphs) == 2, "the capture was cut into two graphs"


@pytest.mark.gpu
@pytest.mark.parametrize("gpus", [2, 4], ids=["2gpus", "4gpus"])
@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "ddpg", *MULTI_AGENT])
def test_several_gpus(algorithm, gpus, tmp_path):
    """NCCL on 2 and 4 GPUs, CUDA graphs on: identical parameters at the end, with the all-reduce
    inside the captured update and with it between the replays (the same training, up to rounding;
    the multi-agent update then runs its policies one after another instead of as graph branches)."""
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs (NCCL between them), this host has {torch.cuda.device_count()}")
    runs = {}
    for graph_allreduce in ("true", "false"):
        folder = tmp_path / graph_allreduce
        folder.mkdir()
        ranks = run_worker(folder, algorithm, "--device", "cuda", "--graph-allreduce", graph_allreduce, nproc=gpus)
        zero = ranks[0]
        for rank in ranks[1:]:
            assert rank["parameters"] == zero["parameters"], f"rank {rank['rank']}'s parameters differ from rank 0's"
            assert rank["history"] == zero["history"]
        assert all(rank["restored_matches_checkpoint"] for rank in ranks)
        assert ranks_differ(algorithm, zero, ranks[1])
        runs[graph_allreduce] = torch.tensor(zero["parameters"])
    if "false" in runs:
        assert torch.allclose(runs["true"], runs["false"], rtol=1e-4, atol=1e-5)
