//! What the two codec libraries' bindings share: looking a C function up by name, the library
//! version from its `GetProperty` call, and their status codes (nvJPEG and nvJPEG2000 number
//! them alike; 10 exists in nvJPEG only).

use std::ffi::c_int;

/// `libraryPropertyType`: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL.
const PROPERTIES: [c_int; 3] = [0, 1, 2];

/// Copies the function pointer `name` out of `lib`; `hint` says which library version added it.
///
/// # Safety
/// `T` must be the C signature of `name` in the library's header, and the pointer must not be
/// used after `lib` is unloaded (the bindings keep both in one struct).
pub(super) unsafe fn symbol<T: Copy>(
    lib: &libloading::Library,
    name: &str,
    hint: &str,
) -> Result<T, String> {
    // SAFETY: forwarded contract (type and lifetime are the caller's).
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| format!("{name} missing ({hint})"))
}

/// `major.minor.patch` from a library's `GetProperty` (`-1` for a part it does not report).
pub(super) fn version(get_property: unsafe extern "C" fn(c_int, *mut c_int) -> c_int) -> String {
    let mut v = [0; 3];
    for (slot, prop) in v.iter_mut().zip(PROPERTIES) {
        // SAFETY: valid out pointer; the call has no other precondition.
        if unsafe { get_property(prop, slot) } != 0 {
            *slot = -1;
        }
    }
    format!("{}.{}.{}", v[0], v[1], v[2])
}

/// Text for a status code.
fn status_name(s: c_int) -> &'static str {
    match s {
        1 => "NOT_INITIALIZED",
        2 => "INVALID_PARAMETER",
        3 => "BAD_JPEG",
        4 => "JPEG_NOT_SUPPORTED",
        5 => "ALLOCATOR_FAILURE",
        6 => "EXECUTION_FAILED",
        7 => "ARCH_MISMATCH",
        8 => "INTERNAL_ERROR",
        9 => "IMPLEMENTATION_NOT_SUPPORTED",
        10 => "INCOMPLETE_BITSTREAM",
        _ => "unknown status",
    }
}

/// `Ok` for status 0 (success), else the call and the status named.
pub(super) fn check(call: &'static str, s: c_int) -> Result<(), String> {
    if s == 0 {
        Ok(())
    } else {
        Err(format!("{call}: {} ({s})", status_name(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_name_the_call_and_the_code() {
        assert_eq!(check("nvjpegDecode", 0), Ok(()));
        assert_eq!(
            check("nvjpeg2kStreamParse", 3).unwrap_err(),
            "nvjpeg2kStreamParse: BAD_JPEG (3)"
        );
        assert!(check("x", 77).unwrap_err().contains("unknown status (77)"));
    }
}
