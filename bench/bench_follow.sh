#!/usr/bin/env bash
# --follow catching up (issue 14): a folder of FILES files of FILE_ROWS rows each (generated Criteo
# lines, --keys 0.5), all there when the run starts, trained by `ctrbox train --follow DIR
# --follow-idle 0`, against one run over the same files (`--train f01 ... f20`) with the same pass
# boundaries (FILE_ROWS a multiple of PASS_ROWS), in the same conditions: DeepFM, one epoch, a
# table folder with --cache-mb at CACHE_MB, and in memory. The follow runs once with progressive
# validation (each file scored before it trains: a forward pass over every row more than the one
# run does) and once with --no-progressive (the same work as the one run, plus a model file kept
# and the ledger read after each file). Runs alternate, ROUNDS rounds; the figure is the speed
# ratio one-run seconds / follow seconds of the medians.
# Env: FILES (20), FILE_ROWS (100000), PASS_ROWS (25000), CACHE_MB (64), ROUNDS (3),
#      BENCH_DIR (build/bench). Results: $BENCH_DIR/follow.json, and printed.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-20}
FILE_ROWS=${FILE_ROWS:-100000}
PASS_ROWS=${PASS_ROWS:-25000}
CACHE_MB=${CACHE_MB:-64}
ROUNDS=${ROUNDS:-3}
DIR=${BENCH_DIR:-build/bench}
W="$DIR/follow"
rm -rf "$W"
mkdir -p "$W/in"
B=$(pwd)/bin
echo "== --follow catching up on $FILES files of $FILE_ROWS rows against one run over them ($(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
"$B/ctrbox-data" gen --rows $((FILES * FILE_ROWS)) --seed 3 --keys 0.5 --out "$W/all.tsv" > /dev/null
split -d -a 2 -l "$FILE_ROWS" --additional-suffix=.tsv "$W/all.tsv" "$W/in/f"
rm "$W/all.tsv"
touch -d '1 minute ago' "$W"/in/*   # long complete: no settling wait
S="--model deepfm --format criteo --dim 16 --hidden 200,200 --batch 1024 --epochs 1 --threads 2 --seed 1 --pass-rows $PASS_ROWS --quiet"
secs() {   # seconds of a command
    local t0 t1
    t0=$(date +%s.%N)
    "$@" > /dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
run() {   # mode -> seconds
    local where=""
    rm -rf "$W/out" "$W/tables"
    case $1 in *tier*) where="--table-dir $W/tables --cache-mb $CACHE_MB" ;; esac
    case $1 in
    one*) secs "$B/ctrbox" train $S $where --train "$W"/in/f*.tsv --out "$W/out" ;;
    follow-noprog*) secs "$B/ctrbox" train $S $where --follow "$W/in" --follow-idle 0 --no-progressive --out "$W/out" ;;
    follow*) secs "$B/ctrbox" train $S $where --follow "$W/in" --follow-idle 0 --out "$W/out" ;;
    esac
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
declare -A T
modes="one-tier follow-tier follow-noprog-tier one-mem follow-mem follow-noprog-mem"
for r in $(seq 1 "$ROUNDS"); do
    for m in $modes; do
        s=$(run "$m")
        T[$m]="${T[$m]:-} $s"
        printf '  round %d %-20s %8.2f s  %9.0f samples/s\n' "$r" "$m" "$s" "$(echo "$FILES * $FILE_ROWS / $s" | bc -l)"
    done
done
json="{"
for where in tier mem; do
    one=$(echo "${T[one-$where]}" | tr ' ' '\n' | grep . | median)
    fol=$(echo "${T[follow-$where]}" | tr ' ' '\n' | grep . | median)
    nop=$(echo "${T[follow-noprog-$where]}" | tr ' ' '\n' | grep . | median)
    r1=$(echo "$one / $fol" | bc -l)
    r2=$(echo "$one / $nop" | bc -l)
    printf '%s: one run %.2f s; --follow %.2f s (speed ratio %.3f); --follow --no-progressive %.2f s (ratio %.3f)\n' \
        "$where" "$one" "$fol" "$r1" "$nop" "$r2"
    json="$json\"$where\": {\"one_run_s\": $one, \"follow_s\": $fol, \"follow_ratio\": $(printf %.4f "$r1"), \"follow_noprog_s\": $nop, \"follow_noprog_ratio\": $(printf %.4f "$r2")}, "
done
echo "${json%, }}" > "$DIR/follow.json"
echo "target (issue 14): --follow catching up at >= 0.95 of one run's speed; results in $DIR/follow.json"
rm -rf "$W"
