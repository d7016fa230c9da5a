"""What Numba's on-disk cache keys a kernel on (issue 46's compile cost): its code and its closure,
pickled, where the framework's shells put ``numba_api.sources_key`` of the rules they are built
around. The key must change with any source the kernel is compiled from, and only with those, and
be the same in every process (else a second process never finds the first one's kernels). The
GPU side, a second process loading the kernels from disk, is ``test_gpu_numba_cache.py``."""

import os
import subprocess
import sys

RULES = """from numba import cuda
import helpers
from constants import SCALE
@cuda.jit(device=True)
def rule(x):
    return helpers.twice(x) * SCALE
"""
HELPERS = """from numba import cuda
@cuda.jit(device=True)
def twice(x):
    return x * 2.0
"""
CONSTANTS = "SCALE = 1.5\n"
UNRELATED = "VALUE = 1\n"
EDITS = [
    ("rules.py", "* SCALE", "* SCALE + x"),  # the rule itself
    ("helpers.py", "x * 2.0", "x * 3.0"),  # a helper called through its module
    ("constants.py", "1.5", "2.5"),  # a constant imported by name
    ("unrelated.py", "1", "2"),  # a module the rules do not import: no change
]
# The key hashes the files as they are on disk, so one process sees each edit (undone after it).
KEYS = """import sys
from pathlib import Path
folder = Path(sys.argv[1])
sys.path.insert(0, str(folder))
import rules
from gpu_marl_envs.kernels.numba_api import sources_key
print(sources_key([rules.rule], (64, 2)))
for file, old, new in EDITS:
    path = folder / file
    text = path.read_text()
    path.write_text(text.replace(old, new))
    print(sources_key([rules.rule], (64, 2)))
    path.write_text(text)
print(sources_key([rules.rule], (64, 128)))  # other launch bounds
"""


def test_the_key_changes_with_each_source_of_the_rules_and_only_with_those(tmp_path):
    for name, text in (
        ("rules.py", RULES),
        ("helpers.py", HELPERS),
        ("constants.py", CONSTANTS),
        ("unrelated.py", UNRELATED),
        ("keys.py", f"EDITS = {EDITS!r}\n{KEYS}"),
    ):
        (tmp_path / name).write_text(text)
    runs = [
        subprocess.run([sys.executable, str(tmp_path / "keys.py"), str(tmp_path)], capture_output=True, text=True)
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert runs[1].stdout == runs[0].stdout  # the same in every process
    first, rule, helper, constant, unrelated, bounds = runs[0].stdout.split()
    assert len({first, rule, helper, constant, bounds}) == 5
    assert unrelated == first


PICKLES = """import hashlib
from numba.cuda.serialize import dumps  # what numba-cuda's cache pickles a kernel's closure with
from gpu_marl_envs import registration
from gpu_marl_envs.backends import multi_agent_numba, numba_backend
def show(kernel):
    assert "sources" in kernel.py_func.__code__.co_freevars, kernel
    closure = tuple(cell.cell_contents for cell in kernel.py_func.__closure__)
    print(kernel.py_func.__name__, hashlib.sha256(dumps(closure)).hexdigest())
for spec in registration.ENVS.values():
    for kernel in numba_backend._kernels(spec):
        show(kernel)
builds = len(registration.ENVS)
for spec in registration.GAMES.values():
    params = spec.definition.params_type()
    for warp_stores in (False, True) if multi_agent_numba._can_store_by_warp(spec, params) else (False,):
        for kernel in multi_agent_numba._kernels(spec, params, warp_stores)[:2]:
            show(kernel)
        builds += 1
print(builds, "builds")
"""


def test_every_bundled_kernel_has_the_same_cache_key_in_every_process():
    # Numba's CUDA target as on a GPU (not its simulator, which caches nothing): the kernels are
    # built but not compiled, so no GPU is needed.
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    runs = [subprocess.run([sys.executable, "-c", PICKLES], capture_output=True, text=True, env=env) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    *kernels, count = runs[0].stdout.splitlines()
    assert len(kernels) == 2 * int(count.split()[0])  # a step and a reset kernel each
    assert runs[1].stdout == runs[0].stdout
