"""MPE2's particle physics in float32, the torch reference every MPE game shares (twins:
``kernels/mpe.cuh``, ``kernels/mpe_numba.py``).

MPE2 1.1.1 (``mpe2/_mpe_utils/core.py``, ``simple_env.py``), per step, in float64:

1. **Action force**: ``u = sensitivity * (u_x, u_y)``, ``sensitivity`` the agent's ``accel`` (5 where
   it has none). Discrete action ``1``: ``u_x = -1``, ``2``: ``+1``, ``3``: ``u_y = -1``, ``4``: ``+1``
   (``0``: none); continuous ``a`` (clipped into ``[0, 1]``): ``u_x = a[2] - a[1]``, ``u_y = a[4] - a[3]``.
2. **Contact force** between every two colliding entities ``i < j``, with ``delta = p_i - p_j``,
   ``dist = |delta|``, ``penetration = logaddexp(0, -(dist - (size_i + size_j)) / margin) * margin``:
   ``contact_force * delta / dist * penetration`` on ``i`` if it moves, its negative on ``j``. An
   agent's force is its action force, then these added one entity at a time in entity order
   (agents, then landmarks).
3. **Integration** of movable entities: ``p += v * dt``; ``v = v * (1 - damping)``;
   ``v += force / mass * dt``; where ``|v| > max_speed``, ``v = v / |v| * max_speed``.
   ``dt = 0.1``, ``damping = 0.25``, ``contact_force = 100``, ``margin = 0.001``, ``mass = 1``.

Here, in float32 with every product and sum rounded where this module rounds it (kernels:
``__fmul_rn``/``__fadd_rn``, ``mul_rn``/``add_rn``), divisions and square roots correctly rounded:

- ``logaddexp(0, z) = max(z, 0) + log1p(exp(-|z|))``, with :func:`exp` and :func:`log1p_unit`
  written with additions, products and one division only (a Cody-Waite reduction and a degree-7
  polynomial; ``2 atanh(t / (2 + t))`` as a series): every backend computes the same bits, so the
  kernels match this reference exactly, transcendental functions included (a CUDA ``expf`` and
  torch's ``exp`` may differ by an ulp). Both stay within a few float32 ulps of the true values.
- A pair farther apart than its reach (``d2 >= (size_i + size_j + CONTACT_REACH)**2``) contributes
  an exact 0: its ``z < -87``, where :func:`exp` is 0. The kernels skip such pairs (the sum is the
  same), which is what lets a thousand agents run. MPE2's float64 force there is below 1e-40.
- ``mass`` is 1 in every scenario, so the force is not divided by it.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from gpu_marl_envs import float32

DT = 0.1
DAMPING = 0.25
CONTACT_FORCE = 100.0
CONTACT_MARGIN = 1e-3
SENSITIVITY = 5.0  # an agent's accel where it has none (simple_env._set_action)
# Beyond its sizes' sum plus this, a pair's penetration is an exact 0 in float32 (see the docstring).
CONTACT_REACH = 0.1
# exp(x) is taken as 0 below this (the smallest normal float32 is exp(-87.3)).
EXP_MIN = -87.0
# Cody-Waite: ln 2 = LN2_HI + LN2_LO, LN2_HI with 15 significant bits (n * LN2_HI is exact).
LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125
LN2_LO = 1.428606765330187e-06
# exp(r) on |r| <= ln(2) / 2: Taylor to r^7 (truncation below 3e-9), highest first.
EXP_COEFFICIENTS = tuple(1.0 / math.factorial(k) for k in range(7, -1, -1))
# log1p(t) = 2 atanh(u), u = t / (2 + t) <= 1/3: 2 (u + u^3 / 3 + ... + u^17 / 17), in w = u^2, highest first.
LOG1P_COEFFICIENTS = tuple(1.0 / k for k in range(17, 0, -2))


def f32(value: float) -> float:
    """A Python float holding the float32 nearest to ``value``, as every backend receives it."""
    return float(np.float32(value))


def physics_constants() -> dict:
    """The kernels' constants of this module (each float rounded once to float32)."""
    return {
        "DT": f32(DT),
        "VELOCITY_KEEP": f32(1.0 - DAMPING),
        "CONTACT_FORCE": f32(CONTACT_FORCE),
        "CONTACT_MARGIN": f32(CONTACT_MARGIN),
        "EXP_MIN": f32(EXP_MIN),
        "LOG2E": f32(LOG2E),
        "LN2_HI": f32(LN2_HI),
        "LN2_LO": f32(LN2_LO),
        "EXP_COEFFICIENTS": tuple(f32(v) for v in EXP_COEFFICIENTS),
        "LOG1P_COEFFICIENTS": tuple(f32(v) for v in LOG1P_COEFFICIENTS),
    }


@functools.lru_cache(maxsize=256)
def device_constant(values: tuple, device: torch.device) -> torch.Tensor:
    """float32 ``values`` (a tuple, nested for more dimensions) on ``device``, made once per device:
    a copy from the host cannot be captured in a CUDA graph, and the torch backend captures its step.
    Shared by every caller: read it, never write it."""
    return torch.tensor(values, dtype=torch.float32, device=device)


def other_agents(n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 ``(rows, columns)``, each ``(n, n - 1)``: row ``i`` lists the agents ``j != i`` in
    ascending order (``x[:, rows, columns]`` is each agent's view of the others). Integer indices,
    unlike a boolean mask, need no host synchronisation, so a CUDA graph can capture them."""
    k = torch.arange(n - 1, device=device)
    i = torch.arange(n, device=device)[:, None]
    return i.expand(n, n - 1), k + (k >= i)


def pair_constants(size_a: float, size_b: float) -> tuple[float, float]:
    """``(dist_min, reach2)`` of two entities, as float32: ``size_a + size_b`` (MPE2's float64 sum,
    rounded once) and the squared distance from which their contact force is an exact 0."""
    return f32(size_a + size_b), f32((size_a + size_b + CONTACT_REACH) ** 2)


def below_sqrt(bound: float) -> float:
    """The least float32 ``b2`` whose float32 square root is at least float32 ``bound``: as the square
    root is correctly rounded and monotone, ``sqrt(d2) < bound`` exactly where ``d2 < b2``, so that a
    kernel compares a squared distance without the root."""
    bound = np.float32(bound)
    b2 = np.float32(bound * bound)
    while np.sqrt(b2) >= bound:
        b2 = np.nextafter(b2, np.float32(0.0))
    while np.sqrt(b2) < bound:
        b2 = np.nextafter(b2, np.float32(np.inf))
    return float(b2)


def exp(x: torch.Tensor) -> torch.Tensor:
    """float32 ``e**x`` for ``x <= 3`` (0 below :data:`EXP_MIN`): ``2**n * p(r)`` with
    ``n = floor(x log2(e) + 1/2)``, ``r = x - n ln 2`` and ``p`` the Taylor polynomial."""
    n = torch.floor(x * f32(LOG2E) + 0.5)
    r = (x - n * f32(LN2_HI)) - n * f32(LN2_LO)
    p = torch.full_like(x, f32(EXP_COEFFICIENTS[0]))
    for coefficient in EXP_COEFFICIENTS[1:]:
        p = p * r + f32(coefficient)
    # 2**n as its bits (n within the normal exponents); the product by a power of two is exact.
    scale = ((n.clamp(-126, 127).to(torch.int32) + 127) << 23).view(torch.float32)
    return torch.where(x < f32(EXP_MIN), 0.0, p * scale)


def log1p_unit(t: torch.Tensor) -> torch.Tensor:
    """float32 ``log(1 + t)`` for ``t`` in ``[0, 1]``: ``2 atanh(u)``, ``u = t / (2 + t)``."""
    u = t / (t + 2.0)
    w = u * u
    p = torch.full_like(t, f32(LOG1P_COEFFICIENTS[0]))
    for coefficient in LOG1P_COEFFICIENTS[1:]:
        p = p * w + f32(coefficient)
    return (u * p) * 2.0


def penetration(gap: torch.Tensor) -> torch.Tensor:
    """``logaddexp(0, -gap / margin) * margin``, ``gap = dist - dist_min``."""
    z = float32.divide(-gap, CONTACT_MARGIN)
    softplus = z.clamp(min=0.0) + log1p_unit(exp(-z.abs()))
    return softplus * f32(CONTACT_MARGIN)


def squared_norm(dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """``dx * dx + dy * dy``, each operation rounded (MPE2's ``np.sum(np.square(delta))``)."""
    return dx * dx + dy * dy


def distance(dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return float32.sqrt(squared_norm(dx, dy))


def action_force(actions: torch.Tensor, continuous: bool, sensitivity: torch.Tensor | float):
    """The action force ``(u_x, u_y)``, each ``(E, n)``, of agents whose actions are ``actions``:
    Discrete int64 ``(E, n)`` (in range), or Box float32 ``(E, n, >= 5)`` (NaN already read as 0;
    clipped into ``[0, 1]`` here, as MPE2's ``ClipOutOfBoundsWrapper``). ``sensitivity``: float32
    per agent ``(n,)`` or one value."""
    if continuous:
        a = actions.clamp(0.0, 1.0)
        return (a[..., 2] - a[..., 1]) * sensitivity, (a[..., 4] - a[..., 3]) * sensitivity
    # A float sensitivity stays a Python scalar (torch.where takes it as float32 for float32
    # results): a tensor made from it would be a host-to-device copy.
    zero = torch.zeros((), dtype=torch.float32, device=actions.device)
    s = sensitivity
    ux = torch.where(actions == 1, -s, torch.where(actions == 2, s, zero))
    uy = torch.where(actions == 3, -s, torch.where(actions == 4, s, zero))
    return ux, uy


def contact_forces(
    x: torch.Tensor,
    y: torch.Tensor,
    fx: torch.Tensor,
    fy: torch.Tensor,
    dist_min: torch.Tensor,
    reach2: torch.Tensor,
    colliders: torch.Tensor | None = None,
):
    """``(fx, fy)`` of the first ``n`` entities (agents) with every contact force added, one
    entity at a time in entity order, to their action forces ``fx, fy`` ``(E, n)``.

    ``x, y``: ``(E, M)`` every entity's position (agents first); ``dist_min``, ``reach2``: float32
    ``(n, M)`` per pair (:func:`pair_constants`); ``colliders``: bool ``(M,)`` or None for all.
    The pair of an agent with itself contributes nothing."""
    n, m = fx.shape[1], x.shape[1]
    dx = x[:, :n, None] - x[:, None, :]  # (E, agent i, entity j): p_i - p_j
    dy = y[:, :n, None] - y[:, None, :]
    d2 = squared_norm(dx, dy)
    touching = (d2 < reach2) & ~torch.eye(n, m, dtype=torch.bool, device=x.device)
    if colliders is not None:
        touching = touching & colliders
    dist = float32.sqrt(d2)
    pen = penetration(dist - dist_min)
    force = f32(CONTACT_FORCE)
    term_x = torch.where(touching, (force * dx) / dist * pen, 0.0)
    term_y = torch.where(touching, (force * dy) / dist * pen, 0.0)
    for j in range(m):  # MPE2's order: one entity at a time (torch.sum's order is its own)
        fx = fx + term_x[:, :, j]
        fy = fy + term_y[:, :, j]
    return fx, fy


def integrate(x, y, vx, vy, fx, fy, max_speed: torch.Tensor | None = None):
    """One step of MPE2's integration of movable entities (mass 1): ``(x, y, vx, vy)``.
    ``max_speed``: float32 per agent ``(n,)``, or None (no cap)."""
    x = x + vx * f32(DT)
    y = y + vy * f32(DT)
    vx = vx * f32(1.0 - DAMPING) + fx * f32(DT)
    vy = vy * f32(1.0 - DAMPING) + fy * f32(DT)
    if max_speed is not None:
        speed = float32.sqrt(squared_norm(vx, vy))
        fast = speed > max_speed
        vx = torch.where(fast, (vx / speed) * max_speed, vx)
        vy = torch.where(fast, (vy / speed) * max_speed, vy)
    return x, y, vx, vy


def pairwise_sum(values: torch.Tensor) -> torch.Tensor:
    """The sum over the last dimension as the kernels' tree reduces it: zeros appended to a power of
    two ``P``, then ``v[k] += v[k + h]`` for ``h = P/2, P/4, ..., 1``."""
    n = values.shape[-1]
    size = 1 << max(n - 1, 0).bit_length()
    v = torch.nn.functional.pad(values, (0, size - n))
    while size > 1:
        size //= 2
        v = v[..., :size] + v[..., size : 2 * size]
    return v[..., 0]


def tree_slots(n: int) -> int:
    """The slots of :func:`pairwise_sum`'s tree for ``n`` values (a power of two)."""
    return 1 << max(n - 1, 0).bit_length()


PACKED_BLOCK_THREADS = 128
"""The CUDA C block of games of up to 32 agents: several games' teams (kernels/multi_agent.cuh). A
block per game of 3 agents left 29 of its 32 threads idle, and an SM holds at most 32 blocks: 96
agents at a time, where 128-thread blocks of 4-lane teams hold 512 games."""


MIN_TEAM_THREADS = 4
"""The fewest lanes of a packed game's team (a power of two): MPE2's default games have 2 to 4
agents. Not tuned against 8 or more (``benchmarks/experiments/mpe_team_shape.py`` measures it)."""


def team_threads(params, one_lane_agents: int = 0) -> int:
    """The MPE games' ``block_threads``, a game's lanes: one for a game of at most ``one_lane_agents``
    agents (a game whose kernel is written for it: SimpleSpread); else a power of two >= its agents (at
    least ``MIN_TEAM_THREADS``) up to 32; beyond 32 agents a thread per agent in whole warps, at most
    256 (a block per game)."""
    n = params.num_agents
    if n <= one_lane_agents:
        return 1
    return max(MIN_TEAM_THREADS, 1 << (n - 1).bit_length()) if n <= 32 else min(256, 32 * math.ceil(n / 32))


def games_per_block(params, one_lane_agents: int = 0) -> int:
    """The MPE games' ``games_per_block``: 128-thread blocks of teams up to 32 lanes, else one."""
    threads = team_threads(params, one_lane_agents)
    return PACKED_BLOCK_THREADS // threads if threads <= 32 else 1


SM_THREADS = 2048
"""The threads an SM of sm_80 and sm_90 holds at once."""


def min_blocks_per_sm(params) -> int:
    """A step kernel's launch bounds' blocks per SM (``MIN_BLOCKS``) for a game whose unbounded step
    takes too many registers for a full SM: for packed games, as many 128-thread blocks as an SM
    holds (16), which caps the registers at 32 a thread; a block per game, 1 (no cap). SimpleTag
    takes it: unbounded, its CUDA C step took 55 registers (ptxas -v, sm_90), 32 without a spill
    when capped, and at 65,536 games on an H200 its step went from 29.8 to 28.4 µs (CUDA C) and 32.0
    to 31.0 (Numba). SimpleSpread does not: its 36 registers capped at 32 gained nothing there
    (docs/benchmarks/mpe.md, "Launch bounds")."""
    return SM_THREADS // PACKED_BLOCK_THREADS if games_per_block(params) > 1 else 1
