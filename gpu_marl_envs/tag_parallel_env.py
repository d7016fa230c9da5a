"""``TagParallelEnv``: one game of Tag as a PettingZoo ``ParallelEnv``, numpy I/O.

This is the unbatched view, for PettingZoo's tools (its API and seed tests, wrappers, SuperSuit,
trainers that expect one game). It runs the torch reference of TagContinuous or TagGridworld
(``../shared/specs/tag.md``) on a batch of one on the CPU. The batched GPU API, where a runner that
left the game stays in the arrays behind an ``active`` mask, comes later.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pettingzoo
import torch
from gymnasium import spaces

from gpu_marl_envs import rng
from gpu_marl_envs.envs import tag_continuous, tag_gridworld

_GAMES = {
    "continuous": (tag_continuous, tag_continuous.TagContinuousParams, "tag_continuous_v0"),
    "gridworld": (tag_gridworld, tag_gridworld.TagGridworldParams, "tag_gridworld_v0"),
}


def _continuous_observation_bounds(p: tag_continuous.TagContinuousParams) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature float32 bounds of TagContinuous's observation, derived from the spec's formulas.

    With ``S`` the larger of the two types' top speeds (``max_speed * skill``):
    - positions lie in ``[0, L]``, so ``|dx| / (sqrt(2) L) <= 1 / sqrt(2)``: bound 1;
    - speeds lie in ``[0, S]``, so ``|speed_j - speed_i| <= S``;
    - an acceleration survives a step only when ``0 < speed + acceleration < S_type`` with the speed
      in ``[0, S_type]``, so ``|acceleration| < S`` and ``|acc_j - acc_i| < 2 S``;
    - directions lie in ``[0, 2 pi)``, so ``|dir_j - dir_i| / (2 pi) < 1``: bound 1;
    - type and in_game are 0 or 1, ``t / T`` in ``[0, 1]``; padding and absent agents are 0.
    The speed bounds get a relative margin of 1e-5 for float32 rounding.
    """
    top_speed = max(p.max_speed_tagger, p.max_speed_runner) / p.speed_scale * (1 + 1e-5)
    low = np.array([-1.0, -1.0, -top_speed, -2 * top_speed, -1.0, 0.0, 0.0], dtype=np.float64)
    high = np.array([1.0, 1.0, top_speed, 2 * top_speed, 1.0, 1.0, 1.0], dtype=np.float64)
    observed = (p.obs_dim - 1) // tag_continuous.FEATURES_PER_AGENT
    low = np.append(np.tile(low, observed), 0.0).astype(np.float32)
    high = np.append(np.tile(high, observed), 1.0).astype(np.float32)
    return low, high


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
    :func:`_continuous_observation_bounds`): position and direction features in ``[-1, 1]``, speed
    differences within ``+-S / max_speed``, acceleration differences within ``+-2 S / max_speed``
    (``S`` the larger type's top speed), type, in_game and ``t / T`` in ``[0, 1]``.

    ## Rewards
    The reference's per-agent rewards, as Python floats: tag rewards and penalties, step rewards and
    costs, edge or wall hits, and (continuous) the end-of-game reward of runners still in the game.

    ## Starting state
    The reference's ``reset`` for one env with key ``rng.key_hash(seed, episode)``, as
    :class:`gpu_marl_envs.GpuVectorEnv` draws it: ``reset(seed=s)`` starts episode 0 of seed ``s``,
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
    - ``render_mode``: only ``None``; no rendering yet.

    ``reset(options=...)`` supports no options: a dict is accepted (PettingZoo's API test passes
    ``{"options": 1}``) and ignored with a warning.

    ## Version history
    v0: this view of the torch references.
    """

    metadata = {"name": "tag_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, game: str = "continuous", params=None, render_mode: str | None = None):
        if game not in _GAMES:
            raise ValueError(f"game must be one of {sorted(_GAMES)}, got {game!r}")
        module, params_type, name = _GAMES[game]
        if params is None:
            params = params_type()
        if not isinstance(params, params_type):
            raise ValueError(f"params for game {game!r} must be a {params_type.__name__}, "
                             f"got {type(params).__name__}")
        if render_mode is not None:
            raise ValueError(f"render_mode must be None (no render modes yet), got {render_mode!r}")
        self.game = game
        self.params = params
        self.render_mode = None
        self.metadata = {**type(self).metadata, "name": name}
        self._module = module
        num_runners = params.num_runners if game == "continuous" else 1
        self.possible_agents = ([f"tagger_{i}" for i in range(params.num_taggers)]
                                + [f"runner_{j}" for j in range(num_runners)])
        self._ids = {agent: i for i, agent in enumerate(self.possible_agents)}
        self.agents = []
        self._state = None
        self._seed = rng.random_seed()
        self._episode = 0

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> spaces.Box:
        self._check_agent(agent)
        if self.game == "gridworld":
            return tag_gridworld.observation_space(self.params)
        low, high = _continuous_observation_bounds(self.params)
        return spaces.Box(low, high, dtype=np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> spaces.Space:
        self._check_agent(agent)
        if self.game == "gridworld":
            return tag_gridworld.action_space(self.params)
        p = self.params
        return spaces.MultiDiscrete([p.num_acceleration_levels + 1, p.num_turn_levels + 1])

    def _check_agent(self, agent) -> None:
        if agent not in self._ids:
            raise ValueError(f"unknown agent {agent!r}; possible agents: {self.possible_agents}")

    def reset(self, seed: int | None = None, options: dict | None = None):
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        if options:
            warnings.warn(f"TagParallelEnv.reset supports no options; ignored {sorted(options)}", stacklevel=2)
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= rng.MAX_SEED:
                raise ValueError(f"seed must be an int in [0, 2**63 - 1], got {seed!r}")
            self._seed, self._episode = int(seed), 0
        key = rng.key_hash(torch.tensor([self._seed]), torch.tensor([self._episode]))
        self._episode += 1
        self._state = self._module.reset(self.params, key, 1)
        self.agents = list(self.possible_agents)
        observations = self._module.observe(self.params, self._state)[0].numpy()
        return ({agent: observations[i].copy() for i, agent in enumerate(self.agents)},
                {agent: {} for agent in self.agents})

    def _action_tensor(self, actions: dict) -> torch.Tensor:
        if not isinstance(actions, dict):
            raise TypeError(f"actions must be a dict {{agent: action}}, got {type(actions).__name__}")
        unknown = sorted(set(actions) - set(self.agents), key=str)
        missing = [agent for agent in self.agents if agent not in actions]
        if unknown:
            raise ValueError(f"actions for agents not in the game: {unknown}; agents: {self.agents}")
        if missing:
            raise ValueError(f"no action for agents {missing}")
        n = len(self.possible_agents)
        # Zeros are "no change" (continuous) and "stay" (gridworld) for agents out of the game.
        shape = (1, n) if self.game == "gridworld" else (1, n, 2)
        batch = np.zeros(shape, dtype=np.int64)
        for agent, action in actions.items():
            space = self.action_space(agent)
            value = np.asarray(action)
            if value.dtype.kind not in "iu" or value.shape != space.shape or not space.contains(value):
                raise ValueError(f"action for {agent} must be an integer in {space}, got {action!r}")
            batch[0, self._ids[agent]] = value
        return torch.from_numpy(batch)

    def step(self, actions: dict):
        if not self.agents:
            raise RuntimeError("no agent is in the game: call reset() first (or again after the episode ended)")
        batch = self._action_tensor(actions)
        self._state, rewards, terminated, truncated = self._module.step(self.params, self._state, batch)
        observations = self._module.observe(self.params, self._state)[0].numpy()
        rewards = rewards[0].tolist()
        terminated, truncated = bool(terminated[0]), bool(truncated[0])
        if self.game == "continuous":
            in_game = self._state.in_game[0].tolist()
        else:
            in_game = [True] * len(self.possible_agents)

        acting = self.agents
        ended = terminated or truncated
        self.agents = [] if ended else [agent for agent in acting if in_game[self._ids[agent]]]
        return (
            {agent: observations[self._ids[agent]].copy() for agent in acting},
            {agent: rewards[self._ids[agent]] for agent in acting},
            {agent: terminated or not in_game[self._ids[agent]] for agent in acting},
            {agent: truncated and in_game[self._ids[agent]] for agent in acting},
            {agent: {} for agent in acting},
        )
