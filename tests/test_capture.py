"""GraphedPhase (baselines/capture.py) when the captured phase fails, and no garbage collection during
its capture (GPU only: on the CPU a phase runs eagerly). The cut captures are tested in
test_distributed.py."""

import pytest
import torch
from gpu_marl_envs.baselines.capture import Branches, GraphedPhase
from harness import run_child

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
    done = run_child(UNJOINED_STREAM, str(cuda_device))
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


# An earlier run's captured graph left in a reference cycle (as a trainer's phases are), then, in the
# middle of the next capture, enough allocations for the interpreter's automatic collection to run
# (and free the graph) where the collector is on.
EARLIER_GRAPHS_COLLECTED = """
import gc, sys, torch
from gpu_marl_envs.baselines.capture import GraphedPhase
device = torch.device(sys.argv[1])
x = torch.zeros(4, device=device)
gc.set_threshold(10**9)  # no automatic collection until the capture asks for one

class Run:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it
        self.phase = GraphedPhase(lambda: {"x": x.add_(1)}, device)

earlier = Run()
for _ in range(3):  # warm-up, capture, replay
    earlier.phase()
del earlier
enabled = []

def phase():
    enabled.append(gc.isenabled())
    gc.set_threshold(1)  # a collection at the next allocation of a container, where the collector is on
    garbage = [[] for _ in range(100)]
    return {"x": x.add_(1)}

later = GraphedPhase(phase, device)
for _ in range(3):
    later()
torch.cuda.synchronize(device)
print("x:", x.tolist(), "collector enabled:", enabled, gc.isenabled())
"""


@pytest.mark.gpu
def test_no_garbage_is_collected_during_a_capture(cuda_device):
    """No automatic collection while a phase is captured: destroying an earlier run's graph during
    a capture invalidates it (the third of three MAPPO runs in one process failed so)."""
    done = run_child(EARLIER_GRAPHS_COLLECTED, str(cuda_device))
    # 3 + 3 additions (the capture records its call's, which the replay right after performs); the
    # phase runs at the warm-up (collector on) and the capture (off), and replays run no Python.
    assert "x: [6.0, 6.0, 6.0, 6.0] collector enabled: [True, False] True" in done.stdout, done.stdout
