#!/usr/bin/env bash
# Install the Debian packages ctrbox needs, only those missing (idempotent; runs apt-get update
# once, only when something must be installed). Usage: install-deps.sh [extra-group ...]
# chromium (headless) renders `ctrbox report` pages in the tests. Groups beyond the base: fuzz (clang, libFuzzer runtime), bench (fio, zstd, gzip), torture (zstd,
# gzip, util-linux's unshare), mpich (MPICH beside Open MPI: make check-mpich).
set -euo pipefail

pkgs=(gcc make pkg-config liburing-dev libxxhash-dev libzstd-dev zlib1g-dev libjansson-dev
      libcriterion-dev libopenblas-dev libinih-dev librocksdb-dev python3-numpy chromium
      libopenmpi-dev openmpi-bin)
for group in "$@"; do
    case "$group" in
        fuzz) pkgs+=(clang libclang-rt-dev) ;;
        bench) pkgs+=(fio zstd gzip coreutils time python3-torch python3-numpy) ;;
        torture) pkgs+=(zstd gzip util-linux coreutils) ;;
        mpich) pkgs+=(mpich libmpich-dev) ;;
        *) echo "install-deps.sh: unknown group '$group'" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
