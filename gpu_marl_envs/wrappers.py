"""Gymnasium's vector wrappers for torch tensors, on the env's device.

Gymnasium 1.4's ``gymnasium.wrappers.vector`` wrappers compute with numpy (``np.mean(x, axis=0)``,
``np.where``, ``np.clip``, numpy buffers of their own) and take numpy arrays; its only support for
other array libraries is ``ArrayConversion`` (through ``array-api-compat``), which converts the
env's tensors to numpy and back, and so leaves the GPU at every step. The wrappers here are the
same wrappers for a torch-tensor ``VectorEnv`` (``GpuVectorEnv``, or any env whose outputs are torch
tensors on one device): subclasses of Gymnasium's ``VectorWrapper`` classes, with Gymnasium's
arguments, attributes, info keys and update rules, and their state in tensors on the env's device.

- :class:`RecordEpisodeStatistics`: ``info["episode"]`` (``r``, ``l``, ``t``) and ``info["_episode"]``
  where episodes end; ``return_queue``, ``length_queue`` and ``time_queue``.
- :class:`NormalizeObservation`, :class:`NormalizeReward`: Gymnasium's running mean and variance
  (Chan et al.'s parallel update) and ``epsilon``, ``update_running_mean`` to freeze them.
- :class:`ClipAction`, :class:`RescaleAction`: the action transforms, on the device.
- :func:`sample_actions`: a batch of random actions drawn on the device (``envs.action_space.sample()``
  draws with numpy on the host; the env copies such an array to the device, one copy per step).

Where they differ from Gymnasium's, and why:

- Outputs are torch tensors on the env's device; rewards stay float32 (Gymnasium's
  ``NormalizeReward`` returns float64: numpy promotes float32 rewards divided by its float64 statistics).
- Batch means and variances are reduced by torch, in another order than numpy's: the running
  statistics agree with Gymnasium's to float32 rounding (a few ulps), not bit for bit.
- ``RecordEpisodeStatistics`` reads back one flag per step (whether any episode ended, as
  Gymnasium's wrapper branches on it) and, at steps where episodes end, their statistics for the
  queues. The other wrappers never wait for the device.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.error import InvalidBound
from gymnasium.vector import AutoresetMode, VectorActionWrapper, VectorEnv, VectorObservationWrapper, VectorWrapper
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.utils import rescale_box

from gpu_marl_envs.validation import actions_on_device

__all__ = [
    "ClipAction",
    "NormalizeObservation",
    "NormalizeReward",
    "RecordEpisodeStatistics",
    "RescaleAction",
    "RunningMeanStd",
    "sample_actions",
]


def env_device(env: VectorEnv) -> torch.device:
    """The device of a (wrapped) torch-tensor vector env: Gymnasium's wrappers do not forward
    attributes, the base env has ``device``."""
    device = getattr(env.unwrapped, "device", None)
    if device is None:
        raise TypeError(
            f"{env.unwrapped} has no device attribute: these wrappers are for torch-tensor vector envs "
            "such as gpu_marl_envs' GpuVectorEnv; for numpy envs use gymnasium.wrappers.vector"
        )
    return torch.device(device)


def sample_actions(env: VectorEnv, generator: torch.Generator | None = None) -> torch.Tensor:
    """A batch of random actions of ``env.single_action_space``, drawn on the env's device: no
    host-to-device copy. The laws of Gymnasium's ``sample()``: ``Discrete``/``MultiDiscrete``
    uniform over their values, a float ``Box`` uniform between finite bounds, exponential from a
    single finite bound, normal where both are infinite. ``generator``: a ``torch.Generator`` on
    the env's device (default: torch's global generator)."""
    space, num_envs, device = env.single_action_space, env.num_envs, env_device(env)
    if isinstance(space, spaces.Discrete):
        return torch.randint(int(space.n), (num_envs,), device=device, generator=generator) + int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        # Uniform in [0, 1) scaled by each nvec, floored: every component uniform over its own range.
        u = torch.rand((num_envs, *space.shape), device=device, generator=generator, dtype=torch.float64)
        nvec = torch.as_tensor(space.nvec, device=device)
        return (u * nvec).long().clamp_(max=nvec - 1) + torch.as_tensor(space.start, device=device)
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        dtype = getattr(torch, np.dtype(space.dtype).name)
        shape = (num_envs, *space.shape)
        low = torch.as_tensor(space.low, device=device, dtype=dtype).expand(shape)
        high = torch.as_tensor(space.high, device=device, dtype=dtype).expand(shape)
        uniform = low + (high - low) * torch.rand(shape, device=device, dtype=dtype, generator=generator)
        exponential = torch.empty(shape, device=device, dtype=dtype).exponential_(generator=generator)
        normal = torch.randn(shape, device=device, dtype=dtype, generator=generator)
        bounded_below, bounded_above = torch.isfinite(low), torch.isfinite(high)
        return torch.where(
            bounded_below & bounded_above,
            uniform,
            torch.where(bounded_below, low + exponential, torch.where(bounded_above, high - exponential, normal)),
        )
    raise TypeError(f"sample_actions draws Discrete, MultiDiscrete and float Box actions, got {space}")


class RunningMeanStd:
    """Gymnasium's ``gymnasium.wrappers.utils.RunningMeanStd`` in tensors on a device: the mean,
    variance and count of the values seen, merged batch by batch (Chan et al.'s parallel algorithm,
    Gymnasium's ``update_mean_var_count_from_moments``). The count is a device tensor too, so that
    a masked batch (``NormalizeReward`` skips the steps that only reset) needs no read-back."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, epsilon: float = 1e-4):
        self.mean = torch.zeros(shape, dtype=dtype, device=device)
        self.var = torch.ones(shape, dtype=dtype, device=device)
        self.count = torch.tensor(epsilon, dtype=torch.float64, device=device)

    def update(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Merge the rows of ``x`` (those where ``mask`` is True); a batch of no rows changes nothing."""
        if mask is None:
            batch_count = x.shape[0]
            batch_mean = x.mean(dim=0)
            batch_var = x.var(dim=0, correction=0)  # numpy's np.var: the population variance
        else:
            weights = mask.to(x.dtype).view(-1, *([1] * (x.dim() - 1)))
            batch_count = mask.sum().to(torch.float64)
            divisor = batch_count.clamp(min=1).to(x.dtype)
            batch_mean = (x * weights).sum(dim=0) / divisor
            batch_var = (((x - batch_mean) ** 2) * weights).sum(dim=0) / divisor
        delta = batch_mean.to(self.mean.dtype) - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var.to(self.var.dtype) * batch_count
            + delta**2 * self.count * batch_count / total
        )
        new_var = m2 / total
        if mask is None:
            self.mean, self.var, self.count = new_mean, new_var, total
        else:  # no active row: keep the statistics (Gymnasium skips the update)
            empty = batch_count == 0
            self.mean = torch.where(empty, self.mean, new_mean)
            self.var = torch.where(empty, self.var, new_var)
            self.count = torch.where(empty, self.count, total)


class RecordEpisodeStatistics(VectorWrapper):
    """Gymnasium's ``gymnasium.wrappers.vector.RecordEpisodeStatistics`` for torch tensors: at a
    step where episodes end, ``info[stats_key]`` holds ``r`` (returns, float64), ``l`` (lengths,
    int64) and ``t`` (seconds since each episode began, rounded to µs, float64), zero for the
    sub-envs that did not end, and ``info["_" + stats_key]`` which did (bool); all on the env's
    device. ``return_queue``, ``length_queue`` and ``time_queue`` keep the last ``buffer_length``
    episodes' statistics as Python numbers. Autoreset modes as Gymnasium's: with ``NEXT_STEP`` (and
    ``DISABLED``) the step that only resets a sub-env does not count."""

    def __init__(self, env: VectorEnv, buffer_length: int = 100, stats_key: str = "episode"):
        super().__init__(env)
        self._stats_key = stats_key
        mode = self.env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if not isinstance(mode, AutoresetMode):
            raise TypeError(f"Expected env.metadata['autoreset_mode'] to be an AutoresetMode, got {type(mode)}")
        self._autoreset_mode = mode
        self.device = env_device(env)
        self.episode_count = 0
        self.episode_start_times = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)
        self.episode_returns = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)
        self.episode_lengths = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.prev_dones = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self.time_queue = deque(maxlen=buffer_length)
        self.return_queue = deque(maxlen=buffer_length)
        self.length_queue = deque(maxlen=buffer_length)

    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)  # the env checks reset_mask first
        mask = None if options is None else options.get("reset_mask")
        if mask is None:
            mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        mask = torch.as_tensor(mask, device=self.device)
        self.episode_start_times.masked_fill_(mask, time.perf_counter())
        self.episode_returns.masked_fill_(mask, 0)
        self.episode_lengths.masked_fill_(mask, 0)
        self.prev_dones = self.prev_dones & ~mask  # a new tensor: an earlier info["_episode"] is this one
        return obs, info

    def step(self, actions):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        if not isinstance(infos, dict):
            raise TypeError(f"RecordEpisodeStatistics needs the env's infos as a dict, got {type(infos).__name__}")
        if self._autoreset_mode == AutoresetMode.SAME_STEP:
            self.episode_returns += rewards
            self.episode_lengths += 1
        else:
            # NEXT_STEP: the step after an episode's end only resets its sub-env and starts the next
            # episode's statistics from nothing.
            self.episode_returns = torch.where(self.prev_dones, 0.0, self.episode_returns + rewards)
            self.episode_lengths = torch.where(self.prev_dones, 0, self.episode_lengths + 1)
            self.episode_start_times.masked_fill_(self.prev_dones, time.perf_counter())
        dones = terminations | truncations
        self.prev_dones = dones.clone()  # the env overwrites its flags at the next step
        if dones.any():  # the one read-back of every step (Gymnasium's wrapper branches here too)
            key = self._stats_key
            if key in infos or f"_{key}" in infos:
                raise ValueError(
                    f"Attempted to add episode stats with key '{key}' but this key already exists in "
                    f"info: {list(infos.keys())}"
                )
            elapsed = torch.round(time.perf_counter() - self.episode_start_times, decimals=6)
            infos[key] = {
                "r": torch.where(dones, self.episode_returns, 0.0),
                "l": torch.where(dones, self.episode_lengths, 0),
                "t": torch.where(dones, elapsed, 0.0),
            }
            infos[f"_{key}"] = self.prev_dones
            ended = dones.nonzero().flatten()
            self.episode_count += len(ended)
            self.time_queue.extend(elapsed[ended].tolist())
            self.return_queue.extend(self.episode_returns[ended].tolist())
            self.length_queue.extend(self.episode_lengths[ended].tolist())
            if self._autoreset_mode == AutoresetMode.SAME_STEP:
                # Those sub-envs have been reset within this step: their next episode starts now.
                self.episode_returns.masked_fill_(dones, 0)
                self.episode_lengths.masked_fill_(dones, 0)
                self.episode_start_times.masked_fill_(dones, time.perf_counter())
        return observations, rewards, terminations, truncations, infos


class NormalizeObservation(VectorObservationWrapper):
    """Gymnasium's ``gymnasium.wrappers.vector.NormalizeObservation`` for torch tensors: each
    observation component centred and scaled by the running mean and variance of the batches seen
    (float32 statistics, as Gymnasium keeps them in the observation space's dtype), ``(obs - mean) /
    sqrt(var + epsilon)``. As Gymnasium's, it needs ``NEXT_STEP`` (or ``DISABLED``) autoreset and
    refuses partial resets; ``update_running_mean = False`` freezes the statistics."""

    def __init__(self, env: VectorEnv, epsilon: float = 1e-8):
        if not epsilon > 0:
            raise InvalidBound(f"`epsilon` should be strictly positive. Received {epsilon}")
        super().__init__(env)  # refuses SAME_STEP autoreset, as Gymnasium's
        space = self.env.single_observation_space
        self.single_observation_space = spaces.Box(-np.inf, np.inf, shape=space.shape, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.obs_rms = RunningMeanStd(space.shape, torch.float32, env_device(env))
        self.epsilon = epsilon
        self.update_running_mean = True

    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        mask = None if options is None else options.get("reset_mask")
        if mask is not None and not bool(torch.as_tensor(mask).all()):
            raise ValueError(
                "NormalizeObservation does not support partial resets. The 'reset_mask' must contain all True values."
            )
        return super().reset(seed=seed, options=options)

    def observations(self, observations: torch.Tensor) -> torch.Tensor:
        if self.update_running_mean:
            self.obs_rms.update(observations)
        return ((observations - self.obs_rms.mean) / torch.sqrt(self.obs_rms.var + self.epsilon)).float()


class NormalizeReward(VectorWrapper):
    """Gymnasium's ``gymnasium.wrappers.vector.NormalizeReward`` for torch tensors: rewards divided
    by the running standard deviation of the discounted returns ``accumulated_reward`` (float32, reset
    at termination), whose statistics are float64 as Gymnasium's; ``reward / sqrt(var + epsilon)``,
    returned as float32. With ``NEXT_STEP`` or ``DISABLED`` autoreset, the step that only resets a
    sub-env neither accumulates nor updates; ``update_running_mean = False`` freezes the statistics."""

    def __init__(self, env: VectorEnv, gamma: float = 0.99, epsilon: float = 1e-8):
        if not 0 <= gamma <= 1:
            raise InvalidBound(f"`gamma` should be in the interval [0, 1]. Received {gamma}")
        if not epsilon > 0:
            raise InvalidBound(f"`epsilon` should be strictly positive. Received {epsilon}")
        super().__init__(env)
        device = env_device(env)
        self.return_rms = RunningMeanStd((), torch.float64, device)
        self.accumulated_reward = torch.zeros(self.num_envs, dtype=torch.float32, device=device)
        self.gamma = gamma
        self.epsilon = epsilon
        self.update_running_mean = True
        self._prev_dones = torch.zeros(self.num_envs, dtype=torch.bool, device=device)
        self._autoreset_mode = self.env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)

    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        self.accumulated_reward.zero_()
        self._prev_dones.zero_()
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        if self._autoreset_mode == AutoresetMode.SAME_STEP:
            active = None  # every step belongs to an episode
            self.accumulated_reward = self.accumulated_reward * self.gamma * ~terminated + reward
        else:
            active = ~self._prev_dones
            accumulated = self.accumulated_reward * self.gamma * ~terminated + reward
            self.accumulated_reward = torch.where(active, accumulated, self.accumulated_reward)
        if self.update_running_mean:
            self.return_rms.update(self.accumulated_reward, active)
        self._prev_dones = terminated | truncated
        if self._autoreset_mode == AutoresetMode.SAME_STEP:
            # Those sub-envs have been reset within this step: a new return starts now.
            self.accumulated_reward.masked_fill_(self._prev_dones, 0)
        scaled = (reward.double() / torch.sqrt(self.return_rms.var + self.epsilon)).float()
        return obs, scaled, terminated, truncated, info


class ClipAction(VectorActionWrapper):
    """Gymnasium's ``gymnasium.wrappers.vector.ClipAction`` for torch tensors: actions clipped into
    the env's ``Box`` bounds on the device (NaN stays NaN, as with ``np.clip``); the wrapper's action
    space is unbounded. A numpy array of actions is copied to the device first."""

    def __init__(self, env: VectorEnv):
        super().__init__(env)
        space = self.env.single_action_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"ClipAction needs a Box action space, got {space}")
        self.device = env_device(env)
        self._low = torch.as_tensor(space.low, device=self.device)
        self._high = torch.as_tensor(space.high, device=self.device)
        self.single_action_space = spaces.Box(-np.inf, np.inf, shape=space.shape, dtype=space.dtype)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def actions(self, actions):
        return torch.clamp(actions_on_device(actions, self.device), self._low, self._high)


class RescaleAction(VectorActionWrapper):
    """Gymnasium's ``gymnasium.wrappers.vector.RescaleAction`` for torch tensors: actions in
    ``[min_action, max_action]`` mapped affinely onto the env's ``Box`` bounds, on the device, with
    Gymnasium's gradient and intercept (its ``rescale_box`` checks the bounds and gives the space).
    A numpy array of actions is copied to the device first."""

    def __init__(self, env: VectorEnv, min_action, max_action):
        super().__init__(env)
        space = self.env.single_action_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"RescaleAction needs a Box action space, got {space}")
        new_space, _, _ = rescale_box(space, min_action, max_action)
        if np.any(new_space.low == new_space.high):
            raise InvalidBound(
                f"Min action ({min_action}) must be strictly smaller than max action ({max_action}), "
                "the rescaling has no inverse where they are equal"
            )
        gradient, intercept = _rescale_coefficients(space, new_space.low, new_space.high)
        self.device = env_device(env)
        self._gradient = torch.as_tensor(gradient, device=self.device)
        self._intercept = torch.as_tensor(intercept, device=self.device)
        self.single_action_space = new_space
        self.action_space = batch_space(new_space, self.num_envs)

    def actions(self, actions):
        # Gymnasium's backward transform (the wrapper's space -> the env's), in the Box's dtype.
        return (actions_on_device(actions, self.device) - self._intercept) / self._gradient


def _rescale_coefficients(box: spaces.Box, new_min: np.ndarray, new_max: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``gradient`` and ``intercept`` of the map from ``box`` onto ``[new_min, new_max]``, computed as
    Gymnasium 1.4's ``rescale_box`` computes them (which keeps them inside its closures): the span in
    extended precision, both rounded to the Box's dtype."""
    wide = getattr(np, "float128", np.float64)  # as Gymnasium: float128 where the platform has it
    min_finite, max_finite = np.isfinite(new_min), np.isfinite(new_max)
    both_finite = min_finite & max_finite
    span = np.array(box.high[both_finite], dtype=wide) - np.array(box.low[both_finite], dtype=wide)
    gradient = np.ones_like(new_min, dtype=box.dtype)
    gradient[both_finite] = (new_max[both_finite] - new_min[both_finite]) / span
    intercept = np.zeros_like(new_min, dtype=box.dtype)
    # Where both bounds are finite, the lower one decides (Gymnasium assigns it last).
    intercept[max_finite] = new_max[max_finite] - box.high[max_finite]
    intercept[min_finite] = gradient[min_finite] * -box.low[min_finite] + new_min[min_finite]
    return gradient, intercept
