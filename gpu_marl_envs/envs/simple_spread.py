"""SimpleSpread-v3: MPE2 1.1.1's ``simple_spread_v3`` (cooperative navigation), batched.

``N`` agents must cover ``N`` landmarks while avoiding collisions. This module is the torch
reference (float32, pure, batched; :mod:`mpe_physics` holds the physics the MPE games share); the
kernels (``kernels/simple_spread.cu``, ``kernels/simple_spread_numba.py``) reproduce it bit for bit.

## Agents
One group, ``agents``: ``agent_0 .. agent_{N-1}`` (MPE2's names). Every agent has size 0.15,
collides with the other agents, is silent and has no speed cap; landmarks (size 0.05) neither move
nor collide.

## Action space
``Discrete(5)`` per agent (MPE2's ``[no_action, move_left, move_right, move_down, move_up]``), or
with ``continuous_actions=True`` ``Box(0, 1, (5,))`` float32: the force is
``5 * (a[2] - a[1], a[4] - a[3])``, actions clipped into ``[0, 1]`` (MPE2's
``ClipOutOfBoundsWrapper``; a NaN component reads as 0). See :mod:`mpe_physics`.

## Observation space
``Box(-inf, inf, (6N,))`` float32 per agent ``i`` (MPE2's layout):

| index | feature |
|---|---|
| 0, 1 | its velocity ``(vx_i, vy_i)`` |
| 2, 3 | its position ``(x_i, y_i)`` |
| 4 .. 4 + 2N | each landmark's position minus its own, landmark by landmark |
| .. + 2(N - 1) | each other agent's position minus its own, in id order |
| .. + 2(N - 1) | each other agent's communication: zeros (agents are silent; MPE2 keeps the slots) |

## Rewards
After the move, with ``d(a, l)`` agent-landmark distances: the shared
``global = -(sum over landmarks of min over agents of d(a, l))`` and each agent's
``local = -(number of other agents closer than 0.3)``; agent ``i`` receives
``global * (1 - local_ratio) + local_i * local_ratio`` (each product and the sum rounded to
float32; ``1 - local_ratio`` rounded once). The landmarks' minima are summed pairwise
(:func:`mpe_physics.pairwise_sum`), not one after another as MPE2 does.

## Starting state
Agents and landmarks at positions uniform in ``[-1, 1)^2`` (MPE2's distribution) from the env's
counter-based key: agent ``a``'s ``x`` is draw ``a``, its ``y`` draw ``N + a``; landmark ``l``'s
draws ``2N + l`` and ``3N + l``; velocities 0.

## Episode end
Never terminated; truncated after ``max_cycles`` steps.

## Arguments
:class:`SimpleSpreadParams`: MPE2's ``N``, ``local_ratio``, ``max_cycles``, ``continuous_actions``
and ``dynamic_rescaling`` (rendering only: kept for MPE2's signature; nothing here renders).

## Parity with MPE2
- The rules, layouts and spaces are MPE2's; MPE2 computes in float64, this game in float32.
  ``tests/test_mpe_twins.py`` steps MPE2's env and this one from identical states with identical
  actions and finds observations and rewards within 1e-5 (absolute) plus 1e-5 relative: one float32
  step's rounding (relative 6e-8 per operation, over a few dozen operations, on values of order 1-10;
  the contact force amplifies a position's rounding by up to ``100 dt`` in the velocity).
- MPE2's contact force between agents farther apart than ``0.3 + 0.1`` is below 1e-40; it is 0 here
  (mpe_physics' reach).
- Resets draw from the framework's counter-based RNG, not numpy's: the same distributions, other
  numbers.
- Not carried over: ``curriculum``, ``terminate_on_success``, ``num_agent_neighbors``,
  ``num_landmark_neighbors`` (MPE2's extensions, all off by default), ``benchmark_data``, rendering.
- Two agents at exactly the same position make MPE2's force 0/0 (NaN); here too.

## Kernels
A game of up to ``ONE_LANE_AGENTS`` agents runs on one thread, 128 games a block, its whole step in
registers (each contact and collision pair computed once); a larger game on a team of threads, its
agents spread over them (a block per game beyond 32 agents), whose step stages the game's bodies in
shared memory once. Either way the observations read the bodies the step left in shared memory;
where a grid of one-lane games has more blocks than the GPU has SMs, the moved bodies are stored from
there too, a warp at a time (``multi_agent_buffers.stores_by_warp``). Collisions are all pairs, as
MPE2's: a pair beyond its reach costs a squared distance and a comparison, so 1,000 agents per game
run (``tests/test_gpu_mpe.py``; about 1,700 fit a block's shared memory). A neighbour grid would
visit the pairs in another order than MPE2's sum of forces, which float32 makes visible; it is not
used.

## Version history
v3: MPE2 1.1.1's ``simple_spread_v3``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import float32, rng
from gpu_marl_envs.envs import mpe_physics as mpe
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition

AGENT_SIZE = 0.15
LANDMARK_SIZE = 0.05
COMM_DIM = 2  # MPE2's world.dim_c: every other agent's (silent, zero) utterance is observed


@dataclass(frozen=True)
class SimpleSpreadParams:
    N: int = 3
    local_ratio: float = 0.5
    max_cycles: int = 25
    continuous_actions: bool = False
    dynamic_rescaling: bool = True

    def __post_init__(self):
        name = type(self).__name__
        for field in ("N", "max_cycles"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}.{field} must be an int >= 1, got {value!r}")
        if self.N < 2:
            raise ValueError(f"{name}.N must be >= 2 (MPE2's observation needs another agent), got {self.N}")
        value = self.local_ratio
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}.local_ratio is a proportion: a number in [0, 1], got {value!r}")
        for field in ("continuous_actions", "dynamic_rescaling"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"{name}.{field} must be a bool, got {getattr(self, field)!r}")

    @property
    def num_agents(self) -> int:
        return self.N

    @property
    def episode_length(self) -> int:
        return self.max_cycles

    @property
    def obs_dim(self) -> int:
        return 4 + 2 * self.N + 2 * (self.N - 1) + COMM_DIM * (self.N - 1)


@dataclass
class SimpleSpreadState:
    x: torch.Tensor  # float32 (E, N): agents' positions
    y: torch.Tensor
    vx: torch.Tensor  # float32 (E, N): agents' velocities
    vy: torch.Tensor
    landmark_x: torch.Tensor  # float32 (E, N): landmarks' positions
    landmark_y: torch.Tensor
    t: torch.Tensor  # int32 (E,): steps since reset


def agent_groups(p: SimpleSpreadParams) -> dict[str, range]:
    return {"agents": range(p.N)}


def observation_spaces(p: SimpleSpreadParams) -> dict[str, spaces.Box]:
    return {"agents": spaces.Box(-np.inf, np.inf, (p.obs_dim,), np.float32)}


def action_spaces(p: SimpleSpreadParams) -> dict[str, spaces.Space]:
    if p.continuous_actions:
        return {"agents": spaces.Box(0.0, 1.0, (5,), np.float32)}
    return {"agents": spaces.Discrete(5)}


def reset(p: SimpleSpreadParams, key: torch.Tensor, num_envs: int) -> SimpleSpreadState:
    n = p.N
    draws = torch.arange(4 * n, device=key.device)
    u = rng.uniform_from_key(key.to(torch.int64)[:, None], draws, -1.0, 1.0)
    x, y, landmark_x, landmark_y = (v.contiguous() for v in u.chunk(4, dim=1))
    zeros = torch.zeros((num_envs, n), dtype=torch.float32, device=key.device)
    return SimpleSpreadState(
        x, y, zeros, zeros.clone(), landmark_x, landmark_y, torch.zeros(num_envs, dtype=torch.int32, device=key.device)
    )


def _constants(p: SimpleSpreadParams, device) -> tuple[torch.Tensor, torch.Tensor]:
    dist_min, reach2 = mpe.pair_constants(AGENT_SIZE, AGENT_SIZE)
    return (
        torch.full((p.N, p.N), dist_min, dtype=torch.float32, device=device),
        torch.full((p.N, p.N), reach2, dtype=torch.float32, device=device),
    )


def collisions(p: SimpleSpreadParams, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """int32 ``(E, N)``: the other agents closer to each agent than the sum of their sizes."""
    dist = mpe.distance(x[:, None, :] - x[:, :, None], y[:, None, :] - y[:, :, None])
    close = dist < mpe.f32(2 * AGENT_SIZE)
    close = close & ~torch.eye(p.N, dtype=torch.bool, device=x.device)
    return close.sum(dim=2, dtype=torch.int32)


def coverage(p: SimpleSpreadParams, s: SimpleSpreadState) -> torch.Tensor:
    """float32 ``(E,)``: the sum over landmarks of the nearest agent's distance (pairwise)."""
    d2 = mpe.squared_norm(s.x[:, None, :] - s.landmark_x[:, :, None], s.y[:, None, :] - s.landmark_y[:, :, None])
    return mpe.pairwise_sum(float32.sqrt(d2.min(dim=2).values))  # sqrt is monotonic: the nearest's distance


def step(p: SimpleSpreadParams, s: SimpleSpreadState, actions: torch.Tensor):
    ux, uy = mpe.action_force(actions, p.continuous_actions, mpe.f32(mpe.SENSITIVITY))
    dist_min, reach2 = _constants(p, s.x.device)
    fx, fy = mpe.contact_forces(s.x, s.y, ux, uy, dist_min, reach2)
    x, y, vx, vy = mpe.integrate(s.x, s.y, s.vx, s.vy, fx, fy)
    moved = SimpleSpreadState(x, y, vx, vy, s.landmark_x, s.landmark_y, s.t + 1)
    shared = -coverage(p, moved)
    local = -collisions(p, x, y).to(torch.float32)
    rewards = shared[:, None] * mpe.f32(1.0 - p.local_ratio) + local * mpe.f32(p.local_ratio)
    terminated = torch.zeros_like(moved.t, dtype=torch.bool)
    truncated = moved.t >= p.max_cycles
    return moved, rewards, terminated, truncated


def observe(p: SimpleSpreadParams, s: SimpleSpreadState) -> dict[str, torch.Tensor]:
    e, n = s.x.shape
    to_landmarks = torch.stack(
        [s.landmark_x[:, None, :] - s.x[:, :, None], s.landmark_y[:, None, :] - s.y[:, :, None]], 3
    )
    to_agents = torch.stack([s.x[:, None, :] - s.x[:, :, None], s.y[:, None, :] - s.y[:, :, None]], 3)
    rows, columns = mpe.other_agents(n, s.x.device)
    to_others = to_agents[:, rows, columns]  # (e, n, n - 1, 2): row i, the agents j != i in order
    obs = torch.cat(
        [
            torch.stack([s.vx, s.vy, s.x, s.y], 2),
            to_landmarks.reshape(e, n, 2 * n),
            to_others.reshape(e, n, 2 * (n - 1)),
            torch.zeros((e, n, COMM_DIM * (n - 1)), dtype=torch.float32, device=s.x.device),
        ],
        dim=2,
    )
    return {"agents": obs}


ONE_LANE_AGENTS = 4
"""A game of up to this many agents runs on one lane of the kernels (128 games a block; kernels/
simple_spread.cu's step_alone then steps it in registers). On an H200 at 65,536 games of 3 agents a
captured step took 11.4 µs on one lane and 13.8 on four, with Box actions 12.9 and 14.6, the
observations and rewards staged (``benchmarks/experiments/mpe_team_shape.py``, docs/benchmarks/mpe.md,
before step_alone; with it, 9.8-11.2 and 10.5-12.8 µs, Numba and CUDA C)."""


def kernel_constants(p: SimpleSpreadParams) -> dict:
    dist_min, reach2 = mpe.pair_constants(AGENT_SIZE, AGENT_SIZE)
    return {
        "NUM_AGENTS": p.N,
        "MAX_CYCLES": p.max_cycles,
        "CONTINUOUS_ACTIONS": p.continuous_actions,
        "OBS_DIM": p.obs_dim,
        "SUM_SLOTS": mpe.tree_slots(p.N),
        "SENSITIVITY": mpe.f32(mpe.SENSITIVITY),
        "DIST_MIN": dist_min,
        "REACH2": reach2,
        "COLLIDE_D2": mpe.below_sqrt(dist_min),
        "GLOBAL_WEIGHT": mpe.f32(1.0 - p.local_ratio),
        "LOCAL_RATIO": mpe.f32(p.local_ratio),
        **mpe.physics_constants(),
    }


SIMPLE_SPREAD = MultiAgentDefinition(
    id="SimpleSpread-v3",
    params_type=SimpleSpreadParams,
    state_type=SimpleSpreadState,
    agent_groups=agent_groups,
    observation_spaces=observation_spaces,
    action_spaces=action_spaces,
    reset=reset,
    step=step,
    observe=observe,
    kernel_constants=kernel_constants,
    block_threads=lambda p: mpe.team_threads(p, ONE_LANE_AGENTS),
    games_per_block=lambda p: mpe.games_per_block(p, ONE_LANE_AGENTS),
)
