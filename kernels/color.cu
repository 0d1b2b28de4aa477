// Colour kernels with DCMTK's arithmetic (docs/dcmtk-render-notes.md §8), mirroring
// src/render/color.rs operation for operation (compiled with --fmad=false, so the double
// formulas round identically).
#include "common.cuh"

// Colour models (must match src/backend/cuda/worker.rs).
#define MODEL_RGB 0
#define MODEL_YBR_FULL 1
#define MODEL_YBR_FULL_TABLES 2
#define MODEL_YBR_PARTIAL 3

__device__ __forceinline__ u32 clip_double(double d, double m) {
    if (d < 0.0) return 0;
    if (d > m) return (u32)m;
    return (u32)d;
}

__device__ __forceinline__ u32 load_sample(const u8* in, u32 bytes, u64 i) {
    if (bytes == 1) return in[i];
    return ((const u16*)in)[i];
}

// Stored sample made unsigned (DCMTK's removeSign for signed data).
__device__ __forceinline__ u32 sample_value(const u8* in, u32 bytes, u64 i, u32 shift, u32 mask, u32 bits,
                                            u32 is_signed) {
    u32 v = (load_sample(in, bytes, i) >> shift) & mask;
    return is_signed ? (v ^ (1u << (bits - 1))) : v;
}

__device__ void convert(u32 model, u32 a, u32 b, u32 c, double m, u32 out[3]) {
    if (model == MODEL_RGB) {
        out[0] = a; out[1] = b; out[2] = c;
    } else if (model == MODEL_YBR_FULL_TABLES) {
        // DCMTK's truncated integer tables for 8-bit unsigned YBR_FULL.
        double x_cr = (double)c, x_cb = (double)b;
        i32 rcr = (i32)(short)(1.4020 * x_cr - 0.7010 * 255.0);
        i32 gcb = (i32)(short)(0.3441 * x_cb);
        i32 gcr = (i32)(short)(0.7141 * x_cr - 0.5291 * 255.0);
        i32 bcb = (i32)(short)(1.7720 * x_cb - 0.8859 * 255.0);
        i32 y = (i32)a;
        i32 r = y + rcr, g = y - gcb - gcr, bl = y + bcb;
        out[0] = (u32)min(max(r, 0), 255);
        out[1] = (u32)min(max(g, 0), 255);
        out[2] = (u32)min(max(bl, 0), 255);
    } else if (model == MODEL_YBR_FULL) {
        double y = a, cb = b, cr = c;
        out[0] = clip_double(y + 1.4020 * cr - 0.7010 * m, m);
        out[1] = clip_double(y - 0.3441 * cb - 0.7141 * cr + 0.5291 * m, m);
        out[2] = clip_double(y + 1.7720 * cb - 0.8859 * m, m);
    } else {
        double y = a, cb = b, cr = c;
        out[0] = clip_double(1.1631 * y + 1.5969 * cr - 0.8713 * m, m);
        out[1] = clip_double(1.1631 * y - 0.3913 * cb - 0.8121 * cr + 0.5290 * m, m);
        out[2] = clip_double(1.1631 * y + 2.0177 * cb - 1.0820 * m, m);
    }
}

// Three samples per pixel, interleaved (planar = 0) or planar (planar = 1).
extern "C" __global__ void color_full(const u8* __restrict__ in, u8* __restrict__ out, u64 pixels, u32 bytes,
                                      u32 shift, u32 mask, u32 bits, u32 is_signed, u32 planar, u32 model) {
    double m = (double)mask;
    GRID_STRIDE(p, pixels) {
        u32 s[3];
        for (int k = 0; k < 3; k++) {
            u64 i = planar ? (u64)k * pixels + p : 3 * p + k;
            s[k] = sample_value(in, bytes, i, shift, mask, bits, is_signed);
        }
        u32 rgb[3];
        convert(model, s[0], s[1], s[2], m, rgb);
        for (int k = 0; k < 3; k++) out[3 * p + k] = narrow8(rgb[k], bits);
    }
}

// Native YBR_*_422: Y1 Y2 Cb Cr per pixel pair; an odd last pixel stays black.
extern "C" __global__ void color_422(const u8* __restrict__ in, u8* __restrict__ out, u64 pixels, u32 bytes,
                                     u32 shift, u32 mask, u32 bits, u32 is_signed, u32 model) {
    double m = (double)mask;
    u64 pairs = pixels / 2;
    GRID_STRIDE(q, pairs) {
        u32 y1 = sample_value(in, bytes, 4 * q, shift, mask, bits, is_signed);
        u32 y2 = sample_value(in, bytes, 4 * q + 1, shift, mask, bits, is_signed);
        u32 cb = sample_value(in, bytes, 4 * q + 2, shift, mask, bits, is_signed);
        u32 cr = sample_value(in, bytes, 4 * q + 3, shift, mask, bits, is_signed);
        u32 rgb[3];
        convert(model, y1, cb, cr, m, rgb);
        for (int k = 0; k < 3; k++) out[6 * q + k] = narrow8(rgb[k], bits);
        convert(model, y2, cb, cr, m, rgb);
        for (int k = 0; k < 3; k++) out[6 * q + 3 + k] = narrow8(rgb[k], bits);
    }
    if (pixels % 2 == 1 && blockIdx.x == 0 && threadIdx.x < 3) out[3 * (pixels - 1) + threadIdx.x] = 0;
}

// PALETTE COLOR: a table of RGB triplets per table index, built by the shared Rust code.
extern "C" __global__ void palette_apply(const u8* __restrict__ in, u8* __restrict__ out, u64 pixels, u32 bytes,
                                         u32 shift, u32 mask, const u8* __restrict__ table) {
    GRID_STRIDE(p, pixels) {
        u32 idx = table_index(load_sample(in, bytes, p), shift, mask);
        out[3 * p] = __ldg(&table[3 * idx]);
        out[3 * p + 1] = __ldg(&table[3 * idx + 1]);
        out[3 * p + 2] = __ldg(&table[3 * idx + 2]);
    }
}
