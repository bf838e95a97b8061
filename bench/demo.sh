#!/usr/bin/env bash
# make demo: generate a data set from a known model, convert it to the binary format, train
# DeepFM on it in passes with its sparse table in the SSD tier and a CPU cache smaller than the
# table (per-pass tier statistics on the way), and evaluate it on held-out rows beside the oracle
# (the true probabilities: the best AUC any trainer can reach on this data); then `ctrbox info` and
# `ctrbox report`, whose page's path it prints.
# Env: ROWS (default 500000 training rows), EPOCHS (1), CACHE_MB (96: a pass's rows fit it, the
# table of about 150 MB does not), DIR (default build/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-500000}
EPOCHS=${EPOCHS:-1}   # with a table folder the model kept is the last pass's
CACHE_MB=${CACHE_MB:-96}
TEST=$((ROWS / 10))
DIR=${DIR:-build/demo}
mkdir -p "$DIR"
echo "== generating $ROWS training, $TEST validation and $TEST test rows (Criteo layout, known model)"
bin/ctrbox-data gen --rows "$ROWS" --seed 1 --out "$DIR/train.tsv"
bin/ctrbox-data gen --rows "$TEST" --seed 1 --offset "$ROWS" --out "$DIR/valid.tsv"
bin/ctrbox-data gen --rows "$TEST" --seed 1 --offset $((ROWS + TEST)) --out "$DIR/test.tsv" --truth "$DIR/test.truth"
echo "== converting to cbx"
for s in train valid test; do bin/ctrbox-data convert --format criteo --in "$DIR/$s.tsv" --out "$DIR/$s.cbx"; done
echo "== inspecting the training set"
bin/ctrbox-data inspect "$DIR/train.cbx" | head -8
echo "== training DeepFM (dim 16, hidden 400-400-400, Adam, batch 4096) in passes of $((ROWS / 4)) rows,"
echo "   sparse rows in the SSD tier ($DIR/tables), $CACHE_MB MB of them cached in memory"
rm -rf "$DIR/deepfm" "$DIR/tables"
bin/ctrbox train --model deepfm --train "$DIR/train.cbx" --valid "$DIR/valid.cbx" --out "$DIR/deepfm" \
    --epochs "$EPOCHS" --dim 16 --hidden 400,400,400 --batch 4096 --lr 0.001 --lr-decay 0.1 \
    --pass-rows $((ROWS / 4)) --table-dir "$DIR/tables" --cache-mb "$CACHE_MB"
last=$(grep '"kind": "pass"' "$DIR/deepfm/log.jsonl" | tail -1)
field() { echo "$last" | sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"; }
echo "== SSD tier after the last pass: $(du -sh "$DIR/tables" | cut -f1) on disk; rows in memory $(field resident_rows)" \
     "($(( $(field resident_bytes) / 1048576 )) MB, budget $CACHE_MB MB); peak RSS $(( $(field peak_rss_bytes) / 1048576 )) MB"
echo "   last pass: memory hits $(field hit_memory), SSD hits $(field hit_ssd), new keys $(field new_keys)," \
     "rows read $(field rows_read), rows written $(field rows_written), trainer waited $(field wait_s) s for rows"
echo "== test rows: DeepFM, then the oracle"
bin/ctrbox eval --model "$DIR/deepfm" --data "$DIR/test.cbx"
bin/ctrbox eval --scores "$DIR/test.truth"
echo "== the model, and a report to look at (training curves, ROC/PR, calibration, fields, the tier per pass)"
bin/ctrbox info "$DIR/deepfm" | tail -3
bin/ctrbox report "$DIR/deepfm" --data "$DIR/test.cbx" --out "$DIR/report.html" >/dev/null
echo "report: $(realpath "$DIR/report.html")  (open it in a browser; it needs no network)"
