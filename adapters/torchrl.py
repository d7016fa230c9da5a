"""TorchRL adapter: the batched envs as native TorchRL environments that stay on the env's device.

    from gpu_marl_envs.adapters import make_torchrl_env

    env = make_torchrl_env("CartPole-v1", num_envs=4096, device="cuda")         # TorchRLVectorEnv
    games = make_torchrl_env("TagContinuous-v0", num_envs=1024, device="cuda")  # TorchRLParallelEnv

Both are :class:`torchrl.envs.EnvBase` subclasses with ``batch_size == [num_envs]`` whose specs come
from the env's spaces (``Box`` -> ``Bounded``, or ``Unbounded`` where every bound is infinite, as
TorchRL's Gym and PettingZoo wrappers convert it; ``Discrete`` -> ``Categorical``, ``MultiDiscrete``
-> ``MultiCategorical``), so ``check_env_specs``, collectors, losses and value estimators use them as
they are. Nothing crosses to the host per step: the env's tensors go into the tensordicts (copied,
since the env overwrites its buffers on the next step), and ``"done"``, ``"terminated"`` and
``"truncated"`` are kept apart.

Resets. The env runs with ``AutoresetMode.SAME_STEP``: a sub-env whose episode ends is reset inside
the step that ended it, and its final observation is kept on the device. :meth:`step` reports the
final observation under ``("next", "observation")``, as TorchRL expects. ``step_and_maybe_reset``
(what collectors and ``rollout`` call) then takes the reset observations straight from the env, as
TorchRL's own EnvPool wrapper does for its auto-resetting pool, so it needs neither a second reset
nor the host synchronisation of TorchRL's generic ``any_done`` check. The generic path still works
(a ``TransformedEnv`` takes it): ``reset`` with a ``"_reset"`` mask resets the sub-envs it names,
except those the env has just reset itself.

Multi-agent games follow the layout of TorchRL's VMAS and PettingZoo wrappers (BenchMARL's input):
one sub-tensordict per agent group with batch ``[num_envs, group_size]`` holding ``"observation"``,
``"action"``, ``"reward"`` ``(..., 1)``, per-agent ``"done"``/``"terminated"``/``"truncated"``
``(..., 1)``, ``"mask"`` (the agent is still in the game: PettingZoo wrapper's name for it) and, in
games with action masks, ``"action_mask"``; the game's own ``"done"``/``"terminated"``/``"truncated"``
``(num_envs, 1)`` sit at the root. An agent that left the game stays in its group (zeros observed,
no reward, terminated) until its game ends; losses should weight its transitions by the root
``"mask"`` of the step (whether it was in the game when it acted). A game resets as a whole: a
``"_reset"`` at agent level alone resets nothing. With ``return_state=True`` (as TorchRL's PettingZoo
wrapper takes it) the game's global state (:meth:`~gpu_marl_envs.GpuParallelEnv.state`, a
centralised critic's input) sits at the root as ``"state"`` ``(num_envs, S)``, the final state under
``("next", "state")`` where a game ended, as for the observations.

Box actions (a ``Bounded`` action spec, float32) reach the env as they are: no cast, and no clipping
by the adapter, as TorchRL's own wrappers pass actions on; values outside the bounds are clipped by
the game's rules (NaN reads as 0), as VMAS clamps them. TorchRL's actors keep them in the spec
(``TanhNormal`` with the spec's bounds, or ``ProbabilisticActor(..., spec=..., safe=True)``); an env
made with ``validate_actions=True`` refuses them instead, at a host synchronisation per step.
"""

from __future__ import annotations

import numpy as np
import torch
from gpu_marl_envs.adapters._batched import check_batched_env, is_multi_agent, make_batched_env
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, MultiCategorical, TensorSpec, Unbounded
from torchrl.envs import EnvBase

from gpu_marl_envs.parallel_env import GpuParallelEnv
from gpu_marl_envs.vector_env import GpuVectorEnv

MAKE = "gpu_marl_envs.adapters.make_torchrl_env"
FLAGS = ("done", "terminated", "truncated")


def make_torchrl_env(
    env_id: str, num_envs: int = 1, *, return_state: bool = False, **kwargs
) -> TorchRLVectorEnv | TorchRLParallelEnv:
    """A TorchRL env of ``num_envs`` copies of ``env_id`` (``"CartPole-v1"``, ``"TagContinuous-v0"``,
    with or without the ``gpu_marl_envs/`` prefix). ``return_state`` (multi-agent games): the global
    state at the root, ``"state"``. Other keyword arguments go to the env (``device``, ``backend``,
    ``params``, ...; ``validate_actions`` defaults to False: actions drawn from the specs are in range,
    and checking values costs a host synchronisation per step)."""
    if not is_multi_agent(env_id):
        if return_state:
            raise ValueError(f"{env_id} is a single-agent env: return_state applies to multi-agent games")
        return TorchRLVectorEnv(make_batched_env(env_id, num_envs, **kwargs))
    return TorchRLParallelEnv(make_batched_env(env_id, num_envs, **kwargs), return_state=return_state)


def space_spec(space: spaces.Space, batch: tuple[int, ...], device: torch.device) -> TensorSpec:
    """The TorchRL spec of a Gymnasium space, with leading dims ``batch``."""
    if isinstance(space, spaces.Discrete) and int(space.start) == 0:
        spec = Categorical(int(space.n), dtype=torch.int64, device=device)
    elif isinstance(space, spaces.MultiDiscrete) and not space.start.any():
        spec = MultiCategorical([int(n) for n in space.nvec], dtype=torch.int64, device=device)
    elif isinstance(space, spaces.Box) and np.isinf(space.low).all() and np.isinf(space.high).all():
        spec = Unbounded(shape=space.shape, dtype=torch.as_tensor(space.low).dtype, device=device)
    elif isinstance(space, spaces.Box):
        spec = Bounded(
            torch.as_tensor(space.low),
            torch.as_tensor(space.high),
            shape=space.shape,
            dtype=torch.as_tensor(space.low).dtype,
            device=device,
        )
    else:
        raise TypeError(f"no TorchRL spec for {space}")
    return spec.expand(*batch, *spec.shape)


def flag_specs(shape: tuple[int, ...], device: torch.device) -> dict[str, TensorSpec]:
    return {key: Categorical(2, shape=shape, dtype=torch.bool, device=device) for key in FLAGS}


def step_flags(
    done: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, false: torch.Tensor
) -> tuple[dict, dict]:
    """The three flags of a step and, cleared, of the step after, with a trailing unit dim, copied
    in one kernel (the env reuses its buffers; ``false`` is an all-False tensor of their shape).
    Six views of one allocation, not shared tensors: TorchRL may write into each."""
    rows = torch.stack((done, false, terminated, false, truncated, false)).unsqueeze(-1).unbind(0)
    return dict(zip(FLAGS, rows[0::2])), dict(zip(FLAGS, rows[1::2]))


def step_observations(
    ended: torch.Tensor, final: torch.Tensor, current: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The observations of a step (``final`` where ``ended``, broadcast over their trailing dims)
    and of the step after (``current``, copied). Two kernels, not one ``torch.where`` over both:
    a where reads all of both its inputs, which for large observation batches (games of 65,536
    envs: a GiB and more) costs more than a launch."""
    return torch.where(ended, final, current), current.clone()


def agent_flags(
    terminated: torch.Tensor, truncated: torch.Tensor, active: torch.Tensor, false: torch.Tensor
) -> tuple[dict, dict]:
    """An agent group's ``"mask"`` and flags of a step (``mask`` = not terminated) and of the step
    after (an agent out of its ongoing game stays terminated), in three kernels."""
    kept = torch.stack((terminated, active, active, truncated, false)).unsqueeze(-1)
    term, in_game, _, trunc, cleared = kept.unbind(0)
    not_term, left, left_too = (~kept[:3]).unbind(0)
    step = {"mask": not_term.squeeze(-1), "done": term | trunc, "terminated": term, "truncated": trunc}
    after = {"mask": in_game.squeeze(-1), "done": left, "terminated": left_too, "truncated": cleared}
    return step, after


def and_not(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a & ~b`` of bool tensors in one kernel (``True > False`` alone is true)."""
    return torch.gt(a, b)


def cleared_flags(shape: tuple[int, ...], device: torch.device) -> dict[str, torch.Tensor]:
    # Three views of one allocation, not one tensor three times: TorchRL may write into each.
    return dict(zip(FLAGS, torch.zeros((3, *shape, 1), dtype=torch.bool, device=device)))


def new_tensordict(entries: dict, batch_size, device) -> TensorDictBase:
    """A TensorDict of tensors already on ``device`` with leading dims ``batch_size``, built without
    re-checking either, as TorchRL's own wrappers of on-device simulators (Brax, MuJoCo Playground)
    build their step outputs: the checks cost more than the rest of the adapter's step."""
    return TensorDict._new_unsafe(entries, batch_size=batch_size, device=device)


def set_entry(tensordict: TensorDictBase, key: str, value) -> None:
    """Write an entry whose shape and device are right by construction, unchecked (as TorchRL's
    ``EnvBase.any_done`` writes ``"_reset"``); ``value`` is a tensor or a TensorDict."""
    tensordict._set_str(key, value, validated=True, inplace=False, non_blocking=False)


class _Latest:
    """What the env's latest step or reset left, in a plain object: setting an attribute of an
    ``nn.Module`` (``EnvBase`` is one) goes through ``nn.Module.__setattr__``, about 1.5 µs each."""

    __slots__ = ("observations", "infos", "ended", "following")

    def __init__(self):
        self.observations = self.infos = None  # the env's output buffers
        self.ended = None  # the mask of the sub-envs that ended on the latest step (and that the env reset there)
        self.following = None  # the root entries of the step after the latest _step, made there with its own


class _GpuEnvBase(EnvBase):
    """What both adapters share: outputs, the fast ``step`` and ``step_and_maybe_reset``, resets, seeding."""

    def __init__(self, env, group_sizes: dict[str, int]):
        super().__init__(device=env.device, batch_size=torch.Size([env.num_envs]))
        self._env = env
        self._group_sizes = group_sizes
        # Read-only all-False flags, stacked with the env's own to clear the copies (see step_flags).
        self._false = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        self._latest = _Latest()
        self._reset_all(None)  # every output buffer of the env is valid from here on

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """TorchRL's ``EnvBase.step`` less the work that ``_step`` makes redundant: it writes every
        reward and done entry of the specs, in their shapes, on the env's device, so there is nothing
        for ``_step_proc_data`` to reshape or complete, and nothing to validate when ``"next"`` is
        set. (TorchRL's maintainers proposed the same skip as an env flag, ``_trust_step_output``,
        pytorch/rl#3562; 0.14 has none.) TorchRL's own path runs where it has work to do: a batch
        size other than the env's (its error), partial steps (``"_step"``), entries preset under
        ``"next"``, and ``run_type_checks``."""
        if (
            self.run_type_checks
            or tensordict.batch_size != self.batch_size
            or tensordict._get_str("_step", None) is not None
            or tensordict._get_str("next", None) is not None
        ):
            return super().step(tensordict)
        set_entry(tensordict, "next", self._step(tensordict))
        return tensordict

    def step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then carry on from the env's current state: the sub-envs that ended on this step
        were reset by the env, so their reset observations replace the final ones at the root of
        the second tensordict and their flags are cleared. No host synchronisation.

        The second tensordict is ``step_mdp``'s: the input's other root entries (the action, policy
        outputs, a collector's entries) carried over by TorchRL's own ``_StepMDP``, which
        ``step_mdp`` calls, with the env's entries in place of the ones ``step_mdp`` would take from
        ``"next"`` (every observation and done entry, which this replaces)."""
        if tensordict.device != self.device:
            tensordict = tensordict.to(self.device)
        latest = self._latest
        latest.following = None  # made by _step, which TorchRL's own path skips when no sub-env steps
        tensordict = self.step(tensordict)
        entries = latest.following if latest.following is not None else self._current_entries()
        step_mdp = self._step_mdp
        following = step_mdp._exclude(step_mdp.exclude_from_root, tensordict, None)
        if following is None:  # no entry to carry over
            following = tensordict.empty()
        for key, value in entries.items():
            if not isinstance(value, dict):
                set_entry(following, key, value)
                continue
            node = following._get_str(key, None)  # a group: carried over with the actions the step read from it
            for inner, tensor in value.items():
                set_entry(node, inner, tensor)
        return tensordict, following

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        reset = None if tensordict is None else tensordict.get("_reset", None)
        if reset is not None:
            mask = reset.reshape(self.batch_size)
            if self._latest.ended is not None:  # those the env reset on its last step start afresh already
                mask = mask & ~self._latest.ended
            if mask.any():
                self._reset_some(mask)
        elif tensordict is None or not any(tensordict.get(key, None) is not None for key in self.reset_keys):
            self._reset_all(None)
        # else: agent-level "_reset" entries only. A game resets as a whole; an agent out of it stays out.
        return self._outputs(self._current_entries())

    def _set_seed(self, seed: int | None) -> None:
        # Applied at once, as a reset of every sub-env (sub-env i gets seed + i).
        self._reset_all(seed)

    def _outputs(self, entries: dict) -> TensorDictBase:
        """A tensordict of root entries and, per group, a dict of entries with batch (num_envs, size)."""
        batch = self.batch_size
        for group, size in self._group_sizes.items():
            entries[group] = new_tensordict(entries[group], (*batch, size), self.device)
        return new_tensordict(entries, batch, self.device)

    def to(self, device) -> EnvBase:
        if torch.device(device) not in (self.device, torch.device(self.device.type)):
            raise ValueError(
                f"the env's state lives on {self.device}; make the env on {device} instead "
                f"({MAKE}(env_id, num_envs, device={str(device)!r}))"
            )
        return self

    def close(self, *, raise_if_closed: bool = True) -> None:
        self._env.close()
        super().close(raise_if_closed=raise_if_closed)


class TorchRLVectorEnv(_GpuEnvBase):
    """A :class:`~gpu_marl_envs.GpuVectorEnv` (made with ``autoreset_mode=AutoresetMode.SAME_STEP``) as
    a TorchRL env: keys ``"observation"``, ``"action"``, ``"reward"`` ``(num_envs, 1)``, ``"done"``,
    ``"terminated"``, ``"truncated"`` ``(num_envs, 1)``. See the module docstring. The env is reset
    once here."""

    def __init__(self, env: GpuVectorEnv):
        env = check_batched_env(env, GpuVectorEnv, type(self).__name__, MAKE)
        super().__init__(env, {})
        batch, device = tuple(self.batch_size), env.device
        self.observation_spec = Composite(
            observation=space_spec(env.single_observation_space, batch, device), shape=batch, device=device
        )
        self.action_spec = space_spec(env.single_action_space, batch, device)
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32, device=device)
        self.done_spec = Composite(flag_specs((*batch, 1), device), shape=batch, device=device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        observations, rewards, terminated, truncated, infos = self._env.step(tensordict.get("action"))
        latest = self._latest
        latest.ended = ended = infos["_final_obs"]
        step, following = step_flags(ended, terminated, truncated, self._false)
        step["observation"], following["observation"] = step_observations(
            step["done"], infos["final_obs"], observations
        )
        step["reward"] = rewards.unsqueeze(-1).clone()
        latest.following = following
        return self._outputs(step)

    def _current_entries(self) -> dict:
        return {"observation": self._latest.observations.clone(), **cleared_flags(tuple(self.batch_size), self.device)}

    def _reset_all(self, seed) -> None:
        self._latest.observations, _ = self._env.reset(seed=seed)
        self._latest.ended = None

    def _reset_some(self, mask: torch.Tensor) -> None:
        self._env.reset(options={"reset_mask": mask})


class TorchRLParallelEnv(_GpuEnvBase):
    """A :class:`~gpu_marl_envs.GpuParallelEnv` (made with ``autoreset_mode=AutoresetMode.SAME_STEP``)
    as a multi-agent TorchRL env, one entry per agent group (``group_map``: group -> agent names),
    and with ``return_state=True`` the game's global state at the root (``"state"``). See the module
    docstring for the keys. The env is reset once here (its infos tell whether the game has action
    masks)."""

    def __init__(self, env: GpuParallelEnv, return_state: bool = False):
        env = check_batched_env(env, GpuParallelEnv, type(self).__name__, MAKE)
        self.group_map = {group: list(agents) for group, agents in env.groups.items()}
        if return_state and "state" in self.group_map:
            raise ValueError("return_state=True puts the global state at the root key 'state', a group's name here")
        self.return_state = return_state
        super().__init__(env, {group: len(agents) for group, agents in self.group_map.items()})
        self._false_agents = {
            group: torch.zeros((env.num_envs, len(agents)), dtype=torch.bool, device=env.device)
            for group, agents in self.group_map.items()
        }
        batch, device = tuple(self.batch_size), env.device
        observation, action, reward, done = {}, {}, {}, flag_specs((*batch, 1), device)
        for group, agents in self.group_map.items():
            shape = (*batch, len(agents))
            entries = {
                "observation": space_spec(env.observation_space(agents[0]), shape, device),
                "mask": Categorical(2, shape=shape, dtype=torch.bool, device=device),
            }
            if "action_mask" in self._latest.infos[group]:
                entries["action_mask"] = Categorical(
                    2, shape=self._latest.infos[group]["action_mask"].shape, dtype=torch.bool, device=device
                )
            observation[group] = Composite(entries, shape=shape, device=device)
            action[group] = Composite(
                action=space_spec(env.action_space(agents[0]), shape, device), shape=shape, device=device
            )
            reward[group] = Composite(
                reward=Unbounded(shape=(*shape, 1), dtype=torch.float32, device=device), shape=shape, device=device
            )
            done[group] = Composite(flag_specs((*shape, 1), device), shape=shape, device=device)
        if return_state:
            observation["state"] = space_spec(env.state_space, batch, device)
        self.full_observation_spec = Composite(observation, shape=batch, device=device)
        self.full_action_spec = Composite(action, shape=batch, device=device)
        self.full_reward_spec = Composite(reward, shape=batch, device=device)
        self.full_done_spec = Composite(done, shape=batch, device=device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = {group: tensordict.get((group, "action")) for group in self.group_map}
        observations, rewards, terminated, truncated, infos = self._env.step_groups(actions)
        latest = self._latest
        latest.observations, latest.infos = observations, infos
        latest.ended = ended = next(iter(infos.values()))["_final_obs"]  # games that ended on this step
        # A game ends for all its agents at once; it was truncated if its time ran out.
        game_truncated = torch.cat([truncated[group] for group in self.group_map], dim=1).any(1)
        step, following = step_flags(ended, and_not(ended, game_truncated), game_truncated, self._false)
        game_over = step["done"].unsqueeze(-1)  # (num_envs, 1, 1): over agents and features
        for group in self.group_map:
            info = infos[group]
            step[group], following[group] = agent_flags(
                terminated[group], truncated[group], info["active"], self._false_agents[group]
            )
            step[group]["observation"], following[group]["observation"] = step_observations(
                game_over, info["final_obs"], observations[group]
            )
            step[group]["reward"] = rewards[group].unsqueeze(-1).clone()
            if "action_mask" in info:  # after an ended game: the new game's first masks (two copies)
                step[group]["action_mask"], following[group]["action_mask"] = torch.stack(
                    (info["action_mask"], info["action_mask"])
                ).unbind(0)
        if self.return_state:  # the final state where a game ended, as for the observations
            env = self._env
            step["state"], following["state"] = step_observations(step["done"], env.final_state(), env.state())
        latest.following = following
        return self._outputs(step)

    def _current_entries(self) -> dict:
        entries = cleared_flags(tuple(self.batch_size), self.device)
        for group in self.group_map:
            info, false = self._latest.infos[group], self._false_agents[group]
            # The step-after half of agent_flags, for the agents' current activity.
            _, entries[group] = agent_flags(false, false, info["active"], false)
            entries[group]["observation"] = self._latest.observations[group].clone()
            if "action_mask" in info:
                entries[group]["action_mask"] = info["action_mask"].clone()
        if self.return_state:
            entries["state"] = self._env.state().clone()
        return entries

    def _reset_all(self, seed) -> None:
        self._latest.observations, self._latest.infos = self._env.reset_groups(seed=seed)
        self._latest.ended = None

    def _reset_some(self, mask: torch.Tensor) -> None:
        self._latest.observations, self._latest.infos = self._env.reset_groups(options={"reset_mask": mask})
