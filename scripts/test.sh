#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test.sh: sets up a fresh Debian machine, builds everything and runs every test
# (ctest: kernels under every ISA, validation, consumers of the installed library, the
# MPI example on 1, 2 and 3 ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build-essential cmake pkg-config libhwy-dev libgtest-dev \
  libbenchmark-dev libdnnl-dev ocl-icd-opencl-dev openmpi-bin libopenmpi-dev \
  python3-matplotlib python3-numpy python3-pip python3-pytest python3-setuptools \
  python3-torch
build=${BUILD_DIR:-build}
# Every test and benchmark is asked for: a package missing stops the configure.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 \
  -DNK_BUILD_TESTS=ON -DNK_BUILD_BENCHMARKS=ON
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
