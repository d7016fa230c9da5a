"""``GpuVectorEnv``: a batch of single-agent envs stepped on the device, behind Gymnasium's
``VectorEnv`` API with torch tensors in and out."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence

import gymnasium
import numpy as np
import torch
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from gpu_marl_envs import rng
from gpu_marl_envs.autoreset import parse_autoreset_mode, select_resets
from gpu_marl_envs.backends import resolve_backend
from gpu_marl_envs.buffers import ClassicBuffers
from gpu_marl_envs.graphs import GraphedStep
from gpu_marl_envs.observation_buffers import Sides, check_observation_buffers
from gpu_marl_envs.registration import env_spec
from gpu_marl_envs.validation import (
    action_bounds,
    check_actions,
    check_env_ids,
    check_num_envs,
    reset_mask_option,
    sub_env_seeds,
    zero_actions,
)


def resolve_device(device) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' was asked for, but torch sees no CUDA GPU; use device='cpu'")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device}")
    return device


def can_draw() -> bool:
    """Whether Gymnasium's classic-control renderers can draw here: they need pygame (the [render]
    extra). Looked up, not imported: importing pygame costs time and prints a banner."""
    try:
        return importlib.util.find_spec("pygame") is not None
    except ValueError:  # sys.modules["pygame"] is None: importing it fails
        return False


def gymnasium_render_fps(env_id: str) -> int:
    """The frame rate Gymnasium's own env of this id declares (its class metadata; no pygame needed)."""
    return load_env_creator(gymnasium.spec(env_id).entry_point).metadata["render_fps"]


def check_render_env_indices(indices, num_envs: int) -> tuple[int, ...]:
    """A tuple of distinct sub-env indices from an int or a sequence of ints."""
    values = (indices,) if isinstance(indices, (int, np.integer)) else indices
    if (
        isinstance(indices, bool)
        or not isinstance(values, Sequence)
        or not values
        or any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < num_envs for i in values)
        or len(set(values)) != len(values)
    ):
        raise ValueError(
            f"render_env_indices must be an int or a non-empty sequence of distinct ints in "
            f"[0, {num_envs - 1}], got {indices!r}"
        )
    return tuple(int(i) for i in values)


class GpuVectorEnv(VectorEnv):
    """A batch of ``num_envs`` copies of one env, whose whole step runs on ``device``.

    Args:
        env_id: a registered env's id, e.g. ``"gpu_marl_envs/CartPole-v1"`` (a name registered in one
            namespace only, as ``"CartPole-v1"``, may leave it out).
        num_envs: number of sub-envs (>= 1).
        device: ``"cuda"``, ``"cuda:N"`` or ``"cpu"``; default: the GPU if torch sees one.
        backend: ``"pycuda"`` (CUDA C), ``"numba"`` (Numba CUDA) or ``"torch"``; default: the fastest
            available on the device (``"torch"`` on the CPU).
        autoreset_mode: a ``gymnasium.vector.AutoresetMode``; NEXT_STEP by default.
        params: the env's params dataclass (e.g. ``CartPoleParams(gravity=9.81)``).
        **settings: fields of the params by name (``gymnasium.make_vec("gpu_marl_envs/Pendulum-v1", 8,
            g=9.81)``), applied on top of ``params`` (or the defaults) and validated as ``params`` is; an
            unknown name raises ``TypeError``. Where Gymnasium's env takes a setting (Pendulum's ``g``,
            MountainCar's ``goal_velocity``), the field has its name.
        max_episode_steps: overrides ``params.max_episode_steps``; the env truncates by itself.
        validate_actions: check action *values* each step (discrete actions in range, continuous
            ones finite and within the ``Box``'s bounds) and raise before anything is stepped. Costs
            one device-to-host sync per step. With ``False``, out-of-range discrete actions are
            clamped into range, NaN continuous actions are read as 0 and the dynamics clip continuous
            ones as Gymnasium's do, identically on every backend.
        cuda_graph: replay the step as a captured CUDA graph. One graph launch replaces the
            backend's own launch path, whose cost dominates at small batches; the actions are
            copied into the graph's input buffer first. Default: on for the torch backend on
            CUDA, off for pycuda and numba (their prepared launches are cheaper); the games'
            (:class:`gpu_marl_envs.GpuParallelEnv`) default is on for numba too.
        render_mode: ``None`` or ``"rgb_array"``: :meth:`render` returns a tuple of frames, one per
            sub-env of ``render_env_indices``, drawn by Gymnasium's own renderer (needs pygame:
            ``pip install gpu_marl_envs[render]``), so they look exactly like Gymnasium's. Only envs
            that reproduce a Gymnasium env (``EnvDefinition.gymnasium_original``) have frames.
        render_env_indices: the sub-envs :meth:`render` draws: an index or a sequence of them
            (default 0). Only those sub-envs' state rows leave the device, at render time.
        observation_buffers: how many observation buffers the steps write into in turn (default
            1). With ``k``, the observations a step returns stay unchanged through the next
            ``k - 1`` steps, so a caller that keeps them while it steps again (skrl's trainers:
            ``observation_buffers=2``) needs no copy. Resets and :meth:`set_state` write into the
            current buffer. See :mod:`gpu_marl_envs.observation_buffers`.

    ``step`` and ``reset`` return the env's own output tensors, without copies: they are
    overwritten by the next call (observations: see ``observation_buffers``), so ``.clone()`` what
    you keep. Actions must be a tensor on the env's device, ``int64`` of shape ``(num_envs,)`` for
    ``Discrete`` spaces and ``float32`` of shape ``(num_envs, *shape)`` for ``Box`` spaces. For numpy
    I/O wrap the env in ``gymnasium.wrappers.vector.ArrayConversion(env, env_xp=torch, target_xp=numpy)``.

    Seeding follows Gymnasium: ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i``, and a sub-env's
    reset states depend only on its seed and how many times it has been reset since, on every
    backend and device. :meth:`set_state` writes explicit states into chosen sub-envs.
    """

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        *,
        device=None,
        backend: str | None = None,
        autoreset_mode=AutoresetMode.NEXT_STEP,
        params=None,
        max_episode_steps: int | None = None,
        validate_actions: bool = True,
        cuda_graph: bool | None = None,
        render_mode: str | None = None,
        render_env_indices: int | Sequence[int] = 0,
        observation_buffers: int = 1,
        **settings,
    ):
        spec = env_spec(env_id)
        self.definition = spec.definition
        self.num_envs = check_num_envs(num_envs)
        self.device = resolve_device(device)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        original = self.definition.gymnasium_original
        # Declared only where frames can be drawn: Gymnasium's check_env renders every declared mode,
        # and must pass without the optional [render] extra.
        render_modes = ["rgb_array"] if original is not None and can_draw() else []
        if render_mode == "rgb_array" and original is not None and not render_modes:
            raise ValueError(
                f"{spec.id}'s rgb_array frames are drawn by Gymnasium's renderer, which needs pygame: "
                "pip install gpu_marl_envs[render] (or pygame)"
            )
        if render_mode is not None and render_mode not in render_modes:
            raise ValueError(
                f"{spec.id} draws {'only rgb_array frames (no window)' if render_modes else 'no frames'}, "
                f"got render_mode={render_mode!r}; use render_mode=None"
                f"{' or rgb_array' if render_modes else ''}"
            )
        self.render_mode = render_mode
        self.render_env_indices = check_render_env_indices(render_env_indices, self.num_envs)
        overrides = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
        self.params = self.definition.make_params(params, **overrides, **settings)
        self.validate_actions = bool(validate_actions)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode, "render_modes": render_modes}
        if original is not None:
            self.metadata["render_fps"] = gymnasium_render_fps(original)

        self.single_observation_space = self.definition.observation_space(self.params)
        self.single_action_space = self.definition.action_space(self.params)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._action_bounds = action_bounds(self.single_action_space, self.device)

        backend_type = resolve_backend(backend, self.device, spec)
        buffers = ClassicBuffers.allocate(
            self.num_envs, len(self.definition.state_fields), self.single_observation_space.shape[0], self.device
        )
        self._torch_params = self.definition.torch_params(self.params)
        if cuda_graph is None:
            cuda_graph = self.device.type == "cuda" and backend_type.graph_by_default
        if cuda_graph and self.device.type != "cuda":
            raise ValueError("cuda_graph=True needs a CUDA device")
        self.cuda_graph = bool(cuda_graph)
        actions_like = zero_actions(self.single_action_space, self.num_envs, self.device) if cuda_graph else None

        def build(side_buffers):
            backend = backend_type(spec, self.params, side_buffers, self.autoreset_mode, self.single_action_space)
            return backend, GraphedStep(backend, side_buffers, actions_like) if cuda_graph else backend

        self.observation_buffers = check_observation_buffers(observation_buffers)
        self._sides = Sides(buffers, self.observation_buffers, build)
        self._buffers, self._backend, self._step_launcher = self._sides.current
        self.backend = self._backend.name
        self._set_seeds(rng.random_seed(), None)
        self._np_random_seed = None
        self._renderer = None  # built at the first render(): pygame is needed only there
        # The rendered sub-envs' last actions, kept on the device (Pendulum draws its torque).
        self._render_ids = torch.tensor(self.render_env_indices, device=self.device)
        self._render_actions = None
        # step() needs every sub-env reset (or set) once, as Gymnasium's vector envs do.
        self._initialised = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._ready = False

    # -- Gymnasium API -------------------------------------------------------------------------

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
        self._check_open()
        mask = reset_mask_option(options, self.num_envs, self.device)
        if seed is not None:
            self._set_seeds(seed, mask)
            self._np_random_seed = seed if isinstance(seed, int) else None
        b = self._buffers
        select_resets(b.reset_mask, mask)
        self._backend.reset()
        self._mark_initialised(mask)
        return b.observations, {}

    def step(self, actions: torch.Tensor | np.ndarray):
        """Step every sub-env. ``actions``: a tensor on the env's device, or a numpy array
        (``envs.action_space.sample()``), copied to the device (one copy; for none, draw on the
        device with :func:`gpu_marl_envs.wrappers.sample_actions`)."""
        if not self._ready:  # (False after close(): the open env's step pays for one check only)
            self._check_open()
            never = (~self._initialised).nonzero().flatten().tolist()
            raise RuntimeError(
                f"call reset() before step(): sub-envs {never[:10]}{'...' if len(never) > 10 else ''} "
                "were never reset nor given a state"
            )
        actions = check_actions(
            actions, self.single_action_space, self.num_envs, self.device, self.validate_actions, self._action_bounds
        )
        if self.observation_buffers > 1:  # the next observation buffer in turn
            self._buffers, self._backend, self._step_launcher = self._sides.advance()
        self._step_launcher.step(actions)
        if self.render_mode is not None:
            self._render_actions = actions.index_select(0, self._render_ids)
        b = self._buffers
        infos = {}
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            infos = {"final_obs": b.final_observations, "_final_obs": b.final_observation_mask}
        return b.observations, b.rewards, b.terminated, b.truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        """``(H, W, 3)`` uint8 frames of the sub-envs ``render_env_indices`` (``render_mode="rgb_array"``),
        as Gymnasium's own env draws them in the same state; ``None`` without a render mode."""
        if self.render_mode is None:
            return None
        self._check_open()
        from gpu_marl_envs.rendering import ClassicRenderer

        if self._renderer is None:
            self._renderer = ClassicRenderer(self.definition, self.params)
        b = self._buffers
        # Only the rendered sub-envs' rows cross to the host.
        states = b.state[:, self._render_ids].T.double().cpu().numpy()
        started = (b.elapsed_steps[self._render_ids] > 0).cpu().numpy()
        actions = None if self._render_actions is None else self._render_actions.cpu().numpy()
        # A sub-env that has not stepped since its reset has no last action (Gymnasium: None).
        return tuple(
            self._renderer.render(state, actions[k] if actions is not None and started[k] else None)
            for k, state in enumerate(states)
        )

    def close_extras(self, **kwargs):
        self._backend = self._step_launcher = self._buffers = self._renderer = self._sides = None
        self._ready = False

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(
                f"this {self.definition.id} env is closed: close() freed its state; make a new env to go on"
            )

    # -- explicit states -----------------------------------------------------------------------

    @property
    def state_fields(self) -> tuple[str, ...]:
        return self.definition.state_fields

    def get_state(self) -> dict[str, torch.Tensor]:
        """A copy of every sub-env's state: ``{field: tensor (num_envs,)}``."""
        self._check_open()
        return {name: row.clone() for name, row in zip(self.state_fields, self._buffers.state)}

    def set_state(self, state: Mapping[str, torch.Tensor], env_ids=None, elapsed_steps=None) -> torch.Tensor:
        """Write explicit states into chosen sub-envs and start a new episode there.

        Args:
            state: ``{field: values}`` for every name in :attr:`state_fields`, each of shape
                ``(len(env_ids),)`` (or broadcastable to it).
            env_ids: indices (int tensor or sequence) or a bool mask of shape ``(num_envs,)``;
                ``None`` means every sub-env.
            elapsed_steps: steps already taken in the episode (default 0), for truncation.

        Returns the observations tensor, updated for those sub-envs.
        """
        self._check_open()
        ids = check_env_ids(env_ids, self.num_envs, self.device)
        missing = set(self.state_fields) - set(state)
        unknown = set(state) - set(self.state_fields)
        if missing or unknown:
            raise ValueError(
                f"state needs exactly the fields {list(self.state_fields)}; "
                f"missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        rows = []
        for name in self.state_fields:
            value = torch.as_tensor(state[name], dtype=torch.float32, device=self.device)
            try:
                rows.append(torch.broadcast_to(value, ids.shape))
            except RuntimeError:
                raise ValueError(f"state[{name!r}] has shape {tuple(value.shape)}; expected ({len(ids)},)") from None
        new_state = torch.stack(rows)
        if not torch.isfinite(new_state).all():
            raise ValueError("state values must be finite")
        steps = self._elapsed_steps(elapsed_steps, ids)
        b = self._buffers
        b.state[:, ids] = new_state
        b.observations[ids] = self.definition.observe(self._torch_params, new_state)
        b.elapsed_steps[ids] = steps
        b.needs_reset[ids] = False
        self._mark_initialised(ids)
        return b.observations

    # -- helpers -------------------------------------------------------------------------------

    def _mark_initialised(self, ids) -> None:
        if ids is None:
            self._initialised.fill_(True)
        else:
            self._initialised[ids] = True
        self._ready = bool(self._initialised.all())

    def _elapsed_steps(self, elapsed_steps, ids: torch.Tensor) -> torch.Tensor:
        if elapsed_steps is None:
            return torch.zeros(ids.shape, dtype=torch.int32, device=self.device)
        try:
            steps = torch.as_tensor(elapsed_steps, device=self.device)
        except (RuntimeError, TypeError, ValueError):  # beyond int64 (ValueError), or not numbers
            raise ValueError(
                f"elapsed_steps must be integers in [0, {self.params.max_episode_steps - 1}], got {elapsed_steps!r}"
            ) from None
        if steps.dtype in (torch.bool,) or steps.is_floating_point() or steps.is_complex():
            raise ValueError(f"elapsed_steps must be integers, got {steps.dtype}")
        try:
            steps = torch.broadcast_to(steps, ids.shape)
        except RuntimeError:
            raise ValueError(
                f"elapsed_steps has shape {tuple(steps.shape)}; expected ({len(ids)},) or a scalar"
            ) from None
        # Checked before the cast to the buffer's int32, which would wrap 2**40 to 0.
        if (steps < 0).any() or (steps >= self.params.max_episode_steps).any():
            raise ValueError(f"elapsed_steps must lie in [0, {self.params.max_episode_steps - 1}]")
        return steps.to(torch.int32)

    def _set_seeds(self, seed, mask: torch.Tensor | None) -> None:
        rng.reseed(self._buffers.seeds, self._buffers.episodes, sub_env_seeds(seed, self.num_envs, self.device), mask)
