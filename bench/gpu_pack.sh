#!/usr/bin/env bash
# Prepare a GPU machine's run from this one. The lent GPU machines fetch nothing (no apt, no network)
# and their image has CUDA and PyTorch but not the project's libraries (RocksDB, OpenBLAS, liburing,
# Criterion, ...). So build here, CUDA backend included (nvcc is installed here), and put the shared
# libraries the programs need, besides the C library and CUDA's own, into .gpu/lib.tar.gz; the
# device tool carries bin/ and .gpu/ (both ignored by git), and bench/gpu.sh, run there with
# PREBUILT=1, unpacks the libraries and runs the built programs.
# Usage: bash bench/gpu_pack.sh; then on the device: PREBUILT=1 bash bench/gpu.sh (see its header),
# with carry ["bin", ".gpu"].
set -euo pipefail
cd "$(dirname "$0")/.."
make -j"$(nproc)" CUDA=1 all bin/ctrbox-tests >/dev/null
rm -rf .gpu && mkdir -p .gpu/lib
# every library the programs load, less glibc's and CUDA's (the machine's own match its driver)
for b in bin/ctrbox bin/ctrbox-data bin/ctrbox-table bin/ctrbox-tests bin/libctrbox_cuda.so; do
    ldd "$b" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libresolv)\.so|/libcu(blas|blasLt|dart)\.so' |
    while read -r lib; do cp -L "$lib" .gpu/lib/; done
tar -C .gpu -czf .gpu/lib.tar.gz lib   # gzip: every image unpacks it
rm -rf .gpu/lib
echo "packed: bin/ ($(du -sh bin | cut -f1)), .gpu/lib.tar.gz ($(du -h .gpu/lib.tar.gz | cut -f1)); carry [\"bin\", \".gpu\"]"
