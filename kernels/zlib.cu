// The GPU PNG encoder's kernels around nvCOMP (src/backend/cuda/encode.rs): the one-entry
// chunk tables nvCOMP's batched API reads, the Adler-32 of the filtered rows in 64 KiB chunks,
// the in-place rewrite of nvCOMP's gzip member into a length word and a zlib stream, and the
// copy of that stream into a mapped output slot. The CPU twin of the rewrite is
// `output::zlib::zlib_from_gzip`.
#include "common.cuh"

// nvCOMP's batched API reads device arrays of input pointers, input sizes and output
// pointers: one entry each (the whole slice is one gzip chunk; nvCOMP splits it internally).
extern "C" __global__ void gzip_setup(u64 input, u64 len, u64 output, u64* __restrict__ in_ptr,
                                      u64* __restrict__ in_size, u64* __restrict__ out_ptr) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        *in_ptr = input;
        *in_size = len;
        *out_ptr = output;
    }
}

// Adler-32 of each `chunk`-byte chunk of data[0, total) into adler[blockIdx.x]: one block per
// chunk (chunk < 2^24 so the 64-bit sums cannot overflow). With n bytes d_i, Adler-32 is
// A = 1 + sum d_i and B = n + sum (n - i) d_i, both mod 65521: two sums that reduce in any
// order. Launch with a multiple of 32 threads, at most 1024.
extern "C" __global__ void adler32_chunks(const u8* __restrict__ data, u64 total, u32 chunk,
                                          u32* __restrict__ adler) {
    __shared__ u64 partial[2][32];
    u64 start = (u64)blockIdx.x * chunk;
    if (start >= total) return;
    u32 n = (u32)min((u64)chunk, total - start);
    const u8* p = data + start;
    u64 s1 = 0, s2 = 0;
    bool aligned = (((u64)p) & 15u) == 0;
    u32 words = aligned ? n / 16 : 0;
    for (u32 w = threadIdx.x; w < words; w += blockDim.x) {
        uint4 v = ((const uint4*)p)[w];
        u32 parts[4] = {v.x, v.y, v.z, v.w};
        u32 base = w * 16;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            u32 d = (parts[k >> 2] >> ((k & 3) * 8)) & 0xffu;
            s1 += d;
            s2 += (u64)(n - (base + k)) * d;
        }
    }
    for (u32 i = words * 16 + threadIdx.x; i < n; i += blockDim.x) {
        u32 d = p[i];
        s1 += d;
        s2 += (u64)(n - i) * d;
    }
    for (u32 off = 16; off > 0; off >>= 1) {
        s1 += __shfl_down_sync(0xffffffffu, s1, off);
        s2 += __shfl_down_sync(0xffffffffu, s2, off);
    }
    u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        partial[0][warp] = s1;
        partial[1][warp] = s2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 t1 = 0, t2 = 0;
        for (u32 w = 0; w < (blockDim.x + 31) / 32; w++) {
            t1 += partial[0][w];
            t2 += partial[1][w];
        }
        u32 a = (u32)((1 + t1) % ADLER_BASE);
        u32 b = (u32)(((u64)n + t2) % ADLER_BASE);
        adler[blockIdx.x] = (b << 16) | a;
    }
}

// Rewrites, in place, the gzip member nvCOMP wrote at gz (*gz_size bytes, status *nv_status)
// for `total` input bytes into a length word and a zlib stream: a bare 10-byte gzip header
// (FLG 0, as nvCOMP writes it) becomes the 8-byte length word and the 2-byte zlib header
// `header`, the Deflate body stays where it is, and the CRC-32 of the trailer becomes the
// Adler-32 combined from the chunks' (`adler`, `chunks` of `chunk` bytes). The length word is
// ~0 when the member is not that (a failed chunk, optional header fields, an ISIZE that is not
// the input size, as several members would have) or when 8 + the stream exceeds `cap`: the
// caller then encodes on the CPU. One thread.
extern "C" __global__ void gzip_to_zlib(u8* __restrict__ gz, const u64* __restrict__ gz_size,
                                        const int* __restrict__ nv_status, u64 total,
                                        const u32* __restrict__ adler, u32 chunks, u64 chunk,
                                        u32 header, u64 cap) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    u64 len = *gz_size;
    bool ok = *nv_status == 0 && len >= 18 && gz[0] == 0x1f && gz[1] == 0x8b && gz[2] == 8 && gz[3] == 0;
    if (ok) {
        const u8* t = gz + len - 4;
        u32 isize = t[0] | (u32)t[1] << 8 | (u32)t[2] << 16 | (u32)t[3] << 24;
        ok = isize == (u32)total;
    }
    // Length word, zlib header, body, Adler-32: the member less its 10 + 8 bytes, plus 6.
    u64 zlen = ok ? len - 12 : 0;
    ok = ok && 8 + zlen <= cap;
    if (!ok) {
        *(u64*)gz = ~0ull;
        return;
    }
    u32 a = 1;
    for (u32 c = 0; c < chunks; c++) a = adler32_combine(a, adler[c], min(chunk, total - (u64)c * chunk));
    u8* trailer = gz + len - 8;
    trailer[0] = (u8)(a >> 24);
    trailer[1] = (u8)(a >> 16);
    trailer[2] = (u8)(a >> 8);
    trailer[3] = (u8)a;
    *(u64*)gz = zlen;
    gz[8] = (u8)(header >> 8);
    gz[9] = (u8)header;
}

// Copies the packed stream at src (length word first, as gzip_to_zlib leaves it) to dst with
// 16-byte stores, reading the length on the device: 8 bytes when packing failed (the host
// then reads ~0 and falls back), else 8 + length rounded up to 16, never more than `cap`
// (gzip_to_zlib kept 8 + length within cap). Both pointers 16-byte aligned.
extern "C" __global__ void copy_packed(const u8* __restrict__ src, u8* __restrict__ dst, u64 cap) {
    u64 len = *(const u64*)src;
    u64 n = min(len == ~0ull ? 8 : 8 + len, cap);
    u64 groups = n / 16;
    const uint4* s16 = (const uint4*)src;
    uint4* d16 = (uint4*)dst;
    GRID_STRIDE(g, groups) { d16[g] = s16[g]; }
    GRID_STRIDE(k, n % 16) { dst[groups * 16 + k] = src[groups * 16 + k]; }
}
