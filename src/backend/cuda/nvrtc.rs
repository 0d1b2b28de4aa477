//! Kernels from `kernels/*.cu`, compiled at run time by NVRTC for the device's compute
//! capability into a CUBIN, and cached on disk keyed by the source hash, the architecture and
//! the NVRTC version, so that a second start loads the CUBIN instead of compiling (~240 ms).

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::time::Instant;

use cudarc::nvrtc::sys as nv;

/// The kernel sources, the shared header inlined (NVRTC gets one translation unit).
pub fn source() -> String {
    let header = include_str!("../../../kernels/common.cuh").replace("#pragma once", "");
    let mut s = String::from("// dicomflow kernels (generated from kernels/*.cu)\n");
    s.push_str(&header);
    for part in [
        include_str!("../../../kernels/gray.cu"),
        include_str!("../../../kernels/channels.cu"),
        include_str!("../../../kernels/color.cu"),
        include_str!("../../../kernels/png.cu"),
        include_str!("../../../kernels/ops.cu"),
        include_str!("../../../kernels/zlib.cu"),
        include_str!("../../../kernels/fdeflate.cu"),
        include_str!("../../../kernels/probes.cu"),
        include_str!("../../../kernels/pull.cu"),
    ] {
        for line in part.lines() {
            if !line.trim_start().starts_with("#include \"common.cuh\"") {
                s.push_str(line);
                s.push('\n');
            }
        }
    }
    s
}

/// Options: the device's real architecture (so NVRTC emits a CUBIN) and no fused
/// multiply-add, so double arithmetic rounds like the CPU reference.
fn options(arch: (i32, i32)) -> Vec<String> {
    vec![
        format!("--gpu-architecture=sm_{}{}", arch.0, arch.1),
        "--fmad=false".into(),
        "--std=c++17".into(),
    ]
}

/// 128-bit FNV-1a (two differently seeded 64-bit lanes): a stable cache key, not security.
fn hash128(bytes: &[u8]) -> String {
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x6c62_272e_07bb_0142;
    for &x in bytes {
        a = (a ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3);
        b = (b ^ x as u64)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(5);
    }
    format!("{a:016x}{b:016x}")
}

fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: out pointers valid; libnvrtc presence was probed before any CUDA work.
    unsafe { nv::nvrtcVersion(&mut major, &mut minor) };
    (major, minor)
}

/// Where compiled kernels are cached.
pub fn cache_dir(configured: Option<&Path>) -> PathBuf {
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("dicomflow");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".cache").join("dicomflow");
    }
    std::env::temp_dir().join("dicomflow-cache")
}

/// How the module image was obtained.
#[derive(Debug, Clone)]
pub struct KernelOrigin {
    pub cache_file: PathBuf,
    pub cache_hit: bool,
    pub compile_ms: f64,
}

/// Returns the CUBIN for `arch`, from the cache or freshly compiled (then cached).
pub fn module_image(arch: (i32, i32), cache: &Path) -> Result<(Vec<u8>, KernelOrigin), String> {
    let src = source();
    let opts = options(arch);
    let (vmaj, vmin) = nvrtc_version();
    let key = hash128(format!("{src}\0{}", opts.join(" ")).as_bytes());
    let file = cache.join(format!(
        "kernels-{key}-sm{}{}-nvrtc{vmaj}.{vmin}.cubin",
        arch.0, arch.1
    ));
    if let Ok(bytes) = std::fs::read(&file) {
        if !bytes.is_empty() {
            return Ok((
                bytes,
                KernelOrigin {
                    cache_file: file,
                    cache_hit: true,
                    compile_ms: 0.0,
                },
            ));
        }
    }
    let start = Instant::now();
    let cubin = compile(&src, &opts)?;
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    if let Err(e) = std::fs::create_dir_all(cache)
        .and_then(|_| crate::output::atomic::write_atomic(&file, &cubin))
    {
        tracing::warn!(cache = %file.display(), "cannot cache compiled kernels: {e}");
    }
    Ok((
        cubin,
        KernelOrigin {
            cache_file: file,
            cache_hit: false,
            compile_ms,
        },
    ))
}

fn nvrtc_check(call: &str, r: nv::nvrtcResult) -> Result<(), String> {
    if r == nv::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call} failed: {r:?}"))
    }
}

/// Compiles `src` to a CUBIN.
fn compile(src: &str, opts: &[String]) -> Result<Vec<u8>, String> {
    let csrc = CString::new(src).map_err(|_| "kernel source contains NUL")?;
    let name = c"dicomflow.cu";
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings; no headers passed.
    nvrtc_check("nvrtcCreateProgram", unsafe {
        nv::nvrtcCreateProgram(
            &mut prog,
            csrc.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    })?;
    let result = (|| {
        let copts: Vec<CString> = opts
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| "option contains NUL".to_string()))
            .collect::<Result<_, _>>()?;
        let ptrs: Vec<*const std::ffi::c_char> = copts.iter().map(|c| c.as_ptr()).collect();
        // SAFETY: prog live; ptrs point to live CStrings.
        let r = unsafe { nv::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr()) };
        if r != nv::nvrtcResult::NVRTC_SUCCESS {
            return Err(format!(
                "NVRTC compilation failed ({r:?}):\n{}",
                program_log(prog)
            ));
        }
        let mut size = 0usize;
        // SAFETY: prog compiled; out pointer valid.
        nvrtc_check("nvrtcGetCUBINSize", unsafe {
            nv::nvrtcGetCUBINSize(prog, &mut size)
        })?;
        let mut cubin = vec![0u8; size];
        // SAFETY: buffer holds `size` bytes.
        nvrtc_check("nvrtcGetCUBIN", unsafe {
            nv::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut std::ffi::c_char)
        })?;
        Ok(cubin)
    })();
    // SAFETY: prog created above, destroyed once.
    unsafe { nv::nvrtcDestroyProgram(&mut prog) };
    result
}

fn program_log(prog: nv::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: prog live, out pointer valid.
    if unsafe { nv::nvrtcGetProgramLogSize(prog, &mut size) } != nv::nvrtcResult::NVRTC_SUCCESS
        || size == 0
    {
        return String::new();
    }
    let mut buf = vec![0 as std::ffi::c_char; size];
    // SAFETY: buffer holds `size` chars.
    if unsafe { nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr()) } != nv::nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    // SAFETY: NVRTC NUL-terminates the log within `size`.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_inlines_the_header_once() {
        let s = source();
        assert!(!s.contains("#include \"common.cuh\""));
        assert_eq!(
            s.matches("__device__ __forceinline__ u32 table_index")
                .count(),
            1
        );
        for kernel in [
            "gray_apply_u16",
            "gray_channels",
            "color_full",
            "png_filter_rows",
            "gray_apply_u16_group",
            "gray_apply_u8_group",
            "png_filter_rows_group",
            "ops_gather",
            "ops_resample_h",
            "ops_resample_v",
        ] {
            assert!(s.contains(kernel), "{kernel}");
        }
    }

    /// Compiles the real kernels when NVRTC can be loaded (no GPU needed: e.g. with the
    /// `nvidia-cuda-nvrtc` wheel's lib folder on LD_LIBRARY_PATH); skips, saying so, otherwise.
    #[test]
    fn kernels_compile_with_nvrtc_for_hopper_and_older() {
        // SAFETY: only tries to dlopen libnvrtc.
        if !unsafe { nv::is_culib_present() } {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipping kernels_compile_with_nvrtc: libnvrtc not found"
            );
            return;
        }
        for arch in [(9, 0), (8, 0)] {
            let cubin = compile(&source(), &options(arch))
                .unwrap_or_else(|e| panic!("sm_{}{}: {e}", arch.0, arch.1));
            assert!(
                cubin.len() > 1000,
                "sm_{}{}: {} bytes",
                arch.0,
                arch.1,
                cubin.len()
            );
        }
    }

    #[test]
    fn cache_key_changes_with_the_source() {
        assert_ne!(hash128(b"a"), hash128(b"b"));
        assert_eq!(hash128(b"abc"), hash128(b"abc"));
    }
}
