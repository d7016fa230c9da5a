"""baselines/fused_a2c_loss.py: the multi-agent A2C loss of a categorical policy in one Triton
kernel against ``multi_agent.masked_a2c_loss`` in PyTorch (with ``ActorCritic``'s log-probabilities
and entropies): the loss, its logged terms, the gradients with respect to the logits and the values,
and the networks' gradients through a real update's pass. Without a GPU the kernel runs in Triton's
interpreter on the CPU (conftest.py sets TRITON_INTERPRET=1).

Tolerances: the kernel computes the same formulas in float32 in another order (the softmax, the sums
over a block's rows, then over blocks), not bitwise: the loss and its terms (means over the rows)
within 2e-6 relative, a row's gradient within 4 float32 ulps of the largest (its terms cancel), a
parameter's gradient within 1e-5 of its largest element."""

import functools

import pytest
import torch
from gpu_marl_envs.baselines import fused_a2c_loss, multi_agent, wide_mlp
from gpu_marl_envs.baselines.models import ActorCritic
from gymnasium import spaces

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ULP = 2**-23


@pytest.fixture(autouse=True)
def kernels_at_any_size(monkeypatch):
    monkeypatch.setattr(wide_mlp, "KERNEL_MIN_ROWS", 0)


def rows_of(rows: int, components: int, n: int, joint: bool = False):
    """Logits (a slice of a wider buffer, as the aligned layers return them) and values (every
    48th number of a buffer), or both from one row of logits, the value and zero columns (``joint``,
    as the shared layers' joint product gives them); actions and a rollout's fields."""
    generator = torch.Generator().manual_seed(rows + 7 * components + n)

    def draw(*shape):
        return torch.randn(*shape, generator=generator).to(DEVICE)

    wide = (2 * draw(rows, components * n + 6)).requires_grad_()
    logits = wide[:, : components * n]
    values_buffer = draw(rows, 48).requires_grad_()
    values = values_buffer[:, -1]
    if joint:
        values_buffer = None
        wide[:, components * n + 1 :].detach().zero_()
        values = wide[:, components * n]
    actions = torch.randint(0, n, (rows, components), generator=generator).to(DEVICE)
    if components == 1:
        actions = actions[:, 0]
    weights = (torch.rand(rows, generator=generator) > 0.2).float().to(DEVICE)  # inactive rows: 0
    leaves = (wide,) if joint else (wide, values_buffer)
    return leaves, logits, values, actions, draw(rows), draw(rows), weights


def pytorch_loss(policy, logits, values, actions, advantages, returns, weights, config, ent_coef):
    log_probs, entropy = policy._log_prob_and_entropy(logits, actions, None)
    return multi_agent.masked_a2c_loss(log_probs, entropy, values, advantages, returns, weights, config, ent_coef)


@pytest.mark.parametrize("components, n, rows", [(2, 21, 300), (1, 5, 129), (3, 2, 1)])
@pytest.mark.parametrize("norm_adv", [False, True])
@pytest.mark.parametrize("joint", [False, True])
def test_the_kernel_is_the_pytorch_loss(components, n, rows, norm_adv, joint):
    space = spaces.Discrete(n) if components == 1 else spaces.MultiDiscrete([n] * components)
    policy = ActorCritic(4, space, (8,)).to(DEVICE)
    config = multi_agent.PolicyConfig(algorithm="a2c", norm_adv=norm_adv, vf_coef=2.0)
    ent_coef = torch.tensor(0.05, device=DEVICE)  # a captured update's scheduled weight
    leaves, logits, values, actions, advantages, returns, weights = rows_of(rows, components, n, joint)
    fused = functools.partial(fused_a2c_loss.categorical_a2c_loss, joint=leaves[0] if joint else None)
    results = []
    for loss_fn in (fused, lambda *a: pytorch_loss(policy, *a)):
        loss, stats = loss_fn(logits, values, actions, advantages, returns, weights, config, ent_coef)
        grads = torch.autograd.grad(loss, leaves)
        results.append((loss, stats, grads))
    (loss, stats, grads), (want_loss, want_stats, want_grads) = results
    torch.testing.assert_close(loss, want_loss, rtol=2e-6, atol=2e-6)
    assert stats.keys() == want_stats.keys()
    for name in stats:
        torch.testing.assert_close(stats[name], want_stats[name], rtol=2e-6, atol=2e-6)
    for got, want in zip(grads, want_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=4 * ULP * want.abs().max().item() + 1e-12)


def test_an_update_takes_it_and_learns_the_same():
    """The networks' gradients of a real update's pass (the shared ReLU layers' Tag policy), the
    kernel against PyTorch's loss."""
    torch.manual_seed(0)
    policy = ActorCritic(71, spaces.MultiDiscrete([21, 21]), (32, 32), activation="relu", shared=True).to(DEVICE)
    config = multi_agent.PolicyConfig(algorithm="a2c", norm_adv=False, vf_coef=2.0)
    obs = torch.randn(200, 71, device=DEVICE)
    *_, actions, advantages, returns, weights = rows_of(200, 2, 21)
    grads = []
    for fused in (True, False):
        joint = policy.joint_outputs(obs)
        logits, values = joint[:, :42], joint[:, 42]
        if fused:  # the joint product's gradient written whole
            loss, _ = fused_a2c_loss.categorical_a2c_loss(
                logits, values, actions, advantages, returns, weights, config, 0.05, joint
            )
        else:
            loss, _ = pytorch_loss(policy, logits, values, actions, advantages, returns, weights, config, 0.05)
        grads.append(torch.autograd.grad(loss, list(policy.parameters())))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * want.abs().max().item() + 1e-12)


def test_which_policies_take_it():
    obs = torch.zeros(8, 4, device=DEVICE)
    tag = ActorCritic(4, spaces.MultiDiscrete([21, 21]))
    uneven = ActorCritic(4, spaces.MultiDiscrete([3, 5]))
    box = ActorCritic(4, spaces.Box(-1, 1, (2,)))
    assert fused_a2c_loss.applies(tag, obs) == (DEVICE == "cuda")  # the CPU keeps PyTorch's loss
    assert not fused_a2c_loss.applies(uneven, obs)  # components of different sizes
    assert not fused_a2c_loss.applies(box, obs)


@pytest.mark.gpu
def test_tag_a2c_pass_on_the_gpu(cuda_device, monkeypatch):
    """WarpDrive's Tag network in bfloat16 autocast over 50,000 rows, as the Tag A2C config trains:
    the kernel against PyTorch's loss from the same pass. The loss is computed in float32 from the
    same logits either way; the rows' gradients are rounded to bfloat16 by both (a unit of it, 2^-8
    relative, apart here and there), hence the parameters' tolerance."""
    monkeypatch.setattr(wide_mlp, "KERNEL_MIN_ROWS", 4096)
    torch.manual_seed(0)
    policy = ActorCritic(71, spaces.MultiDiscrete([21, 21]), (256, 256), activation="relu", shared=True)
    policy = policy.to(cuda_device)
    config = multi_agent.PolicyConfig(algorithm="a2c", norm_adv=False, vf_coef=2.0)
    obs = torch.randn(50_000, 71, device=cuda_device)
    actions = torch.randint(0, 21, (50_000, 2), device=cuda_device)
    advantages, returns = torch.randn(50_000, device=cuda_device), torch.randn(50_000, device=cuda_device)
    weights = (torch.rand(50_000, device=cuda_device) > 0.1).float()
    assert fused_a2c_loss.applies(policy, obs)
    results = []
    for fused in (True, False):
        with torch.autocast("cuda", torch.bfloat16):
            joint = policy.joint_outputs(obs)  # 48 columns: 42 logits, the value, 5 zero
            logits, values = joint[:, :42], joint[:, 42]
            fields = (actions, advantages, returns, weights, config, 0.05)
            if fused:
                loss, stats = fused_a2c_loss.categorical_a2c_loss(logits, values, *fields, joint=joint)
            else:
                loss, stats = pytorch_loss(policy, logits, values, *fields)
        results.append((loss, stats, torch.autograd.grad(loss, list(policy.parameters()))))
    (loss, stats, grads), (want_loss, want_stats, want_grads) = results
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
    for name in stats:
        torch.testing.assert_close(stats[name], want_stats[name], rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, want_grads):
        assert (got - want).norm() <= 1e-2 * want.norm()
