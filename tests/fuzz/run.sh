#!/usr/bin/env bash
# Build each libFuzzer target with clang (ASan + UBSan) and run it for SECONDS (default 60) on a
# working copy of its seed corpus (tests/fuzz/corpus/NAME). Crashes are saved under build-fuzz/.
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(criteo libsvm libffm csv cbx)
lib="io/util.c src/metrics.c io/reader.c io/stream.c io/parse.c io/block.c datasets/cbx.c"
flags="-g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
libs="-luring -lxxhash -lzstd -lz -lm"
mkdir -p build-fuzz
# seed cbx corpus: small files made by the tool itself
if [ ! -d build-fuzz/seed-cbx ]; then
    make --no-print-directory all >/dev/null
    mkdir -p build-fuzz/seed-cbx
    printf '1 1:1 2:0.5\n0 3:1\n' > build-fuzz/s.txt
    bin/ctrbox-data convert --format libsvm --in build-fuzz/s.txt --out build-fuzz/seed-cbx/a.cbx 2>/dev/null
    printf 'label,a,n\n1,x,2\n0,y,\n' > build-fuzz/s.csv
    bin/ctrbox-data convert --format csv --schema n:num --in build-fuzz/s.csv --out build-fuzz/seed-cbx/b.cbx 2>/dev/null
fi
status=0
for t in "${targets[@]}"; do
    clang $flags tests/fuzz/fuzz_$t.c $lib -o build-fuzz/fuzz_$t $libs
    work=build-fuzz/corpus-$t
    mkdir -p "$work"
    cp -n tests/fuzz/corpus/$t/* "$work"/ 2>/dev/null || true
    [ $t = cbx ] && cp -n build-fuzz/seed-cbx/* "$work"/
    echo "== fuzz_$t: ${secs}s"
    if ! build-fuzz/fuzz_$t "$work" -max_total_time="$secs" -max_len=65536 -timeout=10 \
        -artifact_prefix=build-fuzz/crash-$t- -print_final_stats=1 2>build-fuzz/fuzz_$t.log; then
        echo "fuzz_$t FAILED: see build-fuzz/fuzz_$t.log"; tail -30 build-fuzz/fuzz_$t.log; status=1
    else
        grep -E 'stat::number_of_executed_units|cov:' build-fuzz/fuzz_$t.log | tail -2
    fi
done
exit $status
