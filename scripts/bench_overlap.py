#!/usr/bin/env python3
"""Overlap (the report's `statistics.overlap`) and throughput of dicomflow's GPU and CPU backends,
default sizing and 12 writers, on 4000 x 512x512 and 1000 x 2000x2000 synth series (BENCHMARKS.md,
"Overlap"). SMALL=1 uses tiny series (a smoke test of the script itself).

Usage: bench_overlap.py DICOMFLOW WORKDIR OUTDIR
Prints one row per run: size, config, slices/s (wall, start-up and exit included), pipeline s,
overlap (report), busiest pool, writers, p50/p95 latency.
"""
import json, os, shutil, subprocess, sys, time

df, work, out = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
os.makedirs(out, exist_ok=True)
series = {}
SIZES = ((64, 40), (128, 10)) if os.environ.get("SMALL") else ((512, 4000), (2000, 1000))
for size, n in SIZES:
    d = os.path.join(work, f"s{size}")
    subprocess.run([df, "-q", "synth", d, "--size", str(size), "--slices", str(n)], check=True)
    for f in os.listdir(d):
        with open(os.path.join(d, f), "rb") as fh:
            while fh.read(1 << 24):
                pass
    series[size] = (d, n)

configs = [
    ("cuda default", ["--backend", "cuda", "--transfer", "zero-copy"]),
    ("cuda 12 writers", ["--backend", "cuda", "--transfer", "zero-copy", "--writers", "12"]),
    ("cpu default", ["--backend", "cpu"]),
]
log = open(os.path.join(out, "overlap.txt"), "w")
def emit(line):
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()

emit(f"{'size':<6} {'config':<18} {'rep':>3} {'slices/s':>9} {'pipe s':>7} {'overlap':>7} {'busiest':<15} {'wr':>3} {'p50':>6} {'p95':>6}")
# One throw-away run: the first GPU process on a fresh machine is always slow.
warm = os.path.join(work, "o")
largest = SIZES[-1][0]
subprocess.run([df, "-q", "run", series[largest][0], "-o", warm, "--backend", "cuda"], check=False)
shutil.rmtree(warm, ignore_errors=True)
for size, (d, n) in series.items():
    for rep in (1, 2):
        for label, args in configs:
            if label.startswith("cpu") and size == largest and rep == 2:
                continue
            time.sleep(1)
            o = os.path.join(work, "o")
            shutil.rmtree(o, ignore_errors=True)
            rep_path = os.path.join(out, f"r-{size}-{label.replace(' ', '_')}-{rep}.json")
            t0 = time.perf_counter()
            p = subprocess.run([df, "-q", "run", d, "-o", o, "--report", rep_path] + args)
            secs = time.perf_counter() - t0
            if not os.path.exists(rep_path):
                emit(f"{size:<6} {label:<18} {rep:>3}  failed (exit {p.returncode}, no report)")
                continue
            r = json.load(open(rep_path))
            st = r["statistics"]
            ov = st["overlap"]
            emit(f"{size:<6} {label:<18} {rep:>3} {n / secs:>9.1f} {st['elapsed']:>7.3f} {ov['ratio']:>7.2f} "
                 f"{ov['busiest']:<15} {r['result']['sizing']['writers']:>3} "
                 f"{st['latency']['p50_ms']:>6.1f} {st['latency']['p95_ms']:>6.1f}  rc={p.returncode}")
            shutil.rmtree(o, ignore_errors=True)
