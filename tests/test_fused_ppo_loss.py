"""baselines/fused_ppo_loss.py: PPO's loss of a categorical policy in Triton kernels against
``ppo.ppo_loss`` in PyTorch: the loss, its logged terms, each row's gradient with respect to its
logits and its value (what the kernel writes) and the networks' gradients. Without a GPU the
kernels run in Triton's interpreter on the CPU (conftest.py sets TRITON_INTERPRET=1).

Tolerances: the kernels compute the same formulas in float32 in another order (the softmax, the
sums over a block's rows, then over blocks), not bitwise. A row's gradient is within 4 float32
ulps of the largest (its terms cancel: a small one carries the larger ones' rounding); the loss and
its terms, means over the rows, within 2e-6 relative; a parameter's gradient, a sum over a few
hundred rows, within 1e-5 of its largest element."""

import dataclasses

import pytest
import torch
from gpu_marl_envs.baselines import fused_ppo_loss, ppo
from gpu_marl_envs.baselines.models import ActorCritic
from gymnasium import spaces

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ULP = 2**-23  # float32's at 1


def minibatch(rows: int, actions: int, spread: float):
    """Observations and a rollout's fields for ``rows`` rows; ``spread``: how far the old
    log-probabilities lie from the current ones (large: many ratios clipped)."""
    generator = torch.Generator().manual_seed(rows * 31 + actions)
    torch.manual_seed(0)
    agent = ActorCritic(4, spaces.Discrete(actions), (16, 16)).to(DEVICE)

    def draw(*shape):
        return torch.randn(*shape, generator=generator).to(DEVICE)

    obs = draw(rows, 4)
    chosen = torch.randint(0, actions, (rows,), generator=generator).to(DEVICE)
    with torch.no_grad():
        _, log_probs, _, values = agent.action_and_value(obs, chosen)
    old_log_probs = log_probs + spread * draw(rows)
    old_log_probs[: rows // 8] = log_probs[: rows // 8]  # ratios of exactly 1: inside the clip range
    advantages = draw(rows)
    advantages[rows // 8 : rows // 4] = 0.0  # ties between the surrogate and its clipped twin
    returns = values + draw(rows)
    old_values = values + 0.3 * draw(rows)  # some steps beyond the value clip
    return agent, obs, chosen, old_log_probs, advantages, returns, old_values


def gradients(agent, loss_fn):
    """The loss, its terms, the gradients of the actor's and critic's outputs and of the parameters."""
    outputs = {}

    def keep(name):
        def hook(module, inputs, output):
            output.retain_grad()
            outputs[name] = output

        return hook

    hooks = [
        agent.actor[-1].register_forward_hook(keep("logits")),
        agent.critic[-1].register_forward_hook(keep("values")),
    ]
    loss, stats = loss_fn()
    for hook in hooks:
        hook.remove()
    agent.zero_grad(set_to_none=True)
    loss.backward()
    rows = {name: output.grad for name, output in outputs.items()}
    return loss.detach(), stats, rows, {name: p.grad.clone() for name, p in agent.named_parameters()}


@pytest.mark.parametrize("norm_adv, clip_vloss", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("rows, actions, spread", [(300, 2, 0.3), (256, 3, 0.05), (7, 5, 1.0)])
def test_the_kernels_match_the_pytorch_loss(rows, actions, spread, norm_adv, clip_vloss):
    config = dataclasses.replace(ppo.PPOConfig(), norm_adv=norm_adv, clip_vloss=clip_vloss, ent_coef=0.05)
    agent, obs, *fields = minibatch(rows, actions, spread)
    assert not fused_ppo_loss.applies(agent, obs)  # too few rows: ppo_loss takes its PyTorch path
    expected = gradients(agent, lambda: ppo.ppo_loss(agent, obs, *fields, config))
    got = gradients(agent, lambda: fused_ppo_loss.categorical_ppo_loss(*agent.outputs_and_value(obs), *fields, config))
    assert_matches(got, expected)


def assert_matches(got, expected):
    torch.testing.assert_close(got[0], expected[0], rtol=2e-6, atol=2e-6)
    assert got[1].keys() == expected[1].keys()
    for name in expected[1]:
        torch.testing.assert_close(got[1][name], expected[1][name], rtol=2e-6, atol=2e-6, msg=name)
    for name, row_grads in expected[2].items():  # the logits' and the values'
        torch.testing.assert_close(
            got[2][name], row_grads, rtol=0, atol=4 * ULP * row_grads.abs().max().item(), msg=name
        )
    for name, grad in expected[3].items():
        torch.testing.assert_close(got[3][name], grad, rtol=0, atol=1e-5 * grad.abs().max().item(), msg=name)


def test_the_logged_terms_without_diagnostics():
    config = ppo.PPOConfig()
    agent, obs, *fields = minibatch(64, 2, 0.2)
    logits, values = agent.outputs_and_value(obs)
    _, stats = fused_ppo_loss.categorical_ppo_loss(logits, values, *fields, config, diagnostics=False)
    assert list(stats) == ["policy_loss", "value_loss", "entropy"]


@pytest.mark.gpu
@pytest.mark.parametrize("norm_adv, clip_vloss", [(True, False), (False, True)])
def test_ppo_loss_takes_the_kernels_on_cuda(norm_adv, clip_vloss, cuda_device, monkeypatch):
    config = dataclasses.replace(ppo.PPOConfig(), norm_adv=norm_adv, clip_vloss=clip_vloss)
    agent, obs, *fields = minibatch(8192, 2, 0.3)
    assert fused_ppo_loss.applies(agent, obs)
    got = gradients(agent, lambda: ppo.ppo_loss(agent, obs, *fields, config))
    monkeypatch.setattr(fused_ppo_loss, "applies", lambda agent, obs: False)
    assert_matches(got, gradients(agent, lambda: ppo.ppo_loss(agent, obs, *fields, config)))


@pytest.mark.gpu
def test_captured_training_with_the_kernels_matches_eager(cuda_device):
    """As ``test_ppo.test_captured_training_matches_eager``, at minibatches of 4,096 rows, where
    the update takes the kernels."""
    config = ppo.PPOConfig(num_envs=512, num_steps=32, total_timesteps=512 * 32 * 4)
    assert config.batch_size // config.num_minibatches >= 4096
    runs = [
        ppo.train(
            "CartPole-v1", dataclasses.replace(config, cuda_graph=graphed), device=cuda_device, log_every=1, log=None
        )[1]
        for graphed in (True, False)
    ]
    for graphed, eager in zip(*runs):
        for key in ("mean_return", "episodes", "value_loss", "entropy"):
            assert graphed[key] == pytest.approx(eager[key], rel=1e-3, abs=1e-4), (key, graphed, eager)
