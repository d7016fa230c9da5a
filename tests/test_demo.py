"""The README's main job runs (tiny sizes here) and reports every env."""

import subprocess
import sys

import gpu_marl_envs


def test_demo_runs_every_env():
    result = subprocess.run([sys.executable, "-m", "gpu_marl_envs.demo", "--num-envs", "16", "--steps", "30",
                             "--num-games", "2", "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    names = [spec.definition.id for spec in gpu_marl_envs.ENVS.values()]
    for env_id in [*names, "TagContinuous-v0", "TagGridworld-v0"]:
        assert any(line.startswith(env_id) and "torch" in line for line in result.stdout.splitlines()), \
            f"{env_id} missing from the demo's report:\n{result.stdout}"
