//! Reading a file into memory that is not in the CPU's caches, as slots are (the GPU, or a
//! writer long ago, touched them last), without paying for the cache lines twice.
//!
//! A plain `pread` into such memory makes the kernel's copy fetch every destination line from
//! DRAM before overwriting it (a read for ownership): 8 MB read costs 24 MB of memory traffic.
//! Here the file is read in chunks into a small buffer that stays in the cache, and each chunk
//! goes on to the destination with non-temporal (streaming) stores, which write whole lines
//! without fetching them: 16 MB of traffic for 8 MB, and one more copy by the CPU.
//!
//! Measured on the H200 host (16 cores; `dicomflow bench io --buffers 4 [--streaming]`, 14
//! threads, each reading into four buffers in turn, as into a ring's slots):
//! - 2000² (8 MB): 4814 / 4612 → 6142 / 5527 files/s (+19–28 %); `run` with the GPU
//!   compressing PNG, 1000 slices: the loaders' read 3.09–3.17 → 2.45–2.94 ms, +7–15 %;
//! - 1448² (4.0 MiB): 8965 / 9307 → 10 437 / 10 839 (+16 %); `run`, GPU PNG: +20 %;
//! - 1024² (2 MiB): 26 439 / 26 317 → 20 764 / 20 171 (−22 %); `run`: −4 %;
//! - 512²: 138 418 → 92 889 (−33 %).
//!
//! Small reads lose: their destinations are partly still cached, and the extra copy costs
//! more than the traffic saves. So frames of [`MIN_STREAMED`] (3 MiB) and more are streamed.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Bytes read per chunk: small enough to stay in a core's L2 cache between the read and the
/// copy.
pub const CHUNK: usize = 256 << 10;

/// Reads are streamed from this size on: between the 2 MiB measured slower and the 4.0 MiB
/// measured faster (see the module's figures).
pub const MIN_STREAMED: usize = 3 << 20;

/// Fills `dst` with the bytes of `file` from `offset` on, as `read_exact_at` does; a `dst` of
/// [`MIN_STREAMED`] bytes or more goes through `bounce` (grown to [`CHUNK`]) and streaming
/// stores.
pub fn read_exact_at(
    file: &File,
    dst: &mut [u8],
    offset: u64,
    bounce: &mut Vec<u8>,
) -> std::io::Result<()> {
    if dst.len() < MIN_STREAMED {
        return file.read_exact_at(dst, offset);
    }
    read_streamed(file, dst, offset, bounce)
}

/// [`read_exact_at`] through `bounce` and streaming stores whatever the size.
pub fn read_streamed(
    file: &File,
    dst: &mut [u8],
    offset: u64,
    bounce: &mut Vec<u8>,
) -> std::io::Result<()> {
    if bounce.len() < CHUNK {
        bounce.resize(CHUNK, 0);
    }
    let mut done = 0usize;
    let mut result = Ok(());
    while done < dst.len() {
        let n = (dst.len() - done).min(CHUNK);
        result = file.read_exact_at(&mut bounce[..n], offset + done as u64);
        if result.is_err() {
            break;
        }
        copy_streaming(&bounce[..n], &mut dst[done..done + n]);
        done += n;
    }
    // On every way out, the error included: a failed read's slot goes back to the ring and
    // another thread writes it next.
    fence();
    result
}

/// Copies `src` into `dst` (the same length) with streaming stores where the CPU has them;
/// [`fence`] must follow before another thread or a device reads `dst` (private for that
/// reason: [`read_streamed`] fences on every way out).
fn copy_streaming(src: &[u8], dst: &mut [u8]) {
    debug_assert_eq!(src.len(), dst.len());
    let len = src.len().min(dst.len());
    #[cfg(target_arch = "x86_64")]
    {
        // The unaligned head, so that the stores are 32-byte aligned.
        let head = dst.as_ptr().align_offset(32).min(len);
        dst[..head].copy_from_slice(&src[..head]);
        let body = (len - head) / 32 * 32;
        let (from, to) = (src[head..].as_ptr(), dst[head..].as_mut_ptr());
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: `head + body <= len`, within both slices; `dst[head..]` is 32-byte
            // aligned (align_offset); AVX2 was detected just above.
            unsafe { stream_avx2(from, to, body) };
        } else {
            // SAFETY: as above (32-byte aligned is 16-byte aligned); SSE2 is part of x86_64.
            unsafe { stream_sse2(from, to, body) };
        }
        let done = head + body;
        dst[done..len].copy_from_slice(&src[done..len]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst[..len].copy_from_slice(&src[..len]);
}

/// Makes the streaming stores before it visible before any store after it (the hand-off of
/// the slot to another thread, and from there to the GPU).
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions; SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Streams `len` bytes (a multiple of 32) from `src` to the 32-byte aligned `dst`.
///
/// # Safety
/// As [`stream_sse2`], with `dst` 32-byte aligned, `len` a multiple of 32, and a CPU with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_avx2(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
    let mut i = 0;
    while i < len {
        // SAFETY: `i + 32 <= len`, in bounds of both buffers as the caller promised; the store
        // address is 32-byte aligned because `dst` is and `i` is a multiple of 32.
        unsafe {
            let v = _mm256_loadu_si256(src.add(i) as *const __m256i);
            _mm256_stream_si256(dst.add(i) as *mut __m256i, v);
        }
        i += 32;
    }
}

/// Streams `len` bytes (a multiple of 16) from `src` to the 16-byte aligned `dst`.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, `dst` 16-byte aligned, and the
/// two must not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_sse2(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let mut i = 0;
    while i < len {
        // SAFETY: `i + 16 <= len` (len is a multiple of 16), in bounds of both buffers as the
        // caller promised; the store address is 16-byte aligned because `dst` is and `i` is a
        // multiple of 16.
        unsafe {
            let v = _mm_loadu_si128(src.add(i) as *const __m128i);
            _mm_stream_si128(dst.add(i) as *mut __m128i, v);
        }
        i += 16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for start in 0..20 {
            for len in [0, 1, 15, 16, 17, 31, 64, 100, 4096, 4979] {
                let mut dst = vec![0u8; 5000];
                copy_streaming(&src[..len], &mut dst[start..start + len]);
                fence();
                assert_eq!(
                    &dst[start..start + len],
                    &src[..len],
                    "start {start} len {len}"
                );
                assert!(dst[..start].iter().all(|&b| b == 0));
                assert!(dst[start + len..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn streamed_reads_equal_plain_reads_and_end_at_the_file_end() {
        let path = std::env::temp_dir().join(format!("dicomflow-stream-{}", std::process::id()));
        let bytes: Vec<u8> = (0..(MIN_STREAMED + 2 * CHUNK + 12345) as u32)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let mut bounce = Vec::new();
        // Streamed (past MIN_STREAMED) and plain, from an odd offset.
        for (offset, len) in [(3u64, MIN_STREAMED + 777), (0, 1000)] {
            let mut dst = vec![0u8; len + 3];
            read_exact_at(&file, &mut dst[3..], offset, &mut bounce).unwrap();
            assert_eq!(&dst[3..], &bytes[offset as usize..offset as usize + len]);
        }
        // Asking for more than the file holds fails as `read_exact_at` does.
        let mut dst = vec![0u8; bytes.len() + 1];
        let e = read_exact_at(&file, &mut dst, 0, &mut bounce).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        std::fs::remove_file(&path).unwrap();
    }
}
