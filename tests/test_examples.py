"""The tutorial's example packages (docs/examples/, docs/custom_env.md) as a user has them: each copied
outside the repository and its own tests run there, against the installed gpu_marl_envs (the torch
reference, Numba's kernels under the CUDA simulator, the CUDA C file compiled by nvcc where nvcc is
installed), and a few training iterations of its shipped config through gpu-marl-train. On a GPU
(``pytest -m gpu``) the examples' own tests run the checker on both GPU backends."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GPU_BACKENDS

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
PACKAGES = sorted(path.name for path in EXAMPLES.iterdir() if (path / "pyproject.toml").is_file())


def run(command: list[str], package: Path) -> subprocess.CompletedProcess:
    # The package's folder on the path, as an editable install of it would put it (before whatever
    # path finds gpu_marl_envs); nothing of the repository's.
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(command, cwd=package, env=environment, capture_output=True, text=True, timeout=600)


@pytest.fixture(params=PACKAGES)
def package(request, tmp_path) -> Path:
    return Path(shutil.copytree(EXAMPLES / request.param, tmp_path / request.param))


def test_example_passes_its_own_tests(package):
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], package)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


def test_example_trains_with_its_config(package):
    config = next(package.glob("*.toml"))
    result = run(
        [
            sys.executable,
            "-m",
            "gpu_marl_envs.baselines.train",
            "--config",
            str(config),
            "--device",
            "cpu",
            "--set",
            "num_envs=8",
            "--set",
            "total_timesteps=2048",
            "--out",
            str(package / "run"),
        ],
        package,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert (package / "run" / "checkpoint.pt").is_file()


@pytest.mark.gpu
def test_example_passes_the_checker_on_both_gpu_backends(package, cuda_device):
    assert {"pycuda", "numba"} <= set(GPU_BACKENDS), f"both GPU backends are needed; available: {GPU_BACKENDS}"
    test_example_passes_its_own_tests(package)  # its tests check on the GPU where torch sees one
