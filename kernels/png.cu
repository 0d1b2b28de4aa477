// PNG row filtering on the GPU. The writer threads then only deflate: the adaptive filter is
// about 40 % of a fast PNG encode on the CPU (1.4 of 3.3 ms per 2000² slice on the dev box).
// The rules are the `png` crate's (src/output/png.rs is the CPU twin and the reference): the
// adaptive choice tries Up, Sub, Avg, Paeth in that order, keeps a filter whose cost (the sum
// of |residual| read as signed bytes) is <= the best so far, and stops at the first zero; so
// the bytes, and hence the files, are those of the CPU path.
#include "common.cuh"

#define PNG_NONE 0u
#define PNG_SUB 1u
#define PNG_UP 2u
#define PNG_AVG 3u
#define PNG_PAETH 4u
// `mode` value asking for the adaptive choice.
#define PNG_ADAPTIVE 5u

__device__ __forceinline__ u32 png_cost(u32 residual) {
    int r = (int)(signed char)(u8)residual;
    return (u32)(r < 0 ? -r : r);
}

__device__ __forceinline__ u32 png_paeth(u32 a, u32 b, u32 c) {
    int p = (int)a + (int)b - (int)c;
    int pa = abs(p - (int)a), pb = abs(p - (int)b), pc = abs(p - (int)c);
    if (pa <= pb && pa <= pc) return a;
    if (pb <= pc) return b;
    return c;
}

__device__ __forceinline__ u32 png_predict(u32 kind, u32 a, u32 b, u32 c) {
    switch (kind) {
        case PNG_SUB: return a;
        case PNG_UP: return b;
        case PNG_AVG: return (a + b) >> 1;
        case PNG_PAETH: return png_paeth(a, b, c);
        default: return 0;
    }
}

// Filters row y of `row_len` bytes (`bpp` bytes per pixel) into `dst` (the filter type byte and
// the row's residuals); one block per row. `mode` is a filter type, or PNG_ADAPTIVE. A multiple of
// 32 threads per block, at most 1024.
__device__ __forceinline__ void filter_row(const u8* __restrict__ px, u8* __restrict__ dst, u32 y,
                                           u32 row_len, u32 bpp, u32 mode) {
    __shared__ u32 warp_sums[4][32];
    __shared__ u32 chosen;
    const u8* cur = px + (u64)y * row_len;
    const u8* prev = y ? cur - row_len : 0;
    u32 kind = mode;
    if (mode == PNG_ADAPTIVE) {
        u32 s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (u32 x = threadIdx.x; x < row_len; x += blockDim.x) {
            u32 v = cur[x];
            u32 a = x >= bpp ? cur[x - bpp] : 0u;
            u32 b = prev ? prev[x] : 0u;
            u32 c = (prev && x >= bpp) ? prev[x - bpp] : 0u;
            s0 += png_cost(v - b);
            s1 += png_cost(v - a);
            s2 += png_cost(v - ((a + b) >> 1));
            s3 += png_cost(v - png_paeth(a, b, c));
        }
        for (u32 off = 16; off > 0; off >>= 1) {
            s0 += __shfl_down_sync(0xffffffffu, s0, off);
            s1 += __shfl_down_sync(0xffffffffu, s1, off);
            s2 += __shfl_down_sync(0xffffffffu, s2, off);
            s3 += __shfl_down_sync(0xffffffffu, s3, off);
        }
        u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) {
            warp_sums[0][warp] = s0;
            warp_sums[1][warp] = s1;
            warp_sums[2][warp] = s2;
            warp_sums[3][warp] = s3;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            const u32 order[4] = {PNG_UP, PNG_SUB, PNG_AVG, PNG_PAETH};
            u64 best = ~0ull;
            u32 pick = PNG_NONE;
            for (u32 k = 0; k < 4; k++) {
                u64 total = 0;
                for (u32 w = 0; w < blockDim.x / 32; w++) total += warp_sums[k][w];
                if (total <= best) {
                    best = total;
                    pick = order[k];
                    if (total == 0) break;
                }
            }
            chosen = pick;
        }
        __syncthreads();
        kind = chosen;
    }
    if (threadIdx.x == 0) dst[0] = (u8)kind;
    for (u32 x = threadIdx.x; x < row_len; x += blockDim.x) {
        u32 a = x >= bpp ? cur[x - bpp] : 0u;
        u32 b = prev ? prev[x] : 0u;
        u32 c = (prev && x >= bpp) ? prev[x - bpp] : 0u;
        dst[1 + x] = (u8)(cur[x] - png_predict(kind, a, b, c));
    }
}

// One block per row: `out` row y is the filter type byte and the row's residuals, at
// y * (row_len + 1).
extern "C" __global__ void png_filter_rows(const u8* __restrict__ px, u8* __restrict__ out, u32 row_len,
                                           u32 rows, u32 bpp, u32 mode) {
    u32 y = blockIdx.x;
    if (y >= rows) return;
    filter_row(px, out + (u64)y * (row_len + 1), y, row_len, bpp, mode);
}

// A group of frames of one shape (src/backend/cuda/group.rs): block (y, f) filters row y of the
// pixels at `px + f * stride` into the rows buffer at `outs[f]`.
extern "C" __global__ void png_filter_rows_group(const u8* __restrict__ px, u64 stride,
                                                 const u64* __restrict__ outs, u32 row_len, u32 rows,
                                                 u32 bpp, u32 mode) {
    u32 y = blockIdx.x;
    if (y >= rows) return;
    u8* out = (u8*)outs[blockIdx.y];
    filter_row(px + (u64)blockIdx.y * stride, out + (u64)y * (row_len + 1), y, row_len, bpp, mode);
}

// Copies n bytes with 16-byte loads and stores (both pointers 16-byte aligned): how filtered
// rows, built in device memory, reach a mapped output slot in full-width PCIe writes.
extern "C" __global__ void copy_bytes(const u8* __restrict__ src, u8* __restrict__ dst, u64 n) {
    u64 groups = n / 16;
    const uint4* s16 = (const uint4*)src;
    uint4* d16 = (uint4*)dst;
    GRID_STRIDE(g, groups) { d16[g] = s16[g]; }
    GRID_STRIDE(i, n % 16) { dst[groups * 16 + i] = src[groups * 16 + i]; }
}
