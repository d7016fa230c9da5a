"""One rank of ``gpu-marl-train`` under torchrun that fails on purpose in the job's first attempt
(test_distributed.py's restart checks):

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        --max-restarts 1 tests/elastic_worker.py {kill|freeze} STEP <gpu-marl-train arguments>

Rank 1, in attempt 0 only (``TORCHELASTIC_RESTART_COUNT``), right after its STEP-th optimizer
step either kills itself (SIGKILL: a dead rank) or sleeps for an hour (a frozen rank, which only
the process group's timeout ends). The failure is tied to a step, not a time, so that where it
lands in the run is the same on every machine.
"""

import os
import signal
import sys
import time

from gpu_marl_envs.baselines import train
from torch.optim.optimizer import register_optimizer_step_post_hook


def main() -> int:
    mode, step, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if os.environ["RANK"] == "1" and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        steps = 0

        def fail(*_):
            nonlocal steps
            steps += 1
            if steps == step:
                if mode == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(3600)

        register_optimizer_step_post_hook(fail)
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main())
