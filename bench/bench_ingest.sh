#!/usr/bin/env bash
# Ingestion benchmark: Criteo TSV parse + hash on one core against `wc -l` on the same file; the
# io_uring reader against plain read(); the cbx reader (io_uring, O_DIRECT, checksums) against
# dd and fio sequential O_DIRECT reads of the same file. References run in the same run, on the
# same file system; each figure is the best of RUNS runs. Env: ROWS (default 2000000), RUNS (3),
# BENCH_DIR (default build/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-2000000}
RUNS=${RUNS:-3}
DIR=${BENCH_DIR:-build/bench}
mkdir -p "$DIR"
tsv="$DIR/criteo-$ROWS.tsv"
cbx="$DIR/criteo-$ROWS.cbx"
[ -f "$tsv" ] || bin/ctrbox-data gen --rows "$ROWS" --seed 1 --out "$tsv"
[ -f "$cbx" ] || bin/ctrbox-data convert --format criteo --in "$tsv" --out "$cbx" 2>/dev/null
bytes=$(stat -c %s "$tsv")
cbytes=$(stat -c %s "$cbx")
pin="taskset -c 0"
command -v taskset >/dev/null || pin=""

best() {   # best() KEY CMD...: run CMD RUNS times, print the largest value of KEY in its JSON
    local key=$1; shift
    for _ in $(seq "$RUNS"); do "$@"; done | python3 -c "
import json,sys
print(max(json.loads(l)['$key'] for l in sys.stdin if l.strip()))"
}
secs() {   # wall seconds of a command, best of RUNS
    local b=""
    for _ in $(seq "$RUNS"); do
        local t0 t1
        t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N)
        b=$(python3 -c "t=$t1-$t0; b='$b'; print(min(t, float(b)) if b else t)")
    done
    echo "$b"
}

cat "$tsv" > /dev/null   # page cache warm for the text figures
parse_rows=$(best rows_per_s $pin bin/bench-ingest parse --format criteo "$tsv")
parse_mb=$(python3 -c "print($parse_rows * $bytes / $ROWS / 1e6)")
wc_s=$(secs $pin wc -l "$tsv")
wc_mb=$(python3 -c "print($bytes / $wc_s / 1e6)")
uring_buf=$(best uring_mb_per_s bin/bench-ingest read "$tsv")
read_buf=$(best read_mb_per_s bin/bench-ingest read "$tsv")
uring_dir=$(best uring_mb_per_s bin/bench-ingest read --direct "$tsv")
read_dir=$(best read_mb_per_s bin/bench-ingest read --direct "$tsv")
cbx_rows=$(best rows_per_s bin/bench-ingest cbx "$cbx")
cbx_direct=$(bin/bench-ingest cbx "$cbx" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['direct'])")
cbx_mb=$(python3 -c "print($cbx_rows * $cbytes / $ROWS / 1e6)")
dd_s=$(secs dd if="$cbx" of=/dev/null bs=1M iflag=direct)
dd_mb=$(python3 -c "print($cbytes / $dd_s / 1e6)")
fio_mb=NaN
if command -v fio >/dev/null; then
    fio_mb=$(fio --name=seq --filename="$cbx" --readonly --ioengine=io_uring --direct=1 --rw=read --bs=1M \
        --iodepth=8 --output-format=json 2>/dev/null |
        python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['read']['bw_bytes']/1e6)")
fi

python3 - "$DIR/ingest.json" <<PY
import json, sys
r = {
  "rows": $ROWS, "text_bytes": $bytes, "cbx_bytes": $cbytes,
  "parse_rows_per_s_one_core": $parse_rows, "parse_mb_per_s": $parse_mb, "wc_l_mb_per_s": $wc_mb,
  "reader_page_cache_mb_per_s": {"io_uring": $uring_buf, "read": $read_buf},
  "reader_direct_mb_per_s": {"io_uring": $uring_dir, "read": $read_dir},
  "cbx_rows_per_s": $cbx_rows, "cbx_mb_per_s": $cbx_mb, "cbx_o_direct": "$cbx_direct" == "True",
  "dd_direct_mb_per_s": $dd_mb, "fio_io_uring_direct_mb_per_s": float("$fio_mb"),
}
json.dump(r, open(sys.argv[1], "w"), indent=2)
f = lambda x: f"{x:,.0f}"
print(f"ingestion benchmark, {r['rows']:,} Criteo rows ({r['text_bytes']/1e6:.0f} MB text, {r['cbx_bytes']/1e6:.0f} MB cbx)")
print(f"  text parse + hash, one core : {f(r['parse_rows_per_s_one_core'])} rows/s, {r['parse_mb_per_s']:.0f} MB/s"
      f"  (target 1,000,000 rows/s; wc -l on the same file: {r['wc_l_mb_per_s']:.0f} MB/s, parse = {r['parse_mb_per_s']/r['wc_l_mb_per_s']:.2f}x wc -l)")
print(f"  reader, page cache          : io_uring {r['reader_page_cache_mb_per_s']['io_uring']:.0f} MB/s, read() {r['reader_page_cache_mb_per_s']['read']:.0f} MB/s"
      f"  ({r['reader_page_cache_mb_per_s']['io_uring']/r['reader_page_cache_mb_per_s']['read']:.2f}x)")
print(f"  reader, O_DIRECT            : io_uring {r['reader_direct_mb_per_s']['io_uring']:.0f} MB/s, read() {r['reader_direct_mb_per_s']['read']:.0f} MB/s"
      f"  ({r['reader_direct_mb_per_s']['io_uring']/r['reader_direct_mb_per_s']['read']:.2f}x)")
print(f"  cbx read (O_DIRECT={r['cbx_o_direct']}) : {f(r['cbx_rows_per_s'])} rows/s, {r['cbx_mb_per_s']:.0f} MB/s"
      f"  (dd iflag=direct {r['dd_direct_mb_per_s']:.0f} MB/s -> {r['cbx_mb_per_s']/r['dd_direct_mb_per_s']:.2f}x;"
      f" fio io_uring direct seq {r['fio_io_uring_direct_mb_per_s']:.0f} MB/s -> {r['cbx_mb_per_s']/r['fio_io_uring_direct_mb_per_s']:.2f}x)")
print(f"  results: {sys.argv[1]}")
PY
