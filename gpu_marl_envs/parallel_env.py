"""``GpuParallelEnv``: a batch of multi-agent games stepped on the device, behind a batched form of
PettingZoo's parallel API, with torch tensors in and out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs import rng
from gpu_marl_envs.autoreset import parse_autoreset_mode, select_resets
from gpu_marl_envs.backends import resolve_backend
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition, split_groups
from gpu_marl_envs.graphs import GraphedStep
from gpu_marl_envs.multi_agent_buffers import MultiAgentBuffers, check_shared_memory
from gpu_marl_envs.observation_buffers import Sides, check_observation_buffers
from gpu_marl_envs.registration import game_spec, snake_case
from gpu_marl_envs.validation import check_env_ids, check_num_envs, exact_cast, reset_mask_option, sub_env_seeds
from gpu_marl_envs.vector_env import resolve_device


def get_game(env_id: str) -> MultiAgentDefinition:
    """The definition of the registered game ``env_id`` (:func:`registration.game_spec`)."""
    return game_spec(env_id).definition


class GpuParallelEnv:
    """``num_envs`` copies of a multi-agent game whose whole step runs on ``device``.

    The batched form of PettingZoo's ``ParallelEnv``: the same methods and dicts keyed by agent, but
    every value is a tensor with a leading ``num_envs`` dimension, and agents never leave
    ``agents``: an agent out of the game (a tagged runner) stays in the arrays, observes zeros, is
    frozen, gets no reward and is marked by ``active`` (it is terminated from the step it left on).
    Agents of one group share their spaces; groups may differ (their actions are of one kind; a
    discrete game's of one shape).

    Args:
        env_id: a registered game's id, e.g. ``"gpu_marl_envs/TagContinuous-v0"`` (a name registered
            in one namespace only, as ``"CovidEconomy-v0"``, may leave it out).
        num_envs: number of games (>= 1).
        device, backend, autoreset_mode, validate_actions, cuda_graph: as for
            :class:`gpu_marl_envs.GpuVectorEnv`. With autoreset, a game's episode ends for all of its
            agents at once, and ``infos[agent]["final_obs"]`` (SAME_STEP) holds its last observations.
        params: the game's params dataclass (default: the published configuration).
        **settings: fields of the params by name (``make_parallel("gpu_marl_envs/TagContinuous-v0",
            num_runners=20)``), applied on top of ``params`` and validated as ``params`` is; an unknown
            name raises ``TypeError``.
        render_mode: ``None``, or ``"rgb_array"`` for games with a renderer (Tag; an instance's
            ``metadata["render_modes"]`` lists its game's): :meth:`render` draws sub-env ``render_env_index``.
        observation_buffers: as for :class:`gpu_marl_envs.GpuVectorEnv`: with ``k``, the observations
            a step returns stay unchanged through the next ``k - 1`` steps (action masks do not
            alternate).

    ## Two views of the same buffers
    - :meth:`reset` / :meth:`step`: dicts keyed by agent (``possible_agents``); observations
      ``(num_envs, obs_dim)`` (its group's ``obs_dim``), rewards, terminations and truncations
      ``(num_envs,)``; ``infos[agent]`` holds ``"active"`` ``(num_envs,)``: whether the agent is still
      in the game after this step.
    - :meth:`reset_groups` / :meth:`step_groups`: dicts keyed by group (``groups``), each value
      ``(num_envs, group_size, ...)`` — one tensor per group, without per-agent dict overhead.
    An agent's transition of a step counts where it was active *before* the step (``active`` of the
    previous step; every agent is active after a reset).

    ## Infos
    - ``"active"``, as above.
    - ``"action_mask"`` (games with action masks): bool, per agent ``(num_envs, n)``, per group
      ``(num_envs, group_size, n)``: the actions allowed now (``n`` = the group's ``Discrete`` size).
    - After a step, ``"episode"`` and ``"_episode"``: ``_episode`` ``(num_envs,)`` says where an
      episode ended on this step; there ``episode["return"]`` holds the ended episode's return
      (the sum of the agent's rewards, per agent ``(num_envs,)``, per group ``(num_envs,
      group_size)``) and ``episode[<metric>]`` ``(num_envs,)`` each of the game's episode totals
      (``definition.episode_metrics``). Elsewhere they hold the last ended episode's values.
    - SAME_STEP: ``"final_obs"`` and ``"_final_obs"``, as in Gymnasium's vector envs.

    Actions: tensors on the env's device, per agent ``(num_envs, *action_shape)`` or per group
    ``(num_envs, group_size, *action_shape)``: int64 indices for discrete games, float32 values for
    games of ``Box`` actions. With ``validate_actions=True`` (default) every value is checked
    against its agent's space (one device-to-host sync per step; NaN is refused); with ``False``
    out-of-range indices are clamped into range, and NaN values read as 0 and values outside the
    bounds are clipped as the game's rules say, identically on every backend. Outputs are views of the env's buffers,
    overwritten by the next call (observations: see ``observation_buffers``): ``.clone()`` what you
    keep.

    Seeding follows Gymnasium's vector envs: ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i``.
    :meth:`set_state` writes explicit states into chosen sub-envs.
    """

    # The class cannot know the game: an instance's metadata lists its game's render modes.
    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP, "is_parallelizable": True}

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        *,
        device=None,
        backend: str | None = None,
        autoreset_mode=AutoresetMode.NEXT_STEP,
        params=None,
        validate_actions: bool = True,
        cuda_graph: bool | None = None,
        render_mode: str | None = None,
        render_env_index: int = 0,
        observation_buffers: int = 1,
        **settings,
    ):
        spec = game_spec(env_id)
        self.definition = d = spec.definition
        self.num_envs = check_num_envs(num_envs)
        self.device = resolve_device(device)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.params = d.make_params(params, **settings)
        self.validate_actions = bool(validate_actions)
        from gpu_marl_envs.rendering import game_renderer  # Pillow, only once a game is made

        self._draw = game_renderer(d.id)
        render_modes = [] if self._draw is None else ["rgb_array"]
        if render_mode is not None and render_mode not in render_modes:
            raise ValueError(f"render_mode must be None or one of {render_modes} for {d.id}, got {render_mode!r}")
        if (
            isinstance(render_env_index, bool)
            or not isinstance(render_env_index, int)
            or not 0 <= render_env_index < self.num_envs
        ):
            raise ValueError(f"render_env_index must be an int in [0, {self.num_envs - 1}], got {render_env_index!r}")
        self.render_mode = render_mode
        self.render_env_index = render_env_index
        self.metadata = {
            **type(self).metadata,
            "autoreset_mode": self.autoreset_mode,
            "name": snake_case(d.id),
            "render_modes": render_modes,
        }

        self.possible_agents = d.agent_names(self.params)
        self.agents = list(self.possible_agents)
        self._ids = {agent: i for i, agent in enumerate(self.possible_agents)}
        self._group_ids = d.agent_groups(self.params)
        self.groups = {group: self.possible_agents[ids.start : ids.stop] for group, ids in self._group_ids.items()}
        self._group_of = {agent: group for group, agents in self.groups.items() for agent in agents}
        self._observation_spaces = d.observation_spaces(self.params)
        self._action_spaces = d.action_spaces(self.params)
        self._action_shape = d.action_shape(self.params)
        self._action_dtype = d.action_dtype(self.params)

        backend_type = resolve_backend(backend, self.device, spec)
        if backend_type.name != "torch":
            check_shared_memory(d, self.params, self.device, backend_type.name)  # static too, once compiled
        b = MultiAgentBuffers.allocate(d, self.params, self.num_envs, self.device)
        if cuda_graph is None:
            cuda_graph = self.device.type == "cuda" and backend_type.graph_by_default
        if cuda_graph and self.device.type != "cuda":
            raise ValueError("cuda_graph=True needs a CUDA device")
        self.cuda_graph = bool(cuda_graph)
        # Where step() gathers every agent's actions: the first backend's own buffer where it keeps
        # one (its launches then copy nothing), else one of ours.
        self._actions = None

        def build(side_buffers):
            backend = backend_type(spec, self.params, side_buffers, self.autoreset_mode)
            if self._actions is None:
                self._actions = getattr(backend, "actions_buffer", None)
                if self._actions is None:
                    self._actions = torch.zeros(
                        (self.num_envs, self.params.num_agents, *self._action_shape),
                        dtype=self._action_dtype,
                        device=self.device,
                    )
            return backend, GraphedStep(backend, side_buffers, self._actions) if cuda_graph else backend

        self.observation_buffers = check_observation_buffers(observation_buffers)
        self._sides = Sides(b, self.observation_buffers, build)
        self._buffers, self._backend, self._launcher = self._sides.current
        self.backend = self._backend.name
        # For validate_actions: each agent's bounds (indices from 0 in discrete games).
        self._action_low = d.action_low(self.params).to(self.device)
        self._action_high = d.action_high(self.params).to(self.device)
        self._group_action_shapes = {
            name: (self.num_envs, len(ids), *self._action_spaces[name].shape) for name, ids in self._group_ids.items()
        }
        # Groups whose actions fill their agents' rows of the buffer: all, but for the narrower
        # groups of a Box game whose groups' widths differ (their actions are copied into the
        # buffer's first columns, the rest staying 0).
        self._fills_rows = {name: shape[2:] == self._action_shape for name, shape in self._group_action_shapes.items()}
        # The strides of one env's row of a group's actions when that row is contiguous.
        self._group_row_strides = {
            name: torch.empty(shape[1:]).stride() for name, shape in self._group_action_shapes.items()
        }
        # A tensor that stays valid: the live in-game flags, or constant ones for games without exits.
        self.active = d.in_game(self.params, b.state)
        self._set_seeds(rng.random_seed(), None)
        self._initialised = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._ready = False
        self._build_views()

    def _build_views(self) -> None:
        # Built once: the buffers never move, so each call hands out copies of these dicts.
        b, d, p = self._buffers, self.definition, self.params
        final = self.autoreset_mode == AutoresetMode.SAME_STEP

        def by_agent(tensor):
            return {agent: tensor[:, i] for agent, i in self._ids.items()}

        def by_group(tensor):
            return split_groups(self._group_ids, tensor)

        def flat_by_agent(tensor, layout):
            # Agent k of a group: its `size` values from start + k * size of the env's flat row.
            return {
                agent: tensor[:, s.start + k * s.size : s.start + (k + 1) * s.size]
                for group, s in layout.items()
                for k, agent in enumerate(self.groups[group])
            }

        def flat_by_group(tensor, layout):
            return {group: tensor[:, s.start : s.stop].unflatten(1, (s.count, s.size)) for group, s in layout.items()}

        obs_layout = d.observation_layout(p)
        agent_rest = tuple(by_agent(t) for t in (b.rewards, b.agent_terminated, b.agent_truncated))
        group_rest = tuple(by_group(t) for t in (b.rewards, b.agent_terminated, b.agent_truncated))
        # Per side (observation_buffers): the views of its observations, with the shared rest.
        self._side_views = tuple(
            (
                (flat_by_agent(side.buffers.observations, obs_layout), *agent_rest),
                (flat_by_group(side.buffers.observations, obs_layout), *group_rest),
            )
            for side in self._sides.all
        )
        self._agent_views, self._group_views = self._side_views[self._sides.index]
        self._agent_infos = {agent: {"active": active} for agent, active in by_agent(self.active).items()}
        self._group_infos = {group: {"active": active} for group, active in by_group(self.active).items()}
        if d.has_action_masks:
            for infos, masks in (
                (self._agent_infos, flat_by_agent(b.action_masks, d.mask_layout(p))),
                (self._group_infos, flat_by_group(b.action_masks, d.mask_layout(p))),
            ):
                for key, info in infos.items():
                    info["action_mask"] = masks[key]
        if final:
            for infos, final_obs in (
                (self._agent_infos, flat_by_agent(b.final_observations, obs_layout)),
                (self._group_infos, flat_by_group(b.final_observations, obs_layout)),
            ):
                for key, info in infos.items():
                    info.update(final_obs=final_obs[key], _final_obs=b.final_observation_mask)
        # Where an episode ended on the last step: SAME_STEP records it in final_observation_mask,
        # the other modes in needs_reset (which a NEXT_STEP reset step clears), so no extra buffer.
        ended = b.final_observation_mask if final else b.needs_reset
        totals = {name: b.episode_totals[:, k] for k, name in enumerate(d.episode_metrics(p))}
        self._agent_step_infos = {
            agent: {**info, "episode": {"return": b.episode_returns[:, self._ids[agent]], **totals}, "_episode": ended}
            for agent, info in self._agent_infos.items()
        }
        returns = by_group(b.episode_returns)
        self._group_step_infos = {
            group: {**info, "episode": {"return": returns[group], **totals}, "_episode": ended}
            for group, info in self._group_infos.items()
        }

    # -- PettingZoo API --------------------------------------------------------------------------

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)

    def observation_space(self, agent: str) -> spaces.Box:
        """One agent's (unbatched) observation space: its group's."""
        self._check_agent(agent)
        return self._observation_spaces[self._group_of[agent]]

    def action_space(self, agent: str) -> spaces.Space:
        """One agent's (unbatched) action space: its group's."""
        self._check_agent(agent)
        return self._action_spaces[self._group_of[agent]]

    @property
    def state_space(self) -> spaces.Box:
        """One game's (unbatched) global state space, PettingZoo's ``state_space``."""
        return self.definition.state_space(self.params)

    def state(self) -> torch.Tensor:
        """The global state of every game, float32 ``(num_envs, S)`` on the device (PettingZoo's
        ``state()``, batched): what the game defines (``definition.global_state``), by default every
        agent's observation side by side, which is the observation buffer itself (no copy; like the
        observations, overwritten by the next step)."""
        self._check_ready(reset=True)
        return self.definition.flat_global_state(self.params, self._buffers.observations)

    def final_state(self) -> torch.Tensor:
        """SAME_STEP autoreset: the global state ``(num_envs, S)`` of each game's last observations,
        valid where ``infos[...]["_final_obs"]`` (the step ended its episode), for a centralised
        critic's bootstrap."""
        self._check_ready(reset=True)
        if self.autoreset_mode != AutoresetMode.SAME_STEP:
            raise RuntimeError(f"final_state() needs autoreset_mode=SAME_STEP, the env has {self.autoreset_mode}")
        return self.definition.flat_global_state(self.params, self._buffers.final_observations)

    def reset(self, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """Reset every sub-env (or those of ``options["reset_mask"]``); returns
        ``(observations, infos)`` keyed by agent."""
        self._check_ready(reset=True)
        self._reset(seed, options)
        return self._agent_outputs()[0], self._copy_infos(self._agent_infos)

    def reset_groups(self, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """:meth:`reset` with outputs keyed by group."""
        self._check_ready(reset=True)
        self._reset(seed, options)
        return self._group_outputs()[0], self._copy_infos(self._group_infos)

    def step(self, actions: Mapping[str, torch.Tensor]):
        """One step of every sub-env; ``actions`` keyed by agent. Returns ``(observations, rewards,
        terminations, truncations, infos)`` keyed by agent."""
        self._check_ready()
        names = self._check_keys(actions, self.possible_agents, "agent")
        for name in names:
            self._check_tensor(name, actions[name], (self.num_envs, *self.action_space(name).shape))
        if all(self._fills_rows.values()):
            torch.stack([actions[name] for name in names], dim=1, out=self._actions)
        else:
            self._gather([torch.stack([actions[a] for a in agents], dim=1) for agents in self.groups.values()])
        self._step()
        return (*self._agent_outputs(), self._copy_infos(self._agent_step_infos))

    def step_groups(self, actions: Mapping[str, torch.Tensor]):
        """:meth:`step` with actions and outputs keyed by group (``(num_envs, group_size, ...)``)."""
        self._check_ready()
        names = self._check_keys(actions, list(self._group_ids), "group")
        group_actions = [actions[name] for name in names]
        for name, value in zip(names, group_actions):
            self._check_tensor(name, value, self._group_action_shapes[name])
        # At small batches the step is bound by host time: the CUDA C and Numba step kernels read
        # each group's actions where they lie (one launch, no gather; without the backend's CUDA
        # graph, whose input is the one buffer). The torch backend, and validate_actions, read one
        # buffer of every agent's actions.
        if (
            hasattr(self._backend, "step_groups")
            and not self.validate_actions
            and all(
                self._backend.reads_in_place(value, self._group_row_strides[name])
                for name, value in zip(names, group_actions)
            )
        ):
            self._advance()
            self._backend.step_groups(group_actions)
        else:
            self._gather(group_actions)
            self._step()
        return (*self._group_outputs(), self._copy_infos(self._group_step_infos))

    def render(self) -> np.ndarray | None:
        """An RGB frame ``(H, W, 3)`` uint8 of sub-env ``render_env_index`` (``render_mode="rgb_array"``),
        or ``None`` (``render_mode=None``, the only mode of games without a renderer)."""
        if self.render_mode is None:
            return None
        return self._draw(self.params, self._buffers.state, self.render_env_index)

    def close(self) -> None:
        self._backend = self._launcher = self._buffers = self._sides = None

    # -- explicit states -------------------------------------------------------------------------

    @property
    def state_fields(self) -> tuple[str, ...]:
        return self.definition.state_fields

    def get_state(self) -> dict[str, torch.Tensor]:
        """A copy of every sub-env's state: ``{field: tensor (num_envs, ...)}``."""
        return {name: getattr(self._buffers.state, name).clone() for name in self.state_fields}

    def set_state(self, state: Mapping[str, torch.Tensor], env_ids=None) -> dict[str, torch.Tensor]:
        """Write explicit states into chosen sub-envs; they continue from there (no reset pending).

        ``state`` needs every field of :attr:`state_fields`, each ``(len(env_ids), ...)`` as in
        :meth:`get_state` (or broadcastable to it); ``env_ids``: indices, a bool mask, or ``None``
        for every sub-env. The values are checked for type, shape and finiteness, ``t`` for
        ``0 <= t < episode_length`` and the fields the rules index with for their ranges
        (``MultiAgentDefinition.state_ranges``); otherwise they are the caller's (e.g. positions off
        the arena are not clipped). Returns the observations keyed by agent, updated for those
        sub-envs (action masks too, in games with masks).

        Returns restart there: the running return of each agent of those sub-envs is set to 0 (the
        rewards that led to a hand-set state are unknown), so the next ended episode's return sums
        the rewards from this state on; the last ended episode's returns are kept. Episode totals
        come from the state itself (its accumulators), as given.
        """
        ids = check_env_ids(env_ids, self.num_envs, self.device)
        missing = set(self.state_fields) - set(state)
        unknown = set(state) - set(self.state_fields)
        if missing or unknown:
            raise ValueError(
                f"state needs exactly the fields {list(self.state_fields)}; "
                f"missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        b, d = self._buffers, self.definition
        rows = {}
        for name in self.state_fields:
            buffer = getattr(b.state, name)
            value = torch.as_tensor(state[name], device=self.device)
            if buffer.dtype != torch.bool and buffer.dtype.is_floating_point != value.dtype.is_floating_point:
                raise ValueError(f"state[{name!r}] must have a {buffer.dtype} value, got {value.dtype}")
            value = exact_cast(value, buffer.dtype, f"state[{name!r}]")  # refuses values that would wrap
            try:
                value = torch.broadcast_to(value, (len(ids), *buffer.shape[1:]))
            except RuntimeError:
                raise ValueError(
                    f"state[{name!r}] has shape {tuple(value.shape)}; expected {(len(ids), *buffer.shape[1:])}"
                ) from None
            if value.is_floating_point() and not torch.isfinite(value).all():
                raise ValueError(f"state[{name!r}] must be finite")
            rows[name] = value
        t = rows["t"]
        if ((t < 0) | (t >= self.params.episode_length)).any():
            raise ValueError(f"state['t'] must lie in [0, {self.params.episode_length - 1}]")
        for name, (low, high) in d.state_ranges(self.params).items():
            if ((rows[name] < low) | (rows[name] > high)).any():
                raise ValueError(f"state[{name!r}] must lie in [{low}, {high}]")
        # The observations and masks of the new state before anything is written: a rule that
        # refuses the state then leaves the env as it was.
        state = d.state_type(**rows)
        observations = d.flat_observations(self.params, state)
        masks = d.flat_action_masks(self.params, state) if d.has_action_masks else None
        for name, value in rows.items():
            getattr(b.state, name)[ids] = value
        b.observations[ids] = observations
        if masks is not None:
            b.action_masks[ids] = masks
        b.running_returns[ids] = 0.0
        b.needs_reset[ids] = False
        self._mark_initialised(ids)
        return self._agent_outputs()[0]

    # -- helpers ---------------------------------------------------------------------------------

    def _reset(self, seed, options) -> None:
        mask = reset_mask_option(options, self.num_envs, self.device)
        if seed is not None:
            self._set_seeds(seed, mask)
        b = self._buffers
        select_resets(b.reset_mask, mask)
        self._backend.reset()
        self._mark_initialised(mask)

    def _step(self) -> None:
        if self.validate_actions:
            self._check_action_values()
        self._advance()
        self._launcher.step(self._actions)

    def _gather(self, group_actions: list[torch.Tensor]) -> None:
        """Every group's actions into the one buffer ``(num_envs, N, *action_shape)``: a narrower
        group's into its agents' first columns."""
        if all(self._fills_rows.values()):
            torch.cat(group_actions, dim=1, out=self._actions)
            return
        for ids, value in zip(self._group_ids.values(), group_actions):
            self._actions[:, ids.start : ids.stop, : value.shape[-1]].copy_(value)

    def _advance(self) -> None:
        """Make the next observation buffer in turn the current one (``observation_buffers`` > 1),
        before a step writes it."""
        if self.observation_buffers > 1:
            self._buffers, self._backend, self._launcher = self._sides.advance()
            self._agent_views, self._group_views = self._side_views[self._sides.index]

    def _check_action_values(self) -> None:
        # One device-to-host sync; nothing has been stepped yet, so a bad action changes nothing.
        # Each agent's actions against its group's range (NaN fails both comparisons, so is refused
        # by the negated form).
        bad = ~((self._actions >= self._action_low) & (self._actions <= self._action_high))
        if bad.any():
            env, agent = (int(v) for v in bad.view(self.num_envs, self.params.num_agents, -1).any(2).nonzero()[0])
            name = self.possible_agents[agent]
            space = self.action_space(name)
            given = self._actions[env, agent][: space.shape[0]] if space.shape else self._actions[env, agent]
            raise ValueError(f"actions of {name} in env {env}: {given.tolist()} not in {space} (no env was stepped)")

    def _agent_outputs(self):
        return [dict(view) for view in self._agent_views]

    def _group_outputs(self):
        return [dict(view) for view in self._group_views]

    @staticmethod
    def _copy_infos(infos):
        """Fresh dicts around the live tensors, so that a caller who edits them changes no later
        step's infos ("episode" is the one nested dict). Built key by key: at small batches the
        step is bound by host time."""
        copies = {}
        for key, info in infos.items():
            copies[key] = copy = info.copy()
            if "episode" in copy:
                copy["episode"] = copy["episode"].copy()
        return copies

    def _check_agent(self, agent) -> None:
        if agent not in self._ids:
            raise ValueError(f"unknown agent {agent!r}; possible agents: {self.possible_agents}")

    @staticmethod
    def _check_keys(actions, expected: list[str], what: str) -> list[str]:
        if not isinstance(actions, Mapping):
            raise TypeError(f"actions must be a dict keyed by {what}, got {type(actions).__name__}")
        if actions.keys() != set(expected):
            missing = [key for key in expected if key not in actions]
            unknown = [key for key in actions if key not in expected]
            raise ValueError(
                f"actions need exactly one tensor per {what}; missing {missing[:10]}, unknown {unknown[:10]}"
            )
        return expected

    def _check_tensor(self, key: str, value, shape: tuple[int, ...]) -> None:
        """``actions[key]``: its type, device, shape and dtype."""
        if (
            type(value) is torch.Tensor
            and value.dtype is self._action_dtype
            and value.shape == shape
            and value.device == self.device
        ):
            return  # the usual case, tested first: the checks below cost host time every step
        name = f"actions[{key!r}]"
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor of shape {shape}, dtype {self._action_dtype} on "
                f"{self.device}, got {type(value).__name__}"
            )
        if value.device != self.device:
            raise ValueError(f"{name} is on {value.device} but the env is on {self.device}; use .to('{self.device}')")
        if tuple(value.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")
        if value.dtype != self._action_dtype:
            fix = ".float()" if self._action_dtype == torch.float32 else ".long()"
            raise TypeError(f"{name} must have dtype {self._action_dtype}, got {value.dtype}; use {fix}")

    def _check_ready(self, reset: bool = False) -> None:
        """RuntimeError for a closed env, or (unless ``reset``: a call that needs no reset first, a
        reset itself or a read of the state) one not reset."""
        if self._buffers is None:
            raise RuntimeError(
                f"this {self.definition.id} env is closed: close() freed its state; make a new env to go on"
            )
        if not self._ready and not reset:
            never = (~self._initialised).nonzero().flatten().tolist()
            raise RuntimeError(
                f"call reset() before step(): sub-envs {never[:10]}{'...' if len(never) > 10 else ''} "
                "were never reset nor given a state"
            )

    def _mark_initialised(self, ids) -> None:
        if ids is None:
            self._initialised.fill_(True)
        else:
            self._initialised[ids] = True
        self._ready = bool(self._initialised.all())

    def _set_seeds(self, seed, mask: torch.Tensor | None) -> None:
        rng.reseed(self._buffers.seeds, self._buffers.episodes, sub_env_seeds(seed, self.num_envs, self.device), mask)


def make_parallel(env_id: str, num_envs: int = 1, **kwargs) -> GpuParallelEnv:
    """A batched multi-agent env, e.g. ``make_parallel("gpu_marl_envs/TagContinuous-v0", 1000,
    device="cuda", num_runners=20)``: a :class:`GpuParallelEnv` (its keyword arguments, and the
    fields of the game's params as keyword settings)."""
    return GpuParallelEnv(env_id, num_envs, **kwargs)
