#!/usr/bin/env python3
"""Real-time ingest benchmark, all in one run on the same files (issue 19, acceptance 6):
`dicomflow listen` receiving, rendering and writing PNGs against DCMTK's `storescp` only
storing, with the same sender over 1 and N concurrent associations; then arrival -> PNG
latency at a paced rate.

usage: scripts/bench_listen.py DICOMFLOW OUT_DIR [--slices 300] [--size 512]
           [--associations 1,4] [--repeat 3] [--rate 200] [--latency-slices 1000]
           [--latency-associations 1,2]
           [--sender auto|storescu|dicomflow] [--backend auto|cpu|cuda] [--no-storescp]

Sender: DCMTK's storescu (TCP_NODELAY=1, one process per association, each with its share of
the files) when installed, else `dicomflow bench listen` (dicom-ul, one thread per
association); `--sender` forces one. The paced latency runs always use `dicomflow bench listen
--rate` (storescu cannot pace).

Throughput rows: instances/s = files / (first send -> last store acknowledged), and for listen
also files / (first send -> last PNG on disk), i.e. received, rendered and written. listen runs
twice per repetition: durable (the default: acknowledged after a syncfs) and with
`listen.durable = false` (acknowledged once in the spool, storescp's guarantee: storescp
never syncs). With more than one association storescp runs twice: as it comes (one
association at a time) and with `--fork` (a process per association). storescp runs with
TCP_NODELAY=1 too (DCMTK reads it on both sides). Tools
alternate within each repetition, so load on the box hits them alike; the best repetition is
kept and the spread printed.

Latency rows: `listen --report` after a paced run (durable and not, over 1 and 2
associations sharing the rate): p50/p95/p99/max of arrival (last byte of the instance
received) -> PNG renamed into place, from the report's live section, and the rate the sender
reached (a durable association is bounded by its sync per instance).

On a machine without DCMTK (the H200 host) storescp rows are skipped:
  scripts/bench_listen.py target/release/dicomflow /tmp/bl --sender dicomflow \\
      --backend cuda --associations 1,16 --rate 200
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

STORESCU = "/usr/bin/storescu"
STORESCP = "/usr/bin/storescp"


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def count_pngs(d):
    try:
        return sum(1 for n in os.listdir(d) if n.endswith(".png"))
    except FileNotFoundError:
        return 0


def wait_port(port, limit=30):
    import socket
    end = time.time() + limit
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def stop(proc, limit=60):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def send(a, files, port, ae, associations, env):
    """Sends every file over `associations` associations; (seconds, failures)."""
    t0 = time.perf_counter()
    if a.sender == "storescu":
        groups = [files[i::associations] for i in range(associations)]
        procs = [subprocess.Popen([STORESCU, "-aec", ae, "127.0.0.1", str(port)] + g,
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for g in groups if g]
        fails = sum(p.wait() != 0 for p in procs)
    else:
        r = subprocess.run([a.dicomflow, "bench", "listen", "--to", f"127.0.0.1:{port}",
                            "--called-ae", ae, "--associations", str(associations), a.series],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        fails = r.returncode != 0
    return time.perf_counter() - t0, fails


def run_storescp(a, files, associations, env, fork=False):
    port = free_port()
    store = os.path.join(a.work, "storescp")
    shutil.rmtree(store, ignore_errors=True)
    os.makedirs(store)
    # Without --fork storescp serves one association at a time (its default); with it, a
    # child process per association.
    p = subprocess.Popen([STORESCP, "-aet", "STORESCP", "-od", store, str(port)]
                         + (["--fork"] if fork else []), env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_port(port):
            raise RuntimeError("storescp did not start")
        secs, fails = send(a, files, port, "STORESCP", associations, env)
        stored = len(os.listdir(store))
    finally:
        stop(p)
    return {"acked_s": secs, "done_s": secs, "fails": fails, "count": stored}


def start_listen(a, out, port, durable, env, extra=()):
    cfg = os.path.join(a.work, f"listen-{'d' if durable else 'n'}.toml")
    with open(cfg, "w") as f:
        f.write(f"[listen]\ndurable = {'true' if durable else 'false'}\n")
    cmd = [a.dicomflow, "listen", "--host", "127.0.0.1", "--port", str(port), "-o", out,
           "-c", cfg, "--no-tui", "-q", "--backend", a.backend] + list(extra)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not wait_port(port):
        stop(p)
        raise RuntimeError("listen did not start: " + p.stderr.read().decode())
    return p


def run_listen(a, files, associations, durable, env):
    port = free_port()
    out = os.path.join(a.work, "listen-out")
    shutil.rmtree(out, ignore_errors=True)
    p = start_listen(a, out, port, durable, env)
    try:
        t0 = time.perf_counter()
        secs, fails = send(a, files, port, "DICOMFLOW", associations, env)
        while count_pngs(out) < len(files) and time.perf_counter() - t0 < 600:
            time.sleep(0.002)
        done = time.perf_counter() - t0
        count = count_pngs(out)
    finally:
        stop(p)
    return {"acked_s": secs, "done_s": done, "fails": fails, "count": count}


def latency(a, env, durable, associations):
    port = free_port()
    out = os.path.join(a.work, "latency-out")
    shutil.rmtree(out, ignore_errors=True)
    report = os.path.join(a.work, "latency.json")
    p = start_listen(a, out, port, durable, env, ["--report", report])
    try:
        r = subprocess.run([a.dicomflow, "bench", "listen", "--to", f"127.0.0.1:{port}",
                            "--associations", str(associations), "--rate", str(a.rate),
                            a.latency_series],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sender = r.stdout.strip()
        t0 = time.time()
        while count_pngs(out) < a.latency_slices and time.time() - t0 < 60:
            time.sleep(0.01)
    finally:
        stop(p)
    live = json.load(open(report))["live"]
    return live, sender


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dicomflow")
    ap.add_argument("out")
    ap.add_argument("--slices", type=int, default=300)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--associations", default="1,4")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--latency-slices", type=int, default=1000)
    ap.add_argument("--latency-associations", default="1,2",
                    help="association counts of the paced runs (the rate is shared among them)")
    ap.add_argument("--sender", default="auto", choices=["auto", "storescu", "dicomflow"])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--no-storescp", action="store_true")
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/tmp/dicomflow-bench-listen"))
    a = ap.parse_args()
    a.dicomflow = os.path.abspath(a.dicomflow)
    os.makedirs(a.out, exist_ok=True)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    have_dcmtk = os.path.exists(STORESCU) and os.path.exists(STORESCP)
    if a.sender == "auto":
        a.sender = "storescu" if have_dcmtk else "dicomflow"
    env = dict(os.environ, TCP_NODELAY="1")
    a.series = os.path.join(a.work, "series")
    subprocess.run([a.dicomflow, "synth", a.series, "--size", str(a.size), "--slices", str(a.slices), "-q"], check=True)
    files = sorted(os.path.join(a.series, n) for n in os.listdir(a.series))
    table = open(os.path.join(a.out, "table.txt"), "a")

    def emit(line):
        print(line, flush=True)
        table.write(line + "\n")
        table.flush()

    emit(f"# bench_listen: {a.slices} x {a.size}^2 CT, sender {a.sender}, backend {a.backend}, "
         f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")
    emit(f"{'assoc':>5} {'receiver':<36} {'acked/s':>8} {'done/s':>8} {'spread':>7} {'stored':>6} {'fails':>5}")
    tools = [("listen (durable), render + PNG", lambda n: run_listen(a, files, n, True, env)),
             ("listen (durable = false), render + PNG", lambda n: run_listen(a, files, n, False, env))]
    if have_dcmtk and not a.no_storescp:
        tools.insert(0, ("storescp (store only)", lambda n: run_storescp(a, files, n, env)))
        tools.insert(1, ("storescp --fork (store only)",
                         lambda n: run_storescp(a, files, n, env, fork=True)))
    # --fork changes nothing for one association.
    only_several = {"storescp --fork (store only)"}
    for n in [int(x) for x in a.associations.split(",")]:
        here = [(name, fn) for name, fn in tools if n > 1 or name not in only_several]
        results = {name: [] for name, _ in here}
        for _ in range(a.repeat):
            for name, fn in here:
                # Each receiver starts with nothing waiting to be written back: a previous
                # run's unsynced files (storescp's, or listen's with durable = false) would
                # otherwise be flushed by the kernel during the next run and slow it.
                os.sync()
                time.sleep(0.5)
                results[name].append(fn(n))
        for name, rs in results.items():
            best = min(rs, key=lambda r: r["done_s"])
            rates = sorted(len(files) / r["done_s"] for r in rs)
            emit(f"{n:>5} {name:<36} {len(files) / best['acked_s']:>8.0f} {len(files) / best['done_s']:>8.0f} "
                 f"{rates[0]:>3.0f}-{rates[-1]:<3.0f} {best['count']:>6} {sum(r['fails'] for r in rs):>5}")
    if a.rate > 0:
        a.latency_series = os.path.join(a.work, "latency-series")
        subprocess.run([a.dicomflow, "synth", a.latency_series, "--size", str(a.size),
                        "--slices", str(a.latency_slices), "--seed", "7", "-q"], check=True)
        for n in [int(x) for x in a.latency_associations.split(",")]:
            for durable in (True, False):
                live, sender = latency(a, env, durable, n)
                p50, p95, p99, mx = live["latency_ms"]
                mode = "durable" if durable else "durable = false"
                emit(f"paced {a.rate:.0f}/s, {n} association(s), {mode}: arrival -> PNG p50 {p50:.2f} ms, "
                     f"p95 {p95:.2f}, p99 {p99:.2f}, max {mx:.2f}; rendered {live['rendered']}; {sender}")


if __name__ == "__main__":
    sys.exit(main())
