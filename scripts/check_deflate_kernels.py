#!/usr/bin/env python3
"""Host check of kernels/deflate.cu without a GPU: compiles the kernels with g++ under small
shims (one thread per block, blocks run in turn), joins deflate pieces made by Python's zlib
(levels 0-9, every padding width), and checks that the packed zlib stream inflates to the
input and that the Adler-32 combined on the "device" is zlib's. Needs g++ and python3.

    python3 scripts/check_deflate_kernels.py
"""
import os, pathlib, random, struct, subprocess, sys, tempfile, zlib

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
    // stdin: u32 n, u64 total, u32 chunk; n pieces (u32 len + bytes); total input bytes.
    uint32_t n; uint64_t total; uint32_t chunk;
    if (fread(&n, 4, 1, stdin) != 1 || fread(&total, 8, 1, stdin) != 1 || fread(&chunk, 4, 1, stdin) != 1) return 2;
    std::vector<std::vector<u8>> bufs(n);
    std::vector<u64> ptrs(n), sizes(n);
    std::vector<int> nvst(n, 0);
    for (u32 i = 0; i < n; i++) {
        uint32_t len; if (fread(&len, 4, 1, stdin) != 1) return 2;
        bufs[i].resize(len + 16);
        if (len && fread(bufs[i].data(), 1, len, stdin) != len) return 2;
        ptrs[i] = (u64)bufs[i].data(); sizes[i] = len;
    }
    std::vector<u8> input(total + 16);
    if (total && fread(input.data(), 1, total, stdin) != total) return 2;
    u32 chunks = (u32)((total + chunk - 1) / chunk);
    std::vector<u32> adler(chunks);
    for (u32 c = 0; c < chunks; c++) { blockIdx.x = c; adler32_chunks(input.data(), total, chunk, adler.data()); }
    std::vector<Piece> pieces(n); std::vector<u32> status(n);
    for (u32 i = 0; i < n; i++) { blockIdx.x = 0; threadIdx.x = i; deflate_pieces(ptrs.data(), sizes.data(), nvst.data(), n, pieces.data(), status.data()); }
    threadIdx.x = 0;
    u64 cap = 64 + total * 2 + n * 8 + 1024;
    std::vector<u8> dst(cap + 16);
    for (u32 i = 0; i < n; i++) { blockIdx.x = i; zlib_pack(ptrs.data(), pieces.data(), status.data(), n, adler.data(), chunks, chunk, total, 0x7801, dst.data(), cap); }
    u64 zlen; memcpy(&zlen, dst.data(), 8);
    for (u32 i = 0; i < n; i++) if (status[i]) { fprintf(stderr, "piece %u status %u\n", i, status[i]); }
    if (zlen == ~0ull) { fprintf(stderr, "pack failed\n"); return 1; }
    fwrite(dst.data() + 8, 1, zlen, stdout);
    return 0;
}
'''

def build(tmp):
    src = (ROOT / "kernels/common.cuh").read_text().replace("#pragma once", "")
    src += (ROOT / "kernels/deflate.cu").read_text().replace('#include "common.cuh"', "")
    c = pathlib.Path(tmp) / "k.cpp"
    c.write_text(SHIM + "#include <cstring>\n" + src + MAIN)
    exe = pathlib.Path(tmp) / "k"
    subprocess.run(["g++", "-O2", "-std=c++17", "-w", "-o", str(exe), str(c)], check=True)
    return exe

def raw(data, level):
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()

def main():
    rnd = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        cases = 0
        for trial in range(60):
            total = rnd.choice([1, 17, 1000, 65536, 200_000, 300_001])
            chunk = rnd.choice([65536, 1000, 4096, 12345])
            kind = trial % 3
            if kind == 0:
                data = bytes(rnd.randrange(256) for _ in range(total))
            elif kind == 1:
                data = bytes((i // 7 + rnd.randrange(3)) % 256 for i in range(total))
            else:
                data = (b"the quick brown fox " * (total // 20 + 1))[:total]
            parts = [data[i:i + chunk] for i in range(0, total, chunk)]
            pieces = [raw(p, rnd.randrange(10)) for p in parts]
            blob = struct.pack("<IQI", len(pieces), total, 65536)
            for p in pieces:
                blob += struct.pack("<I", len(p)) + p
            blob += data
            out = subprocess.run([str(exe)], input=blob, capture_output=True)
            if out.returncode != 0:
                sys.exit(f"trial {trial}: kernel harness failed: {out.stderr.decode()}")
            z = out.stdout
            if zlib.decompress(z) != data:
                sys.exit(f"trial {trial}: packed stream does not inflate to the input")
            if struct.unpack(">I", z[-4:])[0] != zlib.adler32(data):
                sys.exit(f"trial {trial}: Adler-32 differs")
            cases += 1
        print(f"kernels/deflate.cu host check: {cases} streams joined and verified")

main()
