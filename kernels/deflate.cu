// The GPU PNG encoder's own kernels around nvCOMP (src/backend/cuda/encode.rs): the chunk
// tables nvCOMP's batched API reads, the Adler-32 of each chunk of filtered rows, the walk that
// finds where each compressed chunk's final block starts and ends (so the chunks can be joined
// into one stream), and the packing of one zlib stream into a contiguous buffer. The CPU twin
// and reference of the walk and the join is src/output/zlib.rs.
#include "common.cuh"

#define ADLER_BASE 65521u

// Status codes of a piece (beside nvCOMP's own, which are passed through, all below 1 << 20).
#define PIECE_OK 0u
#define PIECE_TRUNCATED (1u << 20)
#define PIECE_BAD_BLOCK ((1u << 20) + 1u)
#define PIECE_BAD_STORED ((1u << 20) + 2u)
#define PIECE_BAD_TABLE ((1u << 20) + 3u)
#define PIECE_BAD_CODE ((1u << 20) + 4u)
#define PIECE_TRAILING ((1u << 20) + 5u)
#define PIECE_BAD_GZIP ((1u << 20) + 6u)

// What the joiner needs of each compressed piece: where its Deflate stream starts in its
// buffer, its length in bytes, the bit offset of its final block's header, and the bit offset
// just past that block's end (both relative to the start).
struct Piece {
    u64 start;
    u64 len;
    u64 final_bit;
    u64 end_bit;
};

// Chunk i of the `total` bytes at `input` is `chunk` bytes (the last one shorter); its
// compressed output goes to `output + i * out_stride`.
extern "C" __global__ void deflate_setup(u64 input, u64 total, u64 chunk, u64 output, u64 out_stride,
                                         u32 n, u64* __restrict__ in_ptrs, u64* __restrict__ in_sizes,
                                         u64* __restrict__ out_ptrs) {
    GRID_STRIDE(i, (u64)n) {
        u64 start = i * chunk;
        in_ptrs[i] = input + start;
        in_sizes[i] = min(chunk, total - start);
        out_ptrs[i] = output + i * out_stride;
    }
}

__device__ __forceinline__ u32 adler_mod(u64 v) { return (u32)(v % ADLER_BASE); }

// zlib's adler32_combine: the checksum of a ++ b from those of a and b and b's length.
__device__ u32 adler32_combine(u32 a, u32 b, u64 len_b) {
    u64 rem = len_b % ADLER_BASE;
    u64 a1 = a & 0xffffu, b1 = a >> 16, a2 = b & 0xffffu, b2 = b >> 16;
    u64 sum1 = (a1 + a2 + ADLER_BASE - 1) % ADLER_BASE;
    u64 sum2 = (rem * a1 % ADLER_BASE + b1 + b2 + ADLER_BASE - rem) % ADLER_BASE;
    return (u32)(sum1 | (sum2 << 16));
}

// Adler-32 of each `chunk`-byte chunk of data[0, total) into adler[blockIdx.x]: one block per
// chunk (chunk < 2^24 so the 64-bit sums cannot overflow). With n bytes d_i, Adler-32 is
// A = 1 + sum d_i and B = n + sum (n - i) d_i, both mod 65521: two sums that reduce in any order.
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
        u32 a = adler_mod(1 + t1);
        u32 b = adler_mod((u64)n + t2);
        adler[blockIdx.x] = (b << 16) | a;
    }
}

// ---- Walking a Deflate stream (RFC 1951) without decoding it into memory ----

// Bits least significant first through a 64-bit buffer.
struct Bits {
    const u8* data;
    u64 len;   // bytes
    u64 next;  // next byte to load
    u64 buf;
    u32 count; // valid bits in buf
};

__device__ __forceinline__ void bits_refill(Bits& b) {
    while (b.count <= 56 && b.next < b.len) {
        b.buf |= (u64)b.data[b.next++] << b.count;
        b.count += 8;
    }
}

// Position in bits.
__device__ __forceinline__ u64 bits_pos(const Bits& b) { return b.next * 8 - b.count; }

// Takes n <= 32 bits; false when the stream ends first.
__device__ __forceinline__ bool bits_take(Bits& b, u32 n, u32* v) {
    bits_refill(b);
    if (b.count < n) return false;
    *v = (u32)(b.buf & ((n == 32) ? 0xffffffffull : ((1ull << n) - 1)));
    b.buf = n == 64 ? 0 : b.buf >> n;
    b.count -= n;
    return true;
}

#define FAST_BITS 9u
#define MAX_SYMBOLS 288u

// A canonical Huffman code as zlib's puff keeps it, plus a direct table for short codes.
struct Huff {
    u16 count[16];
    u16 symbol[MAX_SYMBOLS];
    u16 fast[1u << FAST_BITS]; // symbol << 4 | length, 0 = longer or absent
};

// Builds the code of lengths[0, n); false when over-subscribed.
__device__ bool huff_build(Huff& h, const u8* lengths, u32 n) {
    for (u32 i = 0; i < 16; i++) h.count[i] = 0;
    for (u32 i = 0; i < n; i++) h.count[lengths[i]]++;
    int left = 1;
    for (u32 len = 1; len < 16; len++) {
        left <<= 1;
        left -= h.count[len];
        if (left < 0) return false;
    }
    u16 offs[16];
    offs[1] = 0;
    for (u32 len = 1; len < 15; len++) offs[len + 1] = offs[len] + h.count[len];
    for (u32 s = 0; s < n; s++)
        if (lengths[s]) h.symbol[offs[lengths[s]]++] = (u16)s;
    for (u32 i = 0; i < (1u << FAST_BITS); i++) h.fast[i] = 0;
    u32 code = 0, index = 0;
    for (u32 len = 1; len <= FAST_BITS; len++) {
        for (u32 k = 0; k < h.count[len]; k++) {
            u32 sym = h.symbol[index++];
            u32 rev = __brev(code) >> (32 - len);
            for (u32 i = rev; i < (1u << FAST_BITS); i += 1u << len) h.fast[i] = (u16)(sym << 4 | len);
            code++;
        }
        code <<= 1;
    }
    return true;
}

// The next symbol, or -1 (invalid code) / -2 (stream ended).
__device__ int huff_decode(const Huff& h, Bits& b) {
    bits_refill(b);
    u32 e = h.fast[b.buf & ((1u << FAST_BITS) - 1)];
    if (e) {
        u32 len = e & 15u;
        if (b.count < len) return -2;
        b.buf >>= len;
        b.count -= len;
        return (int)(e >> 4);
    }
    int code = 0, first = 0, index = 0;
    u64 bits = b.buf;
    for (u32 len = 1; len < 16; len++) {
        code |= (int)((bits >> (len - 1)) & 1u);
        int count = h.count[len];
        if (code - count < first) {
            if (b.count < len) return -2;
            b.buf >>= len;
            b.count -= len;
            return h.symbol[index + (code - first)];
        }
        index += count;
        first += count;
        first <<= 1;
        code <<= 1;
    }
    return b.count < 15 ? -2 : -1;
}

__constant__ u8 LENGTH_EXTRA[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                    2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
__constant__ u8 DIST_EXTRA[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                  6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
__constant__ u8 CODE_ORDER[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

// Walks codes up to the end-of-block symbol.
__device__ u32 walk_codes(Bits& b, const Huff& lit, const Huff& dist) {
    for (;;) {
        int sym = huff_decode(lit, b);
        if (sym < 0) return sym == -2 ? PIECE_TRUNCATED : PIECE_BAD_CODE;
        if (sym < 256) continue;
        if (sym == 256) return PIECE_OK;
        if (sym > 285) return PIECE_BAD_CODE;
        u32 v;
        if (!bits_take(b, LENGTH_EXTRA[sym - 257], &v)) return PIECE_TRUNCATED;
        int d = huff_decode(dist, b);
        if (d < 0) return d == -2 ? PIECE_TRUNCATED : PIECE_BAD_CODE;
        if (d > 29) return PIECE_BAD_CODE;
        if (!bits_take(b, DIST_EXTRA[d], &v)) return PIECE_TRUNCATED;
    }
}

// Per-thread scratch of the walk (in local memory).
struct Walk {
    Huff lit, dist;
    u8 lengths[320];
};

__device__ u32 read_dynamic(Bits& b, Walk& w) {
    u32 hlit, hdist, hclen;
    if (!bits_take(b, 5, &hlit) || !bits_take(b, 5, &hdist) || !bits_take(b, 4, &hclen)) return PIECE_TRUNCATED;
    u32 nlen = hlit + 257, ndist = hdist + 1, ncode = hclen + 4;
    if (nlen > 286 || ndist > 30) return PIECE_BAD_TABLE;
    u8 cl[19];
    for (u32 i = 0; i < 19; i++) cl[i] = 0;
    for (u32 i = 0; i < ncode; i++) {
        u32 v;
        if (!bits_take(b, 3, &v)) return PIECE_TRUNCATED;
        cl[CODE_ORDER[i]] = (u8)v;
    }
    // The code-length code reuses the distance table's storage.
    if (!huff_build(w.dist, cl, 19)) return PIECE_BAD_TABLE;
    u32 i = 0;
    while (i < nlen + ndist) {
        int sym = huff_decode(w.dist, b);
        if (sym < 0) return sym == -2 ? PIECE_TRUNCATED : PIECE_BAD_TABLE;
        if (sym < 16) {
            w.lengths[i++] = (u8)sym;
            continue;
        }
        u32 rep, v;
        u8 val = 0;
        if (sym == 16) {
            if (i == 0) return PIECE_BAD_TABLE;
            val = w.lengths[i - 1];
            if (!bits_take(b, 2, &v)) return PIECE_TRUNCATED;
            rep = 3 + v;
        } else if (sym == 17) {
            if (!bits_take(b, 3, &v)) return PIECE_TRUNCATED;
            rep = 3 + v;
        } else {
            if (!bits_take(b, 7, &v)) return PIECE_TRUNCATED;
            rep = 11 + v;
        }
        if (i + rep > nlen + ndist) return PIECE_BAD_TABLE;
        while (rep--) w.lengths[i++] = val;
    }
    if (w.lengths[256] == 0) return PIECE_BAD_TABLE;
    if (!huff_build(w.lit, w.lengths, nlen)) return PIECE_BAD_TABLE;
    if (!huff_build(w.dist, w.lengths + nlen, ndist)) return PIECE_BAD_TABLE;
    return PIECE_OK;
}

__device__ void fixed_tables(Walk& w) {
    for (u32 i = 0; i < 144; i++) w.lengths[i] = 8;
    for (u32 i = 144; i < 256; i++) w.lengths[i] = 9;
    for (u32 i = 256; i < 280; i++) w.lengths[i] = 7;
    for (u32 i = 280; i < 288; i++) w.lengths[i] = 8;
    huff_build(w.lit, w.lengths, 288);
    for (u32 i = 0; i < 30; i++) w.lengths[i] = 5;
    huff_build(w.dist, w.lengths, 30);
}

// Walks the complete Deflate stream s[0, len): the final block's header and end bit offsets.
__device__ u32 deflate_walk(const u8* s, u64 len, Walk& w, u64* final_bit, u64* end_bit) {
    Bits b = {s, len, 0, 0, 0};
    for (;;) {
        u64 header = bits_pos(b);
        u32 last, kind;
        if (!bits_take(b, 1, &last) || !bits_take(b, 2, &kind)) return PIECE_TRUNCATED;
        u32 st;
        if (kind == 0) {
            // Stored: to the byte boundary, LEN, NLEN, LEN bytes.
            u32 skip = b.count % 8, v, nv;
            if (!bits_take(b, skip, &v)) return PIECE_TRUNCATED;
            if (!bits_take(b, 16, &v) || !bits_take(b, 16, &nv)) return PIECE_TRUNCATED;
            if (v != (~nv & 0xffffu)) return PIECE_BAD_STORED;
            u64 pos = bits_pos(b) + 8ull * v;
            if (pos > len * 8) return PIECE_TRUNCATED;
            b.next = pos / 8;
            b.buf = 0;
            b.count = 0;
            st = PIECE_OK;
        } else if (kind == 1) {
            fixed_tables(w);
            st = walk_codes(b, w.lit, w.dist);
        } else if (kind == 2) {
            st = read_dynamic(b, w);
            if (st == PIECE_OK) st = walk_codes(b, w.lit, w.dist);
        } else {
            return PIECE_BAD_BLOCK;
        }
        if (st != PIECE_OK) return st;
        if (last) {
            *final_bit = header;
            *end_bit = bits_pos(b);
            return (*end_bit + 7) / 8 < len ? PIECE_TRAILING : PIECE_OK;
        }
    }
}

// One thread per compressed chunk of nvCOMP's batched Deflate: pieces[i] and status[i] (the
// chunk's nvCOMP status when it failed, else the walk's). The last chunk is not walked (it
// stays final); its status is nvCOMP's.
extern "C" __global__ void deflate_pieces(const u64* __restrict__ out_ptrs, const u64* __restrict__ out_sizes,
                                          const int* __restrict__ nv_status, u32 n, Piece* __restrict__ pieces,
                                          u32* __restrict__ status) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Piece p = {0, out_sizes[i], 0, 0};
    u32 st = nv_status[i] != 0 ? (u32)nv_status[i] : PIECE_OK;
    if (st == PIECE_OK && i + 1 < n) {
        Walk w;
        st = deflate_walk((const u8*)out_ptrs[i], p.len, w, &p.final_bit, &p.end_bit);
    }
    pieces[i] = p;
    status[i] = st;
}

// The Deflate body of the gzip member nvCOMP wrote for a whole slice of `total` input bytes:
// after the header (RFC 1952: 10 bytes and the optional fields FLG announces), before the
// 8-byte trailer, whose ISIZE must be the input size: a member holding only part of the data
// (had nvCOMP written several) fails here instead of making a short image.
extern "C" __global__ void gzip_piece(const u8* __restrict__ gz, const u64* __restrict__ gz_size,
                                      const int* __restrict__ nv_status, u64 total, Piece* __restrict__ piece,
                                      u32* __restrict__ status) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    u64 len = *gz_size;
    Piece p = {0, 0, 0, 0};
    u32 st = nv_status[0] != 0 ? (u32)nv_status[0] : PIECE_OK;
    if (st == PIECE_OK) {
        u64 h = 10;
        u8 flg = len >= 10 ? gz[3] : 0;
        if (len < 18 || gz[0] != 0x1f || gz[1] != 0x8b || gz[2] != 8 || (flg & 0xe0u)) st = PIECE_BAD_GZIP;
        if (st == PIECE_OK && (flg & 4u)) h += 2 + (gz[10] | ((u64)gz[11] << 8));
        if (st == PIECE_OK && (flg & 8u)) { while (h < len && gz[h]) h++; h++; }
        if (st == PIECE_OK && (flg & 16u)) { while (h < len && gz[h]) h++; h++; }
        if (st == PIECE_OK && (flg & 2u)) h += 2;
        if (st == PIECE_OK && h + 8 > len) st = PIECE_BAD_GZIP;
        if (st == PIECE_OK) {
            const u8* t = gz + len - 4;
            u32 isize = t[0] | (u32)t[1] << 8 | (u32)t[2] << 16 | (u32)t[3] << 24;
            if (isize != (u32)total) st = PIECE_BAD_GZIP;
            p.start = h;
            p.len = len - h - 8;
        }
    }
    *piece = p;
    *status = st;
}

// Bytes piece j adds after its stream to join the next: an empty stored block (see
// src/output/zlib.rs, empty_stored_block); none after the last piece.
__device__ __forceinline__ u64 join_bytes(const Piece& p, bool last) {
    if (last) return 0;
    u32 used = (u32)(p.end_bit % 8);
    u32 free = used == 0 ? 0 : 8 - used;
    return free >= 3 ? 4 : 5;
}

// Packs one zlib stream into dst[8, 8 + len) and its length into dst[0, 8) (little-endian),
// or ~0 there when a piece failed or the stream would not fit in `cap` bytes (the caller then
// encodes on the CPU). One block per piece: piece i is copied from srcs[i] + start, joined to
// the next (BFINAL cleared, padding zeroed, an empty stored block appended); block 0 writes
// the zlib header and the length, the last block the Adler-32 combined from the chunks'
// (`adler`, over chunks of `chunk` bytes of `total` input bytes, `chunks` of them).
extern "C" __global__ void zlib_pack(const u64* __restrict__ srcs, const Piece* __restrict__ pieces,
                                     const u32* __restrict__ status, u32 n, const u32* __restrict__ adler,
                                     u32 chunks, u64 chunk, u64 total, u32 header, u8* __restrict__ dst,
                                     u64 cap) {
    __shared__ u64 sums[32];
    __shared__ u32 fails[32];
    u32 i = blockIdx.x;
    // The offset of this piece and the whole length, from every piece's size.
    u64 before = 0, all = 0;
    u32 bad = 0;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
        u64 l = pieces[j].len + join_bytes(pieces[j], j + 1 == n);
        if (j < i) before += l;
        all += l;
        bad |= status[j];
    }
    for (u32 off = 16; off > 0; off >>= 1) {
        before += __shfl_down_sync(0xffffffffu, before, off);
        all += __shfl_down_sync(0xffffffffu, all, off);
        bad |= __shfl_down_sync(0xffffffffu, bad, off);
    }
    u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
    __shared__ u64 alls[32];
    if (lane == 0) {
        sums[warp] = before;
        alls[warp] = all;
        fails[warp] = bad;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        before = 0;
        all = 0;
        bad = 0;
        for (u32 w = 0; w < warps; w++) {
            before += sums[w];
            all += alls[w];
            bad |= fails[w];
        }
        sums[0] = before;
        alls[0] = all;
        fails[0] = bad;
    }
    __syncthreads();
    before = sums[0];
    all = alls[0];
    bad = fails[0];
    u64 zlen = 2 + all + 4;
    bool ok = bad == 0 && 8 + zlen <= cap;
    if (i == 0 && threadIdx.x == 0) {
        *(u64*)dst = ok ? zlen : ~0ull;
        if (ok) {
            dst[8] = (u8)(header >> 8);
            dst[9] = (u8)header;
        }
    }
    if (!ok) return;
    const Piece p = pieces[i];
    const u8* src = (const u8*)srcs[i] + p.start;
    u8* out = dst + 8 + 2 + before;
    for (u64 k = threadIdx.x; k < p.len; k += blockDim.x) out[k] = src[k];
    __syncthreads();
    if (threadIdx.x != 0) return;
    bool last = i + 1 == n;
    if (!last) {
        out[p.final_bit / 8] &= (u8)~(1u << (p.final_bit % 8));
        u32 used = (u32)(p.end_bit % 8);
        if (used) out[p.end_bit / 8] &= (u8)((1u << used) - 1);
        u64 at = p.len, extra = join_bytes(p, false);
        if (extra == 5) out[at++] = 0;
        out[at++] = 0;
        out[at++] = 0;
        out[at++] = 0xff;
        out[at++] = 0xff;
    } else {
        u32 a = 1;
        for (u32 c = 0; c < chunks; c++) {
            u64 start = (u64)c * chunk;
            a = adler32_combine(a, adler[c], min(chunk, total - start));
        }
        u8* t = out + p.len;
        t[0] = (u8)(a >> 24);
        t[1] = (u8)(a >> 16);
        t[2] = (u8)(a >> 8);
        t[3] = (u8)a;
    }
}

// Copies the packed stream at src (length word first, as zlib_pack leaves it) to dst with
// 16-byte stores, the length read on the device: 8 bytes when packing failed (the host then
// reads ~0 and falls back), else 8 + length, rounded up to 16 (dst has room: it is a slot of
// `cap` bytes, and zlib_pack kept 8 + length within cap).
extern "C" __global__ void copy_packed(const u8* __restrict__ src, u8* __restrict__ dst, u64 cap) {
    u64 len = *(const u64*)src;
    u64 n = len == ~0ull ? 8 : 8 + len;
    u64 groups = min((n + 15) / 16, cap / 16);
    const uint4* s16 = (const uint4*)src;
    uint4* d16 = (uint4*)dst;
    GRID_STRIDE(g, groups) { d16[g] = s16[g]; }
    u64 tail = min(n, cap) - groups * 16;
    if (min(n, cap) > groups * 16) {
        GRID_STRIDE(k, tail) { dst[groups * 16 + k] = src[groups * 16 + k]; }
    }
}
