"""Would Numba's on-disk kernel cache (``cuda.jit(cache=True)``) see a change in a game's rules
(issue 46, compile cost)? numba-cuda keys a cached kernel on its own bytecode and on its closure's
contents, pickled: a game's kernel shell is a closure over the game's device functions, so the key
covers what that pickle covers. This script builds a shell over a device function in a scratch
package, prints the key's closure hash, edits the package, and asks a fresh process again, for
each kind of edit: the device function's body, a module constant it reads, and a helper device
function it calls through its module (``helper.h(x)``) or imported by name (``from helper import h``).
No GPU is needed (nothing is compiled). The hash also covers where the modules lie, so each row's
"before" differs: compare each row's two columns. (Hence ``numba_api.sources_key``, which the
framework's shells keep in their closure: ``tests/test_numba_cache_key.py`` checks that it sees
every row's edit.)

    python benchmarks/experiments/numba_cache_key.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

RULES = """from numba import cuda
import helper
from helper import h as by_name
CONST = 1.0
@cuda.jit(device=True)
def rule(x):
    return {call}(x) + CONST + x
"""
HELPER = """from numba import cuda
@cuda.jit(device=True)
def h(x):
    return x * 2.0
"""
KEY = """import hashlib, sys
sys.path.insert(0, sys.argv[1])
from numba import cuda
from numba.cuda.serialize import dumps  # what numba-cuda's cache pickles the closure with
import rules
def make(rule):
    @cuda.jit
    def shell(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = rule(a[i])
    return shell
cells = tuple(c.cell_contents for c in make(rules.rule).py_func.__closure__)
print(hashlib.sha256(dumps(cells)).hexdigest()[:16])
"""
EDITS = [
    ("the rule's body", "rules.py", "+ CONST + x", "+ CONST - x"),
    ("a module constant the rule reads", "rules.py", "CONST = 1.0", "CONST = 3.0"),
    ("a helper's body", "helper.py", "x * 2.0", "x * 5.0"),
]


def key(folder: Path) -> str:
    done = subprocess.run([sys.executable, str(folder / "key.py"), str(folder)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    return done.stdout.strip()


def main() -> None:
    print("| the rule calls its helper | edit | closure hash before | after | cache sees it |")
    print("|---|---|---|---|---|")
    for call in ("helper.h", "by_name"):
        for name, file, old, new in EDITS:
            with tempfile.TemporaryDirectory() as scratch:
                folder = Path(scratch)
                (folder / "rules.py").write_text(RULES.format(call=call))
                (folder / "helper.py").write_text(HELPER)
                (folder / "key.py").write_text(KEY)
                before = key(folder)
                path = folder / file
                path.write_text(path.read_text().replace(old, new))
                after = key(folder)
            shown = "through its module" if call == "helper.h" else "imported by name"
            print(f"| {shown} | {name} | {before} | {after} | {'yes' if before != after else '**no**'} |")


if __name__ == "__main__":
    main()
