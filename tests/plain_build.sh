#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# plain_build.sh SOURCE_DIR WORK_DIR: `cmake -S . -B build && cmake --build build` needs
# only a compiler, CMake and libhwy-dev. Without GTest, Google Benchmark and oneDNN
# (hidden by tests/without_packages.sh) the configure skips the tests and benchmarks,
# naming the missing package, and the library builds (one of its objects stands for
# it here: the whole takes minutes); -DNK_BUILD_TESTS=ON or -DNK_BUILD_BENCHMARKS=ON
# then stops the configure naming the package. Without Open MPI the tests skip the MPI
# example, in one line naming it. Under a user's add_subdirectory the tests and
# benchmarks are off.
set -euo pipefail
fail() { echo "FAIL: $*"; [ ! -f "$log" ] || cat "$log"; exit 1; }

if [ "$1" = --inside ]; then  # in the namespace without the packages
  src=$2 build=$3/build log=$3/log
  configure() { cmake -G "Unix Makefiles" -S "$src" -B "$build" "$@" > "$log" 2>&1; }
  configure || fail "plain configure"
  grep -q "Skipping the tests: GTest not found" "$log" || fail "no message names GTest"
  grep -q "Skipping the benchmarks: benchmark not found" "$log" ||
    fail "no message names benchmark"
  [ ! -e "$build/tests" ] && [ ! -e "$build/bench" ] || fail "tests or benchmarks are in"
  echo "ok: the plain configure skips the tests and benchmarks, naming their packages"
  cmake --build "$build" --target kernels/common/dispatch.cc.o > "$log" 2>&1 \
    || fail "build"
  echo "ok: the library's sources build"
  ! configure -DNK_BUILD_TESTS=ON || fail "NK_BUILD_TESTS=ON passed"
  grep -q "NK_BUILD_TESTS=ON: GTest not found" "$log" || fail "no GTest message"
  ! configure -DNK_BUILD_TESTS=AUTO -DNK_BUILD_BENCHMARKS=ON ||
    fail "NK_BUILD_BENCHMARKS=ON passed"
  grep -q "NK_BUILD_BENCHMARKS=ON: benchmark not found" "$log" ||
    fail "NK_BUILD_BENCHMARKS=ON: no benchmark"
  echo "ok: NK_BUILD_TESTS=ON and NK_BUILD_BENCHMARKS=ON require the packages"
  exit 0
fi

if [ "$1" = --inside-without-mpi ]; then  # GTest here, MPI not
  src=$2 build=$3/build-mpi log=$3/log
  cmake -G "Unix Makefiles" -S "$src" -B "$build" -DNK_BUILD_BENCHMARKS=OFF \
    > "$log" 2>&1 || fail "configure without MPI"
  message="Skipping the MPI example: MPI not found (apt-get install openmpi-bin"
  [ "$(grep -c MPI "$log")" -eq 1 ] && grep -q "$message" "$log" ||
    fail "not one line naming MPI"
  ! grep -rq mpi_sync_batchnorm "$build" --include=CTestTestfile.cmake ||
    fail "the MPI test is in"
  echo "ok: without MPI the configure skips the MPI example in one line naming it"
  exit 0
fi

src=$1
work=$2
log=$work/log
rm -rf "$work"
mkdir -p "$work/user"
bash "$(dirname "$0")/without_packages.sh" libgtest-dev libbenchmark-dev libdnnl-dev -- \
  bash "$0" --inside "$src" "$work"

bash "$(dirname "$0")/without_packages.sh" openmpi-bin libopenmpi-dev -- \
  bash "$0" --inside-without-mpi "$src" "$work"

cat > "$work/user/CMakeLists.txt" << EOF
cmake_minimum_required(VERSION 3.18)
project(user LANGUAGES C CXX)
add_subdirectory("$src" normkernels)
EOF
cmake -S "$work/user" -B "$work/user/build" > "$log" 2>&1 || fail "add_subdirectory"
[ ! -e "$work/user/build/normkernels/tests" ] || fail "tests are in a user's project"
echo "ok: no tests or benchmarks under a user's add_subdirectory"
echo "5 passed, 0 failed"
