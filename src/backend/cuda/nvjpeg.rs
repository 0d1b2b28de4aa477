//! The encoder half of NVIDIA nvJPEG (`nvjpeg.h` of CUDA 13), loaded at run time from
//! `libnvjpeg.so.13` (CUDA toolkit, or pip `nvidia-nvjpeg`) through [`super::libs`]: baseline
//! JPEG from 8-bit pixels in device memory, grayscale through `nvjpegEncodeYUV` with
//! `NVJPEG_CSS_GRAY` (the luma plane only, as NVIDIA documents for monochrome), colour through
//! `nvjpegEncodeImage` from interleaved RGB with 4:4:4 or 4:2:0 chroma. cudarc has no bindings;
//! the signatures below are transcribed from the header.
//!
//! Like nvCOMP, nvJPEG runs on the CUDA runtime it links statically and uses the primary
//! context current on the calling thread ([`super::driver::Device::bind`]).

use std::ffi::c_void;
use std::path::Path;

use cudarc::driver::sys::CUstream;

use super::libs::{self, FoundLibrary};

type Status = i32;
const SUCCESS: Status = 0;
type Handle = *mut c_void;
type EncoderState = *mut c_void;
type EncoderParams = *mut c_void;

/// `nvjpegChromaSubsampling_t` values used here.
const CSS_444: i32 = 0;
const CSS_420: i32 = 2;
const CSS_GRAY: i32 = 6;
/// `nvjpegInputFormat_t`: interleaved RGB.
const INPUT_RGBI: i32 = 5;
/// `libraryPropertyType`.
const MAJOR_VERSION: i32 = 0;
const MINOR_VERSION: i32 = 1;
const PATCH_LEVEL: i32 = 2;

/// `nvjpegImage_t`: up to four planes (device pointers) and their pitches.
#[repr(C)]
struct Image {
    channel: [*mut u8; 4],
    pitch: [usize; 4],
}

type GetProperty = unsafe extern "C" fn(i32, *mut i32) -> Status;
type CreateSimple = unsafe extern "C" fn(*mut Handle) -> Status;
type Destroy = unsafe extern "C" fn(Handle) -> Status;
type StateCreate = unsafe extern "C" fn(Handle, *mut EncoderState, CUstream) -> Status;
type StateDestroy = unsafe extern "C" fn(EncoderState) -> Status;
type ParamsCreate = unsafe extern "C" fn(Handle, *mut EncoderParams, CUstream) -> Status;
type ParamsDestroy = unsafe extern "C" fn(EncoderParams) -> Status;
type ParamsSetInt = unsafe extern "C" fn(EncoderParams, i32, CUstream) -> Status;
/// `nvjpegEncodeYUV` (the `i32` a chroma subsampling) and `nvjpegEncodeImage` (an input
/// format): handle, state, parameters, image, that `i32`, width, height, stream.
type Encode = unsafe extern "C" fn(
    Handle,
    EncoderState,
    EncoderParams,
    *const Image,
    i32,
    i32,
    i32,
    CUstream,
) -> Status;
type Retrieve = unsafe extern "C" fn(Handle, EncoderState, *mut u8, *mut usize, CUstream) -> Status;

/// A failed nvJPEG call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("nvJPEG {call}: {}", status_name(*.status))]
pub struct NvjpegError {
    pub call: &'static str,
    pub status: i32,
}

fn status_name(s: i32) -> String {
    let name = match s {
        1 => "not initialized",
        2 => "invalid parameter",
        3 => "bad JPEG",
        4 => "JPEG not supported",
        5 => "allocator failure",
        6 => "execution failed",
        7 => "architecture mismatch",
        8 => "internal error",
        9 => "implementation not supported",
        10 => "incomplete bitstream",
        _ => "unknown status",
    };
    format!("{name} (status {s})")
}

fn check(call: &'static str, status: Status) -> Result<(), NvjpegError> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(NvjpegError { call, status })
    }
}

struct Fns {
    destroy: Destroy,
    state_create: StateCreate,
    state_destroy: StateDestroy,
    params_create: ParamsCreate,
    params_destroy: ParamsDestroy,
    set_quality: ParamsSetInt,
    set_sampling: ParamsSetInt,
    set_optimized_huffman: ParamsSetInt,
    encode_yuv: Encode,
    encode_image: Encode,
    retrieve: Retrieve,
}

/// libnvjpeg, loaded, with one library handle (shared by the encoders of every worker).
pub struct Nvjpeg {
    fns: Fns,
    handle: Handle,
    /// nvJPEG's version, e.g. "13.0.1".
    pub version: String,
    pub path: std::path::PathBuf,
    _library: FoundLibrary,
}

// SAFETY: the nvJPEG handle is documented thread-safe (one handle, a state per thread);
// encoder states and parameters are per `JpegEncoder`, each owned by one worker.
unsafe impl Send for Nvjpeg {}
// SAFETY: as above.
unsafe impl Sync for Nvjpeg {}

impl std::fmt::Debug for Nvjpeg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvjpeg")
            .field("version", &self.version)
            .field("path", &self.path)
            .finish()
    }
}

/// # Safety
/// As [`libs::symbol`]: `T` is the symbol's exact signature, and the pointer is dropped with the
/// library (the struct keeps both).
unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: forwarded contract.
    unsafe { libs::symbol(lib, "libnvjpeg", name) }
}

impl Nvjpeg {
    /// Loads `libnvjpeg.so.13` and creates the library handle. A device context must be
    /// current on this thread.
    pub fn load(configured: Option<&Path>) -> Result<Nvjpeg, String> {
        let found = libs::open(&["libnvjpeg.so.13"], configured).map_err(|e| e.to_string())?;
        let lib = &found.library;
        // SAFETY: each type is the signature nvjpeg.h (CUDA 13) declares for that symbol.
        let (fns, get_property, create) = unsafe {
            (
                Fns {
                    destroy: symbol(lib, "nvjpegDestroy")?,
                    state_create: symbol(lib, "nvjpegEncoderStateCreate")?,
                    state_destroy: symbol(lib, "nvjpegEncoderStateDestroy")?,
                    params_create: symbol(lib, "nvjpegEncoderParamsCreate")?,
                    params_destroy: symbol(lib, "nvjpegEncoderParamsDestroy")?,
                    set_quality: symbol(lib, "nvjpegEncoderParamsSetQuality")?,
                    set_sampling: symbol(lib, "nvjpegEncoderParamsSetSamplingFactors")?,
                    set_optimized_huffman: symbol(lib, "nvjpegEncoderParamsSetOptimizedHuffman")?,
                    encode_yuv: symbol(lib, "nvjpegEncodeYUV")?,
                    encode_image: symbol(lib, "nvjpegEncodeImage")?,
                    retrieve: symbol(lib, "nvjpegEncodeRetrieveBitstream")?,
                },
                symbol::<GetProperty>(lib, "nvjpegGetProperty")?,
                symbol::<CreateSimple>(lib, "nvjpegCreateSimple")?,
            )
        };
        let part = |p: i32| {
            let mut v = -1;
            // SAFETY: valid out pointer.
            unsafe { get_property(p, &mut v) };
            v
        };
        let version = format!(
            "{}.{}.{}",
            part(MAJOR_VERSION),
            part(MINOR_VERSION),
            part(PATCH_LEVEL)
        );
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: valid out pointer; destroyed in Drop.
        check("nvjpegCreateSimple", unsafe { create(&mut handle) }).map_err(|e| e.to_string())?;
        Ok(Nvjpeg {
            fns,
            handle,
            version,
            path: found.path.clone(),
            _library: found,
        })
    }
}

impl Drop for Nvjpeg {
    fn drop(&mut self) {
        // SAFETY: created in load, destroyed once; encoders hold an Arc, so none is left.
        unsafe { (self.fns.destroy)(self.handle) };
    }
}

/// Chroma subsampling of colour JPEGs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chroma {
    Full444,
    Half420,
}

/// One worker's encoder: an encoder state and parameters bound to its stream.
pub struct JpegEncoder {
    lib: std::sync::Arc<Nvjpeg>,
    state: EncoderState,
    params: EncoderParams,
    /// The worker's stream (kept alive as long as the state bound to it).
    owner: std::sync::Arc<super::driver::Stream>,
    stream: CUstream,
    /// The sampling last set (0xff = none yet).
    sampling: i32,
}

// SAFETY: the state and parameters are used by the one thread that owns the encoder.
unsafe impl Send for JpegEncoder {}

impl JpegEncoder {
    /// An encoder for `stream` at `quality` (1–100), standard Huffman tables (as the CPU
    /// encoder, the `image` crate, writes). The stream's context must be current.
    pub fn new(
        lib: std::sync::Arc<Nvjpeg>,
        owner: &std::sync::Arc<super::driver::Stream>,
        quality: u8,
    ) -> Result<JpegEncoder, NvjpegError> {
        let stream = owner.raw();
        let f = &lib.fns;
        let mut state: EncoderState = std::ptr::null_mut();
        // SAFETY: valid handle and out pointer; destroyed in Drop.
        check("nvjpegEncoderStateCreate", unsafe {
            (f.state_create)(lib.handle, &mut state, stream)
        })?;
        let mut params: EncoderParams = std::ptr::null_mut();
        // SAFETY: as above.
        let created = check("nvjpegEncoderParamsCreate", unsafe {
            (f.params_create)(lib.handle, &mut params, stream)
        });
        let enc = JpegEncoder {
            lib: lib.clone(),
            state,
            params: if created.is_ok() {
                params
            } else {
                std::ptr::null_mut()
            },
            owner: owner.clone(),
            stream,
            sampling: -1,
        };
        created?;
        // SAFETY: params live.
        check("nvjpegEncoderParamsSetQuality", unsafe {
            (f.set_quality)(enc.params, i32::from(quality.clamp(1, 100)), stream)
        })?;
        // SAFETY: params live.
        check("nvjpegEncoderParamsSetOptimizedHuffman", unsafe {
            (f.set_optimized_huffman)(enc.params, 0, stream)
        })?;
        Ok(enc)
    }

    fn set_sampling(&mut self, css: i32) -> Result<(), NvjpegError> {
        if self.sampling != css {
            // SAFETY: params live.
            check("nvjpegEncoderParamsSetSamplingFactors", unsafe {
                (self.lib.fns.set_sampling)(self.params, css, self.stream)
            })?;
            self.sampling = css;
        }
        Ok(())
    }

    /// Queues the encoding of `width`×`height` pixels at device address `pixels` (rows of
    /// `width * channels` bytes; `channels` 1 = gray, 3 = interleaved RGB).
    ///
    /// # Safety
    /// `pixels` must be device memory holding the image until the stream has run the work.
    pub unsafe fn encode(
        &mut self,
        pixels: u64,
        width: u32,
        height: u32,
        channels: usize,
        chroma: Chroma,
    ) -> Result<(), NvjpegError> {
        let pitch = width as usize * channels;
        let mut image = Image {
            channel: [std::ptr::null_mut(); 4],
            pitch: [0; 4],
        };
        image.channel[0] = pixels as *mut u8;
        image.pitch[0] = pitch;
        let lib = self.lib.clone();
        let f = &lib.fns;
        if channels == 1 {
            self.set_sampling(CSS_GRAY)?;
            // SAFETY: handle, state and params live; the image plane is valid device memory
            // (caller's contract).
            check("nvjpegEncodeYUV", unsafe {
                (f.encode_yuv)(
                    lib.handle,
                    self.state,
                    self.params,
                    &image,
                    CSS_GRAY,
                    width as i32,
                    height as i32,
                    self.stream,
                )
            })
        } else {
            self.set_sampling(match chroma {
                Chroma::Full444 => CSS_444,
                Chroma::Half420 => CSS_420,
            })?;
            // SAFETY: as above.
            check("nvjpegEncodeImage", unsafe {
                (f.encode_image)(
                    lib.handle,
                    self.state,
                    self.params,
                    &image,
                    INPUT_RGBI,
                    width as i32,
                    height as i32,
                    self.stream,
                )
            })
        }
    }

    /// The length of the last encoded bitstream (waits for the encoder on the stream).
    pub fn length(&mut self) -> Result<usize, NvjpegError> {
        let mut len = 0usize;
        // SAFETY: a null destination asks for the length only.
        check("nvjpegEncodeRetrieveBitstream", unsafe {
            (self.lib.fns.retrieve)(
                self.lib.handle,
                self.state,
                std::ptr::null_mut(),
                &mut len,
                self.stream,
            )
        })?;
        // NVIDIA's sample synchronizes between the length query and the copy.
        self.wait()?;
        Ok(len)
    }

    /// Copies the last encoded bitstream into `out` (at least [`length`](Self::length)
    /// bytes) and waits for the copy; returns its length.
    pub fn retrieve(&mut self, out: &mut [u8]) -> Result<usize, NvjpegError> {
        let mut len = out.len();
        // SAFETY: out holds len writable bytes; nvJPEG writes at most len, and the stream is
        // synchronized below, before `out` can be read or freed.
        check("nvjpegEncodeRetrieveBitstream", unsafe {
            (self.lib.fns.retrieve)(
                self.lib.handle,
                self.state,
                out.as_mut_ptr(),
                &mut len,
                self.stream,
            )
        })?;
        // The copy is queued on the stream: into page-locked memory (an output slot) it is a
        // true asynchronous DMA, so the bytes are there only after the stream is done. Without
        // this wait a writer read a slot's previous JPEG now and then (device run 7: one of
        // 200 series slices at 10.4 dB against the CPU's).
        self.wait()?;
        Ok(len)
    }

    /// Waits for the work queued on the encoder's stream.
    fn wait(&self) -> Result<(), NvjpegError> {
        self.owner.synchronize().map_err(|_| NvjpegError {
            call: "cuStreamSynchronize",
            status: 6,
        })
    }
}

impl Drop for JpegEncoder {
    fn drop(&mut self) {
        let _ = self.owner.device.bind();
        let f = &self.lib.fns;
        // SAFETY: created in new, destroyed once each.
        unsafe {
            if !self.params.is_null() {
                (f.params_destroy)(self.params);
            }
            (f.state_destroy)(self.state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_descriptor_has_the_header_layout() {
        assert_eq!(std::mem::size_of::<Image>(), 64);
    }

    #[test]
    fn statuses_read_as_words() {
        assert_eq!(status_name(2), "invalid parameter (status 2)");
        assert_eq!(status_name(99), "unknown status (status 99)");
    }
}
