#!/usr/bin/env bash
# Where the time of JPEG 2000 GPU decode goes (issue 17): the same 16-stream run repeated, with
# the GPU's utilisation sampled alongside (`nvidia-smi dmon`), and, where Nsight Systems is
# installed, one run under `nsys` whose kernel table is reduced on the machine to the figures
# that answer the question: how many kernels run at once, how busy the GPU is, which kernels
# dominate.
#
# usage: scripts/j2k_timeline.sh STAGE OUT [SLICES] [REPEAT]
#   STAGE  as for scripts/device_verify.sh (bin/dicomflow(.xz), libs/*.xz, decode-data/j2k)
#   OUT    where logs and tables go (summary.txt)
#   environment: J2K_DATA (the folder under decode-data, default j2k), J2K_CPU=1 (a CPU run for
#   the ratio), J2K_STRATEGIES=1 (each transfer forced), J2K_CONN / J2K_STREAMS (lists),
#   J2K_ARGS (more flags for the J2K_STREAMS runs, e.g. --gpu-decode all for other codecs)
set -uo pipefail
stage=$(readlink -f "$1")
out=$(readlink -f "$2")
slices=${3:-3000}
repeat=${4:-4}
mkdir -p "$out"
summary=$out/summary.txt
say() { echo "$*" | tee -a "$summary"; }
# shellcheck source=scripts/stage_unpack.sh
. "$(dirname "$0")/stage_unpack.sh"
stage_unpack "$stage" jt

w=/dev/shm/jt; rm -rf $w
n=$(replicate "$stage/decode-data/${J2K_DATA:-j2k}" "$slices" $w/in)
say "== $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(nproc) cores; $n slices; $(date -u +%FT%TZ)"

one_run() { # label args...
  local label=$1; shift
  rm -rf $w/out $w/r.json
  nvidia-smi dmon -s u -d 1 > "$out/dmon-$label.txt" 2>&1 &
  local dmon=$!
  local t0 t1
  t0=$(date +%s.%N)
  timeout 200 "$@" > "$out/log-$label.txt" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  kill $dmon 2>/dev/null; wait $dmon 2>/dev/null
  say "   $label: rc $rc, $(python3 - "$w/r.json" "$n" "$t0" "$t1" "$out/dmon-$label.txt" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2]); t0, t1 = float(sys.argv[3]), float(sys.argv[4])
st = {s['name']: s for s in r['statistics']['stages']}
g = st.get('gpu decode', {})
sm = []
for line in open(sys.argv[5]):
    p = line.split()
    if p and p[0].isdigit() and len(p) > 1 and p[1].isdigit():
        sm.append(int(p[1]))
busy = [s for s in sm if s > 0]
print(f"{n/(t1-t0):.1f} slices/s whole, {n/r['result']['elapsed']:.1f} pipeline; "
      f"gpu decode p50 {g.get('p50_ms', 0):.2f} ms busy {g.get('busy_fraction', 0):.2f}; "
      f"SM util samples (1 s) {busy}")
EOF
)"
}

# The CPU backend on the same files, for the ratio.
[ -n "${J2K_CPU:-}" ] && one_run cpu "$bin" -v run $w/in -o $w/out --backend cpu --no-tui --report $w/r.json
for i in $(seq 1 "$repeat"); do
  one_run "gpu-$i" "$bin" -v run $w/in -o $w/out --backend cuda --no-tui --report $w/r.json
done
# Each transfer strategy forced, and the pinned one with more hardware queues (the driver maps
# streams onto CUDA_DEVICE_MAX_CONNECTIONS of them, 8 by default: beyond, streams share a queue
# and a copy waiting for its kernel holds back other streams' work).
if [ -n "${J2K_STRATEGIES:-}" ]; then
  for i in 1 2; do
    for t in zero-copy pinned; do
      one_run "$t-$i" "$bin" -v run $w/in -o $w/out --backend cuda --transfer $t --no-tui --report $w/r.json
    done
    ( export CUDA_DEVICE_MAX_CONNECTIONS=32
      one_run "pinned-conn32-$i" "$bin" -v run $w/in -o $w/out --backend cuda --transfer pinned \
        --no-tui --report $w/r.json )
  done
fi

# Hardware queues (J2K_CONN="8 16 24 32") and decode streams (J2K_STREAMS="16 24 32").
for c in ${J2K_CONN:-}; do
  ( export CUDA_DEVICE_MAX_CONNECTIONS=$c
    one_run "queues-$c" "$bin" -v run $w/in -o $w/out --backend cuda --no-tui --report $w/r.json
    grep -h "CUDA ready" "$out/log-queues-$c.txt" | head -1 | sed 's/.*INFO/     /' | tee -a "$summary" )
done
for s in ${J2K_STREAMS:-}; do
  one_run "streams-$s" "$bin" -v run $w/in -o $w/out --backend cuda --streams $s --decode-streams $s ${J2K_ARGS:-} \
    --no-tui --report $w/r.json
done

nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$nsys" ]; then
  say "   nsys: $nsys"
  rm -rf $w/out $w/r.json
  timeout 300 "$nsys" profile -t cuda,osrt -o $w/prof --force-overwrite true \
    "$bin" run $w/in -o $w/out --backend cuda --no-tui --report $w/r.json > "$out/nsys-log.txt" 2>&1
  timeout 200 "$nsys" export --type sqlite -o $w/prof.sqlite $w/prof.nsys-rep >> "$out/nsys-log.txt" 2>&1
  python3 - $w/prof.sqlite <<'EOF' | tee -a "$summary"
import sqlite3, sys, collections
db = sqlite3.connect(sys.argv[1])
names = dict(db.execute("select id, value from StringIds"))
ks = db.execute("select start, end, streamId, shortName from CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
if not ks:
    print("   no kernels recorded"); sys.exit()
t0 = min(k[0] for k in ks); t1 = max(k[1] for k in ks)
ev = sorted([(k[0], 1) for k in ks] + [(k[1], -1) for k in ks])
cur = busy = 0; last = t0; area = 0
for t, d in ev:
    if cur > 0: busy += t - last
    area += cur * (t - last); cur += d; last = t
span = t1 - t0
print(f"   kernels {len(ks)} on {len(set(k[2] for k in ks))} streams over {span/1e6:.1f} ms; "
      f"GPU busy (any kernel) {busy/span:.2f}; mean kernels in flight while busy {area/max(busy,1):.2f}")
per = collections.defaultdict(lambda: [0, 0])
for s, e, _, n in ks:
    per[names.get(n, n)][0] += 1; per[names.get(n, n)][1] += e - s
for name, (c, t) in sorted(per.items(), key=lambda x: -x[1][1])[:12]:
    print(f"   {t/1e6:9.1f} ms {c:7d}x {t/c/1e3:8.1f} us  {name[:80]}")
try:
    ms = db.execute("select start, end, copyKind, bytes from CUPTI_ACTIVITY_KIND_MEMCPY").fetchall()
    tot = sum(m[1] - m[0] for m in ms)
    print(f"   memcpy {len(ms)} calls, {tot/1e6:.1f} ms, {sum(m[3] for m in ms)/1e6:.1f} MB")
except sqlite3.Error as e:
    print(f"   memcpy table: {e}")
try:
    rows = db.execute("select nameId, count(*), sum(end-start) from CUPTI_ACTIVITY_KIND_RUNTIME "
                      "group by nameId order by 3 desc limit 10").fetchall()
    for nid, c, t in rows:
        print(f"   api {t/1e6:9.1f} ms {c:7d}x  {names.get(nid, nid)}")
except sqlite3.Error as e:
    print(f"   runtime table: {e}")
EOF
else
  say "   nsys: not installed on this machine"
fi
rm -rf $w
say "== done $(date -u +%FT%TZ)"
