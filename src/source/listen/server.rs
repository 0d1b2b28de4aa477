//! The accept loop: one thread per association up to `max_associations`; beyond that, a
//! connection gets an A-ASSOCIATE-RJ (transient, local limit exceeded) from a small pool of
//! refusing threads, or is closed at once when those are busy too. [`Listener::stop`] stops
//! accepting; associations finish the message in progress (answering it) and are aborted.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use dicom_ul::pdu::{
    AssociationRJ, AssociationRJResult, AssociationRJServiceProviderPresentationReason,
    AssociationRJSource,
};
use dicom_ul::Pdu;

use super::{association, ListenError, ListenOptions, Shared, Spool};
use crate::source::live::{Feed, LiveStats};

/// How long the accept loop waits before looking at the stop flag again.
const POLL_MS: i32 = 200;
/// Connections over the limit answered with a rejection at once; more are just closed.
const MAX_REFUSERS: usize = 4;
/// How long a refused peer gets to send its A-ASSOCIATE-RQ.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(2);

/// A running listener.
pub struct Listener {
    shared: Arc<Shared>,
    local: SocketAddr,
    accept: Option<JoinHandle<()>>,
    sessions: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Listener {
    /// Binds `options.bind` and starts accepting. Instances go to `spool`, then `feed`.
    pub fn start(
        options: ListenOptions,
        spool: Arc<Spool>,
        feed: Arc<Feed>,
    ) -> Result<Listener, ListenError> {
        let socket = TcpListener::bind(options.bind).map_err(|source| ListenError::Bind {
            addr: options.bind,
            source,
        })?;
        let local = socket.local_addr().map_err(|source| ListenError::Bind {
            addr: options.bind,
            source,
        })?;
        let stats = feed.stats().clone();
        let shared = Arc::new(Shared {
            options,
            spool,
            feed,
            stats,
            stop: Default::default(),
        });
        let sessions = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (shared, sessions) = (shared.clone(), sessions.clone());
            std::thread::Builder::new()
                .name("listen".into())
                .spawn(move || accept_loop(&shared, &socket, &sessions))
                .map_err(|source| ListenError::Thread {
                    what: "listen",
                    source,
                })?
        };
        tracing::info!(
            "listening on {local} as {} (max PDU {}, {} association(s) at once)",
            shared.options.ae_title,
            shared.options.max_pdu,
            shared.options.max_associations
        );
        Ok(Listener {
            shared,
            local,
            accept: Some(accept),
            sessions,
        })
    }

    /// The address actually bound (the port, when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The statistics the listener counts into.
    pub fn stats(&self) -> &Arc<LiveStats> {
        &self.shared.stats
    }

    /// Stops accepting associations; open ones end after the message in progress.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// Stops (if not yet) and waits until the accept loop and every association are done.
    pub fn join(mut self) {
        self.stop();
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let handles = match self.sessions.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(_) => Vec::new(),
        };
        for h in handles {
            let _ = h.join();
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Without join, threads finish on their own once they see the flag.
        self.stop();
    }
}

/// Waits up to [`POLL_MS`] for a connection; true when one is waiting.
fn readable(socket: &TcpListener) -> bool {
    let mut fds = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `fds` is one valid pollfd that lives across the call; the descriptor is open
    // for as long as `socket` is borrowed.
    let n = unsafe { libc::poll(&mut fds, 1, POLL_MS) };
    n > 0 && (fds.revents & libc::POLLIN) != 0
}

fn accept_loop(shared: &Arc<Shared>, socket: &TcpListener, sessions: &Mutex<Vec<JoinHandle<()>>>) {
    let refusers = Arc::new(AtomicUsize::new(0));
    let mut next_id = 0u64;
    if let Err(e) = socket.set_nonblocking(true) {
        tracing::warn!("listener: cannot make the socket non-blocking: {e}");
    }
    while !shared.stop.load(Ordering::Relaxed) {
        if !readable(socket) {
            continue;
        }
        let (stream, peer) = match socket.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                // Out of descriptors or similar: say so, and let the peer retry.
                tracing::warn!("listener: cannot accept a connection: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let _ = stream.set_nonblocking(false);
        let live = match sessions.lock() {
            Ok(mut v) => {
                v.retain(|h| !h.is_finished());
                v.len()
            }
            Err(_) => usize::MAX,
        };
        if live >= shared.options.max_associations {
            shared
                .stats
                .associations_refused
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                peer = %peer,
                "association refused: {live} open, listen.max_associations is {}",
                shared.options.max_associations
            );
            refuse_busy(stream, shared.options.max_pdu, &refusers);
            continue;
        }
        next_id += 1;
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("assoc-{next_id}"))
            .spawn(move || {
                if catch_unwind(AssertUnwindSafe(|| association::serve(&s, stream, peer))).is_err()
                {
                    tracing::error!(
                        "internal error in the association with {peer} (caught panic); the \
                         association was dropped and the listener goes on"
                    );
                }
            });
        match spawned {
            Ok(h) => {
                if let Ok(mut v) = sessions.lock() {
                    v.push(h);
                }
            }
            Err(e) => tracing::warn!("cannot start a thread for {peer}: {e}"),
        }
    }
}

/// Answers a connection over the limit with A-ASSOCIATE-RJ (transient: try again later), on a
/// short-lived thread; closes it at once when [`MAX_REFUSERS`] are already busy.
fn refuse_busy(stream: TcpStream, max_pdu: u32, refusers: &Arc<AtomicUsize>) {
    if refusers.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSERS {
        refusers.fetch_sub(1, Ordering::Relaxed);
        return; // dropping the stream closes it
    }
    let count = refusers.clone();
    let spawned = std::thread::Builder::new()
        .name("refuse".into())
        .spawn(move || {
            let _ = reject(stream, max_pdu);
            count.fetch_sub(1, Ordering::Relaxed);
        });
    if spawned.is_err() {
        refusers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reads (and drops) the peer's A-ASSOCIATE-RQ, then sends the rejection.
fn reject(mut stream: TcpStream, max_pdu: u32) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REFUSE_TIMEOUT))?;
    stream.set_write_timeout(Some(REFUSE_TIMEOUT))?;
    let _ = stream.set_nodelay(true);
    let mut header = [0u8; 6];
    stream.read_exact(&mut header)?;
    let len = u32::from_be_bytes([header[2], header[3], header[4], header[5]]);
    if header[0] != 0x01 || len > max_pdu {
        return Ok(()); // not an association request: just close
    }
    std::io::copy(&mut (&mut stream).take(len as u64), &mut std::io::sink())?;
    let mut out = Vec::with_capacity(16);
    let rj = Pdu::AssociationRJ(AssociationRJ {
        result: AssociationRJResult::Transient,
        source: AssociationRJSource::ServiceProviderPresentation(
            AssociationRJServiceProviderPresentationReason::LocalLimitExceeded,
        ),
    });
    dicom_ul::write_pdu(&mut out, &rj).map_err(std::io::Error::other)?;
    stream.write_all(&out)?;
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::listen::scu::{send_files, Outgoing, Scu, ScuOptions};
    use std::sync::atomic::AtomicBool;

    /// A listener on a free loopback port with its spool in `dir`.
    fn start(
        dir: &std::path::Path,
        options: ListenOptions,
    ) -> (Listener, crate::source::live::FeedReceiver) {
        let (spool, _) = Spool::open(&dir.join("spool"), true).unwrap();
        let (feed, rx) = Feed::new(64, LiveStats::new());
        let options = ListenOptions {
            bind: "127.0.0.1:0".parse().unwrap(),
            ..options
        };
        (Listener::start(options, Arc::new(spool), feed).unwrap(), rx)
    }

    #[test]
    fn echo_store_and_a_spooled_copy_of_the_data_set() {
        let dir = crate::scratch_dir("listen-store");
        let series = dir.join("in");
        let opts = crate::synth::SynthOptions {
            size: 32,
            slices: 3,
            ..Default::default()
        };
        let files = crate::synth::write_series(&series, &opts).unwrap();
        let (listener, rx) = start(&dir, ListenOptions::default());
        let scu_opts = ScuOptions {
            addr: listener.local_addr().to_string(),
            ..Default::default()
        };
        let outgoing: Vec<Outgoing> = files.iter().map(|f| Outgoing::open(f).unwrap()).collect();
        let mut scu = Scu::connect(&scu_opts, &outgoing).unwrap();
        assert_eq!(scu.echo().unwrap(), 0);
        scu.release().unwrap();
        let report = send_files(&scu_opts, &outgoing, 2, None);
        assert_eq!(report.stored, 3, "{:?}", report.failed);
        let never = AtomicBool::new(false);
        for _ in 0..3 {
            let input = rx.next(&never).unwrap();
            let sent = outgoing
                .iter()
                .find(|o| input.rel == std::path::Path::new(&format!("{}.dcm", o.sop_instance)))
                .unwrap();
            // The spool file holds our file meta, then the data set byte for byte.
            let original = std::fs::read(&sent.path).unwrap();
            let spooled = std::fs::read(&input.path).unwrap();
            let data = &original[sent.data_offset as usize..];
            assert!(spooled.ends_with(data));
            assert_eq!(&spooled[128..132], b"DICM");
            assert_eq!(&*input.origin, "DICOMFLOW-SCU@127.0.0.1");
        }
        let s = listener.stats().snapshot();
        assert_eq!((s.arrivals, s.associations_total), (3, 3));
        listener.join();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wrong_called_ae_and_the_association_limit_are_refused() {
        let dir = crate::scratch_dir("listen-refuse");
        let (listener, _rx) = start(
            &dir,
            ListenOptions {
                max_associations: 1,
                ..Default::default()
            },
        );
        let addr = listener.local_addr().to_string();
        let wrong = ScuOptions {
            addr: addr.clone(),
            called_ae: "SOMEONE_ELSE".into(),
            ..Default::default()
        };
        let err = Scu::connect(&wrong, &[]).err().unwrap();
        assert!(err.to_string().contains("rejected"), "{err}");
        let ok = ScuOptions {
            addr,
            ..Default::default()
        };
        // The refused association's thread may take a moment to end and free its slot.
        let mut first = None;
        assert!(crate::source::live::wait_until(
            Duration::from_secs(5),
            || {
                first = Scu::connect(&ok, &[]).ok();
                first.is_some()
            }
        ));
        let first = first.unwrap();
        let err = Scu::connect(&ok, &[]).err().unwrap();
        assert!(err.to_string().contains("rejected"), "{err}");
        first.release().unwrap();
        // The slot is free again once the first association has ended.
        assert!(crate::source::live::wait_until(
            Duration::from_secs(5),
            || { Scu::connect(&ok, &[]).map(|s| s.release()).is_ok() }
        ));
        assert!(listener.stats().snapshot().associations_refused >= 2);
        listener.join();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
