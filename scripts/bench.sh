#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench.sh [--full] [benchmark flags]: sets up a fresh Debian machine, builds, and runs
# the benchmark suite: every kernel under every ISA beside the copy baseline and
# oneDNN. Prints the table, writes results/benchmark.json and results/benchmark.png,
# and regenerates README.md's results section from them; then times PyTorch's
# operators beside the library (bench/torch_compare.py: README's PyTorch section).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build-essential cmake pkg-config libhwy-dev libgtest-dev \
  libbenchmark-dev libdnnl-dev ocl-icd-opencl-dev python3-matplotlib python3-numpy \
  python3-torch
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3
cmake --build "$build" -j"$(nproc)" --target bench_normkernels normkernels
mkdir -p results
# Five repetitions of each case; the table uses the medians (this VM has minutes when
# one run of a large copy takes many times its usual time). Repetitions of all cases
# run in random order, so that a case and its copy baseline see the same drift of this
# machine's speed (a shared VM varies by 20-30% over minutes).
"$build"/bench/bench_normkernels --nk_json=results/benchmark.json \
  --benchmark_min_time=0.05 --benchmark_repetitions=5 \
  --benchmark_enable_random_interleaving=true \
  --benchmark_display_aggregates_only=true "$@"
/usr/bin/python3 scripts/bench_report.py results/benchmark.json results/benchmark.png README.md
# PyTorch's operators beside the library, per call from Python; glibc's mmap off, so
# that PyTorch's fresh outputs reuse memory (as with the allocators it recommends)
# instead of faulting in new pages on every call.
MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 \
  NK_LIBRARY="$build/libnormkernels.so" /usr/bin/python3 bench/torch_compare.py \
  --readme README.md
