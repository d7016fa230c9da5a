"""Stable-Baselines3 ``VecEnv``s over the batched envs (``pip install gpu_marl_envs[sb3]``).

- :class:`SB3VecEnv` wraps a :class:`~gpu_marl_envs.GpuVectorEnv`: sub-env ``i`` of SB3 is sub-env
  ``i`` of the batch.
- :class:`SB3ParallelVecEnv` wraps a :class:`~gpu_marl_envs.GpuParallelEnv`: its sub-envs are the
  (game, agent) pairs of the chosen groups, game-major (sub-env ``game * K + k`` is the ``k``-th
  chosen agent of ``game``), so one SB3 policy drives every chosen agent: parameter sharing, as
  SuperSuit's ``pettingzoo_env_to_vec_env_v1`` lays agents out.
- :func:`make_sb3_env` builds either from any registered id, under SB3's ``VecMonitor``.

SB3's semantics: ``dones = terminated | truncated``; a finished sub-env's info holds
``terminal_observation`` and ``TimeLimit.truncated`` (truncated and not terminated, so SB3 bootstraps
from the terminal observation exactly there), as SB3's ``DummyVecEnv`` gives them. Episode statistics
(``info["episode"]``, which SB3's logger and ``evaluate_policy`` read) are SB3's ``VecMonitor``'s, as
SB3 intends for a ``VecEnv`` whose sub-envs are no ``Monitor``-wrapped Gymnasium envs:
:func:`make_sb3_env` puts one over the adapter (wrap an adapter you build yourself in it too). The
returned observation is the next episode's first one (the batch runs with SAME_STEP autoreset).
``seed(s)`` takes effect at the next ``reset()``, sub-env ``i`` getting ``s + i``; ``reset_infos``
holds an empty dict per sub-env.

Cost per step: actions are checked on the host (shape, dtype, range, NaN) and cross to the device in
one copy; every output of the step (observations, final observations, rewards, flags) is packed on
the device into one float32 tensor that crosses back in one copy. Sub-envs that did not finish share
one read-only empty info dict (building tens of thousands of fresh dicts costs more than the step;
SB3's wrappers write only into finished sub-envs' infos); each finished sub-env gets a dict of its own.

Box actions (single-agent envs with a ``Box`` space, and games of ``Box`` actions: SimpleSpread-v3
with ``continuous_actions=True``) reach the env as float32 (a float64 array, as numpy code makes
them, is cast; integers are taken as values). NaN is refused on the host; values outside the bounds
go through, as SB3's own VecEnvs pass actions on unchanged, and the env's rules clip them: SB3's
algorithms keep their policies' actions within the bounds themselves (PPO and A2C clip them, SAC, TD3
and DDPG squash them into the bounds). The groups SB3 does not drive get uniform values within their
``Box`` by default (:class:`UniformActions`).

Attributes and methods: the sub-envs are slices of one batched env (``.env``), so ``get_attr``
returns the batched env's attribute once per requested index, ``set_attr`` sets it on the batched env
(``indices`` must be ``None``: it is shared), ``env_method`` calls the batched env's method once and
returns its result once per index (pass ``env_ids=`` yourself, e.g.
``env_method("set_state", state, env_ids=[3])``), and ``env_is_wrapped`` is ``False`` (no Gymnasium
wrapper sits between SB3 and the batch).

Agents that leave the game (a tagged runner): "black death", as SuperSuit's ``black_death`` wrapper.
The agent's sub-env stays in the batch and keeps its place: from the step after it left until its
game ends, it observes zeros and gets reward 0 (the batched env already reports out-of-game agents
so), and it is ``done`` only when its game ends, with every other agent of that game. Its terminal
transition is therefore an absorbing zero-reward state whose value SB3 learns to be 0, no episode of
length 0 is ever logged, SB3's buffers never see a sub-env start a new episode mid-game, and the
episode statistics count the agent's return over the whole game. At the game's end an agent that had
left is terminated (``TimeLimit.truncated`` false: nothing to bootstrap), one still playing at a time
limit is truncated.

Rendering: ``render_mode="rgb_array"`` on the batched env; :meth:`get_images` returns its frames
(``render_env_indices`` of a ``GpuVectorEnv``, the one game ``render_env_index`` of a
``GpuParallelEnv``), which SB3's ``render()`` tiles and ``VecVideoRecorder`` records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gpu_marl_envs.adapters._batched import check_batched_env, is_multi_agent, make_batched_env
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecMonitor
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices

from gpu_marl_envs.parallel_env import GpuParallelEnv
from gpu_marl_envs.vector_env import GpuVectorEnv

__all__ = ["SB3ParallelVecEnv", "SB3VecEnv", "UniformActions", "make_sb3_env"]


class _NoInfo(dict):
    """The info of a sub-env that did not finish this step: empty, shared, and read-only, so that a
    write meant for one sub-env fails instead of reaching all of them."""

    def _refuse(self, *args, **kwargs):
        raise TypeError(
            "this sub-env did not finish: its info is a shared read-only empty dict; copy it first (dict(info))"
        )

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _refuse


_NO_INFO = _NoInfo()


def _host_actions(actions, space: spaces.Space, num_envs: int) -> np.ndarray:
    """SB3's numpy actions checked against ``space`` for ``num_envs`` sub-envs, as a contiguous array of
    the dtype the env takes. Raises before anything is stepped."""
    if isinstance(actions, torch.Tensor):
        raise TypeError(
            "SB3 VecEnvs take numpy actions; pass actions.cpu().numpy(), or step the batched env "
            "(vec_env.env) with tensors directly"
        )
    actions = np.asarray(actions)
    shape = (num_envs, *space.shape)
    if actions.shape != shape:
        raise ValueError(f"actions must have shape {shape} (num_envs, *action_space.shape), got {actions.shape}")
    if isinstance(space, spaces.Box):
        if not np.issubdtype(actions.dtype, np.number):
            raise TypeError(f"actions must be numbers, got dtype {actions.dtype}")
        actions = np.ascontiguousarray(actions, dtype=np.float32)
        bad = np.isnan(actions).reshape(num_envs, -1).any(axis=1)
        if bad.any():
            raise ValueError(f"actions of sub-env {int(np.flatnonzero(bad)[0])} contain NaN (no env was stepped)")
        return actions
    if not np.issubdtype(actions.dtype, np.integer):
        raise TypeError(
            f"actions for {space} must be integers, got dtype {actions.dtype}; use actions.astype(np.int64)"
        )
    high = space.n if isinstance(space, spaces.Discrete) else space.nvec
    bad = ((actions < 0) | (actions >= high)).reshape(num_envs, -1).any(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"actions of sub-env {i}: {actions[i].tolist()} not in {space} (no env was stepped)")
    return np.ascontiguousarray(actions, dtype=np.int64)


class _PackedVecEnv(VecEnv):
    """What both adapters share. A subclass implements ``_reset_device(seeds) -> observations`` and
    ``_step_device(actions) -> packed``, where ``packed`` is one float32 tensor holding, flattened and
    in this order: observations, final observations (valid where done), rewards, terminated,
    truncated and done, each of the last four ``(num_envs,)``."""

    def __init__(self, env, num_envs: int, observation_space: spaces.Box, action_space: spaces.Space):
        self.env = env
        self.device = env.device
        super().__init__(num_envs, observation_space, action_space)  # reads render_mode through get_attr
        self.metadata["render_fps"] = env.metadata.get("render_fps", 30)
        self._obs_shape = tuple(observation_space.shape)
        self._obs_size = int(np.prod(self._obs_shape))
        self._actions: torch.Tensor | None = None

    # -- SB3 VecEnv API ------------------------------------------------------------------------

    def reset(self) -> np.ndarray:
        if any(self._options):
            raise ValueError(
                "reset options are not supported: SB3's reset() resets every sub-env; write states "
                "with env_method('set_state', ...) instead"
            )
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        observations = self._reset_device(seeds)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._actions = None
        # A copy even on the CPU: the env overwrites its buffers in place, SB3 keeps the array.
        return observations.to("cpu", copy=True).numpy().reshape(self.num_envs, *self._obs_shape)

    def step_async(self, actions: np.ndarray) -> None:
        checked = _host_actions(actions, self.action_space, self.num_envs)
        # The one host-to-device copy (none on the CPU, where the env reads SB3's array in step_wait,
        # as SB3's DummyVecEnv does).
        self._actions = torch.from_numpy(checked).to(self.device)

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("call reset() and then step_async(actions) before step_wait()")
        actions, self._actions = self._actions, None
        host = self._step_device(actions).cpu().numpy()  # the one device-to-host copy
        n, size = self.num_envs, self._obs_size
        observations = host[: n * size].reshape(n, *self._obs_shape)
        final = host[n * size : 2 * n * size].reshape(n, *self._obs_shape)
        rewards, terminated, truncated, dones = host[2 * n * size :].reshape(4, n)
        dones = dones > 0
        infos: list[dict[str, Any]] = [_NO_INFO] * n
        ids = np.flatnonzero(dones)
        if len(ids):
            # Column operations first: the Python loop (one dict per finished sub-env) is the cost.
            time_limit = ((truncated[ids] > 0) & ~(terminated[ids] > 0)).tolist()
            for i, terminal, truncation in zip(ids.tolist(), final[ids], time_limit):
                infos[i] = {"terminal_observation": terminal, "TimeLimit.truncated": truncation}
        return observations, rewards, dones, infos

    def close(self) -> None:
        self.env.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        frames = self.env.render()
        if frames is None:
            return [None]
        return [frames] if isinstance(frames, np.ndarray) else list(frames)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self.env, attr_name)
        return [value] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        if indices is not None and len(set(self._indices(indices))) != self.num_envs:
            raise ValueError(
                f"the sub-envs share one batched env, so {attr_name!r} can only be set for all of "
                "them: pass indices=None"
            )
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result] * len(self._indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [isinstance(self.env, wrapper_class)] * len(self._indices(indices))

    # -- helpers -------------------------------------------------------------------------------

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        chosen = list(self._get_indices(indices))
        bad = [i for i in chosen if not 0 <= i < self.num_envs]
        if bad:
            raise IndexError(f"sub-env indices must lie in [0, {self.num_envs - 1}], got {bad[:10]}")
        return chosen

    def _reset_device(self, seeds: list[int] | None) -> torch.Tensor:
        raise NotImplementedError

    def _step_device(self, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class SB3VecEnv(_PackedVecEnv):
    """An SB3 ``VecEnv`` over a :class:`~gpu_marl_envs.GpuVectorEnv` built with SAME_STEP autoreset.

    The batch's own action check costs a device sync per step; the adapter checks actions on the host
    instead, so build the batch with ``validate_actions=False`` (as :func:`make_sb3_env` does).
    """

    def __init__(self, env: GpuVectorEnv):
        env = check_batched_env(env, GpuVectorEnv, "SB3VecEnv", "make_sb3_env")
        super().__init__(env, env.num_envs, env.single_observation_space, env.single_action_space)

    def _reset_device(self, seeds):
        observations, _ = self.env.reset(seed=seeds)
        return observations

    def _step_device(self, actions):
        observations, rewards, terminated, truncated, infos = self.env.step(actions)
        flags = torch.stack([terminated, truncated, terminated | truncated]).to(torch.float32)
        return torch.cat([observations.reshape(-1), infos["final_obs"].reshape(-1), rewards, flags.reshape(-1)])


class UniformActions:
    """The default policy of the groups SB3 does not drive: uniform random actions drawn on the device
    (bounds moved there once, so a step copies nothing from the host): indices of ``Discrete`` and
    ``MultiDiscrete`` spaces, float32 values within a ``Box``'s bounds. ``seed(s)`` restarts it."""

    def __init__(self, env: GpuParallelEnv, groups: Sequence[str]):
        self._generator = torch.Generator(device=env.device)
        self._generator.seed()
        self._shapes, self._highs = {}, {}
        self._boxes: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # group -> (low, width)
        for g in groups:
            space = env.action_space(env.groups[g][0])
            self._shapes[g] = (env.num_envs, len(env.groups[g]), *space.shape)
            if isinstance(space, spaces.Box):  # float32 with finite bounds (register_game refuses others)
                low = torch.as_tensor(space.low, dtype=torch.float32, device=env.device)
                self._highs[g] = torch.as_tensor(space.high, dtype=torch.float32, device=env.device)
                self._boxes[g] = low, self._highs[g] - low
            else:
                high = space.nvec if isinstance(space, spaces.MultiDiscrete) else space.n
                self._highs[g] = torch.as_tensor(high, dtype=torch.int64, device=env.device)

    def seed(self, seed: int) -> None:
        self._generator.manual_seed(seed)

    def __call__(self, observations: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        actions = {}
        for g, shape in self._shapes.items():
            high = self._highs[g]
            draw = torch.rand(shape, generator=self._generator, device=high.device)
            if g in self._boxes:
                low, width = self._boxes[g]
                actions[g] = torch.addcmul(low, draw, width).minimum(high)  # rounding could pass high
            else:
                actions[g] = (draw * high).long().minimum(high - 1)  # rand < 1, but float rounding can reach 1
        return actions


class SB3ParallelVecEnv(_PackedVecEnv):
    """An SB3 ``VecEnv`` whose sub-envs are the (game, agent) pairs of some groups of a
    :class:`~gpu_marl_envs.GpuParallelEnv` (built with SAME_STEP autoreset): parameter sharing.

    Args:
        env: the batched game.
        groups: the groups SB3 drives (default: every group); their agents must share one
            observation space and one action space.
        other_actions: ``observations -> actions`` for the other groups, both dicts keyed by group
            with ``(num_envs, group_size, ...)`` tensors on the env's device (the observations are
            those of the last reset or step); default: :class:`UniformActions`, seeded with the
            first game's seed at a seeded reset.

    Sub-env ``game * K + k`` is the ``k``-th agent of the chosen groups (in ``groups`` order) in game
    ``game``, ``K`` their total size. ``seed(s)`` seeds game ``g`` with the seed of its first sub-env,
    ``s + g * K``. Agents that leave the game: see the module docstring ("black death").
    """

    def __init__(
        self,
        env: GpuParallelEnv,
        groups: Sequence[str] | None = None,
        other_actions: Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]] | None = None,
    ):
        env = check_batched_env(env, GpuParallelEnv, "SB3ParallelVecEnv", "make_sb3_env")
        groups = list(env.groups) if groups is None else list(groups)
        unknown = [g for g in groups if g not in env.groups]
        if not groups or unknown or len(set(groups)) != len(groups):
            raise ValueError(f"groups must be distinct names among {list(env.groups)}, got {groups}")
        observation_spaces = {g: env.observation_space(env.groups[g][0]) for g in groups}
        action_spaces = {g: env.action_space(env.groups[g][0]) for g in groups}
        first = groups[0]
        for g in groups[1:]:
            if observation_spaces[g] != observation_spaces[first] or action_spaces[g] != action_spaces[first]:
                raise ValueError(
                    f"one policy drives every chosen group, so their spaces must agree: {first!r} has "
                    f"{observation_spaces[first]}, {action_spaces[first]}; {g!r} has "
                    f"{observation_spaces[g]}, {action_spaces[g]}. Pass groups=[...] of one kind"
                )
        self.groups = groups
        self.other_groups = [g for g in env.groups if g not in groups]
        self._sizes = [len(env.groups[g]) for g in groups]
        self.agents_per_game = sum(self._sizes)
        self._other_actions = UniformActions(env, self.other_groups) if other_actions is None else other_actions
        self._last_observations: dict[str, torch.Tensor] = {}
        super().__init__(env, env.num_envs * self.agents_per_game, observation_spaces[first], action_spaces[first])

    def _reset_device(self, seeds):
        games = None if seeds is None else seeds[:: self.agents_per_game]
        observations, _ = self.env.reset_groups(seed=games)
        if games is not None and isinstance(self._other_actions, UniformActions):
            self._other_actions.seed(games[0])
        self._last_observations = observations
        return self._chosen(observations)

    def _step_device(self, actions):
        shape = (self.env.num_envs, self.agents_per_game, *self.action_space.shape)
        mine = dict(zip(self.groups, actions.reshape(shape).split(self._sizes, dim=1)))
        others = {}
        if self.other_groups:
            others = dict(self._other_actions({g: self._last_observations[g] for g in self.other_groups}))
        observations, rewards, terminated, truncated, infos = self.env.step_groups({**mine, **others})
        self._last_observations = observations
        info = infos[self.groups[0]]
        done = info["_final_obs"][:, None].expand(-1, self.agents_per_game)
        final = torch.cat([infos[g]["final_obs"] for g in self.groups], dim=1)
        flags = torch.stack([self._chosen(terminated), self._chosen(truncated), done]).to(torch.float32)
        return torch.cat(
            [
                self._chosen(observations).reshape(-1),
                final.reshape(-1),
                self._chosen(rewards).reshape(-1),
                flags.reshape(-1),
            ]
        )

    def _chosen(self, by_group: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The chosen groups' tensors, game-major: ``(num_envs, K, ...)``."""
        return torch.cat([by_group[g] for g in self.groups], dim=1)


def make_sb3_env(
    env_id: str, num_envs: int, *, groups: Sequence[str] | None = None, other_actions=None, **kwargs
) -> VecMonitor:
    """An SB3 ``VecEnv`` of any registered id: ``make_sb3_env("gpu_marl_envs/CartPole-v1", 64,
    device="cuda")`` (over an :class:`SB3VecEnv`) or ``make_sb3_env("gpu_marl_envs/TagGridworld-v0",
    256, groups=["taggers"])`` (over an :class:`SB3ParallelVecEnv`; ``num_envs`` counts games), under
    SB3's ``VecMonitor`` (the episode statistics; ``.unwrapped`` is the adapter, whose attributes it
    forwards). Keyword arguments go to the batched env (``device``, ``backend``, ``params``,
    ``render_mode``, ...); it is built with SAME_STEP autoreset and without its own per-step action
    check (the adapter checks on the host)."""
    if not is_multi_agent(env_id):
        if groups is not None or other_actions is not None:
            raise ValueError(f"{env_id} is a single-agent env: groups and other_actions apply to multi-agent games")
        return VecMonitor(SB3VecEnv(make_batched_env(env_id, num_envs, **kwargs)))
    return VecMonitor(SB3ParallelVecEnv(make_batched_env(env_id, num_envs, **kwargs), groups, other_actions))
