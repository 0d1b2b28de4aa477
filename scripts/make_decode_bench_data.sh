#!/usr/bin/env bash
# Prepares the compressed series of scripts/bench_decode.py on a machine with DCMTK and GDCM
# (the GPU host has neither): DISTINCT slices per syntax, made by independent encoders from a
# `dicomflow synth` CT series; bench_decode.py replicates them (copies into sub-folders) up to
# the slice count it is asked for.
#
#   OUT/s512/{j2k,j2k_lossy,jls,baseline}/IM*.dcm     512x512
#   OUT/s2000/{j2k,jls,baseline}/IM*.dcm               2000x2000 (fewer distinct slices)
#
#   j2k        GDCM gdcmconv --j2k                      JPEG 2000 lossless (.90)
#   j2k_lossy  GDCM gdcmconv --j2k --irreversible       JPEG 2000 (.91), 9/7 wavelet
#   jls        DCMTK dcmcjpeg +e1                       JPEG lossless SV1 (.70)
#   baseline   DCMTK dcmcjpeg +eb (8-bit synth)         JPEG baseline (.50)
#
# usage: scripts/make_decode_bench_data.sh DICOMFLOW OUT [DISTINCT_512=20] [DISTINCT_2000=3]
set -euo pipefail
df=$1
out=$2
n512=${3:-20}
n2000=${4:-3}
for t in dcmcjpeg gdcmconv; do
    command -v "$t" >/dev/null || { echo "$t not found (apt-get install dcmtk libgdcm-tools)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
for spec in "512 $n512" "2000 $n2000"; do
    read -r size n <<<"$spec"
    [ "$n" -gt 0 ] || continue
    d=$out/s$size
    mkdir -p "$d/j2k" "$d/jls" "$d/baseline"
    [ "$size" = 512 ] && mkdir -p "$d/j2k_lossy"
    "$df" synth -q --size "$size" --slices "$n" --seed 5 "$work/ct$size"
    "$df" synth -q --size "$size" --slices "$n" --seed 5 --eight-bit "$work/g$size"
    for f in "$work/ct$size"/*.dcm; do
        b=$(basename "$f")
        gdcmconv --j2k "$f" "$d/j2k/$b"
        dcmcjpeg -q +e1 +un "$f" "$d/jls/$b"
        [ "$size" = 512 ] && gdcmconv --j2k --irreversible "$f" "$d/j2k_lossy/$b"
    done
    for f in "$work/g$size"/*.dcm; do
        dcmcjpeg -q +eb +un "$f" "$d/baseline/$(basename "$f")"
    done
done
du -sh "$out"/* >&2
