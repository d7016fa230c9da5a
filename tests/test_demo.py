"""The README's main job runs (tiny sizes here) and reports every env."""

import subprocess
import sys

import gpu_marl_envs


def test_demo_runs_every_env():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpu_marl_envs.demo",
            "--num-envs",
            "16",
            "--steps",
            "30",
            "--num-games",
            "2",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # The package's own envs and games: the demo runs in a process of its own, where games that
    # tests register (glide/Glide-v0) are not.
    names = [
        spec.definition.id
        for spec in (*gpu_marl_envs.ENVS.values(), *gpu_marl_envs.GAMES.values())
        if spec.id.startswith(f"{gpu_marl_envs.registration.NAMESPACE}/")
    ]
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.split()}
    for env_id in names:
        assert env_id in lines and "torch" in lines[env_id], (
            f"{env_id} missing from the demo's report:\n{result.stdout}"
        )
    # 30 steps end no MountainCar episode (200 steps): no mean return is shown for none.
    assert lines["MountainCar-v0"].split()[-2:] == ["none", "ended"], lines["MountainCar-v0"]
    assert "governors" in lines["CovidEconomy-v0"] and "planner" in lines["CovidEconomy-v0"]
