#!/usr/bin/env bash
# make demo: generate a data set from a known model, convert it to the binary format, inspect it,
# and score the oracle (the true probabilities) on the test rows: the AUC any trainer can at best
# reach on this data. Env: ROWS (default 500000 training rows), DIR (default build/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-500000}
TEST=$((ROWS / 10))
DIR=${DIR:-build/demo}
mkdir -p "$DIR"
echo "== generating $ROWS training and $TEST test rows (Criteo layout, known model)"
bin/ctrbox-data gen --rows "$ROWS" --seed 1 --out "$DIR/train.tsv" --truth "$DIR/train.truth"
bin/ctrbox-data gen --rows "$TEST" --seed 1 --offset "$ROWS" --out "$DIR/test.tsv" --truth "$DIR/test.truth"
echo "== converting to cbx"
bin/ctrbox-data convert --format criteo --in "$DIR/train.tsv" --out "$DIR/train.cbx"
bin/ctrbox-data convert --format criteo --in "$DIR/test.tsv" --out "$DIR/test.cbx"
echo "== inspecting the training set"
bin/ctrbox-data inspect "$DIR/train.cbx"
echo "== the oracle on the test rows (the best any trainer can reach)"
bin/ctrbox eval --scores "$DIR/test.truth"
