#!/usr/bin/env bash
# One device session for the GPU encoders (issue 18): the GPU tests, then the end-to-end
# benchmark (scripts/bench_host.py) of PNG and JPEG output with the GPU encoders against the
# CPU backend and CUDA with CPU encoding, 4000 x 512² and 1000 x 2000² synth CT.
#
# Run on the GPU machine from a staged tree (.device/ from device-stage.sh, this repository's
# files), with libnvcomp.so.6 (pip nvidia-libnvcomp-cu13) xz-compressed one folder up:
#   bash scripts/gpu_encode_device_run.sh ../libnvcomp.so.6.xz "$OUT"
# SPECS (default "512:4000 2000:1000", size:slices), TESTS_TIMEOUT and BENCH_TIMEOUT (s) bound it.
# Writes tests.log, table-512.txt, table-2000.txt, stages.txt and up to 4 sample PNGs to OUT.
set -u
lib_xz=$1
out=$2
mkdir -p /tmp/libs "$out/samples"
xz -dc "$lib_xz" > /tmp/libs/libnvcomp.so.6
export LD_LIBRARY_PATH=/tmp/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The CLI tests run CARGO_BIN_EXE_dicomflow, the staged binary's path in the build tree.
mkdir -p target/release && cp .device/bin/dicomflow target/release/dicomflow
DICOMFLOW_GPU_SAMPLES="$out/samples" timeout "${TESTS_TIMEOUT:-100}" \
  bash .device/run-tests.sh > "$out/tests.log" 2>&1
echo "tests rc=$?" >> "$out/tests.log"
df=.device/bin/dicomflow
extras=(
  --extra "cuda gpu-encode=--backend cuda --transfer zero-copy --gpu-encode gpu"
  --extra "cuda gpu-encode 8 streams=--backend cuda --transfer zero-copy --gpu-encode gpu --streams 8"
  --extra "cuda cpu-encode=--backend cuda --transfer zero-copy --gpu-encode cpu"
  --extra "cpu jpeg=--backend cpu --format jpeg"
  --extra "cuda gpu-encode jpeg=--backend cuda --transfer zero-copy --gpu-encode gpu --format jpeg"
)
for spec in ${SPECS:-512:4000 2000:1000}; do
  size=${spec%%:*}
  slices=${spec##*:}
  timeout "${BENCH_TIMEOUT:-100}" python3 scripts/bench_host.py "$df" /nonexistent "/tmp/bench-$size" \
    --only dicomflow --skip-strategies --sizes "$size" --slices "$slices" --pause 0.5 "${extras[@]}" \
    > /dev/null 2>&1
  cp "/tmp/bench-$size/table.txt" "$out/table-$size.txt" 2>/dev/null
  # What bounds each run: the busiest stages and pools, and the GPU-encoded bytes.
  python3 - "/tmp/bench-$size" >> "$out/stages.txt" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "report-*.json"))):
    r = json.load(open(p)); st = r["statistics"]
    stages = sorted((s for s in st["stages"] if s["count"]), key=lambda s: -s["busy_fraction"])[:4]
    pools = ", ".join(f"{q['pool']} {q['busy_fraction']*100:.0f}%" for q in st["pools"])
    enc = st.get("gpu_encoded_frames", 0)
    kb = st.get("gpu_encoded_bytes", 0) / 1e3 / max(enc, 1)
    print(f"{os.path.basename(p)}: encoder {r['result']['backend'].get('encoder')}; "
          + "; ".join(f"{s['name']} p50 {s['p50_ms']:.2f} ms busy {s['busy_fraction']*100:.0f}%" for s in stages)
          + f"; pools: {pools}; GPU-encoded {enc} frames, {kb:.0f} KB each")
PY
done
grep -E "^test |test result|rc=|panicked|encoded on the GPU|PSNR|Pillow|fell back" "$out/tests.log" | tail -30
cat "$out"/table-*.txt "$out/stages.txt"
