#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_arm.sh: builds the library, its tests and the benchmark for aarch64 on this x86
# Debian machine (g++-aarch64-linux-gnu and the arm64 multiarch packages, installed by
# scripts/arm_deps.sh when missing) and runs them under qemu-user, on six CPU models:
#
#   max                the whole ctest suite, ISA tests for SVE2 (512-bit vectors)
#   cortex-a72         NEON (Graviton 2, Ampere, Raspberry Pi 4)
#   a64fx              SVE, at 128-bit vectors (sve-default-vector-length=16): qemu
#                      runs them 4-10x faster than longer ones (the ISA tests 285 -> 52
#                      s); SVE's vector-length-agnostic code runs at 512 bits as SVE2
#                      under max, whose source it shares
#   max,sve-max-vq=2   SVE_256 (Graviton 3, Neoverse V1)
#   max,sve-max-vq=1   SVE2_128 (Graviton 4, Neoverse N2 / V2)
#   max,sve-max-vq=16  SVE2 at 2048 bits, the longest vectors SVE allows (no CPU has
#                      them: only with NK_ARM_LONGEST=1)
#
# Each model first asserts the ISAs it runs (test_api, NK_TEST_EXPECT_ISAS); then every
# per-ISA test of every test binary runs for its best ISA (under max also SVE and NEON
# are there; they run on a64fx and cortex-a72 instead). The thread-count tests (the same
# partition code on every target, most of a model's time under qemu: a64fx 5.5 -> 2
# minutes without them) run under max only; x86 runs them on every target, its 128-bit
# SSSE3 / SSE4 through NEON's code (arrays of vectors, groups of rows). Not under
# emulation: the 32 MiB streaming tests (their long-double references take minutes each
# under qemu, where long double is software quad precision); they run on x86 in every
# ISA. Here the models' runs stream from 256 KiB of tensors on (NK_STREAM_BYTES), so
# the tests' larger tensors take the streamed paths on every Arm target and vector
# length (and the tests sized from it, StreamBytes() in tests/test_util.h, stay small).
# BUILD_DIR: the build tree (default build-arm). Arguments: ctest's, for the max run.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-arm}
bash scripts/arm_deps.sh
export QEMU_CPU=max  # the CPU that ctest's test discovery runs on, at build time
cmake -S . -B "$build" --toolchain cmake/toolchains/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DNK_BUILD_TESTS=ON -DNK_BUILD_BENCHMARKS=ON
cmake --build "$build" -j"$(nproc)"

# The shared library exports the C ABI and nothing else.
others=$(aarch64-linux-gnu-nm -D --defined-only "$build/libnormkernels.so" |
  awk '$3 !~ /^nk_/ {print $3}')
[ -z "$others" ] || { echo "exported besides nk_*: $others"; exit 1; }
echo "libnormkernels.so (aarch64) exports $(aarch64-linux-gnu-nm -D --defined-only \
  "$build/libnormkernels.so" | grep -c ' nk_') functions, all nk_*"

not_emulated='LargeTensorsStream'
echo "== qemu max: the whole suite, ISA tests for SVE2 ($((SECONDS / 60)) min in)"
NK_TEST_EXPECT_ISAS=SVE2,SVE,NEON ctest --test-dir "$build" --output-on-failure \
  -j"$(nproc)" -E "$not_emulated|/(SVE|NEON)  #" "$@"
# Cases that move up to 64 MiB per call (76 of the 126): those of 64 MiB tensors took
# most of this step's 4 minutes under qemu, and the streamed paths they take run in the
# models' tests below (NK_STREAM_BYTES).
echo "== the benchmark, as a smoke test (--nk_verify=64: each case's output checked once)"
qemu-aarch64 "$build/bench/bench_normkernels" --nk_verify=64 | tail -n 1

# run_isa CPU ISA EXPECTED [SKIP]: the ISA tests of every binary for ISA on qemu's CPU
# model, but those matching SKIP (gtest patterns, ':' between them).
run_isa() {
  local cpu=$1 isa=$2 expected=$3 skip=${4:+:$4} failed=0 t ran out
  echo "== qemu $cpu: $isa ($((SECONDS / 60)) min in)"
  out=$(QEMU_CPU=$cpu NK_TEST_EXPECT_ISAS=$expected qemu-aarch64 "$build/tests/test_api" \
    --gtest_brief=1 --gtest_filter='Isa.TheEmulatedCpuRunsTheExpectedIsas' 2>&1) ||
    { echo "$out"; echo "qemu $cpu does not run $expected"; exit 1; }
  echo "qemu $cpu runs $expected (asserted), the best selected"
  for t in "$build"/tests/test_*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    QEMU_CPU=$cpu qemu-aarch64 "$t" --gtest_list_tests | grep -q "/$isa\b" || continue
    echo "$t"
  done | xargs -P"$(nproc)" -I{} sh -c "QEMU_CPU='$cpu' NK_STREAM_BYTES=262144 \
      qemu-aarch64 {} --gtest_brief=1 \
      --gtest_filter='*/$isa:-*$not_emulated*$skip' > {}.$isa.log 2>&1 \
      && echo \"{}: \$(grep -o '[0-9]* tests\? from' {}.$isa.log | head -1) passed\" \
      || { cat {}.$isa.log; echo \"{}: FAILED\"; exit 255; }" || failed=1
  ran=$(cat "$build"/tests/*."$isa".log | grep -c '^\[==========\] [1-9]' || true)
  [ "$failed" -eq 0 ] && [ "$ran" -gt 0 ] || { echo "qemu $cpu: $isa failed"; exit 1; }
  rm -f "$build"/tests/*."$isa".log
}
threads='*ThreadCount*:*AcrossThreads*'
run_isa cortex-a72 NEON NEON "$threads"
run_isa a64fx,sve-default-vector-length=16 SVE SVE,NEON "$threads"
run_isa max,sve-max-vq=2 SVE_256 SVE_256,SVE2,SVE,NEON "$threads"
run_isa max,sve-max-vq=1 SVE2_128 SVE2_128,SVE2,SVE,NEON "$threads"
if [ "${NK_ARM_LONGEST:-0}" = 1 ]; then
  run_isa max,sve-max-vq=16 SVE2 SVE2,SVE,NEON "$threads"
fi
echo "Arm: every ISA test passed on NEON, SVE, SVE2, SVE_256 and SVE2_128"
