//! Our own fast PNG path: row filtering and the PNG container around fdeflate.
//!
//! The `png` crate spends most of a fast-compressed encode choosing row filters: its adaptive
//! filter runs each of the four filters over a row into a buffer, sums it, and runs the winner
//! again. [`filter_rows`] computes the four costs in one pass without storing them, then writes
//! only the winner; it picks exactly the filter `png` 0.18 picks (same order, same tie rule,
//! same early stop), and [`PngWriter::encode_filtered`] feeds fdeflate the same calls `png`
//! makes (one per row), so the file is byte-identical to the `png` crate's with
//! `Compression::Fast` — the tests below check that.
//!
//! The split also lets the GPU filter rows (kernels/png_filter.cu): the writer then only
//! deflates.

use crate::output::error::EncodeError;
use crate::output::options::PngFilter;

/// PNG row filter types, as written in each row's first byte.
const NONE: u8 = 0;
const SUB: u8 = 1;
const UP: u8 = 2;
const AVG: u8 = 3;
const PAETH: u8 = 4;

/// `|r|` of a residual read as a signed byte: the adaptive filter's cost of one byte.
#[inline(always)]
fn cost(r: u8) -> u32 {
    u32::from((r as i8).unsigned_abs())
}

/// The residual of byte `x` under `filter`, with `a` left, `b` above, `c` above-left.
#[inline(always)]
fn residual(filter: u8, x: u8, a: u8, b: u8, c: u8) -> u8 {
    x.wrapping_sub(predict(filter, a, b, c))
}

/// What `filter` predicts for a byte from `a` left, `b` above, `c` above-left.
#[inline(always)]
fn predict(filter: u8, a: u8, b: u8, c: u8) -> u8 {
    match filter {
        SUB => a,
        UP => b,
        AVG => ((u16::from(a) + u16::from(b)) / 2) as u8,
        PAETH => paeth(a, b, c),
        _ => 0,
    }
}

/// The Paeth predictor in 16-bit arithmetic (the same result as the specification's and as
/// `png`'s unsigned fpnge form); the form that vectorizes best inside [`row_costs`] (1.1 vs
/// 2.0 ms per 2000² slice with AVX2, dev box), and as fast as fpnge's in [`apply`].
#[inline(always)]
fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let (a16, b16, c16) = (i16::from(a), i16::from(b), i16::from(c));
    let pa = (b16 - c16).abs();
    let pb = (a16 - c16).abs();
    let pc = (a16 + b16 - 2 * c16).abs();
    let not_a = if pb <= pc { b } else { c };
    if pa <= pb && pa <= pc {
        a
    } else {
        not_a
    }
}

/// The adaptive costs of one row, in `png`'s trial order: Up, Sub, Avg, Paeth. Compiled twice,
/// and the AVX2 build taken where the CPU has it (about 1.5× faster).
fn row_costs(cur: &[u8], prev: &[u8], bpp: usize) -> [u64; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above), the only requirement of
            // calling a `target_feature(enable = "avx2")` function.
            return unsafe { row_costs_avx2(cur, prev, bpp) };
        }
    }
    row_costs_portable(cur, prev, bpp)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn row_costs_avx2(cur: &[u8], prev: &[u8], bpp: usize) -> [u64; 4] {
    row_costs_portable(cur, prev, bpp)
}

#[inline(always)]
fn row_costs_portable(cur: &[u8], prev: &[u8], bpp: usize) -> [u64; 4] {
    let mut sums = [0u64; 4];
    let len = cur.len();
    let head = bpp.min(len);
    for x in 0..head {
        // a = c = 0 left of the first pixel.
        sums[0] += u64::from(cost(cur[x].wrapping_sub(prev[x])));
        sums[1] += u64::from(cost(cur[x]));
        sums[2] += u64::from(cost(cur[x].wrapping_sub(prev[x] / 2)));
        sums[3] += u64::from(cost(cur[x].wrapping_sub(paeth(0, prev[x], 0))));
    }
    // 64-byte chunks with 32-bit lane sums: a shape the compiler vectorizes.
    const CHUNK: usize = 64;
    let body = &cur[head..];
    let left = &cur[..len - head];
    let up = &prev[head..];
    let up_left = &prev[..len - head];
    let mut chunks = body
        .chunks_exact(CHUNK)
        .zip(left.chunks_exact(CHUNK))
        .zip(up.chunks_exact(CHUNK).zip(up_left.chunks_exact(CHUNK)));
    for ((x, a), (b, c)) in &mut chunks {
        // Residuals of the chunk into four small arrays, then one sum each: both loops
        // vectorize (a single fused loop with four accumulators did not).
        let mut r = [[0u8; CHUNK]; 4];
        for i in 0..CHUNK {
            r[0][i] = x[i].wrapping_sub(b[i]);
            r[1][i] = x[i].wrapping_sub(a[i]);
            r[2][i] = x[i].wrapping_sub((a[i] & b[i]) + ((a[i] ^ b[i]) >> 1));
            r[3][i] = x[i].wrapping_sub(paeth(a[i], b[i], c[i]));
        }
        for (s, row) in sums.iter_mut().zip(&r) {
            *s += u64::from(row.iter().map(|&v| cost(v)).sum::<u32>());
        }
    }
    let done = head + (len - head) / CHUNK * CHUNK;
    for i in done..len {
        let (x, a, b, c) = (cur[i], cur[i - bpp], prev[i], prev[i - bpp]);
        sums[0] += u64::from(cost(residual(UP, x, a, b, c)));
        sums[1] += u64::from(cost(residual(SUB, x, a, b, c)));
        sums[2] += u64::from(cost(residual(AVG, x, a, b, c)));
        sums[3] += u64::from(cost(residual(PAETH, x, a, b, c)));
    }
    sums
}

/// `png`'s adaptive choice from the four costs: try Up, Sub, Avg, Paeth in turn, keep a filter
/// whose cost is `<=` the best so far, stop at the first zero.
pub fn adaptive_choice(costs: [u64; 4]) -> u8 {
    let mut best = u64::MAX;
    let mut choice = NONE;
    for (filter, cost) in [UP, SUB, AVG, PAETH].into_iter().zip(costs) {
        if cost <= best {
            best = cost;
            choice = filter;
            if cost == 0 {
                break;
            }
        }
    }
    choice
}

/// Writes `cur` filtered with `filter` into `out` (same length).
fn apply(filter: u8, cur: &[u8], prev: &[u8], bpp: usize, out: &mut [u8]) {
    let len = cur.len();
    let head = bpp.min(len);
    for x in 0..head {
        out[x] = residual(filter, cur[x], 0, prev[x], 0);
    }
    let (body, left) = (&cur[head..], &cur[..len - head]);
    let (up, up_left) = (&prev[head..], &prev[..len - head]);
    let out = &mut out[head..];
    // One loop per filter so each vectorizes.
    match filter {
        SUB => {
            for ((o, &x), &a) in out.iter_mut().zip(body).zip(left) {
                *o = x.wrapping_sub(a);
            }
        }
        UP => {
            for ((o, &x), &b) in out.iter_mut().zip(body).zip(up) {
                *o = x.wrapping_sub(b);
            }
        }
        AVG => {
            for (((o, &x), &a), &b) in out.iter_mut().zip(body).zip(left).zip(up) {
                *o = x.wrapping_sub(((u16::from(a) + u16::from(b)) / 2) as u8);
            }
        }
        PAETH => {
            for ((((o, &x), &a), &b), &c) in out.iter_mut().zip(body).zip(left).zip(up).zip(up_left)
            {
                *o = x.wrapping_sub(paeth(a, b, c));
            }
        }
        _ => out.copy_from_slice(body),
    }
}

/// The row above the first: zeros, as wide as an RGB row of 65535 pixels.
static ZERO_ROW: [u8; 3 * 65_536] = [0; 3 * 65_536];

/// Filters `rows` rows of `row_len` bytes (`bpp` bytes per pixel) from `pixels` into `out`,
/// each output row being its filter type byte and `row_len` residuals.
pub fn filter_rows(
    filter: PngFilter,
    pixels: &[u8],
    row_len: usize,
    bpp: usize,
    out: &mut Vec<u8>,
) {
    out.clear();
    if row_len == 0 {
        return;
    }
    let rows = pixels.len() / row_len;
    out.resize(rows * (row_len + 1), 0);
    // The row above the first is zeros; DICOM rows (≤ 65535 × 3 bytes) fit the static one.
    let wide;
    let mut prev: &[u8] = match ZERO_ROW.get(..row_len) {
        Some(zeros) => zeros,
        None => {
            wide = vec![0u8; row_len];
            &wide
        }
    };
    for (cur, dst) in pixels
        .chunks_exact(row_len)
        .zip(out.chunks_exact_mut(row_len + 1))
    {
        let kind = match filter {
            PngFilter::Adaptive => adaptive_choice(row_costs(cur, prev, bpp)),
            PngFilter::None => NONE,
            PngFilter::Sub => SUB,
            PngFilter::Up => UP,
            PngFilter::Paeth => PAETH,
        };
        dst[0] = kind;
        apply(kind, cur, prev, bpp, &mut dst[1..]);
        prev = cur;
    }
}

/// Undoes [`filter_rows`]: the pixels of `filtered` rows of `row_len` bytes. Only the rare
/// stored-block fallback needs this (when deflate would make the data larger).
pub fn unfilter_rows(
    filtered: &[u8],
    row_len: usize,
    bpp: usize,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let rows = filtered.len().checked_div(row_len + 1).unwrap_or(0);
    out.clear();
    out.resize(rows * row_len, 0);
    for y in 0..rows {
        let src = &filtered[y * (row_len + 1)..(y + 1) * (row_len + 1)];
        let kind = src[0];
        if kind > PAETH {
            return Err(EncodeError::FilterType { row: y, kind });
        }
        let (done, rest) = out.split_at_mut(y * row_len);
        let prev = if y == 0 {
            None
        } else {
            Some(&done[(y - 1) * row_len..])
        };
        let cur = &mut rest[..row_len];
        for x in 0..row_len {
            let a = if x >= bpp { cur[x - bpp] } else { 0 };
            let b = prev.map_or(0, |p| p[x]);
            let c = if x >= bpp {
                prev.map_or(0, |p| p[x - bpp])
            } else {
                0
            };
            cur[x] = src[1 + x].wrapping_add(predict(kind, a, b, c));
        }
    }
    Ok(())
}

/// Builds PNG files from filtered rows; keeps the scratch memory of the rare stored fallback.
#[derive(Default)]
pub struct PngWriter {
    scratch: Vec<u8>,
}

impl PngWriter {
    /// Writes into `buf` an 8-bit gray (`channels` 1) or RGB (3) PNG of `filtered` rows (filter byte + residuals
    /// each), deflated with fdeflate exactly as `png`'s `Compression::Fast` does, including its
    /// fallback to stored blocks when deflate would not save space.
    pub fn encode_filtered(
        &mut self,
        buf: &mut Vec<u8>,
        width: u32,
        height: u32,
        channels: usize,
        filtered: &[u8],
    ) -> Result<(), EncodeError> {
        let row_len = width as usize * channels;
        let color_type = color_type(channels)?;
        if width == 0 || height == 0 || filtered.len() != (row_len + 1) * height as usize {
            return Err(EncodeError::Internal(format!(
                "{} filtered bytes for a {width}x{height}x{channels} PNG",
                filtered.len()
            )));
        }
        let chunk_start = begin_idat(buf, width, height, color_type);
        let data_start = buf.len();
        let mut deflate = fdeflate::Compressor::new(&mut *buf)?;
        for row in filtered.chunks_exact(row_len + 1) {
            deflate.write_data(row)?;
        }
        deflate.finish()?;
        let stored_size = fdeflate::StoredOnlyCompressor::<()>::compressed_size(filtered.len());
        if buf.len() - data_start > stored_size {
            // As `png` does: stored blocks of unfiltered rows (filter type 0). Rare (noise-like
            // images), so this path may allocate.
            buf.truncate(chunk_start);
            unfilter_rows(filtered, row_len, channels, &mut self.scratch)?;
            let sink = std::io::Cursor::new(Vec::with_capacity(stored_size));
            let mut stored = fdeflate::StoredOnlyCompressor::new(sink)?;
            for row in self.scratch.chunks_exact(row_len) {
                stored.write_data(&[NONE])?;
                stored.write_data(row)?;
            }
            let stream = stored.finish()?.into_inner();
            push_chunk(buf, b"IDAT", &stream);
            push_chunk(buf, b"IEND", &[]);
            return Ok(());
        }
        let data_len = buf.len() - data_start;
        finish_chunk(buf, chunk_start, data_len)?;
        push_chunk(buf, b"IEND", &[]);
        Ok(())
    }
}

/// The PNG colour type of 8-bit samples with `channels` 1 (gray) or 3 (RGB).
fn color_type(channels: usize) -> Result<u8, EncodeError> {
    match channels {
        1 => Ok(0),
        3 => Ok(2),
        n => Err(EncodeError::Internal(format!("PNG of {n} channels"))),
    }
}

/// Clears `buf` and writes the signature, IHDR and the start of an IDAT chunk (its length
/// left to [`finish_chunk`]); returns where the IDAT chunk starts.
fn begin_idat(buf: &mut Vec<u8>, width: u32, height: u32, color_type: u8) -> usize {
    buf.clear();
    buf.extend_from_slice(&[0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n']);
    let mut ihdr = [0u8; 13];
    ihdr[..4].copy_from_slice(&width.to_be_bytes());
    ihdr[4..8].copy_from_slice(&height.to_be_bytes());
    ihdr[8] = 8; // bit depth
    ihdr[9] = color_type;
    // compression, filter method and interlace: all 0.
    push_chunk(buf, b"IHDR", &ihdr);
    let chunk_start = buf.len();
    buf.extend_from_slice(&[0, 0, 0, 0]);
    buf.extend_from_slice(b"IDAT");
    chunk_start
}

/// Writes into `buf` an 8-bit gray (`channels` 1) or RGB (3) PNG whose image data is `zlib`,
/// a complete zlib stream of the filtered rows (as the GPU encoder returns it): the container
/// around it, with the chunk CRCs computed here.
pub fn png_from_zlib(
    buf: &mut Vec<u8>,
    width: u32,
    height: u32,
    channels: usize,
    zlib: &[u8],
) -> Result<(), EncodeError> {
    buf.reserve(zlib.len() + 64);
    let tail = png_around_zlib(buf, width, height, channels, zlib)?;
    buf.extend_from_slice(zlib);
    buf.extend_from_slice(&tail);
    Ok(())
}

/// The bytes around `zlib` in [`png_from_zlib`]'s file, without copying `zlib`: `head` gets
/// the signature, IHDR and the IDAT chunk's length and type; the returned tail is the IDAT
/// chunk's CRC and the IEND chunk. The file is `head`, `zlib`, tail.
pub fn png_around_zlib(
    head: &mut Vec<u8>,
    width: u32,
    height: u32,
    channels: usize,
    zlib: &[u8],
) -> Result<[u8; PNG_TAIL], EncodeError> {
    let color_type = color_type(channels)?;
    if width == 0 || height == 0 || zlib.len() < 6 {
        return Err(EncodeError::Internal(format!(
            "{} bytes of zlib data for a {width}x{height} PNG",
            zlib.len()
        )));
    }
    let chunk_start = begin_idat(head, width, height, color_type);
    let len = u32::try_from(zlib.len())
        .ok()
        .filter(|&l| l <= u32::MAX >> 1)
        .ok_or(EncodeError::ChunkTooLarge(zlib.len()))?;
    head[chunk_start..chunk_start + 4].copy_from_slice(&len.to_be_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(b"IDAT");
    crc.update(zlib);
    let mut tail = [0u8; PNG_TAIL];
    tail[..4].copy_from_slice(&crc.finalize().to_be_bytes());
    // IEND: length 0, type, and the CRC of its type.
    tail[8..12].copy_from_slice(b"IEND");
    tail[12..].copy_from_slice(&crc32fast::hash(b"IEND").to_be_bytes());
    Ok(tail)
}

/// What follows the zlib stream in [`png_around_zlib`]'s file: the IDAT CRC and the IEND chunk.
pub const PNG_TAIL: usize = 16;

/// Appends a whole chunk: length, type, data, CRC of type + data.
fn push_chunk(buf: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    let start = buf.len();
    buf.extend_from_slice(&(data.len() as u32).to_be_bytes());
    buf.extend_from_slice(kind);
    buf.extend_from_slice(data);
    let crc = crc32fast::hash(&buf[start + 4..]);
    buf.extend_from_slice(&crc.to_be_bytes());
}

/// Fills in the length of the chunk begun at `chunk_start` and appends its CRC.
fn finish_chunk(buf: &mut Vec<u8>, chunk_start: usize, data_len: usize) -> Result<(), EncodeError> {
    // `png` splits IDAT at 2^31 − 1 bytes; a single slice never gets near that.
    let len = u32::try_from(data_len)
        .ok()
        .filter(|&l| l <= u32::MAX >> 1)
        .ok_or(EncodeError::ChunkTooLarge(data_len))?;
    buf[chunk_start..chunk_start + 4].copy_from_slice(&len.to_be_bytes());
    let crc = crc32fast::hash(&buf[chunk_start + 4..]);
    buf.extend_from_slice(&crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the `png` crate writes for the same pixels with `Compression::Fast`.
    fn png_crate(
        width: u32,
        height: u32,
        channels: usize,
        filter: PngFilter,
        px: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(if channels == 1 {
            png::ColorType::Grayscale
        } else {
            png::ColorType::Rgb
        });
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        enc.set_filter(match filter {
            PngFilter::None => png::Filter::NoFilter,
            PngFilter::Sub => png::Filter::Sub,
            PngFilter::Up => png::Filter::Up,
            PngFilter::Paeth => png::Filter::Paeth,
            PngFilter::Adaptive => png::Filter::Adaptive,
        });
        let mut w = enc.write_header().unwrap();
        w.write_image_data(px).unwrap();
        w.finish().unwrap();
        out
    }

    fn ours(width: u32, height: u32, channels: usize, filter: PngFilter, px: &[u8]) -> Vec<u8> {
        let mut filtered = Vec::new();
        filter_rows(
            filter,
            px,
            width as usize * channels,
            channels,
            &mut filtered,
        );
        let mut back = Vec::new();
        unfilter_rows(&filtered, width as usize * channels, channels, &mut back).unwrap();
        assert_eq!(back, px, "unfilter undoes filter");
        let mut buf = Vec::new();
        PngWriter::default()
            .encode_filtered(&mut buf, width, height, channels, &filtered)
            .unwrap();
        buf
    }

    /// Deterministic test images: smooth, edged, flat, noisy and mixed rows.
    fn image(kind: usize, width: usize, height: usize, channels: usize) -> Vec<u8> {
        let mut state = 0x9e37_79b9_u32 ^ kind as u32;
        let mut noise = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        };
        let n = width * height * channels;
        (0..n)
            .map(|i| {
                let (x, y) = ((i / channels) % width, i / channels / width);
                match kind {
                    0 => ((x * 3 + y * 5) / 4) as u8,
                    1 => {
                        if (x / 7 + y / 5) % 2 == 0 {
                            200
                        } else {
                            30u8.wrapping_add((x ^ y) as u8)
                        }
                    }
                    2 => 77,
                    3 => noise(),
                    _ => {
                        if y % 3 == 0 {
                            noise()
                        } else {
                            ((x * x + y) % 256) as u8
                        }
                    }
                }
            })
            .collect()
    }

    #[test]
    fn files_are_byte_identical_to_the_png_crate() {
        let shapes = [
            (1, 1),
            (1, 9),
            (7, 1),
            (3, 5),
            (63, 17),
            (64, 64),
            (130, 33),
            (257, 40),
        ];
        for kind in 0..5 {
            for &(w, h) in &shapes {
                for channels in [1, 3] {
                    let px = image(kind, w, h, channels);
                    for filter in [
                        PngFilter::Adaptive,
                        PngFilter::None,
                        PngFilter::Sub,
                        PngFilter::Up,
                        PngFilter::Paeth,
                    ] {
                        assert_eq!(
                            ours(w as u32, h as u32, channels, filter, &px),
                            png_crate(w as u32, h as u32, channels, filter, &px),
                            "image {kind}, {w}x{h}x{channels}, {filter:?}"
                        );
                    }
                }
            }
        }
    }

    /// Filtered rows of `px`, cut into `chunk`-byte pieces each deflated on its own by another
    /// encoder (flate2 at several levels, fdeflate), stitched into one zlib stream whose
    /// Adler-32 is combined from the pieces': what the GPU encoder does with nvCOMP's chunks.
    fn zlib_from_pieces(width: u32, channels: usize, px: &[u8], chunk: usize) -> Vec<u8> {
        use crate::output::zlib;
        use std::io::Write;
        let mut filtered = Vec::new();
        let row_len = width as usize * channels;
        filter_rows(PngFilter::Adaptive, px, row_len, channels, &mut filtered);
        let pieces: Vec<Vec<u8>> = filtered
            .chunks(chunk)
            .enumerate()
            .map(|(i, part)| {
                if i % 3 == 2 {
                    let z = fdeflate::compress_to_vec(part);
                    return z[2..z.len() - 4].to_vec();
                }
                let level = flate2::Compression::new([1, 6][i % 3]);
                let mut e = flate2::write::DeflateEncoder::new(Vec::new(), level);
                e.write_all(part).unwrap();
                e.finish().unwrap()
            })
            .collect();
        let mut z = zlib::zlib_header(0).to_vec();
        zlib::stitch(pieces.iter().map(Vec::as_slice), &mut z).unwrap();
        let adler = filtered.chunks(chunk).fold(1, |a, p| {
            zlib::adler32_combine(a, zlib::adler32(p), p.len() as u64)
        });
        z.extend_from_slice(&adler.to_be_bytes());
        z
    }

    /// The zlib stream the GPU encoder makes: the filtered rows in one gzip member (here from
    /// flate2), rewritten to zlib with the Adler-32 combined from 64 KiB chunks.
    fn zlib_from_member(width: u32, channels: usize, px: &[u8]) -> Vec<u8> {
        use crate::output::zlib;
        use std::io::Write;
        let mut filtered = Vec::new();
        filter_rows(
            PngFilter::Adaptive,
            px,
            width as usize * channels,
            channels,
            &mut filtered,
        );
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&filtered).unwrap();
        let member = e.finish().unwrap();
        let adler = filtered.chunks(65_536).fold(1, |a, c| {
            zlib::adler32_combine(a, zlib::adler32(c), c.len() as u64)
        });
        let mut z = Vec::new();
        zlib::zlib_from_gzip(&member, filtered.len() as u64, adler, 0, &mut z).unwrap();
        z
    }

    /// Pixels Pillow decodes from `path` (None when Python or Pillow is missing: CI installs
    /// them, .ci/run).
    fn pillow_pixels(path: &std::path::Path) -> Option<Vec<u8>> {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys; from PIL import Image; im = Image.open(sys.argv[1]); im.load(); \
                 sys.stdout.buffer.write(im.tobytes())",
            ])
            .arg(path)
            .output()
            .ok()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("No module named"),
                "Pillow failed on {}: {err}",
                path.display()
            );
            // .ci/run installs Pillow and sets this: there, not checking is a failure.
            assert!(
                std::env::var_os("DICOMFLOW_REQUIRE_TOOLS").is_none(),
                "DICOMFLOW_REQUIRE_TOOLS is set, but python3 cannot import Pillow: {err}"
            );
            return None;
        }
        Some(out.stdout)
    }

    /// `pngcheck`'s verdict on `path`: `Some(output)` when it ran (`None` when it is missing).
    fn pngcheck(path: &std::path::Path) -> Option<(bool, String)> {
        let out = std::process::Command::new("pngcheck")
            .arg("-v")
            .arg(path)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        Some((out.status.success(), text))
    }

    #[test]
    fn png_from_joined_streams_decodes_in_png_image_pillow_and_pngcheck() {
        let dir = crate::scratch_dir("png-from-zlib");
        let mut skipped = Vec::new();
        for (kind, w, h, channels, chunk) in [
            (0, 512, 300, 1, 65_536),
            (1, 257, 129, 3, 65_536),
            (4, 130, 33, 1, 1000),
            (2, 64, 64, 3, 4096),
            (3, 300, 200, 1, 65_536),
            // chunk 0: one gzip member, the GPU encoder's route.
            (0, 700, 400, 1, 0),
            (1, 301, 77, 3, 0),
        ] {
            let px = image(kind, w, h, channels);
            let z = if chunk == 0 {
                zlib_from_member(w as u32, channels, &px)
            } else {
                zlib_from_pieces(w as u32, channels, &px, chunk)
            };
            let mut bytes = Vec::new();
            png_from_zlib(&mut bytes, w as u32, h as u32, channels, &z).unwrap();
            let what = format!("image {kind}, {w}x{h}x{channels}, pieces of {chunk} (0: gzip)");

            let mut dec = png::Decoder::new(std::io::Cursor::new(&bytes))
                .read_info()
                .unwrap();
            let mut back = vec![0; dec.output_buffer_size().unwrap()];
            dec.next_frame(&mut back).unwrap();
            assert_eq!(back, px, "png crate, {what}");
            let img = image::load_from_memory(&bytes).unwrap();
            assert_eq!(img.as_bytes(), &px[..], "image crate, {what}");

            let path = dir.join(format!("{kind}.png"));
            std::fs::write(&path, &bytes).unwrap();
            match pillow_pixels(&path) {
                Some(p) => assert_eq!(p, px, "Pillow, {what}"),
                None => skipped.push("Pillow"),
            }
            match pngcheck(&path) {
                Some((ok, text)) => {
                    assert!(ok, "pngcheck, {what}: {text}");
                    assert!(!text.to_lowercase().contains("warning"), "{what}: {text}");
                }
                None => skipped.push("pngcheck"),
            }
        }
        if !skipped.is_empty() {
            skipped.dedup();
            eprintln!("note: not installed, skipped: {}", skipped.join(", "));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_head_and_tail_around_a_stream_make_the_same_file() {
        for (w, h, channels) in [(64usize, 9usize, 1usize), (31, 17, 3)] {
            let px = image(1, w, h, channels);
            let z = zlib_from_member(w as u32, channels, &px);
            let mut whole = Vec::new();
            png_from_zlib(&mut whole, w as u32, h as u32, channels, &z).unwrap();
            let mut head = Vec::new();
            let tail = png_around_zlib(&mut head, w as u32, h as u32, channels, &z).unwrap();
            assert_eq!([&head[..], &z, &tail].concat(), whole, "{w}x{h}x{channels}");
        }
        let mut head = Vec::new();
        assert!(png_around_zlib(&mut head, 4, 4, 2, &[0x78, 1, 3, 0, 0, 0, 0, 1]).is_err());
        assert!(png_around_zlib(&mut head, 4, 4, 1, &[0x78]).is_err());
    }

    #[test]
    fn png_from_zlib_rejects_what_it_cannot_wrap() {
        let mut buf = Vec::new();
        assert!(png_from_zlib(&mut buf, 4, 4, 2, &[0x78, 1, 3, 0, 0, 0, 0, 1]).is_err());
        assert!(png_from_zlib(&mut buf, 0, 4, 1, &[0x78, 1, 3, 0, 0, 0, 0, 1]).is_err());
        assert!(png_from_zlib(&mut buf, 4, 4, 1, &[0x78]).is_err());
    }

    #[test]
    fn noise_takes_the_stored_fallback_and_still_decodes() {
        let px = image(3, 200, 50, 1);
        let bytes = ours(200, 50, 1, PngFilter::Adaptive, &px);
        let mut dec = png::Decoder::new(std::io::Cursor::new(&bytes))
            .read_info()
            .unwrap();
        let mut back = vec![0; dec.output_buffer_size().unwrap()];
        dec.next_frame(&mut back).unwrap();
        assert_eq!(back, px);
        // Stored: the file is larger than the raw pixels.
        assert!(bytes.len() > px.len(), "{} bytes", bytes.len());
    }

    #[test]
    fn the_adaptive_choice_follows_png_rules() {
        // Up, Sub, Avg, Paeth; ties go to the later filter, a zero stops the search.
        assert_eq!(adaptive_choice([5, 5, 5, 5]), PAETH);
        assert_eq!(adaptive_choice([0, 0, 0, 0]), UP);
        assert_eq!(adaptive_choice([9, 3, 3, 4]), AVG);
        assert_eq!(adaptive_choice([9, 0, 3, 0]), SUB);
    }

    #[test]
    fn bad_input_is_an_error() {
        let mut buf = Vec::new();
        let mut w = PngWriter::default();
        assert!(w.encode_filtered(&mut buf, 4, 4, 1, &[0; 19]).is_err());
        assert!(w.encode_filtered(&mut buf, 4, 1, 2, &[0; 9]).is_err());
        let mut out = Vec::new();
        assert!(unfilter_rows(&[9, 0, 0], 2, 1, &mut out).is_err());
        // Zero-width rows make no rows rather than a panic.
        filter_rows(PngFilter::Adaptive, &[], 0, 1, &mut out);
        assert!(out.is_empty());
    }
}
