#!/usr/bin/env bash
# SSD tier benchmarks (issue 4), each against a reference measured in the same run:
#  1. prefetch: rows/s fetched from the tier (random keys, 64k per call as a pass asks) against
#     fio --ioengine=io_uring --direct=1 --rw=randread --bs=4k --iodepth=64 on the slot file, with
#     the CPU the fetch costs and the reads it issued (one read may serve several rows); three
#     rounds. The tier's 256 MB of index memory holds all its keys in the slot map here.
#  2. end to end: DeepFM on generated data (E2E_ROWS rows, --keys 1000: tens of millions of
#     distinct keys) in passes, the table in memory, then in the SSD tier with --cache-mb at 10% of
#     the in-memory table's bytes, then in memory again (E2E_REPEAT times tier and memory): samples/s
#     of each tier run over the mean of the in-memory runs before and after it, the median of those
#     ratios, and the same for the processes' CPU seconds (the work the tier adds, less noisy).
#  2c. the second epoch: the same runs with --epochs 2 (in memory, tier, in memory): the second
#     epoch's own samples/s (its rows over the time from the first epoch's line to its own, the
#     repack at the first epoch's end included), where every key's row is already in the tier, as in
#     a job that goes on from yesterday's tables; and what its passes spent.
#  2b. eviction policy: LFU against LRU on Zipf data with a smaller vocabulary (POLICY_ROWS rows,
#     --keys 1), --cache-mb at 10% of the table, passes of POLICY_PASS_ROWS (small enough that a
#     pass's rows fit the cache, so the policy chooses what stays): memory hit rates and samples/s.
#  3. memory: the process's peak RSS (/usr/bin/time) of tiered runs at --cache-mb 256 and 1024, on
#     tables of about RSS_SMALL_ROWS and RSS_BIG_ROWS rows' worth of keys (5 GB and 20 GB on disk at
#     the defaults), with and without --min-show 2: eight points against the bound --cache-mb + 256 MB.
#  4. disk: after a run with shrink (2 epochs, --shrink-threshold 1), the table folder's bytes on
#     disk (du) over its live rows' bytes (rows times the record's bytes).
#  5. the curve: samples/s of the end-to-end run with --cache-mb at 1, 3, 10, 30 and 100% of the
#     table, over the mean of in-memory runs before and after; a table and docs/tier-curve.svg.
# Env: PREFETCH_ROWS (4000000), E2E_ROWS (10000000), PASS_ROWS (500000), E2E_REPEAT (1: tier runs, each followed by an in-memory one), POLICY_ROWS (1000000), POLICY_PASS_ROWS (5000),
#      RSS_SMALL_ROWS (10000000), RSS_BIG_ROWS (40000000), RSS_PASS_ROWS (50000), RSS_BUDGETS ("256 1024"), RSS_MIN_SHOWS ("0 2"), DISK_ROWS (E2E_ROWS), DISK_CACHE_MB (512), CURVE_ROWS (E2E_ROWS),
#      PARTS ("prefetch e2e e2e2 policy rss disk curve": the sections to run), BENCH_DIR (build/bench),
#      CURVE_SVG (docs/tier-curve.svg: the curve's plot, the machine under its title).
#      Results: $BENCH_DIR/tier.json (the sections run), and printed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/cpu.sh
PREFETCH_ROWS=${PREFETCH_ROWS:-4000000}
E2E_ROWS=${E2E_ROWS:-10000000}
PASS_ROWS=${PASS_ROWS:-500000}
E2E_REPEAT=${E2E_REPEAT:-1}
POLICY_ROWS=${POLICY_ROWS:-1000000}
POLICY_PASS_ROWS=${POLICY_PASS_ROWS:-5000}
RSS_PASS_ROWS=${RSS_PASS_ROWS:-50000}   # three passes of samples in memory take their share of --cache-mb
RSS_SMALL_ROWS=${RSS_SMALL_ROWS-10000000}   # empty: that size is not run
RSS_BIG_ROWS=${RSS_BIG_ROWS-40000000}
DISK_ROWS=${DISK_ROWS:-$E2E_ROWS}
CURVE_ROWS=${CURVE_ROWS:-$E2E_ROWS}
PARTS=${PARTS:-prefetch e2e e2e2 policy rss disk curve}
DIR=${BENCH_DIR:-build/bench}
T="$DIR/tier"
mkdir -p "$T"
num() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p"; }
want() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
json=()   # the sections' JSON members
# the machine: the CPU, and the OpenBLAS and element-wise kernels ctrbox runs
cpu=$(cpu_desc)
machine="$cpu, $(nproc) cores; ctrbox: $(bin/ctrbox devices | sed -n 's/^cpu: [0-9]* cores, //p')"
echo "machine: $machine"
json+=("\"machine\": \"$machine\"")

if want prefetch; then
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
json+=("\"prefetch\": $pre")
fi

gen() {   # rows, seed, keys: a cbx file of generated rows (kept for later runs)
    local f="$DIR/tier-train-$1-$2-$3.tsv"
    [ -f "$f.cbx" ] || { bin/ctrbox-data gen --rows "$1" --seed "$2" --keys "$3" --out "$f" >&2 &&
                         bin/ctrbox-data convert --format criteo --in "$f" --out "$f.cbx" >&2 2>/dev/null && rm -f "$f"; }
    echo "$f.cbx"
}
ARGS=(--model deepfm --train "" --epochs 1 --dim 16 --hidden 400,400,400 --batch 4096 --lr 0.001
      --pass-rows "$PASS_ROWS" --threads 2 --quiet)
# name, extra args...: samples/s, mean memory hit rate, peak RSS (MB: the process's, from
# /usr/bin/time, which includes the final model save), last resident bytes, rows, the share of
# rows read the slot map located / reads per row read, CPU seconds (user + system, the whole
# process: /usr/bin/time), the CPU seconds of the fetch, writer and reader threads summed over the
# pass lines (f/w/r). The table folder's size goes to $T/name.disk and the folder is deleted
# (they take tens of GB).
run() {
    local name=$1; shift
    rm -rf "$T/$name" "$T/$name.tables"
    /usr/bin/time -f '%M %U %S' -o "$T/$name.maxrss" bin/ctrbox train "${ARGS[@]}" --out "$T/$name" "$@"
    # allocated bytes: the holes the repack punched (the rows it moved went past them) do not count
    if [ -d "$T/$name.tables" ]; then du -s -B1 "$T/$name.tables" | cut -f1 >"$T/$name.disk"; rm -rf "$T/$name.tables"; fi
    rm -f "$T/$name/model.ctrbox"   # the in-memory run's holds the whole table
    local log="$T/$name/log.jsonl"
    local sps=$(grep '"kind": "epoch"' "$log" | tail -1 | num samples_per_s)
    local hit=$(grep '"kind": "pass"' "$log" | num hit_memory | awk '{ s += $1; n++ } END { printf "%.4f", s / n }')
    local rss=$(($(tail -1 "$T/$name.maxrss" | cut -d' ' -f1) * 1024))
    local cpu=$(tail -1 "$T/$name.maxrss" | awk '{ printf "%.1f", $2 + $3 }')
    local res=$(grep '"kind": "pass"' "$log" | tail -1 | num resident_bytes)
    local rows=$(grep '"kind": "pass"' "$log" | tail -1 | num resident_rows)
    # rows the SSD served: the share the slot map located (its guesses less those that found another
    # key's row), and reads per row
    local smap=$(grep '"kind": "pass"' "$log" | awk '{ for (i = 1; i < NF; i++) { if ($i == "\"rows_read\":") r += $(i + 1);
        if ($i == "\"reads\":") n += $(i + 1); if ($i == "\"slot_map_hits\":") m += $(i + 1);
        if ($i == "\"slot_map_wrong\":") m -= $(i + 1) } }
        END { if (r > 0) printf "%.4f/%.4f", m / r, n / r; else printf "0/0" }' | tr -d ',')
    local thr=$(grep '"kind": "pass"' "$log" | awk '{ for (i = 1; i < NF; i++) { if ($i == "\"fetch_cpu_s\":") f += $(i + 1);
        if ($i == "\"writer_cpu_s\":") w += $(i + 1); if ($i == "\"reader_cpu_s\":") r += $(i + 1) } }
        END { printf "%.1f/%.1f/%.1f", f, w, r }' | tr -d ',')
    echo "$sps $hit $((rss / 1048576)) $res $rows $smap $cpu $thr"
}
if want e2e; then
echo "== 2. end to end: DeepFM, $E2E_ROWS rows, passes of $PASS_ROWS ($E2E_REPEAT tier runs)"
ARGS[3]=$(gen "$E2E_ROWS" 1 1000)
read mem_sps _ mem_rss mem_bytes mem_rows _ mem_cpu _ < <(run mem)
echo "   in memory: $mem_sps samples/s, $mem_cpu CPU s, $mem_rows keys ($((mem_bytes / 1048576)) MB of rows), peak RSS $mem_rss MB"
cache_mb=$((mem_bytes / 1048576 / 10))
# tier, memory, tier, memory, ...: each tier run against the mean of the in-memory runs around it;
# the median of those ratios is the figure (this machine's speed drifts by 10% over minutes)
mems=("$mem_sps") mem_cpus=("$mem_cpu") ssds=() ssd_cpus=() ratios=() cpu_ratios=()
for i in $(seq 1 "$E2E_REPEAT"); do
    read ssd_sps ssd_hit ssd_rss _ _ ssd_smap ssd_cpu ssd_thr < <(run ssd --table-dir "$T/ssd.tables" --cache-mb "$cache_mb")
    read mem2_sps _ _ _ _ _ mem2_cpu _ < <(run mem)
    r=$(awk -v a="$ssd_sps" -v b="${mems[-1]}" -v c="$mem2_sps" 'BEGIN { printf "%.3f", a / ((b + c) / 2) }')
    rc=$(awk -v a="$ssd_cpu" -v b="${mem_cpus[-1]}" -v c="$mem2_cpu" 'BEGIN { printf "%.3f", a / ((b + c) / 2) }')
    echo "   SSD tier, --cache-mb $cache_mb (10%): $ssd_sps samples/s, $ssd_cpu CPU s (fetch/writer/reader $ssd_thr); in memory again: $mem2_sps samples/s, $mem2_cpu CPU s;" \
         "ratio $r (to the mean of the in-memory runs around it), CPU seconds $rc of theirs"
    mems+=("$mem2_sps") mem_cpus+=("$mem2_cpu") ssds+=("$ssd_sps") ssd_cpus+=("$ssd_cpu") ratios+=("$r") cpu_ratios+=("$rc")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ssd_ratio=$(median "${ratios[@]}") cpu_ratio=$(median "${cpu_ratios[@]}")
echo "   ratio $ssd_ratio, CPU seconds $cpu_ratio of in memory (medians of ${#ratios[@]}); the last tier run's memory hits $ssd_hit, peak RSS $ssd_rss MB"
echo "   of the rows read from the SSD: located by the slot map / reads per row: $ssd_smap"
list() { local IFS=,; echo "[$*]"; }
json+=("\"e2e\": {\"rows\": $E2E_ROWS, \"pass_rows\": $PASS_ROWS, \"keys\": $mem_rows, \"table_bytes\": $mem_bytes, \"cache_mb\": $cache_mb,
         \"memory_samples_per_s\": $(list "${mems[@]}"), \"ssd_samples_per_s\": $(list "${ssds[@]}"), \"ratios\": $(list "${ratios[@]}"), \"ratio\": $ssd_ratio,
         \"memory_cpu_s\": $(list "${mem_cpus[@]}"), \"ssd_cpu_s\": $(list "${ssd_cpus[@]}"), \"cpu_ratios\": $(list "${cpu_ratios[@]}"), \"cpu_ratio\": $cpu_ratio, \"ssd_hit_memory\": $ssd_hit,
         \"ssd_slot_map_share\": ${ssd_smap%/*}, \"ssd_reads_per_row\": ${ssd_smap#*/},
         \"ssd_fetch_writer_reader_cpu_s\": \"$ssd_thr\", \"memory_peak_rss_mb\": $mem_rss, \"ssd_peak_rss_mb\": $ssd_rss}")
fi

if want e2e2; then
echo "== 2c. the second epoch: DeepFM, $E2E_ROWS rows, passes of $PASS_ROWS, --epochs 2"
ARGS0=("${ARGS[@]}")
ARGS[3]=$(gen "$E2E_ROWS" 1 1000) ARGS[5]=2
# name: the second epoch's samples/s, then the sums of its pass lines (time waiting for the fetch,
# commits, boundaries; rows read, index lookups, fetch CPU seconds)
second() {
    local log="$T/$1/log.jsonl"
    grep '"kind": "epoch"' "$log" | awk -v rows="$E2E_ROWS" '{ for (i = 1; i < NF; i++) if ($i == "\"seconds\":") s[NR] = $(i + 1) + 0 }
        END { printf "%.1f ", rows / (s[2] - s[1]) }'
    grep '"kind": "pass"' "$log" | grep '"epoch": 2,' | awk '{ for (i = 1; i < NF; i++) { v = $(i + 1); sub(/,$/, "", v)
        if ($i == "\"wait_s\":") w += v; if ($i == "\"commit_s\":") c += v; if ($i == "\"boundary_s\":") b += v
        if ($i == "\"rows_read\":") r += v; if ($i == "\"index_gets\":") g += v; if ($i == "\"fetch_cpu_s\":") f += v } }
        END { printf "%.1f %.1f %.1f %d %d %.1f\n", w, c, b, r, g, f }'
}
read _ _ _ m_bytes _ < <(run mem)
read m1 _ < <(second mem)
cache_mb=${cache_mb:-$((m_bytes / 1048576 / 10))}   # as section 2 sets it, where it did not run
run ssd --table-dir "$T/ssd.tables" --cache-mb "$cache_mb" >/dev/null
read s2 s_wait s_commit s_bound s_read s_gets s_fetch < <(second ssd)
run mem >/dev/null
read m2 _ < <(second mem)
r2=$(awk -v a="$s2" -v b="$m1" -v c="$m2" 'BEGIN { printf "%.3f", a / ((b + c) / 2) }')
echo "   second epoch: in memory $m1 and $m2 samples/s; SSD tier, --cache-mb $cache_mb: $s2 samples/s, ratio $r2"
echo "   its passes: waiting for the fetch $s_wait s, commits $s_commit s (the repack's among them), boundaries $s_bound s;" \
     "$s_read rows read, $s_gets index lookups, fetch CPU $s_fetch s"
json+=("\"e2e_second_epoch\": {\"rows\": $E2E_ROWS, \"cache_mb\": $cache_mb, \"memory_samples_per_s\": [$m1, $m2], \"ssd_samples_per_s\": $s2, \"ratio\": $r2,
         \"ssd_wait_s\": $s_wait, \"ssd_commit_s\": $s_commit, \"ssd_boundary_s\": $s_bound, \"ssd_rows_read\": $s_read, \"ssd_index_gets\": $s_gets, \"ssd_fetch_cpu_s\": $s_fetch}")
ARGS=("${ARGS0[@]}")
fi

if want policy; then
ARGS0=("${ARGS[@]}")
echo "== 2b. eviction policy on Zipf data ($POLICY_ROWS rows, --keys 1, passes of $POLICY_PASS_ROWS), --cache-mb at 10% of the table"
ARGS[3]=$(gen "$POLICY_ROWS" 3 1)
ARGS+=(--pass-rows "$POLICY_PASS_ROWS")
read pm_sps _ _ pm_bytes _ _ _ < <(run pmem)
pcache=$(awk -v b="$pm_bytes" 'BEGIN { printf "%.1f", b / 1048576 / 10 }')
read lfu_sps lfu_hit _ _ _ _ _ < <(run lfu --table-dir "$T/lfu.tables" --cache-mb "$pcache" --cache-policy lfu)
read lru_sps lru_hit _ _ _ _ _ < <(run lru --table-dir "$T/lru.tables" --cache-mb "$pcache" --cache-policy lru)
echo "   table $((pm_bytes / 1048576)) MB, --cache-mb $pcache: LFU memory hits $lfu_hit ($lfu_sps samples/s);" \
     "LRU memory hits $lru_hit ($lru_sps samples/s); in memory $pm_sps samples/s"
json+=("\"policy\": {\"rows\": $POLICY_ROWS, \"table_bytes\": $pm_bytes, \"cache_mb\": $pcache, \"lfu_hit_memory\": $lfu_hit,
            \"lru_hit_memory\": $lru_hit, \"lfu_samples_per_s\": $lfu_sps, \"lru_samples_per_s\": $lru_sps}")
ARGS=("${ARGS0[@]}")
fi

if want rss; then
echo "== 3. peak RSS against --cache-mb + 256 MB: two table sizes, two budgets, with and without --min-show 2"
rss_rows=()
for rows in $RSS_SMALL_ROWS $RSS_BIG_ROWS; do
    ARGS=(--model deepfm --train "$(gen "$rows" 2 1000)" --epochs 1 --dim 16 --hidden 400,400,400 --batch 4096
          --lr 0.001 --pass-rows "$RSS_PASS_ROWS" --threads 2 --quiet)
    for mb in ${RSS_BUDGETS:-256 1024}; do
        for ms in ${RSS_MIN_SHOWS:-0 2}; do
            read _ _ rss _ keys _ _ < <(run "rss-$rows-$mb-$ms" --table-dir "$T/rss-$rows-$mb-$ms.tables" --cache-mb "$mb" --min-show "$ms")
            disk=$(cat "$T/rss-$rows-$mb-$ms.disk")
            ok=$([ "$rss" -le $((mb + 256)) ] && echo within || echo OVER)
            echo "   $rows rows ($((disk / 1048576)) MB table folder), --cache-mb $mb, --min-show $ms: peak RSS $rss MB," \
                 "bound $((mb + 256)) MB: $ok"
            rss_rows+=("{\"rows\": $rows, \"disk_bytes\": $disk, \"cache_mb\": $mb, \"min_show\": $ms, \"peak_rss_mb\": $rss, \"bound_mb\": $((mb + 256))}")
        done
    done
done
json+=("\"rss\": [$(IFS=,; echo "${rss_rows[*]}")]")
fi

if want disk; then
echo "== 4. disk bytes per live row byte after a run with shrink ($DISK_ROWS rows, 2 epochs, --shrink-threshold 1)"
ARGS=(--model deepfm --train "$(gen "$DISK_ROWS" 1 1000)" --epochs 2 --dim 16 --hidden 400,400,400 --batch 4096
      --lr 0.001 --pass-rows "$PASS_ROWS" --threads 2 --quiet --shrink-threshold 1)
rm -rf "$T/disk" "$T/disk.tables"
bin/ctrbox train "${ARGS[@]}" --out "$T/disk" --table-dir "$T/disk.tables" --cache-mb "${DISK_CACHE_MB:-512}"
disk=$(du -s -B1 "$T/disk.tables" | cut -f1)   # allocated: the holes punched in slot files do not count
read live_rows rec_bytes < <(bin/ctrbox-table inspect "$T/disk.tables" | sed -n 's/.* \([0-9]*\) rows of \([0-9]*\) bytes.*/\1 \2/p' | head -1)
slots=$(du -s -B1 "$T/disk.tables"/table*.slots | awk '{ s += $1 } END { printf "%d", s }')
index=$(du -s -B1 "$T/disk.tables/index" | cut -f1)
live=$((live_rows * rec_bytes))
disk_ratio=$(awk -v a="$disk" -v b="$live" 'BEGIN { printf "%.3f", a / b }')
echo "   $live_rows live rows of $rec_bytes bytes ($((live / 1048576)) MB); on disk $((disk / 1048576)) MB (slots" \
     "$((slots / 1048576)) MB, index $((index / 1048576)) MB): $disk_ratio bytes per live row byte"
json+=("\"disk\": {\"rows\": $DISK_ROWS, \"live_rows\": $live_rows, \"record_bytes\": $rec_bytes, \"disk_bytes\": $disk, \"slot_bytes\": $slots, \"index_bytes\": $index, \"ratio\": $disk_ratio}")
rm -rf "$T/disk.tables"
fi

if want curve; then
echo "== 5. the curve: samples/s against the cache's share of the table ($CURVE_ROWS rows)"
ARGS=(--model deepfm --train "$(gen "$CURVE_ROWS" 1 1000)" --epochs 1 --dim 16 --hidden 400,400,400 --batch 4096
      --lr 0.001 --pass-rows "$PASS_ROWS" --threads 2 --quiet)
read c_mem _ _ c_bytes _ _ _ < <(run cmem)
pts=()
for pct in 1 3 10 30 100; do
    mb=$(awk -v b="$c_bytes" -v p="$pct" 'BEGIN { m = b / 1048576 * p / 100; if (p == 100) m = m * 1.5 + 300; printf "%.0f", m < 2 ? 2 : m }')
    read sps hit _ _ _ _ _ < <(run "c$pct" --table-dir "$T/c$pct.tables" --cache-mb "$mb")
    pts+=("$pct $mb $sps $hit")
done
read c_mem2 _ _ _ _ _ _ < <(run cmem)
curve=()
printf '   %-8s %-10s %-12s %-8s %s\n' "cache" "--cache-mb" "samples/s" "ratio" "memory hits"
for p in "${pts[@]}"; do
    read pct mb sps hit <<<"$p"
    r=$(awk -v a="$sps" -v b="$c_mem" -v c="$c_mem2" 'BEGIN { printf "%.3f", a / ((b + c) / 2) }')
    printf '   %-8s %-10s %-12s %-8s %s\n' "$pct%" "$mb" "$sps" "$r" "$hit"
    curve+=("{\"cache_pct\": $pct, \"cache_mb\": $mb, \"samples_per_s\": $sps, \"ratio\": $r, \"hit_memory\": $hit}")
done
echo "   in memory: $c_mem and $c_mem2 samples/s"
json+=("\"curve\": {\"rows\": $CURVE_ROWS, \"table_bytes\": $c_bytes, \"memory_samples_per_s\": [$c_mem, $c_mem2], \"points\": [$(IFS=,; echo "${curve[*]}")]}")
echo "{${json[-1]}}" | python3 bench/tier_curve.py "${CURVE_SVG:-docs/tier-curve.svg}" "$cpu"
fi

{ echo "{"; (IFS=,; echo "${json[*]}"); echo "}"; } > "$DIR/tier.json"   # members may span lines
rm -rf "$T"/*.tables
echo "results in $DIR/tier.json"
