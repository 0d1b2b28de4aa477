#!/usr/bin/env bash
# Builds everything scripts/device_verify.sh needs on the lent GPU host, compressed to fit the
# device tool's 64 MiB, into one folder (git-ignored when it starts with a dot, e.g. .dev-b):
#
#   STAGE/bin/dicomflow.xz        release binary, debug info stripped
#   STAGE/tests/{dicomflow,main,it}.xz   the test executables (library, binary, tests/it)
#   STAGE/manifest_dir            this checkout's path (the tests were built against it)
#   STAGE/libs/*.xz               nvJPEG2000 and nvCOMP from their pip wheels (the host has
#                                 the CUDA toolkit's nvJPEG only)
#   STAGE/tools/                  Debian's pngcheck with the libz it was built against, behind a
#                                 wrapper (the host's newer zlib makes it warn on every file)
#   STAGE/decode-data/            a few distinct compressed slices per series (see below), made
#                                 here by DCMTK and GDCM (the host has neither);
#                                 device_verify.sh copies them up to the slice counts it needs
#
# usage: scripts/stage_gpu_host.sh STAGE        (needs network to PyPI, dcmtk, libgdcm-tools,
#                                                pngcheck; about 10 minutes on 2 cores)
# then:  run with carry [STAGE] and `bash scripts/device_verify.sh STAGE $OUT [SECTIONS]`.
set -euo pipefail
stage=$(realpath -m "${1:?usage: scripts/stage_gpu_host.sh STAGE}")
# It is emptied first: refuse anything that is not an earlier stage.
[ ! -e "$stage" ] || [ -f "$stage/manifest_dir" ] || {
  echo "refusing to replace $stage: not a stage (no manifest_dir)" >&2; exit 1; }
root=$(git rev-parse --show-toplevel)
cd "$root"
for t in dcmcjpeg gdcmconv pngcheck xz; do
  command -v "$t" >/dev/null || { echo "$t not found (apt-get install dcmtk libgdcm-tools pngcheck xz-utils)" >&2; exit 1; }
done
rm -rf "$stage" && mkdir -p "$stage"/{bin,tests,libs,tools,decode-data}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build --release --bins >&2
strip --strip-debug -o "$stage/bin/dicomflow" target/release/dicomflow
xz -T2 -6 "$stage/bin/dicomflow"
cargo test --release --no-run >&2
cargo test --release --no-run --message-format=json 2>/dev/null | python3 -c '
import sys, json
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("executable") and m.get("profile", {}).get("test"):
        t = m["target"]
        name = "main" if t["kind"] == ["bin"] else t["name"]
        print(name, m["executable"])
' | while read -r name exe; do
  strip --strip-debug -o "$stage/tests/$name" "$exe"
  xz -T2 -6 "$stage/tests/$name"
done
echo "$root" > "$stage/manifest_dir"

# The codec libraries, pinned (an unpinned `pip download` resolves to an empty placeholder).
pip_get() { # PACKAGE==VERSION PLATFORM PATH-IN-WHEEL
  python3 -m pip download -q --no-deps --only-binary=:all: --platform "$2" --python-version 3.12 \
    -d "$work/wheels" "$1" >&2
  python3 -m zipfile -e "$(ls "$work"/wheels/*.whl | grep -i "$(echo "${1%%==*}" | tr - _)")" "$work/x"
  xz -T2 -9 -c "$work/x/$3" > "$stage/libs/$(basename "$3").xz"
}
pip_get nvidia-nvjpeg2k-cu13==0.11.0.51 manylinux2014_x86_64 nvidia/nvjpeg2k/lib/libnvjpeg2k.so.0
pip_get nvidia-libnvcomp-cu13==6.0.0.12 manylinux_2_28_x86_64 nvidia/libnvcomp/lib64/libnvcomp.so.6

cp "$(command -v pngcheck)" "$stage/tools/pngcheck.real"
cp "$(ldd "$(command -v pngcheck)" | awk '/libz.so/ {print $3}')" "$stage/tools/libz.so.1"
printf '#!/bin/sh\nLD_LIBRARY_PATH="$(dirname "$0")" exec "$(dirname "$0")/pngcheck.real" "$@"\n' \
  > "$stage/tools/pngcheck"
chmod +x "$stage/tools/pngcheck"

# Distinct slices per series: j2k (GDCM, JPEG 2000 lossless 512²), jls512 (dcmcjpeg +e1),
# base512/base2000 (dcmcjpeg +eb on 8-bit synth), with STAGE_SERIES_2000=1 jls2000 and j2k2000,
# and with STAGE_BENCH_DECODE=1 the s512/s2000 tree of bench_decode.py.
bash scripts/make_decode_bench_data.sh target/release/dicomflow "$work/dd" 20 3 >&2
d=$stage/decode-data
[ -n "${STAGE_BENCH_DECODE:-}" ] && cp -r "$work/dd/s512" "$work/dd/s2000" "$d/"
cp -r "$work/dd/s512/j2k" "$d/j2k"
cp -r "$work/dd/s512/jls" "$d/jls512"
cp -r "$work/dd/s512/baseline" "$d/base512"
cp -r "$work/dd/s2000/baseline" "$d/base2000"
# The lossless 2000² series are 7 MB each: with them the stage passes what the device tool
# carries beside the working tree, unless something else stays behind.
if [ -n "${STAGE_SERIES_2000:-}" ]; then
  cp -r "$work/dd/s2000/jls" "$d/jls2000"
  cp -r "$work/dd/s2000/j2k" "$d/j2k2000"
fi
du -sh "$stage" "$stage"/* >&2
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | awk '$2 == "total" {s += $1} END {print s + 0}') || true
total=$(( ($(du -sb "$stage" | cut -f1) + tree) / 1048576 ))
[ "$total" -lt 64 ] || echo "warning: stage and working tree are $total MiB; the device tool carries 64" >&2
