"""SimpleSpeakerListener-v4: MPE2 1.1.1's ``simple_speaker_listener_v4`` (cooperative
communication), batched.

A speaker, who cannot move, sees which of three landmarks is the goal and says one of three words;
the listener hears it and must move to the goal. This module is the torch reference (float32, pure,
batched; :mod:`mpe_physics` holds the physics the MPE games share); the kernels
(``kernels/simple_speaker_listener.cu``, ``kernels/simple_speaker_listener_numba.py``) reproduce it
bit for bit.

## Agents
Two groups of one: ``speakers`` (``speaker_0``, id 0: immovable, speaks) and ``listeners``
(``listener_0``, id 1: moves, silent), MPE2's names and order. Nothing collides.

## Action space
``speaker_0``: ``Discrete(3)``, the word said (its utterance becomes that one-hot vector).
``listener_0``: ``Discrete(5)`` (no action, left, right, down, up; force ``5 * u``).
With ``continuous_actions=True`` (MPE2's continuous mode): ``speaker_0`` ``Box(0, 1, (3,))``, the
utterance itself, and ``listener_0`` ``Box(0, 1, (5,))``, the force ``5 * (a[2] - a[1], a[4] - a[3])``;
both clipped into ``[0, 1]`` (MPE2's ``ClipOutOfBoundsWrapper``; a NaN component reads as 0). The
groups' widths differ: the actions buffer is ``(E, 2, 5)``, the speaker's row using its first 3
values.

## Observation space
``speaker_0``: ``Box(-inf, inf, (3,))``, the goal landmark's colour (red ``(0.65, 0.15, 0.15)``,
green ``(0.15, 0.65, 0.15)`` or blue ``(0.15, 0.15, 0.65)``, landmarks 0, 1, 2).
``listener_0``: ``Box(-inf, inf, (11,))``, its velocity (2), each landmark's position minus its own
(6), the speaker's utterance (3).

## Rewards
Both: minus the squared distance from the listener to the goal landmark, after the move
(``dx * dx + dy * dy``, each operation rounded).

## Starting state
From the env's counter-based key: the speaker and the listener uniform in ``[-1, 1)^2`` (agent
``a``: draws ``a``, ``2 + a``), the landmarks too (landmark ``l``: draws ``4 + l``, ``7 + l``), the goal
``min(floor(uniform(0, 3)), 2)`` (draw 10); velocities and the utterance 0.

## Episode end
Never terminated; truncated after ``max_cycles`` steps.

## Arguments
:class:`SimpleSpeakerListenerParams`: MPE2's ``max_cycles``, ``continuous_actions``,
``dynamic_rescaling`` (rendering only; kept for MPE2's signature).

## Parity with MPE2
- Rules, layouts and spaces are MPE2's, in float32 where MPE2 uses float64 (``tests/test_mpe_twins.py``:
  within ``1e-5 + 1e-5 |value|`` from identical states).
- The goal is drawn from the framework's RNG (uniform over the three landmarks, as MPE2's
  ``np_random.integers(3)``).
- ``benchmark_data`` and rendering are not carried over.

## Kernels
A game runs on one thread, 128 games a block (``ONE_LANE_AGENTS``): its step loads everything it reads
at once and works in registers, and the observations read what it left in shared memory.

## Version history
v4: MPE2 1.1.1's ``simple_speaker_listener_v4``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import rng
from gpu_marl_envs.envs import mpe_physics as mpe
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition

NUM_LANDMARKS = 3
COMM_DIM = 3  # MPE2's world.dim_c: the speaker's words
LANDMARK_COLORS = ((0.65, 0.15, 0.15), (0.15, 0.65, 0.15), (0.15, 0.15, 0.65))
LISTENER_OBS_DIM = 2 + 2 * NUM_LANDMARKS + COMM_DIM
GOAL_DRAW = 10  # after the agents' (0..3) and the landmarks' (4..9) positions


@dataclass(frozen=True)
class SimpleSpeakerListenerParams:
    max_cycles: int = 25
    continuous_actions: bool = False
    dynamic_rescaling: bool = True

    def __post_init__(self):
        name = type(self).__name__
        if (
            isinstance(self.max_cycles, bool)
            or not isinstance(self.max_cycles, (int, np.integer))
            or self.max_cycles < 1
        ):
            raise ValueError(f"{name}.max_cycles must be an int >= 1, got {self.max_cycles!r}")
        for field in ("continuous_actions", "dynamic_rescaling"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"{name}.{field} must be a bool, got {getattr(self, field)!r}")

    @property
    def num_agents(self) -> int:
        return 2

    @property
    def episode_length(self) -> int:
        return self.max_cycles


@dataclass
class SimpleSpeakerListenerState:
    x: torch.Tensor  # float32 (E, 2): the speaker's position (it never moves), the listener's
    y: torch.Tensor
    vx: torch.Tensor  # float32 (E, 2): velocities (the speaker's stays 0)
    vy: torch.Tensor
    landmark_x: torch.Tensor  # float32 (E, 3)
    landmark_y: torch.Tensor
    goal: torch.Tensor  # int32 (E,): the goal landmark
    comm: torch.Tensor  # float32 (E, 3): the speaker's utterance
    t: torch.Tensor  # int32 (E,): steps since reset


def agent_groups(p) -> dict[str, range]:
    return {"speakers": range(0, 1), "listeners": range(1, 2)}


def observation_spaces(p) -> dict[str, spaces.Box]:
    return {
        "speakers": spaces.Box(-np.inf, np.inf, (3,), np.float32),
        "listeners": spaces.Box(-np.inf, np.inf, (LISTENER_OBS_DIM,), np.float32),
    }


def action_spaces(p) -> dict[str, spaces.Space]:
    if p.continuous_actions:
        return {
            "speakers": spaces.Box(0.0, 1.0, (COMM_DIM,), np.float32),
            "listeners": spaces.Box(0.0, 1.0, (5,), np.float32),
        }
    return {"speakers": spaces.Discrete(COMM_DIM), "listeners": spaces.Discrete(5)}


def reset(p, key: torch.Tensor, num_envs: int) -> SimpleSpeakerListenerState:
    device = key.device
    k = key.to(torch.int64)[:, None]
    u = rng.uniform_from_key(k, torch.arange(GOAL_DRAW, device=device), -1.0, 1.0)
    goal = torch.floor(rng.uniform_from_key(k, torch.full((1,), GOAL_DRAW, device=device), 0.0, 3.0))
    zeros = torch.zeros((num_envs, 2), dtype=torch.float32, device=device)
    return SimpleSpeakerListenerState(
        u[:, 0:2].contiguous(),
        u[:, 2:4].contiguous(),
        zeros,
        zeros.clone(),
        u[:, 4:7].contiguous(),
        u[:, 7:10].contiguous(),
        goal[:, 0].clamp(max=NUM_LANDMARKS - 1).to(torch.int32),
        torch.zeros((num_envs, COMM_DIM), dtype=torch.float32, device=device),
        torch.zeros(num_envs, dtype=torch.int32, device=device),
    )


def step(p, s: SimpleSpeakerListenerState, actions: torch.Tensor):
    if p.continuous_actions:  # (E, 2, 5): the speaker's utterance is its row's first COMM_DIM values
        comm = actions[:, 0, :COMM_DIM].clamp(0.0, 1.0)
    else:
        # One-hot by comparison: F.one_hot checks its values on the host (a synchronisation) on the CPU.
        comm = (actions[:, 0, None] == torch.arange(COMM_DIM, device=actions.device)).to(torch.float32)
    ux, uy = mpe.action_force(actions[:, 1:], p.continuous_actions, mpe.f32(mpe.SENSITIVITY))
    x, y, vx, vy = mpe.integrate(s.x[:, 1:], s.y[:, 1:], s.vx[:, 1:], s.vy[:, 1:], ux, uy)
    x, y = torch.cat([s.x[:, :1], x], 1), torch.cat([s.y[:, :1], y], 1)
    vx, vy = torch.cat([s.vx[:, :1], vx], 1), torch.cat([s.vy[:, :1], vy], 1)
    moved = SimpleSpeakerListenerState(x, y, vx, vy, s.landmark_x, s.landmark_y, s.goal, comm, s.t + 1)
    goal = s.goal.long()[:, None]
    d2 = mpe.squared_norm(x[:, 1] - s.landmark_x.gather(1, goal)[:, 0], y[:, 1] - s.landmark_y.gather(1, goal)[:, 0])
    rewards = (-d2)[:, None].expand(-1, 2).contiguous()
    return moved, rewards, torch.zeros_like(moved.t, dtype=torch.bool), moved.t >= p.max_cycles


def observe(p, s: SimpleSpeakerListenerState) -> dict[str, torch.Tensor]:
    colors = mpe.device_constant(LANDMARK_COLORS, s.x.device)
    to_landmarks = torch.stack([s.landmark_x - s.x[:, 1:], s.landmark_y - s.y[:, 1:]], 2).flatten(1)
    listener = torch.cat([s.vx[:, 1:], s.vy[:, 1:], to_landmarks, s.comm], 1)
    return {"speakers": colors[s.goal.long()][:, None, :], "listeners": listener[:, None, :]}


ONE_LANE_AGENTS = 2
"""A game runs on one lane of the kernels (128 games a block), which steps it in registers and leaves
what the observations read in shared memory. Captured on an H200 (CUDA C / Numba, Discrete), 4-lane
teams, whose lane 0 stepped the game, took 3.53 / 4.46 µs a step at 2,000 games and 7.07 / 8.16 at
65,536; one lane 2.23 / 3.19 and 4.32 / 5.58 (docs/benchmarks/mpe.md, "Speaker-listener on one lane")."""


def kernel_constants(p) -> dict:
    return {
        "MAX_CYCLES": p.max_cycles,
        "CONTINUOUS_ACTIONS": p.continuous_actions,
        "NUM_LANDMARKS": NUM_LANDMARKS,
        "COMM_DIM": COMM_DIM,
        "GOAL_DRAW": GOAL_DRAW,
        "SENSITIVITY": mpe.f32(mpe.SENSITIVITY),
        "LANDMARK_COLORS": tuple(mpe.f32(v) for color in LANDMARK_COLORS for v in color),
        **mpe.physics_constants(),
    }


SIMPLE_SPEAKER_LISTENER = MultiAgentDefinition(
    id="SimpleSpeakerListener-v4",
    params_type=SimpleSpeakerListenerParams,
    state_type=SimpleSpeakerListenerState,
    agent_groups=agent_groups,
    observation_spaces=observation_spaces,
    action_spaces=action_spaces,
    reset=reset,
    step=step,
    observe=observe,
    kernel_constants=kernel_constants,
    block_threads=lambda p: mpe.team_threads(p, ONE_LANE_AGENTS),
    games_per_block=lambda p: mpe.games_per_block(p, ONE_LANE_AGENTS),
    state_ranges=lambda p: {"goal": (0, NUM_LANDMARKS - 1)},
)
