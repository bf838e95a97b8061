#!/usr/bin/env bash
# The MPI code against MPICH (issue 16: the standard's calls only, so that MPICH works as Open MPI
# does): builds ctrbox with MPICH into build-mpich/ and bin-mpich/, then checks with MPICH's
# mpiexec that 1, 2 and 3 processes write the model file one plain process writes with the same
# --lanes (batch norm, dropout and admission on), that a table folder per rank at a tiny budget
# gives that model's predictions, and that eval under mpiexec prints one process's metrics.
# Installs mpich and libmpich-dev if missing, keeping Open MPI's mpirun the default (the test suite
# runs it). usage: tests/mpich.sh   (make check-mpich)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh mpich
for alt in mpirun mpi; do   # MPICH's install may take the names over: Open MPI's stays the default
    best=$(update-alternatives --list "$alt" 2>/dev/null | grep openmpi | head -1 || true)
    [ -n "$best" ] && [ "$(id -u)" -eq 0 ] && update-alternatives --set "$alt" "$best" >/dev/null
done
make --no-print-directory BUILD=build-mpich BIN=bin-mpich MPI_PC=mpich bin-mpich/ctrbox bin-mpich/ctrbox-data >/dev/null
ldd bin-mpich/ctrbox | grep -q libmpich || { echo "mpich.sh: bin-mpich/ctrbox is not linked with MPICH" >&2; exit 1; }
B=$(pwd)/bin-mpich
W=$(mktemp -d /tmp/ctrbox-mpich.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
"$B/ctrbox-data" gen --rows 9000 --seed 3 --keys 0.004 --out tr.tsv
"$B/ctrbox-data" gen --rows 3000 --seed 3 --keys 0.004 --offset 9000 --out va.tsv
run="$B/ctrbox train --format criteo --train tr.tsv --valid va.tsv --threads 1 --quiet --lanes 6 --model deepfm --dim 4
     --hidden 16,8 --batch 300 --epochs 2 --batchnorm --dropout 0.1 --min-show 3 --shuffle-rows 2000"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
$run --out plain 2>/dev/null
fail=0
for np in 1 2 3; do
    timeout 600 mpiexec.mpich -np $np $run --out np$np 2>/dev/null
    if cmp -s plain/model.ctrbox np$np/model.ctrbox; then echo "MPICH, $np processes: the plain process's model file"
    else echo "MPICH, $np processes: the model file DIFFERS from the plain process's"; fail=1; fi
done
timeout 600 mpiexec.mpich -np 2 $run --table-dir td --cache-mb 0.05 --out tier 2>/dev/null
"$B/ctrbox" predict --model plain --data va.tsv --out plain.pred 2>/dev/null
timeout 600 mpiexec.mpich -np 2 "$B/ctrbox" predict --model tier --data va.tsv --out tier.pred 2>/dev/null
if cmp -s plain.pred tier.pred; then echo "MPICH, 2 processes, a table folder per rank: the in-memory model's predictions"
else echo "MPICH, 2 processes, a table folder per rank: predictions DIFFER"; fail=1; fi
a=$("$B/ctrbox" eval --model plain --data va.tsv 2>&1 | tail -1)
b=$(timeout 600 mpiexec.mpich -np 3 "$B/ctrbox" eval --model plain --data va.tsv 2>&1 | tail -1)
if [ "$a" = "$b" ]; then echo "MPICH, eval on 3 processes: $b"
else echo "MPICH, eval on 3 processes: '$b', one process: '$a'"; fail=1; fi
exit $fail
