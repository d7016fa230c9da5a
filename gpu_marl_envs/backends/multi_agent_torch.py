"""The torch reference backend for multi-agent games: the game's torch functions plus autoreset.

Runs on CPU and GPU; the kernel backends are tested against it. Like the single-agent torch
backend it favours clarity: reset states are drawn for every env each step and selected with
``torch.where``, so the step has no data-dependent control flow and can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
from gymnasium.vector import AutoresetMode

from gpu_marl_envs import rng
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition
from gpu_marl_envs.multi_agent_buffers import MultiAgentBuffers


def _select(definition: MultiAgentDefinition, mask: torch.Tensor, new, old):
    """A state taking ``new``'s rows where ``mask`` (per env) and ``old``'s elsewhere."""
    def pick(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(mask.view(-1, *([1] * (a.dim() - 1))), a, b)

    return definition.state_type(**{name: pick(getattr(new, name), getattr(old, name))
                                    for name in definition.state_fields})


class MultiAgentTorchBackend:
    name = "torch"
    graph_by_default = True

    def __init__(self, definition: MultiAgentDefinition, params, buffers: MultiAgentBuffers,
                 autoreset_mode: AutoresetMode):
        self.definition = definition
        self.params = params
        self.buffers = buffers
        self.autoreset_mode = autoreset_mode

    def _fresh_states(self):
        b = self.buffers
        return self.definition.reset(self.params, rng.key_hash(b.seeds, b.episodes), b.seeds.shape[0])

    def _write_state(self, state) -> None:
        for name in self.definition.state_fields:
            getattr(self.buffers.state, name).copy_(getattr(state, name))

    def _agent_flags(self, state, terminated, truncated):
        in_game = self.definition.in_game(self.params, state)
        return terminated[:, None] | ~in_game, truncated[:, None] & in_game

    def step(self, actions: torch.Tensor) -> None:
        b, p, d = self.buffers, self.params, self.definition
        state, rewards, terminated, truncated = d.step(p, b.state, d.clamp_actions(p, actions))
        done = terminated | truncated
        agent_terminated, agent_truncated = self._agent_flags(state, terminated, truncated)

        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            # Envs whose previous step ended only reset now, ignoring their actions.
            resetting = b.needs_reset.clone()
            state = _select(d, resetting, self._fresh_states(), state)
            rewards = torch.where(resetting[:, None], 0.0, rewards)
            terminated = terminated & ~resetting
            truncated = truncated & ~resetting
            agent_terminated = agent_terminated & ~resetting[:, None]
            agent_truncated = agent_truncated & ~resetting[:, None]
            b.episodes += resetting.to(torch.int32)
            b.needs_reset.copy_(done & ~resetting)
        elif self.autoreset_mode == AutoresetMode.SAME_STEP:
            b.final_observation_mask.copy_(done)
            b.final_observations.copy_(torch.where(done[:, None, None], d.observe(p, state), b.final_observations))
            state = _select(d, done, self._fresh_states(), state)
            b.episodes += done.to(torch.int32)
        else:
            b.needs_reset.copy_(done)

        self._write_state(state)
        b.observations.copy_(d.observe(p, state))
        b.rewards.copy_(rewards)
        b.terminated.copy_(terminated)
        b.truncated.copy_(truncated)
        b.agent_terminated.copy_(agent_terminated)
        b.agent_truncated.copy_(agent_truncated)

    def reset(self) -> None:
        b, p, d = self.buffers, self.params, self.definition
        mask = b.reset_mask
        state = _select(d, mask, self._fresh_states(), b.state)
        self._write_state(state)
        b.observations.copy_(torch.where(mask[:, None, None], d.observe(p, state), b.observations))
        b.needs_reset.masked_fill_(mask, False)
        b.episodes += mask.to(torch.int32)
