#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh FUZZER [RUNS] [SEED]: a bounded libFuzzer run from the committed seed corpus
# (copied, so the checkout is not modified). A fixed seed and run count make CI's run
# repeatable; fails on any crash, sanitizer report or failed check.
set -euo pipefail
fuzzer=$1
runs=${2:-300000}
seed=${3:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
cp "$(dirname "$0")"/corpus/* "$work/corpus/"
"$fuzzer" -seed="$seed" -runs="$runs" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" > "$work/log" 2>&1 || {
  tail -60 "$work/log"
  echo "fuzz: 0 passed, 1 failed"
  exit 1
}
grep -E "^Done|stat::number_of_executed_units|stat::new_units_added" "$work/log"
echo "fuzz: 1 passed, 0 failed"
