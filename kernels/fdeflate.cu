// fdeflate's PNG compressor on the GPU: the zlib stream `fdeflate::Compressor` (0.3.7) writes
// for the CPU's `png_compression = "fast"` (src/output/png.rs), bit for bit, so a GPU PNG is
// byte-identical to the CPU backend's. fdeflate writes one Deflate block with a fixed Huffman
// code tuned for filtered PNG rows, literals and runs of zeros (a zero, then lengths at distance
// 1), and it is fed one row per call, so each row's bits depend on that row alone: one thread
// encodes one row, and a scan of the rows' bit counts places them. nvCOMP costs 2.2–5 ms per call
// whatever the batch (BENCHMARKS.md, "GPU encoders"); this is why the fast level does not use it.
//
// Three launches per batch of slices (src/backend/cuda/encode.rs): `fdeflate_count` (a thread
// per row: its bit count and its Adler-32), `fdeflate_place` (a block per slice: the rows'
// offsets, the Adler-32 of the slice, the header, the end of block and the trailer, or ~0 in the
// length word when the stream would not fit or would be larger than stored blocks, which the
// CPU then writes as `png` does), `fdeflate_write` (a thread per row: its bits at its offset).
// The row encoder is also compiled for the CPU by tests/it/fdeflate_on_host.rs, which checks it
// against the fdeflate crate: its shim defines the CUDA words away, and FD_HOST_TEST leaves the
// kernels out.
#include "common.cuh"

#ifndef FD_HOST_TEST
#define FD_FN __device__ __forceinline__
#define FD_CONST __constant__ const
#define FD_CTZ64(x) ((u32)(__ffsll((long long)(x)) - 1))
#define FD_CLZ64(x) ((u32)__clzll((long long)(x)))
#define FD_OR(p, v) atomicOr((p), (v))
#endif

#define FD_SYMBOLS 286u
#define FD_END_OF_BLOCK 256u
// fdeflate's zlib header and dynamic block header (compress.rs, `write_headers`): 53 bytes,
// then 5 bits of the 54th.
#define FD_HEADER_BITS (53u * 8u + 5u)

// fdeflate 0.3.7 src/tables.rs HUFFMAN_LENGTHS: literals 0-255, end of block, lengths 257-285.
FD_CONST u8 FD_LENGTHS[FD_SYMBOLS] = {
     2,  3,  4,  5,  5,  6,  6,  7,  7,  7,  8,  8,  8,  8,  8,  9,  9,  9,  9,  9,  9,  9, 10, 10, 10, 10,
    10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 10, 11, 10, 10, 10, 10, 10, 10, 10, 10,
    10,  9,  9,  9,  9,  9,  8,  9,  8,  8,  8,  8,  8,  7,  7,  7,  6,  6,  6,  5,  4,  3, 12, 12, 12,  9,
     9, 11, 10, 11, 11, 10, 11, 11, 11, 11, 11, 11, 12, 11, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,  9,
};

FD_CONST u8 FD_HEADER[54] = {
    120, 1,   237, 192, 3,   160, 36,  89,  150, 198, 241, 255, 119, 238, 141, 200, 204, 167,
    114, 75,  99,  174, 109, 219, 182, 109, 219, 182, 109, 219, 182, 109, 105, 140, 158, 150,
    74,  175, 158, 50,  51,  34,  238, 249, 118, 183, 106, 122, 166, 135, 59,  107, 213, 15,
};

// Deflate's length codes 257-285: base length and extra bits (RFC 1951 3.2.5).
FD_CONST u16 FD_LEN_BASE[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
FD_CONST u8 FD_LEN_EXTRA[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};

// The code of each symbol (LSB-first, as written) | its length << 16, and for each run length
// 3..258 its length symbol | extra bits << 16 (fdeflate's LENGTH_TO_SYMBOL, LENGTH_TO_LEN_EXTRA).
struct FdTables {
    u32 code[FD_SYMBOLS];
    u32 length[256];
};

// The code of symbol `s` exactly as fdeflate's `compute_codes` assigns it (canonical: by
// length, then symbol), bit-reversed for LSB-first output, | its length << 16.
FD_FN u32 fd_code(u32 s) {
    u32 len = FD_LENGTHS[s];
    u32 count[13] = {0};
    u32 rank = 0;
    for (u32 j = 0; j < FD_SYMBOLS; j++) {
        u32 l = FD_LENGTHS[j];
        count[l]++;
        if (l == len && j < s) rank++;
    }
    u32 code = 0;
    for (u32 l = 1; l < len; l++) code = (code + count[l]) << 1;
    code += rank;
    u32 rev = 0;
    for (u32 b = 0; b < len; b++) rev |= ((code >> b) & 1u) << (len - 1 - b);
    return rev | (len << 16);
}

// Fills the entries first, first + step, ... of both tables.
FD_FN void fd_tables(FdTables* t, u32 first, u32 step) {
    for (u32 s = first; s < FD_SYMBOLS; s += step) t->code[s] = fd_code(s);
    for (u32 k = first; k < 256; k += step) {
        u32 run = k + 3, sym = 0;
        for (u32 i = 0; i < 29; i++)
            if (FD_LEN_BASE[i] <= run) sym = i;
        t->length[k] = (257u + sym) | ((u32)FD_LEN_EXTRA[sym] << 16);
    }
}

// A sink that only counts bits.
struct FdCount {
    u64 bits;
    FD_FN void put(u32 value, u32 n) {
        (void)value;
        bits += n;
    }
};

// A sink that writes bits, LSB first, into 32-bit little-endian words from bit `start` on:
// words wholly inside the row are stored, the first and last (which a neighbour shares) are
// OR-ed into the zeroed stream.
struct FdWrite {
    u32* words;
    u64 index;
    u64 acc;
    u32 nacc;
    bool first;
    FD_FN void begin(u32* w, u64 start) {
        words = w;
        index = start / 32;
        nacc = (u32)(start % 32);
        acc = 0;
        first = true;
    }
    FD_FN void put(u32 value, u32 n) {
        acc |= (u64)value << nacc;
        nacc += n;
        if (nacc >= 32) {
            u32 w = (u32)acc;
            if (first) {
                FD_OR(&words[index], w);
                first = false;
            } else {
                words[index] = w;
            }
            index++;
            acc >>= 32;
            nacc -= 32;
        }
    }
    FD_FN void end() {
        if (nacc > 0) FD_OR(&words[index], (u32)acc);
    }
};

template <class Sink>
FD_FN void fd_literal(const FdTables* t, u32 byte, Sink& s) {
    u32 e = t->code[byte];
    s.put(e & 0xffffu, e >> 16);
}

// fdeflate's `write_run`: a zero literal, then lengths at distance 1 (distance code 0, one bit).
template <class Sink>
FD_FN void fd_run(const FdTables* t, u32 run, Sink& s) {
    u32 zero = t->code[0];
    s.put(zero & 0xffffu, zero >> 16);
    run -= 1;
    u32 max = t->code[285];
    while (run >= 258) {
        s.put(max & 0xffffu, (max >> 16) + 1);
        run -= 258;
    }
    if (run > 4) {
        u32 l = t->length[run - 3];
        u32 sym = t->code[l & 0xffffu];
        u32 extra = l >> 16;
        s.put(sym & 0xffffu, sym >> 16);
        s.put((run - 3) & ((1u << extra) - 1u), extra + 1);
    } else {
        // Code 0 is all zero bits (fdeflate asserts it): `run` more zero literals.
        s.put(0, run * (zero >> 16));
    }
}

// fdeflate's `write_data` for one row of n bytes: 8-byte chunks, zero chunks extend a run, a
// run ends at the chunk's first non-zero byte, and a chunk's trailing zeros start the next.
template <class Sink>
FD_FN void fd_row(const FdTables* t, const u8* row, u32 n, Sink& s) {
    u32 run = 0;
    u32 whole = n / 8 * 8;
    for (u32 i = 0; i < whole; i += 8) {
        u64 c = 0;
        for (u32 k = 0; k < 8; k++) c |= (u64)row[i + k] << (8 * k);
        if (c == 0) {
            run += 8;
            continue;
        }
        if (run > 0) {
            u32 run_extra = FD_CTZ64(c) / 8;
            fd_run(t, run + run_extra, s);
            run = 0;
            if (run_extra > 0) {
                run = FD_CLZ64(c) / 8;
                for (u32 k = run_extra; k < 8 - run; k++) fd_literal(t, row[i + k], s);
                continue;
            }
        }
        u32 run_start = FD_CLZ64(c) / 8;
        if (run_start > 0) {
            for (u32 k = 0; k < 8 - run_start; k++) fd_literal(t, row[i + k], s);
            run = run_start;
            continue;
        }
        for (u32 k = 0; k < 8; k++) fd_literal(t, row[i + k], s);
    }
    if (run > 0) fd_run(t, run, s);
    for (u32 i = whole; i < n; i++) fd_literal(t, row[i], s);
}

// fdeflate's StoredOnlyCompressor::compressed_size: the zlib stream of stored blocks, which
// `png` (and the CPU writer) write instead when fdeflate's is larger.
FD_FN u64 fd_stored_size(u64 raw) {
    u64 m = 65535;
    return ((raw > 0 ? raw - 1 : 0) / m) * (m + 5) + (raw % m + 5) + 6;
}

// The Adler-32 of one row of n bytes alone: A = 1 + sum d_i, B = n + sum (n - i) d_i.
FD_FN u32 fd_row_adler(const u8* p, u32 n) {
    u64 s1 = 0, s2 = 0;
    for (u32 i = 0; i < n; i++) {
        u32 v = p[i];
        s1 += v;
        s2 += (u64)(n - i) * v;
    }
    return (u32)(((n + s2) % ADLER_BASE) << 16 | ((1 + s1) % ADLER_BASE));
}

#ifndef FD_HOST_TEST

// One slice of a batch: `row_count` filtered rows of `row_bytes` (filter byte included) at
// `rows`; its packed stream (the length word, then the zlib stream) goes to `packed`, at most
// `cap` bytes in all, and then to `out` (a mapped output slot; 0: left in `packed`) by
// `fdeflate_copy_out`.
struct FdSlice {
    u64 rows;
    u64 packed;
    u32 row_bytes;
    u32 row_count;
    u64 cap;
    u64 out;
};

// The start of both per-row kernels: the block builds the code tables in `t` (shared memory),
// then finds this thread's slice and row in a grid of `blocks_per_slice` blocks per slice;
// false for a thread past its slice's rows.
__device__ __forceinline__ bool fd_row_thread(FdTables* t, const FdSlice* slices, u32 n,
                                              u32 blocks_per_slice, u32* slice, u32* row) {
    fd_tables(t, threadIdx.x, blockDim.x);
    __syncthreads();
    *slice = blockIdx.x / blocks_per_slice;
    *row = (blockIdx.x % blocks_per_slice) * blockDim.x + threadIdx.x;
    return *slice < n && *row < slices[*slice].row_count;
}

// Per row: its bit count into bits[slice * stride + row], its Adler-32 into adler[...].
extern "C" __global__ void fdeflate_count(const FdSlice* __restrict__ slices, u32 n,
                                          u32 blocks_per_slice, u32 stride, u32* __restrict__ bits,
                                          u32* __restrict__ adler) {
    __shared__ FdTables t;
    u32 slice, row;
    if (!fd_row_thread(&t, slices, n, blocks_per_slice, &slice, &row)) return;
    FdSlice d = slices[slice];
    const u8* p = (const u8*)d.rows + (u64)row * d.row_bytes;
    FdCount c = {0};
    fd_row(&t, p, d.row_bytes, c);
    u64 at = (u64)slice * stride + row;
    // A row's bits fit 32 bits: 12 bits per byte at most, and rows are far below 2^28 bytes.
    bits[at] = (u32)c.bits;
    adler[at] = fd_row_adler(p, d.row_bytes);
}

// A block per slice (blockDim.x a power of two, at most 1024): turns the rows' bit counts into
// their bit offsets in the stream (in place), writes the header, the end of block and the
// Adler-32 around them into the zeroed stream and the stream's length into the length word; or
// ~0 there (and no stream) when it would exceed the slice's `cap` or fdeflate's stored size.
extern "C" __global__ void fdeflate_place(const FdSlice* __restrict__ slices, u32 n, u32 stride,
                                          u32* __restrict__ bits, const u32* __restrict__ adler) {
    __shared__ u64 sums[1024];
    __shared__ u32 checks[1024];
    __shared__ u64 lens[1024];
    __shared__ u64 total_bits;
    __shared__ u32 code_eob;
    u32 slice = blockIdx.x;
    if (slice >= n) return;
    FdSlice d = slices[slice];
    u32 tid = threadIdx.x, threads = blockDim.x;
    if (tid == 0) code_eob = fd_code(FD_END_OF_BLOCK);
    // Each thread takes a contiguous run of rows: its bits and its Adler-32.
    u32 per = (d.row_count + threads - 1) / threads;
    u32 r0 = min(d.row_count, tid * per), r1 = min(d.row_count, r0 + per);
    u64 mine = 0;
    u32 a = 1;
    u32* b = bits + (u64)slice * stride;
    const u32* ad = adler + (u64)slice * stride;
    for (u32 r = r0; r < r1; r++) {
        mine += b[r];
        a = adler32_combine(a, ad[r], d.row_bytes);
    }
    sums[tid] = mine;
    checks[tid] = a;
    lens[tid] = (u64)(r1 - r0) * d.row_bytes;
    __syncthreads();
    // Inclusive scan of the sums (Hillis-Steele) and a tree of Adler-32 combines.
    for (u32 off = 1; off < threads; off <<= 1) {
        u64 add = tid >= off ? sums[tid - off] : 0;
        u32 other = 0;
        u64 other_len = 0;
        bool combine = (tid % (2 * off)) == 0 && tid + off < threads;
        if (combine) {
            other = checks[tid + off];
            other_len = lens[tid + off];
        }
        __syncthreads();
        sums[tid] += add;
        if (combine) {
            checks[tid] = adler32_combine(checks[tid], other, other_len);
            lens[tid] += other_len;
        }
        __syncthreads();
    }
    u64 before = sums[tid] - mine;
    if (tid == 0) total_bits = sums[threads - 1];
    __syncthreads();
    u64 row_bits = total_bits;
    u32 eob_len = code_eob >> 16;
    u64 end_bits = FD_HEADER_BITS + row_bits + eob_len;
    u64 zlen = (end_bits + 7) / 8 + 4;
    u64 raw = (u64)d.row_bytes * d.row_count;
    bool fits = 8 + zlen <= d.cap && zlen <= fd_stored_size(raw) && row_bits < (1ull << 32);
    u8* out = (u8*)d.packed;
    if (!fits) {
        if (tid == 0) *(u64*)out = ~0ull;
        return;
    }
    // Offsets (relative to the first row's first bit) back into `bits`.
    u64 at = before;
    for (u32 r = r0; r < r1; r++) {
        u32 mine_r = b[r];
        b[r] = (u32)at;
        at += mine_r;
    }
    u32* words = (u32*)(out + 8);
    u64 nwords = (zlen + 3) / 4;
    for (u64 w = tid; w < nwords; w += threads) words[w] = 0;
    __syncthreads();
    if (tid == 0) {
        u8* z = out + 8;
        for (u32 i = 0; i < 53; i++) z[i] = FD_HEADER[i];
        z[53] = FD_HEADER[53] & 0x1fu;
        u64 eob_at = FD_HEADER_BITS + row_bits;
        u64 acc = (u64)(code_eob & 0xffffu) << (eob_at % 32);
        atomicOr(&words[eob_at / 32], (u32)acc);
        if ((eob_at % 32) + eob_len > 32) atomicOr(&words[eob_at / 32 + 1], (u32)(acc >> 32));
        u32 check = checks[0];
        u64 t = (end_bits + 7) / 8;
        z[t] = (u8)(check >> 24);
        z[t + 1] = (u8)(check >> 16);
        z[t + 2] = (u8)(check >> 8);
        z[t + 3] = (u8)check;
        *(u64*)out = zlen;
    }
}

// Per row: its bits at FD_HEADER_BITS + its offset in the slice's stream, unless
// `fdeflate_place` gave up on the slice (~0 in its length word).
extern "C" __global__ void fdeflate_write(const FdSlice* __restrict__ slices, u32 n,
                                          u32 blocks_per_slice, u32 stride,
                                          const u32* __restrict__ offsets) {
    __shared__ FdTables t;
    u32 slice, row;
    if (!fd_row_thread(&t, slices, n, blocks_per_slice, &slice, &row)) return;
    FdSlice d = slices[slice];
    u8* out = (u8*)d.packed;
    if (*(const u64*)out == ~0ull) return;
    const u8* p = (const u8*)d.rows + (u64)row * d.row_bytes;
    FdWrite w;
    w.begin((u32*)(out + 8), FD_HEADER_BITS + (u64)offsets[(u64)slice * stride + row]);
    fd_row(&t, p, d.row_bytes, w);
    w.end();
}

// Every slice's packed stream to its `out`, as `copy_packed` (zlib.cu) copies one: 8 bytes
// when packing failed (the host then reads ~0 and falls back), else 8 + length, never more than
// `cap`, with 16-byte stores (both addresses 16-byte aligned); `blocks_per_slice` blocks per
// slice. One launch for the batch where a launch per slice made 16 more driver calls per call.
extern "C" __global__ void fdeflate_copy_out(const FdSlice* __restrict__ slices, u32 n,
                                             u32 blocks_per_slice) {
    u32 slice = blockIdx.x / blocks_per_slice;
    if (slice >= n) return;
    FdSlice d = slices[slice];
    if (d.out == 0) return;
    const u8* src = (const u8*)d.packed;
    u8* dst = (u8*)d.out;
    u64 len = *(const u64*)src;
    u64 total = min(len == ~0ull ? 8ull : 8ull + len, d.cap);
    u64 groups = total / 16;
    const uint4* s16 = (const uint4*)src;
    uint4* d16 = (uint4*)dst;
    u64 first = (u64)(blockIdx.x % blocks_per_slice) * blockDim.x + threadIdx.x;
    u64 step = (u64)blocks_per_slice * blockDim.x;
    for (u64 g = first; g < groups; g += step) d16[g] = s16[g];
    for (u64 k = first; k < total % 16; k += step) dst[groups * 16 + k] = src[groups * 16 + k];
}

#endif
