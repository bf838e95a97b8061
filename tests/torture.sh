#!/usr/bin/env bash
# The robustness harness (issue 13; `make torture`, not part of `make test`). Four loops, each a
# count of seeded trials; a trial that fails prints "FAIL <loop> seed=<S>: why", and
# `tests/torture.sh <loop> 1 <S>` runs that trial again alone.
#   kill     a training run with a random combination of the options that touch state (model,
#            admission, shrink, decay, a table per field, evaluation every N steps, pass size,
#            cache budget and policy, epochs, threads; a third of the runs with the whole model on
#            the simulated GPU and the rows in its memory) is killed -9 at random moments, resumed
#            each time, and must end with the model and table rows of the uninterrupted run, byte for
#            byte (predictions, and every row with its counters and optimizer state).
#   corrupt  one file of a random kind (text log, cbx, model file, tiered model file, slot file,
#            commit record, RocksDB's SSTs, MANIFEST, CURRENT, log, serving bundle, quantized rows,
#            npy export, placement profile, config) gets random damage (bytes flipped, cut, zeroed,
#            garbage appended); the command that reads it must give the undamaged result or exit 1
#            with a message, never crash, hang or give another result.
#   disk     tiered training (random options) on a tmpfs of a random size (1 to 40 MB, in a mount
#            namespace of its own: needs root); the run succeeds or exits 1 cleanly, then with room
#            again --resume ends with the uninterrupted model. Model, export and bundle writes on a
#            full disk exit 1 and leave no partial output.
#   memory   a random command under a random address-space limit (ulimit -v, 100 MB to 1.5 GB),
#            in half the trials with larger stacks (ulimit -s 64 or 293 MB), in a quarter as
#            another user with few processes (ulimit -u 6 to 40), in half with every thread
#            started late (tests/late_threads.c):
#            success, or exit 1 with one line; never a hang or an abort.
#   follow   `train --follow` with random options (model, admission, shrink, decay, pass size,
#            epochs, in memory or a table folder at a random budget, progressive validation, an
#            export folder, a third on the simulated GPU with the rows in its memory) over files that arrive between runs (renamed into place, done-files,
#            a folder with _SUCCESS), killed -9 at random moments and started again: it must end
#            with the ledger, model and rows of one uninterrupted run over the final folder, and
#            the export folder's base plus deltas must predict as a full bundle of that model.
# Usage: tests/torture.sh [LOOPS] [COUNT] [SEED]   (LOOPS: "kill corrupt disk memory follow" or a subset,
#        COUNT trials per loop (default 20), SEED of the first (default: from the clock, printed).
# Env: TORTURE_DIR (default /tmp/ctrbox-torture), B (the programs' folder, default bin).
set -uo pipefail
cd "$(dirname "$0")/.."
LOOPS=${1:-"kill corrupt disk memory follow"}
COUNT=${2:-20}
SEED=${3:-$(date +%s)}
B=$(cd "${B:-bin}" && pwd)
W=${TORTURE_DIR:-/tmp/ctrbox-torture}
rm -rf "$W"
mkdir -p "$W"
cd "$W" || exit 1
echo "torture: loops '$LOOPS', $COUNT trials each, seeds from $SEED, in $W"

fails=0
declare -A ran failed
fail() { echo "FAIL $1 seed=$2: $3"; fails=$((fails + 1)); failed[$1]=$((${failed[$1]:-0} + 1)); }
# A trial's choices follow from its seed: $(pick ...) runs in a subshell, where bash 5.2 reseeds
# RANDOM, so a pick hashes the seed with the count of picks before it, kept in a file (a subshell
# cannot change its caller's variables)
seed_trial() { RANDOM=$1; PICK_SEED=$1; echo 0 > "$W/.picks"; }
pick() {
    local a=("$@") n h
    n=$(<"$W/.picks")
    echo $((n + 1)) > "$W/.picks"
    h=$(( (PICK_SEED * 1000003 + n) & 0xffffffff ))
    h=$(( ((h ^ (h >> 16)) * 73244475) & 0xffffffff ))
    h=$(( ((h ^ (h >> 16)) * 73244475) & 0xffffffff ))
    echo "${a[(h ^ (h >> 16)) % ${#a[@]}]}"
}
ms() { date +%s%3N; }
say() { [ -n "${TORTURE_VERBOSE:-}" ] && echo "  $*"; return 0; }

# user 65534, for limits root is exempt from (ulimit -u), where it can run the programs here
AS_OTHER="setpriv --reuid=65534 --regid=65534 --clear-groups"
chmod a+rwx "$W"
[ "$(id -u)" = 0 ] && $AS_OTHER "$B/ctrbox" --version > /dev/null 2>&1 || AS_OTHER=

$B/ctrbox-data gen --rows 12000 --seed 5 --keys 0.002 --out tr.tsv &&
    $B/ctrbox-data gen --rows 30000 --seed 6 --keys 0.005 --out trk.tsv &&
    $B/ctrbox-data gen --rows 3000 --seed 5 --keys 0.002 --offset 12000 --out va.tsv || exit 1

# ---- kill ----
kill_trial() {
    local s=$1 d="$W/kill.$1"
    seed_trial $s
    rm -rf "$d" && mkdir -p "$d" && cd "$d" || return
    local model=$(pick lr fm deepfm dcnv2 deepfm) opts
    opts="--model $model --format criteo --train ../trk.tsv --dim 4 --hidden 16,16 --cross 1 --batch 256"
    opts+=" --epochs $(pick 1 2 3) --pass-rows $(pick 1500 3000 5000 8000) --cache-mb $(pick 0.02 0.1 1)"
    opts+=" --cache-policy $(pick lfu lru) --threads $(pick 1 2) --seed $((RANDOM % 100))"
    opts+=" $(pick '' '--min-show 2' '--min-show 3') $(pick '' '--shrink-threshold 0.5' '--shrink-threshold 0.3')"
    opts+=" $(pick '' '' '--shrink-unseen 3') $(pick '' '--decay 0.9') $(pick '' '--table-per-field')"
    opts+=" $(pick '' '--valid ../va.tsv' '--valid ../va.tsv --eval-every 7')"
    local G="CTRBOX_GPU_SIM=$(pick 0 0 1)"   # 1: the whole model on the simulated GPU, the rows in its memory
    [ "$G" = CTRBOX_GPU_SIM=1 ] && opts+=" --placement gpu --gpu-mem-mb $(pick 1 4)"
    local t0=$(ms)
    if ! timeout 300 env $G $B/ctrbox train $opts --quiet --out ref --table-dir tref >ref.log 2>&1; then
        fail kill $s "the reference run failed ($opts): $(tail -1 ref.log)"; cd "$W"; return
    fi
    local run_ms=$(($(ms) - t0 + 1)) kills=0 k
    for k in 1 2 3 4; do   # killed up to four times, at random moments of what a run takes
        local at=$((RANDOM % (run_ms + 50)))
        env $G $B/ctrbox train $opts --quiet --out res --resume tres >res.log 2>&1 &   # (the kill below bounds it)
        local p=$!
        sleep "$((at / 1000)).$(printf %03d $((at % 1000)))"
        kill -9 $p 2>/dev/null
        wait $p 2>/dev/null
        [ $? -eq 137 ] && kills=$((kills + 1))
    done
    if ! timeout 300 env $G $B/ctrbox train $opts --quiet --out res --resume tres >res.log 2>&1; then
        fail kill $s "the last resume failed ($opts): $(tail -1 res.log)"; cd "$W"; return
    fi
    $B/ctrbox predict --model ref --data ../va.tsv --out p_ref.txt 2>/dev/null
    $B/ctrbox predict --model res --data ../va.tsv --out p_res.txt 2>/dev/null
    local tables=$($B/ctrbox-table inspect tref --json 2>/dev/null | grep -o '"table": [0-9]*' | wc -l) tb
    for ((tb = 0; tb < (tables > 0 ? tables : 1); tb++)); do
        $B/ctrbox-table export tref --table $tb --to text --with-optimizer e_ref$tb.tsv 2>/dev/null
        $B/ctrbox-table export tres --table $tb --to text --with-optimizer e_res$tb.tsv 2>/dev/null
        sort e_ref$tb.tsv > s_ref$tb && sort e_res$tb.tsv > s_res$tb
        cmp -s s_ref$tb s_res$tb || { fail kill $s "table $tb's rows differ after $kills kills ($opts)"; cd "$W"; return; }
    done
    if ! cmp -s p_ref.txt p_res.txt || [ ! -s p_ref.txt ]; then
        fail kill $s "predictions differ after $kills kills ($opts)"; cd "$W"; return
    fi
    # and the same model with every row in memory (the tier moves rows, never changes them); with
    # --valid the in-memory run keeps its best epoch, a tiered one its last commit: compared without
    if [[ $opts != *--valid* ]]; then
        timeout 300 env $G $B/ctrbox train $opts --quiet --out mem >mem.log 2>&1 &&
            $B/ctrbox predict --model mem --data ../va.tsv --out p_mem.txt 2>/dev/null
        cmp -s p_ref.txt p_mem.txt || { fail kill $s "the tier's model differs from the in-memory one ($opts)"; cd "$W"; return; }
    fi
    say "kill $s: $kills kills in a run of $run_ms ms, $tables table(s), same rows: $opts"
    cd "$W" && rm -rf "$d"
}

# ---- corrupt ----
# Artifacts of every kind, made once; each trial damages a copy of one and runs its reader.
corrupt_setup() {
    mkdir -p c0 && cd c0 || return 1
    local R="$B/ctrbox train --model deepfm --format criteo --dim 4 --hidden 16,16 --batch 256 --threads 1 --quiet"
    cp ../tr.tsv log.tsv && head -2000 ../va.tsv > data.tsv && gzip -k log.tsv && zstd -q log.tsv &&
        $B/ctrbox-data convert --format criteo --in data.tsv --out data.cbx 2>/dev/null &&
        $R --train ../tr.tsv --epochs 1 --out mem &&
        $R --train ../tr.tsv --epochs 1 --out tier --pass-rows 4000 --table-dir tab --cache-mb 0.05 2>/dev/null &&
        $B/ctrbox export-serving --model mem --out b.bundle >/dev/null &&
        $R --train data.tsv --epochs 1 --out mem2 --init mem && $B/ctrbox export-serving --model mem2 --since mem --out d.bundle >/dev/null &&
        mkdir fin && cp data.tsv fin/a.tsv && $R --follow fin --follow-idle 0 --epochs 1 --out fol --export-dir ex &&
        $B/ctrbox-table export mem --to npy npy 2>/dev/null && $B/ctrbox-table export mem --to hugectr hc 2>/dev/null &&
        $B/ctrbox plan --model deepfm --dim 4 --hidden 16,16 --batch 256 --reps 1 --save-profile prof.json >/dev/null &&
        printf 'model = lr\nformat = criteo\ntrain = data.tsv\nepochs = 1\nquiet = 1\n' > c.ini || return 1
    cd ..
}

# inspect's first line gives the folder's size on disk, which a damaged file changes (a cut
# OPTIONS file turned "2.1 MB" into "2.0 MB": "another result" where the rows were the same)
ON_DISK="sed -E 's/[0-9.]+ [KMGT]?B on disk/(size) on disk/'"

# "strict|file to damage|command that reads it" (run in the trial's copy). strict: the file has
# checksums, so the command gives the undamaged output or exits 1; otherwise (text logs, npy, INI,
# whose damage can be valid data) it must only end cleanly.
corrupt_kinds=(
    "0|log.tsv|$B/ctrbox-data inspect --format criteo log.tsv"
    "1|log.tsv.gz|$B/ctrbox-data inspect --format criteo log.tsv.gz"
    "1|log.tsv.zst|$B/ctrbox-data inspect --format criteo log.tsv.zst"
    "0|hc/key|$B/ctrbox-table import --from hugectr hc imp --dim 4 --w 1 --opt adam"
    "0|hc/emb_vector|$B/ctrbox-table import --from hugectr hc imp --dim 4 --w 1 --opt adam"
    "1|data.cbx|$B/ctrbox predict --model mem --data data.cbx --out out.txt && cat out.txt"
    "1|mem/model.ctrbox|$B/ctrbox predict --model mem --data data.tsv --out out.txt && cat out.txt"
    "1|tier/model.ctrbox|$B/ctrbox predict --model tier --data data.tsv --out out.txt && cat out.txt"
    "1|tab/table0.slots|$B/ctrbox predict --model tier --data data.tsv --out out.txt && cat out.txt"
    "1|tab/table0.slots|$B/ctrbox-table export tab --to text out.txt --force && cat out.txt"
    "1|tab/COMMIT.ctrbox|set -o pipefail; $B/ctrbox-table inspect tab | $ON_DISK"
    "1|tab/index/*.sst|$B/ctrbox predict --model tier --data data.tsv --out out.txt && cat out.txt"
    "1|tab/index/MANIFEST-*|$B/ctrbox predict --model tier --data data.tsv --out out.txt && cat out.txt"
    "1|tab/index/CURRENT|set -o pipefail; $B/ctrbox-table inspect tab | $ON_DISK"
    "1|tab/index/*.log|$B/ctrbox predict --model tier --data data.tsv --out out.txt && cat out.txt"
    "1|tab/index/OPTIONS-*|set -o pipefail; $B/ctrbox-table inspect tab | $ON_DISK"
    "1|b.bundle|$B/ctrbox predict --bundle b.bundle --data data.tsv --out out.txt && cat out.txt"
    "1|d.bundle|$B/ctrbox predict --bundle b.bundle --delta d.bundle --data data.tsv --out out.txt && cat out.txt"
    "1|fol/model.ctrbox|cp data.tsv fin/b.tsv && $B/ctrbox train --model deepfm --format criteo --dim 4 --hidden 16,16 --batch 256 --threads 1 --quiet --follow fin --follow-idle 0 --out fol && $B/ctrbox predict --model fol --data data.tsv --out out.txt && cat out.txt"
    "0|ex/manifest.json|cp data.tsv fin/b.tsv && $B/ctrbox train --model deepfm --format criteo --dim 4 --hidden 16,16 --batch 256 --threads 1 --quiet --follow fin --follow-idle 0 --out fol --export-dir ex && cat ex/manifest.json"
    "0|npy/keys.npy|$B/ctrbox-table import --from npy npy imp --dim 4 --w 1 --opt adam"
    "0|npy/values.npy|$B/ctrbox-table import --from npy npy imp --dim 4 --w 1 --opt adam"
    "1|prof.json|$B/ctrbox plan --model deepfm --dim 4 --hidden 16,16 --batch 256 --profile prof.json"
    "0|c.ini|$B/ctrbox train --config c.ini --out cfg"
)

damage() {   # damage file $1 at random: flip bytes, cut, zero a block, or append garbage
    local f=$1 size=$(stat -c %s "$1") how=$((RANDOM % 4)) at
    [ "$size" -gt 0 ] || how=3
    at=$(( (RANDOM * 32768 + RANDOM) % (size > 0 ? size : 1) ))
    case $how in
        0) for i in $(seq $((1 + RANDOM % 4))); do
               printf "\\x$(printf %02x $((RANDOM % 256)))" | dd of="$f" bs=1 seek=$(( (at + i * 997) % size )) conv=notrunc 2>/dev/null
           done; echo "bytes flipped near $at" ;;
        1) truncate -s "$at" "$f"; echo "cut to $at bytes" ;;
        2) dd if=/dev/zero of="$f" bs=1 seek="$at" count=$((1 + RANDOM % 4096)) conv=notrunc 2>/dev/null; echo "zeroed at $at" ;;
        3) head -c $((1 + RANDOM % 5000)) /dev/urandom >> "$f"; echo "garbage appended" ;;
    esac
}

corrupt_trial() {
    local s=$1 d="$W/corrupt.$1"
    seed_trial $s
    local kind=${corrupt_kinds[RANDOM % ${#corrupt_kinds[@]}]}
    local strict=${kind%%|*} rest=${kind#*|}
    local pat=${rest%%|*} cmd=${rest#*|}
    rm -rf "$d" && cp -a c0 "$d" && cd "$d" || return
    # the undamaged result, in the copy (the tiered model names its folder by absolute path: the
    # copy's model file is made to name the copy's folder by training it again here)
    if [[ $pat == tier/* || $pat == tab/* ]]; then
        rm -rf tier tab && $B/ctrbox train --model deepfm --format criteo --dim 4 --hidden 16,16 --batch 256 --threads 1 \
            --quiet --train ../tr.tsv --epochs 1 --out tier --pass-rows 4000 --table-dir tab --cache-mb 0.05 2>/dev/null || {
            fail corrupt $s "setup"; cd "$W"; return; }
    fi
    rm -rf imp cfg
    timeout 120 bash -c "$cmd" > want.out 2> want.err
    local want_rc=$?
    rm -rf imp cfg
    local files=( $pat ) f how
    f=${files[RANDOM % ${#files[@]}]}
    [ -f "$f" ] || { cd "$W"; rm -rf "$d"; return; }
    how=$(damage "$f")
    timeout 120 bash -c "$cmd" > got.out 2> got.err
    local rc=$?
    if [ $rc -eq 0 ] && [ $want_rc -eq 0 ]; then
        [ "$strict" = 0 ] || cmp -s want.out got.out || { fail corrupt $s "$f ($how): accepted with another result: $cmd"; cd "$W"; return; }
    elif [ $rc -eq 1 ] || [ $rc -eq 2 ]; then   # refused (2: a usage error, as a config that lost a line)
        grep -q "ctrbox" got.err || { fail corrupt $s "$f ($how): exit $rc without a message: $cmd"; cd "$W"; return; }
    elif [ $rc -ne $want_rc ]; then
        fail corrupt $s "$f ($how): exit $rc: $(tail -c 300 got.err): $cmd"; cd "$W"; return
    fi
    say "corrupt $s: $f ($how): exit $rc (undamaged $want_rc)"
    grep -q "AddressSanitizer\|runtime error\|Assertion\|terminate called" got.err &&
        { fail corrupt $s "$f ($how): $(grep -m1 "AddressSanitizer\|runtime error\|Assertion\|terminate" got.err)"; cd "$W"; return; }
    cd "$W" && rm -rf "$d"
}

# ---- disk ----
disk_trial() {
    local s=$1 d="$W/disk.$1"
    seed_trial $s
    rm -rf "$d" && mkdir -p "$d" && cd "$d" || return
    local opts="--model $(pick deepfm fm lr) --format criteo --train ../tr.tsv --dim 4 --hidden 16,16 --batch 256 --threads 1"
    opts+=" --epochs 2 --pass-rows $(pick 1500 3000 6000) --cache-mb $(pick 0.02 0.5) $(pick '' '--min-show 2')"
    opts+=" $(pick '' '--shrink-threshold 0.5') $(pick '' '--table-per-field') --seed $((RANDOM % 100)) --quiet"
    local mb=$((1 + RANDOM % 40))
    $B/ctrbox train $opts --out ref --table-dir tref >/dev/null 2>&1 &&
        $B/ctrbox predict --model ref --data ../va.tsv --out p_ref.txt 2>/dev/null || { fail disk $s "reference"; cd "$W"; return; }
    local o
    o=$(B=$B unshare -m bash -c "mount -t tmpfs -o size=${mb}m tmpfs /mnt || exit 99
        timeout 300 $B/ctrbox train $opts --out /mnt/o --table-dir /mnt/td > full.log 2>&1; echo rc1=\$?
        # other writers on the full disk: a model file, an export, a bundle
        head -c \$((64 << 20)) /dev/zero > /mnt/fill 2>/dev/null
        timeout 120 $B/ctrbox train --model lr --format criteo --train ../va.tsv --epochs 1 --quiet --out /mnt/m2 > w.log 2>&1; echo rc2=\$?
        timeout 120 $B/ctrbox-table export ref --to text /mnt/e.tsv >> w.log 2>&1; echo rc3=\$?
        timeout 120 $B/ctrbox export-serving --model ref --out /mnt/b.bundle >> w.log 2>&1; echo rc4=\$?
        ls /mnt/m2/model.ctrbox /mnt/e.tsv /mnt/b.bundle /mnt/*.tmp.* /mnt/m2/*.tmp.* 2>/dev/null | sed 's/^/left: /'
        rm -f /mnt/fill
        mount -o remount,size=512m /mnt
        timeout 300 $B/ctrbox train $opts --out /mnt/o --resume /mnt/td > resume.log 2>&1; echo rc5=\$?
        $B/ctrbox predict --model /mnt/o --data ../va.tsv --out p_full.txt 2>/dev/null" 2>&1)
    case "$o" in *rc1=0*|*rc1=1*) ;; *) fail disk $s "${mb} MB: the full run ended badly: $(tail -c 300 full.log) $o"; cd "$W"; return ;; esac
    grep -q "Assertion\|terminate called\|CHECK failed" full.log w.log resume.log 2>/dev/null &&
        { fail disk $s "${mb} MB: $(grep -h "Assertion\|terminate\|CHECK" full.log w.log resume.log | head -1)"; cd "$W"; return; }
    [[ $o == *rc5=0* ]] || { fail disk $s "${mb} MB: resume failed: $(tail -c 300 resume.log)"; cd "$W"; return; }
    local r
    for r in rc2 rc3 rc4; do   # each either wrote its whole output or exited 1 and left none
        [[ $o == *$r=0* || $o == *$r=1* ]] || { fail disk $s "${mb} MB: $r: $o"; cd "$W"; return; }
    done
    if [[ $o == *rc2=1* && $o == *"left: /mnt/m2/model.ctrbox"* ]] || [[ $o == *rc3=1* && $o == *"left: /mnt/e.tsv"* ]] ||
       [[ $o == *rc4=1* && $o == *"left: /mnt/b.bundle"* ]] || [[ $o == *".tmp."* ]]; then
        fail disk $s "${mb} MB: a failed write left output behind: $o"; cd "$W"; return
    fi
    cmp -s p_ref.txt p_full.txt || { fail disk $s "${mb} MB: the resumed model differs ($opts)"; cd "$W"; return; }
    say "disk $s: ${mb} MB: $(echo $o | tr '\n' ' ')"
    cd "$W" && rm -rf "$d"
}

# ---- memory ----
memory_trial() {
    local s=$1 d="$W/memory.$1"
    seed_trial $s
    rm -rf "$d" && mkdir -p "$d" && cd "$d" || return
    [ -d "$W/m0" ] || { $B/ctrbox train --model deepfm --format criteo --train ../tr.tsv --dim 4 --hidden 16,16 --batch 256 \
        --epochs 1 --pass-rows 3000 --table-dir "$W/m0t" --cache-mb 0.1 --quiet --out "$W/m0" 2>/dev/null; }
    local mb=$((100 + RANDOM % 1400))
    local cmd=$(pick \
        "$B/ctrbox train --model $(pick lr deepfm dlrm) --format criteo --train ../tr.tsv --epochs 1 --threads $(pick 1 2) --quiet --out o" \
        "$B/ctrbox train --model deepfm --format criteo --train ../tr.tsv --epochs 1 --pass-rows 3000 --table-dir t --cache-mb $(pick 1 50 400) --quiet --out o" \
        "$B/ctrbox eval --model $W/m0 --data ../va.tsv" \
        "$B/ctrbox predict --model $W/m0 --data ../va.tsv --out p.txt" \
        "$B/ctrbox plan --model deepfm --batch 512 --reps 1" \
        "$B/ctrbox-data convert --format criteo --in ../va.tsv --out v.cbx" \
        "$B/ctrbox-table inspect $W/m0t" \
        "$B/ctrbox export-serving --model $W/m0 --out b.bundle")
    # in half the trials every thread starts 50 ms late (a preload): OpenBLAS's worker started
    # after the preflight once took the trainer's buffer, and the trainer retried a mapping forever
    local late=$(pick "" "LD_PRELOAD=$B/late-threads.so")
    [ -f "$B/late-threads.so" ] || late=
    [ -n "$late" ] && cmd="$late $cmd"
    # in half the trials threads take larger stacks (ulimit -s, KB): OpenBLAS's workers, made as a
    # program loads, then did not fit, and OpenBLAS raised SIGINT (exit 130, its own lines only)
    local stack=$(pick "" "" 65536 300000)
    # in a quarter of them, as another user (root is exempt) with few processes (ulimit -u): a
    # reader thread that could not start was waited for forever
    local nproc=$((6 + RANDOM % 35))   # here, not in pick's subshell, where RANDOM is reseeded
    local procs=$(pick "" "" "" $nproc)
    [ -n "$AS_OTHER" ] || procs=
    [ -z "$procs" ] || chmod -R a+rwX "$d" "$W/m0" "$W/m0t"
    (ulimit -v $((mb * 1024)); [ -z "$stack" ] || ulimit -s $stack
     if [ -n "$procs" ]; then timeout 300 $AS_OTHER bash -c "ulimit -u $procs; $cmd"; else timeout 300 bash -c "$cmd"; fi) > out.log 2>&1
    local rc=$?
    local lim="${mb} MB${stack:+, ulimit -s $stack}${procs:+, ulimit -u $procs as user 65534}"
    if [ $rc -ne 0 ] && { [ $rc -ne 1 ] || ! grep -q "ctrbox" out.log; }; then
        fail memory $s "$lim: exit $rc: $(tail -c 300 out.log): $cmd"; cd "$W"; return
    fi
    grep -q "terminate called\|Assertion\|CHECK failed\|libgomp" out.log && { fail memory $s "$lim: $(tail -c 300 out.log)"; cd "$W"; return; }
    say "memory $s: $lim: exit $rc: $(tail -c 100 out.log | tr '\n' ' '): $cmd"
    cd "$W" && rm -rf "$d"
}

# ---- follow ----
follow_trial() {
    local s=$1 d="$W/follow.$1"
    seed_trial $s
    rm -rf "$d" && mkdir -p "$d/in" && cd "$d" || return
    local n=$((3 + RANDOM % 3)) rows=$((1500 + RANDOM % 3000)) i
    for ((i = 1; i <= n; i++)); do sed -n "$(( (i - 1) * rows + 1 )),$(( i * rows ))p" ../trk.tsv > day$i.tsv; done
    local opts="--model $(pick lr fm deepfm deepfm) --format criteo --dim 4 --hidden 16,16 --batch 256 --quiet"
    opts+=" --epochs $(pick 1 1 2) --pass-rows $(pick 700 1500 4000) --threads $(pick 1 2) --seed $((RANDOM % 100))"
    opts+=" $(pick '' '--min-show 2') $(pick '' '--shrink-threshold 0.4' '--shrink-unseen 2') $(pick '' '--decay 0.9')"
    opts+=" $(pick '' '--no-progressive') $(pick '' '--export-dir EX --export-every 2')"
    local G="CTRBOX_GPU_SIM=$(pick 0 0 1)"   # 1: the whole model on the simulated GPU, the rows in its memory
    [ "$G" = CTRBOX_GPU_SIM=1 ] && opts+=" --placement gpu --gpu-mem-mb $(pick 1 4)"
    local tiered=$(pick 0 1) done=$(pick 0 1)
    local ro=${opts//EX/exr} ko=${opts//EX/exk}
    [ "$tiered" = 1 ] && { ro+=" --table-dir tr --cache-mb $(pick 0.02 0.2)"; ko+=" --table-dir tk --cache-mb 0.05"; }
    [ "$done" = 1 ] && { ro+=" --follow-done"; ko+=" --follow-done"; }
    drop() {   # day $1 into in/: renamed into place, in place with a done-file, or a folder with _SUCCESS
        case $(( ($1 + s) % 3 )) in
            0) cp day$1.tsv in/.t && mv in/.t in/day$1.tsv && touch -d '2 seconds ago' in/day$1.tsv
               [ "$done" = 0 ] || touch in/day$1.tsv.done ;;
            1) if [ "$done" = 1 ]; then cp day$1.tsv in/day$1.tsv && touch in/day$1.tsv.done
               else cp day$1.tsv in/.t && mv in/.t in/day$1.tsv && touch -d '2 seconds ago' in/day$1.tsv; fi ;;
            2) mkdir -p in/day$1 && cp day$1.tsv in/day$1/part-0 && touch in/day$1/_SUCCESS ;;
        esac
    }
    local kills=0
    for ((i = 1; i <= n; i++)); do   # a day arrives, the trainer runs and is killed at a random moment
        drop $i
        env $G $B/ctrbox train $ko --follow in --out k >k.log 2>&1 &
        local p=$! at=$((RANDOM % 1500))
        sleep "$((at / 1000)).$(printf %03d $((at % 1000)))"
        kill -9 $p 2>/dev/null
        wait $p 2>/dev/null
        [ $? -eq 137 ] && kills=$((kills + 1))
    done
    if ! timeout 300 env $G $B/ctrbox train $ko --follow in --follow-idle 0 --out k >k.log 2>&1; then
        fail follow $s "the last run failed ($ko): $(tail -1 k.log)"; cd "$W"; return
    fi
    if ! timeout 300 env $G $B/ctrbox train $ro --follow in --follow-idle 0 --out r >r.log 2>&1; then
        fail follow $s "the reference failed ($ro): $(tail -1 r.log)"; cd "$W"; return
    fi
    $B/ctrbox predict --model r --data ../va.tsv --out p_r.txt 2>/dev/null
    $B/ctrbox predict --model k --data ../va.tsv --out p_k.txt 2>/dev/null
    if ! cmp -s p_r.txt p_k.txt || [ ! -s p_r.txt ]; then
        fail follow $s "predictions differ after $kills kills ($ko)"; cd "$W"; return
    fi
    local lk=$(grep -ao '"follow":{[^]]*]' k/model.ctrbox | sed 's/"dir":"[^"]*"//') lr=$(grep -ao '"follow":{[^]]*]' r/model.ctrbox | sed 's/"dir":"[^"]*"//')
    [ -n "$lk" ] && [ "$lk" = "$lr" ] || { fail follow $s "the ledgers differ after $kills kills: $lk / $lr"; cd "$W"; return; }
    if [ "$tiered" = 1 ]; then
        $B/ctrbox-table export tr --to text --with-optimizer e_r.tsv 2>/dev/null && sort e_r.tsv > s_r
        $B/ctrbox-table export tk --to text --with-optimizer e_k.tsv 2>/dev/null && sort e_k.tsv > s_k
        cmp -s s_r s_k || { fail follow $s "the rows differ after $kills kills ($ko)"; cd "$W"; return; }
    fi
    if [[ $ko == *--export-dir* ]]; then   # base + deltas, in the manifest's order, against a full bundle
        local ds=$(grep -o '"delta-[^"]*"' exk/manifest.json | tr -d '"' | sed 's|^|--delta exk/|' | tr '\n' ' ')
        local base=$(grep -o '"base-[^"]*"' exk/manifest.json | tr -d '"')
        $B/ctrbox export-serving --model k --out full.bundle >/dev/null 2>&1
        $B/ctrbox predict --bundle full.bundle --data ../va.tsv --out p_f.txt 2>/dev/null
        local last=$(grep -o '"pass": [0-9]*' exk/manifest.json | tail -1 | grep -o '[0-9]*')
        [ "$last" = "$(grep -ao '"passes":[0-9]*' k/model.ctrbox | grep -o '[0-9]*')" ] ||   # trained on since
            { $B/ctrbox export-serving --model k --since "$last" --out tail.bundle >/dev/null 2>&1; ds+=" --delta tail.bundle"; }
        $B/ctrbox predict --bundle exk/$base $ds --data ../va.tsv --out p_e.txt 2>e.log
        cmp -s p_f.txt p_e.txt && [ -s p_e.txt ] ||
            { fail follow $s "base + deltas differ from the full bundle ($ko): $(tail -1 e.log)"; cd "$W"; return; }
    fi
    say "follow $s: $n days of $rows rows, $kills kills, tiered $tiered: $ko"
    cd "$W" && rm -rf "$d"
}

for loop in $LOOPS; do
    t0=$(date +%s)
    case $loop in
        corrupt) corrupt_setup || { echo "torture: corrupt setup failed"; exit 1; } ;;
        disk) if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then echo "torture: disk needs root and unshare -m; skipped"; continue; fi ;;
        kill|memory|follow) ;;
        *) echo "torture: unknown loop '$loop'"; exit 2 ;;
    esac
    for ((i = 0; i < COUNT; i++)); do
        ${loop}_trial $((SEED + i))
        ran[$loop]=$((${ran[$loop]:-0} + 1))
    done
    echo "torture: $loop: ${ran[$loop]} trials, ${failed[$loop]:-0} failed, $(($(date +%s) - t0)) s (seeds $SEED..$((SEED + COUNT - 1)))"
done
[ $fails -eq 0 ] && rm -rf "$W"
echo "torture: $fails failure(s)"
[ $fails -eq 0 ]
