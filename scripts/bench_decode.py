#!/usr/bin/env python3
"""Compressed input, one run per table: for each compressed series, on the same files and warm
page cache, dicomflow's CPU backend, the CUDA backend with GPU decode (gpu.decode = "lossless",
or "all" for lossy syntaxes), the CUDA backend with gpu.decode = "none" (the CPU decodes), and
dicom-toimage --8bit as one process and as one process per core when PEERS has it.

usage: scripts/bench_decode.py DICOMFLOW DATA OUT [--slices 1000] [--repeat R] [--peers DIR]
                               [--sizes 512,2000] [--slices-2000 100] [--series j2k,jls,...]
  DATA is what scripts/make_decode_bench_data.sh wrote (s512/<series>/, s2000/<series>/: a few
  distinct slices each); they are copied into sub-folders up to the slice count. Prints
  slices/s, p50/p95 latency (first byte read -> output renamed), the busy fraction of the
  stages that bound the run (read+decode on the loaders, gpu decode and compute on the render
  workers, encode on the writers), and how many frames the GPU decoded.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

# Series that go to the GPU only with gpu.decode = "all": lossy ones, and lossless JPEG (exact
# on the GPU from 256x256, but slower there than the CPU decoders of a 16-core host).
ALL_ONLY = {"j2k_lossy", "baseline", "jls"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dicomflow")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--slices", type=int, default=1000)
    ap.add_argument("--slices-2000", type=int, default=100)
    ap.add_argument("--sizes", default="512,2000")
    ap.add_argument("--series", default="j2k,jls,baseline,j2k_lossy")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--streams", default="", help="comma list of gpu.streams for the GPU-decode runs "
                                                  "(default: the configuration's)")
    ap.add_argument("--peers", default="")
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/tmp/dicomflow-bench-decode"))
    ap.add_argument("--pause", type=float, default=0.5)
    a = ap.parse_args()
    df = os.path.abspath(a.dicomflow)
    os.makedirs(a.out, exist_ok=True)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    cores = os.cpu_count() or 1
    table = open(os.path.join(a.out, "table.txt"), "w")
    rows = []

    def emit(line):
        print(line, flush=True)
        table.write(line + "\n")
        table.flush()

    emit(f"{'series':<16} {'config':<34} {'slices/s':>9} {'p50 ms':>7} {'p95 ms':>7} "
         f"{'load':>5} {'gpudec':>6} {'gpu ms':>6} {'comp':>5} {'enc':>5} {'gpu fr':>6} {'fallbk':>6} {'cpu ms/sl':>9}")

    def run(series, label, cmd, report=None):
        best = None
        for attempt in range(a.repeat):
            time.sleep(a.pause)
            dst = os.path.join(a.work, "out")
            shutil.rmtree(dst, ignore_errors=True)
            os.makedirs(dst)
            log = open(os.path.join(a.work, "log"), "wb")
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, shell=isinstance(cmd, str), stdout=log, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(p.pid, 0)  # the child's own CPU time
            secs = time.perf_counter() - t0
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                tail = open(os.path.join(a.work, "log"), "rb").read()[-600:].decode(errors="replace")
                emit(f"# {series} {label}: exit {code}: {tail}")
            outs = sum(1 for _, _, fs in os.walk(dst) for f in fs if f.endswith(".png"))
            res = dict(series=series, label=label, sps=outs / secs, secs=secs, outputs=outs,
                       cpu_ms=(usage.ru_utime + usage.ru_stime) * 1e3 / max(outs, 1))
            if report and os.path.exists(report):
                r = json.load(open(report))
                st = r["statistics"]
                res["p50"], res["p95"] = st["latency"]["p50_ms"], st["latency"]["p95_ms"]
                stages = {s["name"]: s for s in st["stages"]}
                for key, name in [("load", "read+decode"), ("gpudec", "gpu decode"),
                                  ("comp", "compute"), ("enc", "encode")]:
                    s = stages.get(name)
                    res[key] = s["busy_fraction"] if s and s["count"] else None
                    if key == "gpudec" and s and s["count"]:
                        res["gpu_ms"] = s["p50_ms"]
                gpu = r["backend"].get("gpu") or {}
                res["gpu_frames"] = gpu.get("frames_gpu_decoded")
                res["fallback"] = gpu.get("frames_decode_fallback")
                shutil.move(report, os.path.join(a.out, f"report-{series}-{label.replace(' ', '_')}-{attempt + 1}.json"))
            if best is None or res["sps"] > best["sps"]:
                best = res
        f = lambda k, fmt: "-" if best.get(k) is None else format(best[k], fmt)
        pct = lambda k: "-" if best.get(k) is None else f"{100 * best[k]:.0f}%"
        emit(f"{series:<16} {label:<34} {best['sps']:>9.1f} {f('p50', '.2f'):>7} {f('p95', '.2f'):>7} "
             f"{pct('load'):>5} {pct('gpudec'):>6} {f('gpu_ms', '.2f'):>6} {pct('comp'):>5} {pct('enc'):>5} "
             f"{f('gpu_frames', 'd'):>6} {f('fallback', 'd'):>6} {f('cpu_ms', '.2f'):>9}")
        rows.append(best)
        return best

    for size in [int(s) for s in a.sizes.split(",")]:
        want = a.slices if size == 512 else a.slices_2000
        for name in a.series.split(","):
            src = os.path.join(a.data, f"s{size}", name)
            if not os.path.isdir(src):
                continue
            distinct = sorted(os.listdir(src))
            series = os.path.join(a.work, f"{name}{size}")
            copies = (want + len(distinct) - 1) // len(distinct)
            n = 0
            for c in range(copies):
                d = os.path.join(series, f"copy{c:03d}")
                os.makedirs(d)
                for f in distinct:
                    if n == want:
                        break
                    shutil.copy(os.path.join(src, f), d)
                    n += 1
            for root, _, fs in os.walk(series):  # same warm page cache for everyone
                for f in fs:
                    with open(os.path.join(root, f), "rb") as fh:
                        while fh.read(1 << 24):
                            pass
            label = f"{name} {size}x{size} ({n}, {len(distinct)} distinct)"
            report = os.path.join(a.work, "report.json")
            base = [df, "run", series, "-o", os.path.join(a.work, "out"), "-q", "--no-tui", "--report", report]
            policy = "all" if name in ALL_ONLY else "lossless"
            cpu = run(label, "dicomflow cpu", base + ["--backend", "cpu"], report)
            gpu = None
            for streams in (a.streams.split(",") if a.streams else [None]):
                extra = ["--streams", streams, "--decode-streams", streams] if streams else []
                shown = f"dicomflow cuda gpu.decode={policy}" + (f" streams {streams}" if streams else "")
                r = run(label, shown, base + ["--backend", "cuda", "--gpu-decode", policy] + extra, report)
                if gpu is None or r["sps"] > gpu["sps"]:
                    gpu = r
            run(label, "dicomflow cuda gpu.decode=none", base + ["--backend", "cuda", "--gpu-decode", "none"], report)
            if cpu["sps"] > 0:
                emit(f"# {label}: GPU decode ({gpu['label']}) / CPU backend = {gpu['sps'] / cpu['sps']:.2f}x")
            ti = os.path.join(a.peers, "dicom-toimage") if a.peers else ""
            if ti and os.path.exists(ti):
                dst = os.path.join(a.work, "out")
                files = sorted(os.path.join(r, f) for r, _, fs in os.walk(series) for f in fs)
                run(label, "dicom-toimage --8bit (1 process)", [ti, "--8bit", "-d", dst] + files)
                lst = os.path.join(a.work, "files")
                open(lst, "w").write("\n".join(files) + "\n")
                per = (len(files) + cores - 1) // cores
                run(label, f"dicom-toimage --8bit ({cores} proc)",
                    f"xargs -P {cores} -n {per} '{ti}' --8bit -d '{dst}' < '{lst}'")
            shutil.rmtree(series, ignore_errors=True)
    emit(f"# cores: {cores}; best of {a.repeat}; busy = stage busy time / (elapsed x its pool's threads)")
    json.dump(rows, open(os.path.join(a.out, "rows.json"), "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
