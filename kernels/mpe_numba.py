"""MPE2's particle physics in float32 for the MPE games' Numba kernels: the twin of kernels/mpe.cuh
and of the reference gpu_marl_envs/envs/mpe_physics.py (whose docstring gives MPE2's rules and the
float32 formulation). Products and sums that the reference rounds go through ``mul_rn``/``add_rn``;
divisions are float32 ``/``; exp and log1p are written with those operations only, so every backend
computes the same bits. The constants are the reference's (``physics_constants``), rounded once.
"""

import math

import numpy as np
from gpu_marl_envs.kernels.multi_agent_numba import nan_to_zero, team_functions
from gpu_marl_envs.kernels.numba_api import I64, U, add_rn, cuda, inline_device, int_as_float, mul_rn
from numba import int32

from gpu_marl_envs.envs.mpe_physics import physics_constants

_C = physics_constants()
DT = np.float32(_C["DT"])
VELOCITY_KEEP = np.float32(_C["VELOCITY_KEEP"])
CONTACT_FORCE = np.float32(_C["CONTACT_FORCE"])
CONTACT_MARGIN = np.float32(_C["CONTACT_MARGIN"])
EXP_MIN = np.float32(_C["EXP_MIN"])
LOG2E = np.float32(_C["LOG2E"])
LN2_HI = np.float32(_C["LN2_HI"])
LN2_LO = np.float32(_C["LN2_LO"])
EXP_COEFFICIENTS = np.array(_C["EXP_COEFFICIENTS"], dtype=np.float32)
LOG1P_COEFFICIENTS = np.array(_C["LOG1P_COEFFICIENTS"], dtype=np.float32)
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
TWO = np.float32(2.0)
HALF = np.float32(0.5)


@cuda.jit(device=True)
def mpe_exp(x):
    """e**x for x <= 3, 0 below EXP_MIN (mpe.cuh's mpe_exp)."""
    n = np.float32(math.floor(add_rn(mul_rn(x, LOG2E), HALF)))
    r = add_rn(add_rn(x, -mul_rn(n, LN2_HI)), -mul_rn(n, LN2_LO))
    p = EXP_COEFFICIENTS[0]
    for k in range(1, EXP_COEFFICIENTS.shape[0]):
        p = add_rn(mul_rn(p, r), EXP_COEFFICIENTS[k])
    e = min(max(int32(n), int32(-126)), int32(127))
    if x < EXP_MIN:
        return ZERO
    return mul_rn(p, int_as_float(int32((e + int32(127)) << int32(23))))


@cuda.jit(device=True)
def quotient_by_sum(t, d):
    """t / d for d = t + 2 rounded (t >= 0) without the division's slow path (mpe.cuh's
    mpe_quotient_by_sum, which says why it rounds as IEEE's division)."""
    if d == TWO:
        return mul_rn(t, HALF)
    return t / d


@cuda.jit(device=True)
def log1p_unit(t):
    """log(1 + t) for t in [0, 1]: 2 atanh(u), u = t / (2 + t)."""
    u = quotient_by_sum(t, add_rn(t, TWO))
    w = mul_rn(u, u)
    p = LOG1P_COEFFICIENTS[0]
    for k in range(1, LOG1P_COEFFICIENTS.shape[0]):
        p = add_rn(mul_rn(p, w), LOG1P_COEFFICIENTS[k])
    return mul_rn(mul_rn(u, p), TWO)


@cuda.jit(device=True)
def penetration(gap):
    """logaddexp(0, -gap / margin) * margin."""
    z = -gap / CONTACT_MARGIN
    return mul_rn(add_rn(max(z, ZERO), log1p_unit(mpe_exp(-abs(z)))), CONTACT_MARGIN)


@cuda.jit(device=True)
def squared_norm(dx, dy):
    return add_rn(mul_rn(dx, dx), mul_rn(dy, dy))


@cuda.jit(device=True)
def contact_force(dx, dy, dist_min, reach2):
    """``(touching, tx, ty)``: the contact force on body i of a pair at p_i - p_j = (dx, dy), and
    False (no force) beyond its reach (``d2 >= reach2``: an exact 0 there); body j's is exactly
    ``(-tx, -ty)`` (mpe.cuh's mpe_contact)."""
    d2 = squared_norm(dx, dy)
    if not d2 < reach2:
        return False, ZERO, ZERO
    tx, ty = contact_within_reach(dx, dy, d2, dist_min)
    return True, tx, ty


@cuda.jit(device=True)
def contact_within_reach(dx, dy, d2, dist_min):
    """:func:`contact_force`'s ``(tx, ty)`` of a pair within its reach, ``d2`` its squared distance."""
    dist = np.float32(math.sqrt(d2))
    pen = penetration(add_rn(dist, -dist_min))
    return mul_rn(mul_rn(CONTACT_FORCE, dx) / dist, pen), mul_rn(mul_rn(CONTACT_FORCE, dy) / dist, pen)


def contacts(n: int):
    """A device function ``add(x, y, dist_min, reach2, fx, fy)`` that adds every contact force among
    ``n`` bodies held in one lane's local arrays (a game stepped on one lane) to ``fx``, ``fy``: pair
    (a, j), a < j, adds (tx, ty) to body a's and (-tx, -ty) to body j's, in the pairs' order. The lane
    computes the force once for each pair within its reach, a pair a round (mpe.cuh's mpe_add_contacts,
    which says what it saves)."""
    if n * (n - 1) // 2 > 32:
        raise ValueError(f"{n} bodies have more pairs than a word has bits")

    @inline_device
    def add(x, y, dist_min, reach2, fx, fy):
        reaching = U(0)  # bit p: pair p (in the pairs' order) is within its reach
        p = U(0)
        for a in range(n):
            for j in range(a + 1, n):
                if squared_norm(x[a] - x[j], y[a] - y[j]) < reach2:
                    reaching |= U(U(1) << p)
                p = U(p + U(1))
        while reaching != U(0):
            q = U(cuda.ffs(reaching) - U(1))  # the lowest pair left
            reaching &= U(reaching - U(1))
            dx, dy = ZERO, ZERO
            p = U(0)
            for a in range(n):
                for j in range(a + 1, n):
                    if p == q:
                        dx, dy = x[a] - x[j], y[a] - y[j]
                    p = U(p + U(1))
            tx, ty = contact_within_reach(dx, dy, squared_norm(dx, dy), dist_min)
            p = U(0)
            for a in range(n):
                for j in range(a + 1, n):
                    if p == q:
                        fx[a] = add_rn(fx[a], tx)
                        fy[a] = add_rn(fy[a], ty)
                        fx[j] = add_rn(fx[j], -tx)
                        fy[j] = add_rn(fy[j], -ty)
                    p = U(p + U(1))

    return add


@cuda.jit(device=True)
def contact(dx, dy, dist_min, reach2, fx, fy):
    """``(fx, fy)`` plus the contact force of a pair at p_i - p_j = (dx, dy) (:func:`contact_force`)."""
    touching, tx, ty = contact_force(dx, dy, dist_min, reach2)
    if touching:
        return add_rn(fx, tx), add_rn(fy, ty)
    return fx, fy


@cuda.jit(device=True)
def discrete_action_force(actions, e, a, sensitivity):
    """Agent a's action force from a Discrete action (int64 ``actions[e, a]``, clamped into 0..4)."""
    k = min(max(actions[e, a], 0), 4)
    ux = -sensitivity if k == 1 else (sensitivity if k == 2 else ZERO)
    uy = -sensitivity if k == 3 else (sensitivity if k == 4 else ZERO)
    return ux, uy


@cuda.jit(device=True)
def unit(v):
    """A Box action component: NaN read as 0, clipped into [0, 1]."""
    return min(max(nan_to_zero(np.float32(v)), ZERO), ONE)


@cuda.jit(device=True)
def continuous_action_force(actions, e, a, sensitivity):
    """Agent a's action force from a Box action (float32 ``actions[e, a, :]``, components 1..4)."""
    ux = mul_rn(add_rn(unit(actions[e, a, 2]), -unit(actions[e, a, 1])), sensitivity)
    uy = mul_rn(add_rn(unit(actions[e, a, 4]), -unit(actions[e, a, 3])), sensitivity)
    return ux, uy


@cuda.jit(device=True)
def integrate(x, y, vx, vy, fx, fy, max_speed):
    """MPE2's integration (mass 1), then the speed cap where max_speed > 0: ``(x, y, vx, vy)``."""
    x = add_rn(x, mul_rn(vx, DT))
    y = add_rn(y, mul_rn(vy, DT))
    vx = add_rn(mul_rn(vx, VELOCITY_KEEP), mul_rn(fx, DT))
    vy = add_rn(mul_rn(vy, VELOCITY_KEEP), mul_rn(fy, DT))
    if max_speed > ZERO:
        speed = np.float32(math.sqrt(squared_norm(vx, vy)))
        if speed > max_speed:
            vx = mul_rn(vx / speed, max_speed)
            vy = mul_rn(vy / speed, max_speed)
    return x, y, vx, vy


def team_phases(c):
    """``(stage, stage_bodies, observe_body, tree_sum)``, the phases that share a game's values
    through its team's shared memory, for the team the kernels give a game
    (``multi_agent_numba.team_functions(c)``)."""
    _, lane, lanes, sync = team_functions(c)

    @cuda.jit(device=True)
    def tree_sum(sums, slots):
        """The team's tree sum of ``sums[:slots]`` into ``sums[0]`` (mpe.cuh's mpe_tree_sum); starts
        and ends with the team synchronised."""
        sync()
        h = U(U(slots) // U(2))  # unsigned: k + h an int64 index would pay a wraparound's select
        while h > U(0):
            k = lane()
            while k < h:
                sums[k] = add_rn(sums[k], sums[U(k + h)])
                k = U(k + lanes())
            sync()
            h = U(h // U(2))

    @cuda.jit(device=True)
    def stage_bodies(x, y, vx, vy, place_x, place_y, e, n, places, bodies):
        """Game e's bodies into the team's shared row ``bodies`` for ``observe_body`` (mpe.cuh's
        mpe_stage_bodies, which gives the layout); ends with the team synchronised."""
        a = lane()
        while a < U(n):
            bodies[a] = x[e, a]
            bodies[U(U(n) + a)] = y[e, a]
            bodies[U(U(2 * n) + a)] = vx[e, a]
            bodies[U(U(3 * n) + a)] = vy[e, a]
            a = U(a + lanes())
        lm = lane()
        while lm < U(places):
            bodies[U(U(4 * n) + lm)] = place_x[e, lm]
            bodies[U(U(4 * n + places) + lm)] = place_y[e, lm]
            lm = U(lm + lanes())
        sync()

    @cuda.jit(device=True)
    def observe_body(bodies, n, places, a, obs, e, row):
        """Agent ``a``'s features in MPE2's layout for a moving body into ``obs[e, row:]`` from the
        staged ``bodies`` (mpe.cuh's mpe_observe_body, which gives the layout and says why each kind
        of feature is a loop of its own); the whole team calls it for one agent. Its loops count in
        int64 (numba_api.I64 says why)."""
        f = I64(lane())
        while f < I64(4):
            base = I64(2 * n) if f < I64(2) else I64(0)
            obs[e, I64(row) + f] = bodies[base + (f & I64(1)) * I64(n) + I64(a)]
            f += I64(lanes())
        q = I64(lane())
        while q < I64(2 * places):
            y = q & I64(1)
            place = bodies[I64(4 * n) + y * I64(places) + (q >> I64(1))]
            obs[e, I64(row) + I64(4) + q] = place - bodies[y * I64(n) + I64(a)]
            q += I64(lanes())
        q = I64(lane())
        while q < I64(2 * (n - 1)):
            y, j = (q & I64(1)) * I64(n), q >> I64(1)
            if j >= I64(a):
                j += I64(1)  # the other agents, in id order
            obs[e, I64(row) + I64(4 + 2 * places) + q] = bodies[y + j] - bodies[y + I64(a)]
            q += I64(lanes())

    @cuda.jit(device=True)
    def stage(x, y, sx, sy, e, n):
        """Game e's ``n`` agents' positions into the team's shared arrays ``sx``, ``sy`` (mpe.cuh's
        mpe_stage); ends with the team synchronised."""
        a = lane()
        while a < U(n):
            sx[a] = x[e, a]
            sy[a] = y[e, a]
            a = U(a + lanes())
        sync()

    return stage, stage_bodies, observe_body, tree_sum
