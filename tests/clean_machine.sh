#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# clean_machine.sh BUILD_DIR: the consumers of tests/consumers.sh on a real clean
# machine: a minimal Debian bookworm (debootstrap) with only build-essential, cmake and
# pkg-config, and the library installed from BUILD_DIR into it. A CI leg: needs root,
# debootstrap and Debian's archive; 1.5 to 3 minutes, nearly all debootstrap's.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$1
root=$(mktemp -d /var/tmp/nk-clean.XXXXXX)
log=$(mktemp)
trap 'rm -rf "$root" "$log"' EXIT
debootstrap --variant=minbase --include=build-essential,cmake,pkg-config bookworm \
  "$root" http://deb.debian.org/debian > "$log" 2>&1 || { cat "$log"; exit 1; }
mkdir -p "$root/nk/src/tests" "$root/nk/src/examples"
cp -a "$src/examples/consumer" "$root/nk/src/examples/"
cp "$src/tests/consumers.sh" "$root/nk/src/tests/"
cmake --install "$build" --prefix "$root/nk/prefix" > /dev/null
# A clean environment too: nothing of this shell's (a compiler launcher, paths).
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root \
  bash /nk/src/tests/consumers.sh --inside /nk/src /nk/prefix /nk
