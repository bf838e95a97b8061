#!/usr/bin/env bash
# Several processes on this machine (issue 16): DeepFM (dim 16, MLP 400x3, batch 4096, one epoch in
# file order) on ROWS generated rows, trained
#   one:    by one process batch by batch, --threads 2 (the reference every other mode is held to)
#   lanes1: mpirun -np 1 --threads 2 --lanes 12 (the lanes' arithmetic on one process)
#   lanes2: mpirun -np 2 --threads 1 --lanes 12 (two processes, one core each)
#   text1, text2: lanes1 and lanes2 on the same rows as a criteo text file (each rank reads only
#           its pieces of the file and sends the rows to their lanes' ranks: the text's ratio
#           should be the cbx one's)
# and prints samples/s of each (the epoch's training, from log.jsonl), the ratios, and per step the
# seconds the slowest rank spent in MPI calls and the bytes all ranks sent each other, with the
# distinct keys asked per step (the parts of the bytes: see docs/performance.md). Results in
# $BENCH_DIR/mpi.json. Env: ROWS (1000000), BENCH_DIR (build/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
DIR=${BENCH_DIR:-build/bench}
PY=/usr/bin/python3
mkdir -p "$DIR"
tr="$DIR/train-$ROWS.tsv"
[ -f "$tr" ] || bin/ctrbox-data gen --rows "$ROWS" --seed 1 --out "$tr"
[ -f "$tr.cbx" ] || bin/ctrbox-data convert --format criteo --in "$tr" --out "$tr.cbx" 2>/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--model deepfm --format criteo --epochs 1 --batch 4096 --dim 16 --hidden 400,400,400 --lr 0.001
      --shuffle-rows 0 --quiet)
run() {   # name, launcher..., -- ctrbox options
    local name=$1; shift
    local pre=()
    while [ "$1" != -- ]; do pre+=("$1"); shift; done
    shift
    rm -rf "$DIR/mpi-$name"
    "${pre[@]}" bin/ctrbox train "${args[@]}" --out "$DIR/mpi-$name" "$@" 2>&1 | tail -1 >&2
}
run one env -- --train "$tr.cbx" --threads 2
run lanes1 mpirun --oversubscribe -np 1 -- --train "$tr.cbx" --threads 2 --lanes 12
run lanes2 mpirun --oversubscribe -np 2 --bind-to core -- --train "$tr.cbx" --threads 1 --lanes 12
run text1 mpirun --oversubscribe -np 1 -- --train "$tr" --threads 2 --lanes 12
run text2 mpirun --oversubscribe -np 2 --bind-to core -- --train "$tr" --threads 1 --lanes 12
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
$PY - "$DIR" "$ROWS" "$cpu" <<'EOF'
import json, sys
d, rows, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def lines(name):
    return [json.loads(l) for l in open(f"{d}/mpi-{name}/log.jsonl")]
one = [l for l in lines("one") if l["kind"] == "epoch"][-1]["train_samples_per_s"]
res = {"rows": rows, "cpu": cpu, "one_process_samples_per_s": one}
for name in ("lanes1", "lanes2", "text1", "text2"):
    l = [x for x in lines(name) if x["kind"] == "lanes"][-1]
    steps = l["steps"]
    res[name] = {"ranks": l["ranks"], "lanes": l["lanes"], "samples_per_s": l["samples_per_s"],
                 "mpi_s_per_step": l["exchange_s"] / steps, "bytes_per_step": l["exchange_bytes"] / steps,
                 "keys_asked_per_step": l["keys_asked"] / steps, "dense_params": l["dense_params"],
                 "train_loss": l["train_loss"], "records": l["records"], "own_rows_max": l["own_rows_max"],
                 "own_bytes_max": l["own_bytes_max"], "input_exchange_s": l["input_exchange_s"],
                 "input_bytes": l["input_bytes"], "seconds": l["seconds"]}
res["np2_over_np1"] = res["lanes2"]["samples_per_s"] / res["lanes1"]["samples_per_s"]
res["np2_over_one_process"] = res["lanes2"]["samples_per_s"] / one
res["text_np2_over_np1"] = res["text2"]["samples_per_s"] / res["text1"]["samples_per_s"]
json.dump(res, open(f"{d}/mpi.json", "w"), indent=1)
print(f"DeepFM, {rows} rows, {cpu}")
print(f"  one process, batch by batch, --threads 2: {one:.0f} samples/s")
for name in ("lanes1", "lanes2"):
    r = res[name]
    print(f"  {r['ranks']} process(es) x --threads {3 - r['ranks']}, 12 lanes: {r['samples_per_s']:.0f} samples/s; per step "
          f"{r['mpi_s_per_step'] * 1000:.1f} ms in MPI, {r['bytes_per_step'] / 1e6:.2f} MB sent between ranks, "
          f"{r['keys_asked_per_step']:.0f} keys asked")
print(f"  -np 2 --threads 1 / -np 1 --threads 2: {res['np2_over_np1']:.3f}; / one process batch by batch: "
      f"{res['np2_over_one_process']:.3f}")
for name in ("text1", "text2"):
    r = res[name]
    print(f"  text input, {r['ranks']} process(es): {r['samples_per_s']:.0f} samples/s, the most rows one rank parsed "
          f"{r['own_rows_max']:.0f} of {r['records']}, the most bytes one read {r['own_bytes_max'] / 1e6:.1f} MB; rows "
          f"sent to their lanes' ranks {r['input_bytes'] / 1e6:.1f} MB in {r['input_exchange_s']:.2f} s of MPI")
print(f"  text input: -np 2 / -np 1: {res['text_np2_over_np1']:.3f}")

# Beyond this machine, on paper (docs/performance.md): a node is one rank as measured here (one
# core), training b = B/2 rows a step (weak scaling: the global batch grows with the nodes). Per
# step and node: compute t_c (the step's time less its MPI time, measured with 2 ranks); sparse
# bytes k * (8 + 4V + 8(2 + V)) * (N-1)/N (k distinct keys asked, V = dim + 1 floats a row: the
# key, its row, its fixed-point gradient with shows and clicks), dense 2 (N-1)/N * 8P (a ring
# allreduce of P int64); plus alpha = 5 us for each of 5 (N-1) messages. Throughput
# N * b / (t_c + t_comm) without overlap.
r = res["lanes2"]
b = 4096 / r["ranks"]
step = 4096 / r["samples_per_s"]
t_c = step - r["mpi_s_per_step"]
k = r["keys_asked_per_step"] / r["ranks"]
P = r["dense_params"]
V = 16 + 1
per_key = 8 + 4 * V + 8 * (2 + V)
rows = []
print(f"  on paper: per node and step b={b:.0f} rows, t_c={t_c * 1000:.1f} ms, k={k:.0f} keys x {per_key} B, P={P} dense")
for link in (25, 100):
    bw = link / 8 * 1e9
    for N in (4, 16, 64):
        bytes_ = (N - 1) / N * (k * per_key + 2 * 8 * P)
        t_comm = bytes_ / bw + 5e-6 * 5 * (N - 1)
        thr = N * b / (t_c + t_comm)
        rows.append({"link_gbps": link, "nodes": N, "bytes_per_step": bytes_, "t_comm_ms": t_comm * 1000,
                     "samples_per_s": thr, "efficiency": t_c / (t_c + t_comm)})
        print(f"    {link:3d} Gb/s, {N:2d} nodes: {bytes_ / 1e6:.2f} MB a step, comm {t_comm * 1000:.2f} ms, "
              f"{thr:.0f} samples/s, efficiency {t_c / (t_c + t_comm):.3f}")
res["on_paper"] = rows
json.dump(res, open(f"{d}/mpi.json", "w"), indent=1)
EOF
