#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# consumers.sh SOURCE_DIR BUILD_DIR: the installed library as a user meets it. Installs
# the build into a temporary prefix and checks what it exports and declares; then
# builds and runs examples/consumer against it as C and as C++, with the shared and
# with the static library, through pkg-config and through find_package(normkernels),
# as on a machine with only the library, a compiler and its libgomp: Highway and
# clang's OpenMP are hidden (tests/without_packages.sh).
# consumers.sh --inside SOURCE_DIR PREFIX TMP: only those builds, where Highway is
# absent (tests/clean_machine.sh runs them in a debootstrap chroot).
set -euo pipefail
passed=0
pass() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; exit 1; }

# consumers SOURCE_DIR PREFIX TMP: the builds, from C and from C++.
consumers() {
  local src=$1 prefix=$2 tmp=$3 libdir static lang cc lib out
  local c=$src/examples/consumer/consumer.c strict="-pedantic -Wall -Wextra -Werror"
  libdir=$(dirname "$(find "$prefix" -name libnormkernels.so -print -quit)")
  # pkg-config --static is for a prefix without the shared library.
  static=${libdir/#$prefix/$tmp/static}
  cp -a "$prefix" "$tmp/static"
  rm "$static"/libnormkernels.so*
  for lang in C CXX; do
    if [ $lang = C ]; then cc="gcc -std=c99 -x c"; else cc="g++ -std=c++11 -x c++"; fi
    out=$tmp/pc-$lang
    $cc $strict "$c" -x none -o "$out" \
      $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs normkernels) -lm
    LD_LIBRARY_PATH=$libdir "$out" > /dev/null
    pass "pkg-config, shared, $lang"
    $cc $strict "$c" -x none -o "$out-static" \
      $(PKG_CONFIG_PATH=$static/pkgconfig pkg-config --static --cflags --libs normkernels)
    run_static "$out-static"
    pass "pkg-config --static, $lang"
    for lib in normkernels normkernels_static; do
      out=$tmp/cmake-$lang-$lib
      { cmake -S "$src/examples/consumer" -B "$out" -DCMAKE_PREFIX_PATH="$prefix" \
          -DCONSUMER_LANGUAGE=$lang -DCONSUMER_LIBRARY=$lib && cmake --build "$out"; } \
        > "$tmp/log" 2>&1 || { cat "$tmp/log"; fail "find_package, $lib, $lang"; }
      if [ $lib = normkernels ]; then
        LD_LIBRARY_PATH=$libdir "$out/consumer" > /dev/null
      else
        run_static "$out/consumer"
      fi
      pass "find_package, $lib, $lang"
    done
  done
}

# run_static PROGRAM: runs a program linked with libnormkernels.a.
run_static() {
  ! readelf -d "$1" | grep -q 'NEEDED.*libnormkernels' || fail "$1 needs the .so"
  "$1" > /dev/null
}

if [ "$1" = --inside ]; then
  shift
  ! pkg-config --exists libhwy || fail "libhwy.pc is still visible"
  ! echo '#include <hwy/base.h>' | g++ -x c++ -fsyntax-only - 2> /dev/null ||
    fail "Highway's headers are still visible"
  consumers "$@"
  echo "$passed passed without Highway, 0 failed"
  exit 0
fi

src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > /dev/null
libdir=$(dirname "$(find "$prefix" -name libnormkernels.so -print -quit)")

exports=$(nm -D --defined-only "$libdir/libnormkernels.so" | awk '{print $3}')
! grep -v '^nk_' <<< "$exports" || fail "libnormkernels.so exports more than nk_*"
pass "only nk_* exported ($(wc -l <<< "$exports") symbols)"

# What the package declares: nothing of Highway's for its users, not even a define.
pc=$libdir/pkgconfig/normkernels.pc
! grep '^Requires' "$pc" || fail "normkernels.pc requires other packages"
for flag in $(pkg-config --cflags "$pc"); do
  [[ $flag == -I* ]] || fail "pkg-config --cflags gives $flag"
done
! grep -r 'find_dependency\|hwy::' "$libdir/cmake" || fail "the CMake package needs more"
pass "the package needs no other package"
if [ -f "$src/LICENSE" ]; then
  cmp "$src/LICENSE" "$prefix/share/doc/normkernels/LICENSE"
  pass "LICENSE installed"
fi

# The README's C snippet is the example's code, line for line.
awk '/^```c$/{on=1; next} /^```$/{on=0} on' "$src/README.md" | grep -v '^#include\|^$' |
while IFS= read -r line; do
  grep -qF -- "$(echo "$line" | sed 's/^ *//')" "$src/examples/consumer/consumer.c" ||
    fail "README line not in consumer.c: $line"
done
pass "README's C snippet is consumer.c's"

status=0
bash "$(dirname "$0")/without_packages.sh" 'libhwy*' 'libomp*' -- \
  bash "$0" --inside "$src" "$prefix" "$tmp" || status=$?
if [ $status -eq 77 ]; then
  echo "SKIP: the consumers are built with Highway installed instead"
  consumers "$src" "$prefix" "$tmp"
  exit 77
fi
[ $status -eq 0 ] || exit $status
echo "$passed passed, 0 failed"
