"""ActorCritic with hidden layers shared by the actor and the critic and ReLU activations
(``PolicyConfig.shared_hidden``, ``activation``: WarpDrive's ``FullyConnected``): its structure, the
two output layers as one product, the gradients, and the GPU path (aligned layers, cuBLASLt's ReLU
epilogue, the fused backward) against plain PyTorch layers."""

import pytest
import torch
from gpu_marl_envs.baselines import multi_agent, wide_mlp
from gpu_marl_envs.baselines.models import ActorCritic
from gymnasium import spaces
from torch import nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TAG_ACTIONS = spaces.MultiDiscrete([21, 21])


def shared_policy(hidden=(32, 32), device=DEVICE) -> ActorCritic:
    torch.manual_seed(0)
    policy = ActorCritic(71, TAG_ACTIONS, hidden, activation="relu", shared=True).to(device)
    with torch.no_grad():
        for parameter in policy.parameters():  # biases away from zero: both ReLU sides in play
            parameter.add_(0.1 * torch.randn_like(parameter))
    return policy


def test_one_trunk_and_two_output_layers():
    policy = shared_policy()
    assert [type(m) for m in policy.trunk] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU]
    assert [type(m) for m in policy.actor] == [nn.Linear] and policy.actor[0].out_features == 42
    assert [type(m) for m in policy.critic] == [nn.Linear] and policy.critic[0].out_features == 1
    separate = ActorCritic(71, TAG_ACTIONS, (32, 32), activation="relu")
    assert separate.trunk is None and isinstance(separate.actor[1], nn.ReLU)
    # One set of hidden layers where two MLPs have two.
    hidden = sum(p.numel() for p in policy.trunk.parameters())
    assert sum(p.numel() for p in separate.parameters()) - sum(p.numel() for p in policy.parameters()) == hidden


def test_both_outputs_from_one_product_are_each_layers():
    policy = shared_policy()
    obs = torch.randn(5, 7, 71, device=DEVICE)
    logits, value = policy.outputs_and_value(obs)
    h = policy.trunk(obs)
    # One product of both output layers against each layer alone: the same float32 sums, perhaps
    # taken in another order by the CPU's matrix kernels.
    torch.testing.assert_close(logits, policy.actor(h), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(value, policy.critic(h).squeeze(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(policy.value(obs), value, rtol=1e-6, atol=1e-6)
    greedy = policy.greedy(obs)
    assert torch.equal(greedy, logits.unflatten(-1, (2, 21)).argmax(-1))


def test_the_value_loss_trains_the_shared_layers():
    policy = shared_policy()
    obs = torch.randn(64, 71, device=DEVICE)
    _, _, _, value = policy.action_and_value(obs, torch.zeros(64, 2, dtype=torch.int64, device=DEVICE))
    value.square().mean().backward()
    assert policy.trunk[0].weight.grad.abs().sum() > 0 and policy.critic[0].weight.grad.abs().sum() > 0
    assert policy.actor[0].weight.grad is None or policy.actor[0].weight.grad.abs().sum() == 0


def test_the_settings_build_it_and_refuse_what_cannot_share():
    config = multi_agent.MultiAgentConfig.from_dict(
        {
            "groups": {"taggers": "taggers", "runners": "runners"},
            "policies": {"taggers": {"activation": "relu", "shared_hidden": True, "hidden": [16, 16]}, "runners": {}},
        }
    )
    policies = multi_agent.make_policies("TagContinuous-v0", config)
    assert policies["taggers"].trunk is not None and isinstance(policies["taggers"].trunk[1], nn.ReLU)
    assert policies["runners"].trunk is None and isinstance(policies["runners"].actor[1], nn.Tanh)
    with pytest.raises(ValueError, match='shared_hidden needs critic = "local"'):
        multi_agent.PolicyConfig(shared_hidden=True, critic="centralised")
    with pytest.raises(ValueError, match='activation must be "tanh" or "relu"'):
        multi_agent.PolicyConfig(activation="gelu")
    with pytest.raises(ValueError, match="a critic of its own cannot share"):
        ActorCritic(4, spaces.Discrete(2), shared=True, critic=nn.Linear(4, 1))


@pytest.mark.gpu
@pytest.mark.parametrize("bf16", [False, True])
def test_the_gpu_path_matches_plain_layers(bf16, cuda_device):
    """Tag's shapes over many rows: the aligned layers, the ReLU epilogue and the fused backwards
    (wide_mlp, from 4,096 rows) against the same modules called as PyTorch layers."""
    policy = shared_policy((256, 256), cuda_device)
    obs = torch.randn(20_000, 71, device=cuda_device)
    actions = torch.randint(0, 21, (20_000, 2), device=cuda_device)
    with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
        assert wide_mlp.applies(obs)
        _, log_prob, entropy, value = policy.action_and_value(obs, actions)
        h = policy.trunk(obs)
        logits, plain_value = policy.actor(h), policy.critic(h).squeeze(-1)
        plain_log_prob, plain_entropy = policy._log_prob_and_entropy(logits, actions, None)
        with torch.no_grad():
            sampled = policy.sample(obs)  # the rollout's pass: the ReLU in the product's epilogue
    assert sampled.shape == (20_000, 2)
    # bfloat16 keeps 8 bits: the two paths' sums in another order land a unit apart here and there.
    tolerance = 3e-2 if bf16 else 2e-3
    for ours, theirs in ((log_prob, plain_log_prob), (entropy, plain_entropy), (value, plain_value)):
        torch.testing.assert_close(ours.float(), theirs.float(), rtol=tolerance, atol=tolerance)
    losses = [
        (v.float().square() - lp.float() - e.float()).mean()
        for v, lp, e in ((value, log_prob, entropy), (plain_value, plain_log_prob, plain_entropy))
    ]
    got, want = (torch.autograd.grad(loss, list(policy.parameters())) for loss in losses)
    for g, w in zip(got, want):
        assert (g - w).norm() <= tolerance * w.norm() + 1e-6
