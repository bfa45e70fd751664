#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench.sh [--update-results[=DOC]] [--no-build] [--no-torch] [--out=DIR] [--full]
#          [benchmark flags]
# Sets up a fresh Debian machine, builds, and runs the benchmark suite: the kernels
# under each ISA beside the copy baseline and oneDNN capped at the same ISA (one
# process per ISA, as oneDNN's cap is set once per process), every array on a 64-byte
# boundary and 16 bytes past one; then times PyTorch's operators beside the library
# (bench/torch_compare.py). Prints both tables, with each case's spread over its
# rounds (PyTorch's: over its repetitions) and a warning when the spreads say the
# machine was busy, and writes them, the JSON and the plot to DIR (default
# $BUILD_DIR/bench-results; relative paths start at the repository).
# Tracked files change only with --update-results: results/ (JSON and plot) and the
# results and PyTorch sections of DOC (default docs/performance.md).
#   --full      every kernel x ISA x shape (the default is a quick selection: the
#               cells of docs/performance.md's table at AVX3, AVX2 and SSE4, and the
#               plot's size sweeps)
#   --no-build  run the binary already built in $BUILD_DIR (no packages, no cmake)
#   --no-torch  skip the PyTorch comparison
# Other flags go to bench_normkernels (in every process), e.g.
# --benchmark_filter='^layernorm/' or --nk_rounds=3.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
out=$build/bench-results doc="" setup=1 torch=1 flags=()
for arg in "$@"; do
  case $arg in
    --update-results) doc=docs/performance.md ;;
    --update-results=*) doc=${arg#*=} ;;
    --no-build) setup=0 ;;
    --no-torch) torch=0 ;;
    --out=*) out=${arg#*=} ;;
    *) flags+=("$arg") ;;
  esac
done
update=()
if [ -n "$doc" ]; then  # before minutes of measuring: the sections to rewrite exist
  update=(--update "$doc")
  /usr/bin/python3 bench/reporting.py "$doc" results torch
fi
if [ $setup = 1 ]; then
  bash scripts/deps.sh build-essential cmake pkg-config libhwy-dev libgtest-dev \
    libbenchmark-dev libdnnl-dev ocl-icd-opencl-dev python3-matplotlib python3-numpy \
    python3-torch
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3
  cmake --build "$build" -j"$(nproc)" --target bench_normkernels normkernels
fi
mkdir -p "$out"
echo "bench.sh: writing to $out"
bench=$build/bench/bench_normkernels
full=()
for arg in "${flags[@]}"; do [ "$arg" = --full ] && full=(--full); done
# One process per oneDNN ISA (its ISAs on one line), each writing its part of the
# JSON. Five rounds: in each, every case runs and right after it its copy and oneDNN
# baselines, so that the three see this machine at the same speed (a shared VM varies
# by 20-30% over minutes, and its two threads reach memory at one of two speeds for
# minutes at a time); each ratio is the median of the rounds' ratios, and the table
# shows each side's spread over the rounds.
parts=()
for isas in $("$bench" --nk_processes "${full[@]}"); do
  echo "bench.sh: $isas, oneDNN capped at the same ISA"
  parts+=("$out/benchmark.${isas//,/-}.json")
  "$bench" --nk_isas="$isas" --nk_json="${parts[-1]}" \
    --nk_rounds=5 --benchmark_min_time=0.05 "${flags[@]}"
done
/usr/bin/python3 scripts/bench_report.py "$out/benchmark.json" --merge "${parts[@]}" \
  "${update[@]}"
if [ $torch = 1 ]; then
  # PyTorch's operators beside the library, per call from Python; glibc's mmap off, so
  # that PyTorch's fresh outputs reuse memory (as with the allocators it recommends)
  # instead of faulting in new pages on every call.
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 \
    NK_LIBRARY="$build/libnormkernels.so" /usr/bin/python3 bench/torch_compare.py \
    --out "$out" "${update[@]}"
fi
echo "bench.sh: results in $out"
