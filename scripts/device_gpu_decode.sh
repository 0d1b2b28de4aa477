#!/usr/bin/env bash
# GPU decode on the H200 machine in one device call: the GPU tests, the exactness sweep of
# `bench decode`, and the compressed-input benchmark (BENCHMARKS.md, "Compressed input").
#
# Stage here (DEV is a git-ignored folder of /work/main carried with the device tool):
#   ../shared/tools/device-stage.sh                      # .device/ (bin + test executables)
#   mkdir -p DEV/tree && git archive HEAD | tar -x -C DEV/tree && cp -a .device DEV/tree/
#   xz -9 -c <wheel>/nvidia/nvjpeg2k/lib/libnvjpeg2k.so.0 > DEV/libnvjpeg2k.so.0.xz   (README, GPU)
#   scripts/make_decode_bench_data.sh target/release/dicomflow DEV/benchdata 20 3   (DCMTK, GDCM)
# then run on the device:   bash DEV/tree/scripts/device_gpu_decode.sh DEV
# Logs land in $OUT (or ./gpu-decode-out); a short table is printed last.
set -u
DEV=$(cd "${1:?usage: device_gpu_decode.sh DEV}" && pwd)
OUT=${OUT:-$PWD/gpu-decode-out}
mkdir -p "$OUT" /tmp/libs
cd "$DEV/tree"
mkdir -p target/release
xz -dc "$DEV/libnvjpeg2k.so.0.xz" > /tmp/libs/libnvjpeg2k.so.0
cp .device/bin/dicomflow target/release/dicomflow   # the path the test executables were built with
export LD_LIBRARY_PATH=/tmp/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$PWD/target/release/dicomflow
T() { local n=$1; shift; local t0=$(date +%s%N); "$@"; local rc=$?; echo "$n rc=$rc $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$OUT/times.txt"; }
T tests timeout 120 bash .device/run-tests.sh gpu_ --nocapture --test-threads 1 > "$OUT/tests.txt" 2>&1
T exact timeout 60 "$B" bench decode --iters 1 --max-frames 1 "$DEV/benchdata" tests/fixtures/gpu_decode > "$OUT/exact.txt" 2>&1
T fixtures timeout 30 "$B" bench decode --iters 3 tests/fixtures/conformance tests/fixtures/gpu_decode > "$OUT/fixtures.txt" 2>&1
T b512 timeout 150 python3 scripts/bench_decode.py "$B" "$DEV/benchdata" "$OUT/b512" --sizes 512 --slices 1000 --series j2k,jls,baseline --streams 8,16,32 > "$OUT/b512.txt" 2>&1
T b2000 timeout 90 python3 scripts/bench_decode.py "$B" "$DEV/benchdata" "$OUT/b2000" --sizes 2000 --slices-2000 100 --series j2k --streams 8,16 > "$OUT/b2000.txt" 2>&1
T trace timeout 60 "$B" run "$DEV/benchdata/s512/j2k" -o /tmp/gd-trace -q --no-tui --backend cuda --report "$OUT/trace-report.json" --trace "$OUT/trace-j2k-16.json"
rm -f "$OUT"/b*/report-*
cat "$OUT/times.txt"
grep -E "^test |test result|panicked at" "$OUT/tests.txt" | head -30
grep -E "differences" "$OUT/exact.txt" "$OUT/fixtures.txt"
cat "$OUT/b512.txt" "$OUT/b2000.txt" | cut -c1-200
