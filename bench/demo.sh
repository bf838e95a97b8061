#!/usr/bin/env bash
# make demo: generate a data set from a known model, convert it to the binary format, train
# DeepFM on it with early stopping on a validation set, and evaluate it on held-out rows beside
# the oracle (the true probabilities: the best AUC any trainer can reach on this data).
# Env: ROWS (default 500000 training rows), EPOCHS (3), DIR (default build/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-500000}
EPOCHS=${EPOCHS:-3}
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
echo "== training DeepFM (dim 16, hidden 400-400-400, Adam, batch 4096)"
rm -rf "$DIR/deepfm"
bin/ctrbox train --model deepfm --train "$DIR/train.cbx" --valid "$DIR/valid.cbx" --out "$DIR/deepfm" \
    --epochs "$EPOCHS" --dim 16 --hidden 400,400,400 --batch 4096 --lr 0.001 --lr-decay 0.1
echo "== test rows: DeepFM, then the oracle"
bin/ctrbox eval --model "$DIR/deepfm" --data "$DIR/test.cbx"
bin/ctrbox eval --scores "$DIR/test.truth"
