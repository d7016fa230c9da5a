"""The MPE games' torch reference steps hold nothing that a CUDA graph cannot capture: no host
synchronisation (``.item()``, ``nonzero``, boolean-mask indexing) and no tensor made from host data
(on a GPU, a copy from pageable memory). The torch backend replays its step as a CUDA graph by
default (``tests/test_gpu_mpe.py`` captures it on a GPU); here the same step runs on the CPU under a
dispatch mode that records every such operation, so that a regression shows without a GPU."""

import pytest
import torch
from gymnasium.vector import AutoresetMode
from torch.utils._python_dispatch import TorchDispatchMode

from gpu_marl_envs.parallel_env import make_parallel

HOST_OPERATIONS = {
    "aten::_local_scalar_dense",  # .item(), bool(tensor), a value check on the host
    "aten::nonzero",
    "aten::masked_select",
    "aten::lift_fresh",  # torch.tensor(python data)
    "aten::lift_fresh_copy",
}
INDEXING = {torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default}


class HostOperations(TorchDispatchMode):
    """Records the name of each operation that would synchronise with the host or copy from it."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name() in HOST_OPERATIONS:
            self.seen.append(func.name())
        elif func in INDEXING and any(i is not None and i.dtype == torch.bool for i in args[1]):
            self.seen.append(f"{func.name()} with a boolean mask")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("env_id", ["SimpleSpread-v3", "SimpleTag-v3", "SimpleSpeakerListener-v4"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
def test_the_torch_step_has_no_host_operation(env_id, continuous, mode):
    env = make_parallel(env_id, 4, backend="torch", autoreset_mode=mode, continuous_actions=continuous)
    env.reset_groups(seed=0)
    backend, actions = env._backend, env._actions.clone()
    backend.step(actions)  # a first step may make constants once (as the GPU's warm-up before capture)
    with HostOperations() as recorder:
        backend.step(actions)
    assert recorder.seen == [], f"{env_id}: {sorted(set(recorder.seen))} in the torch step"
