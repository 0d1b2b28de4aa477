// The loaders' upload of a large native frame (src/backend/cuda/upload.rs). A loader thread
// reads the frame from its file in chunks into a few page-locked, mapped staging chunks of its
// own; this kernel, one block launched per frame on the loader's stream, copies each chunk to
// the frame's device memory as soon as the loader says it is there, and says when it is done
// with it. Each of the launch's blocks copies its share of every chunk. No driver call per
// chunk (a copy per chunk from 14 loaders at once serialized in the driver: BENCHMARKS.md,
// "Loaders that upload"), and the frame is never written to a slot: the staging chunks are
// small enough to stay in the CPU's caches, where the GPU's reads can find them.
//
// `ctrl` is mapped host memory, 64-bit counters on cache lines of their own (in words):
//   [0]          chunks the loader has produced so far (ever, on this staging ring),
//   [8]          nonzero: stop now (the loader failed to read the file),
//   [16 + 8 b]   chunks block b has consumed (written here; the loader takes the least).
// The frame's chunks are numbers `first`, `first + 1`, ... of the ring; chunk `c` sits in
// staging slot `c % slots`, and its bytes go to `dst + (c - first) * chunk`.
#include "common.cuh"

extern "C" __global__ void pull_frame(volatile u64* ctrl, const uint4* staging, u64 chunk, u32 slots,
                                      u64 first, u8* dst, u64 len) {
    __shared__ int s_stop;
    u64 chunks = (len + chunk - 1) / chunk;
    for (u64 j = 0; j < chunks; j++) {
        if (threadIdx.x == 0) {
            int stop = 0;
            while (ctrl[0] <= first + j) {
                if (ctrl[8] != 0) {
                    stop = 1;
                    break;
                }
                __nanosleep(256);
            }
            s_stop = stop;
            // The chunk's bytes were written before the counter: read them after it.
            __threadfence_system();
        }
        __syncthreads();
        if (s_stop) return;
        u64 at = j * chunk;
        u64 n = len - at < chunk ? len - at : chunk;
        // This block's share of the chunk's 16-byte groups.
        u64 groups = n / 16;
        u64 share = (groups + gridDim.x - 1) / gridDim.x;
        u64 begin = blockIdx.x * share;
        u64 end = begin + share < groups ? begin + share : groups;
        // Uncached loads (`__ldcv`): the staging slot holds another chunk next time round.
        const uint4* src = staging + ((first + j) % slots) * (chunk / 16);
        uint4* out = (uint4*)(dst + at);
        u64 step = blockDim.x, i = begin + threadIdx.x;
        // Four loads in flight per thread: each crosses PCIe.
        for (; i + 3 * step < end; i += 4 * step) {
            uint4 a = __ldcv(src + i), b = __ldcv(src + i + step), c = __ldcv(src + i + 2 * step),
                  d = __ldcv(src + i + 3 * step);
            out[i] = a;
            out[i + step] = b;
            out[i + 2 * step] = c;
            out[i + 3 * step] = d;
        }
        for (; i < end; i += step) out[i] = __ldcv(src + i);
        if (blockIdx.x == gridDim.x - 1 && threadIdx.x < n % 16) {
            const volatile u8* tail = (const volatile u8*)(src + groups);
            dst[at + groups * 16 + threadIdx.x] = tail[threadIdx.x];
        }
        // Every load of the chunk has returned (its value is stored) and the stores are
        // visible device-wide before the loader may reuse the slot or hand the frame on.
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) ctrl[16 + 8 * blockIdx.x] = first + j + 1;
    }
}
