#!/usr/bin/env bash
# Download into .peerwheels/ of the current git checkout the wheels that the GPU machine (Python 3.12,
# x86-64, no package index) needs to import the MPE peers of benchmarks/mpe_throughput.py, and into
# .peerwheels/leanrl/ LeanRL's TD3 scripts and the wheels they import (benchmarks/peers/leanrl_td3.py);
# ignore that folder locally. Run it where pip reaches the package index; see README.md beside it.
set -euo pipefail
VMAS_VERSION=1.5.2
JAXMARL_VERSION=${JAXMARL_VERSION:-0.2.0}  # the newest release on the index when this was written
# LeanRL is no package: its scripts come from a git copy of it (a clone of pytorch-labs/LeanRL), at the
# newest commit when this was written.
LEANRL_GIT=${LEANRL_GIT:-/work/.mirror/pytorch-labs+LeanRL/repo}
LEANRL_COMMIT=8dbb6336b7f6cc65cdbbeb2e86637c38867e2677
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

# LeanRL's TD3: the wheels its two scripts import that the GPU machine lacks (it has tqdm, packaging,
# cloudpickle, pandas; stable-baselines3 and gymnasium come from .devwheels/). tensordict 0.12.4, not newer:
# from 0.13 on, `to_module` keeps a module's parameters as parameters, so the detached copy of the actor
# that the script acts with returns actions that require grad, and its eager run fails at `.numpy()`.
# Its _C.so links no libtorch. torchrl 0.12.0 (it pins tensordict <0.13; its C++ extension, which serves only
# prioritized replay, warns and is skipped where built against another torch); pyvers is theirs;
# docstring-parser, typeguard and typing-extensions are tyro's (typing-extensions for a version >= 4.14).
# Not wandb (20 MB, with opentelemetry and pydantic): leanrl_td3.py puts a stub first on the path, whose
# wandb.log records the speed that the scripts log.
"${pip[@]}" download -q --no-deps "${target[@]}" -d "$dir/leanrl" tensordict==0.12.4 torchrl==0.12.0 \
  pyvers==0.2.3 tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 typing-extensions==4.16.0
# LeanRL's era (its requirements pin numpy<2): gymnasium 0.29.1 puts `final_observation` in a vector env's infos,
# which td3_continuous_action.py reads at each truncation (gymnasium 1.x has none: KeyError), and needs
# numpy < 2 (np.bool8). In a folder of their own: leanrl_td3.py --legacy-site puts them first for the scripts only.
"${pip[@]}" download -q --no-deps "${target[@]}" -d "$dir/leanrl/legacy" gymnasium==0.29.1 numpy==1.26.4
leanrl_scripts=(leanrl/td3_continuous_action.py leanrl/td3_continuous_action_torchcompile.py LICENSE)
if git --git-dir="$LEANRL_GIT" cat-file -e "$LEANRL_COMMIT^{commit}" 2>/dev/null; then
  for file in "${leanrl_scripts[@]}"; do
    git --git-dir="$LEANRL_GIT" show "$LEANRL_COMMIT:$file" > "$dir/leanrl/$(basename "$file")"
  done
  echo "$LEANRL_COMMIT" > "$dir/leanrl/COMMIT"
else
  echo "stage.sh: no LeanRL commit $LEANRL_COMMIT in LEANRL_GIT=$LEANRL_GIT (a clone of pytorch-labs/LeanRL): its scripts are not staged" >&2
  leanrl_missing=1
fi

grep -qx '/.peerwheels/' "$top/.git/info/exclude" 2>/dev/null || echo '/.peerwheels/' >> "$top/.git/info/exclude"
ls -l "$dir" "$dir/leanrl" "$dir/leanrl/legacy"
echo "staged $(find "$dir" -name '*.whl' | wc -l) wheels, $(du -sh "$dir" | cut -f1), in .peerwheels/ (carry it: [\".peerwheels\"])"
exit "${leanrl_missing:-0}"
