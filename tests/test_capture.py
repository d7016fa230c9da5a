"""GraphedPhase (baselines/capture.py) when the captured phase fails (GPU only: on the CPU a phase
runs eagerly). The cut captures are tested in test_distributed.py."""

import pytest
import torch

from gpu_marl_envs.baselines.capture import GraphedPhase


@pytest.mark.gpu
def test_an_error_inside_a_capture_is_the_error_raised(cuda_device):
    # As when a policy's update, on a branch stream of its own, runs out of memory while being
    # captured: the branch is never joined, so ending the capture fails as well.
    x = torch.zeros(4, device=cuda_device)
    calls = []

    def phase():
        calls.append(1)
        if len(calls) == 2:  # the capture (the first call is the eager warm-up)
            branch = torch.cuda.Stream(cuda_device)
            branch.wait_stream(torch.cuda.current_stream(cuda_device))
            with torch.cuda.stream(branch):
                x.add_(1)
            raise torch.OutOfMemoryError("out of memory in a branch")
        x.add_(1)
        return {"x": x}

    graphed = GraphedPhase(phase, cuda_device)
    graphed()
    with pytest.raises(torch.OutOfMemoryError, match="out of memory in a branch"):
        graphed()
    assert graphed._graphs == [], "a failed capture leaves no graph to replay"
