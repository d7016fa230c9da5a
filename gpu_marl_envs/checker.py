"""``check_env``: what an env's or game's author runs to test it, as Gymnasium's ``check_env``.

For a registered env or game it checks, raising ``AssertionError`` with what differs:

- its CUDA C file compiles (``nvcc -ptx``, no warnings), where nvcc is installed, and with NVRTC as the
  CUDA C backend compiles it, where NVRTC loads;
- every kernel backend available on the device (on a CPU: Numba under its CUDA simulator,
  ``NUMBA_ENABLE_CUDASIM=1``; on a GPU: Numba and CUDA C) against the torch reference, step for
  step in every autoreset mode: identical resets from one seed (full and masked), then each step from
  identical states (the reference's state is copied into the twin before each step), every output
  and the state compared exactly (-0.0 equals 0.0; NaN equals NaN) unless ``rtol``/``atol`` allow
  more; a failure names the backend, mode, step, output and first element that differ and the
  env's state before that step (to replay it with ``set_state``);
- bad input is refused and leaves the state unchanged: actions out of range, of the wrong shape or
  dtype, and NaN for continuous actions;
- Gymnasium's ``check_env`` on one env (``GpuEnv``), or PettingZoo's ``parallel_api_test`` on one
  game (``PettingZooParallelEnv``).

Games run in the simulator with half as many threads as they have agents, so a thread handles
several agents: the path a GPU takes for games larger than their block. Kernels that could not be
checked here (no nvcc, the simulator off, no GPU for CUDA C where ``device="cuda"``) are named in a
warning.

Exact agreement holds where the kernels follow the reference's float32 operations
(``docs/custom_env.md``, "float32 rules"); a tolerance belongs only where a documented reason
exists (the simulator's numpy ``sin``/``cos``/``exp`` may round differently from torch's).

What a check on the CPU cannot see (``docs/custom_env.md``, "What the checker cannot see"): the
simulator runs each float32 operation rounded, so a product a GPU compiler would fuse into a
multiply-add passes here and differs on a GPU (``device="cuda"`` finds it); it tells shared arrays
apart by source line (``numba_game`` refuses two on one line); and random play seldom reaches rare
branches: hand those states in with ``start``.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gpu_marl_envs.backends import SOURCES, available_backends, unavailable_reason
from gpu_marl_envs.registration import RegisteredEnv, env_spec, game_spec, is_game

# The GPU architecture the CUDA C check compiles for (PTX for an H100; any recent one would do).
NVCC_ARCH = "sm_90"


def check_env(
    env_id: str,
    params=None,
    *,
    num_envs: int = 3,
    num_steps: int = 8,
    seed: int = 7,
    device="cpu",
    backends: list[str] | None = None,
    start: Callable[[dict], dict] | dict[str, Callable[[dict], dict]] | None = None,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> None:
    """Check a registered env or game (see the module docstring); returns None when every check passes.

    Args:
        env_id: its id, as registered.
        params: its params (default: the defaults). Pick small ones whose episodes end within
            ``num_steps`` under random actions, so that every autoreset mode is exercised: the
            simulator is slow (a game's step takes milliseconds per agent).
        num_envs, num_steps, seed: the size of each comparison, and the seed of resets and actions.
        device: ``"cpu"`` (Numba under the simulator) or ``"cuda"`` (every kernel backend on the GPU).
        backends: the kernel backends to compare (default: those available on the device with kernels).
        start: ``state -> state``, from the reset state (``get_state()``, a dict of tensors) to the
            state every backend continues from (``set_state``), for rules random play reaches late or
            never (a wall, a speed cap, a crowd, the end of an episode); or ``{name: state -> state}``,
            several such states, each checked in turn (a failure names its start); default: the reset state.
        rtol, atol: a tolerance for float outputs and states (default: exact).
    """
    spec = game_spec(env_id) if is_game(env_id) else env_spec(env_id)
    params = spec.definition.make_params(params)
    by_nvcc = compile_cuda(spec, params) is not None
    by_nvrtc = compile_cuda_nvrtc(spec, params)
    if spec.kernels.cuda is not None and not (by_nvcc or by_nvrtc):
        warnings.warn(
            f"{spec.id}: its CUDA C kernels were not compiled: neither nvcc nor NVRTC is installed", stacklevel=2
        )
    device = torch.device(device)
    if backends is None:
        with_kernels = [name for name, (field, _) in SOURCES.items() if getattr(spec.kernels, field) is not None]
        backends = [name for name in available_backends(device) if name in with_kernels]
        for name in with_kernels:
            reason = unavailable_reason(name, device, spec)
            # Without a GPU the CUDA C kernels are compiled (above), never run.
            if reason and (device.type == "cuda" or name == "numba"):
                warnings.warn(f"{spec.id}: its {SOURCES[name][1]} kernels were not checked: {reason}", stacklevel=2)
    twins = list(backends)
    comparison = _GameComparison if spec.is_game else _EnvComparison
    starts = start if isinstance(start, dict) else {None: start}
    for backend in twins:
        ended = 0
        for name, begin in starts.items():
            for mode in AutoresetMode:
                twins_from = comparison(spec, params, device, backend, mode, num_envs, seed, rtol, atol)
                if name is not None:
                    twins_from.context += f" from start {name!r}"
                ended += twins_from.run(num_steps, begin)
        if not ended:
            raise AssertionError(
                f"{spec.id}: no episode ended within {num_steps} steps, so autoreset went "
                "unchecked: pass params with shorter episodes, or more num_steps"
            )
    for backend in ["torch", *twins]:
        _check_bad_input(spec, params, device, backend)
    _check_api(spec, params)


def compile_cuda(spec: RegisteredEnv, params=None, arch: str = NVCC_ARCH) -> str | None:
    """The PTX of ``spec``'s CUDA C file for ``params``, compiled by nvcc (the CUDA C backend's compiler
    where NVRTC cannot be loaded); None where nvcc is not installed or the env has no CUDA C file.
    Errors and warnings raise."""
    from gpu_marl_envs.backends import pycuda_backend

    if spec.kernels.cuda is None or shutil.which("nvcc") is None:
        return None
    source = _cuda_source(spec, params)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / spec.kernels.cuda.name
        path.write_text(source)
        includes = [f"-I{d}" for d in pycuda_backend.include_dirs(spec.kernels.cuda)]
        result = subprocess.run(
            ["nvcc", "-ptx", f"-arch={arch}", *includes, str(path), "-o", str(path) + ".ptx"],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0 or "warning" in result.stderr.lower():
            raise AssertionError(f"{spec.id}: nvcc failed on {spec.kernels.cuda} with {params}:\n{result.stderr}")
        ptx = Path(str(path) + ".ptx").read_text()
    for kind in ("step", "reset"):
        if f".entry {spec.kernel_name}_{kind}(" not in ptx:
            macro = "GME_MULTI_AGENT_KERNELS(YourGame)" if spec.is_game else "GME_CLASSIC_KERNELS(YourEnv)"
            raise AssertionError(
                f"{spec.kernels.cuda} defines no kernel {spec.kernel_name}_{kind}: the file writes a kernels "
                f"macro of its own (so the framework adds no {macro}), and it declared none of that name: write "
                "it where it always expands (not inside an #if), or delete it and let the framework write it"
            )
    return ptx


def compile_cuda_nvrtc(spec: RegisteredEnv, params=None) -> bool:
    """``spec``'s CUDA C file for ``params`` compiled as the CUDA C backend compiles it (NVRTC, for
    sm_90, ``backends/nvrtc.py``), where NVRTC loads and the env has a CUDA C file: NVRTC lacks the
    C++ standard library's headers that nvcc finds. Whether it compiled (False: no NVRTC or no
    file); errors raise."""
    from gpu_marl_envs.backends import nvrtc, pycuda_backend

    if spec.kernels.cuda is None or nvrtc.unavailable_reason() is not None:
        return False
    folders = pycuda_backend.include_dirs(spec.kernels.cuda)
    try:
        nvrtc.binary(_cuda_source(spec, params), spec.kernels.cuda.name, folders, (9, 0))
    except RuntimeError as error:
        raise AssertionError(f"{spec.id}: {error}") from None
    return True


def _cuda_source(spec: RegisteredEnv, params) -> str:
    from gpu_marl_envs.backends import multi_agent_pycuda, pycuda_backend

    if spec.is_game:
        return multi_agent_pycuda.kernel_source(spec, spec.definition.make_params(params))
    return pycuda_backend.kernel_source(spec)


# -- comparisons ---------------------------------------------------------------------------------


def first_difference(expected: torch.Tensor, actual: torch.Tensor, rtol: float = 0.0, atol: float = 0.0):
    """The index of the first element where ``actual`` differs from ``expected`` (exactly, or beyond
    the tolerance for floats), and how many differ; None where none does. Compared on ``expected``'s
    device: on a GPU, a host copy of every output at every step would cost more than the step."""
    if expected.shape != actual.shape:
        raise AssertionError(f"shapes differ: {tuple(expected.shape)} vs {tuple(actual.shape)}")
    actual = actual.to(expected.device)
    if expected.is_floating_point():
        both_nan = torch.isnan(expected) & torch.isnan(actual)
        close = (
            torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol)
            if rtol or atol
            else actual == expected
        )
        bad = ~(close | both_nan)
    else:
        bad = expected != actual
    if not bad.any():
        return None
    bad = bad.cpu()
    return tuple(int(i) for i in bad.nonzero()[0]), int(bad.sum())


class _Comparison:
    """A reference env and its twin on one backend, stepped side by side from identical states."""

    names: tuple[str, ...]  # the step outputs, in order

    def __init__(self, spec, params, device, backend, mode, num_envs, seed, rtol, atol):
        self.spec, self.mode, self.seed, self.rtol, self.atol = spec, mode, seed, rtol, atol
        self.reference, self.twin = (self.make(spec, params, device, b, mode, num_envs) for b in ("torch", backend))
        self.context = f"{spec.id} {backend} {mode.name}"
        self.generator = torch.Generator().manual_seed(seed)

    def run(self, num_steps: int, start) -> int:
        """Compare resets, then ``num_steps`` steps; returns how many episodes ended."""
        self.compare_outputs(self.reset(seed=self.seed), "reset(seed)")
        self.compare_states("reset(seed)")
        mask = torch.arange(self.twin.num_envs, device=self.twin.device) % 2 == 0
        self.compare_outputs(self.reset(options={"reset_mask": mask}), "reset(reset_mask)")
        self.compare_states("reset(reset_mask)")
        if start is not None:
            state = start(self.reference.get_state())
            for env in (self.reference, self.twin):
                env.set_state(state)
            self.compare_states("set_state(start(state))")
        ended = 0
        for t in range(num_steps):
            before = self.reference.get_state()
            self.copy_state()
            actions = self.random_actions()
            where = f"step {t}"
            self.compare_outputs(
                tuple(_clone(self.step(env, actions)) for env in (self.reference, self.twin)), where, before
            )
            self.compare_states(where, before)
            buffers = self.reference._buffers
            ended += int(buffers.terminated.sum() + buffers.truncated.sum())
            if self.mode == AutoresetMode.DISABLED:
                done = self.reference._buffers.needs_reset.clone()
                if done.any():
                    self.compare_outputs(self.reset(options={"reset_mask": done}), f"{where}, reset(reset_mask)")
                    self.compare_states(f"{where}, reset(reset_mask)")
        return ended

    def reset(self, **kwargs):
        return tuple(_clone(env.reset(**kwargs)) for env in (self.reference, self.twin))

    def compare(self, name: str, expected, actual, where: str, before=None) -> None:
        found = first_difference(expected, actual, self.rtol, self.atol)
        if found is None:
            return
        index, count = found
        expected_value, actual_value = expected.cpu()[index].item(), actual.cpu()[index].item()
        message = (
            f"{self.context}, {where}: {name} differs first at [{', '.join(map(str, index))}] "
            f"({self.describe(name, index)}): reference {expected_value!r}, twin {actual_value!r}; "
            f"{count} element(s) differ"
        )
        if before is not None and index:
            env = index[0]
            state = {field: _shortened(value[env].tolist()) for field, value in before.items()}
            message += f". Env {env}'s state before this step: {state}"
        raise AssertionError(message)

    def compare_states(self, where: str, before=None) -> None:
        expected, actual = self.reference.get_state(), self.twin.get_state()
        for name in expected:
            self.compare(f"state[{name!r}]", expected[name], actual[name], where, before)
        for name in ("episodes", "needs_reset"):
            self.compare(name, getattr(self.reference._buffers, name), getattr(self.twin._buffers, name), where, before)

    def copy_state(self) -> None:
        """The reference's state into the twin, so that each step starts from identical states
        (chaotic dynamics would amplify any tolerated difference)."""
        for name, value in self.reference.get_state().items():
            self.twin_state(name).copy_(value)


class _EnvComparison(_Comparison):
    def make(self, spec, params, device, backend, mode, num_envs):
        from gpu_marl_envs.vector_env import GpuVectorEnv

        # Unvalidated: the random actions go past the bounds, to compare the backends' clipping.
        return GpuVectorEnv(
            spec.id,
            num_envs,
            device=device,
            backend=backend,
            params=params,
            autoreset_mode=mode,
            cuda_graph=False,
            validate_actions=False,
        )

    @staticmethod
    def step(env, actions):
        return env.step(actions)

    def twin_state(self, name: str) -> torch.Tensor:
        return self.twin._buffers.state[self.twin.state_fields.index(name)]

    def random_actions(self) -> torch.Tensor:
        return random_actions(
            self.reference.single_action_space,
            self.reference.num_envs,
            self.generator,
            self.reference.device,
            past_bounds=0.5,
        )

    def describe(self, name: str, index: tuple[int, ...]) -> str:
        return f"env {index[0]}" + (f", element {index[1:]}" if len(index) > 1 else "")

    def compare_outputs(self, outputs, where: str, before=None) -> None:
        expected, actual = outputs
        if len(expected) == 2:  # reset: (observations, infos)
            self.compare("observations", expected[0], actual[0], where, before)
            return
        for name, e, a in zip(("observations", "rewards", "terminated", "truncated"), expected, actual):
            self.compare(name, e, a, where, before)
        if "_final_obs" in expected[4]:
            mask = expected[4]["_final_obs"]
            self.compare("infos['_final_obs']", mask, actual[4]["_final_obs"], where, before)
            self.compare("infos['final_obs']", expected[4]["final_obs"][mask], actual[4]["final_obs"][mask], where)
        self.compare(
            "elapsed_steps", self.reference._buffers.elapsed_steps, self.twin._buffers.elapsed_steps, where, before
        )


class _GameComparison(_Comparison):
    def make(self, spec, params, device, backend, mode, num_envs):
        from gpu_marl_envs.parallel_env import GpuParallelEnv

        # Unvalidated: Box actions go past the bounds and some are NaN, to compare the backends'
        # clipping and their reading of NaN.
        return GpuParallelEnv(
            spec.id,
            num_envs,
            device=device,
            backend=backend,
            params=params,
            autoreset_mode=mode,
            cuda_graph=False,
            validate_actions=False,
        )

    def reset(self, **kwargs):
        return tuple(_clone(env.reset_groups(**kwargs)) for env in (self.reference, self.twin))

    @staticmethod
    def step(env, actions):
        return env.step_groups(actions)

    def twin_state(self, name: str) -> torch.Tensor:
        return getattr(self.twin._buffers.state, name)

    def random_actions(self) -> dict[str, torch.Tensor]:
        actions = random_group_actions(self.reference, self.generator, past_bounds=0.5)
        for group, values in actions.items():
            if values.is_floating_point():  # about one value in ten NaN
                nan = torch.rand(values.shape, generator=self.generator) < 0.1
                actions[group] = values.masked_fill(nan.to(values.device), math.nan)
        return actions

    def describe(self, name: str, index: tuple[int, ...]) -> str:
        group = name.partition("[")[2].partition("]")[0]  # outputs by group: "rewards[runners]"
        if group in self.reference.groups and len(index) > 1:
            agent = self.reference.groups[group][index[1]]
            return f"env {index[0]}, {agent}" + (f", element {index[2:]}" if len(index) > 2 else "")
        return f"env {index[0]}" + (f", element {index[1:]}" if len(index) > 1 else "")

    def compare_outputs(self, outputs, where: str, before=None) -> None:
        expected, actual = outputs
        names = (
            ("observations", "infos")
            if len(expected) == 2
            else ("observations", "rewards", "terminations", "truncations", "infos")
        )
        for name, e, a in zip(names, expected, actual):
            if name != "infos":
                for group in e:
                    self.compare(f"{name}[{group}]", e[group], a[group], where, before)
                continue
            for group, info in e.items():
                if info.keys() != a[group].keys():
                    raise AssertionError(
                        f"{self.context}, {where}: infos[{group}] has keys {sorted(a[group])}, "
                        f"the reference {sorted(info)}"
                    )
                for key, value in info.items():
                    other = a[group][key]
                    if key == "final_obs":  # meaningful where an episode ended
                        value, other = value[info["_final_obs"]], other[info["_final_obs"]]
                    if key == "episode":  # the returns and totals of the episodes that ended
                        for metric in value:
                            self.compare(
                                f"infos[{group}][episode][{metric}]",
                                value[metric][info["_episode"]],
                                other[metric][info["_episode"]],
                                where,
                            )
                        continue
                    self.compare(f"infos[{group}][{key}]", value, other, where, before)
        self.compare(
            "running_returns",
            self.reference._buffers.running_returns,
            self.twin._buffers.running_returns,
            where,
            before,
        )


def _shortened(values, most: int = 16):
    """``values`` (a number or a list), its first ``most`` elements where longer."""
    return values if not isinstance(values, list) or len(values) <= most else values[:most] + ["..."]


def _clone(value):
    """A deep copy of a step's outputs (tuples and dicts of tensors): the env overwrites them in place."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return tuple(_clone(v) for v in value)


def random_actions(
    space: spaces.Space, num_envs: int, generator: torch.Generator, device="cpu", past_bounds: float = 0.0
) -> torch.Tensor:
    """Valid discrete actions; continuous ones uniform within the bounds scaled by ``1 + past_bounds``
    (``0.5``: spread 50% past them, to exercise the dynamics' clipping in envs made with
    ``validate_actions=False``, which refuses them otherwise)."""
    if isinstance(space, spaces.Discrete):
        return torch.randint(0, int(space.n), (num_envs,), generator=generator).to(device)
    low = torch.as_tensor(space.low) * (1 + past_bounds)
    high = torch.as_tensor(space.high) * (1 + past_bounds)
    return (low + (high - low) * torch.rand((num_envs, *space.shape), generator=generator)).to(device)


def random_space_actions(
    space: spaces.Space, batch: tuple[int, ...], generator: torch.Generator, past_bounds: float = 0.0
) -> torch.Tensor:
    """``(*batch, *space.shape)`` uniform random actions of a ``Discrete``, ``MultiDiscrete`` or
    ``Box`` space (indices int64, values float32; Box values spread past the bounds by
    ``past_bounds`` of their width on each side), drawn on the generator's device."""
    device = generator.device
    if isinstance(space, spaces.Box):
        low = torch.as_tensor(space.low, dtype=torch.float32, device=device)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=device)
        width = high - low
        u = torch.rand((*batch, *space.shape), generator=generator, device=device)
        return low - past_bounds * width + (1 + 2 * past_bounds) * width * u
    highs = [int(space.n)] if isinstance(space, spaces.Discrete) else [int(n) for n in space.nvec]
    columns = [torch.randint(0, h, batch, generator=generator, device=device) for h in highs]
    return columns[0] if isinstance(space, spaces.Discrete) else torch.stack(columns, dim=-1)


def random_group_actions(env, generator: torch.Generator, past_bounds: float = 0.0) -> dict[str, torch.Tensor]:
    """Random actions of a ``GpuParallelEnv`` keyed by group, ``(num_envs, group_size, *action_shape)``,
    drawn on the generator's device, on the env's: valid indices, and Box values within the bounds
    or, with ``past_bounds``, spread past them (for an env made with ``validate_actions=False``)."""
    return {
        group: random_space_actions(
            env.action_space(agents[0]), (env.num_envs, len(agents)), generator, past_bounds
        ).to(env.device)
        for group, agents in env.groups.items()
    }


# -- bad input, API tests --------------------------------------------------------------------------


def _check_bad_input(spec: RegisteredEnv, params, device, backend: str) -> None:
    """Each bad action raises, before anything is stepped: the state is unchanged."""
    context = f"{spec.id} {backend}"
    if spec.is_game:
        from gpu_marl_envs.parallel_env import GpuParallelEnv

        env = GpuParallelEnv(spec.id, 2, device=device, backend=backend, params=params, cuda_graph=False)
        env.reset(seed=0)
        good = random_group_actions(env, torch.Generator().manual_seed(0))
        group = next(iter(good))
        value = good[group]
        if value.is_floating_point():
            high = torch.as_tensor(env.action_space(env.groups[group][0]).high, device=env.device)
            changed = {
                "NaN": torch.full_like(value, math.nan),
                "infinite": torch.full_like(value, -math.inf),
                "beyond the bounds": (high + high.abs() + 1).expand_as(value),
                "of the wrong dtype": value.double(),
            }
        else:
            changed = {"out of range": value + 10_000, "negative": value - 10_000, "of the wrong dtype": value.int()}
        changed["of the wrong shape"] = value[:1]
        bad = {what: {**good, group: actions} for what, actions in changed.items()}
        step = env.step_groups
    else:
        from gpu_marl_envs.vector_env import GpuVectorEnv

        env = GpuVectorEnv(spec.id, 2, device=device, backend=backend, params=params, cuda_graph=False)
        env.reset(seed=0)
        good = random_actions(env.single_action_space, 2, torch.Generator().manual_seed(0), env.device)
        if isinstance(env.single_action_space, spaces.Discrete):
            bad = {
                "out of range": good + int(env.single_action_space.n),
                "negative": good - 10_000,
                "of the wrong dtype": good.to(torch.int32),
            }
        else:
            high = torch.as_tensor(env.single_action_space.high, device=env.device)
            bad = {
                "NaN": torch.full_like(good, math.nan),
                "infinite": torch.full_like(good, -math.inf),
                "beyond the bounds": torch.where(torch.isfinite(high), high + high.abs() + 1, good).expand_as(good),
                "of the wrong dtype": good.double(),
            }
        bad["of the wrong shape"] = good[:1]
        step = env.step
    before = env.get_state()
    for what, actions in bad.items():
        try:
            step(actions)
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError(f"{context}: actions {what} were accepted; validate_actions=True must refuse them")
        for name, value in env.get_state().items():
            if first_difference(before[name], value) is not None:
                raise AssertionError(f"{context}: refusing actions {what} changed state[{name!r}]")


def _check_api(spec: RegisteredEnv, params) -> None:
    """Gymnasium's checker on one env, or PettingZoo's API test on one game (the torch reference)."""
    if spec.is_game:
        from pettingzoo.test import parallel_api_test

        from gpu_marl_envs.pettingzoo_env import PettingZooParallelEnv

        with warnings.catch_warnings():
            # The API test probes reset(options=...), which PettingZooParallelEnv ignores with a warning.
            warnings.filterwarnings("ignore", message="PettingZooParallelEnv.reset supports no options")
            parallel_api_test(PettingZooParallelEnv(spec.id, params=params), num_cycles=50)
        return
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env

    from gpu_marl_envs.single_env import GpuEnv

    gymnasium_check_env(GpuEnv(spec.id, params=params), skip_render_check=True)
