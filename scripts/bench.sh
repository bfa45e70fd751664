#!/usr/bin/env bash
# bench.sh [benchmark args]: sets up a fresh Debian machine, builds, and prints the
# benchmark table: every kernel under every ISA beside the copy baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build-essential cmake pkg-config libhwy-dev libgtest-dev \
  libbenchmark-dev
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)" --target bench_layernorm
# Three repetitions of each case; the table uses the medians.
"$build"/bench/bench_layernorm --benchmark_min_time=0.1 --benchmark_repetitions=3 \
  --benchmark_display_aggregates_only=true "$@"
