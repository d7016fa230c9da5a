"""Peer baseline (issue 43): LeanRL's TD3 scripts on ``Pendulum-v1``, on the same GPU as our TD3
(``benchmarks/offpolicy_throughput.py``), run as LeanRL ships them: one Gymnasium env stepped on the CPU
(a ``SyncVectorEnv`` of one), the networks on the GPU, one critic update per env step.

Each mode runs LeanRL's script (staged by ``stage.sh`` into ``.peerwheels/leanrl/``, never committed
here) in a subprocess: ``cleanrl`` is ``td3_continuous_action.py`` (CleanRL's loop, stable-baselines3's
replay buffer), the others ``td3_continuous_action_torchcompile.py`` (tensordict, torchrl's replay
buffer) without flags (``eager``), with ``--compile``, ``--cudagraphs`` or both: the four columns of
LeanRL's own speed table are ``cleanrl``, ``eager``, ``compile`` and ``compile+cudagraphs``. The
steps/s are the scripts' own: they log ``speed`` (env steps since ``learning_starts + 3`` over the time
since then) every 100 steps; a stand-in ``wandb`` module, first on the subprocess's path, records it
(LeanRL calls ``wandb.init`` and ``wandb.log`` unconditionally). The last one logged is reported. The
wall time is the subprocess's, start-up and compilation included. ``--legacy-site`` runs them on LeanRL's
gymnasium 0.29.1 and numpy 1.26.4 (``cleanrl`` needs it). README.md beside this file has the wheels, the
GPU machine's command and what differs from our TD3.

    python benchmarks/peers/leanrl_td3.py --legacy-site /tmp/legacy --out leanrl-td3.md --json leanrl-td3.json
    python benchmarks/peers/leanrl_td3.py --cpu --modes eager --total-timesteps 300 --learning-starts 50
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.metadata
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import add_output_options, gpu_hardware, save  # noqa: E402

STAGED = Path(__file__).resolve().parents[2] / ".peerwheels" / "leanrl"
"""Where ``stage.sh`` puts LeanRL's scripts, its licence, its commit and the wheels they import."""
COMPILED_SCRIPT = "td3_continuous_action_torchcompile.py"
MODES = {
    "cleanrl": ("td3_continuous_action.py", []),
    "eager": (COMPILED_SCRIPT, []),
    "compile": (COMPILED_SCRIPT, ["--compile"]),
    "cudagraphs": (COMPILED_SCRIPT, ["--cudagraphs"]),
    "compile+cudagraphs": (COMPILED_SCRIPT, ["--compile", "--cudagraphs"]),
}
"""Mode: (LeanRL's script, its flags)."""
NEEDS = {
    "td3_continuous_action.py": ("gymnasium", "tyro", "tqdm", "stable_baselines3"),
    COMPILED_SCRIPT: ("gymnasium", "tyro", "tqdm", "tensordict", "torchrl"),
}
"""The modules each script imports beyond torch and numpy (``wandb`` is stood in for)."""
LOG_INTERVAL = 100
"""The scripts log their speed at every 100th step after ``learning_starts + 3``."""
WANDB_STUB = '''"""wandb's stand-in for LeanRL's scripts (benchmarks/peers/leanrl_td3.py): ``init`` does nothing and
``log`` appends the logged ``speed`` and ``episode_return`` (a Python float and a CPU tensor: no GPU sync is
added) to $LEANRL_TD3_SPEEDS."""

import json
import os


def init(*args, **kwargs):
    return None


def log(data, step=None):
    with open(os.environ["LEANRL_TD3_SPEEDS"], "a") as f:
        # episode_return: the mean of the last 20 training episodes, a CPU tensor (nan where none ended).
        record = {"step": step, "speed": data["speed"], "episode_return": float(data["episode_return"])}
        f.write(json.dumps(record) + "\\n")
'''


def distribution_version(name: str, path: list[str]) -> str | None:
    """The version of the first distribution ``name`` on ``path``, as the scripts' interpreter finds it."""
    found = next(iter(importlib.metadata.distributions(name=name, path=path)), None)
    return found.version if found else None


def check_staged(modes: list[str], path: list[str]) -> dict:
    """The versions the scripts will import; exits with one line where a script is not staged, a module it
    imports cannot be found on ``path`` or a version cannot run it."""
    for mode in modes:
        script = STAGED / MODES[mode][0]
        if not script.is_file():
            raise SystemExit(f"leanrl_td3: no {script}: run `bash benchmarks/peers/stage.sh` and carry .peerwheels")
    needed = {name for mode in modes for name in NEEDS[MODES[mode][0]]}
    missing = sorted(name for name in needed if not importlib.machinery.PathFinder.find_spec(name, path))
    if missing:
        raise SystemExit(
            f"leanrl_td3: cannot import {', '.join(missing)}: install .peerwheels/leanrl/*.whl (and .devwheels/ for "
            "gymnasium and stable-baselines3) and put them on PYTHONPATH (benchmarks/peers/README.md)"
        )
    versions = {name: distribution_version(name, path) for name in ("torch", "numpy", "gymnasium", *sorted(needed))}
    tensordict = versions.get("tensordict")
    if tensordict and release(tensordict) >= (0, 13):
        raise SystemExit(
            f"leanrl_td3: tensordict {tensordict} found; LeanRL's script needs < 0.13 (stage.sh says why): "
            "put .peerwheels/leanrl's wheels first on PYTHONPATH"
        )
    if "cleanrl" in modes and release(versions["gymnasium"]) >= (1, 0):
        raise SystemExit(
            f"leanrl_td3: gymnasium {versions['gymnasium']} found; td3_continuous_action.py (--modes cleanrl) "
            "reads infos['final_observation'], which gymnasium 1.x has not: pass --legacy-site (README.md)"
        )
    return versions


def release(version: str) -> tuple[int, int]:
    """``"0.12.4"`` -> ``(0, 12)``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def run(mode: str, args, work: Path) -> dict:
    """One run of LeanRL's script in ``mode``: its wall time, its last logged speed, its exit status and log."""
    script, flags = MODES[mode]
    speeds, log = work / f"{mode}.speeds.jsonl", work / f"{mode}.log"
    speeds.unlink(missing_ok=True)
    path = os.pathsep.join(p for p in (str(work / "stub"), args.legacy_site, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, LEANRL_TD3_SPEEDS=str(speeds))
    command = [
        sys.executable,
        str(STAGED / script),
        "--env-id=Pendulum-v1",
        f"--total-timesteps={args.total_timesteps}",
        f"--learning-starts={args.learning_starts}",
        f"--seed={args.seed}",
        *flags,
        *(["--no-cuda"] if args.cpu else []),
    ]
    begin = time.perf_counter()
    with open(log, "w") as out:
        try:
            rc = subprocess.run(
                command, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=args.timeout
            ).returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {args.timeout:g} s"
    wall = time.perf_counter() - begin
    logged = [json.loads(line) for line in speeds.read_text().splitlines()] if speeds.exists() else []
    result = {"mode": mode, "command": command[1:], "rc": rc, "wall_s": wall, "log": str(log)}
    if logged:
        result["env_steps_per_s"] = logged[-1]["speed"]
        result["speed_at_step"] = logged[-1]["step"]
        episode_return = logged[-1]["episode_return"]
        result["training_return"] = None if math.isnan(episode_return) else episode_return
    if rc != 0:
        lines = log.read_text(errors="replace").replace("\r", "\n").strip().splitlines()
        result["error"] = lines[-1] if lines else ""
    return result


def row(result: dict, eager: dict | None) -> str:
    if result["rc"] != 0:
        error = result["error"][:120].replace("|", "/")
        return f"| {result['mode']} | {result['wall_s']:.1f} s | failed ({result['rc']}): {error} ||||"
    rate = result.get("env_steps_per_s")
    if rate is None:
        return f"| {result['mode']} | {result['wall_s']:.1f} s | no speed logged ||||"
    gain = f"{rate / eager['env_steps_per_s']:.1f}x" if eager and eager.get("env_steps_per_s") else ""
    episode_return = result["training_return"]
    shown = "none ended" if episode_return is None else f"{episode_return:.1f}"
    # One critic update per env step (the actor's at every second): gradient steps/s = env steps/s.
    return f"| {result['mode']} | {result['wall_s']:.1f} s | {rate:,.0f} | {rate:,.0f} | {gain} | {shown} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_options(parser)
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=list(MODES),
        default=["cleanrl", "eager", "compile", "compile+cudagraphs"],
        help="the runs, in order (default: LeanRL's four columns)",
    )
    parser.add_argument(
        "--total-timesteps", type=int, default=20_000, help="env steps (default 20,000: pendulum_td3.toml's)"
    )
    parser.add_argument(
        "--learning-starts", type=int, default=1_000, help="random steps before learning (default 1,000: ours)"
    )
    parser.add_argument("--seed", type=int, default=1, help="the scripts' seed (default 1, theirs)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds one run may take (default 240)")
    parser.add_argument("--cpu", action="store_true", help="the networks on the CPU too (--no-cuda): a smoke test")
    parser.add_argument("--log-dir", help="keep each run's output here (default: a temporary folder)")
    parser.add_argument(
        "--legacy-site",
        help="a folder put first on the scripts' path (not this process's): LeanRL's era, gymnasium 0.29.1 and "
        "numpy 1.26.4 from .peerwheels/leanrl/legacy/ (td3_continuous_action.py needs gymnasium < 1.0)",
    )
    args = parser.parse_args()
    if args.total_timesteps < args.learning_starts + 3 + 2 * LOG_INTERVAL:
        parser.error("--total-timesteps must exceed --learning-starts by 203 or more for a speed to be logged")
    versions = check_staged(args.modes, [p for p in (args.legacy_site, *sys.path) if p])
    work = Path(args.log_dir or tempfile.mkdtemp(prefix="leanrl_td3_")).resolve()
    (work / "stub" / "wandb").mkdir(parents=True, exist_ok=True)
    (work / "stub" / "wandb" / "__init__.py").write_text(WANDB_STUB)
    hardware = "the CPU (--no-cuda)" if args.cpu else gpu_hardware()
    commit = (STAGED / "COMMIT").read_text().strip() if (STAGED / "COMMIT").exists() else "unknown"
    header = [
        f"LeanRL's TD3 (commit {commit[:7]}) on {hardware}: Pendulum-v1, 1 env on the CPU, "
        f"{args.total_timesteps:,} env steps, learning from step {args.learning_starts:,}, seed {args.seed}; "
        "env steps/s as the script logs it (from learning_starts + 3 on), wall with start-up and compilation; "
        "training return: the mean of its last 20 episodes",
        "",
        ", ".join(f"{name} {version}" for name, version in versions.items()),
        "",
        "| run | wall | env steps/s | gradient steps/s | speed-up (vs eager) | training return |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(header), flush=True)
    results = {}
    for mode in args.modes:
        results[mode] = run(mode, args, work)
        print(row(results[mode], results.get("eager")), flush=True)
        rows = [row(result, results.get("eager")) for result in results.values()]
        record = {
            "hardware": hardware,
            "leanrl_commit": commit,
            "versions": versions,
            "args": vars(args),
            "runs": results,
        }
        save(args, "\n".join(header + rows) + "\n", record)
    print("\n".join(header + rows), f"\nlogs in {work}", flush=True)


if __name__ == "__main__":
    main()
