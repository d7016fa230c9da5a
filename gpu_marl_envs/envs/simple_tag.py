"""SimpleTag-v3: MPE2 1.1.1's ``simple_tag_v3`` (predator-prey), batched.

Slower adversaries chase faster good agents among obstacles. This module is the torch reference
(float32, pure, batched; :mod:`mpe_physics` holds the physics the MPE games share); the kernels
(``kernels/simple_tag.cu``, ``kernels/simple_tag_numba.py``) reproduce it bit for bit.

## Agents
Two groups: ``adversaries`` (ids ``0 .. num_adversaries - 1``; size 0.075, accel 3, max speed 1)
and ``agents``, the good agents (the next ``num_good`` ids: ``agent_0 ...``; size 0.05, accel 4,
max speed 1.3), MPE2's order. Everyone is silent and collides with everyone else and with the
``num_obstacles`` obstacles (size 0.2, immovable).

## Action space
``Discrete(5)`` per agent (no action, left, right, down, up) or, with ``continuous_actions=True``,
``Box(0, 1, (5,))`` float32: the force is ``accel * (a[2] - a[1], a[4] - a[3])``, actions clipped
into ``[0, 1]`` (a NaN component reads as 0). See :mod:`mpe_physics`.

## Observation space
``Box(-inf, inf)`` float32, MPE2's layout, for agent ``i``: its velocity (2), its position (2), each
obstacle's position minus its own (``2 num_obstacles``), each other agent's position minus its own
(``2 (N - 1)``, id order), then each other *good* agent's velocity (id order): ``2 num_good``
for an adversary, ``2 (num_good - 1)`` for a good agent.

## Rewards
After the move (a collision: distance below the two sizes' sum):
- an adversary: ``10 *`` the number of colliding (good agent, adversary) pairs, shared by all;
- a good agent: ``-10 *`` the adversaries colliding with it, then minus ``bound(|x|)`` and minus
  ``bound(|y|)`` (each subtraction rounded), where ``bound(v) = 0`` below 0.9,
  ``(v - 0.9) * 10`` below 1, else ``min(exp(2 v - 2), 10)`` (:func:`mpe_physics.exp`).

## Starting state
From the env's counter-based key: agents uniform in ``[-1, 1)^2`` (agent ``a``: draws ``a``,
``N + a``), obstacles uniform in ``[-0.9, 0.9)^2`` (obstacle ``l``: draws ``2N + l``,
``2N + num_obstacles + l``), MPE2's distributions; velocities 0.

## Episode end
Never terminated; truncated after ``max_cycles`` steps.

## Arguments
:class:`SimpleTagParams`: MPE2's ``num_good``, ``num_adversaries``, ``num_obstacles``,
``max_cycles``, ``continuous_actions``, ``dynamic_rescaling`` (rendering only; kept for MPE2's
signature).

## Parity with MPE2
- Rules, layouts and spaces are MPE2's, in float32 where MPE2 uses float64:
  ``tests/test_mpe_twins.py`` finds observations and rewards within ``1e-5 + 1e-5 |value|`` of
  MPE2's from identical states, speed caps, contacts and catches included (see its docstring).
- Contact forces between bodies more than 0.1 apart (beyond touching) are 0 here, below 1e-40 in MPE2.
- ``exp`` in the boundary penalty is :func:`mpe_physics.exp` (within 2 float32 ulps of ``e**x``).
- Resets draw from the framework's RNG: MPE2's distributions, other numbers.
- Not carried over: ``curriculum``, ``terminate_on_success``, ``num_agent_neighbors``,
  ``num_landmark_neighbors`` (off by default in MPE2), ``benchmark_data``, rendering.

## Version history
v3: MPE2 1.1.1's ``simple_tag_v3``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import rng
from gpu_marl_envs.envs import mpe_physics as mpe
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition

ADVERSARY_SIZE, GOOD_SIZE, OBSTACLE_SIZE = 0.075, 0.05, 0.2
ADVERSARY_ACCEL, GOOD_ACCEL = 3.0, 4.0
ADVERSARY_MAX_SPEED, GOOD_MAX_SPEED = 1.0, 1.3
CATCH_REWARD = 10.0
OBSTACLE_RANGE = 0.9  # obstacles start uniform in [-0.9, 0.9)^2
BOUND_START, BOUND_WALL, BOUND_SLOPE, BOUND_MAX = 0.9, 1.0, 10.0, 10.0
# exp(2v - 2) is at least BOUND_MAX from here on (exp(3) > 10): where mpe_physics.exp need not go.
BOUND_EXP_LIMIT = 3.0


@dataclass(frozen=True)
class SimpleTagParams:
    num_good: int = 1
    num_adversaries: int = 3
    num_obstacles: int = 2
    max_cycles: int = 25
    continuous_actions: bool = False
    dynamic_rescaling: bool = True

    def __post_init__(self):
        name = type(self).__name__
        for field, least in (("num_good", 1), ("num_adversaries", 1), ("num_obstacles", 0), ("max_cycles", 1)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"{name}.{field} must be an int >= {least}, got {value!r}")
        for field in ("continuous_actions", "dynamic_rescaling"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"{name}.{field} must be a bool, got {getattr(self, field)!r}")

    @property
    def num_agents(self) -> int:
        return self.num_adversaries + self.num_good

    @property
    def episode_length(self) -> int:
        return self.max_cycles

    def obs_dim(self, adversary: bool) -> int:
        seen_good = self.num_good if adversary else self.num_good - 1
        return 4 + 2 * self.num_obstacles + 2 * (self.num_agents - 1) + 2 * seen_good


@dataclass
class SimpleTagState:
    x: torch.Tensor  # float32 (E, N): agents' positions, adversaries first
    y: torch.Tensor
    vx: torch.Tensor  # float32 (E, N): agents' velocities
    vy: torch.Tensor
    obstacle_x: torch.Tensor  # float32 (E, num_obstacles)
    obstacle_y: torch.Tensor
    t: torch.Tensor  # int32 (E,): steps since reset


def agent_groups(p: SimpleTagParams) -> dict[str, range]:
    return {"adversaries": range(p.num_adversaries), "agents": range(p.num_adversaries, p.num_agents)}


def observation_spaces(p: SimpleTagParams) -> dict[str, spaces.Box]:
    return {
        "adversaries": spaces.Box(-np.inf, np.inf, (p.obs_dim(True),), np.float32),
        "agents": spaces.Box(-np.inf, np.inf, (p.obs_dim(False),), np.float32),
    }


def action_spaces(p: SimpleTagParams) -> dict[str, spaces.Space]:
    space = spaces.Box(0.0, 1.0, (5,), np.float32) if p.continuous_actions else spaces.Discrete(5)
    return {"adversaries": space, "agents": space}


def reset(p: SimpleTagParams, key: torch.Tensor, num_envs: int) -> SimpleTagState:
    n, m = p.num_agents, p.num_obstacles
    k = key.to(torch.int64)[:, None]
    agents = torch.arange(2 * n, device=key.device)
    x, y = (v.contiguous() for v in rng.uniform_from_key(k, agents, -1.0, 1.0).chunk(2, dim=1))
    obstacles = torch.arange(2 * n, 2 * n + 2 * m, device=key.device)
    bound = mpe.f32(OBSTACLE_RANGE)
    u = rng.uniform_from_key(k, obstacles, -bound, bound)
    zeros = torch.zeros((num_envs, n), dtype=torch.float32, device=key.device)
    return SimpleTagState(
        x,
        y,
        zeros,
        zeros.clone(),
        u[:, :m].contiguous(),
        u[:, m:].contiguous(),
        torch.zeros(num_envs, dtype=torch.int32, device=key.device),
    )


def _sizes(p: SimpleTagParams) -> list[float]:
    return [ADVERSARY_SIZE] * p.num_adversaries + [GOOD_SIZE] * p.num_good + [OBSTACLE_SIZE] * p.num_obstacles


def _per_agent(p: SimpleTagParams, adversary: float, good: float, device) -> torch.Tensor:
    return mpe.device_constant((mpe.f32(adversary),) * p.num_adversaries + (mpe.f32(good),) * p.num_good, device)


def _pair_tables(p: SimpleTagParams, device) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``(N, N + num_obstacles)`` dist_min and reach2 of each (agent, entity) pair."""
    sizes = _sizes(p)
    pairs = tuple(tuple(mpe.pair_constants(sizes[i], s) for s in sizes) for i in range(p.num_agents))
    table = mpe.device_constant(pairs, device)
    return table[..., 0], table[..., 1]


def catches(p: SimpleTagParams, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """int32 ``(E, num_good)``: the adversaries colliding with each good agent."""
    a = p.num_adversaries
    dist = mpe.distance(x[:, :a, None] - x[:, None, a:], y[:, :a, None] - y[:, None, a:])  # (E, adversary, good)
    return (dist < mpe.f32(ADVERSARY_SIZE + GOOD_SIZE)).sum(dim=1, dtype=torch.int32)


def bound(v: torch.Tensor) -> torch.Tensor:
    """MPE2's boundary penalty of ``v = |coordinate|`` (see the module docstring)."""
    arg = v * 2.0 - 2.0
    wall = torch.where(
        arg < BOUND_EXP_LIMIT, mpe.exp(arg.clamp(max=BOUND_EXP_LIMIT)).clamp(max=BOUND_MAX), mpe.f32(BOUND_MAX)
    )
    near = (v - mpe.f32(BOUND_START)) * mpe.f32(BOUND_SLOPE)
    return torch.where(v < mpe.f32(BOUND_START), 0.0, torch.where(v < mpe.f32(BOUND_WALL), near, wall))


def step(p: SimpleTagParams, s: SimpleTagState, actions: torch.Tensor):
    device = s.x.device
    ux, uy = mpe.action_force(actions, p.continuous_actions, _per_agent(p, ADVERSARY_ACCEL, GOOD_ACCEL, device))
    dist_min, reach2 = _pair_tables(p, device)
    fx, fy = mpe.contact_forces(
        torch.cat([s.x, s.obstacle_x], 1), torch.cat([s.y, s.obstacle_y], 1), ux, uy, dist_min, reach2
    )
    max_speed = _per_agent(p, ADVERSARY_MAX_SPEED, GOOD_MAX_SPEED, device)
    x, y, vx, vy = mpe.integrate(s.x, s.y, s.vx, s.vy, fx, fy, max_speed)
    caught = catches(p, x, y)  # (E, num_good)
    good = (caught * -int(CATCH_REWARD)).to(torch.float32)
    good = good - bound(x[:, p.num_adversaries :].abs())
    good = good - bound(y[:, p.num_adversaries :].abs())
    adversary = (caught.sum(dim=1, dtype=torch.int32) * int(CATCH_REWARD)).to(torch.float32)
    rewards = torch.cat([adversary[:, None].expand(-1, p.num_adversaries), good], dim=1)
    moved = SimpleTagState(x, y, vx, vy, s.obstacle_x, s.obstacle_y, s.t + 1)
    return moved, rewards, torch.zeros_like(moved.t, dtype=torch.bool), moved.t >= p.max_cycles


def observe(p: SimpleTagParams, s: SimpleTagState) -> dict[str, torch.Tensor]:
    e, n = s.x.shape
    a = p.num_adversaries
    device = s.x.device
    own = torch.stack([s.vx, s.vy, s.x, s.y], 2)
    to_obstacles = torch.stack(
        [s.obstacle_x[:, None, :] - s.x[:, :, None], s.obstacle_y[:, None, :] - s.y[:, :, None]], 3
    ).reshape(e, n, 2 * p.num_obstacles)
    to_agents = torch.stack([s.x[:, None, :] - s.x[:, :, None], s.y[:, None, :] - s.y[:, :, None]], 3)
    rows, columns = mpe.other_agents(n, device)
    to_others = to_agents[:, rows, columns].reshape(e, n, 2 * (n - 1))  # row i: the agents j != i, in order
    # Velocities of the good agents: all of them to an adversary, the others to a good agent.
    good_velocities = torch.stack([s.vx[:, a:], s.vy[:, a:]], 2)  # (e, num_good, 2)
    adversaries_see = good_velocities[:, None].expand(e, a, p.num_good, 2).reshape(e, a, 2 * p.num_good)
    _, others = mpe.other_agents(p.num_good, device)
    good_see = good_velocities[:, others].reshape(e, n - a, 2 * (p.num_good - 1))
    obs = torch.cat([own, to_obstacles, to_others], dim=2)
    return {
        "adversaries": torch.cat([obs[:, :a], adversaries_see], dim=2),
        "agents": torch.cat([obs[:, a:], good_see], dim=2),
    }


def kernel_constants(p: SimpleTagParams) -> dict:
    adversary_adversary = mpe.pair_constants(ADVERSARY_SIZE, ADVERSARY_SIZE)
    adversary_good = mpe.pair_constants(ADVERSARY_SIZE, GOOD_SIZE)
    good_good = mpe.pair_constants(GOOD_SIZE, GOOD_SIZE)
    adversary_obstacle = mpe.pair_constants(ADVERSARY_SIZE, OBSTACLE_SIZE)
    good_obstacle = mpe.pair_constants(GOOD_SIZE, OBSTACLE_SIZE)
    return {
        "NUM_AGENTS": p.num_agents,
        "NUM_ADVERSARIES": p.num_adversaries,
        "NUM_GOOD": p.num_good,
        "NUM_OBSTACLES": p.num_obstacles,
        "MAX_CYCLES": p.max_cycles,
        "CONTINUOUS_ACTIONS": p.continuous_actions,
        "ADVERSARY_OBS_DIM": p.obs_dim(True),
        "GOOD_OBS_DIM": p.obs_dim(False),
        "ADVERSARY_ACCEL": mpe.f32(ADVERSARY_ACCEL),
        "GOOD_ACCEL": mpe.f32(GOOD_ACCEL),
        "ADVERSARY_MAX_SPEED": mpe.f32(ADVERSARY_MAX_SPEED),
        "GOOD_MAX_SPEED": mpe.f32(GOOD_MAX_SPEED),
        # (dist_min, reach2) of each kind of pair: adversary (A), good agent (G), obstacle (O).
        "DIST_MIN_AA": adversary_adversary[0],
        "REACH2_AA": adversary_adversary[1],
        "DIST_MIN_AG": adversary_good[0],
        "REACH2_AG": adversary_good[1],
        "DIST_MIN_GG": good_good[0],
        "REACH2_GG": good_good[1],
        "DIST_MIN_AO": adversary_obstacle[0],
        "REACH2_AO": adversary_obstacle[1],
        "DIST_MIN_GO": good_obstacle[0],
        "REACH2_GO": good_obstacle[1],
        "OBSTACLE_RANGE": mpe.f32(OBSTACLE_RANGE),
        "CATCH_REWARD": int(CATCH_REWARD),
        "BOUND_START": mpe.f32(BOUND_START),
        "BOUND_WALL": mpe.f32(BOUND_WALL),
        "BOUND_SLOPE": mpe.f32(BOUND_SLOPE),
        "BOUND_MAX": mpe.f32(BOUND_MAX),
        "BOUND_EXP_LIMIT": mpe.f32(BOUND_EXP_LIMIT),
        **mpe.physics_constants(),
        "MIN_BLOCKS": mpe.min_blocks_per_sm(p),
    }


SIMPLE_TAG = MultiAgentDefinition(
    id="SimpleTag-v3",
    params_type=SimpleTagParams,
    state_type=SimpleTagState,
    agent_groups=agent_groups,
    observation_spaces=observation_spaces,
    action_spaces=action_spaces,
    reset=reset,
    step=step,
    observe=observe,
    kernel_constants=kernel_constants,
    block_threads=mpe.team_threads,
    games_per_block=mpe.games_per_block,
)
