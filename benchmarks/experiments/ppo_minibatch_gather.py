"""Why PPO's minibatch draws cost what the profile says (issue 44; ``docs/benchmarks/training.md``:
at CartPole 4096 x 128, the observations' ``b_obs[idx]`` took 80 µs a call for 2 MB, 1.28 ms an
iteration, plus 0.36 ms of the other fields' gathers), and what a draw could cost instead.

One minibatch of PPO CartPole's shipped shape (a rollout of ``--rows`` rows, 4 observation floats
and an int64 action each, minibatches of a quarter of it, drawn by a random permutation as
``ppo.py`` draws them), each way of drawing it replayed ``--repeats`` times in one CUDA graph (no
launch cost in the timing, as in the captured update), timed with CUDA events, µs per draw:

- ``per field``: ``ppo.py``'s six gathers (observations, actions, log-probabilities, advantages,
  returns, values);
- ``observations only``: the one gather the profile names;
- ``packed rows``: the five float fields and the action (as a float: CartPole's are 0 or 1) side by
  side in one ``(rows, 9)`` tensor, one gather;
- ``index_select``: the observations through ``torch.index_select`` instead of indexing;
- ``sorted indices``: the observations' gather with the minibatch's indices sorted (the same rows,
  read in order: how much the random order itself costs);
- ``permutation``: ``torch.rand(rows).argsort()``, the epoch's draw.

    python benchmarks/experiments/ppo_minibatch_gather.py --out gather.md --json gather.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

# The suite's modules (report) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, gpu_hardware, save  # noqa: E402

ROWS = 4096 * 128
MINIBATCHES = 4
OBS = 4


def timed_graph(draw, repeats: int) -> float:
    """µs per call of ``draw`` replayed ``repeats`` times in one CUDA graph (after a warm-up)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            draw()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            draw()
    graph.replay()  # warm: the graph's first launch uploads it
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return 1000 * start.elapsed_time(end) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rollout rows (default {ROWS:,}: 4096 x 128)")
    parser.add_argument("--repeats", type=int, default=50, help="draws in the timed graph (default 50)")
    add_output_options(parser)
    args = parser.parse_args()
    hardware = gpu_hardware()
    rows, size = args.rows, args.rows // MINIBATCHES
    g = torch.Generator(device="cuda").manual_seed(0)
    obs = torch.randn(rows, OBS, device="cuda", generator=g)
    actions = torch.randint(0, 2, (rows,), device="cuda", generator=g)
    fields = [torch.randn(rows, device="cuda", generator=g) for _ in range(4)]  # log-probs, advantages, returns, values
    packed = torch.cat([obs, actions[:, None].float(), *(f[:, None] for f in fields)], dim=1).contiguous()
    idx = torch.rand(rows, device="cuda", generator=g).argsort()[:size]
    sorted_idx = idx.sort().values

    ways = {
        "per field (ppo.py)": lambda: [t[idx] for t in (obs, actions, *fields)],
        "observations only": lambda: obs[idx],
        "packed rows (rows, 9)": lambda: packed[idx],
        "index_select": lambda: torch.index_select(obs, 0, idx),
        "sorted indices": lambda: obs[sorted_idx],
        "permutation (rand + argsort)": lambda: torch.rand(rows, device="cuda").argsort(),
    }
    results = {name: timed_graph(draw, args.repeats) for name, draw in ways.items()}
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/experiments/ppo_minibatch_gather.py`.",
        "",
        f"A minibatch of {size:,} rows drawn from {rows:,} ({OBS} observation floats, an int64 action), "
        f"{args.repeats} draws replayed in one CUDA graph, µs per draw:",
        "",
        "| draw | µs |",
        "|---|---:|",
        *(f"| {name} | {us:.1f} |" for name, us in results.items()),
    ]
    save(args, "\n".join(lines), {"hardware": hardware, "rows": rows, "minibatch": size, "us": results})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
