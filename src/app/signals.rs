//! Ctrl-C: the first interrupt finishes in-flight slices (nothing partial is written) and
//! prints the summary; a second one exits at once.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

static INTERRUPTS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_sigint(_: libc::c_int) {
    // Only async-signal-safe work here: an atomic increment, or _exit on the second signal.
    if INTERRUPTS.fetch_add(1, Ordering::SeqCst) >= 1 {
        // SAFETY: _exit is async-signal-safe; outputs are atomic so nothing partial remains.
        unsafe { libc::_exit(130) };
    }
}

/// Sets `cancel` when SIGINT or SIGTERM arrives.
pub fn cancel_on_interrupt(cancel: Arc<AtomicBool>) {
    let handler = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: installing a handler that only touches an atomic (or calls _exit) is sound.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
    let _ = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            if INTERRUPTS.load(Ordering::SeqCst) > 0 {
                cancel.store(true, Ordering::Relaxed);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        });
}
