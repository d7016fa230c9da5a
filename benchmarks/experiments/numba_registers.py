"""Registers and spills of a game's Numba step kernel, on a machine without a GPU: the
kernel compiled to PTX for sm_90 by Numba (NVVM and libdevice from the CUDA toolkit), then
``ptxas -v``. Numba asks the driver for the device's compute capability and NVRTC for the
supported ones even when told the target; ``numba_sass.py`` answers both (sm_90), which is why this
is a development tool and not part of the package.

    python benchmarks/experiments/numba_registers.py --runners 990                 # the kernel's own launch bounds
    python benchmarks/experiments/numba_registers.py --runners 990 --bounds 256 2  # other bounds
    python benchmarks/experiments/numba_registers.py --env CovidEconomy-v0          # another game, its default params

Found with it (2026-11-26, numba-cuda 0.30, CUDA 13.0 ptxas): unbounded, the step kernel at 1,000
agents took 149 registers (one 256-thread block per SM; the .cu's kernel is bounded to 4); with
(256, 4) 64 registers and 772 bytes of spill stores, with (256, 3) 80 and 504, with (256, 2) 128
and none. At 110 agents: 92 unbounded, 64 with 40 bytes of spills at (256, 4).
TagGridworld (5 agents): 56 registers; CovidEconomy (52 agents): 112, both unbounded.
(2026-11-27) The PTX it compiles showed TagContinuous's reads of its staged positions as generic
loads with 64-bit addresses (through strided views of the shared buffer), since read as shared
memory: 680 bytes of spill stores at (256, 4) (docs/benchmarks/history.md, "Numba's shared loads").
"""

import argparse
import subprocess

from numba_sass import numba_step_ptx, without_a_driver

from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.registration import game_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="TagContinuous-v0", help="a registered game (default TagContinuous-v0)")
    parser.add_argument("--runners", type=int, default=990, help="TagContinuous's runners, every agent in play")
    parser.add_argument("--bounds", type=int, nargs=2, metavar=("THREADS", "MIN_BLOCKS"))
    parser.add_argument("--libdevice", default="/usr/local/cuda/nvvm/libdevice/libdevice.10.bc")
    args = parser.parse_args()
    without_a_driver(args.libdevice)
    spec = game_spec(args.env)
    params = spec.definition.make_params()
    if args.env == "TagContinuous-v0":
        params = TagContinuousParams(num_runners=args.runners, runner_exits_game_after_tagged=False)
    bounds = tuple(args.bounds) if args.bounds else None
    ptx = numba_step_ptx(spec, params, bounds)
    result = subprocess.run(
        ["ptxas", "-arch=sm_90", "-v", "-", "-o", "/dev/null"], input=ptx, capture_output=True, text=True
    )
    print(f"{args.env}, {params.num_agents} agents, launch bounds {bounds or 'as compiled'}:")
    print("\n".join(line for line in result.stderr.splitlines() if "spill" in line or "Used" in line))


if __name__ == "__main__":
    main()
