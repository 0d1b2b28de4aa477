// Shared helpers of dicomflow's kernels. Compiled at run time by NVRTC (see
// src/backend/cuda/nvrtc.rs) with --fmad=false so that double arithmetic rounds exactly like the
// CPU reference backend (no fused multiply-add).
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

// Grid-stride loop over [0, n).
#define GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

// Table index of a raw container value: (raw >> shift) & mask (stored-value extraction).
__device__ __forceinline__ u32 table_index(u32 raw, u32 shift, u32 mask) {
    return (raw >> shift) & mask;
}

// Narrows a `bits`-bit unsigned colour sample to 8 bits exactly as DCMTK does
// (docs/dcmtk-render-notes.md §8.5): shift down, or scale up by 255/(2^bits-1).
__device__ __forceinline__ u8 narrow8(u32 v, u32 bits) {
    if (bits == 8) return (u8)v;
    if (bits > 8) return (u8)(v >> (bits - 8));
    double g = 255.0 / (double)((1u << bits) - 1u);
    double gi = (double)(u32)g;
    if (g == gi) return (u8)(v * (u32)g);
    return (u8)(u32)((double)v * g);
}

// Adler-32's modulus, and zlib's adler32_combine: the checksum of a ++ b from those of a and b
// and b's length (the GPU PNG encoders, zlib.cu and fdeflate.cu).
#define ADLER_BASE 65521u
__device__ __forceinline__ u32 adler32_combine(u32 a, u32 b, u64 len_b) {
    u64 rem = len_b % ADLER_BASE;
    u64 a1 = a & 0xffffu, b1 = a >> 16, a2 = b & 0xffffu, b2 = b >> 16;
    u64 sum1 = (a1 + a2 + ADLER_BASE - 1) % ADLER_BASE;
    u64 sum2 = (rem * a1 % ADLER_BASE + b1 + b2 + ADLER_BASE - rem) % ADLER_BASE;
    return (u32)(sum1 | (sum2 << 16));
}
