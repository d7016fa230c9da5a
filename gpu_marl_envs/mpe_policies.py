"""Reference policies for ``SimpleSpread-v3`` and the normalised score a trained policy is given.

Each policy is a batched torch policy, as :mod:`covid_policies`' are: ``actions = policy(observations)``
maps the group observations of :meth:`GpuParallelEnv.reset_groups` / :meth:`~GpuParallelEnv.step_groups`
(``{"agents": (E, N, 6N)}``, any ``E``, any device) to the group actions ``{"agents": ...}``:
int64 ``(E, N)`` for ``Discrete(5)`` or float32 ``(E, N, 5)`` in ``[0, 1]`` for
``continuous_actions=True``. Nothing synchronises with the host.

- :class:`ScriptedSpread` — the score's 1: agents go to landmarks by an **optimal assignment**
  (minimum total agent-landmark distance, exact: :func:`optimal_assignment`) and steer there with
  a controller that knows MPE's dynamics, so that they arrive and stop (:func:`desired_velocity`).
- :class:`RandomPolicy` — the score's 0: uniform random actions (``Discrete``: each of the 5 moves
  with probability 1/5; ``Box``: each component uniform in ``[0, 1)``).

What the scripted agents read (``envs/simple_spread.py``'s observation layout): agent ``i`` observes
its velocity, its position, every landmark relative to itself and every other agent relative to
itself (not their velocities). From one agent's observation, every agent-landmark distance follows
(``|(l - p_i) - (p_a - p_i)|``), so one agent's view fixes the whole assignment. With
``view="agent0"`` (the default) the assignment is computed once, from agent 0's observation, and
every agent takes its landmark from it: a **centralised** controller (a shared plan; acceptable
for a scripted upper reference, and all agents agree by construction). With ``view="own"`` each
agent computes the same global assignment from its own observation and follows its own row:
decentralised, but the agents' float32 distances differ in their last bits, so where two
assignments' totals lie within that rounding of each other (a near tie, where either is optimal)
two agents may pick different ones; the tests measure how rarely. Each agent then steers with its
own observation only: its velocity and its landmark relative to itself.

## The controller
MPE's step for an agent (``envs/mpe_physics.py``; mass 1, no speed cap in simple_spread), per axis:
``p' = p + dt v``, then ``v' = (1 - damping) v + dt u``, with ``dt = 0.1``, ``damping = 0.25`` and
the force ``u = 5 a``: ``a`` in ``{-1, 0, 1}`` on one axis at a time (Discrete) or in ``[-1, 1]``
on each axis (Box: ``a[2] - a[1]``, ``a[4] - a[3]``). The next position is already fixed by the
current velocity (``p1 = p + dt v``: the action only changes the velocity ``v1`` the agent moves by
after it), so the controller picks ``v1``: the fastest velocity towards the target from which full
braking (force ``brake``) still stops the agent at the target, at most the velocity that lands
exactly on it. Braking from ``v`` at full force travels ``D(v) = dt (v + v_1 + ...)``,
``v_{k+1} = (1 - damping) v_k - dt brake`` until a last partial step stops it; ``D`` is piecewise
linear and convex, so its inverse (the largest ``v`` that stops within ``d``) is the minimum of its
pieces' inverses, one per number of braking steps (:func:`desired_velocity`). Near the target this
is ``v1 = d / dt``: the agent lands on the target the next step and a force within bounds then
stops it (``|v1| <= dt brake / (1 - damping)``). This is the time-optimal bang-bang control of each
axis (exact for Box, whose axes are independent); it never orbits, since each axis is driven to
rest at its target.

- Box: the force ``u = (v1 - (1 - damping) v) / dt``, clipped to ``[-5, 5]`` per axis.
- Discrete: the one of the 5 moves whose ``v1`` lies nearest the desired one. It pushes one axis
  at a time, so it plans with half the braking force (default ``brake``), and it cannot stop
  exactly: it settles within about ``dt^2 * 5 = 0.05`` of the target.

Targets: two agents closer than 0.3 (two agent sizes) are each penalised (the local reward, -1
per other agent, weighted ``local_ratio``) and pushed apart by the contact force; where two
assigned landmarks lie closer than that, two agents sitting on them would collide every step.
So each agent aims at its landmark moved away from every other assigned landmark closer than
``spacing`` (:data:`SPACING`: 0.31 for Box, 0.35 for Discrete, whose agents hover) by half the
shortfall: the pair settles ``spacing`` apart, each a little off its landmark (a distance cost of
at most 0.15 per landmark against a collision cost of 1 per agent). On 1,000 games at ``N = 3``
this raises the scripted return from -5.87 to -5.34 (Box) and from -7.52 to -7.08 (Discrete).
Agents still cross each other's paths on the way (no avoidance en route).

## The assignment
Exact, by enumerating the ``N!`` permutations on the device (a ``(B, N!)`` table of totals, then
its argmin; ties go to the first permutation in lexicographic order): cheap for the sizes a
reference is measured at (``N = 3``: 6, ``N = 5``: 120) and refused past ``N = 8`` (40,320
permutations). A batched Hungarian algorithm would scale to large ``N`` but runs ``O(N)``
sequential augmentations of dynamic length per game, which a batched, sync-free policy can only do
by padding every game to the worst case; the score is defined at ``N = 3``, where enumeration is
exact, simple and one batched gather per agent.

## The score
``score = (R - R_random) / (R_scripted - R_random)`` (:func:`normalised_score`), each ``R`` the mean
episode return (per agent, averaged over agents, then over episodes) of :func:`evaluate` on the
same seeds: ``num_episodes`` games, one episode each of ``max_cycles`` steps.
:func:`reference_returns` evaluates the random and scripted policies for any settings.

    python -m gpu_marl_envs.mpe_policies --N 3 --episodes 1000             # both action modes
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Literal

import torch
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.envs import mpe_physics as mpe
from gpu_marl_envs.envs.simple_spread import AGENT_SIZE, LANDMARK_SIZE, SimpleSpreadParams
from gpu_marl_envs.parallel_env import make_parallel

ENV_ID = "gpu_marl_envs/SimpleSpread-v3"
GROUP = "agents"
MAX_ENUMERATED_AGENTS = 8
"""The largest ``N`` whose assignment :func:`optimal_assignment` enumerates (8! = 40,320)."""
MAX_FORCE = mpe.SENSITIVITY
"""An agent's largest force per axis (sensitivity 5 times an action component of 1)."""
BRAKING_PIECES = 12
"""Pieces of the braking distance's inverse (:func:`desired_velocity`): enough for any speed an
agent reaches (its top speed under full force is ``dt * 5 / damping = 2``, three pieces)."""
EVALUATION_SEED = 20_000
"""The default seed of :func:`evaluate` (game ``k`` draws from ``seed + k``)."""
SPACING = {True: 2 * AGENT_SIZE + 0.01, False: 2 * AGENT_SIZE + 0.05}
"""The least distance :class:`ScriptedSpread` keeps between two agents' targets, by action mode
(``continuous_actions``): just over two agent sizes (0.3), within which two agents count as
colliding (the local penalty) and push each other apart; Discrete agents hover within about 0.05
of their targets, and keep that much more."""
COVERED = AGENT_SIZE - LANDMARK_SIZE
"""A landmark counts as covered where an agent's centre lies within this (0.1): the landmark's disc
inside the agent's."""

Policy = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]
"""``observations -> actions``, keyed by group (``step_groups``' form)."""


# -- what agents observe ---------------------------------------------------------------------------


def observed_offsets(n: int, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(agents, landmarks)``, each float32 ``(E, V, n, 2)``: from each viewing agent ``v``'s
    observation ``obs[:, v]`` (``(E, V, 6n)``, any ``V`` of the agents' rows), every agent's and
    every landmark's position relative to the viewer (the viewer's own offset is 0)."""
    e, v = obs.shape[:2]
    landmarks = obs[..., 4 : 4 + 2 * n].reshape(e, v, n, 2)
    others = obs[..., 4 + 2 * n : 4 + 2 * n + 2 * (n - 1)].reshape(e, v, n - 1, 2)
    # Row v of the observation lists the agents j != v in order: slot 0 below is the viewer itself.
    padded = torch.cat([torch.zeros_like(others[:, :, :1]), others], dim=2)
    viewers = torch.arange(v, device=obs.device)[:, None]
    agents = torch.arange(n, device=obs.device)[None, :]
    slot = torch.where(agents < viewers, agents + 1, torch.where(agents == viewers, 0, agents))  # (V, n)
    index = slot[None, :, :, None].expand(e, v, n, 2)
    return padded.gather(2, index), landmarks


def distance_matrix(agents: torch.Tensor, landmarks: torch.Tensor) -> torch.Tensor:
    """float32 ``(..., n agents, n landmarks)``: the distances between ``agents`` and ``landmarks``
    (each ``(..., n, 2)``, in one frame)."""
    delta = landmarks[..., None, :, :] - agents[..., :, None, :]
    return mpe.distance(delta[..., 0], delta[..., 1])


# -- the assignment --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def permutations(n: int, device: torch.device) -> torch.Tensor:
    """int64 ``(n!, n)``: every permutation of ``0 .. n - 1``, in lexicographic order."""
    return torch.tensor(list(itertools.permutations(range(n))), dtype=torch.int64, device=device).reshape(-1, n)


def check_enumerable(n: int) -> None:
    if n > MAX_ENUMERATED_AGENTS:
        raise ValueError(
            f"the scripted controller's optimal assignment enumerates the N! permutations of agents to "
            f"landmarks, up to N = {MAX_ENUMERATED_AGENTS} ({math.factorial(MAX_ENUMERATED_AGENTS):,}); "
            f"N = {n} has {math.factorial(n):.3g}: use N <= {MAX_ENUMERATED_AGENTS}"
        )


def optimal_assignment(cost: torch.Tensor) -> torch.Tensor:
    """int64 ``(..., n)``: for each agent (row of ``cost``, float ``(..., n, n)``, agents by
    landmarks) its landmark, in the assignment of least total cost (exact: every permutation's
    total; ties to the first permutation in lexicographic order). ``n <= MAX_ENUMERATED_AGENTS``."""
    n = cost.shape[-1]
    if cost.shape[-2] != n:
        raise ValueError(f"cost must be square (agents x landmarks), got shape {tuple(cost.shape)}")
    check_enumerable(n)
    batch = cost.shape[:-2]
    flat = cost.reshape(-1, n, n)
    table = permutations(n, cost.device)  # (P, n): table[p, a] is agent a's landmark
    totals = flat[:, 0, table[:, 0]]
    for a in range(1, n):  # agent by agent: a (B, P) table at a time, never (B, P, n)
        totals = totals + flat[:, a, table[:, a]]
    best = totals.argmin(dim=1)
    return table[best].reshape(*batch, n)


# -- the controller --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _braking_pieces(brake: float) -> tuple[tuple[float, float], ...]:
    """``(slope, offset)`` per piece ``m`` (braking over ``m + 1`` steps) of the braking distance's
    inverse: ``v = slope * d + offset`` (:func:`desired_velocity`)."""
    keep, dt = 1.0 - mpe.DAMPING, mpe.DT
    b = dt * brake  # the speed full braking removes per step
    pieces = []
    for m in range(BRAKING_PIECES):
        # Speeds v_0 = v, v_j = keep^j v - b (1 - keep^j) / (1 - keep), j = 0 .. m, all travelled:
        # D(v) = dt (v S - b (m + 1 - S) / (1 - keep)), S = sum of keep^j.
        s = (1.0 - keep ** (m + 1)) / (1.0 - keep)
        pieces.append((1.0 / (dt * s), b * (m + 1 - s) / ((1.0 - keep) * s)))
    return tuple(pieces)


def desired_velocity(distance: torch.Tensor, brake: float) -> torch.Tensor:
    """The speed (``>= 0``, as ``distance``) from which braking at force ``brake`` stops an agent
    within ``distance`` (``>= 0``), counted from the position it reaches next (module docstring):
    the inverse of the braking distance ``D``, the minimum of its pieces' inverses."""
    pieces = _braking_pieces(float(brake))
    speed = distance * pieces[0][0] + pieces[0][1]
    for slope, offset in pieces[1:]:
        speed = torch.minimum(speed, distance * slope + offset)
    return speed


def next_velocity_target(offset: torch.Tensor, velocity: torch.Tensor, brake: float) -> torch.Tensor:
    """float32 ``(..., 2)``: the velocity an agent at ``offset`` from its target (target minus
    position) moving at ``velocity`` should move by after this step, per axis."""
    ahead = offset - velocity * mpe.f32(mpe.DT)  # from the position the agent reaches next
    return torch.sign(ahead) * desired_velocity(ahead.abs(), brake)


DISCRETE_FORCES = ((0.0, 0.0), (-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0))
"""Each Discrete action's force per unit of sensitivity: MPE2's no-op, left, right, down, up."""


@functools.lru_cache(maxsize=16)
def _velocity_changes(device: torch.device) -> torch.Tensor:
    """float32 ``(5, 2)``: each Discrete action's change of the next velocity, ``dt * 5 * force``
    (made once per device: no host copy per call)."""
    forces = torch.tensor(DISCRETE_FORCES, dtype=torch.float32) * mpe.f32(mpe.DT * MAX_FORCE)
    return forces.to(device)


def steer(offset: torch.Tensor, velocity: torch.Tensor, continuous: bool, brake: float | None = None) -> torch.Tensor:
    """The actions that steer agents at ``offset`` from their targets (``(..., 2)``) moving at
    ``velocity`` to rest on them: int64 ``(...)`` (Discrete) or float32 ``(..., 5)`` (Box)."""
    if brake is None:
        brake = MAX_FORCE if continuous else MAX_FORCE / 2
    keep, dt = mpe.f32(1.0 - mpe.DAMPING), mpe.f32(mpe.DT)
    target = next_velocity_target(offset, velocity, brake)
    if continuous:
        a = ((target - velocity * keep) / (dt * MAX_FORCE)).clamp(-1.0, 1.0)
        zero = torch.zeros_like(a[..., 0])
        ax, ay = a[..., 0], a[..., 1]
        return torch.stack([zero, (-ax).clamp(min=0), ax.clamp(min=0), (-ay).clamp(min=0), ay.clamp(min=0)], -1)
    candidates = (velocity * keep)[..., None, :] + _velocity_changes(velocity.device)  # (..., 5, 2): v1 per move
    miss = (candidates - target[..., None, :]).square().sum(-1)
    return miss.argmin(-1)


# -- the policies ----------------------------------------------------------------------------------


def _check_observations(p: SimpleSpreadParams, observations: dict[str, torch.Tensor]) -> torch.Tensor:
    obs = observations[GROUP]
    if obs.ndim != 3 or obs.shape[1:] != (p.N, p.obs_dim):
        raise ValueError(
            f"observations[{GROUP!r}] must have shape (num_envs, {p.N}, {p.obs_dim}) for N = {p.N}, "
            f"got {tuple(obs.shape)}"
        )
    return obs


@dataclass(frozen=True)
class ScriptedSpread:
    """Agents to landmarks by an optimal assignment, each steered to rest on its own (module
    docstring). ``view``: ``"agent0"`` (one assignment from agent 0's observation: centralised) or
    ``"own"`` (each agent's from its own observation). ``brake``: the braking force the controller
    plans with (default 5 for Box, 2.5 for Discrete). ``spacing``: the least distance kept between
    two agents' targets (default :data:`SPACING`; 0: every agent aims at its landmark's centre)."""

    params: SimpleSpreadParams = field(default_factory=SimpleSpreadParams)
    view: Literal["agent0", "own"] = "agent0"
    brake: float | None = None
    spacing: float | None = None
    name: str = "scripted (optimal assignment)"

    def __post_init__(self):
        if self.view not in ("agent0", "own"):
            raise ValueError(f"view must be 'agent0' or 'own', got {self.view!r}")
        if self.brake is not None and not 0 < self.brake <= MAX_FORCE:
            raise ValueError(f"brake must lie in (0, {MAX_FORCE}], got {self.brake!r}")
        if self.spacing is not None and not 0 <= self.spacing < 1:
            raise ValueError(f"spacing must lie in [0, 1), got {self.spacing!r}")
        check_enumerable(self.params.N)

    def plans(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """int64 ``(E, N, N)``: row ``i`` the assignment agent ``i`` follows (each agent's landmark):
        agent 0's for every agent (``view="agent0"``), or its own."""
        n = self.params.N
        obs = _check_observations(self.params, observations)
        viewers = obs[:, :1] if self.view == "agent0" else obs
        agents, landmarks = observed_offsets(n, viewers)
        plans = optimal_assignment(distance_matrix(agents, landmarks))  # (E, V, n)
        return plans.expand(-1, n, -1) if self.view == "agent0" else plans

    def assignment(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """int64 ``(E, N)``: each agent's landmark in the plan it follows."""
        return self.plans(observations).diagonal(dim1=1, dim2=2)

    def targets(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """float32 ``(E, N, 2)``: each agent's target relative to itself: its landmark, moved away
        from the other agents' landmarks closer than ``spacing`` (by half the shortfall each, as the
        agent sees them in its plan)."""
        p = self.params
        obs = _check_observations(p, observations)
        plans = self.plans(observations)  # (E, viewer i, agent j): agent j's landmark in i's plan
        e, n = plans.shape[:2]
        landmarks = obs[..., 4 : 4 + 2 * n].reshape(e, n, n, 2)  # each agent's own view
        goals = landmarks.gather(2, plans[..., None].expand(e, n, n, 2))  # (E, i, j, 2), in i's frame
        own = goals.diagonal(dim1=1, dim2=2).transpose(1, 2)  # (E, i, 2)
        spacing = self.spacing if self.spacing is not None else SPACING[p.continuous_actions]
        if spacing == 0:
            return own
        delta = own[:, :, None, :] - goals  # (E, i, j, 2): agent i's landmark less agent j's
        gap = mpe.distance(delta[..., 0], delta[..., 1])[..., None]
        push = (spacing - gap).clamp(min=0.0) * 0.5 * delta / gap.clamp(min=1e-6)  # 0 for j = i (gap 0)
        return own + push.sum(2)

    def __call__(self, observations: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        p = self.params
        obs = _check_observations(p, observations)
        return {GROUP: steer(self.targets(observations), obs[..., 0:2], p.continuous_actions, self.brake)}


@dataclass
class RandomPolicy:
    """Uniform random actions from its own generator (seeded with ``seed`` on first use on a device)."""

    params: SimpleSpreadParams = field(default_factory=SimpleSpreadParams)
    seed: int = 0
    name: str = "uniform random"
    _generators: dict = field(default_factory=dict, repr=False)

    def generator(self, device: torch.device) -> torch.Generator:
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self._generators[key]

    def __call__(self, observations: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        p = self.params
        obs = _check_observations(p, observations)
        e, g = obs.shape[0], self.generator(obs.device)
        if p.continuous_actions:
            actions = torch.rand((e, p.N, 5), generator=g, device=obs.device)
        else:
            actions = torch.randint(0, 5, (e, p.N), generator=g, device=obs.device)
        return {GROUP: actions}


# -- evaluation and the score ----------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """A policy's episodes (:func:`evaluate`): means over the games."""

    mean_return: float
    """The score's ``R``: episode return per agent (averaged over agents), mean over games."""
    std_return: float
    """Standard deviation over games of that return."""
    final_distance: float
    """After the last step: each landmark's nearest agent's distance, mean over landmarks and games."""
    covered: float
    """After the last step: the fraction of landmarks with an agent within :data:`COVERED`."""
    collisions: float
    """Other agents closer than two agent sizes, per agent and step (the local penalty's count)."""
    episodes: int


def spread_params(params: SimpleSpreadParams | None = None, **settings) -> SimpleSpreadParams:
    """``params`` (default: MPE2's defaults) with ``settings`` (fields of :class:`SimpleSpreadParams`) changed."""
    known = {f.name for f in fields(SimpleSpreadParams)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"unknown SimpleSpread settings {unknown}; known: {sorted(known)}")
    values = {f.name: getattr(params or SimpleSpreadParams(), f.name) for f in fields(SimpleSpreadParams)}
    return SimpleSpreadParams(**{**values, **settings})


def evaluate(
    policy: Policy,
    params: SimpleSpreadParams | None = None,
    num_episodes: int = 1000,
    *,
    device="cpu",
    seed: int = EVALUATION_SEED,
    backend: str | None = None,
) -> Evaluation:
    """Run ``num_episodes`` games of SimpleSpread-v3 (``params``; MPE2's defaults if None), one
    episode each (``max_cycles`` steps, from the games' resets with ``seed``), with ``policy``
    choosing every step's actions; one host synchronisation at the end."""
    p = params or SimpleSpreadParams()
    env = make_parallel(
        ENV_ID,
        num_episodes,
        device=device,
        backend=backend,
        params=p,
        autoreset_mode=AutoresetMode.DISABLED,
        validate_actions=False,
    )
    try:
        obs, _ = env.reset_groups(seed=seed)
        returns = torch.zeros(num_episodes, dtype=torch.float64, device=env.device)
        collisions = torch.zeros((), dtype=torch.float64, device=env.device)
        for _ in range(p.max_cycles):
            with torch.no_grad():
                actions = policy(obs)
            obs, rewards, _, _, _ = env.step_groups(actions)
            returns += rewards[GROUP].double().mean(1)
            collisions += _close_pairs(env.get_state()).double().mean()
        state = env.get_state()
    finally:
        env.close()
    agents = torch.stack([state["x"], state["y"]], -1)
    landmarks = torch.stack([state["landmark_x"], state["landmark_y"]], -1)
    nearest = distance_matrix(agents, landmarks).min(dim=1).values  # (E, landmarks)
    summary = torch.stack(
        [
            returns.mean(),
            returns.std() if num_episodes > 1 else torch.zeros((), dtype=torch.float64, device=env.device),
            nearest.double().mean(),
            (nearest < COVERED).double().mean(),
            collisions / p.max_cycles,
        ]
    ).tolist()
    return Evaluation(*summary, episodes=num_episodes)


def _close_pairs(state: dict[str, torch.Tensor]) -> torch.Tensor:
    """float32 ``(E, N)``: each agent's count of other agents within two agent sizes."""
    agents = torch.stack([state["x"], state["y"]], -1)
    close = distance_matrix(agents, agents) < mpe.f32(2 * AGENT_SIZE)
    return close.sum(-1).float() - 1.0  # less the agent itself


def normalised_score(mean_return: float, random_return: float, scripted_return: float) -> float:
    """``(R - R_random) / (R_scripted - R_random)``: 0 for the random policy, 1 for the scripted one."""
    values = (mean_return, random_return, scripted_return)
    if not all(math.isfinite(v) for v in values):
        raise ValueError(
            f"returns must be finite, got R={mean_return}, R_random={random_return}, R_scripted={scripted_return}"
        )
    if scripted_return <= random_return:
        raise ValueError(
            f"the scripted return ({scripted_return}) must exceed the random one ({random_return}) for a score"
        )
    return (mean_return - random_return) / (scripted_return - random_return)


def reference_returns(
    params: SimpleSpreadParams | None = None,
    num_episodes: int = 1000,
    *,
    device="cpu",
    seed: int = EVALUATION_SEED,
    backend: str | None = None,
) -> dict[str, Evaluation]:
    """``{"random": ..., "scripted": ...}``: the score's two references, on the same seeds."""
    p = params or SimpleSpreadParams()
    return {
        "random": evaluate(RandomPolicy(p), p, num_episodes, device=device, seed=seed, backend=backend),
        "scripted": evaluate(ScriptedSpread(p), p, num_episodes, device=device, seed=seed, backend=backend),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="R_random and R_scripted of SimpleSpread-v3 (the score's 0 and 1)")
    parser.add_argument("--N", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=EVALUATION_SEED)
    parser.add_argument("--mode", choices=("discrete", "continuous", "both"), default="both")
    args = parser.parse_args(argv)
    modes = {"discrete": [False], "continuous": [True], "both": [False, True]}[args.mode]
    print("| N | actions | policy | mean return | std | final distance | covered | collisions |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for continuous in modes:
        p = spread_params(N=args.N, continuous_actions=continuous)
        for name, r in reference_returns(p, args.episodes, device=args.device, seed=args.seed).items():
            print(
                f"| {p.N} | {'Box' if continuous else 'Discrete'} | {name} | {r.mean_return:.3f} | "
                f"{r.std_return:.3f} | {r.final_distance:.3f} | {r.covered:.1%} | {r.collisions:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
