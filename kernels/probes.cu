// Benchmark probes for `dicomflow bench transfer` (src/backend/cuda/bench.rs): kernels of the
// production kernel's shape (16-bit stored values in, 8-bit pixels out, through mapped slots)
// that move only part of its traffic, or move it another way, to measure what the bus gives
// SM-issued reads and writes. None of them is used to render.
#include "common.cuh"

// Write-only traffic of the same shape as gray_apply_u16.
extern "C" __global__ void probe_write_u16(const u16* __restrict__ in, u8* __restrict__ out, u64 n, u32 shift,
                                           u32 mask, const u8* __restrict__ table) {
    u64 groups = n / 8;
    uint2* out8 = (uint2*)out;
    GRID_STRIDE(g, groups) { out8[g] = make_uint2((u32)g, shift); }
}

// Reads the first K bytes of every 256 bytes of the input (all of it for K = 256; the bench's
// slices are whole multiples of 256 bytes), with 16-byte loads. The payload rate as K shrinks
// shows the cost of each read request on the bus (one request per line piece read), from which
// the rate of whole-line reads follows.
template <int K>
__device__ __forceinline__ void read_part(const u16* __restrict__ in, u8* __restrict__ out, u64 n) {
    constexpr u32 per = K / 16;
    u64 chunks = (n * 2 / 256) * per;
    const uint4* base = (const uint4*)in;
    u32 acc = 0;
    GRID_STRIDE(c, chunks) {
        uint4 v = base[(c / per) * 16 + c % per];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u && n == 0) out[0] = (u8)acc;
}

// Read-only traffic of the same shape as gray_apply_u16: every byte of the input.
extern "C" __global__ void probe_read_u16(const u16* __restrict__ in, u8* __restrict__ out, u64 n, u32 shift,
                                          u32 mask, const u8* __restrict__ table) {
    read_part<256>(in, out, n);
}

extern "C" __global__ void probe_read_32of256(const u16* __restrict__ in, u8* __restrict__ out, u64 n,
                                              u32 shift, u32 mask, const u8* __restrict__ table) {
    read_part<32>(in, out, n);
}

extern "C" __global__ void probe_read_64of256(const u16* __restrict__ in, u8* __restrict__ out, u64 n,
                                              u32 shift, u32 mask, const u8* __restrict__ table) {
    read_part<64>(in, out, n);
}

extern "C" __global__ void probe_read_128of256(const u16* __restrict__ in, u8* __restrict__ out, u64 n,
                                               u32 shift, u32 mask, const u8* __restrict__ table) {
    read_part<128>(in, out, n);
}

// Hopper's bulk (TMA) copies: one thread per block moves whole chunks between the mapped slot
// and shared memory, so the memory system, not the SMs' load units, shapes the bus requests.
#define BULK_CHUNK 8192u
#define BULK_STAGES 4

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bulk_barrier_init(u64* bars, int count) {
    for (int s = 0; s < count; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Starts a bulk copy of `bytes` from global `src` into shared `dst`; `bar` completes with it.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}

__device__ __forceinline__ void bulk_wait(u64* bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
}

// Starts a bulk copy of `bytes` from shared `src` to global `dst` and commits it as a group.
__device__ __forceinline__ void bulk_store(void* dst, const void* src, u32 bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(src)),
                 "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
#endif

// Read-only: every block streams its chunks of the input into shared memory, four in flight.
extern "C" __global__ void probe_read_bulk(const u16* __restrict__ in, u8* __restrict__ out, u64 n, u32 shift,
                                           u32 mask, const u8* __restrict__ table) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) unsigned char buf[BULK_STAGES][BULK_CHUNK];
    __shared__ __align__(8) u64 bars[BULK_STAGES];
    if (threadIdx.x != 0) return;
    bulk_barrier_init(bars, BULK_STAGES);
    const unsigned char* src = (const unsigned char*)in;
    u64 chunks = n * 2 / BULK_CHUNK;
    u64 k = 0;
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x, k++) {
        int s = (int)(k % BULK_STAGES);
        if (k >= BULK_STAGES) bulk_wait(&bars[s], (u32)((k / BULK_STAGES - 1) & 1));
        bulk_load(buf[s], src + c * BULK_CHUNK, BULK_CHUNK, &bars[s]);
    }
    for (u64 j = (k > BULK_STAGES ? k - BULK_STAGES : 0); j < k; j++)
        bulk_wait(&bars[j % BULK_STAGES], (u32)((j / BULK_STAGES) & 1));
    if (n == 0) out[0] = buf[0][0];
#endif
}

// Write-only: every block streams one shared-memory chunk to its chunks of the output.
extern "C" __global__ void probe_write_bulk(const u16* __restrict__ in, u8* __restrict__ out, u64 n, u32 shift,
                                            u32 mask, const u8* __restrict__ table) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) unsigned char buf[BULK_CHUNK];
    for (u32 i = threadIdx.x; i < BULK_CHUNK; i += blockDim.x) buf[i] = (u8)i;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x != 0) return;
    u64 chunks = n / BULK_CHUNK;
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        bulk_store(out + c * BULK_CHUNK, buf, BULK_CHUNK);
        asm volatile("cp.async.bulk.wait_group.read 7;" ::: "memory");
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

// Plain 16-byte loads, with one thread per block asking L2 to prefetch the block's next chunk
// in bulk first, so that the chunk's bus requests are issued by the memory system at once.
extern "C" __global__ void probe_read_prefetch(const u16* __restrict__ in, u8* __restrict__ out, u64 n,
                                               u32 shift, u32 mask, const u8* __restrict__ table) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned char* src = (const unsigned char*)in;
    u64 chunks = n * 2 / BULK_CHUNK;
    u32 acc = 0;
    if (threadIdx.x == 0 && blockIdx.x < chunks)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src + blockIdx.x * BULK_CHUNK),
                     "r"(BULK_CHUNK)
                     : "memory");
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        u64 next = c + gridDim.x;
        if (threadIdx.x == 0 && next < chunks)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src + next * BULK_CHUNK),
                         "r"(BULK_CHUNK)
                         : "memory");
        const uint4* v = (const uint4*)(src + c * BULK_CHUNK);
        for (u32 i = threadIdx.x; i < BULK_CHUNK / 16; i += blockDim.x) {
            uint4 x = v[i];
            acc ^= x.x ^ x.y ^ x.z ^ x.w;
        }
    }
    if (acc == 0x12345678u && n == 0) out[0] = (u8)acc;
#endif
}
