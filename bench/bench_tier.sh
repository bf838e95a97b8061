#!/usr/bin/env bash
# SSD tier benchmarks (issue 4), each against a reference measured in the same run:
#  1. prefetch: rows/s fetched from the tier (random keys, 64k per call as a pass asks) against
#     fio --ioengine=io_uring --direct=1 --rw=randread --bs=4k --iodepth=64 on the slot file, with
#     the CPU the fetch costs and the reads it issued (one read may serve several rows); three
#     rounds. The tier's 256 MB of index memory holds all its keys in the slot map here.
#  2. end to end: DeepFM on generated data (E2E_ROWS rows, --keys 1000: tens of millions of
#     distinct keys) in passes, the table in memory, then in the SSD tier with --cache-mb at 10% of
#     the in-memory table's bytes, then in memory again: samples/s of the tier over the mean of the
#     two in-memory runs.
#  2b. eviction policy: LFU against LRU on Zipf data with a smaller vocabulary (POLICY_ROWS rows,
#     --keys 1), --cache-mb at 10% of the table, passes of POLICY_PASS_ROWS (small enough that a
#     pass's rows fit the cache, so the policy chooses what stays): memory hit rates and samples/s.
#  3. memory: peak RSS of tiered runs with --cache-mb MEM_CACHE_MB on two table sizes.
# Env: PREFETCH_ROWS (4000000), E2E_ROWS (10000000), PASS_ROWS (500000), POLICY_ROWS (1000000), POLICY_PASS_ROWS (5000),
#      MEM_CACHE_MB (256), BENCH_DIR (build/bench). Results: $BENCH_DIR/tier.json, and printed.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFETCH_ROWS=${PREFETCH_ROWS:-4000000}
E2E_ROWS=${E2E_ROWS:-10000000}
PASS_ROWS=${PASS_ROWS:-500000}
POLICY_ROWS=${POLICY_ROWS:-1000000}
POLICY_PASS_ROWS=${POLICY_PASS_ROWS:-5000}
MEM_CACHE_MB=${MEM_CACHE_MB:-256}
DIR=${BENCH_DIR:-build/bench}
T="$DIR/tier"
mkdir -p "$T"
num() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p"; }

echo "== 1. prefetch: the tier against fio on the same file ($PREFETCH_ROWS rows)"
rm -rf "$T/prefetch"
bin/bench-tier build "$T/prefetch" "$PREFETCH_ROWS"
pre="[]"
for i in 1 2 3; do
    f=$(bin/bench-tier fetch "$T/prefetch" "${FETCH_SECONDS:-10}")
    fio_iops=$(fio --name=r --filename="$T/prefetch/table0.slots" --ioengine=io_uring --direct=1 --rw=randread \
        --bs=4k --iodepth=64 --runtime="${FETCH_SECONDS:-10}" --time_based --readonly --output-format=json 2>/dev/null |
        sed -n 's/.*"iops" : \([0-9.]*\).*/\1/p' | head -1)
    rps=$(echo "$f" | num rows_per_s)
    iops=$(echo "$f" | num reads_per_s)
    smap=$(echo "$f" | num slot_map_hits)
    cpu=$(echo "$f" | num cpu_cores)
    ratio=$(awk -v a="$rps" -v b="$fio_iops" 'BEGIN { printf "%.3f", a / b }')
    echo "   round $i: tier $rps rows/s in $iops reads/s (slot map: $smap of the rows) at $cpu cores; fio $fio_iops IOPS; ratio $ratio"
    pre=$(echo "$pre" | sed "s/]$/$( [ "$pre" = "[]" ] || echo ,){\"tier_rows_per_s\": $rps, \"tier_reads_per_s\": $iops, \"slot_map_hits\": $smap, \"cpu_cores\": $cpu, \"fio_iops\": $fio_iops, \"ratio\": $ratio}]/")
done
rm -rf "$T/prefetch"

echo "== 2. end to end: DeepFM, $E2E_ROWS rows, passes of $PASS_ROWS"
gen() {   # rows, seed, keys: a cbx file of generated rows (kept for later runs)
    local f="$DIR/tier-train-$1-$2-$3.tsv"
    [ -f "$f.cbx" ] || { bin/ctrbox-data gen --rows "$1" --seed "$2" --keys "$3" --out "$f" &&
                         bin/ctrbox-data convert --format criteo --in "$f" --out "$f.cbx" 2>/dev/null && rm -f "$f"; }
    echo "$f.cbx"
}
tr=$(gen "$E2E_ROWS" 1 1000)
ARGS=(--model deepfm --train "$tr" --epochs 1 --dim 16 --hidden 400,400,400 --batch 4096 --lr 0.001
      --pass-rows "$PASS_ROWS" --threads 2 --quiet)
# name, extra args...: samples/s, mean memory hit rate, peak RSS (MB: the process's, from
# /usr/bin/time, which includes the final model save), last resident bytes, rows. The table
# folder's size goes to $T/name.disk and the folder is deleted (they take tens of GB).
run() {
    local name=$1; shift
    rm -rf "$T/$name" "$T/$name.tables"
    /usr/bin/time -f %M -o "$T/$name.maxrss" bin/ctrbox train "${ARGS[@]}" --out "$T/$name" "$@"
    if [ -d "$T/$name.tables" ]; then du -sb "$T/$name.tables" | cut -f1 >"$T/$name.disk"; rm -rf "$T/$name.tables"; fi
    rm -f "$T/$name/model.ctrbox"   # the in-memory run's holds the whole table
    local log="$T/$name/log.jsonl"
    local sps=$(grep '"kind": "epoch"' "$log" | tail -1 | num samples_per_s)
    local hit=$(grep '"kind": "pass"' "$log" | num hit_memory | awk '{ s += $1; n++ } END { printf "%.4f", s / n }')
    local rss=$(($(tail -1 "$T/$name.maxrss") * 1024))
    local res=$(grep '"kind": "pass"' "$log" | tail -1 | num resident_bytes)
    local rows=$(grep '"kind": "pass"' "$log" | tail -1 | num resident_rows)
    # rows the SSD served: the share the slot map located, and reads per row
    local smap=$(grep '"kind": "pass"' "$log" | awk '{ for (i = 1; i < NF; i++) { if ($i == "\"rows_read\":") r += $(i + 1);
        if ($i == "\"reads\":") n += $(i + 1); if ($i == "\"slot_map_hits\":") m += $(i + 1) } }
        END { if (r > 0) printf "%.4f/%.4f", m / r, n / r; else printf "0/0" }' | tr -d ',')
    echo "$sps $hit $((rss / 1048576)) $res $rows $smap"
}
# the in-memory run before and after the tier's: this machine's speed drifts by 10% over minutes,
# and the mean of the two runs around it is the fairer reference
read mem_sps _ mem_rss mem_bytes mem_rows _ < <(run mem)
echo "   in memory: $mem_sps samples/s, $mem_rows keys ($((mem_bytes / 1048576)) MB of rows), peak RSS $mem_rss MB"
cache_mb=$((mem_bytes / 1048576 / 10))
read ssd_sps ssd_hit ssd_rss _ _ ssd_smap < <(run ssd --table-dir "$T/ssd.tables" --cache-mb "$cache_mb")
read mem2_sps _ _ _ _ _ < <(run mem)
ssd_ratio=$(awk -v a="$ssd_sps" -v b="$mem_sps" -v c="$mem2_sps" 'BEGIN { printf "%.3f", a / ((b + c) / 2) }')
echo "   in memory again: $mem2_sps samples/s"
echo "   SSD tier, --cache-mb $cache_mb (10%): $ssd_sps samples/s, ratio $ssd_ratio (to the mean of the two in-memory runs);" \
     "memory hits $ssd_hit; peak RSS $ssd_rss MB"
echo "   of the rows read from the SSD: located by the slot map / reads per row: $ssd_smap"

echo "== 2b. eviction policy on Zipf data ($POLICY_ROWS rows, --keys 1, passes of $POLICY_PASS_ROWS), --cache-mb at 10% of the table"
ARGS[3]=$(gen "$POLICY_ROWS" 3 1)
ARGS+=(--pass-rows "$POLICY_PASS_ROWS")
read pm_sps _ _ pm_bytes _ _ < <(run pmem)
pcache=$(awk -v b="$pm_bytes" 'BEGIN { printf "%.1f", b / 1048576 / 10 }')
read lfu_sps lfu_hit _ _ _ _ < <(run lfu --table-dir "$T/lfu.tables" --cache-mb "$pcache" --cache-policy lfu)
read lru_sps lru_hit _ _ _ _ < <(run lru --table-dir "$T/lru.tables" --cache-mb "$pcache" --cache-policy lru)
echo "   table $((pm_bytes / 1048576)) MB, --cache-mb $pcache: LFU memory hits $lfu_hit ($lfu_sps samples/s);" \
     "LRU memory hits $lru_hit ($lru_sps samples/s); in memory $pm_sps samples/s"

echo "== 3. peak RSS with --cache-mb $MEM_CACHE_MB on two table sizes (passes of 100000)"
ARGS+=(--pass-rows 100000)
ARGS[3]=$(gen $((E2E_ROWS / 2)) 2 1000)
read _ _ big_rss _ big_keys _ < <(run membig --table-dir "$T/membig.tables" --cache-mb "$MEM_CACHE_MB")
ARGS[3]=$(gen $((E2E_ROWS / 8)) 2 1000)
read _ _ small_rss _ small_keys _ < <(run memsmall --table-dir "$T/memsmall.tables" --cache-mb "$MEM_CACHE_MB")
small_disk=$(cat "$T/memsmall.disk")
big_disk=$(cat "$T/membig.disk")
echo "   $((E2E_ROWS / 2)) rows ($((big_disk / 1048576)) MB table folder): peak RSS $big_rss MB;" \
     "$((E2E_ROWS / 8)) rows ($((small_disk / 1048576)) MB table folder): peak RSS $small_rss MB; bound $((MEM_CACHE_MB + 512)) MB"
cat > "$DIR/tier.json" <<EOF
{"prefetch": $pre,
 "e2e": {"rows": $E2E_ROWS, "pass_rows": $PASS_ROWS, "keys": $mem_rows, "table_bytes": $mem_bytes, "cache_mb": $cache_mb,
         "memory_samples_per_s": $mem_sps, "memory_again_samples_per_s": $mem2_sps, "ssd_samples_per_s": $ssd_sps, "ratio": $ssd_ratio, "ssd_hit_memory": $ssd_hit,
         "ssd_slot_map_share": ${ssd_smap%/*}, "ssd_reads_per_row": ${ssd_smap#*/},
         "memory_peak_rss_mb": $mem_rss, "ssd_peak_rss_mb": $ssd_rss},
 "policy": {"rows": $POLICY_ROWS, "table_bytes": $pm_bytes, "cache_mb": $pcache, "lfu_hit_memory": $lfu_hit,
            "lru_hit_memory": $lru_hit, "lfu_samples_per_s": $lfu_sps, "lru_samples_per_s": $lru_sps},
 "rss": {"cache_mb": $MEM_CACHE_MB, "pass_rows": 100000, "big_disk_bytes": $big_disk, "big_peak_rss_mb": $big_rss,
         "small_disk_bytes": $small_disk, "small_peak_rss_mb": $small_rss}}
EOF
rm -rf "$T"/*.tables
echo "results in $DIR/tier.json"
