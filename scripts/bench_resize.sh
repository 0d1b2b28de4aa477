#!/usr/bin/env bash
# What resizing costs end to end (issue 21, acceptance 2: at most 10 % of the throughput at
# 2000² -> 512² on the H200): 1000 synth CT slices of 2000² rendered to PNG as they are and
# resized to 512² (bilinear, area), in alternating runs (scripts/bench_ab.py: medians of
# wall-clock slices/s), then each configuration's compute stage per slice from every run's
# report (the chain, the operators' kernels and the PNG row filter on the GPU; the chain and
# the operators on the CPU backend). The resize costs at most 10 % when the "resize" rows keep
# at least 90 % of the "full" row's slices/s; the compute p50 shows the kernels' own share.
#
# usage: [SIZES=2000:1000] scripts/bench_resize.sh [DICOMFLOW] [WORK_DIR] [BACKEND] [ROUNDS]
#   e.g. scripts/bench_resize.sh target/release/dicomflow /dev/shm/w cuda 5
set -euo pipefail
B=$(readlink -f "${1:-target/release/dicomflow}")
W=${2:-/dev/shm/dicomflow-resize}
BACKEND=${3:-cuda}
ROUNDS=${4:-5}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$W/reports"
python3 "$here/bench_ab.py" "$B" "$W" --sizes "${SIZES:-2000:1000}" --rounds "$ROUNDS" \
  --keep-reports "$W/reports" \
  --config "full=--backend $BACKEND" \
  --config "resize=--backend $BACKEND --resize 512x512" \
  --config "resize-area=--backend $BACKEND --resize 512x512 --interpolation area"
python3 - "$W/reports" <<'PY'
import collections, json, os, statistics, sys
d = sys.argv[1]
compute = collections.defaultdict(list)
rate = collections.defaultdict(list)
for name in sorted(os.listdir(d)):
    label = name.split("-", 1)[1].rsplit("-", 1)[0]
    r = json.load(open(os.path.join(d, name)))
    stages = {s["name"]: s for s in r["statistics"]["stages"]}
    if "compute" in stages:
        compute[label].append(stages["compute"]["p50_ms"])
    rate[label].append(r["result"]["totals"]["frames_written"] / r["statistics"]["elapsed"])
full = statistics.median(rate["full"]) if rate["full"] else None
print(f"\n{'config':<14} {'compute p50 ms':>15} {'pipeline slices/s':>18} {'vs full':>8}")
for label in rate:
    c = statistics.median(compute[label]) if compute[label] else float("nan")
    v = statistics.median(rate[label])
    ratio = f"{v / full:7.2f}x" if full else ""
    print(f"{label:<14} {c:15.3f} {v:18.1f} {ratio:>8}")
PY
