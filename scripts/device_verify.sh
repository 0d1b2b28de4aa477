#!/usr/bin/env bash
# Everything a GPU host must confirm about a build, in one command (the lent H200 machine is
# reached for minutes at a time, and a cold start costs one or two of them): the GPU tests, then
# the benchmarks that need a GPU, each section with its own time limit, results under OUT.
#
# usage: scripts/device_verify.sh STAGE OUT [SECTIONS]
#   STAGE    a folder holding bin/dicomflow(.xz), tests/*(.xz) (test executables, as
#            scripts/stage_gpu_host.sh, which makes the whole folder, or
#            ../shared/tools/device-stage.sh makes them: the unit tests' and `it`, every
#            integration test), libs/*.xz (codec libraries:
#            libnvjpeg2k.so.0, libnvcomp.so.6, compressed to fit the transfer) and, for the
#            before/after benchmarks, dicomflow-BASE.xz (an earlier build)
#   OUT      where logs and tables go
#   SECTIONS comma-separated, default all: tests, compare, transfer, host2000, ab2000, resize,
#            shard, encode, j2k, nvjpeg, listen, decode
# STAGE/tools/ (optional) goes first on PATH: tools the machine lacks, such as pngcheck.
# Each section prints a short table and appends it to OUT/summary.txt.
set -uo pipefail
stage=$(readlink -f "$1")
out=$(readlink -f "$2")
sections=${3:-tests,compare,transfer,host2000,ab2000,resize,shard,encode,j2k,nvjpeg,listen,decode}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
summary=$out/summary.txt
say() { echo "$*" | tee -a "$summary"; }
# stages REPORT: each stage of a run's report as "name p50ms/busy fraction".
stages() {
  python3 -c "
import json, sys
st = json.load(open(sys.argv[1]))['statistics']['stages']
print(' '.join(f\"{s['name']} {s.get('p50_ms', 0):.2f}ms/{s.get('busy_fraction', 0):.2f}\" for s in st if s.get('count')))" "$1" 2>/dev/null
}
want() { [[ ",$sections," == *",$1,"* ]]; }
# shellcheck source=scripts/stage_unpack.sh
. "$here/scripts/stage_unpack.sh"
stage_unpack "$stage" dv
if [ -d "$stage/tools" ]; then
  mkdir -p /tmp/dv-tools
  for f in "$stage"/tools/*; do unpack "$f" "/tmp/dv-tools/$(basename "$f" .xz)"; done
  export PATH=/tmp/dv-tools:$PATH
fi
base=
if ls "$stage"/dicomflow-*.xz >/dev/null 2>&1; then
  base=/tmp/dv-bin/dicomflow-base
  unpack "$(ls "$stage"/dicomflow-*.xz | head -1)" "$base"
fi
say "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); $(nproc) cores; $(date -u +%FT%TZ)"
say "   build $("$bin" --version 2>/dev/null); base ${base:+$("$base" --version 2>/dev/null)}"

if want tests; then
  # Test executables keep this checkout's absolute path (CARGO_MANIFEST_DIR, CARGO_BIN_EXE_*):
  # link it to the copy here, and put the binary where the CLI tests look for it.
  manifest=$(cat "$stage/manifest_dir" 2>/dev/null || echo "$here")
  if [ "$manifest" != "$here" ] && [ ! -e "$manifest" ]; then
    mkdir -p "$(dirname "$manifest")" && ln -s "$here" "$manifest"
  fi
  mkdir -p "$here/target/release" && cp "$bin" "$here/target/release/dicomflow"
  mkdir -p /tmp/dv-tests
  status=0
  run_tests() { # LABEL EXECUTABLE LIMIT [HARNESS ARGS...]: one run, its log OUT/test-LABEL.log
    local label=$1 exe=$2 limit=$3
    shift 3
    ( cd "$here" && timeout "$limit" "$exe" "$@" ) > "$out/test-$label.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && status=1
    say "   test $label: rc $rc; $(grep -E '^test result' "$out/test-$label.log" | tail -1)"
    grep -E "^test .* FAILED|panicked" "$out/test-$label.log" | head -5 | tee -a "$summary"
  }
  for t in "$stage"/tests/*; do
    name=$(basename "$t" .xz)
    unpack "$t" "/tmp/dv-tests/$name"
    if [ "$name" = it ]; then
      # The integration tests are one executable (tests/it): its GPU module first, under the
      # GPU limit, then every other module. Tests needing what this machine lacks (DCMTK,
      # Orthanc, tmux, Slurm, a C++ compiler) say why they skip; DICOMFLOW_REQUIRE_TOOLS and
      # DICOMFLOW_REQUIRE_SLURM, which make that a failure, are .ci/run's, not set here.
      run_tests it-gpu "/tmp/dv-tests/it" "${GPU_TESTS_TIMEOUT:-300}" gpu::
      run_tests it "/tmp/dv-tests/it" "${IT_TESTS_TIMEOUT:-300}" --skip gpu::
    else
      # The library's and the binary's unit tests (and separate test executables of a stage
      # built before tests/it).
      limit=${TESTS_TIMEOUT:-90}
      [ "$name" = gpu ] && limit=${GPU_TESTS_TIMEOUT:-300}
      run_tests "$name" "/tmp/dv-tests/$name" "$limit"
    fi
  done
  say "== tests: $([ $status -eq 0 ] && echo all passed || echo FAILURES)"
fi

if want compare && [ -n "$base" ]; then
  # The base build's outputs against this one's, byte for byte, on both backends
  # (scripts/compare_outputs.sh: the conformance fixtures and a 200-slice series).
  timeout 240 bash "$here/scripts/compare_outputs.sh" "$base" "$bin" /dev/shm/dv-compare "cpu cuda" \
    > "$out/compare.txt" 2>&1
  say "   compare with the base build: rc $?"; tee -a "$summary" < "$out/compare.txt"
  rm -rf /dev/shm/dv-compare
fi

if want transfer && [ -n "$base" ]; then
  for b in base new base new; do
    exe=$([ $b = base ] && echo "$base" || echo "$bin")
    timeout 120 "$exe" bench transfer --sizes 2000 > "$out/transfer-$b.txt" 2>&1
    say "   bench transfer $b:"
    grep -E "^2000x2000 +(zero-copy|pinned) .*sustained 8 streams|floor" "$out/transfer-$b.txt" | tee -a "$summary"
  done
fi

if want host2000 && [ -n "$base" ]; then
  for b in ${HOST_ORDER:-base new}; do
    exe=$([ $b = base ] && echo "$base" || echo "$bin")
    timeout 240 python3 "$here/scripts/bench_host.py" "$exe" /nonexistent "$out/host-$b" \
      --slices 1000 --sizes 2000 --only dicomflow --repeat 2 --work /dev/shm/dv-host \
      > "$out/host2000-$b.txt" 2>&1
    say "   bench_host 2000 $b:"; grep -E "^2000x2000|^#" "$out/host2000-$b.txt" | tee -a "$summary"
    rm -rf "$out/host-$b"
  done
  rm -rf /dev/shm/dv-host
fi

if want ab2000 && [ -n "$base" ]; then
  # The base build against this one on bench_host.py's 2000² rows, alternating run by run
  # (scripts/bench_ab.py, medians of AB_ROUNDS): on this host the same binary moves 7-12 %
  # between two bench_host.py calls, more than a before/after claim can carry. PNG is
  # compressed by the writers in every row (--gpu-encode cpu), as the base build did at 2000².
  # AB_ROWS picks rows (default all five); AB_KEEP=1 brings every run's report back (a tarball).
  cfgs=()
  for row in "zero-copy:--backend cuda --transfer zero-copy" "pinned:--backend cuda --transfer pinned" \
             "pageable:--backend cuda --transfer pageable" "auto:--backend auto --transfer zero-copy" \
             "cpu:--backend cpu"; do
    label=${row%%:*}; flags=${row#*:}
    [[ " ${AB_ROWS:-zero-copy pinned pageable auto cpu} " == *" $label "* ]] || continue
    [ "$label" != cpu ] && flags="$flags --gpu-encode cpu"
    cfgs+=(--config "base $label=@$base $flags" --config "new $label=$flags")
  done
  keep=()
  [ -n "${AB_KEEP:-}" ] && keep=(--keep-reports /dev/shm/dv-ab-reports)
  timeout "${AB_TIMEOUT:-360}" python3 "$here/scripts/bench_ab.py" "$bin" /dev/shm/dv-ab \
    --sizes "${AB_SIZES:-2000:1000}" --rounds "${AB_ROUNDS:-5}" "${keep[@]}" "${cfgs[@]}" \
    > "$out/ab2000.txt" 2>&1
  say "   ab2000 (medians):"; sed -n '/^medians/,$p' "$out/ab2000.txt" | tee -a "$summary"
  [ -n "${AB_KEEP:-}" ] && tar -C /dev/shm -cJf "$out/ab-reports.tar.xz" dv-ab-reports
  rm -rf /dev/shm/dv-ab /dev/shm/dv-ab-reports
fi

if want resize; then
  SIZES=2000:1000 timeout 240 bash "$here/scripts/bench_resize.sh" "$bin" /dev/shm/dv-resize cuda 3 \
    > "$out/resize.txt" 2>&1
  say "   resize:"; tail -8 "$out/resize.txt" | tee -a "$summary"
  rm -rf /dev/shm/dv-resize
fi

if want shard; then
  timeout 240 bash "$here/scripts/bench_shard.sh" "$bin" /dev/shm/dv-shard --slices 4000 --size 512 \
    --shards 4 --rounds 1 > "$out/shard.txt" 2>&1
  say "   shard:"; tail -6 "$out/shard.txt" | tee -a "$summary"
  rm -rf /dev/shm/dv-shard
fi

if want encode; then
  # The encoders on the whole command (slices/s from the wall clock, start-up included) and the
  # pipeline alone (the report's elapsed), for PNG and JPEG, CPU and GPU, at 2000² and 512².
  w=/dev/shm/dv-encode
  for spec in ${ENCODE_SIZES:-2000:1000 512:4000}; do
    size=${spec%%:*}; n=${spec#*:}
    rm -rf $w && "$bin" -q synth $w/in --size "$size" --slices "$n"
    # ENCODE_CONFIGS: "label:flags;label:flags;..." to run other rows.
    IFS=';' read -r -a cfgs <<< "${ENCODE_CONFIGS:-cpu-png:--backend cpu;cuda-cpu-png:--backend cuda --gpu-encode cpu;gpu-png:--backend cuda --gpu-encode gpu --streams 4;gpu-png-8-streams:--backend cuda --gpu-encode gpu --streams 8;gpu-png-unbatched:--backend cuda --gpu-encode gpu --streams 8 --encode-batch 1;cpu-jpeg:--backend cpu --format jpeg;gpu-jpeg:--backend cuda --format jpeg --gpu-encode gpu}"
    for cfg in "${cfgs[@]}"; do
      label=${cfg%%:*}; args=${cfg#*:}
      # A label starting with "base-" runs the earlier build (STAGE/dicomflow-*.xz).
      exe=$bin
      if [[ $label == base-* ]]; then
        [ -n "$base" ] || { say "   encode ${size}² x $n $label: skipped, no earlier build in the stage"; continue; }
        exe=$base
      fi
      rm -f $w/r.json; t0=$(date +%s.%N)
      timeout 120 "$exe" run $w/in -o $w/out-$label $args --no-tui -q --report $w/r.json > /dev/null 2>&1
      rc=$?; t1=$(date +%s.%N)
      say "   encode ${size}² x $n $label: rc $rc, $(python3 -c "
import json; r=json.load(open('$w/r.json')); e=r['result']['elapsed']; o=r['result']['totals']['output_bytes']
print(f'{$n/($t1-$t0):.1f} slices/s whole, {$n/e:.1f} pipeline, out {o/1e6:.1f} MB')
open('$w/out-bytes', 'w').write(str(o // $n))" 2>/dev/null); $(stages $w/r.json)"
      rm -rf $w/out-$label
    done
    # ENCODE_IO=1: the file I/O alone on the same files (`bench io`: reads, and reads plus
    # writes of the last row's mean output size), the ceiling those rows share.
    if [ "${ENCODE_IO:-0}" = 1 ]; then
      timeout 120 "$bin" bench io $w/in -o /dev/shm --threads "${ENCODE_IO_THREADS:-8,14,16}" --buffers "${ENCODE_IO_BUFFERS:-4}" \
        --write-bytes "0,$(cat $w/out-bytes 2>/dev/null || echo 65536)" --rounds 3 2>&1 \
        | sed "s/^/   io ${size}² x $n: /" | tee -a "$summary"
    fi
  done
  rm -rf $w
fi

if want nvjpeg; then
  # nvJPEG's series (STAGE/decode-data/{jls512,base512,jls2000}: distinct slices made by DCMTK's
  # dcmcjpeg +e1 / +eb from synth CT, copied up to NVJPEG_SLICES): the CPU backend against the
  # CUDA backend decoding on the GPU ("all": nvJPEG decodes several frames per call) and not.
  for spec in ${NVJPEG_SERIES:-jls512:3000 base512:3000 jls2000:300}; do
    name=${spec%%:*}; want_n=${spec#*:}
    [ -d "$stage/decode-data/$name" ] || continue
    w=/dev/shm/dv-nvjpeg; rm -rf $w
    n=$(replicate "$stage/decode-data/$name" "$want_n" $w/in)
    IFS=';' read -r -a cfgs <<< "${NVJPEG_CONFIGS:-cpu:--backend cpu;gpu-decode:--backend cuda --gpu-decode all;gpu-decode-4-streams:--backend cuda --gpu-decode all --streams 4;gpu-decode+gpu-png:--backend cuda --gpu-decode all --gpu-encode gpu;cpu-decode:--backend cuda --gpu-decode none}"
    for cfg in "${cfgs[@]}"; do
      label=${cfg%%:*}; args=${cfg#*:}
      rm -f $w/r.json; t0=$(date +%s.%N)
      timeout 120 "$bin" -v run $w/in -o $w/out-$label $args --no-tui --report $w/r.json > $w/log 2>&1
      rc=$?; t1=$(date +%s.%N)
      say "   $name x $n $label: rc $rc, $(python3 -c "
import json; r=json.load(open('$w/r.json')); e=r['result']['elapsed']
st={s['name']: s for s in r['statistics']['stages']}
g=st.get('gpu decode', {}); d=st.get('read+decode', {})
print(f'{$n/($t1-$t0):.1f} slices/s whole, {$n/e:.1f} pipeline; gpu decode p50 {g.get(\"p50_ms\", 0):.3f} ms busy {g.get(\"busy_fraction\", 0):.2f}; read+decode p50 {d.get(\"p50_ms\", 0):.2f} ms busy {d.get(\"busy_fraction\", 0):.2f}')" 2>/dev/null)"
      grep -h "GPU decode: \|GPU PNG: \|nvJPEG host time\|codec library allocations" $w/log | sed 's/^.*INFO //' | tee -a "$summary"
      # NVJPEG_KEEP=1 brings each run's log and report back.
      if [ -n "${NVJPEG_KEEP:-}" ]; then
        cp $w/log "$out/nvjpeg-$name-$label.log"; cp $w/r.json "$out/nvjpeg-$name-$label.json" 2>/dev/null
      fi
      rm -rf $w/out-$label
    done
  done
  rm -rf /dev/shm/dv-nvjpeg
fi

if want j2k && [ -d "$stage/decode-data/j2k" ]; then
  # JPEG 2000 lossless 512², 1000 slices (the stage's distinct slices copied): CPU decode, GPU
  # decode with a handle per device (default; with the default fast PNG the GPU compresses too)
  # and per worker, and GPU decode with the writers compressing PNG.
  w=/dev/shm/dv-j2k; rm -rf $w
  n=$(replicate "$stage/decode-data/j2k" 1000 $w/in)
  for cfg in "cpu:--backend cpu" "gpu:--backend cuda" "gpu-worker-handles:--backend cuda" \
             "gpu-decode+cpu-png:--backend cuda --gpu-encode cpu"; do
    label=${cfg%%:*}; args=${cfg#*:}
    handles=device; [ $label = gpu-worker-handles ] && handles=worker
    rm -f $w/r.json; t0=$(date +%s.%N)
    DICOMFLOW_NVJPEG2K_HANDLES=$handles timeout 120 "$bin" -v run $w/in -o $w/out-$label $args --no-tui \
      --report $w/r.json > $w/log 2>&1
    rc=$?; t1=$(date +%s.%N)
    say "   j2k 512² x $n $label: rc $rc, $(python3 -c "
import json; r=json.load(open('$w/r.json')); e=r['result']['elapsed']
print(f'{$n/($t1-$t0):.1f} slices/s whole, {$n/e:.1f} pipeline')" 2>/dev/null); $(stages $w/r.json)"
    grep -h "allocations" $w/log | tail -1 | tee -a "$summary"
    rm -rf $w/out-$label
  done
  rm -rf $w
fi

if want listen; then
  timeout 200 python3 "$here/scripts/bench_listen.py" "$bin" /dev/shm/dv-listen --sender dicomflow \
    --backend cuda --associations 1,16 --slices 2000 --repeat 1 --rate 200 > "$out/listen.txt" 2>&1
  say "   listen:"; tail -12 "$out/listen.txt" | tee -a "$summary"
  rm -rf /dev/shm/dv-listen
fi

if want decode && [ -d "$stage/decode-data/s512" ]; then
  timeout 240 python3 "$here/scripts/bench_decode.py" "$bin" "$stage/decode-data" "$out/decode" \
    --sizes 512 --slices 1000 --series j2k --streams 16 > "$out/decode.txt" 2>&1
  say "   decode:"; tail -8 "$out/decode.txt" | tee -a "$summary"
fi
say "== done $(date -u +%FT%TZ)"
