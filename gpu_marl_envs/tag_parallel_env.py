"""``TagParallelEnv``: one game of Tag as a PettingZoo ``ParallelEnv``, numpy I/O, chosen by
``game="continuous" | "gridworld"``: :class:`~gpu_marl_envs.pettingzoo_env.PettingZooParallelEnv`
of ``TagContinuous-v0`` or ``TagGridworld-v0`` (also ``pettingzoo.make("parallel",
"gpu_marl_envs/TagContinuous-v0")``).
"""

from __future__ import annotations

from gpu_marl_envs.pettingzoo_env import PettingZooParallelEnv

_GAMES = {"continuous": "TagContinuous-v0", "gridworld": "TagGridworld-v0"}


class TagParallelEnv(PettingZooParallelEnv):
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
    :func:`gpu_marl_envs.envs.tag_continuous_params.observation_space`): position and direction
    features in ``[-1, 1]``, speed differences within ``+-S / max_speed``, acceleration differences
    within ``+-2 S / max_speed`` (``S`` the larger type's top speed), type, in_game and ``t / T`` in
    ``[0, 1]``.

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
    - ``**settings``: fields of the params by name (``TagParallelEnv("continuous", num_runners=20)``), applied
      on top of ``params``.
    - ``render_mode``: ``None``, ``"rgb_array"`` (:meth:`render` returns an ``(H, W, 3)`` uint8 frame) or
      ``"human"`` (a pygame window; ``pip install gpu_marl_envs[render]``).
    - ``max_cycles``: replaces ``params.episode_length`` (PettingZoo's name for it).
    - ``device``, ``backend``: where and how the game runs (default: the CPU, torch reference).

    ``reset(options=...)`` supports no options: a dict is accepted (PettingZoo's API test passes
    ``{"options": 1}``) and ignored with a warning.

    ## Version history
    v0: the spec's rules.
    """

    metadata = {"name": "tag_v0", "render_modes": ["rgb_array", "human"], "is_parallelizable": True}

    def __init__(
        self,
        game: str = "continuous",
        params=None,
        render_mode: str | None = None,
        *,
        max_cycles: int | None = None,
        device="cpu",
        backend: str | None = None,
        **settings,
    ):
        if game not in _GAMES:
            raise ValueError(f"game must be one of {sorted(_GAMES)}, got {game!r}")
        super().__init__(
            _GAMES[game], params, render_mode, max_cycles=max_cycles, device=device, backend=backend, **settings
        )
        self.game = game
