"""baselines/fused_mlp.py: the Triton MLP against PyTorch's layers. Without a GPU the kernels run in
Triton's interpreter on the CPU (conftest.py sets TRITON_INTERPRET=1)."""

import pytest
import torch
from gpu_marl_envs.baselines import fused_mlp, ppo
from gpu_marl_envs.baselines.models import ActorCritic, mlp
from gymnasium import spaces

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


SHAPES = [
    (4, 64, 2, 150),  # CartPole's actor; rows not a multiple of the block
    (4, 64, 1, 64),  # its critic; one whole block
    (5, 16, 3, 7),
    (17, 32, 20, 100),  # inputs and outputs padded past 16
    (6, 64, 1, 0),  # no rows: no launch, zero gradients
    (4, 16, 2, 1000),  # 16 blocks
]


@pytest.mark.parametrize("inputs, hidden, outputs, rows", SHAPES)
def test_forward_and_gradients_match_the_layers(inputs, hidden, outputs, rows, full_float32):
    match_the_layers(DEVICE, inputs, hidden, outputs, rows)


@pytest.mark.gpu
@pytest.mark.parametrize("inputs, hidden, outputs, rows", [*SHAPES, (4, 64, 2, 131_072), (64, 64, 64, 5000)])
def test_compiled_kernels_match_the_layers_on_the_gpu(inputs, hidden, outputs, rows, full_float32, cuda_device):
    match_the_layers(cuda_device, inputs, hidden, outputs, rows)


def match_the_layers(device, inputs, hidden, outputs, rows):
    torch.manual_seed(0)
    network = mlp(inputs, (hidden, hidden), outputs, last_gain=1.0).to(device)
    with torch.no_grad():
        for parameter in network.parameters():  # biases away from their zero initialisation
            parameter.add_(0.1 * torch.randn_like(parameter))
    assert fused_mlp.fusable(network)
    x = torch.randn(rows, inputs, device=device)
    ours, theirs = fused_mlp.mlp_forward(network, x), network(x)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(theirs)
    grads = torch.autograd.grad(ours, list(network.parameters()), upstream)
    expected = torch.autograd.grad(theirs, list(network.parameters()), upstream)
    # Weight gradients are sums over the rows, added up in another order: their rounding grows with
    # the square root of the row count.
    atol = 1e-5 * max(1.0, rows / 100) ** 0.5
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=atol)


def test_leading_dimensions_are_kept(full_float32):
    network = mlp(3, (16, 16), 2, last_gain=1.0).to(DEVICE)
    x = torch.randn(2, 5, 3, device=DEVICE)
    out = fused_mlp.mlp_forward(network, x)
    assert out.shape == (2, 5, 2)
    torch.testing.assert_close(out, network(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "network, why",
    [
        (mlp(4, (64, 32), 2, 1.0), "hidden widths differ"),
        (mlp(4, (48, 48), 2, 1.0), "not a power of two"),
        (mlp(4, (128, 128), 2, 1.0), "wider than 64"),
        (mlp(4, (64,), 2, 1.0), "one hidden layer"),
        (mlp(65, (64, 64), 2, 1.0), "more than 64 inputs"),
        (mlp(4, (64, 64), 65, 1.0), "more than 64 outputs"),
        (mlp(4, (64, 64), 2, 1.0).double(), "float64"),
        (
            torch.nn.Sequential(
                torch.nn.Linear(4, 16),
                torch.nn.ReLU(),
                torch.nn.Linear(16, 16),
                torch.nn.Tanh(),
                torch.nn.Linear(16, 2),
            ),
            "ReLU",
        ),
    ],
)
def test_networks_the_kernels_do_not_take_are_not_fusable(network, why):
    assert not fused_mlp.fusable(network), why


def test_a_policy_that_cannot_be_fused_is_refused_by_name():
    agent = ActorCritic(4, spaces.Discrete(2), hidden=(64, 32))
    with pytest.raises(ValueError, match="two hidden layers of one width"):
        agent.use_fused_mlp()
    assert not agent.fused
    agent.use_fused_mlp(False)  # turning it off is always allowed


def test_auto_fuses_the_shapes_the_kernels_take_and_leaves_the_others():
    assert ActorCritic(4, spaces.Discrete(2)).use_fused_mlp("auto")  # Triton is in the test extra
    wide = ActorCritic(4, spaces.Discrete(2), hidden=(256, 256))
    assert not wide.use_fused_mlp("auto") and not wide.fused
    assert not ActorCritic(4, spaces.Discrete(2)).use_fused_mlp(False)


def test_auto_is_off_for_small_minibatches_and_full_float32_products():
    rows = fused_mlp.AUTO_MIN_ROWS
    assert ppo.PPOConfig().fused_mlp_setting(rows) == "auto"
    assert ppo.PPOConfig().fused_mlp_setting(rows - 1) is False  # too few rows to gain
    assert ppo.PPOConfig(fused_mlp=True).fused_mlp_setting(rows - 1) is True
    assert ppo.PPOConfig(tf32=False).fused_mlp_setting(rows) is False
    assert ppo.PPOConfig(tf32=False, fused_mlp=True).fused_mlp_setting(rows) is True


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_fused_mlp_setting_of_another_kind_is_refused(value):
    with pytest.raises(ValueError, match='fused_mlp must be true, false or "auto"'):
        ppo.PPOConfig(fused_mlp=value)


def test_outside_cuda_the_layers_run_unchanged():
    """On the CPU (and under autocast or compile) a fused policy runs PyTorch's layers: same results."""
    torch.manual_seed(0)
    agent = ActorCritic(4, spaces.Discrete(2))
    torch.manual_seed(0)
    fused = ActorCritic(4, spaces.Discrete(2))
    fused.use_fused_mlp()
    obs, actions = torch.randn(32, 4), torch.randint(0, 2, (32,))
    for got, want in zip(fused.action_and_value(obs, actions)[1:], agent.action_and_value(obs, actions)[1:]):
        assert torch.equal(got, want)


@pytest.mark.gpu
def test_ppo_with_fused_mlps_learns_cartpole_on_the_gpu(cuda_device):
    """The fused path inside captured rollouts and updates: PureJaxRL's config reaches a mean return
    of 475 (the benchmarks' criterion), as the unfused trainer does within the same budget."""
    config = ppo.PPOConfig(total_timesteps=150_000, fused_mlp=True)
    _, history = ppo.train("CartPole-v1", config, device=cuda_device, log=None, log_every=1)
    assert max(entry["mean_return"] for entry in history) >= 475
