#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_arm.sh: builds the library and its tests for aarch64 on this x86 Debian machine
# (g++-aarch64-linux-gnu, the arm64 multiarch packages; installed when missing) and
# runs ctest under qemu-user. QEMU_CPU chooses the emulated CPU (default cortex-a72,
# NEON); BUILD_DIR the build tree (default build-arm). Other arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-arm}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
bash scripts/deps.sh build-essential cmake pkg-config g++-aarch64-linux-gnu qemu-user \
  libhwy-dev:arm64 libgtest-dev:arm64 libgomp1:arm64
cmake -S . -B "$build" --toolchain cmake/toolchains/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DNK_BUILD_TESTS=ON -DNK_BUILD_BENCHMARKS=OFF
cmake --build "$build" -j"$(nproc)"
QEMU_CPU=${QEMU_CPU:-cortex-a72} ctest --test-dir "$build" --output-on-failure \
  -j"$(nproc)" "$@"
