#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check_docs.sh: what a reader of the repository meets. README.md stays under 12 KB;
# every link and image in the Markdown files resolves to a file or folder of the
# repository (no http(s) links, nothing outside it); no file points at the shared
# folder beside the checkout; every source file carries its SPDX licence line; every
# function of include/normkernels.h is named in docs/c-abi.md and in README.md (there,
# row-strided and half forms by their fp32 name and marker).
# Needs no build; reads the tracked files (every file but build trees outside git).
set -uo pipefail
cd "$(dirname "$0")/.."
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  files=$(git ls-files)
else
  # Hidden folders (.git, caches such as .pytest_cache) and build trees are not the
  # repository's.
  files=$(find . -mindepth 1 \( -name '.*' -o -name 'build*' -o -name __pycache__ \) \
          -prune -o -type f -print | sed 's|^\./||')
fi
files=$(printf '%s\n' "$files" | while IFS= read -r f; do [ -f "$f" ] && echo "$f"; done)

size=$(wc -c < README.md)
[ "$size" -lt 12288 ] ||
  fail "README.md is $size bytes; keep it under 12288 (details go to docs/)"

# Link targets of a Markdown file, outside code blocks and code spans: inline links and
# images [text](target), reference definitions [label]: target, <autolinks>, bare URLs.
md_targets() {
  awk '
    /^[ \t]*(```|~~~)/ { code = !code; next }
    code { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)
      if (match(line, /^[ \t]*\[[^]]+\]:[ \t]*[^ \t]+/)) {
        t = substr(line, RSTART, RLENGTH); sub(/^[^]]*\]:[ \t]*/, "", t); print t
        next
      }
      rest = line
      while (match(rest, /\]\([^)]*\)/)) {
        t = substr(rest, RSTART + 2, RLENGTH - 3); sub(/^[ \t]*</, "", t)
        sub(/[ \t].*$/, "", t); sub(/>$/, "", t); print t
        rest = substr(rest, RSTART + RLENGTH)
      }
      rest = line
      while (match(rest, /<[a-zA-Z][a-zA-Z0-9+.-]*:[^ >]*>/)) {
        print substr(rest, RSTART + 1, RLENGTH - 2); rest = substr(rest, RSTART + RLENGTH)
      }
      gsub(/\]\([^)]*\)/, "", line); gsub(/<[^ >]*>/, "", line)
      rest = line
      while (match(rest, /https?:\/\/[^ )>]*/)) {
        print substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
      }
    }' "$1"
}

# Whether a path (from the top) is a file of the repository or a folder holding one.
# (Here-strings, not pipes: grep -q exits at its first match, and with pipefail a
# printf still writing the list, over 4 KiB, would then fail the pipeline.)
in_repo() {
  [ "$1" = . ] || grep -qxF -- "$1" <<< "$files" ||
    grep -qxF -- "$1/" <<< "$(cut -c "1-$((${#1} + 1))" <<< "$files")"
}

links=0
while IFS= read -r md; do
  dir=$(dirname "$md")
  while IFS= read -r target; do
    links=$((links + 1))
    case "$target" in
      '#'*) continue ;;
      *://* | mailto:* | www.*)
        fail "$md links outside the repository: $target"
        continue ;;
    esac
    path=${target%%#*}
    case "$path" in
      /*) resolved=$(realpath -m -s --relative-to=. "./$path") ;;
      *) resolved=$(realpath -m -s --relative-to=. "$dir/$path") ;;
    esac
    case "$resolved" in
      ../* | ..) fail "$md links outside the repository: $target" ;;
      *) in_repo "$resolved" ||
           fail "$md links to $target, which is not in the repository" ;;
    esac
  done < <(md_targets "$md")
done < <(printf '%s\n' "$files" | grep '\.md$')
echo "checked $links Markdown link targets"

# The pattern is written so that this file does not match itself.
while IFS= read -r hit; do
  fail "points outside the repository (a clone has no shared folder beside it): $hit"
done < <(printf '%s\n' "$files" | xargs -d '\n' grep -InE '\.\./shared' 2> /dev/null)

sources=0
while IFS= read -r src; do
  sources=$((sources + 1))
  head -n 3 "$src" | grep -q 'SPDX-License-Identifier: Apache-2.0' ||
    fail "$src has no 'SPDX-License-Identifier: Apache-2.0' line in its first 3 lines"
done < <(printf '%s\n' "$files" |
         grep -E '\.(c|cc|h|py|sh|cmake)$|(^|/)CMakeLists\.txt$')
echo "checked $sources source files for their SPDX line"

functions=$(grep -oE '\bnk_[a-z0-9_]+[[:space:]]*\(' include/normkernels.h | tr -d ' (' |
            sort -u)
# README may name a row-strided or half-precision form by its contiguous fp32 name and
# the form's marker (`_strided_`, `_bf16`, `_f16`); docs/c-abi.md names every one.
for fn in $functions; do
  grep -qw -- "$fn" docs/c-abi.md || fail "$fn (include/normkernels.h) is not named in docs/c-abi.md"
  grep -qw -- "$fn" README.md && continue
  base=${fn/_strided_/_}
  case "$base" in *_bf16 | *_f16) base=${base%_*}_f32 ;; esac
  named=1
  grep -qw -- "$base" README.md || named=0
  case "$fn" in *_strided_*) grep -qF -- '_strided_' README.md || named=0 ;; esac
  case "$fn" in *_bf16) grep -qF -- '_bf16' README.md || named=0 ;; esac
  case "$fn" in *_f16) grep -qF -- '_f16' README.md || named=0 ;; esac
  [ "$named" = 1 ] || fail "$fn (include/normkernels.h) is not named in README.md"
done
echo "checked $(echo "$functions" | wc -w) functions of include/normkernels.h"

if [ "$failures" -ne 0 ]; then
  echo "$failures failed"
  exit 1
fi
echo "docs: every check passed"
