#!/usr/bin/env bash
# Frappe quality run (BARS protocol, ../shared/data/README.md): embedding dim 10, all 10 fields
# categorical, train on train_reconstructed, early-stop on valid, report test AUC and logloss of
# the best-validation model. FuxiCTR's recipe: Adam 1e-3, batch 4096, embedding regularizer 0.05
# over the whole table, learning rate x0.1 when validation AUC does not improve, stop after two
# such epochs; MLPs 400-400-400 with batch norm and dropout 0.2.
# Env: MODELS (default "lr fm deepfm dcnv2 dlrm"), DIR (build/frappe), THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
D=../shared/data/frappe
[ -d "$D" ] || { echo "frappe: $D is absent"; exit 1; }
MODELS=${MODELS:-lr fm deepfm dcnv2 dlrm}
DIR=${DIR:-build/frappe}
mkdir -p "$DIR"
OFF=0,957,5039,5046,5053,5055,5058,5060,5069,5149
common=(--format libsvm --field-offsets "$OFF" --train "$D/train_reconstructed.libsvm" --valid "$D/valid.libsvm"
        --epochs 100 --dim 10 --batch 4096 --lr 0.001 --lr-decay 0.1 --patience 2 --threads "${THREADS:-2}" --quiet)
deep=(--hidden 400,400,400 --batchnorm --dropout 0.2 --emb-l2 0.05)
declare -A extra=([lr]="" [fm]="" [deepfm]="${deep[*]}" [dcnv2]="${deep[*]} --cross 3" [dlrm]="${deep[*]} --interaction cat")
declare -A target=([lr]=0.933 [fm]=0.965 [deepfm]=0.982 [dcnv2]=0.982 [dlrm]=0.982)
declare -A bars=([lr]=0.9356 [fm]=0.9671 [deepfm]=0.9842 [dcnv2]=0.9845 [dlrm]=0.9840)
printf '%-8s %-10s %-10s %-8s %-8s %s\n' model test_auc logloss target BARS seconds
for m in $MODELS; do
    rm -rf "${DIR:?}/$m"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    bin/ctrbox train --model "$m" "${common[@]}" ${extra[$m]} --out "$DIR/$m"
    t1=$(date +%s)
    r=$(bin/ctrbox eval --model "$DIR/$m" --data "$D/test.libsvm" --json)
    auc=$(echo "$r" | sed 's/.*"auc": \([0-9.]*\).*/\1/')
    ll=$(echo "$r" | sed 's/.*"logloss": \([0-9.]*\).*/\1/')
    printf '%-8s %-10s %-10s %-8s %-8s %s\n' "$m" "$auc" "$ll" "${target[$m]}" "${bars[$m]}" $((t1 - t0))
done
