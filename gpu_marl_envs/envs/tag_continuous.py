"""TagContinuous, batched: taggers chase runners in a square arena (``../shared/specs/tag.md``).

After WarpDrive's ``TagContinuous`` (Lan et al., JMLR 2022), with its races and CPU/GPU
disagreements fixed as the spec says. This module states the rules and defines the game
(``TAG_CONTINUOUS``) from its pieces:

- ``tag_continuous_params.py``: :class:`TagContinuousParams` and their checks, the state, agent
  types and groups, the spaces;
- ``tag_continuous_reference.py``: the torch reference (``reset``, ``step``, ``observe``), pure
  batched functions, float32 throughout, that run on CPU and GPU and never synchronise with the
  host (every one can be captured in a CUDA graph);
- ``tag_continuous_kernel_layout.py``: what the kernels are compiled and launched with (the
  neighbour search, the shared-memory layout and staging, launch bounds, ``kernel_constants``).

Kernels reproduce the reference; the float32 conventions below are their contract.

## Agents
``N = num_taggers + num_runners`` agents per env, in a fixed order: ids ``0 .. num_taggers - 1``
are taggers, ids ``num_taggers .. N - 1`` runners. ``agent_type(params)`` is the ``(N,)`` vector,
1 = tagger, 0 = runner. Two agent groups: ``taggers`` and ``runners``.

## Action space
Per agent ``MultiDiscrete([num_acceleration_levels + 1, num_turn_levels + 1])``, given as an int64
tensor ``(E, N, 2)``: (acceleration index, turn index). Index 0 is "no change" (a delta of 0);
index ``i >= 1`` selects ``linspace(min_acceleration, max_acceleration, num_acceleration_levels)[i - 1]``
(likewise for the turn, in radians). The table is numpy's float64 ``linspace`` rounded once to
float32 (:func:`~gpu_marl_envs.envs.tag_continuous_params.level_deltas`). Indices must be in range;
the runtime clamps them before the step.

## Observation space
``Box(obs_dim,)`` float32 per agent, returned as ``(E, N, obs_dim)``, **agent-major**: the 7
features of the first observed agent, then the 7 of the second, ..., then ``t / T`` last. For agent
``i`` observing agent ``j``:

| index (within the 7) | feature |
|---|---|
| 0 | ``(x_j - x_i) / (sqrt(2) * L)`` |
| 1 | ``(y_j - y_i) / (sqrt(2) * L)`` |
| 2 | ``(speed_j - speed_i) / (max_speed + 1e-10)`` |
| 3 | ``(acceleration_j - acceleration_i) / (max_speed + 1e-10)`` |
| 4 | ``(direction_j - direction_i) / (2 pi)`` |
| 5 | ``type_j`` (1 tagger, 0 runner) |
| 6 | ``in_game_j`` (1 or 0) |

- Full (``use_full_observation=True``): every other agent in id order (``i`` skipped):
  ``obs_dim = 7 (N - 1) + 1``.
- Partial (default): the ``k = num_other_agents_observed`` nearest other agents still in the game
  (by default 10, or ``N - 1`` where there are fewer others),
  nearest first, ties to the lowest id; slots left when fewer than ``k`` remain are all zeros:
  ``obs_dim = 7 k + 1``.
- An agent out of the game observes all zeros (the ``t / T`` feature included).

## Rewards
Per agent and step, added in this order to 0 (each addition rounded to float32; an addition that
does not apply is skipped, not an addition of 0):
1. its type's ``step_penalty_for_tagger`` / ``step_reward_for_runner`` if it was in the game at the
   start of the step;
2. ``edge_hit_penalty`` if its move left the arena (once, whichever edges);
3. a runner tagged this step: ``tag_penalty_for_runner``; a tagger: ``count * tag_reward_for_tagger``
   (one float32 product) where ``count`` is the number of runners it tagged this step;
4. at ``t == T``, a runner still in the game after the tags: ``end_of_game_reward_for_runner``.

## Starting state
Per env, from the env's own random key (so replicas differ): ``x``, ``y`` uniform in ``[0, L)``;
``direction`` uniform from ``{0, pi/2, pi, 3 pi/2}``; speed 0; acceleration 0; every agent in the
game; ``t = 0``.

## Episode end
Terminated (for every agent) when no runner is left in the game; truncated when ``t == T`` and not
terminated. A runner that left the game is individually done; the batched view keeps it, observing
zeros, frozen, with no rewards.

## Arguments
:class:`TagContinuousParams`; defaults are the published training configuration.

## Float32 conventions (every backend)
- Constants reach the step as float32, each rounded once from its float64 value: ``L``,
  ``2 pi = 6.2831854820251465`` (``float32(2 * math.pi)``, 1.7e-7 above 2 pi, equal to
  ``2 * float32(pi)``), ``pi / 2``, ``sqrt(2) * L``, ``max_speed + 1e-10``, ``max_speed * skill``
  per type, ``tagging_distance * L``.
- ``direction <- r`` where ``r = fmod(direction + turn, 2 pi)`` (exact), plus ``2 pi`` when
  negative, and 0 if that rounds up to ``2 pi``: always in ``[0, 2 pi)``.
- Squared distances are ``dx * dx + dy * dy`` with every operation rounded (no fused multiply-add;
  kernels use ``__fmul_rn``/``__fadd_rn`` or an equivalent). "Nearest" compares them; a tag needs
  ``sqrtf(d2) < tagging_distance * L`` (correctly rounded ``sqrtf``; the reference's
  :func:`gpu_marl_envs.float32.sqrt`, as torch's CPU float32 ``sqrt`` is not).
- Observation scalings are true IEEE divisions (not multiplications by a reciprocal:
  :func:`gpu_marl_envs.float32.divide`).

## Corrections to WarpDrive
- A tagger is paid once per runner it tags in a step; WarpDrive's unsynchronised ``+=`` lost all but
  one when several runners were tagged in the same step. Here tags are counted with an integer
  scatter-add (atomics on an integer count are exact and order-independent) and paid as one product.
- The count of runners in the game drops exactly by the number tagged (no lost updates).
- Each replica draws its own starting state (WarpDrive gave every replica the same start).
- Nearest-tagger and nearest-neighbour ties go to the lowest id, so every backend agrees.

## Kernels
``kernels/tag_continuous.cu`` (CUDA C) and ``kernels/tag_continuous_numba.py`` (Numba): a block
per env, agents spread over its threads (``a = threadIdx.x + k * blockDim.x``), positions and
in-game flags staged in shared memory (``tag_continuous_kernel_layout.shared_layout``), tag counts
with integer atomics, the partial observation's ``k`` nearest kept in a per-thread sorted list (no
``N x N`` scratch), found by scanning every agent in small games and on a grid of cells in large
ones (``tag_continuous_kernel_layout.search_grid_cells``), with the same result. See
``tag_continuous_kernel_layout.kernel_constants`` for what they are compiled with and
``docs/tag.md`` for the grid.

## Version history
v0: the spec's rules; torch reference, Numba and CUDA C kernels; the kernels' neighbour grid
(``neighbour_search``; observations unchanged).
"""

from __future__ import annotations

import torch

from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition, split_groups
from gpu_marl_envs.envs.tag_continuous_kernel_layout import block_threads, dynamic_shared_bytes, kernel_constants
from gpu_marl_envs.envs.tag_continuous_params import (
    TagContinuousParams,
    TagContinuousState,
    action_spaces,
    agent_groups,
    observation_spaces,
)
from gpu_marl_envs.envs.tag_continuous_reference import in_game, observe, reset, step


def observe_groups(p: TagContinuousParams, state) -> dict[str, torch.Tensor]:
    """:func:`observe` split by group, ``{group: (E, n_g, obs_dim)}`` (the runtime's form)."""
    return split_groups(agent_groups(p), observe(p, state))


TAG_CONTINUOUS = MultiAgentDefinition(
    id="TagContinuous-v0",
    params_type=TagContinuousParams,
    state_type=TagContinuousState,
    agent_groups=agent_groups,
    observation_spaces=observation_spaces,
    action_spaces=action_spaces,
    reset=reset,
    step=step,
    observe=observe_groups,
    in_game=in_game,
    kernel_constants=kernel_constants,
    constant_prefix="TC",
    dynamic_shared_bytes=dynamic_shared_bytes,
    block_threads=block_threads,
)
