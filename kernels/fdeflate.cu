// fdeflate's PNG compressor on the GPU: the zlib stream `fdeflate::Compressor` (0.3.7) writes
// for the CPU's `png_compression = "fast"` (src/output/png.rs), bit for bit, so a GPU PNG is
// byte-identical to the CPU backend's. fdeflate writes one Deflate block with a fixed Huffman
// code tuned for filtered PNG rows, literals and runs of zeros (a zero, then lengths at distance
// 1), and it is fed one row per call, so each row's bits depend on that row alone: a warp
// encodes one row (a lane per 8-byte chunk, the runs of zeros between chunks found by a scan),
// and a scan of the rows' bit counts places the rows. nvCOMP costs 2.2–5 ms per call
// whatever the batch (BENCHMARKS.md, "GPU encoders"); this is why the fast level does not use it.
//
// Three launches per batch of slices (src/backend/cuda/encode.rs): `fdeflate_count` (a warp
// per row: its bit count and its Adler-32), `fdeflate_place` (a block per slice: the rows'
// offsets, the Adler-32 of the slice, the header, the end of block and the trailer, or ~0 in the
// length word when the stream would not fit or would be larger than stored blocks, which the
// CPU then writes as `png` does), `fdeflate_write` (a warp per row: its bits at its offset).
// The chunk encoder is also compiled for the CPU by tests/it/fdeflate_on_host.rs, which runs it
// as the warps do and checks it against the fdeflate crate: its shim defines the CUDA words
// away, and FD_HOST_TEST leaves the kernels out.
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

FD_CONST u8 FD_HEADER[54] = {
    120, 1,   237, 192, 3,   160, 36,  89,  150, 198, 241, 255, 119, 238, 141, 200, 204, 167,
    114, 75,  99,  174, 109, 219, 182, 109, 219, 182, 109, 219, 182, 109, 105, 140, 158, 150,
    74,  175, 158, 50,  51,  34,  238, 249, 118, 183, 106, 122, 166, 135, 59,  107, 213, 15,
};

// The code of each symbol (literals 0-255, end of block, lengths 257-285), LSB-first as written,
// | its length << 16 (FD_CODE); for each run length 3..258 its length symbol | extra bits << 16
// (FD_RUN: fdeflate's LENGTH_TO_SYMBOL and LENGTH_TO_LEN_EXTRA). Literal tables, copied to
// shared memory by each block: building them there (a walk of all 286 code lengths per symbol)
// cost more than the encoding once blocks took 8 rows each. `fd_derive_code` and `fd_derive_run`
// below derive them from fdeflate's code lengths; tests/it/fdeflate_on_host.rs checks that they
// agree.
FD_CONST u32 FD_CODE[FD_SYMBOLS] = {
    0x20000, 0x30002, 0x40001, 0x50005, 0x50015, 0x6001d, 0x6003d, 0x70033, 0x70073,
    0x7000b, 0x8001b, 0x8009b, 0x8005b, 0x800db, 0x8003b, 0x900c7, 0x901c7, 0x90027,
    0x90127, 0x900a7, 0x901a7, 0x90067, 0xa00d7, 0xa02d7, 0xa01d7, 0xa03d7, 0xa0037,
    0xa0237, 0xa0137, 0xa0337, 0xa00b7, 0xb020f, 0xb060f, 0xb010f, 0xb050f, 0xb030f,
    0xb070f, 0xb008f, 0xb048f, 0xb028f, 0xb068f, 0xb018f, 0xb058f, 0xc062f, 0xc0e2f,
    0xc012f, 0xc092f, 0xc052f, 0xc0d2f, 0xc032f, 0xc0b2f, 0xc072f, 0xc0f2f, 0xc00af,
    0xc08af, 0xc04af, 0xc0caf, 0xc02af, 0xc0aaf, 0xc06af, 0xc0eaf, 0xc01af, 0xc09af,
    0xc05af, 0xc0daf, 0xc03af, 0xc0baf, 0xc07af, 0xc0faf, 0xc006f, 0xc086f, 0xc046f,
    0xc0c6f, 0xc026f, 0xc0a6f, 0xc066f, 0xc0e6f, 0xc016f, 0xc096f, 0xc056f, 0xc0d6f,
    0xc036f, 0xc0b6f, 0xc076f, 0xc0f6f, 0xc00ef, 0xc08ef, 0xc04ef, 0xc0cef, 0xc02ef,
    0xc0aef, 0xc06ef, 0xc0eef, 0xc01ef, 0xc09ef, 0xc05ef, 0xc0def, 0xc03ef, 0xc0bef,
    0xc07ef, 0xc0fef, 0xc001f, 0xc081f, 0xc041f, 0xc0c1f, 0xc021f, 0xc0a1f, 0xc061f,
    0xc0e1f, 0xc011f, 0xc091f, 0xc051f, 0xc0d1f, 0xc031f, 0xc0b1f, 0xc071f, 0xc0f1f,
    0xc009f, 0xc089f, 0xc049f, 0xc0c9f, 0xc029f, 0xc0a9f, 0xc069f, 0xc0e9f, 0xc019f,
    0xc099f, 0xc059f, 0xc0d9f, 0xc039f, 0xc0b9f, 0xc079f, 0xc0f9f, 0xc005f, 0xc085f,
    0xc045f, 0xc0c5f, 0xc025f, 0xc0a5f, 0xc065f, 0xc0e5f, 0xc015f, 0xc095f, 0xc055f,
    0xc0d5f, 0xc035f, 0xc0b5f, 0xc075f, 0xc0f5f, 0xc00df, 0xc08df, 0xc04df, 0xc0cdf,
    0xc02df, 0xc0adf, 0xc06df, 0xc0edf, 0xc01df, 0xc09df, 0xc05df, 0xc0ddf, 0xc03df,
    0xc0bdf, 0xc07df, 0xc0fdf, 0xc003f, 0xc083f, 0xc043f, 0xc0c3f, 0xc023f, 0xc0a3f,
    0xc063f, 0xc0e3f, 0xc013f, 0xc093f, 0xc053f, 0xc0d3f, 0xc033f, 0xc0b3f, 0xc073f,
    0xc0f3f, 0xc00bf, 0xc08bf, 0xc04bf, 0xc0cbf, 0xc02bf, 0xc0abf, 0xc06bf, 0xc0ebf,
    0xc01bf, 0xc09bf, 0xc05bf, 0xc0dbf, 0xc03bf, 0xc0bbf, 0xc07bf, 0xc0fbf, 0xc007f,
    0xc087f, 0xc047f, 0xc0c7f, 0xc027f, 0xc0a7f, 0xc067f, 0xc0e7f, 0xc017f, 0xc097f,
    0xc057f, 0xc0d7f, 0xc037f, 0xc0b7f, 0xc077f, 0xc0f7f, 0xc00ff, 0xb038f, 0xb078f,
    0xb004f, 0xb044f, 0xb024f, 0xb064f, 0xb014f, 0xb054f, 0xb034f, 0xb074f, 0xa02b7,
    0xb00cf, 0xa01b7, 0xa03b7, 0xa0077, 0xa0277, 0xa0177, 0xa0377, 0xa00f7, 0xa02f7,
    0xa01f7, 0x90167, 0x900e7, 0x901e7, 0x90017, 0x90117, 0x800bb, 0x90097, 0x8007b,
    0x800fb, 0x80007, 0x80087, 0x80047, 0x7004b, 0x7002b, 0x7006b, 0x60003, 0x60023,
    0x60013, 0x5000d, 0x40009, 0x30006, 0xc08ff, 0xc04ff, 0xc0cff, 0x90197, 0x90057,
    0xb04cf, 0xa03f7, 0xb02cf, 0xb06cf, 0xa000f, 0xb01cf, 0xb05cf, 0xb03cf, 0xb07cf,
    0xb002f, 0xb042f, 0xc02ff, 0xb022f, 0xc0aff, 0xc06ff, 0xc0eff, 0xc01ff, 0xc09ff,
    0xc05ff, 0xc0dff, 0xc03ff, 0xc0bff, 0xc07ff, 0xc0fff, 0x90157,
};
FD_CONST u32 FD_RUN[256] = {
    0x00101, 0x00102, 0x00103, 0x00104, 0x00105, 0x00106, 0x00107, 0x00108, 0x10109,
    0x10109, 0x1010a, 0x1010a, 0x1010b, 0x1010b, 0x1010c, 0x1010c, 0x2010d, 0x2010d,
    0x2010d, 0x2010d, 0x2010e, 0x2010e, 0x2010e, 0x2010e, 0x2010f, 0x2010f, 0x2010f,
    0x2010f, 0x20110, 0x20110, 0x20110, 0x20110, 0x30111, 0x30111, 0x30111, 0x30111,
    0x30111, 0x30111, 0x30111, 0x30111, 0x30112, 0x30112, 0x30112, 0x30112, 0x30112,
    0x30112, 0x30112, 0x30112, 0x30113, 0x30113, 0x30113, 0x30113, 0x30113, 0x30113,
    0x30113, 0x30113, 0x30114, 0x30114, 0x30114, 0x30114, 0x30114, 0x30114, 0x30114,
    0x30114, 0x40115, 0x40115, 0x40115, 0x40115, 0x40115, 0x40115, 0x40115, 0x40115,
    0x40115, 0x40115, 0x40115, 0x40115, 0x40115, 0x40115, 0x40115, 0x40115, 0x40116,
    0x40116, 0x40116, 0x40116, 0x40116, 0x40116, 0x40116, 0x40116, 0x40116, 0x40116,
    0x40116, 0x40116, 0x40116, 0x40116, 0x40116, 0x40116, 0x40117, 0x40117, 0x40117,
    0x40117, 0x40117, 0x40117, 0x40117, 0x40117, 0x40117, 0x40117, 0x40117, 0x40117,
    0x40117, 0x40117, 0x40117, 0x40117, 0x40118, 0x40118, 0x40118, 0x40118, 0x40118,
    0x40118, 0x40118, 0x40118, 0x40118, 0x40118, 0x40118, 0x40118, 0x40118, 0x40118,
    0x40118, 0x40118, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119,
    0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119,
    0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119,
    0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x50119, 0x5011a, 0x5011a,
    0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a,
    0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a,
    0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a, 0x5011a,
    0x5011a, 0x5011a, 0x5011a, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b,
    0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b,
    0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b,
    0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011b, 0x5011c,
    0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c,
    0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c,
    0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c, 0x5011c,
    0x5011c, 0x5011c, 0x5011c, 0x0011d,
};

struct FdTables {
    u32 code[FD_SYMBOLS];
    u32 length[256];
};

// Copies the entries first, first + step, ... of both tables.
FD_FN void fd_tables(FdTables* t, u32 first, u32 step) {
    for (u32 s = first; s < FD_SYMBOLS; s += step) t->code[s] = FD_CODE[s];
    for (u32 k = first; k < 256; k += step) t->length[k] = FD_RUN[k];
}

#ifdef FD_HOST_TEST
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

// Deflate's length codes 257-285: base length and extra bits (RFC 1951 3.2.5).
FD_CONST u16 FD_LEN_BASE[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
FD_CONST u8 FD_LEN_EXTRA[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};

// FD_CODE[s]: the code of symbol `s` exactly as fdeflate's `compute_codes` assigns it
// (canonical: by length, then symbol), bit-reversed for LSB-first output, | its length << 16.
FD_FN u32 fd_derive_code(u32 s) {
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

// FD_RUN[k]: the length symbol of a run of k + 3 | its extra bits << 16.
FD_FN u32 fd_derive_run(u32 k) {
    u32 run = k + 3, sym = 0;
    for (u32 i = 0; i < 29; i++)
        if (FD_LEN_BASE[i] <= run) sym = i;
    return (257u + sym) | ((u32)FD_LEN_EXTRA[sym] << 16);
}
#endif

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

// fdeflate's `write_data` for one row, cut into its 8-byte chunks so that each chunk can be
// encoded apart (a lane of a warp per chunk, below): zero chunks extend a run of zeros, a run
// ends at a chunk's first non-zero byte, and a chunk's trailing zeros start the next. What a
// chunk writes depends only on its bytes and the run pending before it, and that run is a scan
// over the chunks before it (`fd_carry`, `fd_then`).

// The 8 bytes at p as a little-endian word (rows are not 8-byte aligned).
FD_FN u64 fd_load8(const u8* p) {
    u64 c = 0;
    for (u32 k = 0; k < 8; k++) c |= (u64)p[k] << (8 * k);
    return c;
}

// What a run of chunks does to the pending run of zeros: x -> x + value (`set` 0: zero chunks
// only), or x -> value (`set` 1: a non-zero chunk ended it and left `value` zeros at its end).
struct FdCarry {
    u32 set;
    u32 value;
};

// The carry of one chunk c.
FD_FN FdCarry fd_carry(u64 c) {
    FdCarry f;
    f.set = c == 0 ? 0u : 1u;
    f.value = c == 0 ? 8u : FD_CLZ64(c) / 8;
    return f;
}

// The carry of `first`, then `then`.
FD_FN FdCarry fd_then(FdCarry first, FdCarry then) {
    if (then.set) return then;
    FdCarry f;
    f.set = first.set;
    f.value = first.value + then.value;
    return f;
}

// The run pending after `f`, entered with `run`.
FD_FN u32 fd_apply(FdCarry f, u32 run) { return f.set ? f.value : run + f.value; }

// One chunk c (its bytes at p) entered with `run` zeros pending: nothing for a zero chunk;
// else the run, ended by the chunk's leading zero bytes, then its literals up to the zero bytes
// at its end (which start the next run). fdeflate's three cases (a run ended inside or at the
// chunk's start, trailing zeros or none) all come to this.
template <class Sink>
FD_FN void fd_chunk(const FdTables* t, const u8* p, u64 c, u32 run, Sink& s) {
    if (c == 0) return;
    u32 first = 0;
    if (run > 0) {
        first = FD_CTZ64(c) / 8;
        fd_run(t, run + first, s);
    }
    u32 end = 8 - FD_CLZ64(c) / 8;
    for (u32 k = first; k < end; k++) fd_literal(t, p[k], s);
}

// The end of a row of n bytes: the run still pending after its whole chunks, then the bytes
// past them as literals.
template <class Sink>
FD_FN void fd_row_end(const FdTables* t, const u8* row, u32 n, u32 run, Sink& s) {
    if (run > 0) fd_run(t, run, s);
    for (u32 i = n / 8 * 8; i < n; i++) fd_literal(t, row[i], s);
}

// The sums the Adler-32 of a row of n bytes is made of, over its bytes [from, to): A = 1 + sum
// d_i, B = n + sum (n - i) d_i.
FD_FN void fd_adler_sums(const u8* row, u32 n, u32 from, u32 to, u64* s1, u64* s2) {
    for (u32 i = from; i < to; i++) {
        u32 v = row[i];
        *s1 += v;
        *s2 += (u64)(n - i) * v;
    }
}

// The Adler-32 of a row of n bytes from its sums.
FD_FN u32 fd_adler_of(u32 n, u64 s1, u64 s2) {
    return (u32)(((n + s2) % ADLER_BASE) << 16 | ((1 + s1) % ADLER_BASE));
}

// fdeflate's StoredOnlyCompressor::compressed_size: the zlib stream of stored blocks, which
// `png` (and the CPU writer) write instead when fdeflate's is larger.
FD_FN u64 fd_stored_size(u64 raw) {
    u64 m = 65535;
    return ((raw > 0 ? raw - 1 : 0) / m) * (m + 5) + (raw % m + 5) + 6;
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

// The start of both per-row kernels: the block copies the code tables into `t` (shared
// memory), then each of its warps takes a row, in a grid of `blocks_per_slice` blocks per slice (a row
// per 32 threads); false for a warp past its slice's rows (the whole warp: it leaves together).
__device__ __forceinline__ bool fd_row_warp(FdTables* t, const FdSlice* slices, u32 n,
                                            u32 blocks_per_slice, u32* slice, u32* row) {
    fd_tables(t, threadIdx.x, blockDim.x);
    __syncthreads();
    *slice = blockIdx.x / blocks_per_slice;
    *row = (blockIdx.x % blocks_per_slice) * (blockDim.x / 32) + threadIdx.x / 32;
    return *slice < n && *row < slices[*slice].row_count;
}

#define FD_FULL 0xffffffffu

// One round of a row's 8-byte chunks for a warp: lane `lane` takes chunk `base + lane` (into
// *c; a zero word past the row's `chunks`) and gets the run of zeros pending before it, a scan
// of the carries of the chunks before it (Hillis-Steele, in shuffles) applied to `*run`, which
// becomes the run pending after the round.
__device__ __forceinline__ u32 fd_round(const u8* row, u32 chunks, u32 base, u32 lane, u32* run,
                                        u64* c) {
    u32 k = base + lane;
    *c = k < chunks ? fd_load8(row + 8 * (u64)k) : 0;
    FdCarry f = fd_carry(*c);
    if (k >= chunks) f.value = 0;  // x -> x: no chunk
    for (u32 off = 1; off < 32; off <<= 1) {
        FdCarry o;
        o.set = __shfl_up_sync(FD_FULL, f.set, off);
        o.value = __shfl_up_sync(FD_FULL, f.value, off);
        if (lane >= off) f = fd_then(o, f);
    }
    FdCarry before;
    before.set = __shfl_up_sync(FD_FULL, f.set, 1);
    before.value = __shfl_up_sync(FD_FULL, f.value, 1);
    if (lane == 0) before.set = before.value = 0;
    u32 in = fd_apply(before, *run);
    FdCarry all;
    all.set = __shfl_sync(FD_FULL, f.set, 31);
    all.value = __shfl_sync(FD_FULL, f.value, 31);
    *run = fd_apply(all, *run);
    return in;
}

// Per row, a warp: its bit count into bits[slice * stride + row], its Adler-32 into adler[...].
// A thread per row made each thread walk a whole row byte by byte: 101 µs a batch of 16 512²
// slices (ncu, H200), the largest part of the GPU's work on it with `fdeflate_write`; a warp
// per row takes 16 µs.
extern "C" __global__ void fdeflate_count(const FdSlice* __restrict__ slices, u32 n,
                                          u32 blocks_per_slice, u32 stride, u32* __restrict__ bits,
                                          u32* __restrict__ adler) {
    __shared__ FdTables t;
    u32 slice, row;
    if (!fd_row_warp(&t, slices, n, blocks_per_slice, &slice, &row)) return;
    FdSlice d = slices[slice];
    u32 lane = threadIdx.x % 32, nb = d.row_bytes, chunks = nb / 8;
    const u8* p = (const u8*)d.rows + (u64)row * nb;
    u32 run = 0;
    u64 mine = 0, s1 = 0, s2 = 0;
    for (u32 base = 0; base < chunks; base += 32) {
        u64 c;
        u32 in = fd_round(p, chunks, base, lane, &run, &c);
        u32 k = base + lane;
        if (k < chunks) {
            FdCount count = {0};
            fd_chunk(&t, p + 8 * (u64)k, c, in, count);
            mine += count.bits;
            fd_adler_sums(p, nb, 8 * k, 8 * k + 8, &s1, &s2);
        }
    }
    for (u32 off = 16; off > 0; off >>= 1) {
        mine += __shfl_down_sync(FD_FULL, mine, off);
        s1 += __shfl_down_sync(FD_FULL, s1, off);
        s2 += __shfl_down_sync(FD_FULL, s2, off);
    }
    if (lane == 0) {
        FdCount count = {0};
        fd_row_end(&t, p, nb, run, count);
        fd_adler_sums(p, nb, chunks * 8, nb, &s1, &s2);
        u64 at = (u64)slice * stride + row;
        // A row's bits fit 32 bits: 12 bits per byte at most, and rows are far below 2^28 bytes.
        bits[at] = (u32)(mine + count.bits);
        adler[at] = fd_adler_of(nb, s1, s2);
    }
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
    if (tid == 0) code_eob = FD_CODE[FD_END_OF_BLOCK];
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

// Per row, a warp: its bits at FD_HEADER_BITS + its offset in the slice's stream, each chunk's
// at its place in the row (a scan of the chunks' bit counts), unless `fdeflate_place` gave up on
// the slice (~0 in its length word). 24.8 µs a batch of 16 512² slices (ncu, H200), 154 µs
// with a thread per row.
extern "C" __global__ void fdeflate_write(const FdSlice* __restrict__ slices, u32 n,
                                          u32 blocks_per_slice, u32 stride,
                                          const u32* __restrict__ offsets) {
    __shared__ FdTables t;
    u32 slice, row;
    if (!fd_row_warp(&t, slices, n, blocks_per_slice, &slice, &row)) return;
    FdSlice d = slices[slice];
    u8* out = (u8*)d.packed;
    if (*(const u64*)out == ~0ull) return;
    u32* words = (u32*)(out + 8);
    u32 lane = threadIdx.x % 32, nb = d.row_bytes, chunks = nb / 8;
    const u8* p = (const u8*)d.rows + (u64)row * nb;
    u64 at = FD_HEADER_BITS + (u64)offsets[(u64)slice * stride + row];
    u32 run = 0;
    for (u32 base = 0; base < chunks; base += 32) {
        u64 c;
        u32 in = fd_round(p, chunks, base, lane, &run, &c);
        u32 k = base + lane;
        FdCount count = {0};
        if (k < chunks) fd_chunk(&t, p + 8 * (u64)k, c, in, count);
        u32 mine = (u32)count.bits, upto = mine;
        for (u32 off = 1; off < 32; off <<= 1) {
            u32 o = __shfl_up_sync(FD_FULL, upto, off);
            if (lane >= off) upto += o;
        }
        if (mine > 0) {
            FdWrite w;
            w.begin(words, at + upto - mine);
            fd_chunk(&t, p + 8 * (u64)k, c, in, w);
            w.end();
        }
        at += __shfl_sync(FD_FULL, upto, 31);
    }
    if (lane == 0) {
        FdWrite w;
        w.begin(words, at);
        fd_row_end(&t, p, nb, run, w);
        w.end();
    }
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
