#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# install.sh [PREFIX]: builds and installs the library (default /usr/local), refreshes
# the linker cache, and installs the Python package for Debian's /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
bash scripts/deps.sh build-essential cmake pkg-config libhwy-dev python3-numpy python3-pip \
  python3-setuptools
cmake -S . -B build-install -DCMAKE_BUILD_TYPE=Release -DNK_BUILD_TESTS=OFF -DNK_BUILD_BENCHMARKS=OFF
cmake --build build-install -j"$(nproc)"
cmake --install build-install --prefix "$prefix"
ldconfig
# Debian's Python refuses plain pip installs (PEP 668); this package has no compiled
# code and no dependency beyond Debian's numpy.
/usr/bin/python3 -m pip install --break-system-packages --no-build-isolation --no-index \
  --no-deps ./python
