#!/usr/bin/env python3
"""Host check of kernels/zlib.cu without a GPU: compiles the kernels with g++ under small
shims (one thread per block, blocks run in turn), feeds gzip members made by Python's gzip
module (levels 0-9) through adler32_chunks, gzip_to_zlib and copy_packed, and checks that the
zlib stream inflates to the input with zlib's Adler-32, and that members the rewrite must
refuse (header fields, a wrong ISIZE, no room) give the fallback word. Needs g++ and python3.

    python3 scripts/check_zlib_kernels.py
"""
import gzip, pathlib, random, struct, subprocess, sys, tempfile, zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHIM = r'''
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
using std::min;
struct Dim { unsigned x; };
static Dim threadIdx = {0}, blockIdx = {0}, blockDim = {1}, gridDim = {1};
#define __global__
#define __device__
#define __forceinline__ inline
#define __constant__ static const
#define __restrict__
#define __shared__ static
#define __syncthreads() do {} while (0)
#define GRID_STRIDE_SHIM
struct uint4 { unsigned x, y, z, w; };
template <class T> static T __shfl_down_sync(unsigned, T, unsigned) { return T(0); }
static unsigned __brev(unsigned v) { unsigned r = 0; for (int i = 0; i < 32; i++) { r = (r << 1) | (v & 1); v >>= 1; } return r; }
'''
MAIN = r'''
int main() {
    // stdin: u64 total, u64 cap, u64 gz_len; gz bytes; total input bytes.
    u64 total, cap, gz_len;
    if (fread(&total, 8, 1, stdin) != 1 || fread(&cap, 8, 1, stdin) != 1 || fread(&gz_len, 8, 1, stdin) != 1) return 2;
    std::vector<u8> gz(gz_len + 64), input(total + 16);
    if (fread(gz.data(), 1, gz_len, stdin) != gz_len) return 2;
    if (total && fread(input.data(), 1, total, stdin) != total) return 2;
    u32 chunk = 65536, chunks = (u32)((total + chunk - 1) / chunk);
    std::vector<u32> adler(chunks + 1);
    for (u32 c = 0; c < chunks; c++) { blockIdx.x = c; adler32_chunks(input.data(), total, chunk, adler.data()); }
    blockIdx.x = 0;
    int status = 0;
    gzip_to_zlib(gz.data(), &gz_len, &status, total, adler.data(), chunks, chunk, 0x7801, cap);
    std::vector<u8> slot(cap + 32, 0xaa);
    u64 groups = (cap + 15) / 16;
    // copy_packed's grid-stride loops with one thread: gridDim 1, blockDim 1.
    copy_packed(gz.data(), slot.data(), cap);
    u64 zlen; memcpy(&zlen, slot.data(), 8);
    if (zlen == ~0ull) { fputs("fallback", stdout); return 0; }
    for (u64 k = 8 + zlen; k < cap + 32; k++) if (slot[k] != 0xaa && k >= cap) { fputs("overrun", stdout); return 1; }
    fwrite(slot.data() + 8, 1, zlen, stdout);
    return 0;
}
'''

def build(tmp):
    src = (ROOT / "kernels/common.cuh").read_text().replace("#pragma once", "")
    src += (ROOT / "kernels/zlib.cu").read_text().replace('#include "common.cuh"', "")
    c = pathlib.Path(tmp) / "k.cpp"
    c.write_text(SHIM + "#include <cstring>\n" + src + MAIN)
    exe = pathlib.Path(tmp) / "k"
    subprocess.run(["g++", "-O2", "-std=c++17", "-w", "-o", str(exe), str(c)], check=True)
    return exe

def run(exe, data, gz, cap):
    blob = struct.pack("<QQQ", len(data), cap, len(gz)) + gz + data
    out = subprocess.run([str(exe)], input=blob, capture_output=True)
    if out.returncode != 0:
        sys.exit(f"kernel harness failed: {out.stdout[:40]} {out.stderr.decode()}")
    return out.stdout

def main():
    rnd = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        cases = 0
        for trial in range(40):
            total = rnd.choice([1, 17, 1000, 65536, 200_000, 300_001])
            kind = trial % 3
            if kind == 0:
                data = bytes(rnd.randrange(256) for _ in range(total))
            elif kind == 1:
                data = bytes((i // 7 + rnd.randrange(3)) % 256 for i in range(total))
            else:
                data = (b"the quick brown fox " * (total // 20 + 1))[:total]
            gz = gzip.compress(data, compresslevel=rnd.randrange(10), mtime=0)
            cap = len(data) * 2 + 64
            z = run(exe, data, gz, cap)
            if z == b"fallback" or zlib.decompress(z) != data:
                sys.exit(f"trial {trial}: the zlib stream does not inflate to the input")
            if struct.unpack(">I", z[-4:])[0] != zlib.adler32(data):
                sys.exit(f"trial {trial}: Adler-32 differs")
            cases += 1
        data = b"abc" * 1000
        gz = gzip.compress(data, mtime=0)
        named = bytearray(gz)
        named[3] = 8  # FNAME: the rewrite only takes bare headers
        wrong = bytearray(gz)
        wrong[-4] ^= 1  # ISIZE
        for label, member, cap in [
            ("a header with fields", bytes(named), 10_000),
            ("a wrong ISIZE", bytes(wrong), 10_000),
            ("no room", gz, len(gz) - 13),
        ]:
            if run(exe, data, member, cap) != b"fallback":
                sys.exit(f"{label}: expected the fallback word")
        print(f"kernels/zlib.cu host check: {cases} gzip members rewritten and verified, 3 refused")

main()
