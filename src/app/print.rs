//! Writing to the terminal without ever panicking: `print!` and `eprint!` panic when the other
//! end of a pipe is gone (`dicomflow run … 2>&1 | head -1`: EPIPE once `head` has its line),
//! which would lose the report and the exit code. Here a closed stdout or stderr only means
//! that what is written goes nowhere; the run goes on and ends as it would have.

use std::io::Write;

/// Writes `text` to stderr, ignoring a closed or broken stderr.
pub fn err(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

/// Writes `text` and a newline to stderr (see [`err`]).
pub fn errln(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.write_all(b"\n");
    let _ = e.flush();
}

/// Writes `text` to stdout. A reader that went away (EPIPE) is not an error: it wanted no
/// more (`dicomflow inspect x.dcm | head -3`); other errors are returned.
pub fn out(text: &str) -> std::io::Result<()> {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
