#!/usr/bin/env python3
"""Alternating A/B runs of dicomflow configurations on synth series, with medians.

On a noisy host (the lent GPU VM, the 2-core box) only configurations run alternately, on the
same files and the same machine, can be compared; put WORK on tmpfs (/dev/shm) so the file
system's write-back does not drift across the runs.

Usage:
  bench_ab.py DICOMFLOW WORK [--sizes 512:1000,2000:1000] [--rounds 6]
              --config 'LABEL=ARGS' [--config ...]

ARGS are `dicomflow run` arguments, shell-quoted; leading NAME=VALUE words are set in the
environment of that run only, and a leading @PATH word runs the binary at PATH instead of
DICOMFLOW (to compare two builds). Every run writes WORK/o (removed first) and a report; one row is
printed per run, then the medians per size and configuration: wall s (whole command), pipeline s
(the report's elapsed; --keep-reports DIR keeps every report), overlap (the report's pool figure), the busiest pool and how busy, and
p50/p95 latency.
"""
import argparse, json, os, shlex, shutil, statistics, subprocess, sys, time


def parse_config(spec, default_binary):
    label, _, args = spec.partition("=")
    words = shlex.split(args)
    env, binary = {}, default_binary
    while words and (words[0].startswith("@") or ("=" in words[0] and not words[0].startswith("-"))):
        w = words.pop(0)
        if w.startswith("@"):
            binary = w[1:]
        else:
            k, _, v = w.partition("=")
            env[k] = v
    return label, env, binary, words


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dicomflow")
    ap.add_argument("work")
    ap.add_argument("--sizes", default="512:1000,2000:1000")
    ap.add_argument("--keep-reports", metavar="DIR",
                    help="copy every run's report to DIR/SIZE-LABEL-ROUND.json")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--config", action="append", required=True)
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    a = ap.parse_args()
    configs = [parse_config(c, a.dicomflow) for c in a.config]
    os.makedirs(a.work, exist_ok=True)
    series = []
    for item in a.sizes.split(","):
        size, n = (int(x) for x in item.split(":"))
        d = os.path.join(a.work, f"s{size}x{n}")
        if not os.path.isdir(d):
            subprocess.run([a.dicomflow, "-q", "synth", d, "--size", str(size), "--slices", str(n)],
                           check=True)
        series.append((size, n, d))
    out = os.path.join(a.work, "o")
    report = os.path.join(a.work, "report.json")
    rows = {}
    print(f"{'size':>5} {'config':<24} {'wall s':>7} {'pipe s':>7} {'overlap':>7} "
          f"{'busiest':<18} {'p50':>5} {'p95':>5}", flush=True)
    for size, n, d in series:
        # One throw-away run per series: the first process after synth pays for cold caches.
        subprocess.run([configs[0][2], "-q", "run", d, "-o", out] + configs[0][3], check=False,
                       env={**os.environ, **configs[0][1]})
        for round_ in range(a.rounds):
            for label, env, binary, args in configs:
                shutil.rmtree(out, ignore_errors=True)
                if os.path.exists(report):
                    os.remove(report)
                time.sleep(a.pause)
                t0 = time.perf_counter()
                p = subprocess.run([binary, "-q", "run", d, "-o", out, "--report", report]
                                   + args, env={**os.environ, **env})
                wall = time.perf_counter() - t0
                if p.returncode != 0 or not os.path.exists(report):
                    print(f"{size:>5} {label:<24} failed (exit {p.returncode})", flush=True)
                    continue
                r = json.load(open(report))
                if a.keep_reports:
                    os.makedirs(a.keep_reports, exist_ok=True)
                    name = f"{size}-{label.replace(' ', '_')}-{round_}.json"
                    shutil.copy(report, os.path.join(a.keep_reports, name))
                st = r["statistics"]
                pools = {q["pool"]: q for q in st["pools"]}
                busiest = st["overlap"]["busiest"]
                lat = st.get("latency") or {}
                row = dict(wall=wall, pipe=st["elapsed"], overlap=st["overlap"]["ratio"],
                           busy=pools[busiest]["busy_fraction"] if busiest in pools else 0.0,
                           p50=lat.get("p50_ms", 0.0), p95=lat.get("p95_ms", 0.0))
                rows.setdefault((size, n, label), []).append(row)
                print(f"{size:>5} {label:<24} {wall:7.3f} {row['pipe']:7.3f} {row['overlap']:7.3f} "
                      f"{busiest + ' ' + format(row['busy'], '.0%'):<18} {row['p50']:5.1f} "
                      f"{row['p95']:5.1f}", flush=True)
    print(f"\nmedians ({a.rounds} alternating rounds)")
    print(f"{'size:slices':>11} {'config':<24} {'runs':>4} {'wall s':>7} {'pipe s':>7} {'slices/s':>9} "
          f"{'overlap':>7} {'ov. range':>11} {'p50':>5} {'p95':>5}")
    for (size, n, label), rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        ovs = [r["overlap"] for r in rs]
        print(f"{f'{size}:{n}':>11} {label:<24} {len(rs):>4} {med['wall']:7.3f} {med['pipe']:7.3f} "
              f"{n / med['wall']:9.1f} {med['overlap']:7.3f} {min(ovs):5.2f}-{max(ovs):4.2f} "
              f"{med['p50']:5.1f} {med['p95']:5.1f}")


if __name__ == "__main__":
    sys.exit(main())
