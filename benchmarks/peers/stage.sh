#!/usr/bin/env bash
# Download into .peerwheels/ of the current git checkout the wheels that the GPU machine (Python 3.12,
# x86-64, no package index) needs to import the MPE peers of benchmarks/mpe_throughput.py, and ignore
# that folder locally. Run it where pip reaches the package index; see README.md beside it.
set -euo pipefail
VMAS_VERSION=1.5.2
JAXMARL_VERSION=${JAXMARL_VERSION:-0.2.0}  # the newest release on the index when this was written
pip=(python3 -m pip)
top="$(git rev-parse --show-toplevel)"
dir="$top/.peerwheels"
rm -rf "$dir"
mkdir -p "$dir"
target=(--only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
# Each with --no-deps: the GPU machine has torch, numpy, jax, flax, chex, jaxtyping, matplotlib, pillow,
# cloudpickle and six already. What it lacks: jaxmarl itself; VMAS, its `gym` (VMAS's spaces) and gym's
# gym_notices. Not brought: pyglet (VMAS imports it only to render), gymnax (only jaxmarl's wrappers).
"${pip[@]}" download -q --no-deps "${target[@]}" -d "$dir" "jaxmarl==$JAXMARL_VERSION" gym-notices==0.0.8
# VMAS 1.5.2 and gym 0.26.2 are published as source only: build their pure-python wheels here.
"${pip[@]}" wheel -q --no-deps -w "$dir" "vmas==$VMAS_VERSION" gym==0.26.2
grep -qx '/.peerwheels/' "$top/.git/info/exclude" 2>/dev/null || echo '/.peerwheels/' >> "$top/.git/info/exclude"
ls -l "$dir"
echo "staged $(ls "$dir" | wc -l) wheels, $(du -sh "$dir" | cut -f1), in .peerwheels/ (carry it: [\".peerwheels\"])"
