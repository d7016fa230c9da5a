"""The torch reference backend for multi-agent games: the game's torch functions plus autoreset
and per-agent episode returns.

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
from gpu_marl_envs.registration import RegisteredEnv


def _select(definition: MultiAgentDefinition, mask: torch.Tensor, new, old):
    """A state taking ``new``'s rows where ``mask`` (per env) and ``old``'s elsewhere."""
    return definition.state_type(
        **{name: _rows(mask, getattr(new, name), getattr(old, name)) for name in definition.state_fields}
    )


def _rows(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``new``'s rows where ``mask`` (per env), ``old``'s elsewhere."""
    return torch.where(mask.view(-1, *([1] * (new.dim() - 1))), new, old)


class MultiAgentTorchBackend:
    name = "torch"
    graph_by_default = True

    def __init__(self, spec: RegisteredEnv, params, buffers: MultiAgentBuffers, autoreset_mode: AutoresetMode):
        self.definition = definition = spec.definition
        self.params = params
        self.buffers = buffers
        self.autoreset_mode = autoreset_mode
        # Each agent's own action range, on the device once (a copy per step could not be captured).
        self._action_high = definition.action_high(params).to(buffers.rewards.device)
        self._continuous = definition.continuous_actions(params)

    def _fresh_states(self):
        b = self.buffers
        return self.definition.reset(self.params, rng.key_hash(b.seeds, b.episodes), b.seeds.shape[0])

    def _write_state(self, state) -> None:
        for name in self.definition.state_fields:
            getattr(self.buffers.state, name).copy_(getattr(state, name))

    def _agent_flags(self, state, terminated, truncated):
        in_game = self.definition.in_game(self.params, state)
        return terminated[:, None] | ~in_game, truncated[:, None] & in_game

    def _observe(self, state, mask: torch.Tensor | None = None) -> None:
        """Observations (and action masks) of ``state``, written where ``mask`` (every env if None)."""
        b, p, d = self.buffers, self.params, self.definition
        outputs = [(b.observations, d.flat_observations(p, state))]
        if d.has_action_masks:
            outputs.append((b.action_masks, d.flat_action_masks(p, state)))
        for buffer, value in outputs:
            buffer.copy_(value if mask is None else _rows(mask, value, buffer))

    def step(self, actions: torch.Tensor) -> None:
        b, p, d = self.buffers, self.params, self.definition
        if self._continuous:
            # NaN reads as 0, as every kernel reads it (the rules clip the rest).
            actions = torch.where(torch.isnan(actions), 0.0, actions)
        else:
            # Out-of-range indices are clamped into the agent's own range, as every kernel does.
            actions = torch.minimum(actions.clamp(min=0), self._action_high)
        state, rewards, terminated, truncated = d.step(p, b.state, actions)
        done = terminated | truncated
        agent_terminated, agent_truncated = self._agent_flags(state, terminated, truncated)
        # Totals of the state right after the step, before any reset replaces it.
        totals = d.episode_totals(p, state) if b.episode_totals is not None else None
        running = b.running_returns

        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            # Envs whose previous step ended only reset now, ignoring their actions.
            resetting = b.needs_reset.clone()
            state = _select(d, resetting, self._fresh_states(), state)
            rewards = torch.where(resetting[:, None], 0.0, rewards)
            terminated = terminated & ~resetting
            truncated = truncated & ~resetting
            agent_terminated = agent_terminated & ~resetting[:, None]
            agent_truncated = agent_truncated & ~resetting[:, None]
            running = torch.where(resetting[:, None], 0.0, running)  # a reset starts the returns afresh
            b.episodes += resetting.to(torch.int32)
            b.needs_reset.copy_(done & ~resetting)
        elif self.autoreset_mode == AutoresetMode.SAME_STEP:
            b.final_observation_mask.copy_(done)
            b.final_observations.copy_(_rows(done, d.flat_observations(p, state), b.final_observations))
            state = _select(d, done, self._fresh_states(), state)
            b.episodes += done.to(torch.int32)
        else:
            b.needs_reset.copy_(done)

        ended = terminated | truncated
        running = running + rewards
        b.episode_returns.copy_(_rows(ended, running, b.episode_returns))
        b.running_returns.copy_(_rows(ended, torch.zeros_like(running), running))
        if totals is not None:
            b.episode_totals.copy_(_rows(ended, totals, b.episode_totals))
        self._write_state(state)
        self._observe(state)
        b.rewards.copy_(rewards)
        b.terminated.copy_(terminated)
        b.truncated.copy_(truncated)
        b.agent_terminated.copy_(agent_terminated)
        b.agent_truncated.copy_(agent_truncated)

    def reset(self) -> None:
        b, d = self.buffers, self.definition
        mask = b.reset_mask
        state = _select(d, mask, self._fresh_states(), b.state)
        self._write_state(state)
        self._observe(state, mask)
        b.running_returns.masked_fill_(mask[:, None], 0.0)
        b.needs_reset.masked_fill_(mask, False)
        b.episodes += mask.to(torch.int32)
