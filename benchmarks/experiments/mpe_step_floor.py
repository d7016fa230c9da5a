"""How fast could a captured MPE step be on this GPU, whatever its kernel does?

Issue 42's targets are µs a step (VMAS's time at the same size over 1,000). A step must at least read
its actions and write what it returns: the observations, the rewards and the agents' and envs' flags.
This times, captured as the benchmark's rows are (``ROLLOUT_LENGTH`` launches a CUDA graph, the graph
replayed), one kernel that does only that: each thread loads 16 bytes of an input as large as the
step's actions and stores 16 bytes of an output as large as its outputs, the store after the load
(a step's one round trip to memory): a floor below any step's. It is launched as the steps are: by
programmatic dependent launch where the GPU has it (``cuda_driver.ProgrammaticLaunches``), waiting
for the grid before it first. Then the same kernel moving the state
a step keeps as well (every field of the game's state and the running returns read, the fields a
step changes and the running returns written): the floor of a step that keeps this state. Beside
them, the kernel with nothing to move (a launch), and the game's own captured step on the CUDA C
backend.

    python benchmarks/experiments/mpe_step_floor.py
    python benchmarks/experiments/mpe_step_floor.py --case simple_speaker:2000:discrete
"""

from __future__ import annotations

import argparse
import functools
import struct
import sys
from pathlib import Path

import numpy as np
import torch

# The suite's mpe_throughput.py sits one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from capture_launch_stream import game, replay_us  # noqa: E402  (this folder's)
from mpe_throughput import ROLLOUT_LENGTH  # noqa: E402

from gpu_marl_envs.backends import cuda_driver, nvrtc  # noqa: E402

DEFAULT_CASES = [
    f"{label}:{envs}:{mode}"
    for label in ("simple_spread", "simple_tag", "simple_speaker")
    for envs in (2000, 65536)
    for mode in ("discrete", "box")
]

SOURCE = r"""
extern "C" __global__ void move(const float4* in, long long n_in, float4* out, long long n_out) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < n_in) v = in[i];
    if (i < n_out) out[i] = v;
}
"""
BLOCK = 256


def mover(read_bytes: int, write_bytes: int):
    """A launch of ``move`` over buffers of (at least) these sizes, on torch's current stream."""
    device = torch.cuda.current_device()
    image = nvrtc.binary(SOURCE, "move.cu", [], torch.cuda.get_device_capability(device))
    function = cuda_driver.Module(image, device).get_function("move")
    n_in, n_out = -(-read_bytes // 16), -(-write_bytes // 16)
    source = torch.zeros(max(n_in, 1) * 4, device="cuda")
    target = torch.empty(max(n_out, 1) * 4, device="cuda")
    buffer = bytearray(struct.pack("QqQq", source.data_ptr(), n_in, target.data_ptr(), n_out))
    grid = max(1, -(-max(n_in, n_out) // BLOCK))
    launch = cuda_driver.PreparedLaunch(
        function,
        grid,
        BLOCK,
        buffer,
        0,
        lambda: torch.cuda.current_stream().cuda_stream,
        programmatic=function.get_attribute("PTX_VERSION") >= cuda_driver.PROGRAMMATIC_ARCH,
    )

    def call():
        launch()
        return source, target  # (held by the closure as long as the launch)

    return call


def step_bytes(env, actions: dict) -> tuple[int, int, int, int]:
    """``(read, written, state_read, state_written)``: the bytes of the actions, of what a step
    returns (observations, rewards, the agents' terminated and truncated flags, the envs' two
    flags), and of the state it keeps: every field of the game's state and the running returns
    read, the fields a step changes (found by stepping once) and the running returns written."""
    agents, envs = env.possible_agents, env.num_envs
    observations = sum(4 * int(np.prod(env.observation_space(a).shape)) for a in agents) * envs
    written = observations + envs * len(agents) * (4 + 2) + envs * 2
    read = sum(tensor.nbytes for tensor in actions.values())
    before = env.get_state()
    env.step_groups(actions)
    after = env.get_state()
    returns = 4 * envs * len(agents)
    state_read = sum(tensor.nbytes for tensor in before.values()) + returns
    state_written = sum(after[name].nbytes for name in after if not torch.equal(before[name], after[name])) + returns
    return read, written, state_read, state_written


def captured_us(call, replays: int, rounds: int) -> float:
    """Median µs a call of ``ROLLOUT_LENGTH`` calls captured in a graph (``replay_us``)."""
    for _ in range(3):
        call()  # compiled and loaded outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(ROLLOUT_LENGTH):
            call()
    return replay_us(graph, replays, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", default=DEFAULT_CASES, help="scenario:num_envs:discrete|box")
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, {ROLLOUT_LENGTH} launches a graph; µs a step")
    launch = captured_us(mover(0, 0), args.replays, args.rounds)
    print(f"a launch that moves nothing: {launch:.2f}")
    for case in args.case:
        label, envs, mode = case.split(":")
        env, actions = game(label, int(envs), mode == "box")
        read, written, state_read, state_written = step_bytes(env, actions)
        floor = captured_us(mover(read, written), args.replays, args.rounds)
        with_state = captured_us(mover(read + state_read, written + state_written), args.replays, args.rounds)
        ours = captured_us(functools.partial(env.step_groups, actions), args.replays, args.rounds)
        print(
            f"{case}: outputs {floor:.2f} (reads {read / 1e6:.2f} MB, writes {written / 1e6:.2f} MB); "
            f"with the state {with_state:.2f} (reads {state_read / 1e6:.2f} MB more, writes "
            f"{state_written / 1e6:.2f} MB more); CUDA C step {ours:.2f}"
        )
        env.close()


if __name__ == "__main__":
    main()
