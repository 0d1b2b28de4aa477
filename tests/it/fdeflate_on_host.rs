//! The GPU PNG compressor's encoder (`kernels/fdeflate.cu`) compiled as host C++ and run the
//! way its three launches run it — a warp per row (a lane per 8-byte chunk, the runs of zeros
//! between chunks by the kernels' scan), every row's bit count and Adler-32, the offsets, each
//! chunk written at its offset into a zeroed stream with its boundary words OR-ed — against the
//! `fdeflate` crate fed the same rows, one call per row as the CPU's PNG writer feeds it: the
//! zlib streams must be identical byte for byte. (The launches themselves need a GPU:
//! `tests/it/gpu.rs` compares whole files.) Skips, saying why, without `c++`.

use crate::common::{compile_cpp, stderr, tempdir};

use std::path::{Path, PathBuf};
use std::process::Command;

/// The CUDA words the encoder uses, for the host; FD_HOST_TEST leaves its kernels out.
const SHIM: &str = r#"
#include <cstdint>
#include <cstdio>
#include <vector>
#define FD_HOST_TEST
#define __device__
#define __forceinline__ inline
#define FD_FN inline
#define FD_CONST static const
#define FD_CTZ64(x) ((u32)__builtin_ctzll(x))
#define FD_CLZ64(x) ((u32)__builtin_clzll(x))
#define FD_OR(p, v) (*(p) |= (v))
"#;

/// Reads (row_bytes u32, rows u32, data) cases from argv[1], writes each case's zlib stream,
/// length-prefixed, to argv[2]; a stream longer than fdeflate's stored size is written empty
/// (the kernel gives such a slice to the CPU).
const HARNESS: &str = r#"
// A row as a warp encodes it: per round of 32 chunks, the pending runs by the kernels'
// Hillis-Steele scan of the carries (the shuffles as arrays), then each chunk counted and, with
// `words`, written at its place in the row (lanes in reverse order, so that the OR-ed shared
// words are really shared), and the row's end. Returns the row's bits.
static uint64_t warp_row(const FdTables* t, const uint8_t* p, uint32_t nb, uint32_t* words, uint64_t at) {
    uint32_t chunks = nb / 8, run = 0;
    uint64_t total = 0;
    for (uint32_t base = 0; base < chunks; base += 32) {
        uint64_t c[32];
        FdCarry f[32], g[32];
        for (uint32_t lane = 0; lane < 32; lane++) {
            uint32_t k = base + lane;
            c[lane] = k < chunks ? fd_load8(p + 8 * (uint64_t)k) : 0;
            f[lane] = fd_carry(c[lane]);
            if (k >= chunks) f[lane].value = 0;
        }
        for (uint32_t off = 1; off < 32; off <<= 1) {
            for (uint32_t lane = 0; lane < 32; lane++) g[lane] = lane >= off ? fd_then(f[lane - off], f[lane]) : f[lane];
            for (uint32_t lane = 0; lane < 32; lane++) f[lane] = g[lane];
        }
        uint32_t in[32], bits[32], upto[32];
        uint64_t sum = 0;
        for (uint32_t lane = 0; lane < 32; lane++) {
            FdCarry before = {0, 0};
            if (lane > 0) before = f[lane - 1];
            in[lane] = fd_apply(before, run);
            FdCount count = {0};
            if (base + lane < chunks) fd_chunk(t, p + 8 * (uint64_t)(base + lane), c[lane], in[lane], count);
            bits[lane] = (uint32_t)count.bits;
            upto[lane] = (uint32_t)sum;
            sum += count.bits;
        }
        run = fd_apply(f[31], run);
        if (words) {
            for (uint32_t lane = 32; lane-- > 0;) {
                if (bits[lane] == 0) continue;
                FdWrite w;
                w.begin(words, at + total + upto[lane]);
                fd_chunk(t, p + 8 * (uint64_t)(base + lane), c[lane], in[lane], w);
                w.end();
            }
        }
        total += sum;
    }
    FdCount count = {0};
    fd_row_end(t, p, nb, run, count);
    if (words) {
        FdWrite w;
        w.begin(words, at + total);
        fd_row_end(t, p, nb, run, w);
        w.end();
    }
    return total + count.bits;
}

int main(int argc, char** argv) {
    FILE* f = fopen(argv[1], "rb");
    FILE* o = fopen(argv[2], "wb");
    static FdTables t;
    fd_tables(&t, 0, 1);
    // The literal tables are fdeflate's code lengths' codes.
    for (uint32_t s = 0; s < FD_SYMBOLS; s++) {
        if (FD_CODE[s] != fd_derive_code(s)) {
            fprintf(stderr, "FD_CODE[%u] is %#x, derived %#x\n", s, FD_CODE[s], fd_derive_code(s));
            return 3;
        }
    }
    for (uint32_t k = 0; k < 256; k++) {
        if (FD_RUN[k] != fd_derive_run(k)) {
            fprintf(stderr, "FD_RUN[%u] is %#x, derived %#x\n", k, FD_RUN[k], fd_derive_run(k));
            return 4;
        }
    }
    uint32_t head[2];
    while (fread(head, 4, 2, f) == 2) {
        uint32_t row_bytes = head[0], rows = head[1];
        std::vector<uint8_t> data((size_t)row_bytes * rows);
        if (fread(data.data(), 1, data.size(), f) != data.size()) return 2;
        // fdeflate_count: each row's bits, and its Adler-32 from sums over its chunks (as the
        // lanes take them) and its end
        std::vector<uint64_t> offset(rows);
        uint64_t total = 0;
        uint32_t check = 1;
        for (uint32_t r = 0; r < rows; r++) {
            const uint8_t* p = data.data() + (size_t)r * row_bytes;
            offset[r] = total;
            total += warp_row(&t, p, row_bytes, nullptr, 0);
            u64 s1 = 0, s2 = 0;
            for (uint32_t k = 0; k < row_bytes / 8; k++) fd_adler_sums(p, row_bytes, 8 * k, 8 * k + 8, &s1, &s2);
            fd_adler_sums(p, row_bytes, row_bytes / 8 * 8, row_bytes, &s1, &s2);
            check = adler32_combine(check, fd_adler_of(row_bytes, s1, s2), row_bytes);
        }
        // fdeflate_place
        uint32_t eob = FD_CODE[FD_END_OF_BLOCK];
        uint64_t end_bits = FD_HEADER_BITS + total + (eob >> 16);
        uint64_t zlen = (end_bits + 7) / 8 + 4;
        if (zlen > fd_stored_size((uint64_t)row_bytes * rows)) {
            uint64_t none = 0;
            fwrite(&none, 8, 1, o);
            continue;
        }
        std::vector<uint32_t> words((zlen + 3) / 4 + 1, 0);
        uint8_t* z = (uint8_t*)words.data();
        for (int i = 0; i < 53; i++) z[i] = FD_HEADER[i];
        z[53] = FD_HEADER[53] & 0x1f;
        FdWrite e;
        e.begin(words.data(), FD_HEADER_BITS + total);
        e.put(eob & 0xffff, eob >> 16);
        e.end();
        uint64_t at = (end_bits + 7) / 8;
        z[at] = check >> 24; z[at + 1] = check >> 16; z[at + 2] = check >> 8; z[at + 3] = check;
        // fdeflate_write, rows in reverse so that the OR-ed boundary words are really shared
        for (uint32_t r = rows; r-- > 0;) {
            warp_row(&t, data.data() + (size_t)r * row_bytes, row_bytes, words.data(), FD_HEADER_BITS + offset[r]);
        }
        fwrite(&zlen, 8, 1, o);
        fwrite(z, 1, zlen, o);
    }
    fclose(o);
    fclose(f);
    return 0;
}
"#;

/// Compiles the harness with the encoder; `None` (after saying why) without a C++ compiler.
fn harness(dir: &Path) -> Option<PathBuf> {
    let source = format!("{SHIM}\n#include \"{{kernels}}/fdeflate.cu\"\n{HARNESS}");
    compile_cpp(dir, "fdeflate", &source, "fdeflate_on_host")
}

/// fdeflate's stream for these rows, one `write_data` per row (as `output::png` feeds it), or
/// empty where the CPU writer would take stored blocks instead.
fn reference(rows: &[u8], row_bytes: usize) -> Vec<u8> {
    let mut c = fdeflate::Compressor::new(Vec::new()).unwrap();
    for row in rows.chunks_exact(row_bytes) {
        c.write_data(row).unwrap();
    }
    let z = c.finish().unwrap();
    let stored = fdeflate::StoredOnlyCompressor::<()>::compressed_size(rows.len());
    if z.len() > stored {
        Vec::new()
    } else {
        z
    }
}

/// A small deterministic generator (xorshift), so that failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Rows that look like filtered images: small residuals around zero, runs of zeros of every
/// length (across 8-byte chunks, up to whole rows longer than 258), noise, and the filter byte.
fn rows(rng: &mut Rng, row_bytes: usize, count: usize, style: u64) -> Vec<u8> {
    let mut v = vec![0u8; row_bytes * count];
    for row in v.chunks_exact_mut(row_bytes) {
        row[0] = rng.below(5) as u8;
        let mut x = 1;
        while x < row_bytes {
            let left = row_bytes - x;
            match (style + rng.below(4)) % 5 {
                0 => {
                    // A run of zeros.
                    let n = (1 + rng.below(600) as usize).min(left);
                    x += n;
                }
                1 => {
                    // Small residuals, as smooth images leave.
                    let n = (1 + rng.below(40) as usize).min(left);
                    for b in &mut row[x..x + n] {
                        *b = (rng.below(7) as i8 - 3) as u8;
                    }
                    x += n;
                }
                2 => {
                    // Noise.
                    let n = (1 + rng.below(30) as usize).min(left);
                    for b in &mut row[x..x + n] {
                        *b = rng.next() as u8;
                    }
                    x += n;
                }
                3 => {
                    // Isolated bytes between zeros, at every chunk position.
                    row[x] = 1 + rng.below(255) as u8;
                    x += 1 + rng.below(9) as usize;
                }
                _ => {
                    x += 1;
                }
            }
        }
    }
    v
}

#[test]
fn the_gpu_png_compressor_writes_fdeflates_stream_byte_for_byte() {
    let dir = tempdir("fdeflate_on_host");
    let Some(exe) = harness(&dir) else {
        return;
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cases: Vec<(usize, Vec<u8>)> = Vec::new();
    // Every row length from 1 to 40 (every 8-byte remainder), then image-like widths: 512 and
    // 2000 gray, 512 RGB, odd widths.
    for row_bytes in (1..=40).chain([65, 257, 513, 1025, 1537, 2001, 3001]) {
        for style in 0..5 {
            let count = 1 + rng.below(12) as usize;
            cases.push((row_bytes, rows(&mut rng, row_bytes, count, style)));
        }
    }
    // All zeros (one long run per row), all one value, and pure noise (stored: empty).
    cases.push((513, vec![0; 513 * 64]));
    cases.push((2001, vec![0; 2001 * 3]));
    cases.push((513, vec![7; 513 * 8]));
    cases.push((
        513,
        (0..513 * 16).map(|_| rng.next() as u8).collect::<Vec<_>>(),
    ));
    let mut input = Vec::new();
    for (row_bytes, data) in &cases {
        input.extend_from_slice(&(*row_bytes as u32).to_le_bytes());
        input.extend_from_slice(&((data.len() / row_bytes) as u32).to_le_bytes());
        input.extend_from_slice(data);
    }
    let (inp, outp) = (dir.join("in.bin"), dir.join("out.bin"));
    std::fs::write(&inp, &input).unwrap();
    let run = Command::new(&exe).arg(&inp).arg(&outp).output().unwrap();
    assert!(run.status.success(), "harness failed: {}", stderr(&run));
    let out = std::fs::read(&outp).unwrap();
    let mut at = 0;
    let mut stored = 0;
    for (i, (row_bytes, data)) in cases.iter().enumerate() {
        let len = u64::from_le_bytes(out[at..at + 8].try_into().unwrap()) as usize;
        at += 8;
        let ours = &out[at..at + len];
        at += len;
        let want = reference(data, *row_bytes);
        stored += usize::from(want.is_empty());
        assert!(
            ours == want.as_slice(),
            "case {i} ({row_bytes} bytes x {} rows): {} bytes, fdeflate {}",
            data.len() / row_bytes,
            ours.len(),
            want.len()
        );
        if !ours.is_empty() {
            let back = fdeflate::decompress_to_vec(ours).unwrap();
            assert_eq!(&back, data, "case {i} does not decode to its rows");
        }
    }
    assert_eq!(at, out.len());
    // The noise case takes the stored route, and most cases do not.
    assert!(stored >= 1 && stored < cases.len() / 2, "{stored} stored");
}
