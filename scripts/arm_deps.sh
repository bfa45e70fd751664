#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# arm_deps.sh: what building for aarch64 on this x86 Debian machine and running under
# emulation needs, installed when missing (as root): Debian's arm64 architecture, the
# cross compilers, qemu-user, and the arm64 builds of Highway, GoogleTest, Google
# Benchmark and libgomp (multiarch, beside the amd64 ones).
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
bash scripts/deps.sh build-essential cmake pkg-config g++-aarch64-linux-gnu qemu-user \
  libhwy-dev:arm64 libgtest-dev:arm64 libbenchmark-dev:arm64 libgomp1:arm64
