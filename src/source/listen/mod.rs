//! `dicomflow listen`: a Storage SCP (C-STORE) and Verification SCP (C-ECHO) whose received
//! instances enter the same pipeline as `run`'s files. dicom-ul provides the Upper Layer
//! (association negotiation, PDU encoding and parsing, except that P-DATA-TF PDUs are read
//! here without its copies); this module provides the rest, one job per file:
//!
//! * [`dimse`]: command sets (parse requests, encode responses);
//! * [`wire`]: PDUs off the stream into one buffer, P-DATA-TF as borrowed PDVs;
//! * [`message`]: PDVs → messages (commands over several PDVs, data sets streamed);
//! * [`spool`]: received instances made durable before they are acknowledged;
//! * [`association`]: one association's protocol loop, limits and timeouts;
//! * [`server`]: the accept loop, the association limit, stopping;
//! * [`access`]: called AE title and allow-list; [`syntaxes`]: what is negotiated;
//! * [`scu`]: the other side (a Storage SCU), for benchmarks and tests.

pub mod access;
mod association;
pub mod dimse;
pub mod finish;
pub mod message;
pub mod scu;
pub mod server;
pub mod spool;
pub mod syntaxes;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub use access::AllowRule;
pub use server::Listener;
pub use spool::{Spool, SpoolEntry, SpoolError};

use crate::source::live::{Feed, LiveStats};

/// How the listener behaves (config `[listen]`, flags of `dicomflow listen`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ListenOptions {
    /// Address and port to listen on (default `0.0.0.0:11112`).
    pub bind: SocketAddr,
    /// Our AE title (default `DICOMFLOW`).
    pub ae_title: String,
    /// Refuse associations whose called AE title is not ours.
    pub check_called_ae: bool,
    /// When not empty, only these calling AE titles or addresses may associate.
    pub allow: Vec<AllowRule>,
    /// Largest PDU we receive (announced in the A-ASSOCIATE-AC), bytes.
    pub max_pdu: u32,
    /// Associations served at once; more are refused (A-ASSOCIATE-RJ, transient).
    pub max_associations: usize,
    /// An association with no message for this long is aborted.
    #[serde(serialize_with = "crate::source::live::serialize_secs")]
    pub idle_timeout: Duration,
    /// A peer that sends nothing for this long in the middle of a message (or during the
    /// negotiation) is dropped.
    #[serde(serialize_with = "crate::source::live::serialize_secs")]
    pub stall_timeout: Duration,
    /// Largest instance accepted (bytes of data set); larger ones are refused with
    /// "out of resources".
    pub max_instance_bytes: u64,
    /// The spool folder (received instances wait there until rendered); `None` = `.spool` in
    /// the output folder.
    pub spool: Option<PathBuf>,
    /// Keep received instances in this folder (as `<SOPInstanceUID>.dcm`) once rendered,
    /// instead of deleting them.
    pub keep_received: Option<PathBuf>,
    /// Arrivals the pipeline's input channel holds before receivers wait.
    pub queue: usize,
    /// Acknowledge an instance only once it is on stable storage (its data synced, the spool
    /// folder synced once for every instance placed meanwhile); false: once it is in the
    /// spool (it survives a crash of dicomflow, not a power loss), as DCMTK's `storescp` does.
    pub durable: bool,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            bind: SocketAddr::from(([0, 0, 0, 0], 11112)),
            ae_title: "DICOMFLOW".into(),
            check_called_ae: true,
            allow: Vec::new(),
            max_pdu: 262_144,
            max_associations: 16,
            idle_timeout: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(30),
            max_instance_bytes: 2048 << 20,
            spool: None,
            keep_received: None,
            queue: 1024,
            durable: true,
        }
    }
}

/// Why the listener cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// The port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The spool could not be opened.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// A thread could not be started.
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
}

/// What every association thread shares.
pub(crate) struct Shared {
    pub options: ListenOptions,
    pub spool: Arc<Spool>,
    pub feed: Arc<Feed>,
    pub stats: Arc<LiveStats>,
    pub stop: AtomicBool,
}
