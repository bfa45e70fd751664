#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# consumers.sh SOURCE_DIR BUILD_DIR: installs the built library into a temporary
# prefix, then builds and runs a strict-C99 program against it through pkg-config and
# a CMake project through find_package(normkernels); checks the exported symbols.
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > /dev/null
libdir=$(dirname "$(find "$prefix" -name libnormkernels.so -print -quit)")

others=$(nm -D --defined-only "$libdir/libnormkernels.so" | awk '{print $3}' | grep -v '^nk_' || true)
if [ -n "$others" ]; then
  echo "FAIL: libnormkernels.so exports symbols other than nk_*:"; echo "$others"; exit 1
fi
echo "ok: only nk_* exported ($(nm -D --defined-only "$libdir/libnormkernels.so" | wc -l) symbols)"

export PKG_CONFIG_PATH=$libdir/pkgconfig
gcc -std=c99 -Wall -Wextra -Werror -pedantic "$src/examples/consumer/consumer.c" -o "$tmp/pc" \
  $(pkg-config --cflags --libs normkernels) -lm
LD_LIBRARY_PATH=$libdir "$tmp/pc"
echo "ok: pkg-config consumer"

g++ -std=c++11 -Wall -Wextra -Werror -x c++ -fsyntax-only "$prefix/include/normkernels.h"
echo "ok: header compiles as C++"

cmake -S "$src/examples/consumer" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$tmp/cmake" > /dev/null
LD_LIBRARY_PATH=$libdir "$tmp/cmake/consumer"
echo "ok: find_package consumer"
# The README's C snippet is the example's code, line for line.
awk '/^```c$/{on=1; next} /^```$/{on=0} on' "$src/README.md" | grep -v '^#include\|^$' |
while IFS= read -r line; do
  grep -qF -- "$(echo "$line" | sed 's/^ *//')" "$src/examples/consumer/consumer.c" ||
    { echo "FAIL: README line not in consumer.c: $line"; exit 1; }
done
echo "ok: README's C snippet is consumer.c's"
echo "4 passed, 0 failed"
