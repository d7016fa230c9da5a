"""skrl adapter: the batched envs behind skrl's wrapper interface, on the env's device.

    from gpu_marl_envs.adapters import make_skrl_env

    env = make_skrl_env("CartPole-v1", num_envs=4096, device="cuda")          # SkrlVectorEnv
    games = make_skrl_env("TagGridworld-v0", num_envs=1024, device="cuda")    # SkrlParallelEnv

:class:`SkrlVectorEnv` is a ``skrl.envs.wrappers.torch.Wrapper`` and :class:`SkrlParallelEnv` a
``MultiAgentEnvWrapper``: skrl's agents (PPO, IPPO, MAPPO, ...) and trainers (``SequentialTrainer``)
take them as they take skrl's own wrappers. Tensors stay on the device; nothing is synchronised
with the host in a step.

skrl's trainers call ``reset()`` once and then only ``step()``, handing each step's observations
back as the next step's, so the env must reset finished sub-envs within the step: the adapters run
on ``AutoresetMode.SAME_STEP`` (as Isaac Lab's envs behave under skrl), and ``reset()`` after the
first call returns the current observations without resetting, as skrl's Isaac Lab and ManiSkill
wrappers do. The observations of a step are the *reset* observations of the sub-envs that ended
there; the final ones are in ``infos["final_obs"]`` (masked by ``infos["_final_obs"]``). skrl's
``time_limit_bootstrap`` evaluates the value of the returned observations, so with same-step resets
it bootstraps a truncated episode from the next episode's first state, as it does on Isaac Lab.

Outputs follow skrl's shapes: observations ``(num_envs, obs_dim)``, rewards, terminated and
truncated ``(num_envs, 1)``; actions ``(num_envs, 1)`` for ``Discrete`` spaces (skrl's categorical
models give that; ``(num_envs,)`` is accepted too) and ``(num_envs, *shape)`` otherwise.
skrl keeps a step's observations until after the next step (``record_transition`` gets both), while
the env writes the next: the adapters run the env with ``observation_buffers=2``, so the steps write
their observations into two buffers in turn and a step's observations stay valid until the step
after next, with no copy. Rewards and flags are views of the env's buffers (skrl stores them before
the next step).

Multi-agent games give skrl their global state (what MAPPO's shared value function reads):
``state()`` is :meth:`~gpu_marl_envs.GpuParallelEnv.state`, float32 ``(num_envs, S)`` on the device,
the same tensor for every agent, as skrl's PettingZoo wrapper gives it; ``state_spaces`` maps every
agent to the game's ``state_space``. By default the state is every agent's observation side by side,
the observation buffer itself: it too stays valid until the step after next. After a step it is the
state of the observations returned (the next game's first where a game ended).

Box actions ``(num_envs, *shape)`` float32 (skrl's Gaussian models give them) reach the env as they
are: no cast, and no clipping by the adapter, as skrl's own wrappers pass actions on; the game's rules
clip values outside the bounds (NaN reads as 0). skrl's models clip to the action space themselves
with ``GaussianMixin(clip_actions=True)``; an env made with ``validate_actions=True`` refuses such
values instead, at a host synchronisation per step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from gpu_marl_envs.adapters._batched import check_batched_env, is_multi_agent, make_batched_env
from gymnasium import spaces
from skrl import config
from skrl.envs.wrappers.torch import MultiAgentEnvWrapper, Wrapper

from gpu_marl_envs.parallel_env import GpuParallelEnv
from gpu_marl_envs.vector_env import GpuVectorEnv

MAKE = "gpu_marl_envs.adapters.make_skrl_env"


def make_skrl_env(env_id: str, num_envs: int = 1, **kwargs) -> SkrlVectorEnv | SkrlParallelEnv:
    """An skrl env of ``num_envs`` copies of ``env_id`` (``"CartPole-v1"``, ``"TagContinuous-v0"``,
    with or without the ``gpu_marl_envs/`` prefix). Keyword arguments go to the env (``device``,
    ``backend``, ``params``, ...; ``validate_actions`` defaults to False: actions sampled by skrl's
    models are in range, and checking values costs a host synchronisation per step;
    ``observation_buffers`` defaults to 2, see the module docstring)."""
    env = make_batched_env(env_id, num_envs, **{"observation_buffers": 2, **kwargs})
    return SkrlParallelEnv(env) if is_multi_agent(env_id) else SkrlVectorEnv(env)


class ActionForm:
    """skrl's actions of one space as the env takes them, for a batch of leading dims ``batch``
    (``(num_envs,)``, or ``(num_envs, group_size)`` for an agent group's stacked actions):
    ``(*batch, 1)`` of a ``Discrete`` space become ``(*batch,)`` (the env's form, accepted too);
    other spaces keep ``(*batch, *shape)``. The shapes are worked out once, here."""

    def __init__(self, space: spaces.Space, batch: tuple[int, ...]):
        self.space = space
        self.discrete = isinstance(space, spaces.Discrete)
        self.skrl_shape = torch.Size((*batch, 1) if self.discrete else (*batch, *space.shape))
        self.env_shape = torch.Size(batch) if self.discrete else self.skrl_shape
        self._env_dims = tuple(self.env_shape)  # view(*ints) costs a third of view(torch.Size)
        self._one_dim = len(batch) == 1  # ravel() costs a quarter less than view(n)

    def fits(self, actions) -> bool:
        return isinstance(actions, torch.Tensor) and actions.shape in (self.skrl_shape, self.env_shape)

    def as_env(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions of ``skrl_shape`` in the env's form."""
        if not self.discrete:
            return actions
        return actions.ravel() if self._one_dim else actions.view(*self._env_dims)

    def __call__(self, actions, name: str):
        """``actions`` in the env's form; a tensor of neither shape is refused, naming both (the env
        checks the rest, and names the type it needs)."""
        if not isinstance(actions, torch.Tensor):
            return actions
        if actions.shape == self.skrl_shape:
            return self.as_env(actions)
        if actions.shape == self.env_shape:
            return actions
        raise ValueError(
            f"{name} must have shape {tuple(self.skrl_shape)} (num_envs, *action shape) for "
            f"{self.space}, got {tuple(actions.shape)}"
        )


class _Views:
    """``make(tensor)`` (views of one of the env's outputs), made once per tensor the env hands out:
    it hands out the same few buffers again and again (observations: two in turn), and making views
    costs a good part of the adapter's step."""

    MOST = 8  # tensors remembered; an env handing out others each time would otherwise grow this

    def __init__(self, make: Callable[[torch.Tensor], object]):
        self._make = make
        self._made = {}  # id(tensor) -> (tensor, views); the tensor is kept so that its id stays its own

    def __call__(self, tensor: torch.Tensor):
        made = self._made.get(id(tensor))
        if made is None:
            if len(self._made) >= self.MOST:
                self._made.clear()
            made = self._made[id(tensor)] = (tensor, self._make(tensor))
        return made[1]


def require_two_observation_buffers(env, adapter: str) -> None:
    if env.observation_buffers < 2:
        raise ValueError(
            f"{adapter} needs an env made with observation_buffers=2 (skrl keeps a step's observations "
            f"through the next step), got {env.observation_buffers}; pass it to the env's constructor "
            f"or use {MAKE}(env_id, num_envs, ...)"
        )


def column(tensor: torch.Tensor) -> torch.Tensor:
    """``(num_envs,)`` -> skrl's ``(num_envs, 1)``."""
    return tensor.view(-1, 1)


def agent_columns(agents: list[str]) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """A group's ``(num_envs, group_size)`` output -> ``(num_envs, 1)`` views per agent."""
    return lambda values: dict(zip(agents, values.unsqueeze(-1).unbind(1)))


def agent_observations(agents: list[str]) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """A group's ``(num_envs, group_size, obs_dim)`` observations -> ``(num_envs, obs_dim)`` views per agent."""
    return lambda observations: dict(zip(agents, observations.unbind(1)))


class SkrlVectorEnv(Wrapper):
    """A :class:`~gpu_marl_envs.GpuVectorEnv` (made with ``autoreset_mode=AutoresetMode.SAME_STEP`` and
    ``observation_buffers=2``) as an skrl env. See the module docstring."""

    def __init__(self, env: GpuVectorEnv):
        env = check_batched_env(env, GpuVectorEnv, type(self).__name__, MAKE)
        require_two_observation_buffers(env, type(self).__name__)
        super().__init__(env)
        self._seed = config.torch.key  # skrl's seed, as its own wrappers use it at the first reset
        self._observations = None  # the latest, from the first reset on
        self._infos = {}
        self._actions = ActionForm(env.single_action_space, (env.num_envs,))
        # Rewards, terminated and truncated as (num_envs, 1) columns, made again only when the env
        # hands out other tensors (it hands out the same three buffers at every step).
        self._flags = self._columns = None

    @property
    def observation_space(self) -> spaces.Space:
        return self._env.single_observation_space

    @property
    def action_space(self) -> spaces.Space:
        return self._env.single_action_space

    def reset(self) -> tuple[torch.Tensor, dict]:
        """Reset every sub-env the first time (with skrl's seed); afterwards the env resets its
        sub-envs itself, so this returns the current observations."""
        if self._observations is None:
            self._observations, self._infos = self._env.reset(seed=self._seed)
        return self._observations, self._infos

    def step(self, actions: torch.Tensor):
        if self._observations is None:
            raise RuntimeError("call reset() before step()")
        form = self._actions
        if type(actions) is torch.Tensor and actions.shape == form.skrl_shape:  # skrl's own, checked first
            actions = form.as_env(actions)
        else:
            actions = form(actions, "actions")
        self._observations, rewards, terminated, truncated, self._infos = self._env.step(actions)
        flags = self._flags
        if flags is None or rewards is not flags[0] or terminated is not flags[1] or truncated is not flags[2]:
            self._flags = rewards, terminated, truncated
            self._columns = tuple(column(tensor) for tensor in self._flags)
        return (self._observations, *self._columns, self._infos)

    def state(self) -> None:
        return None

    def render(self, *args, **kwargs):
        return self._env.render()

    def close(self) -> None:
        self._env.close()


class SkrlParallelEnv(MultiAgentEnvWrapper):
    """A :class:`~gpu_marl_envs.GpuParallelEnv` (made with ``autoreset_mode=AutoresetMode.SAME_STEP`` and
    ``observation_buffers=2``) as an skrl multi-agent env, keyed by agent (``possible_agents``) as
    skrl's multi-agent algorithms expect. Per-group policies: give the agents of a group the same
    model instances.

    The env is stepped by group: the actions of a group's agents are stacked into one tensor and
    each output is one tensor per group, handed out as per-agent views. ``infos`` are keyed by group,
    as :meth:`~gpu_marl_envs.GpuParallelEnv.step_groups` returns them (``"active"``, ``"final_obs"``,
    ``"_final_obs"``, ...). An agent out of its game (a tagged runner) keeps stepping until the game
    ends: it observes zeros, gets no reward and is terminated; skrl has no per-agent mask, so those
    transitions reach its memories (they teach the value of a zero observation to be 0).
    """

    def __init__(self, env: GpuParallelEnv):
        env = check_batched_env(env, GpuParallelEnv, type(self).__name__, MAKE)
        require_two_observation_buffers(env, type(self).__name__)
        super().__init__(env)
        self._seed = config.torch.key
        self._groups = {group: list(agents) for group, agents in env.groups.items()}
        self._agents = set(env.possible_agents)
        self._last = None  # the latest observations by agent, from the first reset on
        self._infos = {}
        # Per group: the form of its stacked actions and of each agent's (the spaces of a group's agents are one).
        self._group_actions = {
            group: ActionForm(env.action_space(agents[0]), (env.num_envs, len(agents)))
            for group, agents in self._groups.items()
        }
        self._agent_actions = {
            group: ActionForm(env.action_space(agents[0]), (env.num_envs,)) for group, agents in self._groups.items()
        }
        # Observations, rewards, terminated, truncated: per group, views per agent.
        self._observation_views = {group: _Views(agent_observations(agents)) for group, agents in self._groups.items()}
        self._columns = tuple(
            {group: _Views(agent_columns(agents)) for group, agents in self._groups.items()} for _ in range(3)
        )
        agents = list(env.possible_agents)
        self._state_views = _Views(lambda state: dict.fromkeys(agents, state))

    @property
    def observation_spaces(self) -> dict[str, spaces.Space]:
        return {agent: self._env.observation_space(agent) for agent in self.possible_agents}

    @property
    def action_spaces(self) -> dict[str, spaces.Space]:
        return {agent: self._env.action_space(agent) for agent in self.possible_agents}

    def reset(self) -> tuple[dict[str, torch.Tensor], dict]:
        """Reset every sub-env the first time (with skrl's seed); afterwards the env resets its
        games itself, so this returns the current observations."""
        if self._last is None:
            observations, self._infos = self._env.reset_groups(seed=self._seed)
            self._last = self._by_agent(self._observation_views, observations)
        return self._last, self._infos

    def step(self, actions: dict[str, torch.Tensor]):
        if self._last is None:
            raise RuntimeError("call reset() before step()")
        if actions.keys() != self._agents:
            missing = [agent for agent in self.possible_agents if agent not in actions]
            unknown = [agent for agent in actions if agent not in self._agents]
            raise ValueError(
                f"actions need one tensor per agent of possible_agents; missing {missing[:10]}, unknown {unknown[:10]}"
            )
        grouped = {group: self._stack_actions(group, actions) for group in self._groups}
        observations, rewards, terminated, truncated, self._infos = self._env.step_groups(grouped)
        self._last = self._by_agent(self._observation_views, observations)
        reward_views, terminated_views, truncated_views = self._columns
        return (
            self._last,
            self._by_agent(reward_views, rewards),
            self._by_agent(terminated_views, terminated),
            self._by_agent(truncated_views, truncated),
            self._infos,
        )

    @property
    def state_spaces(self) -> dict[str, spaces.Space]:
        """Every agent's: the game's global state space (one for all, as skrl's PettingZoo wrapper has it)."""
        space = self._env.state_space
        return {agent: space for agent in self.possible_agents}

    def state(self) -> dict[str, torch.Tensor]:
        """The game's global state ``(num_envs, S)`` on the device, the same tensor for every agent
        (a dict made once per tensor the env hands out: by default its two observation buffers)."""
        if self._last is None:
            raise RuntimeError("call reset() before state()")
        return self._state_views(self._env.state())

    def render(self, *args, **kwargs):
        return self._env.render()

    def close(self) -> None:
        self._env.close()

    def _stack_actions(self, group: str, actions: dict[str, torch.Tensor]) -> torch.Tensor:
        """A group's actions as the env takes them, ``(num_envs, group_size, ...)``. Stacking needs
        every agent's actions in one shape, so the shape of the stack is checked once; where that
        fails, agent by agent, which names the first wrong agent (or accepts a mix of skrl's form
        and the env's)."""
        agents = self._groups[group]
        form = self._group_actions[group]
        try:
            stacked = torch.stack([actions[agent] for agent in agents], dim=1)
        except (RuntimeError, TypeError):  # shapes, devices or types that differ between agents
            stacked = None
        if stacked is not None and form.fits(stacked):
            return form(stacked, f"actions of {group}")
        agent_form = self._agent_actions[group]
        return torch.stack([agent_form(actions[agent], f"actions[{agent!r}]") for agent in agents], dim=1)

    @staticmethod
    def _by_agent(views: dict[str, _Views], values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A group's ``(num_envs, group_size, ...)`` output -> its views per agent."""
        out = {}
        for group, group_views in views.items():
            out.update(group_views(values[group]))
        return out
