#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# install.sh [PREFIX]: builds the library and installs it under PREFIX (default
# /usr/local: PREFIX/include, PREFIX/lib, ...), then the Python package for Debian's
# /usr/bin/python3. The package records the path of the library installed with it and
# loads that one (NK_LIBRARY still overrides it), so a PREFIX outside the linker's path
# (/opt/normkernels, $HOME/.local) needs no LD_LIBRARY_PATH. Where the linker does look
# in PREFIX's lib (/usr/local/lib on Debian), its cache is refreshed for C programs.
# NK_BUILD_DIR=DIR installs that existing build tree instead of building one; pip's own
# settings apply to the package (PIP_TARGET=DIR installs it into DIR).
set -euo pipefail
prefix=$(realpath -m "${1:-/usr/local}")
build=${NK_BUILD_DIR:+$(realpath "$NK_BUILD_DIR")}
cd "$(dirname "$0")/.."
if [ -z "$build" ]; then
  bash scripts/deps.sh build-essential cmake pkg-config libhwy-dev python3-numpy \
    python3-pip python3-setuptools
  build=build-install
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DNK_BUILD_TESTS=OFF -DNK_BUILD_BENCHMARKS=OFF
  cmake --build "$build" -j"$(nproc)"
fi
cmake --install "$build" --prefix "$prefix"
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
library=$(ls "$libdir"/libnormkernels.so.[0-9]* | sort | head -n 1)  # the soname link
if grep -qsxF "$libdir" /etc/ld.so.conf /etc/ld.so.conf.d/*.conf; then
  ldconfig
fi
# The package is built from a copy of python/ that records the library's path.
# Debian's Python refuses plain pip installs (PEP 668); this package has no compiled
# code and no dependency beyond Debian's numpy.
package=$(mktemp -d)
trap 'rm -rf "$package"' EXIT
cp -r python/pyproject.toml python/normkernels "$package"
rm -rf "$package"/normkernels/__pycache__
/usr/bin/python3 -c 'import sys; print("# Written by scripts/install.sh: the library "
  "installed with this package.\nLIBRARY = %r" % sys.argv[1])' "$library" \
  > "$package/normkernels/_installed.py"
/usr/bin/python3 -m pip install --break-system-packages --no-build-isolation --no-index \
  --no-deps "$package"
echo "install.sh: library $library; Python package for /usr/bin/python3 loads it"
