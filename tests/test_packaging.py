"""Packaging: the repository's top-level kernels/, adapters/ and baselines/ folders are installed as
gpu_marl_envs.kernels, .adapters and .baselines (their bare names belong to other projects), both
by the editable install the tests run from and in a wheel built from the repository."""

from __future__ import annotations

import email.parser
import importlib
import importlib.metadata
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import resources
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from gpu_marl_envs.registration import ENVS, GAMES

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
SUBPACKAGES = {
    "gpu_marl_envs.kernels": "kernels",
    "gpu_marl_envs.adapters": "adapters",
    "gpu_marl_envs.baselines": "baselines",
}
# What a build needs from the repository, and what it must not see (other builds, venvs, caches).
BUILD_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv*",
    ".devwheels",
    ".whl",
    ".scratch",
    ".pytest_cache",
    "build",
    "dist",
    "__pycache__",
    "*.egg-info",
    "*.pyc",
)


@pytest.mark.parametrize("module, folder", SUBPACKAGES.items())
def test_subpackage_resolves_to_the_repository_folder(module, folder):
    imported = importlib.import_module(module)
    location = Path(imported.__file__).resolve().parent
    assert location == REPO / folder, f"{module} imports from {location}, expected the repository's {folder}/"
    assert Path(str(resources.files(module))).resolve() == REPO / folder, (
        f"importlib.resources.files({module!r}) is {resources.files(module)}, expected {REPO / folder}"
    )


# The package's own envs and games (the registry may hold others').
OURS = {env_id: spec for env_id, spec in {**ENVS, **GAMES}.items() if env_id.startswith("gpu_marl_envs/")}


@pytest.mark.parametrize("env_id", OURS)
def test_every_kernel_is_shipped_as_a_resource(env_id):
    spec = OURS[env_id]
    kernels = resources.files("gpu_marl_envs.kernels")
    assert spec.kernels.cuda.is_file() and (kernels / spec.kernels.cuda.name).is_file(), (
        f"{env_id}: {spec.kernels.cuda} is not under gpu_marl_envs.kernels ({kernels})"
    )
    module = importlib.import_module(spec.kernels.numba)
    assert module.__name__.startswith("gpu_marl_envs.kernels."), module.__name__
    functions = ("game_functions",) if spec.is_game else ("reset", "step", "observe")
    for name in functions:
        assert hasattr(module, name), f"{env_id}: {spec.kernels.numba} defines no {name}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the repository (the build writes build/ and egg-info where it runs)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    for requirement in map(Requirement, pyproject["build-system"]["requires"]):
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        assert installed is not None and requirement.specifier.contains(installed, prereleases=True), (
            f"building without isolation needs the build-system requirement {requirement} (installed: {installed}); "
            f"pip install '{requirement}'"
        )
    source = tmp_path_factory.mktemp("source")
    shutil.copytree(REPO, source, ignore=BUILD_IGNORE, dirs_exist_ok=True)
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"pip wheel failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    wheels = list(out.glob("gpu_marl_envs-*.whl"))
    assert len(wheels) == 1, f"pip wheel made {[p.name for p in out.iterdir()]}"
    return wheels[0]


def test_wheel_contains_kernels_adapters_and_baselines(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"gpu_marl_envs/adapters/__init__.py", "gpu_marl_envs/baselines/__init__.py"}
    # Every CUDA C source and header and every Python module of kernels/ (the Numba kernels and their helpers).
    for pattern in ("*.cu", "*.cuh", "*.py"):
        expected |= {f"gpu_marl_envs/kernels/{path.name}" for path in (REPO / "kernels").glob(pattern)}
    for spec in OURS.values():
        expected |= {f"gpu_marl_envs/kernels/{spec.kernels.cuda.name}", spec.kernels.numba.replace(".", "/") + ".py"}
    # And every module of the package itself.
    expected |= {
        f"gpu_marl_envs/{path.relative_to(REPO / 'gpu_marl_envs').as_posix()}"
        for path in (REPO / "gpu_marl_envs").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    missing = sorted(expected - names)
    assert not missing, f"{wheel.name} lacks {missing}"
    assert any(n.endswith(".cuh") for n in names) and any(n.endswith("_numba.py") for n in names)
    stray = sorted(n for n in names if n.split("/")[0] in SUBPACKAGES.values())
    assert not stray, f"{wheel.name} installs top-level {stray}; they belong under gpu_marl_envs/"


def test_wheel_finds_its_kernel_sources_when_installed_alone(wheel, tmp_path):
    """Unpacked on sys.path without the editable install (``python -S``: no .pth files), the
    package reads its .cu files through importlib.resources, as the pycuda backend does."""
    zipfile.ZipFile(wheel).extractall(tmp_path)
    site_packages = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    cuda_files = sorted(spec.kernels.cuda.name for spec in OURS.values())
    script = (
        "import sys; sys.path[:0] = sys.argv[1:]\n"
        "from importlib import resources\n"
        "import gpu_marl_envs, gpu_marl_envs.adapters, gpu_marl_envs.baselines\n"
        "print(gpu_marl_envs.__file__)\n"
        "kernels = resources.files('gpu_marl_envs.kernels')\n"
        f"for name in {cuda_files!r}:\n"
        "    assert (kernels / name).read_text().strip(), name\n"
        "assert all(spec.kernels.cuda.read_text() for spec in gpu_marl_envs.GAMES.values())\n"
        "print(sorted(gpu_marl_envs.ENVS))\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", script, str(tmp_path), *site_packages],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, f"the unpacked wheel failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    imported_from = Path(result.stdout.splitlines()[0]).resolve()
    assert imported_from.is_relative_to(tmp_path.resolve()), f"gpu_marl_envs was imported from {imported_from}"


def test_wheel_declares_what_numpy_io_needs(wheel):
    """GpuVectorEnv's docs send numpy users to gymnasium.wrappers.vector.ArrayConversion, which
    imports array_api_compat: the package must install it (tests/test_vector_api.py uses it too)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
    unconditional = [Requirement(r) for r in metadata.get_all("Requires-Dist", []) if "extra ==" not in r]
    provides = {r.name.lower().replace("_", "-") for r in unconditional}
    provides |= {"array-api-compat" for r in unconditional if r.name == "gymnasium" and "array-api" in r.extras}
    assert "array-api-compat" in provides, (
        f"Requires-Dist {[str(r) for r in unconditional]} lacks array-api-compat: add 'array-api-compat>=1.11' "
        "(or 'gymnasium[array-api]') to [project] dependencies in pyproject.toml"
    )
