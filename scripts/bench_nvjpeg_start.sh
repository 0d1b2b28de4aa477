#!/usr/bin/env bash
# nvJPEG's start against the CPU decoders (issue 17, BENCHMARKS.md "Session 20"): per series, the
# CPU backend and the CUDA backend with `--gpu-decode all` under `gpu.decode_start = "cpu"`
# (default) and "wait", the CPU and default rows twice, interleaved. Prints pipeline slices/s
# (outputs / the report's elapsed), whole-command slices/s, and the backend's closing lines
# (who decoded what while nvJPEG started, the workers' warm-up, the batched calls).
#
# usage: scripts/bench_nvjpeg_start.sh STAGE OUT
#   STAGE  as for scripts/device_verify.sh (bin/dicomflow(.xz), libs/*.xz, decode-data/NAME
#          with distinct slices, e.g. from scripts/make_decode_bench_data.sh)
#   OUT    where the summary and each run's log go
#   environment: SERIES ("NAME:COUNT ...", default "jls512:10000 jls512:3000 jls512:1000
#   base512:3000 jls2000:300"), CONFIGS ("label:flags;label:flags;...")
set -uo pipefail
stage=$(readlink -f "$1")
out=$(readlink -f "$2")
mkdir -p "$out"
summary=$out/summary.txt
say() { echo "$*" | tee -a "$summary"; }
# shellcheck source=scripts/stage_unpack.sh
. "$(dirname "$0")/stage_unpack.sh"
stage_unpack "$stage" ns

w=/dev/shm/ns
default_configs="cpu:--backend cpu;gpu-start-cpu:--backend cuda --gpu-decode all;gpu-start-wait:--backend cuda --gpu-decode all --gpu-decode-start wait;cpu2:--backend cpu;gpu-start-cpu2:--backend cuda --gpu-decode all"
for spec in ${SERIES:-jls512:10000 jls512:3000 jls512:1000 base512:3000 jls2000:300}; do
  name=${spec%%:*}; want=${spec#*:}
  [ -d "$stage/decode-data/$name" ] || { say "no $stage/decode-data/$name"; continue; }
  rm -rf $w
  n=$(replicate "$stage/decode-data/$name" "$want" $w/in)
  IFS=';' read -r -a cfgs <<< "${CONFIGS:-$default_configs}"
  for cfg in "${cfgs[@]}"; do
    label=${cfg%%:*}; args=${cfg#*:}
    rm -rf $w/out $w/r.json
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$bin" -v run $w/in -o $w/out $args --no-tui --report $w/r.json > "$out/$name-$n-$label.log" 2>&1
    rc=$?; t1=$(date +%s.%N)
    say "$name x $n $label: rc $rc, $(python3 -c "
import json; r=json.load(open('$w/r.json')); e=r['result']['elapsed']
st={s['name']: s for s in r['statistics']['stages']}
g=st.get('gpu decode', {})
print(f'{$n/($t1-$t0):.1f} slices/s whole, {$n/e:.1f} pipeline; {g.get(\"count\", 0)} frames decoded on the GPU')" 2>/dev/null)"
    grep -h "GPU decode start\|warmed up\|handles ready\|GPU decode: \|nvJPEG host time" \
      "$out/$name-$n-$label.log" | sed 's/^.*INFO /   /' | tee -a "$summary"
  done
done
rm -rf $w
