#!/usr/bin/env bash
# The floors of docs/ARCHITECTURE.md: a folder includes only its own files and folders below it.
#   io/ < datasets/ < embedding/ < dense/ < src/ < tools/      (tests/ and bench/ may include any)
# Prints each include that goes up a floor (or out of the tree) and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
floor() {
    case "$1" in
        io) echo 0 ;; datasets) echo 1 ;; embedding) echo 2 ;; dense) echo 3 ;; src) echo 4 ;; tools) echo 5 ;;
        tests | bench) echo 9 ;; *) echo -1 ;;
    esac
}
bad=0
while IFS= read -r file; do
    from=${file%%/*}
    f_from=$(floor "$from")
    [ "$f_from" = 9 ] && continue
    while IFS= read -r inc; do
        target=$(realpath -m --relative-to=. "$(dirname "$file")/$inc")
        to=${target%%/*}
        f_to=$(floor "$to")
        if [ "$f_to" -lt 0 ] || [ "$f_to" -gt "$f_from" ]; then
            echo "$file includes $inc ($to/ is above $from/)"
            bad=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files 'io/*' 'datasets/*' 'embedding/*' 'dense/*' 'src/*' 'tools/*' | grep -E '\.(c|h|cu)$')
if [ "$bad" = 1 ]; then
    echo "check_floors: includes that go up a floor (docs/ARCHITECTURE.md)" >&2
    exit 1
fi
echo "check_floors: every include stays on its floor or goes down"
