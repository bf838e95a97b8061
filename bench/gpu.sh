#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one go: build with the CUDA backend, run the GPU tests (every
# kernel against its CPU twin, gradient checks on the GPU, placed training against CPU training),
# save the planner's profiles, then train DeepFM and DLRM with the MLP layers on the GPU
# (--placement gpu) and with the planner's choice (--placement auto), against PyTorch eager on the
# same GPU (bench/peer_torch.py --device cuda), at batch 4096 and 16384, on the same generated data.
# Prints samples/s and test AUC of both sides and the ratio (target: 1.5x at AUC within 0.002).
# Env: ROWS (1000000), TEST_ROWS (100000), BATCHES ("4096 16384"), MODELS ("deepfm dlrm"),
# BENCH_DIR (build/bench-gpu), PY (python3 with torch and CUDA), SKIP_TESTS=1, TORCH_DEVICE (cuda).
# A dry run on a CPU-only machine: CTRBOX_GPU_SIM=1 TORCH_DEVICE=cpu ROWS=20000 ... bash bench/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
TEST_ROWS=${TEST_ROWS:-100000}
BATCHES=${BATCHES:-4096 16384}
MODELS=${MODELS:-deepfm dlrm}
DIR=${BENCH_DIR:-build/bench-gpu}
PY=${PY:-python3}
JOBS=$(nproc)
mkdir -p "$DIR"

echo "== devices"
nvidia-smi -L || echo "nvidia-smi: not found"
missing=
for p in liburing libzstd zlib jansson criterion openblas inih rocksdb libxxhash; do
    pkg-config --exists "$p" 2>/dev/null || missing="$missing $p"
done
[ -z "$missing" ] || echo "warning: pkg-config does not know:$missing (the build may fail; make deps installs them)"

echo "== build (CUDA=1)"
make -j"$JOBS" CUDA=1 all bin/ctrbox-tests >"$DIR/build.log" 2>&1 || { tail -30 "$DIR/build.log"; exit 1; }
bin/ctrbox devices

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "== GPU tests"
    CTRBOX_BIN="$PWD/bin" bin/ctrbox-tests --verbose --jobs "$JOBS" --filter '@(gpu|placement)/*' 2>&1 |
        grep -v 'Test is disabled' | grep -E '^\[(PASS|FAIL|SKIP|----)\]|Synthesis' | tee "$DIR/tests.log" || true
    CTRBOX_BIN="$PWD/bin" bin/ctrbox-tests --verbose --filter 'model/gradient_check_on_gpu' 2>&1 |
        grep -v 'Test is disabled' | grep -E '^\[(PASS|FAIL|SKIP|----)\]|Synthesis' | tee -a "$DIR/tests.log" || true
fi

echo "== data ($ROWS rows, test $TEST_ROWS)"
tr="$DIR/train-$ROWS.tsv"; te="$DIR/test-$ROWS.tsv"
[ -f "$tr" ] || bin/ctrbox-data gen --rows "$ROWS" --seed 1 --out "$tr"
[ -f "$te" ] || bin/ctrbox-data gen --rows "$TEST_ROWS" --seed 1 --offset "$ROWS" --out "$te" --truth "$te.truth"

auc() { bin/ctrbox eval --scores "$1" --json | $PY -c "import json,sys; print(json.load(sys.stdin)['auc'])"; }
model_flags() {   # the same sizes on both sides
    case "$1" in
    deepfm) echo "--dim 16 --hidden 400,400,400" ;;
    dlrm) echo "--dim 16 --hidden 512,256 --bottom 512,256,16" ;;
    esac
}
rows="[]"
for m in $MODELS; do
    flags=$(model_flags "$m")
    echo "== plan $m"
    bin/ctrbox plan --model "$m" $flags --batch 4096 --save-profile "$DIR/profile-$m.json" | tail -20
    for b in $BATCHES; do
        for placement in gpu auto; do
            out="$DIR/ctrbox-$m-$b-$placement"
            rm -rf "$out"
            bin/ctrbox train --model "$m" $flags --train "$tr" --valid "$te" --format criteo --out "$out" --epochs 1 \
                --batch "$b" --lr 0.001 --shuffle-rows 0 --threads "$JOBS" --placement "$placement" --quiet
            sps=$($PY -c "import json; print([json.loads(l) for l in open('$out/log.jsonl')][-1]['train_samples_per_s'])")
            bin/ctrbox eval --model "$out" --data "$te" --format criteo --pred-out "$out/test.pred" >/dev/null
            a=$(auc "$out/test.pred")
            rows=$($PY -c "import json; r=json.loads('$rows'); r.append({'side':'ctrbox --placement $placement','model':'$m','batch':$b,'samples_per_s':$sps,'test_auc':$a}); print(json.dumps(r))")
        done
        p_json=$($PY bench/peer_torch.py --model "$m" $flags --train "$tr" --test "$te" --pred-out "$DIR/torch-$m-$b.pred" \
            --batch "$b" --lr 0.001 --threads "$JOBS" --device "${TORCH_DEVICE:-cuda}")
        sps=$(echo "$p_json" | $PY -c "import json,sys; print(json.load(sys.stdin)['samples_per_s'])")
        a=$(auc "$DIR/torch-$m-$b.pred")
        rows=$($PY -c "import json; r=json.loads('$rows'); r.append({'side':'torch ${TORCH_DEVICE:-cuda}','model':'$m','batch':$b,'samples_per_s':$sps,'test_auc':$a}); print(json.dumps(r))")
    done
done
$PY - "$DIR/gpu.json" "$rows" <<'PY'
import json, sys
rows = json.loads(sys.argv[2])
json.dump(rows, open(sys.argv[1], "w"), indent=2)
print("GPU training benchmark (one epoch, Adam 1e-3); target: ctrbox >= 1.5x torch eager, AUC within 0.002")
for r in rows:
    if r["side"].startswith("torch"):
        continue
    t = next(x for x in rows if x["side"].startswith("torch") and x["model"] == r["model"] and x["batch"] == r["batch"])
    print(f"  {r['model']:7s} batch {r['batch']:6d} {r['side']:26s} {r['samples_per_s']:>12,.0f} samples/s"
          f"  torch {t['samples_per_s']:>12,.0f}  -> {r['samples_per_s'] / t['samples_per_s']:.2f}x"
          f"   AUC {r['test_auc']:.4f} vs {t['test_auc']:.4f} ({r['test_auc'] - t['test_auc']:+.4f})")
print(f"  results: {sys.argv[1]}")
PY
