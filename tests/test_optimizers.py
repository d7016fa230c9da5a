"""``baselines/optimizers.py`` against ``torch.optim``: bitwise the same parameters and state over
steps of a small network (float and tensor learning rates, on the CPU; captured in a CUDA graph
on a GPU), parameters without gradients skipped, state dicts that load into each other, torch.optim's
global step hooks, closures, refused options; and, in fresh interpreters, that neither an optimizer step nor a PPO
run imports ``torch._dynamo`` (the import these classes exist to avoid)."""

import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch
from gpu_marl_envs.baselines.checkpoint import load_optimizer
from gpu_marl_envs.baselines.optimizers import Adam, RMSprop
from torch.optim.optimizer import register_optimizer_step_post_hook

STEPS = 20

# (ours, torch.optim's twin, hyperparameters as the trainers set them)
ADAM = (Adam, lambda params, **kw: torch.optim.Adam(params, fused=True, **kw), {"eps": 1e-5})
RMSPROP = (RMSprop, lambda params, **kw: torch.optim.RMSprop(params, foreach=True, **kw), {"alpha": 0.99, "eps": 1e-5})
BOTH = pytest.mark.parametrize("ours, theirs, hyper", [ADAM, RMSPROP], ids=["Adam", "RMSprop"])


def network(device="cpu"):
    """A small MLP, the same weights on every call."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(device)


def batches(device="cpu"):
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(8, 5, generator=generator).to(device), torch.randn(8, 3, generator=generator).to(device))
        for _ in range(STEPS)
    ]


def train_steps(net, optimizer, data, schedule=None):
    """Regression steps as the trainers take them (gradients zeroed in place)."""
    for i, (x, y) in enumerate(data):
        if schedule is not None:
            optimizer.param_groups[0]["lr"].fill_(schedule(i))
        optimizer.zero_grad(set_to_none=False)
        ((net(x) - y) ** 2).mean().backward()
        optimizer.step()


def assert_same(ours, theirs, net_ours, net_theirs):
    for (name, a), b in zip(net_ours.named_parameters(), net_theirs.parameters()):
        assert torch.equal(a, b), f"parameter {name} differs by up to {(a - b).abs().max().item():.3g}"
    state_ours, state_theirs = ours.state_dict()["state"], theirs.state_dict()["state"]
    assert state_ours.keys() == state_theirs.keys()
    for index, values in state_ours.items():
        assert values.keys() == state_theirs[index].keys()
        for key, value in values.items():
            assert torch.equal(value, state_theirs[index][key]), f"state {key} of parameter {index} differs"


@BOTH
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float-lr", "tensor-lr"])
def test_steps_are_bitwise_torch_optims(ours, theirs, hyper, tensor_lr):
    # With a tensor lr, Adam is compared with fused=True, capturable=True (torch.optim allows it on
    # the CPU); RMSprop with foreach=True and a tensor lr (torch.optim has no capturable RMSprop on
    # the CPU, and neither do we: on the CPU both take the tensor's value as a number).
    kw = dict(hyper, capturable=True) if tensor_lr and ours is Adam else hyper
    lr = (lambda: torch.tensor(0.01)) if tensor_lr else (lambda: 0.01)
    schedule = (lambda i: 0.01 * (1 - i / STEPS)) if tensor_lr else None  # an annealed rate, changed in place
    net_ours, net_theirs = network(), network()
    optimizer_ours, optimizer_theirs = (
        ours(net_ours.parameters(), lr=lr(), **hyper),
        theirs(net_theirs.parameters(), lr=lr(), **kw),
    )
    train_steps(net_ours, optimizer_ours, batches(), schedule)
    train_steps(net_theirs, optimizer_theirs, batches(), schedule)
    assert_same(optimizer_ours, optimizer_theirs, net_ours, net_theirs)
    assert optimizer_ours.state_dict()["state"][0]["step"].item() == STEPS


@BOTH
def test_a_parameter_without_gradient_is_skipped(ours, theirs, hyper):
    net = network()
    frozen = net[0].bias
    frozen.requires_grad_(False)
    before = frozen.clone()
    optimizer = ours(net.parameters(), lr=0.01, **hyper)
    train_steps(net, optimizer, batches()[:3])
    assert torch.equal(frozen, before)
    assert frozen not in optimizer.state and net[0].weight in optimizer.state
    assert sorted(optimizer.state_dict()["state"]) == [0, 2, 3]  # torch.optim's numbering: index 1 has no state


@BOTH
def test_state_dicts_load_into_torch_optim_and_back(ours, theirs, hyper):
    """Ours -> torch.optim -> ours, a third of the steps each: the same as ours throughout."""
    data = batches()
    third = STEPS // 3
    net, reference = network(), network()
    optimizer = ours(net.parameters(), lr=0.01, **hyper)
    train_steps(reference, ours(reference.parameters(), lr=0.01, **hyper), data)

    train_steps(net, optimizer, data[:third])
    twin = theirs(net.parameters(), lr=0.5, **hyper)  # lr and hyperparameters come from the state dict
    twin.load_state_dict(optimizer.state_dict())
    train_steps(net, twin, data[third : 2 * third])
    resumed = ours(net.parameters(), lr=0.5)
    resumed.load_state_dict(twin.state_dict())
    assert resumed.param_groups[0]["eps"] == hyper["eps"] and resumed.param_groups[0]["lr"] == 0.01
    train_steps(net, resumed, data[2 * third :])
    for (name, a), b in zip(net.named_parameters(), reference.parameters()):
        assert torch.equal(a, b), f"parameter {name} differs after the round trip"
    assert resumed.state_dict()["state"][0]["step"].item() == STEPS


@BOTH
def test_a_torch_optim_checkpoint_resumes_with_its_own_lr_tensor_kept(ours, theirs, hyper):
    """What ``checkpoint.restore`` does with a checkpoint written before the trainers used these
    classes (torch.optim's default implementation on the CPU, a float lr): the state loads, the
    learning-rate tensor a captured update reads stays the same tensor, with the saved value."""
    net = network()
    old = (torch.optim.Adam if ours is Adam else torch.optim.RMSprop)(net.parameters(), lr=0.02, **hyper)
    train_steps(net, old, batches()[:2])
    optimizer = ours(net.parameters(), lr=torch.tensor(0.5), **hyper)
    rate = optimizer.param_groups[0]["lr"]
    load_optimizer(optimizer, old.state_dict())
    assert optimizer.param_groups[0]["lr"] is rate and rate.item() == pytest.approx(0.02)
    for p in net.parameters():
        for key, value in old.state[p].items():
            assert torch.equal(optimizer.state[p][key], value.float())
            assert optimizer.state[p][key] is not value, "the loaded state must be a copy"


@BOTH
def test_torch_optims_global_step_hooks_run_after_each_step(ours, theirs, hyper):
    seen = []
    handle = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: seen.append(optimizer))
    try:
        net = network()
        optimizer = ours(net.parameters(), lr=0.01, **hyper)
        train_steps(net, optimizer, batches()[:3])
    finally:
        handle.remove()
    assert seen == [optimizer] * 3


@BOTH
def test_a_closure_computes_the_gradients_of_its_step_as_in_torch_optim(ours, theirs, hyper):
    """``step(closure)``: the closure runs first (with gradients enabled, even under no_grad) and
    its result is returned, as torch.optim's; ``defaults`` holds the hyperparameters (Lightning
    reads both)."""
    results = {}
    for name, make in (("ours", ours), ("theirs", theirs)):
        net = network()
        optimizer = make(net.parameters(), lr=0.01, **hyper)
        x, y = batches()[0]

        def closure():
            optimizer.zero_grad()
            loss = ((net(x) - y) ** 2).mean()
            loss.backward()
            return loss

        with torch.no_grad():
            loss = optimizer.step(closure)
        results[name] = (loss, [p.detach().clone() for p in net.parameters()])
        assert {key: optimizer.defaults[key] for key in ("lr", "eps")} == {"lr": 0.01, "eps": 1e-5}
    assert torch.equal(results["ours"][0], results["theirs"][0])
    assert all(torch.equal(a, b) for a, b in zip(results["ours"][1], results["theirs"][1]))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: Adam(p, weight_decay=0.1), "only weight_decay=0.0"),
        (lambda p: Adam(p, amsgrad=True), "only amsgrad=False"),
        (lambda p: Adam(p, betas=(0.9, 1.0)), "betas must be"),
        (lambda p: RMSprop(p, momentum=0.9), "only momentum=0.0"),
        (lambda p: RMSprop(p, centered=True), "only centered=False"),
        (lambda p: RMSprop(p, nesterov=True), "no option 'nesterov'"),
        (lambda p: RMSprop(p, lr=-1.0), "lr must be >= 0"),
        (lambda p: RMSprop(p, alpha=-0.5), "alpha must be >= 0"),
        (lambda p: Adam(p, eps=-1e-8), "eps must be >= 0"),
        (lambda p: Adam(p, lr=torch.tensor([0.1, 0.2])), "a tensor lr must have one element"),
        (lambda p: Adam([p[0], p[1].double()]), "one device and dtype"),
        (lambda p: RMSprop([{"params": p}]), "one parameter group"),
    ],
)
def test_unsupported_options_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make(list(network().parameters()))


def test_a_state_dict_of_an_unsupported_update_is_refused_and_changes_nothing():
    net = network()
    optimizer = Adam(net.parameters(), lr=0.01)
    train_steps(net, optimizer, batches()[:1])
    before = {key: value.clone() for key, value in optimizer.state[net[0].weight].items()}
    amsgrad = torch.optim.Adam(net.parameters(), lr=0.3, amsgrad=True)
    train_steps(net, amsgrad, batches()[:1])
    with pytest.raises(ValueError, match="only amsgrad=False"):
        optimizer.load_state_dict(amsgrad.state_dict())
    assert optimizer.param_groups[0]["lr"] == 0.01
    assert all(torch.equal(optimizer.state[net[0].weight][key], value) for key, value in before.items())
    with pytest.raises(ValueError, match="one group of 4"):
        optimizer.load_state_dict(Adam(net[0].parameters()).state_dict())


# Notes where torch._dynamo is first imported (an import finder that finds nothing itself).
WATCH = """
import sys, traceback
class FirstImport:
    stack = None
    def find_spec(self, name, path=None, target=None):
        if name == "torch._dynamo" and FirstImport.stack is None:
            FirstImport.stack = "".join(traceback.format_stack()[:-1])
sys.meta_path.insert(0, FirstImport())
"""
CHECK = """
assert "torch._dynamo" not in sys.modules, "torch._dynamo was imported from\\n" + FirstImport.stack
"""


def without_dynamo(script: str) -> None:
    """Run ``script`` in a fresh interpreter, then check that it never imported torch._dynamo (the
    failure shows the stack of the first import)."""
    # Run outside the checkout: from its root, ``-c`` would import the source folder
    # ``gpu_marl_envs/`` (which lacks ``baselines``) ahead of an installed, non-editable package.
    result = subprocess.run(
        [sys.executable, "-c", WATCH + textwrap.dedent(script) + CHECK],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )
    assert result.returncode == 0, result.stderr[-6000:]


@pytest.mark.parametrize("optimizer", ["Adam", "RMSprop"])
def test_a_step_does_not_import_the_compiler(optimizer):
    without_dynamo(f"""
        import torch
        from gpu_marl_envs.baselines.optimizers import {optimizer}
        net = torch.nn.Linear(4, 2)
        optimizer = {optimizer}(net.parameters(), lr=0.01)
        net(torch.randn(3, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    """)


def test_a_ppo_run_does_not_import_the_compiler():
    without_dynamo("""
        from gpu_marl_envs.baselines.ppo import PPOConfig, train
        config = PPOConfig(num_envs=4, num_steps=16, total_timesteps=256, num_minibatches=2, update_epochs=2)
        train("CartPole-v1", config, device="cpu", log=None)
    """)


@pytest.mark.gpu
def test_a_captured_ppo_run_does_not_import_the_compiler(cuda_device):
    # On a GPU the run also captures its phases in CUDA graphs and steps the env's own kernels.
    without_dynamo(f"""
        from gpu_marl_envs.baselines.ppo import PPOConfig, train
        config = PPOConfig(num_envs=64, num_steps=16, total_timesteps=64 * 16 * 4, num_minibatches=2, update_epochs=2)
        train("CartPole-v1", config, device="{cuda_device}", log=None)
    """)


@pytest.mark.gpu
@BOTH
def test_captured_steps_match_torch_optims_capturable(ours, theirs, hyper, cuda_device):
    """Each optimizer's step, with a device lr tensor, captured in a CUDA graph and replayed with an
    annealed rate, against torch.optim's capturable twin captured the same way."""
    data = batches(cuda_device)
    results = []
    for make in (
        lambda params, lr: ours(params, lr=lr, **hyper),
        lambda params, lr: theirs(params, lr=lr, capturable=True, **hyper),
    ):
        net = network(cuda_device)
        optimizer = make(net.parameters(), torch.tensor(0.01, device=cuda_device))
        x, y = (torch.empty_like(t) for t in data[0])

        def schedule(i):
            return 0.01 * (1 - i / STEPS)

        def update():
            optimizer.zero_grad(set_to_none=False)
            ((net(x) - y) ** 2).mean().backward()
            optimizer.step()

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph's documentation asks: creates state and grads
            x.copy_(data[0][0])
            y.copy_(data[0][1])
            update()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            update()
        for i, (inputs, targets) in enumerate(data[1:], start=1):
            x.copy_(inputs)
            y.copy_(targets)
            optimizer.param_groups[0]["lr"].fill_(schedule(i))
            graph.replay()
        torch.cuda.synchronize()
        results.append((net, optimizer))
    (net_ours, optimizer_ours), (net_theirs, optimizer_theirs) = results
    assert_same(optimizer_ours, optimizer_theirs, net_ours, net_theirs)
    assert optimizer_ours.state_dict()["state"][0]["step"].item() == STEPS
