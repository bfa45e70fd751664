# SPDX-License-Identifier: Apache-2.0
# aarch64-linux-gnu.cmake: builds the library, tests and benchmarks for 64-bit Arm on
# an x86 Debian machine (g++-aarch64-linux-gnu and the arm64 multiarch packages), and
# runs them under qemu-user: cmake --toolchain cmake/toolchains/aarch64-linux-gnu.cmake.
# No -march: every Arm target Highway has (SVE2_128, SVE_256, SVE2, SVE, NEON and the
# baseline) is compiled in and chosen at run time, as on x86.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch: packages of :arm64 put their libraries and CMake packages under
# /usr/lib/aarch64-linux-gnu, which this architecture makes CMake search first; their
# headers are the same files as amd64's, under /usr/include.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Tests run under qemu (no binfmt_misc here). Not with -L: the multiarch loader is
# found by itself, and -L /usr/aarch64-linux-gnu mixes two glibc builds (threaded
# programs hang). QEMU_CPU in the environment chooses the emulated CPU.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
