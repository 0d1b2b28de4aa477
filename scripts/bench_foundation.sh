#!/usr/bin/env bash
# Whole-command throughput on a 200-slice 512x512 CT series made by `dicomflow synth`:
# dicomflow vs dicom-toimage --8bit (crates.io 0.10.1), same files, PNG output, one hyperfine
# run; prints the table and the output sizes. Needs hyperfine (Debian) and dicom-toimage
# (`cargo install dicom-toimage --version 0.10.1`).
#
# usage: scripts/bench_foundation.sh [DICOMFLOW] [WORK_DIR]
set -euo pipefail
B=${1:-target/release/dicomflow}
W=${2:-/tmp/dicomflow-foundation}
B=$(readlink -f "$B")
rm -rf "$W" && mkdir -p "$W"
"$B" synth "$W/series" --size 512 --slices 200 -q
hyperfine -N -w 2 -r 15 \
  -p "sh -c 'rm -rf $W/ti $W/df; mkdir -p $W/ti'" \
  "dicom-toimage --8bit -d $W/ti $W/series" \
  "$B run $W/series -o $W/df -q --no-tui" \
  --export-markdown "$W/table.md"
cat "$W/table.md"
# hyperfine's prepare step empties both output folders before every run: render once more each.
rm -rf "$W/ti" "$W/df" && mkdir -p "$W/ti"
dicom-toimage --8bit -d "$W/ti" "$W/series"
"$B" run "$W/series" -o "$W/df" -q --no-tui
echo "outputs: dicom-toimage $(ls "$W/ti" | wc -l), dicomflow $(find "$W/df" -name '*.png' | wc -l)"
echo "output bytes: dicom-toimage $(du -sb "$W/ti" | cut -f1), dicomflow $(du -sb "$W/df" | cut -f1)"
