"""Issue 46's table from one run: every bundled Numba kernel against its CUDA C twin on one GPU.

Runs, one after the other in this process's GPU session, the benchmarks that hold the table's rows
(each writes its JSON record into ``--out``): the classic-control envs and the Puck example
(``throughput.py``), the Cover example (``experiments/cover_throughput.py``), Tag
(``tag_throughput.py``), CovidEconomy (``covid_throughput.py``) and the MPE games
(``mpe_throughput.py``, no peers). Then it prints one table, µs a step for CUDA C and for Numba
and their ratio per workload, and writes it to ``OUT/numba-parity.md`` (a new ``--out``: a run's
records are never overwritten). Each benchmark times its
rows as its own docstring says (``throughput.py`` and the Cover example time the two backends in
turns: their small batches are host-bound).

    python benchmarks/numba_parity.py --out numba-parity        # on a GPU; some 5 minutes on an H200
    python benchmarks/numba_parity.py --out numba-parity --only tag covid
    python benchmarks/numba_parity.py --out numba-parity --table-only   # the table again from the records
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "docs" / "examples"
BACKENDS = ["--backends", "pycuda", "numba"]
CLASSIC = ["Acrobot-v1", "CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1", "puck/Puck-v0"]
TAG = [
    "TagContinuous 2000x1000",
    "TagContinuous 2000x1000 all in play",
    "TagContinuous 100x10000",
    "TagContinuous 1000x110",
    "TagGridworld 2000x5",
    "TagGridworld 65536x5",
]
# name -> the benchmark's command line, the record's path appended where the script takes it.
RUNS = {
    "classic": [HERE / "throughput.py", "--envs", *CLASSIC, *BACKENDS, "--num-envs", "4096", "65536", "1048576"],
    "cover": [HERE / "experiments" / "cover_throughput.py"],
    "tag": [HERE / "tag_throughput.py", *BACKENDS, "--configs", *TAG],
    "covid": [HERE / "covid_throughput.py", *BACKENDS, "--sizes", "100000"],
    "mpe": [HERE / "mpe_throughput.py", *BACKENDS, "--peers", "--num-envs", "65536"],
}
TWINS = {"pycuda": "CUDA C", "numba": "Numba"}


def run(name: str, out: Path) -> None:
    record = out / f"{name}.json"
    command = [sys.executable, *map(str, RUNS[name])]
    command += [str(record)] if name == "cover" else ["--json", str(record)]
    env = dict(os.environ)
    # The examples' packages on the path, as their editable installs would put them.
    paths = [str(EXAMPLES / "cover"), str(EXAMPLES / "puck"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    with open(out / f"{name}.log", "w") as log:
        print(f"# {name}: {' '.join(command[1:])}", flush=True)
        subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)


def rows_of(record) -> list[dict]:
    """The timed rows of a benchmark's record (a list, or a dict with ``results``)."""
    rows = record["results"] if isinstance(record, dict) else record
    return [r for r in rows if "us_per_step" in r]


def workload(name: str, row: dict) -> tuple[str, str]:
    """(what was timed, without the backend; the backend's twin) of one row, or the twin '' if the
    row is not one of the two kernel backends."""
    backend, _, mode = row.get("backend", "").partition(", ")  # "numba, captured": a captured rollout
    if row.get("runner", "ours") != "ours" or backend not in TWINS:
        return "", ""
    if name == "tag":
        what = row["label"]
    elif name == "covid":
        what = f"CovidEconomy-v0 {row['num_envs']:,} envs"
    elif name == "mpe":
        what = f"{row['scenario']} {row['num_envs']:,} games, {row['actions']}"
    else:
        what = f"{row['env']} {row['num_envs']:,} envs"
    if row.get("api", "step_groups") != "step_groups":  # (Tag's rows through the PettingZoo dict API)
        what += f", {row['api']}"
    if row.get("validate_actions"):
        what += ", validate_actions=True"
    return what + (f", {mode}" if mode else ""), TWINS[backend]


def table(out: Path, names: list[str]) -> str:
    pairs: dict[str, dict[str, float]] = {}
    hardware = ""
    for name in names:
        path = out / f"{name}.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        if isinstance(record, dict) and not hardware:
            hardware = str(record.get("hardware", ""))
        for row in rows_of(record):
            what, twin = workload(name, row)
            if twin:
                pairs.setdefault(what, {})[twin] = row["us_per_step"]
    lines = [
        f"Hardware: {hardware}. µs a step; ratio = Numba / CUDA C (issue 46's target: at most 1.15).",
        "",
        "| workload | CUDA C | Numba | ratio |",
        "|---|---:|---:|---:|",
    ]
    for what, times in pairs.items():
        if len(times) == 2:  # (a benchmark may time a variant on one backend only)
            cuda_c, numba = times["CUDA C"], times["Numba"]
            lines.append(f"| {what} | {cuda_c:,.1f} | {numba:,.1f} | {numba / cuda_c:.2f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="a folder for the records, the logs and the table")
    parser.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS), help="these benchmarks only")
    parser.add_argument("--table-only", action="store_true", help="run nothing: the table from the records in --out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for name in args.only:
            record = args.out / f"{name}.json"
            if record.exists():  # a run's records are never overwritten
                sys.exit(f"{record} exists: name another --out, or --table-only to print its table")
        for name in args.only:
            run(name, args.out)
    text = table(args.out, args.only)
    print(text)
    if not args.table_only:
        (args.out / "numba-parity.md").write_text(text)


if __name__ == "__main__":
    main()
