"""Does a kernel launched on a stream of its own, ordered after the capturing stream and back with
events, cost a CUDA graph's step more than one launched on the capturing stream itself?

The CUDA C backends launched through pycuda, which launches only on streams it created: on any
stream of torch's but the legacy default one (a graph's capture, say) they ordered a pycuda stream
after torch's with events and back. They now launch through the driver on torch's current stream
(``backends/cuda_driver.py``). This captures ``ROLLOUT_LENGTH`` steps of an MPE game on the CUDA C
backend both ways, the same kernel and arguments, and times the graphs' replays (the benchmark's
captured rows: ``mpe_throughput.py``); the graphs' nodes are counted from their debug dumps.

    python benchmarks/experiments/capture_launch_stream.py
    python benchmarks/experiments/capture_launch_stream.py --case simple_spread:65536:box
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

# The suite's mpe_throughput.py sits one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mpe_throughput import ROLLOUT_LENGTH, scenarios  # noqa: E402

import gpu_marl_envs  # noqa: E402

DEFAULT_CASES = ["simple_spread:2000:discrete", "simple_speaker:2000:discrete", "simple_spread:65536:discrete"]


def game(label: str, num_envs: int, continuous: bool):
    """The CUDA C backend's env of the scenario whose label starts with ``label``, stepped a few times,
    and one action of each group (drawn in its space)."""
    scenario = next(s for s in scenarios([3]) if s.label.startswith(label))
    env = gpu_marl_envs.make_parallel(
        scenario.ours,
        num_envs,
        device="cuda",
        backend="pycuda",
        validate_actions=False,
        continuous_actions=continuous,
        **scenario.ours_settings,
    )
    env.reset_groups(seed=0)
    generator = torch.Generator(device="cuda").manual_seed(0)
    actions = {}
    for group, agents in env.groups.items():
        space = env.action_space(agents[0])
        shape = (num_envs, len(agents), *space.shape)
        if space.shape == ():  # Discrete
            actions[group] = torch.randint(0, int(space.n), shape, generator=generator, device="cuda")
        else:
            actions[group] = torch.rand(shape, generator=generator, device="cuda")
    for _ in range(8):
        env.step_groups(actions)
    return env, actions


def own_stream(env) -> None:
    """The backend's launch as it was: on a stream of its own, ordered after torch's current stream
    and back with events (``torch.cuda.Stream.wait_stream``)."""
    backend = env._backend
    side = torch.cuda.Stream()
    backend._step._stream = lambda: side.cuda_stream
    step_groups = backend.step_groups

    def ordered(group_actions):
        current = torch.cuda.current_stream()
        side.wait_stream(current)
        step_groups(group_actions)
        current.wait_stream(side)

    backend.step_groups = ordered


def captured(env, actions) -> tuple[torch.cuda.CUDAGraph, dict]:
    """``ROLLOUT_LENGTH`` steps captured, and the graph's nodes by kind."""
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    graph.enable_debug_mode()
    with torch.cuda.graph(graph):
        for _ in range(ROLLOUT_LENGTH):
            env.step_groups(actions)
    with tempfile.TemporaryDirectory() as folder:
        dump = Path(folder) / "graph.dot"
        graph.debug_dump(str(dump))
        nodes = collections.Counter(
            re.findall(r"\b(KERNEL|EVENT_RECORD|WAIT_EVENT|EMPTY|MEMSET|MEMCPY)\b", dump.read_text())
        )
    return graph, dict(nodes)


def replay_us(graph, replays: int, rounds: int) -> float:
    """Median µs a step of ``rounds`` of ``replays`` replays, bracketed by synchronize."""
    for _ in range(20):
        graph.replay()
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
        times.append(1e6 * (time.perf_counter() - start) / (replays * ROLLOUT_LENGTH))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", default=DEFAULT_CASES, help="scenario:num_envs:discrete|box")
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {ROLLOUT_LENGTH} steps a graph")
    print("| case | launched on | µs a step | graph's nodes |\n|---|---|---:|---|")
    for case in args.case:
        label, num_envs, actions_kind = case.split(":")
        for way in ("torch's current stream", "its own stream, ordered by events"):
            env, actions = game(label, int(num_envs), actions_kind == "box")
            if way != "torch's current stream":
                own_stream(env)
            graph, nodes = captured(env, actions)
            print(f"| {case} | {way} | {replay_us(graph, args.replays, args.rounds):.2f} | {nodes} |", flush=True)
            env.close()


if __name__ == "__main__":
    main()
