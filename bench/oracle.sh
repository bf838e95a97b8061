#!/usr/bin/env bash
# How close each model gets to the oracle on generated data: ROWS training rows (default
# 1,000,000), validation and test rows from the same known model; each model trains with early
# stopping on validation and is scored on the test rows beside the oracle (true probabilities).
# Env: ROWS, MODELS, EPOCHS (default 3), DIR (build/oracle).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
T=$((ROWS / 10))
EPOCHS=${EPOCHS:-3}
MODELS=${MODELS:-lr fm ffm dnn widedeep deepfm dcnv2 dlrm}
DIR=${DIR:-build/oracle}
mkdir -p "$DIR"
[ -f "$DIR/train-$ROWS.cbx" ] || {
    bin/ctrbox-data gen --rows "$ROWS" --seed 1 --out "$DIR/train.tsv"
    bin/ctrbox-data gen --rows "$T" --seed 1 --offset "$ROWS" --out "$DIR/valid.tsv"
    bin/ctrbox-data gen --rows "$T" --seed 1 --offset $((ROWS + T)) --out "$DIR/test.tsv" --truth "$DIR/test-$ROWS.truth"
    for s in valid test; do bin/ctrbox-data convert --format criteo --in "$DIR/$s.tsv" --out "$DIR/$s-$ROWS.cbx" 2>/dev/null; done
    bin/ctrbox-data convert --format criteo --in "$DIR/train.tsv" --out "$DIR/train-$ROWS.cbx" 2>/dev/null
    rm -f "$DIR"/*.tsv
}
oracle=$(bin/ctrbox eval --scores "$DIR/test-$ROWS.truth" --json)
echo "oracle on $T test rows: $oracle"
printf '%-9s %-9s %-9s %-9s %s\n' model test_auc oracle gap seconds
oauc=$(echo "$oracle" | sed 's/.*"auc": \([0-9.]*\).*/\1/')
for m in $MODELS; do
    dim=16
    [ "$m" = ffm ] && dim=4
    t0=$(date +%s)
    rm -rf "${DIR:?}/$m"
    bin/ctrbox train --model "$m" --train "$DIR/train-$ROWS.cbx" --valid "$DIR/valid-$ROWS.cbx" --out "$DIR/$m" \
        --epochs "$EPOCHS" --dim "$dim" --hidden 400,400,400 --batch 4096 --lr 0.001 --lr-decay 0.1 --quiet
    t1=$(date +%s)
    auc=$(bin/ctrbox eval --model "$DIR/$m" --data "$DIR/test-$ROWS.cbx" --json | sed 's/.*"auc": \([0-9.]*\).*/\1/')
    printf '%-9s %-9s %-9s %-9s %s\n' "$m" "$auc" "$oauc" "$(python3 -c "print(f'{$oauc - $auc:.4f}')")" $((t1 - t0))
done
