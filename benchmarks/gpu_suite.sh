#!/usr/bin/env bash
# On a CUDA machine: the GPU tests, the throughput benchmarks and the gymnax peer baseline, in one
# session so that every number comes from the same GPU. Logs and tables go to $OUT (default
# benchmarks/results). Needs the [cuda] extra; the gymnax baseline needs jax and gymnax.
set -uo pipefail
out=${OUT:-benchmarks/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$out/gpu.txt"
# The GPU tests a file per process: a CUDA-graph capture that fails leaves torch's CUDA generator
# unusable for the rest of its process, so in one process every later test that draws random numbers
# would fail with it ("Offset increment outside graph capture"), hiding which test failed.
: > "$out/gpu-tests.log"
: > "$out/gpu-tests-full.log"
for file in $(grep -l "pytest.mark.gpu" tests/test_*.py); do
    python3 -m pytest -m gpu -q -p no:cacheprovider "$file" > "$out/gpu-test.log" 2>&1
    echo "$file: exit $? ($(tail -n 1 "$out/gpu-test.log"))" | tee -a "$out/gpu-tests.log"
    cat "$out/gpu-test.log" >> "$out/gpu-tests-full.log"
done
rm -f "$out/gpu-test.log"
python3 benchmarks/throughput.py --validate both --out "$out/throughput.md" --json "$out/throughput.json" 2>&1 | tee "$out/throughput.log"
python3 benchmarks/peers/gymnax_cartpole.py 2>&1 | tee "$out/gymnax.log"
python3 benchmarks/tag_throughput.py --out "$out/tag.md" --json "$out/tag.json" 2>&1 | tee "$out/tag.log"
