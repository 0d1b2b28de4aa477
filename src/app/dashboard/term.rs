//! Owning the terminal: raw mode and the alternate screen on stderr, restored on every way out
//! (normal end, error: [`TerminalGuard`]'s drop; panic on any thread: a panic hook that restores
//! first and then runs the previous hook, so the message is still printed, on the normal
//! screen). Drawing and restoring are serialised so a panic elsewhere cannot interleave its
//! restore with half a frame.

use std::io::{self, Stderr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

use crossterm::cursor::{Hide, Show};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, Clear, ClearType, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::backend::CrosstermBackend;
use ratatui::{Frame, Terminal};

/// True while the terminal is in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Held while drawing or restoring.
static LOCK: Mutex<()> = Mutex::new(());
static HOOK: Once = Once::new();

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Leaves raw mode and the alternate screen, shows the cursor. Idempotent.
fn restore_now() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = execute!(io::stderr(), LeaveAlternateScreen, Show);
        let _ = disable_raw_mode();
    }
}

/// Restores the terminal if the dashboard owns it (for exits that skip destructors).
pub fn restore() {
    let _g = lock();
    restore_now();
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if ACTIVE.load(Ordering::SeqCst) {
                // Wait briefly for a frame being drawn; a panic inside drawing holds the lock
                // on this very thread, hence no blocking lock.
                let mut guard = None;
                for _ in 0..20 {
                    if let Ok(g) = LOCK.try_lock() {
                        guard = Some(g);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                restore_now();
                drop(guard);
            }
            previous(info);
        }));
    });
}

/// The terminal while the dashboard owns it.
pub struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<Stderr>>,
}

impl TerminalGuard {
    /// Enters raw mode and the alternate screen on stderr.
    pub fn enter() -> io::Result<TerminalGuard> {
        install_panic_hook();
        let _g = lock();
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        // No `Terminal::clear`: it asks the terminal for the cursor position (an escape
        // sequence on stdout and a wait for the reply), which stalls when stdout is redirected.
        let setup = execute!(
            io::stderr(),
            EnterAlternateScreen,
            Clear(ClearType::All),
            Hide
        )
        .and_then(|_| Terminal::new(CrosstermBackend::new(io::stderr())));
        match setup {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(e) => {
                restore_now();
                Err(e)
            }
        }
    }

    /// Draws one frame, unless a panic has already given the terminal back.
    pub fn draw(&mut self, f: impl FnOnce(&mut Frame)) -> io::Result<()> {
        let _g = lock();
        if !ACTIVE.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.terminal.draw(f).map(|_| ())
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}
