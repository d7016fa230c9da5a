"""GraphedPhase (baselines/capture.py) when the captured phase fails (GPU only: on the CPU a phase
runs eagerly). The cut captures are tested in test_distributed.py."""

import subprocess
import sys
import tempfile

import pytest
import torch
from gpu_marl_envs.baselines.capture import Branches, GraphedPhase

# In a process of its own: a capture that cannot be ended leaves PyTorch's CUDA random generator
# in capture mode, and every later random draw of the process fails.
UNJOINED_STREAM = """
import sys, torch
from gpu_marl_envs.baselines.capture import GraphedPhase
device = torch.device(sys.argv[1])
x = torch.zeros(4, device=device)
calls = []

def phase():
    calls.append(1)
    if len(calls) == 2:  # the capture (the first call is the eager warm-up)
        branch = torch.cuda.Stream(device)
        branch.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(branch):
            x.add_(1)
        raise torch.OutOfMemoryError("out of memory in a stream left unjoined")
    x.add_(1)
    return {"x": x}

graphed = GraphedPhase(phase, device)
graphed()
try:
    graphed()
except torch.OutOfMemoryError as error:
    assert graphed._graphs == [], "a failed capture leaves no graph to replay"
    print("raised:", error)
"""


@pytest.mark.gpu
def test_an_error_inside_a_capture_is_the_error_raised(cuda_device):
    """A phase's error during its capture is the error raised, also where ending the capture then
    fails as well (a stream of the phase's own left unjoined: "capturing stream has unjoined work")."""
    # Run from outside the checkout, whose gpu_marl_envs/ folder would shadow the installed package.
    done = subprocess.run(
        [sys.executable, "-c", UNJOINED_STREAM, str(cuda_device)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode == 0, done.stderr
    assert "raised: out of memory in a stream left unjoined" in done.stdout


@pytest.mark.gpu
def test_an_error_in_a_branch_leaves_the_process_able_to_draw_random_numbers(cuda_device):
    """The trainers' branches (Branches) are joined even when one raises, so the capture ends and
    releases the CUDA random generator: later draws work (an unended capture fails every one)."""
    branches = Branches(["a", "b"], torch.device(cuda_device))
    calls = []

    def phase():
        calls.append(1)
        noise = torch.randn(4, device=cuda_device)  # a draw inside the capture
        with branches.fork():
            with branches.branch("a"):
                noise.add_(1)
                if len(calls) == 2:
                    raise torch.OutOfMemoryError("out of memory in branch a")
        return {"noise": noise}

    graphed = GraphedPhase(phase, cuda_device)
    graphed()
    with pytest.raises(torch.OutOfMemoryError, match="out of memory in branch a"):
        graphed()
    assert graphed._graphs == []
    assert torch.randn(3, device=cuda_device).isfinite().all()
