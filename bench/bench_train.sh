#!/usr/bin/env bash
# Training benchmark against the PyTorch peer (Debian's python3-torch, CPU, 2 threads) on the same
# generated data, models, sizes, batch and optimizer (Adam 1e-3, one epoch in file order), plus
# the MLP's GFLOP/s against cblas_sgemm on the same shapes. Both sides use the same OpenBLAS
# kernel family (OPENBLAS_CORETYPE, as ctrbox picks it). Env: ROWS (1000000), TEST_ROWS (100000),
# MODELS ("lr fm deepfm"), BENCH_DIR (build/bench), ISA (the machine's; avx2: both sides as on an
# AVX2-only CPU: ctrbox built with `make SIMD=avx2` into bin-avx2/, OpenBLAS's Haswell kernels,
# PyTorch's ATEN_CPU_CAPABILITY=avx2 and oneDNN's DNNL_MAX_CPU_ISA=AVX2; results in train-avx2.json).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/cpu.sh
ROWS=${ROWS:-1000000}
TEST_ROWS=${TEST_ROWS:-100000}
MODELS=${MODELS:-lr fm deepfm}
DIR=${BENCH_DIR:-build/bench}
PY=/usr/bin/python3
mkdir -p "$DIR"
tr="$DIR/train-$ROWS.tsv"; te="$DIR/test-$ROWS.tsv"
[ -f "$tr" ] || bin/ctrbox-data gen --rows "$ROWS" --seed 1 --out "$tr"
[ -f "$te" ] || bin/ctrbox-data gen --rows "$TEST_ROWS" --seed 1 --offset "$ROWS" --out "$te" --truth "$te.truth"
[ -f "$tr.cbx" ] || bin/ctrbox-data convert --format criteo --in "$tr" --out "$tr.cbx" 2>/dev/null
if grep -q avx512bw /proc/cpuinfo; then core=SkylakeX; elif grep -q avx2 /proc/cpuinfo; then core=Haswell; else core=; fi
B=bin; tag=
if [ "${ISA:-}" = avx2 ]; then
    grep -q avx2 /proc/cpuinfo || { echo "ISA=avx2: this CPU has no AVX2" >&2; exit 1; }
    make --no-print-directory SIMD=avx2 BUILD=build-avx2 BIN=bin-avx2 CUDA=0 bin-avx2/ctrbox bin-avx2/bench-train >/dev/null
    B=bin-avx2; tag=-avx2; core=Haswell
    export ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
fi
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$core}

auc() { $B/ctrbox eval --scores "$1" --json | $PY -c "import json,sys; print(json.load(sys.stdin)['auc'])"; }
oracle=$(auc "$te.truth")
# what each side runs on: the CPU, ctrbox's OpenBLAS core and element-wise kernels, PyTorch's
cpu=$(cpu_desc)
c_kernels=$($B/ctrbox devices | sed -n 's/^cpu: [0-9]* cores, //p')
blas=$(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || true)   # Debian's torch links libblas.so.3
case "$blas" in *openblas*) t_blas="OpenBLAS (core $OPENBLAS_CORETYPE) as libblas.so.3" ;; *) t_blas="libblas.so.3: ${blas:-unknown}" ;; esac
t_kernels=$($PY -c "import torch; c = torch.__config__.show(); print('element-wise kernels ' + c.split('CPU capability usage: ')[1].split()[0].lower())" 2>/dev/null || echo "element-wise kernels unknown")
t_kernels="$t_blas, $t_kernels"
mlp=$($B/bench-train mlp 4096 $((26 * 16 + 13)) 400,400,400,1)
results="[]"
# Short runs are timed several times on each side (REPEAT, default 3; DeepFM's REPEAT_DEEPFM,
# default 1) and the median run counts: one run of LR is about a second here, where the machine's
# own noise moves single runs by 20%.
repeat_of() { if [ "$1" = deepfm ]; then echo "${REPEAT_DEEPFM:-1}"; else echo "${REPEAT:-3}"; fi; }
median() { $PY -c "import sys; v=sorted(float(x) for x in sys.argv[1:]); print(v[len(v)//2])" "$@"; }
for m in $MODELS; do
    out="$DIR/ctrbox-$m"
    n=$(repeat_of "$m")
    runs=()
    for _ in $(seq "$n"); do
        rm -rf "$out"
        "$B/ctrbox" train --model "$m" --train "$tr.cbx" --out "$out" --epochs 1 --batch 4096 --dim 16 \
            --hidden 400,400,400 --lr 0.001 --shuffle-rows 0 --threads 2 --quiet
        runs+=("$($PY -c "import json; print(json.loads(open('$out/log.jsonl').read().splitlines()[-1])['train_samples_per_s'])")")
    done
    c_sps=$(median "${runs[@]}")
    c_runs=$(IFS=,; echo "${runs[*]}")
    $B/ctrbox eval --model "$out" --data "$te" --format criteo --pred-out "$out/test.pred" >/dev/null
    c_auc=$(auc "$out/test.pred")
    p_json=$($PY bench/peer_torch.py --model "$m" --train "$tr" --test "$te" --pred-out "$DIR/torch-$m.pred" \
        --dim 16 --hidden 400,400,400 --batch 4096 --lr 0.001 --threads 2 --repeat "$n")
    p_sps=$(echo "$p_json" | $PY -c "import json,sys; print(json.load(sys.stdin)['samples_per_s'])")
    p_runs=$(echo "$p_json" | $PY -c "import json,sys; print(','.join(str(x) for x in json.load(sys.stdin)['runs_samples_per_s']))")
    p_auc=$(auc "$DIR/torch-$m.pred")
    results=$($PY -c "import json; r=json.loads('$results'); r.append({'model':'$m','ctrbox_samples_per_s':$c_sps,'torch_samples_per_s':$p_sps,'ctrbox_runs':[$c_runs],'torch_runs':[$p_runs],'ctrbox_test_auc':$c_auc,'torch_test_auc':$p_auc}); print(json.dumps(r))")
done
$PY - "$DIR/train$tag.json" <<PY
import json, sys
r = {"rows": $ROWS, "test_rows": $TEST_ROWS, "oracle_test_auc": $oracle, "openblas_coretype": "$OPENBLAS_CORETYPE",
     "cpu": "$cpu", "ctrbox_kernels": "$c_kernels", "torch_kernels": "$t_kernels",
     "models": json.loads('$results'), "mlp": json.loads('$mlp')}
json.dump(r, open(sys.argv[1], "w"), indent=2)
targets = {"deepfm": 2.5, "fm": 3.0, "lr": 2.0}   # DeepFM: issue 17, on every x86
print(f"training benchmark, {r['rows']:,} rows, one epoch, batch 4096, dim 16, Adam 1e-3 (oracle test AUC {r['oracle_test_auc']:.4f})")
print(f"  cpu: {r['cpu']}\n  ctrbox: {r['ctrbox_kernels']}\n  torch: {r['torch_kernels']}")
for m in r["models"]:
    x = m["ctrbox_samples_per_s"] / m["torch_samples_per_s"]
    print(f"  {m['model']:7s} ctrbox {m['ctrbox_samples_per_s']:>10,.0f} samples/s  torch {m['torch_samples_per_s']:>10,.0f}"
          f"  -> {x:.2f}x (target {targets.get(m['model'], 0):g}x)   test AUC ctrbox {m['ctrbox_test_auc']:.4f} torch {m['torch_test_auc']:.4f}"
          f" (diff {m['ctrbox_test_auc'] - m['torch_test_auc']:+.4f})")
    if len(m["ctrbox_runs"]) > 1:
        print(f"          median of {len(m['ctrbox_runs'])} runs each: ctrbox " + " ".join(f"{x:,.0f}" for x in m["ctrbox_runs"])
              + "   torch " + " ".join(f"{x:,.0f}" for x in m["torch_runs"]))
mlp = r["mlp"]
print(f"  MLP {mlp['shape']} at batch {mlp['batch']}: {mlp['mlp_gflops']:.0f} GFLOP/s vs cblas_sgemm {mlp['sgemm_gflops']:.0f} on the same shapes -> {mlp['ratio']*100:.0f}% (target 60%)")
print(f"  results: {sys.argv[1]}")
PY
