#!/usr/bin/env bash
# Are two builds' outputs byte-identical? Renders the conformance fixtures and a 200-slice
# series with each build, on each backend named, and compares every output file (the state
# folder `.dicomflow` left out). Used before and after refactors (issue 15, acceptance 1).
#
# usage: scripts/compare_outputs.sh BASE_BIN NEW_BIN WORK [BACKENDS]   (default: cpu cuda)
set -uo pipefail
base=$1; new=$2; work=$3; backends=${4:-cpu cuda}
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work" && mkdir -p "$work"
"$new" -q synth "$work/series" --slices 200 --size 512 --seed 11
status=0
for input in "$here/tests/fixtures/conformance" "$work/series"; do
  for backend in $backends; do
    for which in base new; do
      exe=$([ $which = base ] && echo "$base" || echo "$new")
      "$exe" run "$input" -o "$work/out-$which" --backend "$backend" -q --no-tui \
        > "$work/log-$which.txt" 2>&1
      echo "$which exit $?" >> "$work/codes-$backend.txt"
      rm -rf "$work/out-$which/.dicomflow"
    done
    n=$(find "$work/out-new" -type f | wc -l)
    if diff -r -q "$work/out-base" "$work/out-new" > "$work/diff.txt"; then
      echo "$(basename "$input") $backend: $n files, identical ($(paste -sd' ' "$work/codes-$backend.txt"))"
    else
      echo "$(basename "$input") $backend: $n files, DIFFERENT: $(head -3 "$work/diff.txt")"
      status=1
    fi
    rm -rf "$work/out-base" "$work/out-new" "$work/codes-$backend.txt"
  done
done
exit $status
