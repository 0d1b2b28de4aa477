//! nvJPEG2000 (`libnvjpeg2k.so.0`): the few calls dicomflow uses to decode one JPEG 2000 or
//! HTJ2K codestream into device memory, looked up at run time (cudarc has no bindings; the
//! declarations follow `nvjpeg2k.h` of nvJPEG2000 0.11). A library that lacks one of them is
//! reported as unusable, with the missing name.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use super::alloc::{AllocContext, AllocatorV2};
use super::ffi::{self, check, symbol};
use super::{Failure, OutputLayout};
use crate::backend::cuda::driver::{Device, Stream};
use crate::backend::cuda::libs;

type Status = c_int;
type RawHandle = *mut c_void;
type DecodeState = *mut c_void;
type CodeStream = *mut c_void;
type DecodeParams = *mut c_void;

/// What a missing entry point says about the library's age.
const HINT: &str = "nvJPEG2000 older than 0.7?";
const BACKEND_DEFAULT: c_int = 0;
/// `nvjpeg2kImageType_t`.
const UINT8: c_int = 0;
const UINT16: c_int = 1;
const INT16: c_int = 2;
/// `nvjpeg2kImageFormat_t`.
const FORMAT_INTERLEAVED: c_int = 1;

/// `nvjpeg2kImageInfo_t`.
#[repr(C)]
#[derive(Default)]
struct ImageInfo {
    image_width: u32,
    image_height: u32,
    tile_width: u32,
    tile_height: u32,
    num_tiles_x: u32,
    num_tiles_y: u32,
    num_components: u32,
}

/// `nvjpeg2kImageComponentInfo_t`.
#[repr(C)]
#[derive(Default)]
struct ComponentInfo {
    component_width: u32,
    component_height: u32,
    precision: u8,
    sgn: u8,
}

/// `nvjpeg2kImage_t`.
#[repr(C)]
struct Image {
    pixel_data: *mut *mut c_void,
    pitch_in_bytes: *mut usize,
    pixel_type: c_int,
    num_components: u32,
}

/// The entry points, copied out of the library (valid while `Library` is loaded: the struct
/// holding them keeps it).
struct Fns {
    get_property: unsafe extern "C" fn(c_int, *mut c_int) -> Status,
    create_v2:
        unsafe extern "C" fn(c_int, *mut AllocatorV2, *mut AllocatorV2, *mut RawHandle) -> Status,
    destroy: unsafe extern "C" fn(RawHandle) -> Status,
    state_create: unsafe extern "C" fn(RawHandle, *mut DecodeState) -> Status,
    state_destroy: unsafe extern "C" fn(DecodeState) -> Status,
    stream_create: unsafe extern "C" fn(*mut CodeStream) -> Status,
    stream_destroy: unsafe extern "C" fn(CodeStream) -> Status,
    stream_parse:
        unsafe extern "C" fn(RawHandle, *const u8, usize, c_int, c_int, CodeStream) -> Status,
    image_info: unsafe extern "C" fn(CodeStream, *mut ImageInfo) -> Status,
    component_info: unsafe extern "C" fn(CodeStream, *mut ComponentInfo, u32) -> Status,
    params_create: unsafe extern "C" fn(*mut DecodeParams) -> Status,
    params_destroy: unsafe extern "C" fn(DecodeParams) -> Status,
    params_set_output_format: unsafe extern "C" fn(DecodeParams, c_int) -> Status,
    decode_image: unsafe extern "C" fn(
        RawHandle,
        DecodeState,
        CodeStream,
        DecodeParams,
        *mut Image,
        *mut c_void,
    ) -> Status,
}

/// The loaded library.
pub struct Library {
    fns: Fns,
    /// Where it was found.
    pub path: PathBuf,
    /// `major.minor.patch` from `nvjpeg2kGetProperty`.
    pub version: String,
    _lib: libloading::Library,
}

impl Library {
    /// Finds and loads `libnvjpeg2k.so.0` (search order of [`libs`]).
    pub fn load(configured: Option<&std::path::Path>) -> Result<Arc<Library>, String> {
        let found = libs::open(&["libnvjpeg2k.so.0"], configured).map_err(|e| e.to_string())?;
        let lib = found.library;
        // SAFETY: each type below is the declaration of that function in nvjpeg2k.h (0.11).
        let fns = unsafe {
            Fns {
                get_property: symbol(&lib, "nvjpeg2kGetProperty", HINT)?,
                create_v2: symbol(&lib, "nvjpeg2kCreateV2", HINT)?,
                destroy: symbol(&lib, "nvjpeg2kDestroy", HINT)?,
                state_create: symbol(&lib, "nvjpeg2kDecodeStateCreate", HINT)?,
                state_destroy: symbol(&lib, "nvjpeg2kDecodeStateDestroy", HINT)?,
                stream_create: symbol(&lib, "nvjpeg2kStreamCreate", HINT)?,
                stream_destroy: symbol(&lib, "nvjpeg2kStreamDestroy", HINT)?,
                stream_parse: symbol(&lib, "nvjpeg2kStreamParse", HINT)?,
                image_info: symbol(&lib, "nvjpeg2kStreamGetImageInfo", HINT)?,
                component_info: symbol(&lib, "nvjpeg2kStreamGetImageComponentInfo", HINT)?,
                params_create: symbol(&lib, "nvjpeg2kDecodeParamsCreate", HINT)?,
                params_destroy: symbol(&lib, "nvjpeg2kDecodeParamsDestroy", HINT)?,
                params_set_output_format: symbol(
                    &lib,
                    "nvjpeg2kDecodeParamsSetOutputFormat",
                    HINT,
                )?,
                decode_image: symbol(&lib, "nvjpeg2kDecodeImage", HINT)?,
            }
        };
        Ok(Arc::new(Library {
            version: ffi::version(fns.get_property),
            fns,
            path: found.path,
            _lib: lib,
        }))
    }
}

/// A library handle for one device, shared by its workers (nvJPEG2000 handles are thread
/// safe); its allocators hand out the device's memory (alloc.rs).
pub struct Handle {
    lib: Arc<Library>,
    raw: RawHandle,
    device: Arc<Device>,
    // Kept alive for the library, which holds pointers to them; dropped after the handle.
    _device_alloc: Box<AllocatorV2>,
    _pinned_alloc: Box<AllocatorV2>,
    _alloc: Box<AllocContext>,
}

// SAFETY: nvJPEG2000 documents the library handle as thread safe; the allocator context it
// points to is Sync (a device handle and a mutex).
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl Handle {
    /// Creates the handle for `device`.
    pub fn new(lib: &Arc<Library>, device: &Arc<Device>) -> Result<Arc<Handle>, String> {
        device.bind().map_err(|e| e.to_string())?;
        let alloc = AllocContext::new(device);
        let mut device_alloc = Box::new(AllocatorV2::device(&alloc));
        let mut pinned_alloc = Box::new(AllocatorV2::pinned(&alloc));
        let mut raw: RawHandle = std::ptr::null_mut();
        // SAFETY: the allocator tables and their context live as long as the handle (fields of
        // the Handle, dropped after it is destroyed); out pointer valid.
        check("nvjpeg2kCreateV2", unsafe {
            (lib.fns.create_v2)(
                BACKEND_DEFAULT,
                &mut *device_alloc,
                &mut *pinned_alloc,
                &mut raw,
            )
        })?;
        Ok(Arc::new(Handle {
            lib: lib.clone(),
            raw,
            device: device.clone(),
            _device_alloc: device_alloc,
            _pinned_alloc: pinned_alloc,
            _alloc: alloc,
        }))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.device.bind();
        // SAFETY: created in Handle::new, destroyed once; every Decoder holding an Arc to it
        // (and so every decode state) is gone.
        unsafe { (self.lib.fns.destroy)(self.raw) };
    }
}

/// One worker's decoder: a decode state, a parsed-codestream handle and decode parameters on
/// the device's shared handle, reused frame after frame (a state must not be shared between
/// streams).
pub struct Decoder {
    handle: Arc<Handle>,
    state: DecodeState,
    code: CodeStream,
    params: DecodeParams,
    stream: Arc<Stream>,
}

// SAFETY: the state and codestream handles are used by one worker thread at a time (the decoder
// is owned by it and moved with it).
unsafe impl Send for Decoder {}

impl Decoder {
    /// Creates a state, codestream handle and parameters for `stream`'s worker.
    pub fn new(handle: &Arc<Handle>, stream: &Arc<Stream>) -> Result<Decoder, String> {
        stream.device.bind().map_err(|e| e.to_string())?;
        let f = &handle.lib.fns;
        // From here on, Drop releases whatever was created (null handles are skipped).
        let mut d = Decoder {
            handle: handle.clone(),
            state: std::ptr::null_mut(),
            code: std::ptr::null_mut(),
            params: std::ptr::null_mut(),
            stream: stream.clone(),
        };
        // SAFETY: the handle is live; out pointers valid.
        unsafe {
            check(
                "nvjpeg2kDecodeStateCreate",
                (f.state_create)(handle.raw, &mut d.state),
            )?;
            check("nvjpeg2kStreamCreate", (f.stream_create)(&mut d.code))?;
            check(
                "nvjpeg2kDecodeParamsCreate",
                (f.params_create)(&mut d.params),
            )?;
            check(
                "nvjpeg2kDecodeParamsSetOutputFormat",
                (f.params_set_output_format)(d.params, FORMAT_INTERLEAVED),
            )?;
        }
        Ok(d)
    }

    /// Parses `data` (a JPEG 2000 or HTJ2K codestream in host memory) and queues its decode on
    /// the worker's stream into `dst` (device memory of `want.bytes()` bytes), samples
    /// interleaved, `want.bytes_per_sample` each. Parameters the frame's description does not
    /// match, and streams the library rejects, are a [`Failure`] for the CPU to take over.
    pub fn decode(&mut self, data: &[u8], want: &OutputLayout, dst: u64) -> Result<(), Failure> {
        let f = &self.handle.lib.fns;
        self.stream
            .device
            .bind()
            .map_err(|e| Failure::Device(e.to_string()))?;
        // SAFETY: data is valid for its length during the call; the parsed handle keeps what it
        // needs (the decode below reads it before `data` can change: the slot is held until the
        // stream is synchronized).
        check("nvjpeg2kStreamParse", unsafe {
            (f.stream_parse)(self.handle.raw, data.as_ptr(), data.len(), 0, 0, self.code)
        })
        .map_err(Failure::Rejected)?;
        let mut info = ImageInfo::default();
        // SAFETY: parsed handle, valid out pointer.
        check("nvjpeg2kStreamGetImageInfo", unsafe {
            (f.image_info)(self.code, &mut info)
        })
        .map_err(Failure::Rejected)?;
        if (info.image_width, info.image_height, info.num_components)
            != (want.cols, want.rows, want.components)
        {
            return Err(Failure::Unsupported(format!(
                "codestream is {}x{}x{}, the header says {}x{}x{}",
                info.image_width,
                info.image_height,
                info.num_components,
                want.cols,
                want.rows,
                want.components
            )));
        }
        let mut signed = None;
        for c in 0..info.num_components {
            let mut ci = ComponentInfo::default();
            // SAFETY: c < num_components; valid out pointer.
            check("nvjpeg2kStreamGetImageComponentInfo", unsafe {
                (f.component_info)(self.code, &mut ci, c)
            })
            .map_err(Failure::Rejected)?;
            if (ci.component_width, ci.component_height) != (info.image_width, info.image_height) {
                return Err(Failure::Unsupported(format!(
                    "component {c} is subsampled ({}x{})",
                    ci.component_width, ci.component_height
                )));
            }
            if ci.precision == 0 || ci.precision as usize > 8 * want.bytes_per_sample {
                return Err(Failure::Unsupported(format!(
                    "component {c} has {} bits, the container {}",
                    ci.precision,
                    8 * want.bytes_per_sample
                )));
            }
            if *signed.get_or_insert(ci.sgn != 0) != (ci.sgn != 0) {
                return Err(Failure::Unsupported(
                    "components differ in signedness".into(),
                ));
            }
        }
        // Signed samples come out as two's complement in the container, as the CPU decoder
        // writes them; the render chain masks and sign-extends either way.
        let pixel_type = match (want.bytes_per_sample, signed.unwrap_or(false)) {
            (1, false) => UINT8,
            (2, false) => UINT16,
            (2, true) => INT16,
            (b, s) => {
                return Err(Failure::Unsupported(format!(
                    "{}{}-bit output",
                    if s { "signed " } else { "" },
                    8 * b
                )))
            }
        };
        let mut plane = dst as *mut c_void;
        let mut pitch = want.row_bytes();
        let mut image = Image {
            pixel_data: &mut plane,
            pitch_in_bytes: &mut pitch,
            pixel_type,
            num_components: want.components,
        };
        // SAFETY: dst is device memory of want.bytes() = rows × pitch bytes; image and its
        // arrays live for the call (the library copies the descriptors when queuing).
        check("nvjpeg2kDecodeImage", unsafe {
            (f.decode_image)(
                self.handle.raw,
                self.state,
                self.code,
                self.params,
                &mut image,
                self.stream.raw() as *mut c_void,
            )
        })
        .map_err(Failure::Rejected)
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        let f = &self.handle.lib.fns;
        let _ = self.stream.device.bind();
        let _ = self.stream.synchronize();
        // SAFETY: each was created by this decoder and is destroyed once, after the stream has
        // finished every decode that used it (the shared handle outlives it: we hold an Arc).
        unsafe {
            if !self.params.is_null() {
                (f.params_destroy)(self.params);
            }
            if !self.code.is_null() {
                (f.stream_destroy)(self.code);
            }
            if !self.state.is_null() {
                (f.state_destroy)(self.state);
            }
        }
    }
}
