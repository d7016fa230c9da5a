"""The kernels' parameter lists and params structs match the runtime's single sources of truth,
and every CUDA C file compiles (``nvcc -ptx``; pycuda compiles the same way on the GPU)."""

import dataclasses
import importlib
import inspect
import re
import shutil
import subprocess
from importlib import resources

import pytest

import gpu_marl_envs
from gpu_marl_envs.backends.pycuda_backend import compile_definitions, kernel_dir
from gpu_marl_envs.buffers import RESET_ARGUMENTS, STEP_ARGUMENTS

KERNELS = resources.files("gpu_marl_envs.kernels")


def _python_function(kernel):
    # A real Numba dispatcher keeps the Python function as py_func; the simulator's kernel as fn.
    return getattr(kernel, "py_func", None) or kernel.fn


def _c_parameter_names(signature: str) -> tuple[str, ...]:
    return tuple(re.findall(r"(\w+)\s*(?:,|$)", " ".join(signature.replace("\\", " ").split())))


def _macro_kernel_parameters(kernel_suffix: str) -> tuple[str, ...]:
    text = (KERNELS / "classic.cuh").read_text()
    match = re.search(r"name##_" + kernel_suffix + r"\s*\((.*?)\)\s*\{", text, re.S)
    assert match, f"classic.cuh declares no name##_{kernel_suffix} kernel"
    return _c_parameter_names(match.group(1))


def _params_struct(source: str) -> list[tuple[str, str]]:
    env_struct = re.search(r"typedef\s+(\w+)\s+Params;", source)
    assert env_struct, "the Env struct must declare `typedef <ParamsStruct> Params;`"
    body = re.search(r"struct\s+" + env_struct.group(1) + r"\s*\{(.*?)\};", source, re.S)
    assert body, f"struct {env_struct.group(1)} not found"
    return re.findall(r"\b(float|int)\s+(\w+)\s*;", body.group(1))


@pytest.mark.parametrize("kind, expected", [("step", STEP_ARGUMENTS), ("reset", RESET_ARGUMENTS)])
def test_cuda_c_kernel_parameters(kind, expected):
    assert _macro_kernel_parameters(kind) == expected


@pytest.mark.parametrize("kind, expected", [("step", STEP_ARGUMENTS), ("reset", RESET_ARGUMENTS)])
def test_numba_kernel_parameters(env_id, kind, expected):
    name = gpu_marl_envs.ENVS[env_id].kernel_name
    module = importlib.import_module(f"gpu_marl_envs.kernels.{name}_numba")
    function = _python_function(getattr(module, f"{name}_{kind}"))
    assert tuple(inspect.signature(function).parameters) == expected


def test_params_struct_matches_definition(env_id):
    definition = gpu_marl_envs.ENVS[env_id]
    source = (KERNELS / f"{definition.kernel_name}.cu").read_text()
    values = definition.kernel_values(definition.params_type())
    expected = [("int" if v.dtype.kind == "i" else "float", name) for name, v in values.items()]
    assert _params_struct(source) == expected


def test_params_record_layout_has_no_padding(env_id):
    # The CUDA C struct is passed by value as these bytes: 4-byte fields, no padding either side.
    definition = gpu_marl_envs.ENVS[env_id]
    record = definition.params_record(definition.params_type())
    assert record.dtype.itemsize == 4 * len(definition.kernel_params)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
def test_cuda_c_compiles(env_id, tmp_path):
    definition = gpu_marl_envs.ENVS[env_id]
    name = definition.kernel_name
    command = ["nvcc", "-ptx", "-arch=sm_90", *compile_definitions(definition), f"-I{kernel_dir()}",
               str(KERNELS / f"{name}.cu"), "-o", str(tmp_path / f"{name}.ptx")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr
    ptx = (tmp_path / f"{name}.ptx").read_text()
    assert f".entry {name}_step(" in ptx and f".entry {name}_reset(" in ptx


def test_kernel_values_follow_declared_types(env_id):
    # An int given for a float field (masscart=1) must still reach the kernels as float32.
    definition = gpu_marl_envs.ENVS[env_id]
    defaults = definition.params_type()
    integral = {f.name: int(getattr(defaults, f.name)) for f in dataclasses.fields(defaults)
                if isinstance(getattr(defaults, f.name), float) and getattr(defaults, f.name).is_integer()}
    assert integral, f"{env_id}: no float param with an integral default to try"
    expected = definition.kernel_values(defaults)
    got = definition.kernel_values(dataclasses.replace(defaults, **integral))
    for name, value in expected.items():
        assert type(got[name]) is type(value) and got[name] == value, f"{name}: {got[name]!r} vs {value!r}"


# -- multi-agent games -------------------------------------------------------------------------

from gpu_marl_envs.backends.multi_agent_pycuda import kernel_source  # noqa: E402
from gpu_marl_envs.multi_agent_buffers import reset_arguments, step_arguments  # noqa: E402
from gpu_marl_envs.parallel_env import games  # noqa: E402
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams  # noqa: E402

GAME_IDS = sorted(games())


def _game_params(game_id):
    """Params that switch every compile-time branch of a game's kernels, and a large game."""
    params_type = games()[game_id].params_type
    default = params_type()
    flags = [f.name for f in dataclasses.fields(params_type) if isinstance(getattr(default, f.name), bool)]
    variants = [default] + [dataclasses.replace(default, **{flag: not getattr(default, flag)}) for flag in flags]
    if hasattr(default, "num_taggers"):
        # 4096 agents: runners where a game has several, else taggers.
        many = ({"num_runners": 4096 - default.num_taggers} if hasattr(default, "num_runners")
                else {"num_taggers": 4095})
        variants.append(dataclasses.replace(default, **many))
    if hasattr(default, "neighbour_search"):
        # The grid at a small game, with the tag phase on it (10 taggers) and off it (2); the scan at a large one.
        variants += [dataclasses.replace(default, neighbour_search="grid"),
                     dataclasses.replace(default, neighbour_search="grid", num_taggers=2),
                     dataclasses.replace(default, num_runners=4086, neighbour_search="scan")]
    if hasattr(default, "crra_eta"):
        variants.append(dataclasses.replace(default, crra_eta=1.5))  # powf instead of the reciprocal
    return variants


@pytest.mark.parametrize("game_id", GAME_IDS)
@pytest.mark.parametrize("kind", ["step", "reset"])
def test_game_cuda_c_kernel_parameters(game_id, kind):
    definition = games()[game_id]
    params = definition.params_type()
    expected = step_arguments(definition, params) if kind == "step" else reset_arguments(definition, params)
    source = (KERNELS / f"{definition.kernel_name}.cu").read_text()
    match = re.search(rf"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?{definition.kernel_name}_{kind}\s*"
                      r"\((.*?)\)\s*\{", source, re.S)
    assert match, f"{definition.kernel_name}.cu declares no {definition.kernel_name}_{kind} kernel"
    assert _c_parameter_names(match.group(1)) == expected


@pytest.mark.parametrize("game_id", GAME_IDS)
@pytest.mark.parametrize("kind", ["step", "reset"])
def test_game_numba_kernel_parameters(game_id, kind):
    definition = games()[game_id]
    params = definition.params_type()
    expected = step_arguments(definition, params) if kind == "step" else reset_arguments(definition, params)
    module = importlib.import_module(f"gpu_marl_envs.kernels.{definition.kernel_name}_numba")
    step, reset = module.make_kernels(definition.kernel_constants(params))
    function = _python_function(step if kind == "step" else reset)
    assert tuple(inspect.signature(function).parameters) == expected


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("game_id", GAME_IDS)
def test_game_cuda_c_compiles(game_id, tmp_path):
    definition = games()[game_id]
    name = definition.kernel_name
    for k, params in enumerate(_game_params(game_id)):
        source = tmp_path / f"{name}_{k}.cu"
        source.write_text(kernel_source(definition, params))
        command = ["nvcc", "-ptx", "-arch=sm_90", f"-I{kernel_dir()}", str(source), "-o", str(tmp_path / "out.ptx")]
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, f"{params}: {result.stderr}"
        assert "warning" not in result.stderr.lower(), f"{params}: {result.stderr}"
        ptx = (tmp_path / "out.ptx").read_text()
        assert f".entry {name}_step(" in ptx and f".entry {name}_reset(" in ptx


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("env_id, params", [
    ("CovidEconomy-v0", None),
    ("TagGridworld-v0", None),
    ("TagContinuous-v0", None),
    ("TagContinuous-v0", TagContinuousParams(num_runners=990)),  # with the neighbour grid
])
def test_shared_bytes_are_what_the_kernels_declare(tmp_path, env_id, params):
    """``shared_bytes`` (checked against the 48 KiB limit) is the static shared memory the CUDA C
    kernels declare (a kernel that needs none of it declares none); the Numba twins declare the
    same arrays. Dynamic shared memory is laid out by the game's Python code for both kernels."""
    definition = games()[env_id]
    params = params or definition.params_type()
    source = tmp_path / "covid_economy.cu"
    source.write_text(kernel_source(definition, params))
    command = ["nvcc", "-ptx", "-arch=sm_90", f"-I{kernel_dir()}", str(source), "-o", str(tmp_path / "out.ptx")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    declared = re.findall(r"^\s*\.shared\s.*\[(\d+)\];", (tmp_path / "out.ptx").read_text(), re.M)
    assert 1 <= len(declared) <= 2 and {int(size) for size in declared} == {definition.shared_bytes(params)}, declared
