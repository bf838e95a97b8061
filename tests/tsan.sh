#!/usr/bin/env bash
# `make tsan`: the threads of a run with a table folder under ThreadSanitizer. The reader lists and
# parses the next pass, the fetch reads the next part's rows, the writer commits, the filler zeroes
# slot files, while the trainer trains and evicts; the runs below make each of them work at budgets
# that cut every pass into many parts, with admission, shrink, the repack and a warm start.
# A run fails the check if it fails or ThreadSanitizer reports anything (its exit code 66).
#
# Not under ThreadSanitizer: the Criterion test runner (its process arena cannot be set up under it,
# Criterion issue 274), so this script runs the program itself; OpenMP's worker threads (libgomp
# is not built with it, so its barriers are invisible and every parallel loop would look like a
# race): the runs use --threads 1, which leaves the threads above. RocksDB's own internals are
# suppressed in tests/tsan.supp for the same reason.
# usage: tests/tsan.sh BIN_DIR   (a build with -fsanitize=thread: make tsan)
set -euo pipefail
B=$(cd "${1:?usage: tests/tsan.sh BIN_DIR}" && pwd)
SUPP=$(cd "$(dirname "$0")" && pwd)/tsan.supp
W=$(mktemp -d /tmp/ctrbox-tsan.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 suppressions=$SUPP"
"$B/ctrbox-data" gen --rows 30000 --keys 30 --seed 2 --out tr.tsv
"$B/ctrbox-data" gen --rows 12000 --keys 30 --seed 2 --offset 30000 --out tr2.tsv
"$B/ctrbox-data" gen --rows 4000 --keys 30 --seed 2 --offset 42000 --out va.tsv
S="--format criteo --model deepfm --dim 4 --hidden 16,16 --batch 256 --threads 1 --quiet"
fails=0
check() {   # name, then the command
    local name=$1; shift
    local t0=$SECONDS rc=0
    "$@" > "$name.log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ] || grep -q 'WARNING: ThreadSanitizer' "$name.log"; then
        echo "FAIL $name (exit $rc, $(grep -c 'WARNING: ThreadSanitizer' "$name.log") reports):"
        grep -A30 'WARNING: ThreadSanitizer' "$name.log" | head -60 || tail -5 "$name.log"
        fails=$((fails + 1))
    else
        echo "ok   $name ($((SECONDS - t0)) s)"
    fi
}
# every pass in many parts: the reader held at boundaries, the fetch and the writer each part
check tier-parts "$B/ctrbox" train $S --train tr.tsv --valid va.tsv --epochs 2 --pass-rows 5000 \
    --table-dir t1 --cache-mb 0.3 --out m1
# admission, decay, shrink at the epoch's end and the repack of the slot files it leaves
check tier-shrink "$B/ctrbox" train $S --train tr.tsv --epochs 2 --pass-rows 4000 --min-show 2 --decay 0.9 \
    --shrink-threshold 0.4 --shrink-unseen 3 --table-dir t2 --cache-mb 0.5 --out m2
# a warm start trains on in the table folder (rows read back from the slot files the run left)
check tier-init "$B/ctrbox" train $S --train tr2.tsv --epochs 1 --pass-rows 3000 --init m2 --min-show 2 --cache-mb 0.2 --out m3
# the reader alone, in memory, passes shuffled
check memory-passes "$B/ctrbox" train $S --train tr.tsv --epochs 1 --pass-rows 3000 --shuffle-rows 2000 --out m4
# scoring a tiered model (predict has no --threads: one OpenMP thread by the environment)
check tier-predict env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$B/ctrbox" predict --model m1 --data va.tsv \
    --format criteo --out pred.txt
# plain reads on the pool's threads and plain writes, where io_uring is refused: rings under
# `ulimit -l 0`, for a user other than root (whose locked memory is not counted)
AS=()
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
    chmod -R a+rwX "$W"
    AS=(setpriv --reuid=64919 --regid=64919 --clear-groups)
fi
check tier-plain "${AS[@]}" sh -c 'ulimit -l 0 && exec "$@"' sh "$B/ctrbox" train $S --train tr.tsv --epochs 1 \
    --pass-rows 5000 --table-dir t5 --cache-mb 0.3 --out m5
grep -q 'io_uring is refused' tier-plain.log || echo "     (this kernel made the rings under ulimit -l 0: no plain reads ran)"
if [ "$fails" -ne 0 ]; then echo "tsan: $fails of 6 runs failed"; exit 1; fi
echo "tsan: 6 runs, no report"
