// Operators on the 8-bit rendering, run on the slice already on the device after the chain and
// before the PNG row filter: inversion, rotation, flips and Pillow's resampling. The CPU twin
// and reference is src/render/ops.rs (`apply`): the tables (source positions, tap counts and
// 22-bit fixed-point weights) are built there and copied here, so these kernels only repeat its
// integer arithmetic, and both backends write the same bytes.
//
// Oriented pixel (u, v) is rendered pixel (m0·u + m1·v + m2, m3·u + m4·v + m5). An output
// index whose tap count is 0 is padding: black, inverted or not.
#include "common.cuh"

#define OPS_WEIGHT_BITS 22
#define OPS_HALF (1 << (OPS_WEIGHT_BITS - 1))

// Pillow's clip8: the sum shifted down and clamped to 0..255.
__device__ __forceinline__ u8 ops_clip8(i32 ss) {
    i32 v = ss >> OPS_WEIGHT_BITS;
    return (u8)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One tap per output on both axes (no resize, or nearest): out(x, y) = src at the oriented
// pixel (cols[2x], rows[2y]), `ch` interleaved channels each.
extern "C" __global__ void ops_gather(const u8* __restrict__ src, u8* __restrict__ out, u32 src_w, u32 ch,
                                      u32 out_w, u32 out_h, const i32* __restrict__ cols,
                                      const i32* __restrict__ rows, i32 m0, i32 m1, i32 m2, i32 m3, i32 m4,
                                      i32 m5, u32 invert) {
    u64 n = (u64)out_w * out_h;
    u8 inv = invert ? (u8)0xff : (u8)0;
    GRID_STRIDE(i, n) {
        u32 x = (u32)(i % out_w), y = (u32)(i / out_w);
        u8* px = out + i * ch;
        if (cols[2 * x + 1] == 0 || rows[2 * y + 1] == 0) {
            for (u32 c = 0; c < ch; c++) px[c] = 0;
            continue;
        }
        i64 u = cols[2 * x], v = rows[2 * y];
        i64 sx = (i64)m0 * u + (i64)m1 * v + m2;
        i64 sy = (i64)m3 * u + (i64)m4 * v + m5;
        const u8* s = src + (sy * (i64)src_w + sx) * ch;
        for (u32 c = 0; c < ch; c++) px[c] = s[c] ^ inv;
    }
}

// Horizontal pass: for oriented row v (of `oh`) and output column x (of `out_w`), the sum of
// the oriented row's pixels bounds[2x] .. bounds[2x] + bounds[2x+1] - 1 (inverted first when
// asked) times weights[x·ksize + t], from OPS_HALF, clipped; into `tmp` (out_w × oh × ch).
extern "C" __global__ void ops_resample_h(const u8* __restrict__ src, u8* __restrict__ tmp, u32 src_w, u32 ch,
                                          u32 out_w, u32 oh, const i32* __restrict__ bounds,
                                          const i32* __restrict__ weights, u32 ksize, i32 m0, i32 m1, i32 m2,
                                          i32 m3, i32 m4, i32 m5, u32 invert) {
    u64 n = (u64)out_w * oh;
    u8 inv = invert ? (u8)0xff : (u8)0;
    // Oriented (u, v) is rendered pixel base(v) + u·step.
    i64 step = (i64)m3 * (i64)src_w + m0;
    GRID_STRIDE(i, n) {
        u32 x = (u32)(i % out_w);
        i64 v = (i64)(i / out_w);
        i32 first = bounds[2 * x], count = bounds[2 * x + 1];
        const i32* k = weights + (u64)x * ksize;
        i64 base = ((i64)m4 * v + m5) * (i64)src_w + (i64)m1 * v + m2;
        u8* o = tmp + i * ch;
        for (u32 c = 0; c < ch; c++) {
            i32 ss = OPS_HALF;
            for (i32 t = 0; t < count; t++) {
                i64 p = base + (i64)(first + t) * step;
                ss += (i32)(u8)(src[p * ch + c] ^ inv) * k[t];
            }
            o[c] = ops_clip8(ss);
        }
    }
}

// Vertical pass: output row y from the intermediate's rows bounds[2y] .. + bounds[2y+1] - 1,
// each byte of the row (out_w × ch) on its own.
extern "C" __global__ void ops_resample_v(const u8* __restrict__ tmp, u8* __restrict__ out, u32 out_w, u32 ch,
                                          u32 out_h, const i32* __restrict__ bounds,
                                          const i32* __restrict__ weights, u32 ksize) {
    u64 stride = (u64)out_w * ch;
    u64 n = stride * out_h;
    GRID_STRIDE(i, n) {
        u32 y = (u32)(i / stride);
        u64 j = i % stride;
        i32 first = bounds[2 * y], count = bounds[2 * y + 1];
        const i32* k = weights + (u64)y * ksize;
        i32 ss = OPS_HALF;
        for (i32 t = 0; t < count; t++) ss += (i32)tmp[(u64)(first + t) * stride + j] * k[t];
        out[i] = ops_clip8(ss);
    }
}
