#!/usr/bin/env bash
# Sharding on one host: N shard processes at once (`run --shard I/N`) against one process, on
# the same synthetic series, in alternating rounds (the machines are noisy: compare within one
# run of this script). Shows what splitting a job costs or gains when the shards share a host
# and its GPU(s).
#
# usage: scripts/bench_shard.sh DICOMFLOW [WORK_DIR] [options]
#   --slices N     slices in the series (default 4000)
#   --size S       rows = columns (default 512)
#   --shards N     shard processes (default 4)
#   --rounds R     alternating rounds; the median wall time is reported (default 3)
#   --backend B    passed to every run (default: cuda when nvidia-smi sees a GPU, else cpu)
#
# Configurations, each timed from the first process's start to the last one's exit:
#   one process         dicomflow run IN -o OUT
#   N shards            N processes at once, each sized for the whole host (threads from all
#                       cores), all on GPU 0 (or spread with --gpus I mod GPUS on a multi-GPU host)
#   N shards, pinned    the same, each pinned with taskset to 1/N of the cores (dicomflow sizes
#                       its threads from its affinity)
# Every configuration's outputs are checked against the one-process run's (byte for byte) and
# the shard reports merged (`report merge` must exit 0). Prints a table and writes it to
# WORK_DIR/table.txt.
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,22p' "$0" >&2
  exit 2
fi
dicomflow=$(realpath "$1")
shift
work=/tmp/dicomflow-bench-shard
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  work=$1
  shift
fi
slices=4000 size=512 shards=4 rounds=3 backend=
while [ $# -gt 0 ]; do
  case $1 in
    --slices) slices=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
if [ -z "$backend" ]; then
  backend=$([ "$gpus" -gt 0 ] && echo cuda || echo cpu)
fi
cores=$(nproc)
per_shard=$((cores / shards > 0 ? cores / shards : 1))

mkdir -p "$work"
input=$work/in-$size-$slices
if [ ! -d "$input" ]; then
  "$dicomflow" -q synth "$input" --size "$size" --slices "$slices"
fi
common=(-q --no-tui --backend "$backend")

now() { date +%s.%N; }

# one: a single process. shards / pinned: N processes at once.
run_config() {
  local config=$1 out=$2
  rm -rf "$out"
  local t0 t1
  t0=$(now)
  if [ "$config" = one ]; then
    "$dicomflow" run "$input" -o "$out" "${common[@]}" --report "$out.report.json"
  else
    local pids=() i gpu_opt cpu_list
    for ((i = 0; i < shards; i++)); do
      gpu_opt=()
      if [ "$gpus" -gt 1 ] && [ "$backend" != cpu ]; then
        gpu_opt=(--gpus "$((i % gpus))")
      fi
      if [ "$config" = pinned ]; then
        local first=$(((i * per_shard) % cores))
        cpu_list="$first-$((first + per_shard - 1))"
        taskset -c "$cpu_list" "$dicomflow" run "$input" -o "$out" "${common[@]}" \
          --shard "$i/$shards" "${gpu_opt[@]}" &
      else
        "$dicomflow" run "$input" -o "$out" "${common[@]}" --shard "$i/$shards" "${gpu_opt[@]}" &
      fi
      pids+=($!)
    done
    local failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    if [ $failed = 1 ]; then
      echo "a shard process failed ($config)" >&2
      exit 1
    fi
  fi
  t1=$(now)
  echo "$t0 $t1" | awk '{printf "%.3f\n", $2 - $1}'
}

declare -A walls
configs=(one shards pinned)
echo "series: $slices × ${size}², $shards shards, backend $backend, $cores cores, $gpus GPU(s)"
for ((r = 1; r <= rounds; r++)); do
  for c in "${configs[@]}"; do
    w=$(run_config "$c" "$work/out-$c")
    walls[$c]="${walls[$c]:-} $w"
    echo "round $r: $c ${w} s"
    sleep 1 # one run's exit (unpinning memory, closing the GPU context) stays out of the next
  done
  # The outputs of every configuration are the one process's, byte for byte; the shards'
  # reports merge into a complete job.
  if [ "$r" = 1 ]; then
    for c in shards pinned; do
      diff -rq -x .dicomflow "$work/out-one" "$work/out-$c" >/dev/null \
        || { echo "$c: outputs differ from one process's" >&2; exit 1; }
      "$dicomflow" -q report merge "$work/out-$c/.dicomflow/reports" --shards "$shards" \
        -o "$work/merged-$c.json" || { echo "$c: the merge is incomplete" >&2; exit 1; }
    done
  fi
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
backend_of() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["backend"]["name"] + " (" + d["backend"]["transfer"] + ")")' "$1" 2>/dev/null || echo "?"
}
one=$(echo "${walls[one]}" | median)
{
  printf '%-32s %9s %10s %9s  %s\n' configuration "wall s" "slices/s" "vs one" "walls (s)"
  for c in "${configs[@]}"; do
    m=$(echo "${walls[$c]}" | median)
    label=$c
    case $c in
      one) label="one process, $(backend_of "$work/out-one.report.json")" ;;
      shards) label="$shards shards, each host-sized" ;;
      pinned) label="$shards shards, $per_shard core(s) each" ;;
    esac
    awk -v l="$label" -v m="$m" -v n="$slices" -v o="$one" -v all="${walls[$c]}" \
      'BEGIN {printf "%-32s %9.3f %10.1f %8.2fx  %s\n", l, m, n / m, o / m, all}'
  done
} | tee "$work/table.txt"
