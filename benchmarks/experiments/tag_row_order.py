"""The measurements behind the order in which the CUDA C Tag kernel writes observation rows
(``tag_continuous_kernel_layout.rows_by_id``, ``ROWS_BY_ID_MAX_AGENTS``):

- a store probe: 2,000 games x 1,000 rows of 71 floats (the observation buffer at 2,000 x 1,000)
  stored as zeros by blocks of 256 threads, four blocks an SM as the Tag kernel runs: a warp a row
  at a time, in each game's id order and in a random order of its rows (as the grid's order
  scatters them); 32 rows a warp, the same two orders; and 32 consecutive rows a warp as one run;
- TagContinuous env-steps/s through ``step_groups`` with the rows by id and in the grid's order,
  over agents per game, with the published rules (tagged runners leave: the games thin out) and
  with every agent in play. ``ROWS_BY_ID_MAX_AGENTS`` is a module constant rather than a param:
  set here before each kernel is built.

    python benchmarks/experiments/tag_row_order.py --out tag-order.md --json tag-order.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

# The suite's modules (report, tag_throughput) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, gpu_hardware, save  # noqa: E402
from tag_search_rule import rate as cuda_c_rate  # noqa: E402
from tag_throughput import tag_constants  # noqa: E402

from gpu_marl_envs.envs.tag_continuous import TagContinuousParams  # noqa: E402

GAMES, ROWS, FLOATS = 2000, 1000, 71
# (games, agents per game, published rules): the sizes the rule was chosen from.
SIZES = [
    (2000, 1000, True),
    (2000, 1000, False),
    (2000, 2000, True),
    (2000, 2000, False),
    (2000, 3000, True),
    (2000, 3000, False),
    (2000, 5000, True),
    (1000, 5000, False),
    (500, 10000, True),
    (500, 10000, False),
    (100, 10000, True),
]

PROBE_SOURCE = r"""
// A warp a row at a time, rows in the order perm gives.
extern "C" __global__ void __launch_bounds__(256, 4) rows(float* obs, const int* perm, int n, int d) {
    int e = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int* p = perm + (long long)e * n;
    for (int r = warp; r < n; r += 8) {
        float* row = obs + ((long long)e * n + p[r]) * d;
        for (int w = lane; w < d; w += 32) row[w] = 0.0f;
    }
}
// 32 rows of perm a warp, a row at a time (the kernel's grouping).
extern "C" __global__ void __launch_bounds__(256, 4) chunks(float* obs, const int* perm, int n, int d) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, e = blockIdx.x;
    const int* p = perm + (long long)e * n;
    for (int first = warp * 32; first < n; first += 256)
        for (int r = first; r < min(first + 32, n); ++r) {
            float* row = obs + ((long long)e * n + p[r]) * d;
            for (int w = lane; w < d; w += 32) row[w] = 0.0f;
        }
}
// 32 consecutive rows a warp as one run of the buffer.
extern "C" __global__ void __launch_bounds__(256, 4) run(float* obs, const int* perm, int n, int d) {
    int e = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int first = warp * 32; first < n; first += 256) {
        int rows = min(32, n - first);
        float* segment = obs + ((long long)e * n + first) * d;
        for (int w = lane; w < rows * d; w += 32) segment[w] = 0.0f;
    }
}
"""


def probe(repeats: int = 50) -> dict[str, float]:
    """µs per store of the whole buffer, by ``"<stores>, <rows>"``."""
    torch.cuda.init()  # the primary context, which pycuda then retains: the one the envs use after
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    from pycuda.compiler import SourceModule

    module = SourceModule(PROBE_SOURCE, no_extern_c=True)
    obs = drv.mem_alloc(GAMES * ROWS * FLOATS * 4)
    rng = np.random.default_rng(0)
    orders = {
        "id order": drv.to_device(np.tile(np.arange(ROWS, dtype=np.int32), GAMES)),
        "random order": drv.to_device(np.concatenate([rng.permutation(ROWS).astype(np.int32) for _ in range(GAMES)])),
    }
    shared = 50 * 1024  # about the Tag kernel's at 1,000 agents: four blocks an SM
    times = {}
    for name, label in [("rows", "a row at a time"), ("chunks", "32 rows a warp"), ("run", "one run a warp")]:
        kernel = module.get_function(name)
        kernel.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        for order, perm in orders.items():
            if name == "run" and order != "id order":
                continue
            launch = dict(block=(256, 1, 1), grid=(GAMES, 1), shared=shared)
            for _ in range(5):  # warm-up
                kernel(obs, perm, np.int32(ROWS), np.int32(FLOATS), **launch)
            start, end = drv.Event(), drv.Event()
            start.record()
            for _ in range(repeats):
                kernel(obs, perm, np.int32(ROWS), np.int32(FLOATS), **launch)
            end.record()
            end.synchronize()
            times[f"{label}, {order}"] = start.time_till(end) * 1000 / repeats
            print(f"{label}, {order}: {times[f'{label}, {order}']:.1f} µs", flush=True)
    return times


def rate(num_envs: int, params: TagContinuousParams, by_id: bool, args) -> float:
    # The order alone, as measured before the two phases (tag_two_phase.py).
    with tag_constants(ROWS_BY_ID_MAX_AGENTS=params.num_agents if by_id else 0, TWO_PHASE_MAX_AGENTS=0):
        return cuda_c_rate(num_envs, params, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_options(parser, min_seconds=0.2, repeats=3)
    args = parser.parse_args()
    hardware = gpu_hardware()
    stores = probe()
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/experiments/tag_row_order.py`.",
        "",
        f"Storing {GAMES:,} x {ROWS:,} rows of {FLOATS} floats (zeros), µs:",
        "",
        "| stores, rows | µs |",
        "|---|---:|",
        *(f"| {name} | {us:.1f} |" for name, us in stores.items()),
        "",
        "TagContinuous, CUDA C, `step_groups`, µs per step:",
        "",
        "| games | agents | rules | grid's order | by id | grid's order / by id |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    sweep = []
    for num_envs, agents, published in SIZES:
        params = TagContinuousParams(num_runners=agents - 10, runner_exits_game_after_tagged=published)
        grid_order, by_id = (1e6 / rate(num_envs, params, order, args) * num_envs for order in (False, True))
        rules = "published" if published else "every agent in play"
        sweep.append(dict(games=num_envs, agents=agents, rules=rules, grid_order_us=grid_order, by_id_us=by_id))
        lines.append(f"| {num_envs} | {agents} | {rules} | {grid_order:.1f} | {by_id:.1f} | {grid_order / by_id:.2f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    save(args, text, {"hardware": hardware, "stores_us": stores, "sweep": sweep})


if __name__ == "__main__":
    main()
