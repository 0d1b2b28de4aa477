// Window channels: a grayscale frame rendered through two or three windows at once, one colour
// channel each. The tables are the CPU's (src/render/table.rs, build_gray_table), one per
// window; src/backend/cpu.rs (render_channels) is the CPU twin.
#include "common.cuh"

// Each pixel through `channels` tables (one per window, `len` entries each,
// concatenated in channel order: src/backend/cuda/worker.rs builds them with the CPU's
// table::build_gray_table), written as interleaved RGB; with two tables blue is black. Stored
// values of 1, 2 or 4 bytes (`bytes`).
extern "C" __global__ void gray_channels(const u8* __restrict__ in, u8* __restrict__ out, u64 n, u32 bytes,
                                         u32 shift, u32 mask, const u8* __restrict__ tables, u32 len,
                                         u32 channels) {
    GRID_STRIDE(i, n) {
        u32 raw = bytes == 1 ? (u32)in[i] : (bytes == 2 ? (u32)((const u16*)in)[i] : ((const u32*)in)[i]);
        u32 idx = table_index(raw, shift, mask);
        u8* px = out + 3 * i;
        px[0] = __ldg(&tables[idx]);
        px[1] = channels > 1 ? __ldg(&tables[len + idx]) : (u8)0;
        px[2] = channels > 2 ? __ldg(&tables[2 * len + idx]) : (u8)0;
    }
}
