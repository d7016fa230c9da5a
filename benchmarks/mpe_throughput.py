"""MPE env-steps/s: our MPE games beside VMAS's and JaxMARL's same scenarios, in one process.

For each scenario x action mode (discrete, continuous) x ``num_envs`` (2,000 and 65,536 by default):
each of our backends (pycuda, numba, torch) through the public batched ``step_groups``, a Python
call a step, and the kernel backends also "captured": 100 such calls captured once in a CUDA graph
and replayed (how the trainer steps its games, there with its policy's kernels between the steps,
and the counterpart of JaxMARL's compiled scan: no host time a step); VMAS 1.5.2's
scenario through ``Environment.step`` (torch, on the same device) and JaxMARL's through ``jax.vmap``
of ``env.step`` inside one ``jax.jit``-compiled ``lax.scan`` (on the same GPU). Every runner steps
random actions from a pool of 8 drawn in its own action space beforehand, warms up first (kernel
compilation, CUDA-graph capture, XLA compilation), then times repeats bracketed by device
synchronisation (``torch.cuda.synchronize()``, ``block_until_ready``); the median repeat is reported.
Each env-step is one step of every one of ``num_envs`` games, episode ends included:

- ours: NEXT_STEP auto-reset in the kernels, ``validate_actions=False``;
- VMAS: ``make_env(..., max_steps=max_cycles)`` never resets by itself; every game's episode ends
  at the same step (none of these scenarios terminates early), so the loop calls the batched
  ``env.reset()`` every ``max_cycles`` steps (cheaper than VMAS's per-env ``reset_at``);
- JaxMARL: ``env.step`` resets ended episodes itself (``jax.lax.select`` against a fresh reset,
  drawn every step; its episodes last 26 steps: it ends one when the count before the step reaches
  25); the scan sums every observation, reward and done into a checksum so that XLA cannot drop them.

The peers' scenarios differ from MPE2's (and ours) where the "per agent" column says so: VMAS's
actions are its own (``Discrete(9)``, the 3 x 3 grid of forces, or a ``Box[-1, 1]^2`` force; the
speaker's ``Discrete(27)``), its simple_spread observation lacks MPE2's silent communication slots
(14 floats for N = 3, not 18) and its physics is its own (VMAS's engine); JaxMARL follows MPE2.

The ratio columns divide our env-steps/s by the peer's at the same scenario, agents, action mode
and ``num_envs`` (issue 42's targets: >= 1,000x VMAS, ahead of JaxMARL). A peer that cannot be
imported, or runs out of memory, gets a row saying why; our rows still run. Peers' wheels and how to
install them: ``benchmarks/peers/README.md``.

    python benchmarks/mpe_throughput.py --out mpe.md --json mpe.json   # results: docs/benchmarks/mpe.md
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.metadata
import importlib.util
import itertools
import os
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from report import add_output_options, gpu_hardware, save

import gpu_marl_envs
from gpu_marl_envs.registration import is_game

ACTION_POOL = 8
WARM_UP_STEPS = 50  # two episodes of 25: every runner's first reset and its CUDA graphs or compilation done
ROLLOUT_LENGTH = 100  # steps in one compiled JaxMARL rollout and in one of our captured ones (4 episodes of 25)


@dataclass(frozen=True)
class Scenario:
    """One MPE scenario at one size, as each runner names it."""

    label: str
    num_agents: int
    max_cycles: int
    ours: str  # our game's id
    ours_settings: dict = field(default_factory=dict)  # its keyword settings (besides continuous_actions)
    vmas: str = ""  # VMAS's scenario name
    vmas_kwargs: dict = field(default_factory=dict)
    jaxmarl: str = ""  # JaxMARL's env id
    jaxmarl_kwargs: dict = field(default_factory=dict)


def torch_sync(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def scenarios(spread_n: list[int]) -> list[Scenario]:
    """MPE2's defaults throughout (25 steps an episode); simple_spread at each ``N`` of ``spread_n``."""
    spread = [
        Scenario(
            f"simple_spread N={n}",
            n,
            25,
            "gpu_marl_envs/SimpleSpread-v3",
            {"N": n},
            "simple_spread",
            {"n_agents": n},
            "MPE_simple_spread_v3",
            {"num_agents": n, "num_landmarks": n},
        )
        for n in spread_n
    ]
    return spread + [
        Scenario(
            "simple_tag 3v1",
            4,
            25,
            "gpu_marl_envs/SimpleTag-v3",
            {"num_good": 1, "num_adversaries": 3, "num_obstacles": 2},
            "simple_tag",
            {"num_good_agents": 1, "num_adversaries": 3, "num_landmarks": 2},
            "MPE_simple_tag_v3",
            {"num_good_agents": 1, "num_adversaries": 3, "num_obs": 2},
        ),
        Scenario(
            "simple_speaker_listener",
            2,
            25,
            "gpu_marl_envs/SimpleSpeakerListener-v4",
            {},
            "simple_speaker_listener",
            {},
            "MPE_simple_speaker_listener_v4",
            {},
        ),
    ]


@dataclass
class Runner:
    """One runner at one size: ``call()`` steps every game ``quantum`` times; ``sync()`` waits for the device."""

    call: Callable[[], None]
    sync: Callable[[], None]
    spaces: str  # each agent's observation size and action space, as the runner has them
    quantum: int = 1
    close: Callable[[], None] = lambda: None


def spaces_text(agents: list[tuple[tuple, object]]) -> str:
    """``"3x obs 18, Discrete(5)"`` for agents' ``(observation shape, action space)`` (gymnasium's,
    gym's or JaxMARL's spaces), runs of equal agents counted."""

    def action(space) -> str:
        if getattr(space, "n", None) is not None:
            return f"Discrete({int(space.n)})"
        low, high = float(np.min(space.low)), float(np.max(space.high))
        return f"Box[{low:g}, {high:g}]^{int(np.prod(space.shape))}"

    texts = [f"obs {int(np.prod(shape))}, {action(space)}" for shape, space in agents]
    runs = [(text, len(list(group))) for text, group in itertools.groupby(texts)]
    return "; ".join(text if n == 1 else f"{n}x {text}" for text, n in runs)


def time_runner(runner: Runner, min_seconds: float, repeats: int) -> tuple[int, float]:
    """``(steps, median seconds)`` of ``steps`` steps, after a warm-up and a probe that sizes one
    repeat to about ``min_seconds``."""

    def timed(steps: int) -> float:
        runner.sync()
        start = time.perf_counter()
        for _ in range(steps // runner.quantum):
            runner.call()
        runner.sync()
        return time.perf_counter() - start

    warm = -(-WARM_UP_STEPS // runner.quantum) * runner.quantum
    timed(warm)  # warm-up: compilation, graph capture, allocator, caches, an episode's end
    probe = timed(warm) / warm
    steps = max(1, int(min_seconds / max(probe, 1e-9)) // runner.quantum) * runner.quantum
    return steps, statistics.median(timed(steps) for _ in range(repeats))


# ----------------------------------------------------------------------------------------------- ours


def ours_runner(backend: str, s: Scenario, num_envs: int, device: str, continuous: bool, captured: bool = False):
    """Our game through ``step_groups``, a Python call a step; ``captured``: ROLLOUT_LENGTH of those
    calls captured once in a CUDA graph and the graph replayed, as the trainer runs its rollouts
    (with its policy's kernels between the steps) and as JaxMARL's runner compiles its scan (a step
    costs no host time, only the kernel's)."""
    env = gpu_marl_envs.make_parallel(
        s.ours,
        num_envs,
        device=device,
        backend=backend,
        validate_actions=False,
        continuous_actions=continuous,
        **s.ours_settings,
    )
    env.reset_groups(seed=0)
    g = torch.Generator(device=env.device).manual_seed(0)

    def draw(space, size: int) -> torch.Tensor:
        if space.shape == ():  # Discrete
            return torch.randint(0, int(space.n), (num_envs, size), generator=g, device=env.device)
        low = torch.as_tensor(space.low, device=env.device)
        high = torch.as_tensor(space.high, device=env.device)
        return low + (high - low) * torch.rand((num_envs, size, *space.shape), generator=g, device=env.device)

    pool = [
        {group: draw(env.action_space(agents[0]), len(agents)) for group, agents in env.groups.items()}
        for _ in range(ACTION_POOL)
    ]
    count = [0]

    def step():
        env.step_groups(pool[count[0] % ACTION_POOL])
        count[0] += 1

    spaces = spaces_text([(env.observation_space(a).shape, env.action_space(a)) for a in env.possible_agents])
    if not captured:
        return Runner(step, torch_sync(device), spaces, close=env.close)
    if not device.startswith("cuda"):
        raise RuntimeError("a captured rollout needs a CUDA device")
    for _ in range(ACTION_POOL):  # eager steps first: the kernels compiled and loaded outside the capture
        step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(ROLLOUT_LENGTH):
            step()
    return Runner(graph.replay, torch_sync(device), spaces, ROLLOUT_LENGTH, close=env.close)


# ----------------------------------------------------------------------------------------------- VMAS


def import_vmas():
    import vmas

    return vmas, f"vmas {vmas.__version__}"


def vmas_runner(vmas, s: Scenario, num_envs: int, device: str, continuous: bool):
    env = vmas.make_env(
        s.vmas,
        num_envs=num_envs,
        device=device,
        continuous_actions=continuous,
        max_steps=s.max_cycles,
        seed=0,
        **s.vmas_kwargs,
    )
    env.reset()
    if len(env.agents) != s.num_agents:
        raise RuntimeError(f"VMAS made {len(env.agents)} agents, expected {s.num_agents}")
    pool = [env.get_random_actions() for _ in range(ACTION_POOL)]
    count = [0]

    def step():
        env.step(pool[count[0] % ACTION_POOL])
        count[0] += 1
        if count[0] % s.max_cycles == 0:  # every game's episode ends together: the batched reset
            env.reset()

    spaces = spaces_text([(o.shape, a) for o, a in zip(env.observation_space, env.action_space)])
    return Runner(step, torch_sync(device), spaces)


# -------------------------------------------------------------------------------------------- JaxMARL

JAXMARL_MPE_CLASSES = {
    "MPE_simple_spread_v3": ("simple_spread", "SimpleSpreadMPE"),
    "MPE_simple_tag_v3": ("simple_tag", "SimpleTagMPE"),
    "MPE_simple_speaker_listener_v4": ("simple_speaker_listener", "SimpleSpeakerListenerMPE"),
}


def import_jaxmarl():
    """``(make, jax, description)``: ``jaxmarl.make`` where ``import jaxmarl`` works (it imports every
    env family), else the MPE classes straight from their modules, with jaxmarl's
    package ``__init__`` files (which import every other env and its optional needs) skipped."""
    # JAX takes 75% of the GPU's memory at its first use unless told not to; torch (ours, VMAS) shares the GPU.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    try:
        jaxmarl = importlib.import_module("jaxmarl")  # prints two lines about its "submoduled environments"
        return jaxmarl.make, jax, f"jaxmarl {jaxmarl.__version__} (jaxmarl.make), {jax_text(jax)}"
    except Exception as error:  # any import failure: try the narrow path
        why = f"{type(error).__name__}: {error}"
    for name in [m for m in sys.modules if m == "jaxmarl" or m.startswith("jaxmarl.")]:
        del sys.modules[name]
    spec = importlib.util.find_spec("jaxmarl")
    if spec is None:
        raise ModuleNotFoundError("No module named 'jaxmarl'")
    root = spec.submodule_search_locations[0]
    for package in ("jaxmarl", "jaxmarl.environments", "jaxmarl.environments.mpe"):
        module = types.ModuleType(package)
        module.__path__ = [os.path.join(root, *package.split(".")[1:])]
        sys.modules[package] = module

    def make(env_id: str, **kwargs):
        file, cls = JAXMARL_MPE_CLASSES[env_id]
        return getattr(importlib.import_module(f"jaxmarl.environments.mpe.{file}"), cls)(**kwargs)

    version = importlib.metadata.version("jaxmarl")
    return make, jax, f"jaxmarl {version} (MPE modules directly; import jaxmarl: {why}), {jax_text(jax)}"


def jax_text(jax) -> str:
    return f"jax {jax.__version__} on {jax.devices()[0].device_kind}"


def jaxmarl_runner(make, jax, s: Scenario, num_envs: int, device: str, continuous: bool):
    import jax.numpy as jnp

    env = make(s.jaxmarl, action_type="Continuous" if continuous else "Discrete", **s.jaxmarl_kwargs)
    if env.num_agents != s.num_agents or env.max_steps != s.max_cycles:
        raise RuntimeError(f"JaxMARL made {env.num_agents} agents, {env.max_steps} steps an episode")
    jax_device = jax.devices()[0] if device.startswith("cuda") else jax.devices("cpu")[0]  # a GPU where jax has one
    if device.startswith("cuda") and jax_device.platform not in ("gpu", "cuda"):
        raise RuntimeError(f"jax has no GPU here (its default device: {jax_device})")
    step = jax.vmap(env.step)
    reset = jax.vmap(env.reset)

    def draw(key, space):
        shape = (ACTION_POOL, num_envs)
        if hasattr(space, "n"):  # Discrete
            return jax.random.randint(key, shape, 0, space.n)
        return jax.random.uniform(key, shape + tuple(space.shape), minval=space.low, maxval=space.high)

    @jax.jit
    def rollout(carry, pool):
        def body(carry, i):
            key, state, checksum = carry
            key, step_key = jax.random.split(key)
            actions = {a: jax.lax.dynamic_index_in_dim(pool[a], i % ACTION_POOL, keepdims=False) for a in env.agents}
            obs, state, rewards, dones, _ = step(jax.random.split(step_key, num_envs), state, actions)
            # Consume what a step returns, so that XLA computes it (it drops what no one reads).
            for tree in (obs, rewards, dones):
                checksum = checksum + sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(tree))
            return (key, state, checksum), None

        carry, _ = jax.lax.scan(body, carry, jnp.arange(ROLLOUT_LENGTH))
        return carry

    with jax.default_device(jax_device):
        key = jax.random.PRNGKey(0)
        key, reset_key, *action_keys = jax.random.split(key, 2 + len(env.agents))
        _, state = reset(jax.random.split(reset_key, num_envs))
        pool = {a: draw(k, env.action_space(a)) for a, k in zip(env.agents, action_keys)}
        holder = [(key, state, jnp.float32(0))]

    def step_scan():
        holder[0] = rollout(holder[0], pool)

    def sync():
        jax.block_until_ready(holder[0])

    spaces = spaces_text([(env.observation_space(a).shape, env.action_space(a)) for a in env.agents])
    return Runner(step_scan, sync, spaces, ROLLOUT_LENGTH)


# ---------------------------------------------------------------------------------------------- runs


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def is_oom(error: BaseException) -> bool:
    return isinstance(error, torch.cuda.OutOfMemoryError) or "RESOURCE_EXHAUSTED" in str(error)


def run_one(make_runner, s: Scenario, num_envs: int, device: str, continuous: bool, args) -> dict:
    """Time one runner: a dict with its rate, or with ``error`` (out of memory or another failure)."""
    runner = None
    try:
        runner = make_runner(s, num_envs, device, continuous)
        spaces = runner.spaces
        steps, seconds = time_runner(runner, args.min_seconds, args.repeats)
    except Exception as error:  # a peer's failure is a row, not the end of the run
        return {"error": ("out of memory: " if is_oom(error) else "") + first_line(error)}
    finally:
        if runner is not None:
            runner.close()
        del runner
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    rate = num_envs * steps / seconds
    return {
        "spaces": spaces,
        "steps": steps,
        "seconds": seconds,
        "us_per_step": 1e6 * seconds / steps,
        "env_steps_per_s": rate,
        "agent_steps_per_s": rate * s.num_agents,
    }


def runners(backends: list[str], captured: list[str], peers: list[str]) -> tuple[dict, dict]:
    """``({(runner, backend): make_runner or why it cannot run}, {peer: its versions or why not})``."""
    makers = {("ours", b): functools.partial(ours_runner, b) for b in backends}
    # The kernel backends captured too (the torch reference replays CUDA graphs of its own, which a
    # capture cannot hold).
    for b in captured:
        makers["ours", f"{b}, captured"] = functools.partial(ours_runner, b, captured=True)
    described = {}
    if "vmas" in peers:
        try:
            vmas, described["vmas"] = import_vmas()
            makers["vmas", "vmas"] = functools.partial(vmas_runner, vmas)
        except Exception as error:
            makers["vmas", "vmas"] = described["vmas"] = f"not importable: {first_line(error)}"
    if "jaxmarl" in peers:
        try:
            make, jax, described["jaxmarl"] = import_jaxmarl()
            makers["jaxmarl", "jaxmarl"] = functools.partial(jaxmarl_runner, make, jax)
        except Exception as error:
            makers["jaxmarl", "jaxmarl"] = described["jaxmarl"] = f"not importable: {first_line(error)}"
    return makers, described


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", default=None, help="labels to run, e.g. simple_tag (default: all)")
    parser.add_argument("--spread-n", nargs="+", type=int, default=[3], help="simple_spread's N (default 3)")
    parser.add_argument("--num-envs", nargs="+", type=int, default=[2000, 65536])
    parser.add_argument("--actions", choices=["discrete", "continuous", "both"], default="both")
    parser.add_argument("--backends", nargs="+", default=None, help="ours (default: every backend on the device)")
    parser.add_argument(
        "--captured",
        nargs="*",
        default=None,
        help="ours also as captured rollouts, for these backends (default: the kernel backends on a GPU; alone: none)",
    )
    parser.add_argument("--peers", nargs="*", choices=["vmas", "jaxmarl"], default=["vmas", "jaxmarl"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_output_options(parser, min_seconds=0.3, repeats=5)
    args = parser.parse_args()

    if args.device.startswith("cuda"):
        hardware = gpu_hardware()
        backends = args.backends or gpu_marl_envs.available_backends(args.device)
    else:  # kernel backends on a CPU would be the simulator
        hardware = f"CPU ({platform.processor() or platform.machine()}), torch {torch.__version__}"
        backends = args.backends or ["torch"]
    modes = {"discrete": [False], "continuous": [True], "both": [False, True]}[args.actions]
    if args.captured is None:
        captured = [b for b in backends if b != "torch"] if args.device.startswith("cuda") else []
    else:
        captured = args.captured
    makers, described = runners(backends, captured, args.peers)
    print(f"# {hardware}", flush=True)
    for name, text in described.items():
        print(f"# {name}: {text}", flush=True)

    results = []
    for s in scenarios(args.spread_n):
        if args.scenarios and not any(s.label.startswith(label) for label in args.scenarios):
            continue
        registered = is_game(s.ours)
        for continuous, num_envs in itertools.product(modes, args.num_envs):
            rows = []
            for (runner, backend), make_runner in makers.items():
                r = {
                    "scenario": s.label,
                    "num_agents": s.num_agents,
                    "actions": "continuous" if continuous else "discrete",
                    "num_envs": num_envs,
                    "runner": runner,
                    "backend": backend,
                }
                if isinstance(make_runner, str):
                    r["error"] = make_runner
                elif runner == "ours" and not registered:
                    r["error"] = f"{s.ours} is not registered in this checkout"
                else:
                    start = time.perf_counter()
                    r.update(run_one(make_runner, s, num_envs, args.device, continuous, args))
                    r["wall_s"] = time.perf_counter() - start  # building, compiling and timing it
                rows.append(r)
            peer_rates = {r["runner"]: r.get("env_steps_per_s") for r in rows if r["runner"] != "ours"}
            for r in rows:
                for peer, rate in peer_rates.items():
                    if r["runner"] == "ours" and rate and "env_steps_per_s" in r:
                        r[f"vs_{peer}"] = r["env_steps_per_s"] / rate
                print(line(r), flush=True)
            results += rows

    table = markdown(results, hardware, described, args)
    print(table)
    record = {"hardware": hardware, "torch": torch.__version__, "peers": described, "argv": sys.argv[1:]}
    save(args, table, {**record, "results": results})


def rate_text(r: dict) -> str:
    if "env_steps_per_s" not in r:
        return "-"
    rate = r["env_steps_per_s"]
    return f"{rate / 1e6:.2f} M" if rate >= 1e6 else f"{rate / 1e3:.2f} k"


def ratio_text(r: dict, peer: str) -> str:
    return f"{r[f'vs_{peer}']:,.1f}x" if f"vs_{peer}" in r else "-"


def line(r: dict) -> str:
    runner = r["runner"] if r["runner"] != "ours" else f"ours {r['backend']}"
    head = f"{r['scenario']:25s} {r['actions']:10s} {r['num_envs']:>7,} {runner:13s}"
    if "error" in r:
        return f"{head} {r['error']}"
    ratios = "".join(f"  {ratio_text(r, p)} {p}" for p in ("vmas", "jaxmarl") if f"vs_{p}" in r)
    text = f"{head} {r['us_per_step']:10.1f} µs/step {rate_text(r):>10s} env-steps/s{ratios}  [{r['spaces']}]"
    return f"{text} ({r['wall_s']:.0f} s)"


def markdown(results: list[dict], hardware: str, described: dict, args) -> str:
    peers = "; ".join(f"{name}: {text}" for name, text in described.items()) or "none"
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/mpe_throughput.py {' '.join(sys.argv[1:])}`.  ",
        f"Peers in the same run: {peers}.  ",
        f"Median of {args.repeats} repeats of at least {args.min_seconds:g} s each, after a warm-up; random actions "
        "from a pool drawn beforehand in each runner's own action space; episodes of 25 steps, resets included.",
        "",
        "| scenario | actions | num_envs | runner | per agent | µs/step | env-steps/s | ours ÷ VMAS | ours ÷ JaxMARL "
        "| note |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        runner = f"ours ({r['backend']})" if r["runner"] == "ours" else r["runner"]
        us = f"{r['us_per_step']:.1f}" if "us_per_step" in r else "-"
        note = r.get("error", "")
        lines.append(
            f"| {r['scenario']} | {r['actions']} | {r['num_envs']:,} | {runner} | {r.get('spaces', '-')} | {us} | "
            f"{rate_text(r)} | "
            f"{ratio_text(r, 'vmas')} | {ratio_text(r, 'jaxmarl')} | {note} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
