"""TagContinuous's torch reference: ``reset``, ``step`` and ``observe``, pure batched functions,
float32 throughout, that run on CPU and GPU and never synchronise with the host (every function here
can be captured in a CUDA graph). The kernels reproduce it; the rules and float32 conventions are in
:mod:`gpu_marl_envs.envs.tag_continuous`'s docstring.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gpu_marl_envs import float32, rng
from gpu_marl_envs.envs.tag_continuous_params import (
    TagContinuousParams,
    TagContinuousState,
    _f32,
    agent_type,
    level_deltas,
)


def runners_in_game(p: TagContinuousParams, state: TagContinuousState) -> torch.Tensor:
    """int32 ``(E,)``: how many runners are still in the game."""
    return state.in_game[:, p.num_taggers :].sum(dim=1, dtype=torch.int32)


def in_game(p: TagContinuousParams, state: TagContinuousState) -> torch.Tensor:
    return state.in_game


def reset(p: TagContinuousParams, key: torch.Tensor, num_envs: int) -> TagContinuousState:
    """A fresh state per env from ``key`` (``(E,)`` int64, :func:`rng.key_hash` of seed and episode).

    Draw indices (``N`` agents, agent ``a``): ``x_a`` is draw ``a``, ``y_a`` draw ``N + a``, and the
    direction index of ``a`` is ``floor`` of draw ``2N + a`` taken uniform in ``[0, 4)`` (at most
    ``4 - 2**-22`` as float32, so the index is in 0..3); ``direction = index * float32(pi / 2)``.
    """
    if key.shape != (num_envs,):
        raise ValueError(f"key must have shape ({num_envs},), got {tuple(key.shape)}")
    n = p.num_agents
    device = key.device
    draws = torch.arange(n, device=device, dtype=torch.int64)
    k = key.to(torch.int64)[:, None]
    length = _f32(p.grid_length)
    x = rng.uniform_from_key(k, draws, 0.0, length)
    y = rng.uniform_from_key(k, draws + n, 0.0, length)
    quarter = torch.floor(rng.uniform_from_key(k, draws + 2 * n, 0.0, 4.0))
    direction = quarter * _f32(p.half_pi)
    zeros = torch.zeros((num_envs, n), dtype=torch.float32, device=device)
    return TagContinuousState(
        x=x,
        y=y,
        direction=direction,
        speed=zeros,
        acceleration=zeros.clone(),
        in_game=torch.ones((num_envs, n), dtype=torch.bool, device=device),
        t=torch.zeros(num_envs, dtype=torch.int32, device=device),
    )


def _per_type(is_tagger: torch.Tensor, tagger_value: float, runner_value: float) -> torch.Tensor:
    return torch.where(is_tagger, _f32(tagger_value), _f32(runner_value))


def _wrap_angle(p: TagContinuousParams, angle: torch.Tensor) -> torch.Tensor:
    # fmod is exact; torch.remainder need not be on every device. Adding 2 pi to a tiny negative
    # remainder can round to 2 pi itself, which is 0 again.
    two_pi = _f32(p.two_pi)
    r = torch.fmod(angle, two_pi)
    r = torch.where(r < 0, r + two_pi, r)
    return torch.where(r == two_pi, 0.0, r)


def _squared_distance(dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return dx * dx + dy * dy


def step(p: TagContinuousParams, state: TagContinuousState, actions: torch.Tensor):
    """One step of every env: ``(next_state, rewards (E, N) float32, terminated (E,), truncated (E,))``.

    ``actions``: int64 ``(E, N, 2)``, (acceleration index, turn index), in range. Pure: ``state``
    is not modified. The numbers below are the spec's steps.
    """
    g = p.num_taggers
    in_game = state.in_game  # at the start of the step
    is_tagger = agent_type(p, in_game.device).bool()

    # 1.
    t = state.t + 1

    # 2. Movement, for agents in the game; the others are frozen.
    d_acc = level_deltas(p.min_acceleration, p.max_acceleration, p.num_acceleration_levels, actions[..., 0])
    d_turn = level_deltas(p.min_turn, p.max_turn, p.num_turn_levels, actions[..., 1])
    direction = _wrap_angle(p, state.direction + d_turn)
    acceleration = state.acceleration + d_acc
    max_speed = _per_type(is_tagger, p.max_speed_tagger, p.max_speed_runner)
    speed = torch.minimum((state.speed + acceleration).clamp(min=0.0), max_speed)
    acceleration = torch.where((speed == 0.0) | (speed == max_speed), 0.0, acceleration)
    x = state.x + speed * torch.cos(direction)
    y = state.y + speed * torch.sin(direction)
    length = _f32(p.grid_length)
    edge_hit = in_game & ((x < 0.0) | (x > length) | (y < 0.0) | (y > length))
    x = x.clamp(0.0, length)
    y = y.clamp(0.0, length)
    direction = torch.where(in_game, direction, state.direction)
    acceleration = torch.where(in_game, acceleration, state.acceleration)
    speed = torch.where(in_game, speed, state.speed)
    x = torch.where(in_game, x, state.x)
    y = torch.where(in_game, y, state.y)

    # 3. Step rewards and edge hits.
    rewards = torch.where(in_game, _per_type(is_tagger, p.step_penalty_for_tagger, p.step_reward_for_runner), 0.0)
    rewards = torch.where(edge_hit, rewards + _f32(p.edge_hit_penalty), rewards)

    # 4. Tagging: each runner in the game against its nearest tagger in the game (a tagger is never
    # out of the game in play; one set out by hand is frozen and tags no one). argmin returns the
    # first minimum: ties go to the lowest id.
    dx = x[:, g:, None] - x[:, None, :g]  # (E, runners, taggers)
    dy = y[:, g:, None] - y[:, None, :g]
    d2 = torch.where(in_game[:, None, :g], _squared_distance(dx, dy), math.inf)
    nearest = d2.argmin(dim=2)
    nearest_d2 = d2.gather(2, nearest[:, :, None])[:, :, 0]
    tagged = in_game[:, g:] & (float32.sqrt(nearest_d2) < _f32(p.tagging_radius))
    # Several runners can name the same tagger: count them with an integer scatter-add (exact and
    # order-independent, as the kernels' integer atomics are) and pay the count as one product.
    tags = torch.zeros_like(in_game[:, :g], dtype=torch.int32).scatter_add_(1, nearest, tagged.to(torch.int32))
    tagger_rewards = rewards[:, :g]
    tagger_rewards = torch.where(
        tags > 0, tagger_rewards + tags.to(torch.float32) * _f32(p.tag_reward_for_tagger), tagger_rewards
    )
    runner_rewards = rewards[:, g:]
    runner_rewards = torch.where(tagged, runner_rewards + _f32(p.tag_penalty_for_runner), runner_rewards)
    if p.runner_exits_game_after_tagged:
        # A runner out of the game has speed 0; speed 0 is a bound, so its acceleration is 0 too.
        exited = torch.cat([torch.zeros_like(in_game[:, :g]), tagged], dim=1)
        in_game = in_game & ~exited
        speed = torch.where(exited, 0.0, speed)
        acceleration = torch.where(exited, 0.0, acceleration)

    # 5. End of the game: runners still in it are paid.
    last_step = t == p.episode_length
    survived = last_step[:, None] & in_game[:, g:]
    runner_rewards = torch.where(survived, runner_rewards + _f32(p.end_of_game_reward_for_runner), runner_rewards)
    rewards = torch.cat([tagger_rewards, runner_rewards], dim=1)

    # 6.
    terminated = ~in_game[:, g:].any(dim=1)
    truncated = last_step & ~terminated
    next_state = TagContinuousState(
        x=x, y=y, direction=direction, speed=speed, acceleration=acceleration, in_game=in_game, t=t
    )
    return next_state, rewards, terminated, truncated


def _features(p: TagContinuousParams, state: TagContinuousState, j: torch.Tensor) -> torch.Tensor:
    """float32 ``(E, N, M, 7)``: agent ``i``'s features of agents ``j[e, i, m]`` (int64 ``(E, N, M)``)."""
    e, n, m = j.shape
    flat = j.reshape(e, n * m)

    def pair(v: torch.Tensor):
        return v.gather(1, flat).reshape(e, n, m), v[:, :, None]

    (xj, xi), (yj, yi) = pair(state.x), pair(state.y)
    (sj, si), (aj, ai) = pair(state.speed), pair(state.acceleration)
    dj, di = pair(state.direction)
    type_j = agent_type(p, j.device).to(torch.float32)[j]
    in_game_j = state.in_game.gather(1, flat).reshape(e, n, m).to(torch.float32)
    return torch.stack(
        [
            float32.divide(xj - xi, p.position_scale),
            float32.divide(yj - yi, p.position_scale),
            float32.divide(sj - si, p.speed_scale),
            float32.divide(aj - ai, p.speed_scale),
            float32.divide(dj - di, p.two_pi),
            type_j,
            in_game_j,
        ],
        dim=-1,
    )


def _nearest_others(p: TagContinuousParams, state: TagContinuousState) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest other agents in the game per agent, nearest first, ties to the lowest id:
    ids int64 ``(E, N, k)`` and whether the slot holds one (bool ``(E, N, k)``).

    The order is exactly lexicographic on (squared distance, id): a non-negative float32's bits,
    read as an integer, order like the float, so ``bits(d2) << 32 | id`` is an int64 key whose
    ``k`` smallest (``topk``, keys all distinct) are the answer. Self and agents out of the game get
    ``d2 = inf``, which marks an empty slot.
    """
    n = p.num_agents
    device = state.x.device
    ids = torch.arange(n, device=device)
    dx = state.x[:, None, :] - state.x[:, :, None]  # [e, i, j] = x_j - x_i
    dy = state.y[:, None, :] - state.y[:, :, None]
    candidate = state.in_game[:, None, :] & (ids[:, None] != ids[None, :])
    d2 = torch.where(candidate, _squared_distance(dx, dy), math.inf)
    keys = (d2.view(torch.int32).to(torch.int64) << 32) | ids
    keys = torch.topk(keys, p.num_other_agents_observed, dim=2, largest=False, sorted=True).values
    inf_bits = int(np.float32(np.inf).view(np.int32))
    return keys & 0xFFFFFFFF, (keys >> 32) < inf_bits


def observe(p: TagContinuousParams, state: TagContinuousState) -> torch.Tensor:
    """float32 ``(E, N, obs_dim)``, agent-major (see :mod:`gpu_marl_envs.envs.tag_continuous`)."""
    e, n = state.x.shape
    device = state.x.device
    if p.use_full_observation:
        # Row i: the ids other than i, ascending.
        others = torch.arange(n - 1, device=device)[None, :]
        others = others + (others >= torch.arange(n, device=device)[:, None]).to(others.dtype)
        features = _features(p, state, others.expand(e, n, n - 1))
    else:
        j, found = _nearest_others(p, state)
        features = torch.where(found[..., None], _features(p, state, j), 0.0)
    time = float32.divide(state.t.to(torch.float32), p.episode_length)
    obs = torch.cat([features.reshape(e, n, -1), time[:, None, None].expand(e, n, 1)], dim=2)
    return torch.where(state.in_game[..., None], obs, 0.0)
