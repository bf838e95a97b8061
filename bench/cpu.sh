# Sourced by the benchmarks: cpu_desc prints the CPU the figures come from, its name, family and
# model (under a hypervisor the name may say only "Xeon" or "EPYC": the family and model tell the
# generation) and which of AVX2, AVX-512 F and FMA it has.
cpu_desc() {
    local name fam mdl isa
    name=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
    fam=$(grep -m1 "^cpu family" /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
    mdl=$(grep -m1 "^model[[:space:]]*:" /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
    isa=$(grep -m1 "^flags" /proc/cpuinfo | grep -o -w -E "avx512f|avx2|fma" | sort -u | tr '\n' ' ' | sed 's/ $//')
    echo "$name (family $fam, model $mdl; $isa)"
}
