#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh MPIEXEC PROGRAM: ctest's mpi_sync_batchnorm. Runs sync_batchnorm_check on 1, 2
# and 3 ranks (more ranks than cores: --oversubscribe), twice each: both runs must pass
# and write the same bits; 3 ranks again under another reduction algorithm. Then two
# faulty calls must end the job with the library's reason, not hang. Every run is
# bounded in time.
set -euo pipefail
mpiexec=$1
program=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

run=(timeout 300 "$mpiexec" --oversubscribe)
[ "$(id -u)" -ne 0 ] || run+=(--allow-run-as-root)  # Open MPI refuses root without it
# Containers often forbid the cross-process reads of Open MPI's shared-memory transport
# for large messages (errno 1, EPERM): plain copies work everywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# One thread per rank: 3 ranks share the cores (the bits do not depend on threads).
export NK_NUM_THREADS=1 OMP_WAIT_POLICY=passive

for np in 1 2 3; do
  for i in 1 2; do
    "${run[@]}" -np $np "$program" "$work/$np.$i" > "$work/log" 2>&1 ||
      { cat "$work/log"; fail "$np ranks, run $i"; }
  done
  cat "$work/log"
  cmp "$work/$np.1" "$work/$np.2" || fail "$np ranks: two runs wrote different bits"
  echo "ok: -np $np, two runs, the same $(wc -c < "$work/$np.1") bytes"
done

# Open MPI's coll/adapt reduces a commutative operation in the order the ranks' data
# arrive: the merge, declared non-commutative, must keep its bits there too.
adapt=(--mca coll basic,self,adapt,libnbc --mca coll_adapt_priority 100)
for i in 1 2; do
  "${run[@]}" "${adapt[@]}" -np 3 "$program" "$work/adapt.$i" > "$work/log" 2>&1 ||
    { cat "$work/log"; fail "3 ranks under coll/adapt, run $i"; }
done
tail -n 1 "$work/log"
cmp "$work/adapt.1" "$work/adapt.2" || fail "coll/adapt: two runs wrote different bits"
echo "ok: 3 ranks under coll/adapt, two runs, the same bits"

expect_abort() {  # FLAG NP MESSAGE
  if "${run[@]}" -np "$2" "$program" "$1" > "$work/log" 2>&1; then
    cat "$work/log"; fail "$1 did not fail"
  fi
  grep -q -- "$3" "$work/log" || { cat "$work/log"; fail "$1: no line '$3'"; }
  echo "ok: $1 on $2 ranks ends the job: $(grep -m1 -- "$3" "$work/log")"
}
expect_abort --one-value 2 \
  "rank [01]: sync_batchnorm_forward: the batch has 1 value per channel"
expect_abort --bad-layout-on-last-rank 3 "rank 2: nk_batchnorm_moments_f32: layout is 7"
