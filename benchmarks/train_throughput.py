"""Training speed of the bundled trainers on the GPU: env-steps/s with the rollout/update breakdown,
and wall time until CartPole's mean training return first reaches 475; Tag (TagContinuous, 10
taggers + 100 runners) with WarpDrive's published A2C configuration at WarpDrive's benchmark sizes.

Each configuration runs ``ppo.train`` / ``a2c.train`` as a user would, logging every iteration (one
host synchronisation per iteration, which the timing includes). Throughput is taken between the end
of the third iteration and the end of the run, so it excludes warm-up and graph capture; time to
threshold is wall time from the call to ``train`` (env construction, warm-up and capture included)
to the end of the first iteration whose finished episodes average >= 475. The in-run baseline is the
same trainer with ``cuda_graph=False, fused_mlp=False`` (eager PyTorch); peer numbers (PureJaxRL,
WarpDrive) are the issue's, measured on an H200. Tag counts env steps as WarpDrive does: games x steps.

``--gpus`` runs the multi-GPU cases instead, each through ``torchrun`` (``torch.distributed.run``)
with 1, 2, 4, ... processes, one per GPU, up to the GPUs of the host, the same per-GPU config:
CartPole PPO 4,096 x 128 per GPU (with the gradient all-reduce inside the captured update, and on
several GPUs also between the replays of its pieces) and Tag A2C 1,000 games per GPU (likewise;
between the replays, its policies update one after another rather than as graph branches);
env-steps/s count all GPUs, the speed-up is against the 1-GPU run of the same case, and a case
whose ranks end with different parameters is marked. ``--curves PNG`` trains PPO on CartPole with
the same total batch (16,384 envs x 128 steps, split over the GPUs) and schedule on each of those
counts and draws their learning curves together.

    python benchmarks/train_throughput.py --out train.md --json train.json   # results: docs/benchmarks/training.md
    python benchmarks/train_throughput.py --gpus --out gpus.md --json gpus.json
    python benchmarks/train_throughput.py --curves curves.png --out curves.md --json curves.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from gpu_marl_envs.baselines import a2c, multi_agent, ppo
from gpu_marl_envs.baselines.distributed import setup, teardown
from gpu_marl_envs.baselines.plotting import plot_learning_curves
from gpu_marl_envs.baselines.run_config import CONFIGS, build_config, read_config
from report import add_output_options, save

THRESHOLD = 475.0


def run(algorithm, env_id: str, config, *, backend=None, stop_at_threshold: bool = False) -> dict:
    """Train once; returns throughput, breakdown and time to threshold (None if not reached)."""
    module = {"ppo": ppo, "a2c": a2c, "multi_agent": multi_agent}[algorithm]
    reached, history = {}, []
    begin = time.perf_counter()

    def log(entry):
        history.append(entry)
        if (
            env_id == "CartPole-v1"
            and entry["mean_return"] >= THRESHOLD
            and entry["episodes"]
            and "seconds" not in reached
        ):
            reached.update(seconds=time.perf_counter() - begin, env_steps=entry["env_steps"])
            if stop_at_threshold:
                raise StopIteration

    try:
        module.train(env_id, config, device="cuda", backend=backend, log_every=1, log=log)
    except StopIteration:
        pass
    torch.cuda.synchronize()
    return summary(algorithm, env_id, backend, config, history, reached)


def summary(algorithm, env_id: str, backend, config, history: list[dict], reached: dict) -> dict:
    """A run's throughput after its third iteration, rollout/update shares, time to threshold."""
    result = {
        "algorithm": algorithm,
        "env": env_id,
        "backend": backend,
        "config": dataclasses.asdict(config),
        "time_to_threshold_s": reached.get("seconds"),
        "steps_to_threshold": reached.get("env_steps"),
        "first_two_iterations_s": history[1]["seconds"] if len(history) > 1 else None,
    }
    if len(history) > 3:
        first, last = history[2], history[-1]
        seconds = last["seconds"] - first["seconds"]
        result.update(
            env_steps_per_s=(last["env_steps"] - first["env_steps"]) / seconds,
            iteration_ms=1000 * seconds / (len(history) - 3),
            rollout_share=(last["rollout_seconds"] - first["rollout_seconds"]) / seconds,
            update_share=(last["update_seconds"] - first["update_seconds"]) / seconds,
            final_return=last["mean_return"],
        )
    return result


def tag_a2c(num_envs: int, num_steps: int, iterations: int):
    """WarpDrive's published TagContinuous A2C configuration (the shipped tag_continuous_a2c.toml)
    at another number of games."""
    _, _, config = build_config(read_config(CONFIGS / "tag_continuous_a2c.toml"), [], None)
    return dataclasses.replace(
        config, num_envs=num_envs, num_steps=num_steps, total_timesteps=num_envs * num_steps * iterations
    )


def cases(quick: bool):
    """(label, algorithm, env, config, backend, stop at the threshold)."""
    purejaxrl = ppo.PPOConfig()  # PureJaxRL's CartPole defaults: 4 envs x 128 steps
    big = dataclasses.replace(
        purejaxrl, num_envs=4096, num_steps=128, total_timesteps=4096 * 128 * (8 if quick else 30)
    )
    # The first run of a process also pays for CUDA's and cuBLAS's start and the env kernel's compilation.
    yield (
        "PPO CartPole 4x128 (PureJaxRL defaults), to 475, first run in the process",
        "ppo",
        "CartPole-v1",
        purejaxrl,
        None,
        True,
    )
    yield "PPO CartPole 4x128 (PureJaxRL defaults), to 475", "ppo", "CartPole-v1", purejaxrl, None, True
    yield "PPO CartPole 4x128, to 475, seed 1", "ppo", "CartPole-v1", dataclasses.replace(purejaxrl, seed=1), None, True
    yield (
        "PPO CartPole 4x128, eager (baseline), to 475",
        "ppo",
        "CartPole-v1",
        dataclasses.replace(purejaxrl, cuda_graph=False, fused_mlp=False),
        None,
        True,
    )
    yield "PPO CartPole 4096x128", "ppo", "CartPole-v1", big, None, False
    yield (
        "PPO CartPole 4096x128, eager (baseline)",
        "ppo",
        "CartPole-v1",
        dataclasses.replace(big, cuda_graph=False, fused_mlp=False, total_timesteps=4096 * 128 * 6),
        None,
        False,
    )
    yield (
        "PPO CartPole 4096x128, full float32 (no TF32)",
        "ppo",
        "CartPole-v1",
        dataclasses.replace(big, tf32=False),
        None,
        False,
    )
    yield "PPO CartPole 4096x128, bf16 updates", "ppo", "CartPole-v1", dataclasses.replace(big, bf16=True), None, False
    yield (
        "PPO CartPole 4096x128, PyTorch's layers (fused_mlp=false)",
        "ppo",
        "CartPole-v1",
        dataclasses.replace(big, fused_mlp=False),
        None,
        False,
    )
    yield (
        "PPO CartPole 4096x128, torch.compile",
        "ppo",
        "CartPole-v1",
        dataclasses.replace(big, compile=True),
        None,
        False,
    )
    yield (
        "PPO CartPole 4096x128, bf16 updates + torch.compile",
        "ppo",
        "CartPole-v1",
        dataclasses.replace(big, bf16=True, compile=True),
        None,
        False,
    )
    cartpole_10k = a2c.A2CConfig(num_envs=10_000, num_steps=5, total_timesteps=10_000 * 5 * (20 if quick else 200))
    yield "A2C CartPole 10000x5", "a2c", "CartPole-v1", cartpole_10k, None, False
    iterations = 4 if quick else 12
    # WarpDrive's 100 games with its rollout of one whole episode (500 steps); at 1000 games the
    # same 50,000 env steps per update (50 steps per game). The shipped config runs bf16 passes.
    for num_envs, num_steps in ((100, 500), (1000, 50)):
        config = tag_a2c(num_envs, num_steps, iterations)
        for backend in ("pycuda", "numba"):
            yield (
                f"A2C TagContinuous {num_envs}x{num_steps} (WarpDrive config), {backend}",
                "multi_agent",
                "TagContinuous-v0",
                config,
                backend,
                False,
            )
        yield (
            f"A2C TagContinuous {num_envs}x{num_steps}, pycuda, float32 passes on TF32 (bf16=false)",
            "multi_agent",
            "TagContinuous-v0",
            dataclasses.replace(config, bf16=False),
            "pycuda",
            False,
        )
        yield (
            f"A2C TagContinuous {num_envs}x{num_steps}, pycuda, + torch.compile",
            "multi_agent",
            "TagContinuous-v0",
            dataclasses.replace(config, compile=True),
            "pycuda",
            False,
        )
        yield (
            f"A2C TagContinuous {num_envs}x{num_steps}, pycuda, full float32 (no TF32, bf16=false)",
            "multi_agent",
            "TagContinuous-v0",
            dataclasses.replace(config, bf16=False, tf32=False),
            "pycuda",
            False,
        )
        yield (
            f"A2C TagContinuous {num_envs}x{num_steps}, pycuda, eager float32 (baseline)",
            "multi_agent",
            "TagContinuous-v0",
            dataclasses.replace(
                config, cuda_graph=False, fused_mlp=False, bf16=False, total_timesteps=num_envs * num_steps * 5
            ),
            "pycuda",
            False,
        )


def gpu_counts() -> list[int]:
    """The GPU counts of the ``--gpus`` and ``--curves`` runs: 1, 2, 4, ... up to the GPUs of this host."""
    counts = [1]
    while counts[-1] * 2 <= torch.cuda.device_count():
        counts.append(counts[-1] * 2)
    return counts


def gpu_cases(quick: bool):
    """(label, case, algorithm, env, per-GPU config, backend, processes) of the scaling table: each
    case at every count of :func:`gpu_counts`, with the all-reduce inside the captured update and,
    on several GPUs, between the replays of its pieces. Each config's total_timesteps counts all
    GPUs, so every count runs the same number of iterations."""
    iterations = 8 if quick else 30
    # Each config's run on one GPU; on N GPUs, N times the env steps (the same iterations).
    cartpole = dataclasses.replace(
        ppo.PPOConfig(), num_envs=4096, num_steps=128, total_timesteps=4096 * 128 * iterations
    )
    tag = tag_a2c(1000, 50, 4 if quick else 12)
    for case, algorithm, env_id, per_gpu, backend in (
        ("PPO CartPole 4096x128 per GPU", "ppo", "CartPole-v1", cartpole, None),
        (
            "A2C TagContinuous 1000x50 per GPU (WarpDrive config), pycuda",
            "multi_agent",
            "TagContinuous-v0",
            tag,
            "pycuda",
        ),
    ):
        for gpus in gpu_counts():
            config = dataclasses.replace(per_gpu, total_timesteps=per_gpu.total_timesteps * gpus)
            if gpus == 1:
                yield f"{case}, 1 GPU", case, algorithm, env_id, config, backend, gpus
                continue
            # Both places of the gradient all-reduce (graph_allreduce; its "auto" picks one per trainer).
            for in_graph, where in ((True, "in the graph"), (False, "between graph replays")):
                yield (
                    f"{case}, {gpus} GPU, all-reduce {where}",
                    case,
                    algorithm,
                    env_id,
                    dataclasses.replace(config, graph_allreduce=in_graph),
                    backend,
                    gpus,
                )


CURVE_ENVS = 16_384
"""Envs of all GPUs together in the learning-curve runs: 16,384 on one GPU, 4,096 on each of four."""
CURVE_CONFIG = dataclasses.replace(ppo.PPOConfig(), num_steps=128, num_minibatches=32, learning_rate=1e-3)
"""PureJaxRL's CartPole PPO with 32 minibatches and a learning rate of 1e-3: with 2M-step rollouts,
the defaults' 4 minibatches make too few gradient steps (16 an iteration) to learn within the run
(on the CPU at 256 x 128, these settings reach 475 in 9 to 11 iterations over seeds 0 and 1)."""
CURVE_CASE = f"PPO CartPole {CURVE_ENVS:,} envs x 128 in all (curve)"


def curve_cases(quick: bool):
    """(label, case, ...) as :func:`gpu_cases`: PPO on CartPole with the same total batch
    (``CURVE_ENVS`` x 128) and schedule on every count of :func:`gpu_counts`, for the learning curves."""
    iterations = 12 if quick else 40
    for gpus in gpu_counts():
        config = dataclasses.replace(
            CURVE_CONFIG, num_envs=CURVE_ENVS // gpus, total_timesteps=CURVE_ENVS * 128 * iterations
        )
        yield f"{CURVE_CASE}, {gpus} GPU", CURVE_CASE, "ppo", "CartPole-v1", config, None, gpus


def gpu_worker(label: str, quick: bool, result_path: str) -> None:
    """One rank of a ``--gpus`` case (started by torchrun): train, check that the ranks' parameters
    agree, and on rank 0 write the summary and history to ``result_path``."""
    context = setup("cuda")
    _, _, algorithm, env_id, config, backend, _ = next(
        case for case in (*gpu_cases(quick), *curve_cases(quick)) if case[0] == label
    )
    module = {"ppo": ppo, "a2c": a2c, "multi_agent": multi_agent}[algorithm]
    trained, history = module.train(env_id, config, device="cuda", backend=backend, log_every=1, log=None)
    torch.cuda.synchronize()
    modules = trained.values() if isinstance(trained, dict) else [trained]
    mine = torch.cat([p.detach().reshape(-1) for m in modules for p in m.parameters()])
    everyone = [mine]
    if context.enabled:
        everyone = [torch.empty_like(mine) for _ in range(context.world_size)]
        dist.all_gather(everyone, mine)
    if context.is_main:
        result = summary(algorithm, env_id, backend, config, history, {})
        result.update(
            gpus=context.world_size, history=history, ranks_agree=all(torch.equal(mine, other) for other in everyone)
        )
        Path(result_path).write_text(json.dumps(result))
    teardown()


def run_gpu_cases(args) -> None:
    """The ``--gpus`` table and/or the ``--curves`` runs, each case through torchrun with one
    process per GPU; the table and the raw results are saved after every case."""
    gpu = torch.cuda.get_device_name()
    rows, results, one_gpu = [], [], {}
    cases = [*(gpu_cases(args.quick) if args.gpus else ()), *(curve_cases(args.quick) if args.curves else ())]
    for label, case, *_, gpus in cases:
        if args.only and args.only not in label:
            continue
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "result.json"
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={gpus}",
                __file__,
                "--worker",
                label,
                "--result",
                str(path),
            ] + (["--quick"] if args.quick else [])
            done = subprocess.run(command)
            if done.returncode != 0 or not path.exists():
                print(f"{label}: failed (exit {done.returncode})", flush=True)
                continue
            result = {"label": label, "case": case, **json.loads(path.read_text())}
        results.append(result)
        sps = result.get("env_steps_per_s")
        if gpus == 1:
            one_gpu[case] = sps
        speedup = f"{sps / one_gpu[case]:.2f}x" if gpus > 1 and sps and one_gpu.get(case) else "—"
        final = result.get("final_return")
        row = (
            f"| {label} | {gpus} | {f'{sps / 1e6:.3g} M' if sps else '—'} | {speedup} | "
            f"{f'{final:.1f}' if final is not None else '—'} | {'yes' if result['ranks_agree'] else '**no**'} |"
        )
        print(row, flush=True)
        rows.append(row)
        save_gpus(args, gpu, rows, results)
    curves = {
        f"{r['gpus']} GPU{'s' if r['gpus'] > 1 else ''}, {r['config']['num_envs']:,} envs each": r["history"]
        for r in results
        if r["case"] == CURVE_CASE
    }
    if args.curves and curves:
        plot_learning_curves(
            curves, args.curves, f"PPO on CartPole-v1, the same total batch ({CURVE_ENVS:,} envs x 128 steps)\n{gpu}"
        )
        print(f"learning curves: {args.curves}")


def save_gpus(args, gpu: str, rows: list[str], results: list[dict]) -> None:
    counts = ", ".join(map(str, gpu_counts()))
    lines = [
        f"Training on {counts} x {gpu} (torch {torch.__version__}), torchrun, one process per GPU",
        "",
        "| configuration | GPUs | env-steps/s (all GPUs) | vs 1 GPU | final mean return | ranks agree |",
        "|---|---:|---:|---:|---:|---|",
        *rows,
    ]
    save(
        args,
        "\n".join(lines) + "\n",
        {
            "gpu": gpu,
            "torch": torch.__version__,
            "results": [{k: v for k, v in r.items() if k != "history"} for r in results],
            "histories": {r["label"]: r["history"] for r in results},
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_options(parser)
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--only", help="run the cases whose label contains this text")
    parser.add_argument(
        "--gpus",
        action="store_true",
        help="the multi-GPU scaling cases (torchrun) on 1, 2, 4, ... GPUs, up to the GPUs here, instead",
    )
    parser.add_argument(
        "--curves",
        metavar="PNG",
        help="the learning curves of 1, 2, 4, ... GPUs at the same total batch, drawn to PNG (alone or with --gpus)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one rank of the --gpus case of this label
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        gpu_worker(args.worker, args.quick, args.result)
        return
    if args.gpus or args.curves:
        run_gpu_cases(args)
        return
    gpu = torch.cuda.get_device_name()
    rows, results = [], []
    for label, algorithm, env_id, config, backend, to_threshold in cases(args.quick):
        if args.only and args.only not in label:
            continue
        result = {"label": label, **run(algorithm, env_id, config, backend=backend, stop_at_threshold=to_threshold)}
        results.append(result)
        sps, tt = result.get("env_steps_per_s"), result["time_to_threshold_s"]
        speed = f"{sps / 1e6:.3g} M" if sps else "—"
        shares = f"{result['rollout_share']:.0%} / {result['update_share']:.0%}" if sps else "—"
        threshold = f"{tt:.2f} s ({result['steps_to_threshold']:,} steps)" if tt else "—"
        first_two = result["first_two_iterations_s"]
        row = f"| {label} | {speed} | {shares} | {threshold} | {f'{first_two:.2f} s' if first_two else '—'} |"
        print(row, flush=True)
        rows.append(row)
        save_one_gpu(args, gpu, rows, results)  # after every case: a run cut short keeps what it measured
    print("\n".join(table(gpu, rows)))


def table(gpu: str, rows: list[str]) -> list[str]:
    return [
        f"Training speed on {gpu} (torch {torch.__version__})",
        "",
        "| configuration | env-steps/s | rollout / update | time to mean return 475 | first 2 iterations |",
        "|---|---:|---:|---:|---:|",
        *rows,
    ]


def save_one_gpu(args, gpu: str, rows: list[str], results: list[dict]) -> None:
    save(args, "\n".join(table(gpu, rows)) + "\n", {"gpu": gpu, "torch": torch.__version__, "results": results})


if __name__ == "__main__":
    main()
