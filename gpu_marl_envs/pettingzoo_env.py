"""``PettingZooParallelEnv``: one game of any multi-agent env as a PettingZoo ``ParallelEnv``, numpy I/O.

This is the unbatched view, for PettingZoo's tools (its API and seed tests, wrappers, SuperSuit,
trainers that expect one game): a :class:`~gpu_marl_envs.parallel_env.GpuParallelEnv` of one game
(by default on the CPU with the torch reference), whose agents leave ``agents`` when they leave the
game, as PettingZoo expects. ``import gpu_marl_envs`` registers every game in PettingZoo's registry::

    env = pettingzoo.make("parallel", "gpu_marl_envs/CovidEconomy-v0")

A package's games are in that registry once the package is imported: PettingZoo 1.27 looks an id up
before any code of ours runs, and has no hook to import a package. ``PettingZooParallelEnv(env_id)``
imports the id's namespace as ``make_parallel`` does (``registration``'s docstring), so
``PettingZooParallelEnv("cover/Cover-v0")`` needs no ``import cover``.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pettingzoo
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.parallel_env import GpuParallelEnv, get_game


class PettingZooParallelEnv(pettingzoo.ParallelEnv):
    """One game of a multi-agent env; all agents act at once (PettingZoo ``ParallelEnv``).

    The rules, spaces and rewards are the game's (its module's docstring: ``TagContinuous-v0``,
    ``TagGridworld-v0``, ``CovidEconomy-v0``); this class adds only the PettingZoo conventions below.

    ## Agents
    ``possible_agents``: the game's agent names in agent-id order, groups in order (``tagger_0, ...,
    runner_0, ...``; ``governor_0 .. governor_50, planner_0``). ``agents`` holds those still in the
    game: an agent the game takes out (a tagged runner) is terminated on that step and leaves
    ``agents`` after it; after the last step of an episode ``agents`` is empty: call ``reset``.

    ## Spaces
    Each agent's are its group's (the same objects on every call, as PettingZoo's tests require).
    Actions are numpy integers or integer arrays (``Discrete`` / ``MultiDiscrete``), or float arrays
    (``Box``, taken as float32), inside the space; an agent that left the game gets none.

    ## Infos
    - ``"action_mask"`` (games with action masks, e.g. CovidEconomy): int8 ``(n,)``, 1 where the
      action is allowed in the agent's next step, where PettingZoo's tools look for a mask
      (``env.action_space(agent).sample(infos[agent]["action_mask"])``). The game's observation
      vector also ends with the same mask as floats, so a policy that reads only the observation
      sees it; the observation stays a flat ``Box`` rather than PettingZoo's ``{"observation",
      "action_mask"}`` dict, as the batched env and the trainers have it. Masks are advice: the
      dynamics accept a masked action and do what the game's docstring says.
    - ``"episode"`` (games with episode metrics, e.g. CovidEconomy), on the step an episode ends,
      for every agent that acted on it: ``{"return": the agent's episode return, <metric>: the
      game's episode total, ...}`` as Python floats (``definition.episode_metrics``: for
      CovidEconomy ``deaths``, ``unemployment``, ``subsidies``, ``productivity``; the planner's
      return is the model's social welfare). Games without metrics (Tag) add nothing: their returns
      are the sums of the rewards a PettingZoo user already has.

    ## Global state
    ``state()`` and ``state_space``, PettingZoo's: the game's global state for centralised critics
    (``definition.global_state``; by default every agent's observation side by side, in agent-id
    order, as MPE2's ``state()``), agents out of the game included.

    ## Starting state and seeding
    The game's ``reset`` with key ``rng.key_hash(seed, episode)``, as the batched envs draw it:
    ``reset(seed=s)`` starts episode 0 of seed ``s``, each later ``reset()`` the next episode; an env
    never seeded draws a random 63-bit seed. (CovidEconomy's start is deterministic: seeds change nothing.)

    ## Arguments
    - ``env_id``: a multi-agent game (``gpu_marl_envs/`` prefix optional).
    - ``params``: the game's params dataclass (default: the game's defaults).
    - ``**settings``: fields of the params by name (``pettingzoo.make("parallel",
      "gpu_marl_envs/TagContinuous-v0", num_runners=20)``), applied on top of ``params``, validated as it is.
    - ``render_mode``: ``None``, or ``"rgb_array"`` for games that can be drawn (``metadata["render_modes"]``):
      :meth:`render` returns an ``(H, W, 3)`` uint8 frame; ``"human"`` (with pygame, the ``[render]``
      extra) shows that frame in a window and returns ``None``.
    - ``max_cycles``: PettingZoo's name for the episode length (``pettingzoo.make(..., max_cycles=n)``
      passes it): replaces ``params.episode_length``.
    - ``device``, ``backend``: where and how the game runs (default: the CPU, torch reference).

    ``reset(options=...)`` supports no options: a dict is accepted (PettingZoo's API test passes
    ``{"options": 1}``) and ignored with a warning.
    """

    metadata = {"render_modes": [], "is_parallelizable": True}

    def __init__(
        self,
        env_id: str,
        params=None,
        render_mode: str | None = None,
        *,
        max_cycles: int | None = None,
        device="cpu",
        backend: str | None = None,
        **settings,
    ):
        from gpu_marl_envs.rendering import GAME_FPS, Window, game_renderer, has_window  # Pillow, once a game is made

        definition = get_game(env_id)
        params = definition.make_params(params, **settings)
        if max_cycles is not None:
            if isinstance(max_cycles, bool) or not isinstance(max_cycles, (int, np.integer)) or max_cycles < 1:
                raise ValueError(f"max_cycles must be an int >= 1 (the episode length), got {max_cycles!r}")
            params = dataclasses.replace(params, episode_length=int(max_cycles))
        drawn = game_renderer(definition.id) is not None
        modes = ["rgb_array", *(["human"] if has_window() else [])] if drawn else []
        if render_mode is not None and render_mode not in modes:
            raise ValueError(
                f"render_mode must be None or one of {modes} for {definition.id}, got {render_mode!r}"
                + (
                    "; 'human' needs pygame: pip install gpu_marl_envs[render]"
                    if drawn and render_mode == "human"
                    else ""
                )
            )
        self._window = Window(definition.id, GAME_FPS) if render_mode == "human" else None
        # Autoreset off: an episode ends with `agents` empty, and reset() starts the next one.
        self._env = GpuParallelEnv(
            env_id,
            1,
            device=device,
            backend=backend,
            params=params,
            render_mode="rgb_array" if render_mode == "human" else render_mode,
            autoreset_mode=AutoresetMode.DISABLED,
        )
        self.params = self._env.params
        self.render_mode = render_mode
        self.metadata = {
            **type(self).metadata,
            "name": self._env.metadata["name"],
            "render_modes": modes,
            "render_fps": GAME_FPS,
        }
        self.possible_agents = list(self._env.possible_agents)
        self.agents = []
        self._groups = self._env.groups  # group -> its agents, in agent-id order
        self._has_masks = definition.has_action_masks
        self._has_metrics = bool(definition.episode_metrics(self.params))
        self._continuous = definition.continuous_actions(self.params)
        self._action_dtype = np.float32 if self._continuous else np.int64

    def observation_space(self, agent: str) -> spaces.Box:
        return self._env.observation_space(agent)

    def action_space(self, agent: str) -> spaces.Space:
        return self._env.action_space(agent)

    @property
    def state_space(self) -> spaces.Box:
        """The game's global state space (the game's docstring; by default every agent's
        observation side by side)."""
        return self._env.state_space

    def state(self) -> np.ndarray:
        """The game's global state now, float32 ``(S,)`` (a copy)."""
        return self._env.state()[0].cpu().numpy().copy()

    def reset(self, seed: int | None = None, options: dict | None = None):
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        if options:
            warnings.warn(f"{type(self).__name__}.reset supports no options; ignored {sorted(options)}", stacklevel=2)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"seed must be an int in [0, 2**63 - 1], got {seed!r}")
        observations, infos = self._env.reset_groups(seed=seed)
        self.agents = list(self.possible_agents)
        return self._by_agent(observations, self.agents), self._infos(infos, self.agents, ended=False)

    def step(self, actions: dict):
        if not self.agents:
            raise RuntimeError("no agent is in the game: call reset() first (or again after the episode ended)")
        observations, rewards, terminations, truncations, infos = self._env.step_groups(self._action_tensors(actions))
        acting = self.agents
        done = self._by_agent({group: terminations[group] | truncations[group] for group in self._groups}, acting)
        self.agents = [agent for agent in acting if not done[agent]]
        # `_episode`: the game's episode ended on this step (the same flag in every group's infos).
        ended = self._has_metrics and bool(next(iter(infos.values()))["_episode"][0])
        return (
            self._by_agent(observations, acting),
            {agent: float(value) for agent, value in self._by_agent(rewards, acting).items()},
            {agent: bool(value) for agent, value in self._by_agent(terminations, acting).items()},
            {agent: bool(value) for agent, value in self._by_agent(truncations, acting).items()},
            self._infos(infos, acting, ended),
        )

    def render(self) -> np.ndarray | None:
        frame = self._env.render()
        if self._window is None:
            return frame
        self._window.show(frame)
        return None

    def close(self) -> None:
        self._env.close()
        if self._window is not None:
            self._window.close()

    # -- helpers ---------------------------------------------------------------------------------

    def _action_tensors(self, actions: dict) -> dict[str, torch.Tensor]:
        if not isinstance(actions, dict):
            raise TypeError(f"actions must be a dict {{agent: action}}, got {type(actions).__name__}")
        unknown = sorted(set(actions) - set(self.agents), key=str)
        missing = [agent for agent in self.agents if agent not in actions]
        if unknown:
            raise ValueError(f"actions for agents not in the game: {unknown}; agents: {self.agents}")
        if missing:
            raise ValueError(f"no action for agents {missing}")
        # Every action is checked before anything is stepped: a rejected step changes nothing.
        rows = {}
        for agent, action in actions.items():
            value = np.asarray(action)
            space = self.action_space(agent)
            kinds, what = ("f", "a float array") if self._continuous else ("iu", "an integer")
            if value.dtype.kind in kinds and self._continuous:
                value = value.astype(np.float32)  # float64 from numpy code: the game computes in float32
            if value.dtype.kind not in kinds or value.shape != space.shape or not space.contains(value):
                raise ValueError(f"action for {agent} must be {what} in {space}, got {action!r}")
            rows[agent] = value
        tensors = {}
        for group, agents in self._groups.items():
            # Agents out of the game are frozen whatever they get: 0 is "no change" / "stay".
            shape = self.action_space(agents[0]).shape
            values = np.zeros((1, len(agents), *shape), dtype=self._action_dtype)
            for k, agent in enumerate(agents):
                if agent in rows:
                    values[0, k] = rows[agent]
            tensors[group] = torch.from_numpy(values).to(self._env.device)
        return tensors

    def _by_agent(self, by_group: dict[str, torch.Tensor], agents: list[str]) -> dict[str, np.ndarray]:
        """Env 0's rows of group tensors, per agent in ``agents`` (copies: the buffers are overwritten)."""
        rows = {}
        for group, names in self._groups.items():
            values = by_group[group][0].cpu().numpy()
            rows.update((agent, values[k].copy()) for k, agent in enumerate(names))
        return {agent: rows[agent] for agent in agents}

    def _infos(self, infos: dict, agents: list[str], ended: bool) -> dict[str, dict]:
        out = {agent: {} for agent in agents}
        if self._has_masks:
            masks = self._by_agent({g: info["action_mask"].to(torch.int8) for g, info in infos.items()}, agents)
            for agent in agents:
                out[agent]["action_mask"] = masks[agent]
        if ended:
            returns = self._by_agent({g: info["episode"]["return"] for g, info in infos.items()}, agents)
            totals = {
                name: float(value[0])
                for name, value in next(iter(infos.values()))["episode"].items()
                if name != "return"
            }
            for agent in agents:
                out[agent]["episode"] = {"return": float(returns[agent]), **totals}
        return out
