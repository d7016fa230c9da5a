"""Where a fresh process's start goes (issues 44 and 46): cProfile of PPO CartPole's start
(``ppo.start`` and the first three iterations, PureJaxRL's config) or of a Numba CartPole env's first
build and reset, with the wall time at each mark. Run it twice with the same empty cache folders
(the first run cold, the second warm); it writes OUTPREFIX-cumulative.txt and OUTPREFIX-tottime.txt.

    export XDG_CACHE_HOME=/tmp/c TRITON_CACHE_DIR=/tmp/c/triton NUMBA_CACHE_DIR=/tmp/c/numba
    python benchmarks/experiments/start_profile.py ppo /tmp/ppo-cold
    python benchmarks/experiments/start_profile.py ppo /tmp/ppo-warm

(Run on an H200, 2026-11-29: nvcc, run by pycuda, took 1.05 s of a cold ``ppo.start``'s 1.25 s, which
led to NVRTC; docs/benchmarks/training.md.)
"""

import cProfile
import io
import pstats
import sys
import time


class Stop(Exception):
    """Raised from the training log after the third iteration."""


def ppo_start(marks: dict, start: float) -> None:
    import torch
    from gpu_marl_envs.baselines import on_policy, ppo

    marks["import"] = time.perf_counter() - start
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    marks["context"] = time.perf_counter() - start
    run, update = ppo.start("CartPole-v1", ppo.PPOConfig(seed=1), device="cuda")
    marks["start"] = time.perf_counter() - start
    iterations = []

    def log(entry):
        iterations.append(entry)
        marks[f"iteration{len(iterations)}"] = time.perf_counter() - start
        if len(iterations) >= 3:
            raise Stop

    try:
        on_policy.iterate(run, update, log_every=1, log=log, save=None, resume=None)
    except Stop:
        pass


def numba_build(marks: dict, start: float) -> None:
    import torch

    from gpu_marl_envs.vector_env import GpuVectorEnv

    marks["import"] = time.perf_counter() - start
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    marks["context"] = time.perf_counter() - start
    env = GpuVectorEnv("CartPole-v1", 4096, device="cuda", backend="numba")
    marks["built"] = time.perf_counter() - start
    env.reset(seed=0)
    torch.cuda.synchronize()
    marks["reset"] = time.perf_counter() - start


def main() -> None:
    what, prefix = sys.argv[1], sys.argv[2]
    began = time.perf_counter()
    import torch  # noqa: F401  (timed apart, as benchmarks/fresh_start.py does)

    import_torch = time.perf_counter() - began
    marks: dict[str, float] = {}
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    {"ppo": ppo_start, "numba": numba_build}[what](marks, start)
    profile.disable()
    print(f"import torch {import_torch:.3f}", {k: round(v, 3) for k, v in marks.items()}, flush=True)
    for key in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(key).print_stats(45)
        with open(f"{prefix}-{key}.txt", "w") as file:
            file.write(text.getvalue())


if __name__ == "__main__":
    main()
