"""The torch reference backend: the env's torch functions plus autoreset, as tensor ops.

Runs on CPU and GPU; it is the readable specification that the kernel backends are tested
against, so it favours clarity over speed (it computes reset states for every env each step and
selects with ``torch.where``).
"""

from __future__ import annotations

import functools

import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs import rng
from gpu_marl_envs.buffers import ClassicBuffers
from gpu_marl_envs.registration import RegisteredEnv


class TorchBackend:
    name = "torch"
    # A CUDA graph by default: one graph launch instead of the dozens of small kernels of a step.
    graph_by_default = True

    def __init__(
        self,
        spec: RegisteredEnv,
        params,
        buffers: ClassicBuffers,
        autoreset_mode: AutoresetMode,
        action_space: spaces.Space,
    ):
        self.definition = definition = spec.definition
        self.p = definition.torch_params(params)
        self.buffers = buffers
        self.autoreset_mode = autoreset_mode
        self.action_space = action_space

    def _fresh_states(self) -> torch.Tensor:
        b = self.buffers
        uniform = functools.partial(rng.uniform_from_key, rng.key_hash(b.seeds, b.episodes))
        return self.definition.reset(self.p, uniform, b.seeds.shape[0])

    def _sanitise(self, actions: torch.Tensor) -> torch.Tensor:
        # The rules the kernels apply when validation is off (see GpuVectorEnv's docstring).
        if isinstance(self.action_space, spaces.Discrete):
            return actions.clamp(0, int(self.action_space.n) - 1)
        return torch.where(torch.isnan(actions), 0.0, actions)

    def step(self, actions: torch.Tensor) -> None:
        b, p, d = self.buffers, self.p, self.definition
        state, rewards, terminated = d.step(p, b.state, self._sanitise(actions))
        elapsed = b.elapsed_steps + 1
        truncated = elapsed >= p.max_episode_steps
        done = terminated | truncated

        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            # Envs whose previous step ended only reset now, ignoring their action.
            resetting = b.needs_reset.clone()
            state = torch.where(resetting, self._fresh_states(), state)
            rewards = torch.where(resetting, 0.0, rewards)
            terminated = terminated & ~resetting
            truncated = truncated & ~resetting
            elapsed = torch.where(resetting, 0, elapsed)
            b.episodes += resetting.to(torch.int32)
            b.needs_reset.copy_(done & ~resetting)
        elif self.autoreset_mode == AutoresetMode.SAME_STEP:
            b.final_observation_mask.copy_(done)
            b.final_observations.copy_(torch.where(done[:, None], d.observe(p, state), b.final_observations))
            state = torch.where(done, self._fresh_states(), state)
            elapsed = torch.where(done, 0, elapsed)
            b.episodes += done.to(torch.int32)
        else:
            b.needs_reset.copy_(done)

        b.state.copy_(state)
        b.observations.copy_(d.observe(p, state))
        b.rewards.copy_(rewards)
        b.terminated.copy_(terminated)
        b.truncated.copy_(truncated)
        b.elapsed_steps.copy_(elapsed)

    def reset(self) -> None:
        b, p, d = self.buffers, self.p, self.definition
        mask = b.reset_mask
        state = torch.where(mask, self._fresh_states(), b.state)
        b.state.copy_(state)
        b.observations.copy_(torch.where(mask[:, None], d.observe(p, state), b.observations))
        b.elapsed_steps.masked_fill_(mask, 0)
        b.needs_reset.masked_fill_(mask, False)
        b.episodes += mask.to(torch.int32)
