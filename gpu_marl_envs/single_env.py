"""``GpuEnv``: one env with numpy I/O, as ``gymnasium.make`` returns it.

It is a batch of one on the CPU with the torch backend by default (kernel launches do not pay
for a single env), so it behaves exactly like one sub-env of :class:`GpuVectorEnv` with the same
seed, and passes Gymnasium's ``check_env``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.vector_env import GpuVectorEnv


def _numpy(row: torch.Tensor) -> np.ndarray:
    # A copy: the batch's buffers are overwritten by the next call, and Gymnasium users keep observations.
    return row.to("cpu", copy=True).numpy()


class GpuEnv(gym.Env):
    """One env, numpy I/O. ``render_mode="rgb_array"``: :meth:`render` returns the frame Gymnasium's
    own env draws in the same state (needs pygame: ``pip install gpu_marl_envs[render]``).

    Keyword settings, fields of the env's params (``gymnasium.make("gpu_marl_envs/Pendulum-v1", g=9.81)``),
    apply on top of ``params=``, as for :class:`~gpu_marl_envs.vector_env.GpuVectorEnv`."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        env_id: str,
        *,
        device="cpu",
        backend: str | None = None,
        params=None,
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        **settings,
    ):
        self._batch = GpuVectorEnv(
            env_id,
            1,
            device=device,
            backend=backend,
            params=params,
            max_episode_steps=max_episode_steps,
            autoreset_mode=AutoresetMode.DISABLED,
            render_mode=render_mode,
            **settings,
        )
        self.render_mode = render_mode
        # The batch's render modes and frame rate (none for an env without frames).
        self.metadata = {
            **type(self).metadata,
            **{key: value for key, value in self._batch.metadata.items() if key in ("render_modes", "render_fps")},
        }
        self.observation_space = self._batch.single_observation_space
        self.action_space = self._batch.single_action_space
        self._discrete = isinstance(self.action_space, spaces.Discrete)

    @property
    def params(self):
        return self._batch.params

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, _ = self._batch.reset(seed=seed, options=options)
        return _numpy(obs[0]), {}

    def step(self, action):
        if self._discrete:
            if not self.action_space.contains(action):
                raise ValueError(f"action must be an int in [0, {self.action_space.n - 1}], got {action!r}")
            batch = torch.tensor([int(action)], dtype=torch.int64, device=self._batch.device)
        else:
            array = np.asarray(action, dtype=np.float32)
            if array.shape != self.action_space.shape:
                raise ValueError(f"action must have shape {self.action_space.shape}, got {array.shape}")
            batch = torch.as_tensor(array, device=self._batch.device)[None]
        obs, rewards, terminated, truncated, _ = self._batch.step(batch)
        return _numpy(obs[0]), float(rewards[0]), bool(terminated[0]), bool(truncated[0]), {}

    def render(self) -> np.ndarray | None:
        """The ``(H, W, 3)`` uint8 frame (``render_mode="rgb_array"``), else ``None``."""
        frames = self._batch.render()
        return None if frames is None else frames[0]

    def close(self):
        self._batch.close()

    def get_state(self) -> dict[str, float]:
        return {name: float(value[0]) for name, value in self._batch.get_state().items()}

    def set_state(self, state: dict[str, float], elapsed_steps: int = 0) -> np.ndarray:
        """Write an explicit state (``{field: value}``) and start an episode there."""
        obs = self._batch.set_state({k: [v] for k, v in state.items()}, elapsed_steps=elapsed_steps)
        return _numpy(obs[0])
