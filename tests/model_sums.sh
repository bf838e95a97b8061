#!/usr/bin/env bash
# Checksums of the model files (and, for runs with a table folder, the predictions) of a fixed set
# of training runs: every model in memory, streamed with shuffle, in passes, in passes with the
# accessor rules, with a table folder at two budgets and policies, tables per field, admission.
# A refactoring must print the same lines before and after (docs/ARCHITECTURE.md).
# usage: tests/model_sums.sh [BIN_DIR]   (default bin/)
# SUMS_EXTRA: options added to every run (CTRBOX_GPU_SIM=1 SUMS_EXTRA="--placement gpu" must print
# the same lines: the model does not depend on where layers run or rows live)
set -euo pipefail
B=$(cd "${1:-bin}" && pwd)
W=$(mktemp -d /tmp/ctrbox-sums.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
"$B/ctrbox-data" gen --rows 12000 --seed 5 --keys 0.002 --out tr.tsv
"$B/ctrbox-data" gen --rows 3000 --seed 5 --keys 0.002 --offset 12000 --out va.tsv
S="--format criteo --train tr.tsv --threads 1 --quiet --dim 4 --hidden 16,16 --bottom 8,4 --cross 2 --batch 256 --lr 0.01 ${SUMS_EXTRA:-}"
sum() { echo "$1 $(sha256sum "$2" | cut -c1-16)"; }
for m in lr fm ffm dnn widedeep deepfm dcnv2 dlrm; do
    "$B/ctrbox" train --model $m $S --valid va.tsv --epochs 2 --out m_$m
    sum "$m" m_$m/model.ctrbox
done
"$B/ctrbox" train --model deepfm $S --epochs 2 --batchnorm --dropout 0.1 --shuffle-rows 5000 --seed 3 --out bn
sum deepfm-bn-shuffle bn/model.ctrbox
"$B/ctrbox" train --model dcnv2 $S --valid va.tsv --epochs 3 --patience 1 --lr-decay 0.5 --eval-every 20 --out ev
sum dcnv2-eval-every ev/model.ctrbox
"$B/ctrbox" train --model fm $S --epochs 2 --min-show 3 --table-per-field --out adm
sum fm-admission-per-field adm/model.ctrbox
"$B/ctrbox" train --model deepfm $S --epochs 2 --pass-rows 1500 --out p1
sum deepfm-passes p1/model.ctrbox
"$B/ctrbox" train --model deepfm $S --valid va.tsv --epochs 2 --pass-rows 1500 --min-show 3 --decay 0.9 \
    --shrink-threshold 0.4 --shrink-unseen 6 --out p2
sum deepfm-passes-accessor p2/model.ctrbox
for v in "0.02 lfu" "1.5 lru"; do
    set -- $v
    "$B/ctrbox" train --model deepfm $S --epochs 2 --pass-rows 1500 --min-show 3 --decay 0.9 --shrink-threshold 0.4 \
        --shrink-unseen 6 --table-dir t_$1 --cache-mb $1 --cache-policy $2 --out s_$1
    "$B/ctrbox" predict --model s_$1 --data va.tsv --format criteo --out pred_$1.txt
    sum "deepfm-tier-$1-$2-predictions" pred_$1.txt
done
"$B/ctrbox" train --model dnn $S --epochs 1 --field-dim C1=8 --table-per-field --pass-rows 3000 --table-dir tf \
    --cache-mb 0.05 --out f1
"$B/ctrbox" predict --model f1 --data va.tsv --format criteo --out pred_f.txt
sum dnn-tier-field-dim-predictions pred_f.txt
