#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one go (issue 19's checks):
#  1. the GPU tests: every kernel against its CPU twin (tests/test_gpu.c), the gradient checks of
#     every model with its layers on the GPU, placed training against CPU training, and the largest
#     difference of predictions with the rows in GPU memory (placement::real_gpu_*, printed);
#  2. the planner's profile of DeepFM and DLRM on this machine (ctrbox plan --save-profile), to
#     commit as docs/profiles/ so that CPU-only machines can plan for it;
#  3. DeepFM and DLRM trained with the whole model on the GPU and the pass's rows in its memory
#     (--placement gpu) and with the planner's choice (--placement auto), against PyTorch eager on
#     the same GPU with the whole table in GPU memory (bench/peer_torch.py --device cuda), at batch
#     4096 and 16384 on the same generated data: samples/s and test AUC of both sides;
#  4. the pass tier's copies (the gpu_rows lines of each run's log: bytes over the seconds of the
#     copies a batch waited for, and the time spent waiting for those sent ahead) against the link
#     ctrbox plan measured.
# Results: $RESULTS (default $OUT where the device tool sets it, else $BENCH_DIR): gpu.json, the
# profiles, tests.log.
# Env: ROWS (1000000), TEST_ROWS (100000), BATCHES ("4096 16384"), MODELS ("deepfm dlrm"), PASS_ROWS
# (250000: ctrbox trains in passes, each shuffled; 0: one streamed pass in file order),
# BENCH_DIR (build/bench-gpu), PY (python3 with torch and CUDA), SKIP_TESTS=1, TORCH_DEVICE (cuda),
# PREBUILT=1 (the lent GPU machines: no package manager, no network; run bench/gpu_pack.sh here
# first and carry ["bin", ".gpu"]: the programs built here and the libraries they load).
# A dry run on a CPU-only machine: CTRBOX_GPU_SIM=1 TORCH_DEVICE=cpu ROWS=20000 TEST_ROWS=5000 \
#   BATCHES=4096 PY=/usr/bin/python3 bash bench/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
TEST_ROWS=${TEST_ROWS:-100000}
BATCHES=${BATCHES:-4096 16384}
MODELS=${MODELS:-deepfm dlrm}
DIR=${BENCH_DIR:-build/bench-gpu}
RESULTS=${RESULTS:-${OUT:-$DIR}}
PY=${PY:-python3}
JOBS=$(nproc)
mkdir -p "$DIR" "$RESULTS"

LIBS=
if [ "${PREBUILT:-0}" = 1 ]; then
    [ -x bin/ctrbox ] && [ -x bin/ctrbox-tests ] && [ -f .gpu/lib.tar.gz ] ||
        { echo "PREBUILT=1 wants bin/ and .gpu/lib.tar.gz: run bash bench/gpu_pack.sh where the project builds"; exit 1; }
    mkdir -p "$DIR/prebuilt" && tar -C "$DIR/prebuilt" -xzf .gpu/lib.tar.gz
    LIBS=$(cd "$DIR/prebuilt/lib" && pwd)
    # the machine's CUDA libraries (cuBLAS, the runtime), where its toolkit or its Python packages keep them
    for f in $(find /usr/local /opt /usr/lib -name 'libcublas.so.13' -o -name 'libcudart.so.13' 2>/dev/null | head -4); do
        LIBS="$LIBS:$(dirname "$f")"
    done
fi
# the programs with the libraries they were built against (PREBUILT), python without them
ct() { if [ -n "$LIBS" ]; then LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; else "$@"; fi; }

echo "== devices"
nvidia-smi -L || echo "nvidia-smi: not found"
if [ -z "$LIBS" ]; then
    missing=
    for p in liburing libzstd zlib jansson criterion openblas inih rocksdb libxxhash; do
        pkg-config --exists "$p" 2>/dev/null || missing="$missing $p"
    done
    [ -z "$missing" ] || echo "warning: pkg-config does not know:$missing (the build may fail; make deps installs them)"
    echo "== build (CUDA=1)"
    make -j"$JOBS" CUDA=1 all bin/ctrbox-tests >"$DIR/build.log" 2>&1 || { tail -30 "$DIR/build.log"; exit 1; }
fi
ct bin/ctrbox devices

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "== GPU tests"
    : >"$RESULTS/tests.log"
    for f in '@(gpu|placement)/*' 'model/gradient_check_on_gpu'; do
        CTRBOX_BIN="$PWD/bin" ct bin/ctrbox-tests --verbose --jobs "$JOBS" --filter "$f" 2>&1 |
            grep -v 'Test is disabled' | grep -E '^\[(PASS|FAIL|SKIP|----)\]|Synthesis|largest' | tee -a "$RESULTS/tests.log" || true
    done
fi

echo "== data ($ROWS rows, test $TEST_ROWS)"
tr="$DIR/train-$ROWS.tsv"; te="$DIR/test-$ROWS.tsv"
[ -f "$tr" ] || ct bin/ctrbox-data gen --rows "$ROWS" --seed 1 --out "$tr"
[ -f "$te" ] || ct bin/ctrbox-data gen --rows "$TEST_ROWS" --seed 1 --offset "$ROWS" --out "$te" --truth "$te.truth"

auc() { ct bin/ctrbox eval --scores "$1" --json | $PY -c "import json,sys; print(json.load(sys.stdin)['auc'])"; }
model_flags() {   # the same sizes on both sides
    case "$1" in
    deepfm) echo "--dim 16 --hidden 400,400,400" ;;
    dlrm) echo "--dim 16 --hidden 512,256 --bottom 512,256,16" ;;
    esac
}
rows="[]"
link=0
pass_opt=$([ "${PASS_ROWS:-250000}" != 0 ] && echo "--pass-rows ${PASS_ROWS:-250000}" || true)   # passes: the next one's rows go up ahead
for m in $MODELS; do
    flags=$(model_flags "$m")
    echo "== plan $m"
    plan=$(ct bin/ctrbox plan --model "$m" $flags --batch 4096 --save-profile "$RESULTS/profile-$m.json")
    echo "$plan" | tail -22
    link=$(echo "$plan" | sed -n 's/^  link \([0-9.]*\) GB\/s.*/\1/p' | head -1)
    link=${link:-0}
    for b in $BATCHES; do
        for placement in gpu auto; do
            out="$DIR/ctrbox-$m-$b-$placement"
            rm -rf "$out"
            ct bin/ctrbox train --model "$m" $flags --train "$tr" --valid "$te" --format criteo --out "$out" --epochs 1 \
                --batch "$b" --lr 0.001 --shuffle-rows 0 $pass_opt --threads "$JOBS" --placement "$placement" --quiet
            sps=$($PY -c "import json; print([json.loads(l) for l in open('$out/log.jsonl') if '\"epoch\"' in l and 'train_samples_per_s' in l][-1]['train_samples_per_s'])")
            # the pass tier's copies, when it ran: bytes over the seconds spent staging and copying them
            tier=$($PY - "$out/log.jsonl" <<'PY'
import json, sys
g = [json.loads(l) for l in open(sys.argv[1]) if '"gpu_rows"' in l]
if not g:
    print("null")
else:
    x = g[-1]
    waited = x["upload_bytes"] - x["prefetch_bytes"]   # the uploads a batch waited for, timed alone
    up = waited / x["upload_s"] / 1e9 if x["upload_s"] > 0 else 0
    down = x["download_bytes"] / x["download_s"] / 1e9 if x["download_s"] > 0 else 0
    print(json.dumps({"uploaded_rows": x["uploaded_rows"], "prefetched_rows": x["prefetched_rows"],
                      "upload_gb_per_s": round(up, 3), "download_gb_per_s": round(down, 3), "row_bytes": x["row_bytes"],
                      "prefetch_wait_s": x["prefetch_wait_s"], "stage_s": x["stage_s"], "refills": x["refills"]}))
PY
)
            ct bin/ctrbox eval --model "$out" --data "$te" --format criteo --pred-out "$out/test.pred" >/dev/null
            a=$(auc "$out/test.pred")
            rows=$($PY -c "import json,sys; r=json.loads(sys.argv[1]); r.append({'side':'ctrbox --placement $placement','model':'$m','batch':$b,'samples_per_s':$sps,'test_auc':$a,'pass_tier':json.loads(sys.argv[2]),'link_gb_per_s':$link}); print(json.dumps(r))" "$rows" "$tier")
        done
        p_json=$($PY bench/peer_torch.py --model "$m" $flags --train "$tr" --test "$te" --pred-out "$DIR/torch-$m-$b.pred" \
            --batch "$b" --lr 0.001 --threads "$JOBS" --device "${TORCH_DEVICE:-cuda}")
        sps=$(echo "$p_json" | $PY -c "import json,sys; print(json.load(sys.stdin)['samples_per_s'])")
        a=$(auc "$DIR/torch-$m-$b.pred")
        rows=$($PY -c "import json,sys; r=json.loads(sys.argv[1]); r.append({'side':'torch ${TORCH_DEVICE:-cuda}','model':'$m','batch':$b,'samples_per_s':$sps,'test_auc':$a}); print(json.dumps(r))" "$rows")
    done
done
$PY - "$RESULTS/gpu.json" "$rows" <<'PY'
import json, sys
rows = json.loads(sys.argv[2])
json.dump(rows, open(sys.argv[1], "w"), indent=2)
print("GPU training benchmark (one epoch, Adam 1e-3): ctrbox against torch eager on the same device")
for r in rows:
    if r["side"].startswith("torch"):
        continue
    t = next(x for x in rows if x["side"].startswith("torch") and x["model"] == r["model"] and x["batch"] == r["batch"])
    print(f"  {r['model']:7s} batch {r['batch']:6d} {r['side']:26s} {r['samples_per_s']:>12,.0f} samples/s"
          f"  torch {t['samples_per_s']:>12,.0f}  -> {r['samples_per_s'] / t['samples_per_s']:.2f}x"
          f"   AUC {r['test_auc']:.4f} vs {t['test_auc']:.4f} ({r['test_auc'] - t['test_auc']:+.4f})")
    p = r.get("pass_tier")
    if p:
        print(f"      pass tier: {p['uploaded_rows']:,} rows up ({p['prefetched_rows']:,} sent ahead, waited for them "
              f"{p['prefetch_wait_s']:.3f} s); copies {p['upload_gb_per_s']:.2f} GB/s up, {p['download_gb_per_s']:.2f} GB/s "
              f"down against the link's {r['link_gb_per_s']} GB/s; {p['stage_s']:.2f} s packing rows on the host; "
              f"refills {p['refills']}")
print(f"  results: {sys.argv[1]}")
PY
