"""baselines/wide_mlp.py and baselines/sampling.py: the aligned layers, the tanh layers' fused
backward and the Gumbel-max kernel against PyTorch. Without a GPU the Triton kernels run in
Triton's interpreter on the CPU (conftest.py sets TRITON_INTERPRET=1)."""

import pytest
import torch
from gpu_marl_envs.baselines import sampling, wide_mlp
from gpu_marl_envs.baselines.models import mlp
from torch import nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def kernels_at_any_size(monkeypatch):
    """The kernels on the small batches of these tests (the trainers take them from 4,096 rows)."""
    monkeypatch.setattr(wide_mlp, "KERNEL_MIN_ROWS", 0)


def perturbed(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in module.parameters():  # biases away from their zero initialisation
            parameter.add_(0.1 * torch.randn_like(parameter))
    return module


ACTIVATION = {None: lambda y: y, "tanh": torch.tanh, "relu": torch.relu}


@pytest.mark.parametrize(
    "inputs, outputs, activation, rows",
    [
        (71, 42, None, 50),  # Tag's observations and logits: both padded
        (71, 1, None, 50),  # a value head: only the input padded
        (71, 64, "tanh", 300),  # padded input, fused tanh backward over several blocks
        (71, 64, "relu", 300),  # the same with a ReLU: the product's epilogue, the fused backward
        (64, 16, "tanh", 7),
        (5, 100, "tanh", 20),  # a width the activation kernels do not take
        (5, 100, "relu", 20),
        (8, 32, "tanh", 0),  # no rows
        (8, 32, "relu", 0),
    ],
)
def test_linear_matches_the_layer(inputs, outputs, activation, rows, full_float32):
    layer = perturbed(nn.Linear(inputs, outputs).to(DEVICE))
    x = torch.randn(3, rows, inputs, device=DEVICE, requires_grad=True)
    ours = wide_mlp.linear(layer, x, activation)
    theirs = ACTIVATION[activation](layer(x))
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(theirs)
    got = torch.autograd.grad(ours, [x, layer.weight, layer.bias], upstream)
    want = torch.autograd.grad(theirs, [x, layer.weight, layer.bias], upstream)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    # Given the input aligned already (as ActorCritic hands both networks one copy).
    torch.testing.assert_close(
        wide_mlp.linear(layer, wide_mlp.aligned_input(x, inputs), activation), theirs, rtol=1e-5, atol=1e-5
    )


def test_relu_linear_is_the_layer_and_its_relu():
    """The product with the ReLU in its epilogue, without gradients (a rollout's pass)."""
    layer = perturbed(nn.Linear(72, 256).to(DEVICE))
    x = torch.randn(2, 40, 72, device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(
            wide_mlp.relu_linear(x, layer.weight, layer.bias), torch.relu(layer(x)), rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize(
    "layout",
    ["contiguous", "rows of a wider buffer", "a group's agents", "games by agents, transposed", "four dimensions"],
)
def test_aligned_input_pads_without_changing_a_value(layout):
    """Observations with no gradient (the trainers') take the one-pass kernel where they are rows
    of two or three dimensions, the element-wise copy elsewhere; both give the padded copy."""
    wide = torch.randn(3, 150, 80, device=DEVICE)
    x = {
        "contiguous": wide[..., :71].contiguous(),
        "rows of a wider buffer": wide[..., :71],
        "a group's agents": wide[:, 10:, :71],  # rows not at one stride: games apart
        "games by agents, transposed": wide[..., :71].transpose(0, 1),
        "four dimensions": wide[..., :71].unflatten(1, (10, 15)),
    }[layout]
    padded = wide_mlp.aligned_input(x, 71)
    assert padded.shape == (*x.shape[:-1], 72) and padded.is_contiguous()
    assert torch.equal(padded[..., :71], x) and not padded[..., 71:].any()


def test_frozen_weights_pad_and_cast_each_parameter_once():
    """Inside ``frozen_weights`` (a rollout), passes without gradients reuse each layer's padded
    copy: the same outputs as without it; passes with gradients never read the copies."""
    layers = [perturbed(nn.Linear(71, 64).to(DEVICE)), perturbed(nn.Linear(64, 42).to(DEVICE))]

    def network(x):
        return wide_mlp.linear(layers[1], wide_mlp.linear(layers[0], x, "relu"))

    x = torch.randn(40, 71, device=DEVICE)
    with torch.no_grad():
        plain = network(x)
        with wide_mlp.frozen_weights():
            first, again = network(x), network(x)
            assert len(wide_mlp._frozen) == 2  # one copy per layer, made at the first pass
        assert wide_mlp._frozen is None  # the copies go with the context
    assert torch.equal(first, plain) and torch.equal(again, plain)
    with wide_mlp.frozen_weights():
        with torch.no_grad():
            network(x)
            layers[1].bias.add_(1.0)  # an update: only ever after the rollout's context
        out = network(x)  # with gradients: the parameters themselves
    torch.testing.assert_close(out, plain + 1.0, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [300, 1, 0])
def test_tanh_value_head_matches_the_layers(rows, full_float32):
    layer, head = perturbed(nn.Linear(16, 64).to(DEVICE)), perturbed(nn.Linear(64, 1).to(DEVICE))
    x = torch.randn(2, rows, 16, device=DEVICE, requires_grad=True)
    assert wide_mlp.value_head_applies(layer, head, x)
    ours, theirs = wide_mlp.tanh_value_head(layer, head, x), head(torch.tanh(layer(x)))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(theirs)
    parameters = [x, *layer.parameters(), *head.parameters()]
    got = torch.autograd.grad(ours, parameters, upstream)
    want = torch.autograd.grad(theirs, parameters, upstream)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_the_fused_backward_is_taken_only_where_it_applies():
    weight = torch.zeros(256, 72, requires_grad=True)
    bias = torch.zeros(256, requires_grad=True)
    assert wide_mlp.fused_backward_applies(256, weight, bias, 10)
    assert not wide_mlp.fused_backward_applies(100, weight, bias, 10)  # not a power of two
    assert not wide_mlp.fused_backward_applies(2048, weight, bias, 10)  # wider than a block holds
    with torch.no_grad():  # the rollout: no gradient, plain layers
        assert not wide_mlp.fused_backward_applies(256, weight, bias, 10)
    layer, head = nn.Linear(72, 256), nn.Linear(256, 1)
    assert wide_mlp.value_head_applies(layer, head, torch.zeros(3, 72))
    assert not wide_mlp.value_head_applies(layer, nn.Linear(256, 2), torch.zeros(3, 72))  # not a value
    assert not wide_mlp.value_head_applies(nn.Linear(71, 256), head, torch.zeros(3, 71))  # input to pad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, width", [(1000, 64), (130, 256), (0, 16)])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_activation_backward_and_bias(dtype, rows, width, activation):
    dy = torch.randn(rows, width, device=DEVICE, dtype=dtype)
    y = (torch.rand(rows, width, device=DEVICE) * 2 - 1).to(dtype)
    if activation == "relu":
        y = y.clamp(min=0)  # a ReLU's outputs: zero on the rows' negative side
    dz, dbias = wide_mlp.activation_backward_and_bias(dy, y, activation)
    exact = dy.float() * (1 - y.float() ** 2) if activation == "tanh" else dy.float() * (y.float() > 0)
    assert dz.dtype == dtype and dbias.dtype == torch.float32
    torch.testing.assert_close(dz, exact.to(dtype))  # computed in float32, rounded once
    torch.testing.assert_close(dbias, exact.sum(0), rtol=1e-4, atol=1e-3)


def test_small_passes_keep_pytorchs_kernels(monkeypatch):
    monkeypatch.setattr(wide_mlp, "KERNEL_MIN_ROWS", 4096)
    weight, bias = torch.zeros(64, 8, requires_grad=True), torch.zeros(64, requires_grad=True)
    assert not wide_mlp.fused_backward_applies(64, weight, bias, 4095)
    assert wide_mlp.fused_backward_applies(64, weight, bias, 4096)
    assert not wide_mlp.value_head_applies(nn.Linear(8, 64), nn.Linear(64, 1), torch.zeros(4095, 8))
    if torch.cuda.is_available():
        assert not sampling.kernel_applies(torch.zeros(128, 2, device="cuda"))
        assert sampling.kernel_applies(torch.zeros(4096, 2, device="cuda"))


def test_run_mlp_is_the_network_on_the_cpu():
    network = perturbed(mlp(71, (64, 64), 42, last_gain=0.01))
    x = torch.randn(9, 71)
    assert torch.equal(wide_mlp.run_mlp(network, x), network(x))


def frequencies(logits, components, mask=None, draws=400):
    """Each action's frequency in ``draws`` draws per row, drawn in one launch: the rows repeated
    ``draws`` times (each row of a launch has noise of its own), ``logits`` read with its row stride
    as given (a slice of a wider buffer stays one). In Triton's interpreter (on the CPU) the launch
    has few programs of many rows: its time goes by programs, not rows."""
    n = logits.shape[-1] // components
    base = logits if logits._base is None else logits._base
    repeated = base.expand(draws, *base.shape)[..., : logits.shape[-1]]
    masks = None if mask is None else mask.expand(draws, *mask.shape)
    with pytest.MonkeyPatch.context() as patch:
        if not logits.is_cuda:
            patch.setattr(sampling, "BLOCK_ROWS", 4096)
        actions = sampling.gumbel_max_kernel(repeated, components, masks)
    assert actions.shape == (draws, *logits.shape[:-1], components) and actions.dtype == torch.int64
    return torch.nn.functional.one_hot(actions, n).float().mean(0)


@pytest.mark.parametrize("components, n", [(2, 21), (1, 2), (1, 11)])
def test_gumbel_max_kernel_draws_from_the_softmax(components, n):
    torch.manual_seed(0)
    # A slice of a wider buffer, as the aligned actor's logits are (row stride 48 for 42 logits).
    full = 2 * torch.randn(4, 30, 48, device=DEVICE)
    logits = full[..., : components * n]
    got = frequencies(logits, components)
    expected = logits.unflatten(-1, (components, n)).softmax(-1)
    # 400 draws per row: the standard error of a frequency is at most 0.025.
    assert (got - expected).abs().max() < 0.1
    # Pooled over the 120 rows, the error of the mean frequency shrinks about elevenfold.
    assert (got - expected).mean(dim=(0, 1)).abs().max() < 0.01


def test_gumbel_max_kernel_never_draws_a_masked_action():
    torch.manual_seed(1)
    logits = torch.randn(50, 11, device=DEVICE)
    logits[:, 0] = 30.0  # the most likely action, masked where mask[:, 0] is False
    mask = torch.rand(50, 11, device=DEVICE) < 0.3
    mask[:, 0] = torch.arange(50, device=DEVICE) % 2 == 0
    mask[torch.arange(50), torch.randint(11, (50,))] = True  # every row has an allowed action
    got = frequencies(logits, 1, mask, draws=100)[:, 0]
    assert (got[~mask] == 0).all()
    assert (got[::2, 0] == 1).all()  # allowed there: it dominates
    torch.testing.assert_close(got.sum(-1), torch.ones(50, device=DEVICE))


def test_gumbel_max_kernel_follows_the_generator():
    logits = torch.randn(64, 2, 21, device=DEVICE).flatten(-2)
    torch.manual_seed(5)
    first = sampling.gumbel_max_kernel(logits, 2)
    torch.manual_seed(5)
    again = sampling.gumbel_max_kernel(logits, 2)
    other = sampling.gumbel_max_kernel(logits, 2)
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_gumbel_max_kernel_rejects_uneven_components():
    with pytest.raises(ValueError, match="equal components"):
        sampling.gumbel_max_kernel(torch.zeros(3, 7), 2)


@pytest.mark.gpu
@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("outputs", [42, 1])
def test_run_mlp_matches_the_layers_on_the_gpu(bf16, outputs, cuda_device):
    """Tag's actor and critic shapes over many rows: the aligned, fused path against plain layers,
    both in the same precision (TF32 or bfloat16 autocast)."""
    network = perturbed(mlp(71, (256, 256), outputs, last_gain=0.01).to(cuda_device))
    x = torch.randn(20_000, 71, device=cuda_device)
    with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
        ours, theirs = wide_mlp.run_mlp(network, x), network(x)
    tolerance = 3e-2 if bf16 else 2e-3
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=tolerance, atol=tolerance)
    upstream = torch.randn_like(theirs)
    got = torch.autograd.grad(ours, list(network.parameters()), upstream)
    want = torch.autograd.grad(theirs, list(network.parameters()), upstream)
    for g, w in zip(got, want):
        assert (g - w).norm() <= tolerance * w.norm()


@pytest.mark.gpu
def test_aligned_input_casts_as_pytorch_on_the_gpu(cuda_device):
    """The one-pass kernel rounds to bfloat16 as PyTorch's cast does (to nearest, ties to even)."""
    x = torch.randn(5000, 71, device=cuda_device)
    with torch.autocast("cuda", torch.bfloat16):
        padded = wide_mlp.aligned_input(x, 71)
    assert padded.dtype == torch.bfloat16
    assert torch.equal(padded[:, :71], x.bfloat16()) and not padded[:, 71:].any()
