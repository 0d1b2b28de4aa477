// Grayscale kernels: the whole chain (mask, sign, Modality, VOI, polarity, narrowing) is a table
// built by the shared Rust code (src/render/table.rs), so every backend produces the same bytes.
// The GPU computes the frame statistics that automatic windows need and applies the table with
// 16-byte loads, reading stored values and writing 8-bit pixels either in device memory or
// directly in mapped page-locked slots (zero-copy).
#include "common.cuh"

// Histogram of table indices, sub-histograms in shared memory (bins <= 12288).
template <typename T>
__device__ __forceinline__ void hist_shared(const T* __restrict__ in, u64 n, u32 shift, u32 mask,
                                            u32* __restrict__ counts) {
    extern __shared__ u32 local[];
    u32 bins = mask + 1;
    for (u32 b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    GRID_STRIDE(i, n) { atomicAdd(&local[table_index(in[i], shift, mask)], 1u); }
    __syncthreads();
    for (u32 b = threadIdx.x; b < bins; b += blockDim.x) {
        u32 c = local[b];
        if (c) atomicAdd(&counts[b], c);
    }
}

// Histogram of table indices straight into global memory (any number of bins).
template <typename T>
__device__ __forceinline__ void hist_global(const T* __restrict__ in, u64 n, u32 shift, u32 mask,
                                            u32* __restrict__ counts) {
    GRID_STRIDE(i, n) { atomicAdd(&counts[table_index(in[i], shift, mask)], 1u); }
}

extern "C" __global__ void gray_hist_shared_u16(const u16* __restrict__ in, u64 n, u32 shift, u32 mask,
                                                u32* __restrict__ counts) {
    hist_shared(in, n, shift, mask, counts);
}

extern "C" __global__ void gray_hist_shared_u8(const u8* __restrict__ in, u64 n, u32 shift, u32 mask,
                                               u32* __restrict__ counts) {
    hist_shared(in, n, shift, mask, counts);
}

extern "C" __global__ void gray_hist_global_u16(const u16* __restrict__ in, u64 n, u32 shift, u32 mask,
                                                u32* __restrict__ counts) {
    hist_global(in, n, shift, mask, counts);
}

extern "C" __global__ void gray_hist_global_u32(const u32* __restrict__ in, u64 n, u32 shift, u32 mask,
                                                u32* __restrict__ counts) {
    hist_global(in, n, shift, mask, counts);
}

// 16-bit stored values -> 8-bit pixels, 8 pixels per thread: one 16-byte load, one 8-byte store.
// `in` and `out` are 16- and 8-byte aligned (slots are 256-byte aligned); the last n % 8 pixels
// are done one by one. The grid's x dimension strides over the frame.
__device__ __forceinline__ void apply_u16(const u16* __restrict__ in, u8* __restrict__ out, u64 n,
                                          u32 shift, u32 mask, const u8* __restrict__ table) {
    u64 groups = n / 8;
    const uint4* in8 = (const uint4*)in;
    uint2* out8 = (uint2*)out;
    GRID_STRIDE(g, groups) {
        uint4 v = in8[g];
        u32 w[4] = {v.x, v.y, v.z, v.w};
        u32 lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            u32 a = __ldg(&table[table_index(w[k] & 0xffffu, shift, mask)]);
            u32 b = __ldg(&table[table_index(w[k] >> 16, shift, mask)]);
            lo |= (a | (b << 8)) << (16 * k);
        }
#pragma unroll
        for (int k = 0; k < 2; k++) {
            u32 a = __ldg(&table[table_index(w[k + 2] & 0xffffu, shift, mask)]);
            u32 b = __ldg(&table[table_index(w[k + 2] >> 16, shift, mask)]);
            hi |= (a | (b << 8)) << (16 * k);
        }
        out8[g] = make_uint2(lo, hi);
    }
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 tail = n - groups * 8;
    if (t < tail) {
        u64 i = groups * 8 + t;
        out[i] = table[table_index(in[i], shift, mask)];
    }
}

// 8-bit stored values: 16 pixels per thread.
__device__ __forceinline__ void apply_u8(const u8* __restrict__ in, u8* __restrict__ out, u64 n,
                                         u32 shift, u32 mask, const u8* __restrict__ table) {
    u64 groups = n / 16;
    const uint4* in16 = (const uint4*)in;
    uint4* out16 = (uint4*)out;
    GRID_STRIDE(g, groups) {
        uint4 v = in16[g];
        u32 w[4] = {v.x, v.y, v.z, v.w};
        u32 r[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            u32 x = w[k];
            r[k] = (u32)__ldg(&table[table_index(x & 0xff, shift, mask)]) |
                   ((u32)__ldg(&table[table_index((x >> 8) & 0xff, shift, mask)]) << 8) |
                   ((u32)__ldg(&table[table_index((x >> 16) & 0xff, shift, mask)]) << 16) |
                   ((u32)__ldg(&table[table_index(x >> 24, shift, mask)]) << 24);
        }
        out16[g] = make_uint4(r[0], r[1], r[2], r[3]);
    }
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 tail = n - groups * 16;
    if (t < tail) {
        u64 i = groups * 16 + t;
        out[i] = table[table_index(in[i], shift, mask)];
    }
}

extern "C" __global__ void gray_apply_u16(const u16* __restrict__ in, u8* __restrict__ out, u64 n,
                                          u32 shift, u32 mask, const u8* __restrict__ table) {
    apply_u16(in, out, n, shift, mask, table);
}

extern "C" __global__ void gray_apply_u8(const u8* __restrict__ in, u8* __restrict__ out, u64 n,
                                         u32 shift, u32 mask, const u8* __restrict__ table) {
    apply_u8(in, out, n, shift, mask, table);
}

// A group of frames of one shape and one table in one launch (src/backend/cuda/group.rs): frame
// blockIdx.y reads its stored values at the address `inputs[blockIdx.y]` (a mapped slot) and
// writes its pixels at `out + blockIdx.y * stride`. One launch instead of one per frame, and a
// grid large enough to keep many reads over PCIe in flight.
extern "C" __global__ void gray_apply_u16_group(const u64* __restrict__ inputs, u8* __restrict__ out,
                                                u64 stride, u64 n, u32 shift, u32 mask,
                                                const u8* __restrict__ table) {
    const u16* in = (const u16*)inputs[blockIdx.y];
    apply_u16(in, out + (u64)blockIdx.y * stride, n, shift, mask, table);
}

extern "C" __global__ void gray_apply_u8_group(const u64* __restrict__ inputs, u8* __restrict__ out,
                                               u64 stride, u64 n, u32 shift, u32 mask,
                                               const u8* __restrict__ table) {
    const u8* in = (const u8*)inputs[blockIdx.y];
    apply_u8(in, out + (u64)blockIdx.y * stride, n, shift, mask, table);
}

// 32-bit containers with at most 16 stored bits.
extern "C" __global__ void gray_apply_u32(const u32* __restrict__ in, u8* __restrict__ out, u64 n,
                                          u32 shift, u32 mask, const u8* __restrict__ table) {
    GRID_STRIDE(i, n) { out[i] = __ldg(&table[table_index(in[i], shift, mask)]); }
}

