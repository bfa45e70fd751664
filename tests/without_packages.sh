#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# without_packages.sh PATTERN... -- COMMAND...: runs COMMAND as on a machine without the
# installed Debian packages that match PATTERN (dpkg-query -W 'libhwy*'): in a mount
# namespace whose /usr is an overlay with a whiteout for each of their files, so that
# compilers, linkers, pkg-config and CMake find none of them. Exits 77 (ctest's skip)
# with a message when it cannot (needs root, unshare, overlayfs and dpkg).
set -euo pipefail
patterns=()
while [ "$1" != "--" ]; do patterns+=("$1"); shift; done
shift

skip() { echo "SKIP: cannot hide ${patterns[*]}: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for a mount namespace"
command -v dpkg-query > /dev/null || skip "not a Debian system (no dpkg-query)"

hide=$(mktemp -d)
trap 'rm -rf "$hide"' EXIT
# (dpkg-query fails when a pattern matches no package: nothing of it to hide.)
# Named with their architecture: with arm64 multiarch packages beside amd64's (the
# Arm leg's), a bare name is ambiguous to dpkg -L. Every architecture's files go.
packages=$({ dpkg-query -W -f='${db:Status-Abbrev} ${Package}:${Architecture}\n' \
  "${patterns[@]}" 2> /dev/null || true; } | awk '$1 == "ii" {print $2}' | sort -u)
count=0
for p in $packages; do
  while IFS= read -r f; do
    # bookworm's /lib, /bin and /sbin are /usr's.
    case $f in /lib/* | /lib64/* | /bin/* | /sbin/*) f=/usr$f ;; esac
    [[ $f == /usr/* && ! -d $f && ( -e $f || -L $f ) ]] || continue
    [[ -e $hide/${f#/usr/} ]] && continue  # a file two architectures share (headers)
    mkdir -p "$hide/$(dirname "${f#/usr/}")"
    mknod "$hide/${f#/usr/}" c 0 0  # overlayfs's whiteout: the file is absent
    count=$((count + 1))
  done < <(dpkg -L "$p")
done
echo "without_packages: hiding $count files of" $packages

unshare --mount true 2> /dev/null || skip "unshare --mount is not permitted here"
# A read-only overlay: the whiteouts as the upper of two lower layers over /usr.
unshare --mount --propagation private bash -c '
  mount -t overlay overlay -o "lowerdir=$1:/usr" /usr ||
    { echo "SKIP: cannot hide packages: no overlayfs mount here"; exit 77; }
  shift; exec "$@"' bash "$hide" "$@"
