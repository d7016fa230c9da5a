"""Lightning's overhead on the GPU: env-steps/s of a trainer's own ``train`` (what ``gpu-marl-train``
runs) against the same config through Lightning's Trainer (``gpu-marl-train --lightning``, and a
Trainer with its progress bar, a CSV logger and ``TrainingStats``, as a user would have it), in one
process, alternating, for PPO on CartPole at 4,096 envs x 128 steps, WarpDrive's Tag A2C config
at 1,000 games x 50 steps (pycuda, the shipped file's bf16 passes) and the shipped DDPG config on
Pendulum (its whole run: 2,500 iterations of 8 envs). Issue 27's target (and issue 43's for
DDPG): Lightning within 5% of ``train``.

Each run logs every ``log_every`` iterations (a history entry is the only host synchronisation; 1
is gpu-marl-train's interval for runs shorter than 100 iterations, and the worst case for
Lightning, whose per-step Python then cannot hide behind the GPU's work); throughput is taken
between the third history entry and the last (after warm-up and graph capture), as in
``train_throughput.py``. Each row is the median of ``--repeats`` runs; the runs of a case alternate
(train, Lightning, Lightning with defaults, train, ...) so that drifts of the GPU's clock fall on
all of them alike. "same parameters": whether the last Lightning run ended with the parameters of
the last ``train`` run (same seed).

    python benchmarks/lightning_overhead.py --out lightning.md --json lightning.json   # docs/lightning.md
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
import tempfile
import time

import lightning
import lightning.pytorch as pl
import torch
from gpu_marl_envs.baselines import ddpg, multi_agent, ppo
from gpu_marl_envs.baselines.lightning import TrainingStats, training_module
from gpu_marl_envs.baselines.run_config import CONFIGS, build_config, read_config
from lightning.pytorch.loggers import CSVLogger
from report import add_output_options, gpu_hardware, save
from train_throughput import tag_a2c

WARM_UP_ENTRIES = 3


def cases(iterations: int):
    """(label, trainer module, env, config, backend)."""
    cartpole = dataclasses.replace(
        ppo.PPOConfig(), num_envs=4096, num_steps=128, total_timesteps=4096 * 128 * iterations
    )
    yield "PPO CartPole 4096x128", ppo, "CartPole-v1", cartpole, None
    yield (
        "A2C TagContinuous 1000x50 (WarpDrive config), pycuda",
        multi_agent,
        "TagContinuous-v0",
        tag_a2c(1000, 50, iterations),
        "pycuda",
    )
    # Its own length: a DDPG iteration is one vector step of 8 envs, and it learns after 125 of them.
    _, env_id, pendulum = build_config(read_config(CONFIGS / "pendulum_ddpg.toml"), [], None)
    yield "DDPG Pendulum (shipped config, whole run)", ddpg, env_id, pendulum, None


def throughput(history: list[dict]) -> float:
    first, last = history[WARM_UP_ENTRIES - 1], history[-1]
    return (last["env_steps"] - first["env_steps"]) / (last["seconds"] - first["seconds"])


def flat(trained) -> torch.Tensor:
    modules = trained.values() if isinstance(trained, dict) else [trained]
    return torch.cat([p.detach().reshape(-1).cpu() for m in modules for p in m.parameters()])


def release_last_run() -> None:
    """Free what the last run left before the next. A LightningModule and its Trainer refer to each
    other, so a finished fit (its module's CUDA graphs and their memory pools with it) is freed
    only by the cycle collector: on an H100 (2026-11-26), 18 runs in one process held 66 GiB in
    graph pools and the 19th ran out of memory."""
    gc.collect()
    torch.cuda.empty_cache()


def run_train(trainer_module, env_id, config, backend, log_every):
    release_last_run()
    trained, history = trainer_module.train(
        env_id, config, device="cuda", backend=backend, log_every=log_every, log=None
    )
    torch.cuda.synchronize()
    return throughput(history), flat(trained)


def run_lightning(env_id, config, backend, log_every, defaults: bool):
    release_last_run()
    # As gpu-marl-train --lightning makes it (no self.log), or as a user would (the progress bar shows mean_return).
    module = training_module(env_id, config, backend=backend, log_mean_return=defaults)
    with tempfile.TemporaryDirectory() as folder:
        options = (
            {"logger": CSVLogger(folder), "callbacks": [TrainingStats(verbose=False)]}
            if defaults
            # gpu-marl-train --lightning's Trainer: the command logs and shows progress itself.
            else {"logger": False, "enable_progress_bar": False}
        )
        trainer = pl.Trainer(
            accelerator="gpu",
            devices=1,
            max_epochs=1,
            log_every_n_steps=log_every,
            enable_checkpointing=False,
            enable_model_summary=False,
            default_root_dir=folder,
            **options,
        )
        trainer.fit(module)
    torch.cuda.synchronize()
    return throughput(module.history), flat(module.trained())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--iterations",
        type=int,
        default=60,
        help="iterations of each run (default 60: the warm-up and two entries at --log-every 10)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind per row (default 3)")
    parser.add_argument("--log-every", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--only", help="the cases whose label contains this text (e.g. DDPG)")
    add_output_options(parser)
    args = parser.parse_args()
    hardware = gpu_hardware()
    if any(args.iterations < WARM_UP_ENTRIES * every + 2 * every for every in args.log_every):
        raise SystemExit(f"--iterations {args.iterations} leaves too few history entries after the warm-up")
    rows = []
    for label, trainer_module, env_id, config, backend in cases(args.iterations):
        if args.only and args.only not in label:
            continue
        for log_every in args.log_every:
            rates = {"train": [], "lightning": [], "lightning defaults": []}
            for _ in range(args.repeats):
                rate, expected = run_train(trainer_module, env_id, config, backend, log_every)
                rates["train"].append(rate)
                rate, bare = run_lightning(env_id, config, backend, log_every, defaults=False)
                rates["lightning"].append(rate)
                rate, _ = run_lightning(env_id, config, backend, log_every, defaults=True)
                rates["lightning defaults"].append(rate)
            median = {kind: statistics.median(values) for kind, values in rates.items()}
            row = {
                "case": label,
                "log_every": log_every,
                "runs": rates,
                "median": median,
                "overhead": 1 - median["lightning"] / median["train"],
                "overhead_defaults": 1 - median["lightning defaults"] / median["train"],
                "same_parameters": torch.equal(expected, bare),
            }
            rows.append(row)
            print(
                f"{label}, log every {log_every}: train {median['train'] / 1e6:.3f} M env-steps/s, Lightning "
                f"{median['lightning'] / 1e6:.3f} M ({100 * row['overhead']:+.1f}% overhead), with defaults "
                f"{median['lightning defaults'] / 1e6:.3f} M ({100 * row['overhead_defaults']:+.1f}%), same "
                f"parameters: {row['same_parameters']}",
                flush=True,
            )
    lines = [
        f"Lightning's overhead on {hardware}, lightning {lightning.__version__}, measured "
        f"{time.strftime('%Y-%m-%d')} with `python {' '.join(sys.argv)}` "
        f"({args.iterations} iterations a run, median of {args.repeats}; overhead = 1 - Lightning / train):",
        "",
        "| configuration | log every | `train` (gpu-marl-train) | Lightning (`--lightning`) | overhead | "
        "Lightning, progress bar + CSV logger + TrainingStats | overhead | same parameters |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        m = row["median"]
        lines.append(
            f"| {row['case']} | {row['log_every']} | {m['train'] / 1e6:.3f} M | {m['lightning'] / 1e6:.3f} M "
            f"| {100 * row['overhead']:.1f}% | {m['lightning defaults'] / 1e6:.3f} M | "
            f"{100 * row['overhead_defaults']:.1f}% | {'yes' if row['same_parameters'] else 'no'} |"
        )
    save(
        args,
        "\n".join(lines) + "\n",
        {"hardware": hardware, "lightning": lightning.__version__, "command": sys.argv, "rows": rows},
    )


if __name__ == "__main__":
    main()
