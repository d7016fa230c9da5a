"""The kernels' parameter lists match the runtime's single sources of truth (``buffers.STEP_ARGUMENTS``,
``multi_agent_buffers.STEP_ARGUMENTS`` and the reset lists), and every CUDA C file compiles
(``nvcc -ptx``, and NVRTC as the CUDA C backend compiles it on the GPU) for params that switch each
compile-time branch. The framework declares the kernels of every env and game: its shells in both languages."""

import dataclasses
import inspect
import re
import shutil

import pytest

import gpu_marl_envs
from gpu_marl_envs import buffers, multi_agent_buffers
from gpu_marl_envs.backends import multi_agent_numba, numba_backend, nvrtc
from gpu_marl_envs.checker import compile_cuda, compile_cuda_nvrtc
from gpu_marl_envs.envs import tag_continuous_kernel_layout
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams
from gpu_marl_envs.registration import GAMES, env_spec

KERNELS = gpu_marl_envs.envs.bundled.KERNELS
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
needs_nvrtc = pytest.mark.skipif(nvrtc.unavailable_reason() is not None, reason=str(nvrtc.unavailable_reason()))


@pytest.fixture
def nvrtc_cache(tmp_path, monkeypatch):
    """NVRTC's binaries cached in the test's folder, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))


def _python_function(kernel):
    # A real Numba dispatcher keeps the Python function as py_func; the simulator's kernel as fn.
    return getattr(kernel, "py_func", None) or kernel.fn


def _macro_kernel_parameters(header: str, kernel_suffix: str) -> tuple[str, ...]:
    """The parameter names of a kernel of ``header``'s shells macro; a game's state (a parameter
    per field, ``GME_STATE_PARAMETERS``) as ``state``."""
    text = (KERNELS / header).read_text()
    match = re.search(r"name##_" + kernel_suffix + r"\s*\((.*?)\)\s*\{", text, re.S)
    assert match, f"{header} declares no name##_{kernel_suffix} kernel"
    signature = " ".join(match.group(1).replace("\\", " ").split()).replace("GME_STATE_PARAMETERS", "state")
    return tuple(re.findall(r"(\w+)\s*(?:,|$)", signature))


@pytest.mark.parametrize("kind, expected", [("step", buffers.STEP_ARGUMENTS), ("reset", buffers.RESET_ARGUMENTS)])
def test_classic_cuda_c_kernel_parameters(kind, expected):
    assert _macro_kernel_parameters("classic.cuh", kind) == expected


@pytest.mark.parametrize("kind, expected", [("step", buffers.STEP_ARGUMENTS), ("reset", buffers.RESET_ARGUMENTS)])
def test_classic_numba_kernel_parameters(env_id, kind, expected):
    step, reset = numba_backend._kernels(env_spec(env_id))
    assert tuple(inspect.signature(_python_function(step if kind == "step" else reset)).parameters) == expected


def test_params_record_layout_has_no_padding(env_id):
    # The CUDA C struct is passed by value as these bytes: 4-byte fields, no padding either side.
    definition = env_spec(env_id).definition
    record = definition.params_record(definition.params_type())
    assert record.dtype.itemsize == 4 * len(definition.kernel_params)


def test_kernel_values_follow_declared_types(env_id):
    # An int given for a float field (masscart=1) must still reach the kernels as float32.
    definition = env_spec(env_id).definition
    defaults = definition.params_type()
    integral = {
        f.name: int(getattr(defaults, f.name))
        for f in dataclasses.fields(defaults)
        if isinstance(getattr(defaults, f.name), float) and getattr(defaults, f.name).is_integer()
    }
    assert integral, f"{env_id}: no float param with an integral default to try"
    expected = definition.kernel_values(defaults)
    got = definition.kernel_values(dataclasses.replace(defaults, **integral))
    for name, value in expected.items():
        assert type(got[name]) is type(value) and got[name] == value, f"{name}: {got[name]!r} vs {value!r}"


@needs_nvcc
def test_classic_cuda_c_compiles(env_id):
    assert compile_cuda(env_spec(env_id)) is not None


@needs_nvrtc
def test_classic_cuda_c_compiles_with_nvrtc(env_id, nvrtc_cache):
    assert compile_cuda_nvrtc(env_spec(env_id))  # raises where it does not compile


# -- multi-agent games -------------------------------------------------------------------------

GAME_IDS = list(GAMES)


def _game_params(game_id):
    """Params that switch every compile-time branch of a game's kernels, and a large game."""
    params_type = GAMES[game_id].definition.params_type
    default = params_type()
    flags = [f.name for f in dataclasses.fields(params_type) if isinstance(getattr(default, f.name), bool)]
    variants = [default]
    for flag in flags:
        variants.append(dataclasses.replace(default, **{flag: not getattr(default, flag)}))
    if hasattr(default, "num_taggers"):
        # 4096 agents: runners where a game has several, else taggers.
        many = {"num_runners": 4096 - default.num_taggers} if hasattr(default, "num_runners") else {"num_taggers": 4095}
        variants.append(dataclasses.replace(default, **many))
    if hasattr(default, "neighbour_search"):
        # The grid at a small game (the two phases, with the staged motion of both kinds of step), with the
        # tag phase on it (10 taggers) and off it (2); the two phases at 1,000 agents with k = 12, whose
        # steps of two phases read the motion from the state; the scan at a large one; a game beyond
        # ROWS_BY_ID_MAX_AGENTS, whose rows go in the grid's order.
        variants += [
            dataclasses.replace(default, neighbour_search="grid"),
            dataclasses.replace(default, neighbour_search="grid", num_taggers=2),
            dataclasses.replace(default, num_runners=1000 - default.num_taggers, num_other_agents_observed=12),
            dataclasses.replace(default, num_runners=4086, neighbour_search="scan"),
            dataclasses.replace(
                default, num_runners=tag_continuous_kernel_layout.ROWS_BY_ID_MAX_AGENTS + 1 - default.num_taggers
            ),
        ]
    if hasattr(default, "N"):  # SimpleSpread: the 1,000 agents per game
        variants.append(dataclasses.replace(default, N=1000))
    if hasattr(default, "crra_eta"):
        variants.append(dataclasses.replace(default, crra_eta=1.5))  # powf instead of the reciprocal
    return variants


@pytest.mark.parametrize(
    "kind, expected", [("step", multi_agent_buffers.STEP_ARGUMENTS), ("reset", multi_agent_buffers.RESET_ARGUMENTS)]
)
def test_game_cuda_c_kernel_parameters(kind, expected):
    assert _macro_kernel_parameters("multi_agent.cuh", kind) == expected


@pytest.mark.parametrize("game_id", GAME_IDS)
@pytest.mark.parametrize(
    "kind, expected",
    [
        ("step", multi_agent_buffers.STEP_ARGUMENTS + multi_agent_buffers.GROUP_ARGUMENTS),
        ("reset", multi_agent_buffers.RESET_ARGUMENTS),
    ],
)
def test_game_numba_kernel_parameters(game_id, kind, expected):
    spec = GAMES[game_id]
    step, reset, *_ = multi_agent_numba._kernels(spec, spec.definition.params_type(), False)
    assert tuple(inspect.signature(_python_function(step if kind == "step" else reset)).parameters) == expected


@needs_nvcc
@pytest.mark.parametrize("game_id", GAME_IDS)
def test_game_cuda_c_compiles(game_id):
    for params in _game_params(game_id):
        assert compile_cuda(GAMES[game_id], params) is not None


@needs_nvrtc
@pytest.mark.parametrize("game_id", GAME_IDS)
def test_game_cuda_c_compiles_with_nvrtc(game_id, nvrtc_cache):
    for params in _game_params(game_id):
        assert compile_cuda_nvrtc(GAMES[game_id], params)  # raises where it does not compile


def test_state_struct_follows_the_state_dataclass():
    """CUDA C's GmeState and the kernels' state parameters: a pointer per field, in order, typed
    as the reference's tensors."""
    from gpu_marl_envs.backends.multi_agent_pycuda import kernel_source

    spec = GAMES["gpu_marl_envs/TagContinuous-v0"]
    source = kernel_source(spec, TagContinuousParams())
    pointers = "float* x, float* y, float* direction, float* speed, float* acceleration, bool* in_game, int* t"
    assert f"#define GME_STATE_PARAMETERS {pointers}\n" in source
    assert "#define GME_STATE_ARGUMENTS {x, y, direction, speed, acceleration, in_game, t}\n" in source
    assert f"struct GmeState {{ {pointers.replace(',', ';')}; }};" in source
