#!/usr/bin/env bash
# The two SSD-tier layouts (issue 4) on this machine's disk, with fio on the same file system:
# rows stored in RocksDB and fetched by a pool of threads (MultiGet), against rows in fixed
# 512-byte slots read with io_uring (O_DIRECT) after a key -> slot MultiGet in RocksDB.
# Env: ROWS (4000000), LAYOUT_DIR (/tmp/ctrbox-layout; removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-4000000}
D=${LAYOUT_DIR:-/tmp/ctrbox-layout}
rm -rf "$D"
bin/bench-layout build "$D" "$ROWS" 232
for t in 1 8 32; do bin/bench-layout rocksdb "$D" 8 "$t"; done
for d in 16 64 128; do bin/bench-layout slots "$D" 8 "$d"; done
for c in 64 256; do CACHE_MB=$c bin/bench-layout slots "$D" 8 64; done
fio --name=r --filename="$D/slots" --ioengine=io_uring --direct=1 --rw=randread --bs=4k --iodepth=64 \
    --runtime=8 --time_based --readonly | grep -E "IOPS|cpu"
rm -rf "$D"
