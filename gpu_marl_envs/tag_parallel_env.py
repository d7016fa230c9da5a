"""``TagParallelEnv``: one game of Tag as a PettingZoo ``ParallelEnv``, numpy I/O.

This is the unbatched view, for PettingZoo's tools (its API and seed tests, wrappers, SuperSuit,
trainers that expect one game): a :class:`~gpu_marl_envs.parallel_env.GpuParallelEnv` of one game
(by default on the CPU with the torch reference), whose agents leave ``agents`` when they leave the
game, as PettingZoo expects.
"""

from __future__ import annotations

import warnings

import numpy as np
import pettingzoo
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.parallel_env import GpuParallelEnv

_GAMES = {"continuous": "TagContinuous-v0", "gridworld": "TagGridworld-v0"}


class TagParallelEnv(pettingzoo.ParallelEnv):
    """Taggers chase runners; one game, all agents act at once (PettingZoo ``ParallelEnv``).

    ## Games
    ``game="continuous"``: TagContinuous, ``num_taggers`` taggers and ``num_runners`` runners
    accelerate and turn in the arena ``[0, L]^2``; a runner closer than ``tagging_distance * L`` to
    its nearest tagger is tagged. ``game="gridworld"``: TagGridworld, ``num_taggers`` taggers and one
    runner step on the integer cells ``0 .. L``; a tagger on the runner's cell tags it. The rules are
    the torch references' (:mod:`gpu_marl_envs.envs.tag_continuous`,
    :mod:`gpu_marl_envs.envs.tag_gridworld`), whose docstrings this one does not repeat.

    ## Agents
    ``possible_agents = ["tagger_0", ..., "tagger_{n-1}", "runner_0", ..., "runner_{m-1}"]``, in the
    reference's agent-id order: ``tagger_i`` is id ``i`` and ``runner_j`` is id ``num_taggers + j``
    (the gridworld has one runner, ``runner_0`` = id ``num_taggers``). ``agents`` holds those still in
    the game.

    ## Action space
    Continuous: ``MultiDiscrete([num_acceleration_levels + 1, num_turn_levels + 1])`` per agent, index 0
    "no change". Gridworld: ``Discrete(5)`` per agent: stay, +x, -x, +y, -y.

    ## Observation space
    ``Box(low, high, (obs_dim,), float32)`` per agent, the reference's observation row. Gridworld:
    every feature in ``[0, 1]``. Continuous: bounds derived from the spec's formulas (see
    :func:`gpu_marl_envs.envs.tag_continuous.observation_space`): position and direction features in ``[-1, 1]``, speed
    differences within ``+-S / max_speed``, acceleration differences within ``+-2 S / max_speed``
    (``S`` the larger type's top speed), type, in_game and ``t / T`` in ``[0, 1]``.

    ## Rewards
    The reference's per-agent rewards, as Python floats: tag rewards and penalties, step rewards and
    costs, edge or wall hits, and (continuous) the end-of-game reward of runners still in the game.

    ## Starting state
    The reference's ``reset`` for one env with key ``rng.key_hash(seed, episode)``, as the batched
    envs draw it: ``reset(seed=s)`` starts episode 0 of seed ``s``,
    each later ``reset()`` the next episode; an env never seeded draws a random 63-bit seed.

    ## Episode end
    Continuous: a tagged runner (with ``runner_exits_game_after_tagged``) is terminated and leaves
    ``agents`` after that step; when no runner is left every agent is terminated. Gridworld: a tag
    terminates every agent. Both: at ``t == episode_length`` every agent still in the game is
    truncated (unless terminated on that step). Afterwards ``agents`` is empty; call ``reset``.

    ## Arguments
    - ``game``: ``"continuous"`` or ``"gridworld"``.
    - ``params``: a ``TagContinuousParams`` / ``TagGridworldParams`` (default: the game's defaults,
      the published configuration).
    - ``render_mode``: ``None`` or ``"rgb_array"`` (:meth:`render` returns an ``(H, W, 3)`` uint8 frame).
    - ``device``, ``backend``: where and how the game runs (default: the CPU, torch reference).

    ``reset(options=...)`` supports no options: a dict is accepted (PettingZoo's API test passes
    ``{"options": 1}``) and ignored with a warning.

    ## Version history
    v0: the spec's rules.
    """

    metadata = {"name": "tag_v0", "render_modes": ["rgb_array"], "is_parallelizable": True}

    def __init__(self, game: str = "continuous", params=None, render_mode: str | None = None, *,
                 device="cpu", backend: str | None = None):
        if game not in _GAMES:
            raise ValueError(f"game must be one of {sorted(_GAMES)}, got {game!r}")
        # Autoreset off: an episode ends with `agents` empty, and reset() starts the next one.
        self._env = GpuParallelEnv(_GAMES[game], 1, device=device, backend=backend, params=params,
                                   render_mode=render_mode, autoreset_mode=AutoresetMode.DISABLED)
        self.game = game
        self.params = self._env.params
        self.render_mode = render_mode
        self.metadata = {**type(self).metadata, "name": self._env.metadata["name"]}
        self.possible_agents = list(self._env.possible_agents)
        self.agents = []
        self._zero_action = np.zeros(self._env.action_space(self.possible_agents[0]).shape, dtype=np.int64)

    def observation_space(self, agent: str) -> spaces.Box:
        return self._env.observation_space(agent)

    def action_space(self, agent: str) -> spaces.Space:
        return self._env.action_space(agent)

    def reset(self, seed: int | None = None, options: dict | None = None):
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        if options:
            warnings.warn(f"TagParallelEnv.reset supports no options; ignored {sorted(options)}", stacklevel=2)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"seed must be an int in [0, 2**63 - 1], got {seed!r}")
        observations, _ = self._env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        return {agent: self._row(observations[agent]) for agent in self.agents}, {agent: {} for agent in self.agents}

    def _action_tensors(self, actions: dict) -> dict[str, torch.Tensor]:
        if not isinstance(actions, dict):
            raise TypeError(f"actions must be a dict {{agent: action}}, got {type(actions).__name__}")
        unknown = sorted(set(actions) - set(self.agents), key=str)
        missing = [agent for agent in self.agents if agent not in actions]
        if unknown:
            raise ValueError(f"actions for agents not in the game: {unknown}; agents: {self.agents}")
        if missing:
            raise ValueError(f"no action for agents {missing}")
        tensors = {}
        for agent in self.possible_agents:
            # Agents out of the game are frozen whatever they get: 0 is "no change" / "stay".
            value = np.asarray(actions.get(agent, self._zero_action))
            space = self.action_space(agent)
            if value.dtype.kind not in "iu" or value.shape != space.shape or not space.contains(value):
                raise ValueError(f"action for {agent} must be an integer in {space}, got {actions[agent]!r}")
            tensors[agent] = torch.as_tensor(value, dtype=torch.int64, device=self._env.device)[None]
        return tensors

    def step(self, actions: dict):
        if not self.agents:
            raise RuntimeError("no agent is in the game: call reset() first (or again after the episode ended)")
        observations, rewards, terminations, truncations, infos = self._env.step(self._action_tensors(actions))
        acting = self.agents
        self.agents = [agent for agent in acting if not (terminations[agent] | truncations[agent]).item()]
        return (
            {agent: self._row(observations[agent]) for agent in acting},
            {agent: float(rewards[agent]) for agent in acting},
            {agent: bool(terminations[agent]) for agent in acting},
            {agent: bool(truncations[agent]) for agent in acting},
            {agent: {} for agent in acting},
        )

    def render(self) -> np.ndarray | None:
        return self._env.render()

    def close(self) -> None:
        self._env.close()

    @staticmethod
    def _row(tensor: torch.Tensor) -> np.ndarray:
        return tensor[0].cpu().numpy().copy()
