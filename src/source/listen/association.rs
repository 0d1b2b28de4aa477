//! One association, on its own thread: negotiation (dicom-ul), then messages until the peer
//! releases, aborts, disconnects, breaks the protocol or goes quiet. A C-STORE's data set is
//! streamed PDV by PDV into the spool; the success response goes out only once the instance
//! is durable and handed to the pipeline. Any instance not acknowledged with success is
//! dropped, and the sender knows it (a failure status, or no response at all).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dicom_ul::association::server::AccessControl;
use dicom_ul::association::{Association, SyncAssociation};
use dicom_ul::pdu::{
    AbortRQSource, AssociationRJServiceUserReason, PDataValue, PDataValueType,
    PresentationContextResultReason, UserIdentity,
};
use dicom_ul::{Pdu, ServerAssociation, ServerAssociationOptions};

use super::access::Access;
use super::dimse::{self, status, Request, Response, C_ECHO_RQ, C_STORE_RQ, RESPONSE_BIT};
use super::message::{MessageReader, Step};
use super::spool::{Incoming, InstanceMeta};
use super::syntaxes::{is_image_storage, ABSTRACT_SYNTAXES, TRANSFER_SYNTAXES};
use super::wire::{PduReader, Pdv, Received, WireError};
use super::Shared;
use crate::decode::error_chain;
use crate::source::live::LiveInput;

/// How often a blocked read wakes to check the stop flag and the timeouts.
const TICK: Duration = Duration::from_millis(250);
/// Largest command set accepted (real ones are 100–300 bytes).
const MAX_COMMAND: usize = 64 << 10;

/// Records why the access control refused, for the log line (dicom-ul only keeps the code).
struct Recording<'a> {
    access: &'a Access<'a>,
    why: &'a RefCell<Option<String>>,
}

impl AccessControl for Recording<'_> {
    fn check_access(
        &self,
        this_ae_title: &str,
        calling_ae_title: &str,
        called_ae_title: &str,
        _user_identity: Option<&UserIdentity>,
    ) -> Result<(), AssociationRJServiceUserReason> {
        match self
            .access
            .refusal(this_ae_title, calling_ae_title, called_ae_title)
        {
            Some((reason, why)) => {
                *self.why.borrow_mut() = Some(why);
                Err(reason)
            }
            None => Ok(()),
        }
    }
}

/// Keeps the open-association count right however the thread leaves.
struct OpenGuard<'a>(&'a Shared);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0
            .stats
            .associations_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The status and reason for an instance the spool could not take: a full disk is "out of
/// resources", anything else "cannot understand" (the sender should not retry as is).
fn spool_refusal(e: &super::SpoolError) -> (u16, String) {
    let status = if e.is_out_of_space() {
        status::OUT_OF_RESOURCES
    } else {
        status::CANNOT_UNDERSTAND
    };
    (status, format!("cannot spool the instance: {e}"))
}

/// An accepted presentation context.
struct Context {
    abstract_syntax: String,
    transfer_syntax: String,
}

/// A response waiting for the end of the data set it answers.
struct Reply {
    context: u8,
    request_field: u16,
    sop_class: Option<String>,
    message_id: u16,
    sop_instance: Option<String>,
    status: u16,
    comment: Option<String>,
}

impl Reply {
    /// The response to a C-STORE-RQ.
    fn store(
        context: u8,
        message_id: u16,
        sop_class: String,
        sop_instance: String,
        status: u16,
        comment: Option<String>,
    ) -> Reply {
        Reply {
            context,
            request_field: C_STORE_RQ,
            sop_class: Some(sop_class),
            message_id,
            sop_instance: Some(sop_instance),
            status,
            comment,
        }
    }
}

/// The message in progress.
enum Pending {
    None,
    /// A C-STORE whose data set goes to the spool.
    Storing {
        incoming: Incoming,
        context: u8,
        message_id: u16,
        sop_class: String,
        sop_instance: String,
    },
    /// A data set read and dropped; `reply` goes out at its end.
    Discarding(Reply),
}

/// How the association ended, for the log and the abort decision.
enum End {
    /// The peer released (and got its A-RELEASE-RP).
    Released,
    /// The peer aborted.
    PeerAborted(String),
    /// The peer closed the connection.
    Closed,
    /// We abort: protocol error, timeout.
    Abort(String),
    /// We abort because dicomflow is stopping (after answering the message in progress).
    Stopping,
}

/// Serves one connection until it ends. Never panics on peer input; the caller catches
/// panics anyway.
pub(crate) fn serve(shared: &Shared, stream: TcpStream, peer: SocketAddr) {
    let opts = &shared.options;
    // Nagle would hold each small response back ~40 ms waiting for the peer's ACK.
    let _ = stream.set_nodelay(true);
    let access = Access {
        check_called: opts.check_called_ae,
        allow: &opts.allow,
        peer: peer.ip(),
    };
    let why = RefCell::new(None);
    let mut server = ServerAssociationOptions::new()
        .ae_access_control(Recording {
            access: &access,
            why: &why,
        })
        .ae_title(opts.ae_title.as_str())
        .max_pdu_length(opts.max_pdu)
        .read_timeout(opts.stall_timeout)
        .write_timeout(opts.stall_timeout);
    for a in ABSTRACT_SYNTAXES {
        server = server.with_abstract_syntax(*a);
    }
    for t in TRANSFER_SYNTAXES {
        server = server.with_transfer_syntax(*t);
    }
    let mut assoc = match server.establish(stream) {
        Ok(a) => a,
        Err(e) => {
            shared
                .stats
                .associations_refused
                .fetch_add(1, Ordering::Relaxed);
            let reason = why.borrow_mut().take().unwrap_or_else(|| error_chain(&e));
            tracing::warn!(peer = %peer, "association refused: {reason}");
            return;
        }
    };
    shared
        .stats
        .associations_open
        .fetch_add(1, Ordering::Relaxed);
    shared
        .stats
        .associations_total
        .fetch_add(1, Ordering::Relaxed);
    let _open = OpenGuard(shared);
    let calling = assoc.peer_ae_title().trim().to_string();
    let origin: Arc<str> = Arc::from(format!("{calling}@{}", peer.ip()));
    let contexts: HashMap<u8, Context> = assoc
        .presentation_contexts()
        .iter()
        .filter(|pc| pc.reason == PresentationContextResultReason::Acceptance)
        .map(|pc| {
            (
                pc.id,
                Context {
                    abstract_syntax: pc.abstract_syntax.clone(),
                    transfer_syntax: pc.transfer_syntax.clone(),
                },
            )
        })
        .collect();
    tracing::info!(
        "association from {origin}: {} of {} presentation context(s) accepted, max PDU {} (ours {})",
        contexts.len(),
        assoc.presentation_contexts().len(),
        assoc.requestor_max_pdu_length(),
        assoc.acceptor_max_pdu_length()
    );
    let mut session = Session {
        shared,
        origin,
        contexts,
        reader: MessageReader::new(MAX_COMMAND),
        pending: Pending::None,
    };
    let end = session.run(&mut assoc);
    let in_progress = !matches!(session.pending, Pending::None);
    if let Pending::Storing { incoming, .. } =
        std::mem::replace(&mut session.pending, Pending::None)
    {
        incoming.abandon();
    }
    let origin = &session.origin;
    match end {
        End::Released => tracing::info!("association from {origin} released"),
        End::PeerAborted(how) => {
            tracing::warn!("association from {origin} aborted by the peer ({how})")
        }
        End::Closed if in_progress => tracing::warn!(
            "{origin} disconnected in the middle of a message; the partial instance was \
             dropped (never acknowledged)"
        ),
        End::Closed => tracing::info!("{origin} closed the connection without a release"),
        End::Stopping => {
            tracing::info!("dicomflow is stopping: aborting the association from {origin}");
            let _ = assoc.abort();
        }
        End::Abort(reason) => {
            shared
                .stats
                .associations_refused
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!("aborting the association from {origin}: {reason}");
            let _ = assoc.abort();
        }
    }
}

/// The state of one established association.
struct Session<'a> {
    shared: &'a Shared,
    origin: Arc<str>,
    contexts: HashMap<u8, Context>,
    reader: MessageReader,
    pending: Pending,
}

impl Session<'_> {
    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::Relaxed)
    }

    /// Receives and answers messages until the association ends.
    fn run(&mut self, assoc: &mut ServerAssociation<TcpStream>) -> End {
        let opts = &self.shared.options;
        // From here on PDUs are read by `wire`; it takes over what dicom-ul read past the
        // association request.
        let (stream, read_ahead) = assoc.get_mut();
        // Short reads, so that the stop flag and the timeouts are looked at while waiting.
        if let Err(e) = stream.set_read_timeout(Some(TICK)) {
            return End::Abort(format!("cannot set a read timeout: {e}"));
        }
        let mut wire = PduReader::new(opts.max_pdu, read_ahead);
        read_ahead.clear();
        let mut last = Instant::now();
        loop {
            let pdu = match wire.next(assoc.inner_stream()) {
                Ok(pdu) => pdu,
                Err(WireError::TimedOut) => {
                    let idle = self.reader.is_idle() && matches!(self.pending, Pending::None);
                    if idle && self.stopping() {
                        return End::Stopping;
                    }
                    let (limit, what) = if idle {
                        (opts.idle_timeout, "idle")
                    } else {
                        (opts.stall_timeout, "stalled in the middle of a message")
                    };
                    if last.elapsed() >= limit {
                        return End::Abort(format!("{what} for {} s", limit.as_secs()));
                    }
                    continue;
                }
                Err(WireError::Closed) => return End::Closed,
                Err(e) => return End::Abort(error_chain(&e)),
            };
            last = Instant::now();
            match pdu {
                Received::PData(pdvs) => {
                    for pdv in pdvs {
                        if let Err(end) = self.pdv(assoc, pdv) {
                            return end;
                        }
                    }
                }
                Received::Other(Pdu::ReleaseRQ) => {
                    if !self.reader.is_idle() {
                        tracing::warn!(
                            "{} released in the middle of a message; its partial instance was \
                             dropped (never acknowledged)",
                            self.origin
                        );
                    }
                    let _ = assoc.send(&Pdu::ReleaseRP);
                    return End::Released;
                }
                Received::Other(Pdu::AbortRQ { source }) => {
                    return End::PeerAborted(match source {
                        AbortRQSource::ServiceUser => "service user".into(),
                        AbortRQSource::ServiceProvider(r) => format!("service provider: {r}"),
                        AbortRQSource::Reserved => "reserved source".into(),
                    })
                }
                Received::Other(other) => {
                    return End::Abort(format!("unexpected {}", other.short_description()));
                }
            }
        }
    }

    /// Takes one PDV; `Err` ends the association.
    fn pdv(&mut self, assoc: &mut ServerAssociation<TcpStream>, pdv: Pdv<'_>) -> Result<(), End> {
        if !self.contexts.contains_key(&pdv.context) {
            return Err(End::Abort(format!(
                "{} on presentation context {}, which was not accepted",
                if pdv.is_command { "command" } else { "data" },
                pdv.context
            )));
        }
        let step = self
            .reader
            .push(pdv)
            .map_err(|e| End::Abort(e.to_string()))?;
        match step {
            Step::Pending => Ok(()),
            Step::Command { context, command } => self.command(assoc, context, command),
            Step::Data { bytes, last } => self.data(assoc, bytes, last),
        }
    }

    fn command(
        &mut self,
        assoc: &mut ServerAssociation<TcpStream>,
        context: u8,
        command: dimse::CommandSet,
    ) -> Result<(), End> {
        let field = command.field;
        let has_data_set = command.has_data_set;
        let message_id = command.message_id.unwrap_or(0);
        let sop_class = command.sop_class.clone();
        let refuse = |status: u16, comment: String| Reply {
            context,
            request_field: field,
            sop_class: sop_class.clone(),
            message_id,
            sop_instance: command.sop_instance.clone(),
            status,
            comment: Some(comment),
        };
        let reply = match command.clone().request() {
            Err(e) => refuse(status::CANNOT_UNDERSTAND, e.to_string()),
            Ok(Request::Echo {
                message_id,
                sop_class,
            }) => Reply {
                context,
                request_field: C_ECHO_RQ,
                sop_class: Some(sop_class),
                message_id,
                sop_instance: None,
                status: status::SUCCESS,
                comment: None,
            },
            Ok(Request::Store {
                message_id,
                sop_class,
                sop_instance,
            }) => match self.begin_store(context, &sop_class, &sop_instance) {
                Ok(incoming) => {
                    self.pending = Pending::Storing {
                        incoming,
                        context,
                        message_id,
                        sop_class,
                        sop_instance,
                    };
                    return Ok(());
                }
                Err((status, comment)) => refuse(status, comment),
            },
            Ok(Request::Other { field, .. }) if field & RESPONSE_BIT != 0 => {
                // We send no requests, so no response is expected: ignore it.
                tracing::warn!(
                    "{} sent an unexpected response (command field {field:#06x})",
                    self.origin
                );
                return Ok(());
            }
            Ok(Request::Other { field: 0x0FFF, .. }) => return Ok(()), // C-CANCEL: nothing to cancel
            Ok(Request::Other { field, .. }) => refuse(
                status::UNRECOGNIZED_OPERATION,
                format!("command {field:#06x} is not served here (C-STORE and C-ECHO only)"),
            ),
        };
        if reply.status != status::SUCCESS {
            self.shared.stats.refused_from(&self.origin);
            tracing::warn!(
                "refusing a request from {} with status {:#06x}: {}",
                self.origin,
                reply.status,
                reply.comment.as_deref().unwrap_or("")
            );
        }
        if has_data_set {
            self.pending = Pending::Discarding(reply);
            Ok(())
        } else {
            self.respond(assoc, &reply)
        }
    }

    /// Opens the spool file for a C-STORE, or says why the instance cannot be taken.
    fn begin_store(
        &self,
        context: u8,
        sop_class: &str,
        sop_instance: &str,
    ) -> Result<Incoming, (u16, String)> {
        if self.stopping() {
            return Err((status::OUT_OF_RESOURCES, "dicomflow is stopping".into()));
        }
        let Some(pc) = self.contexts.get(&context) else {
            return Err((
                status::CANNOT_UNDERSTAND,
                "presentation context not accepted".into(),
            ));
        };
        if !is_image_storage(sop_class) {
            return Err((
                status::SOP_CLASS_NOT_SUPPORTED,
                format!("SOP class {sop_class} is not an image storage class"),
            ));
        }
        if pc.abstract_syntax != sop_class {
            return Err((
                status::SOP_CLASS_NOT_SUPPORTED,
                format!(
                    "SOP class {sop_class} sent on the presentation context of {}",
                    pc.abstract_syntax
                ),
            ));
        }
        let opts = &self.shared.options;
        self.shared
            .spool
            .begin(&InstanceMeta {
                sop_class,
                sop_instance,
                transfer_syntax: &pc.transfer_syntax,
                sender: self.origin.split('@').next().unwrap_or(""),
                receiver: &opts.ae_title,
            })
            .map_err(|e| spool_refusal(&e))
    }

    fn data(
        &mut self,
        assoc: &mut ServerAssociation<TcpStream>,
        bytes: &[u8],
        last: bool,
    ) -> Result<(), End> {
        let limit = self.shared.options.max_instance_bytes;
        match &mut self.pending {
            Pending::Storing { incoming, .. } => {
                let refusal = if incoming.data_bytes() + bytes.len() as u64 > limit {
                    Some((
                        status::OUT_OF_RESOURCES,
                        format!(
                            "instance larger than listen.max_instance_mib ({} MiB)",
                            limit >> 20
                        ),
                    ))
                } else {
                    incoming.write(bytes).err().map(|e| spool_refusal(&e))
                };
                if let Some((status, comment)) = refusal {
                    let Pending::Storing {
                        incoming,
                        context,
                        message_id,
                        sop_class,
                        sop_instance,
                    } = std::mem::replace(&mut self.pending, Pending::None)
                    else {
                        unreachable!("matched Storing above")
                    };
                    incoming.abandon();
                    self.shared.stats.refused_from(&self.origin);
                    tracing::warn!(
                        "refusing an instance from {} with status {status:#06x}: {comment}",
                        self.origin
                    );
                    self.pending = Pending::Discarding(Reply::store(
                        context,
                        message_id,
                        sop_class,
                        sop_instance,
                        status,
                        Some(comment),
                    ));
                }
                if last {
                    return self.end_of_data(assoc);
                }
                Ok(())
            }
            Pending::Discarding(_) => {
                if last {
                    return self.end_of_data(assoc);
                }
                Ok(())
            }
            // The reader hands out data only after a command announcing it, and every such
            // command leaves a pending state.
            Pending::None => Err(End::Abort("data set without a pending command".into())),
        }
    }

    /// The last fragment of a data set arrived: finish the store or send the refusal.
    fn end_of_data(&mut self, assoc: &mut ServerAssociation<TcpStream>) -> Result<(), End> {
        let arrived = Instant::now();
        let reply = match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Discarding(reply) => reply,
            Pending::Storing {
                incoming,
                context,
                message_id,
                sop_class,
                sop_instance,
            } => {
                let (status, comment) = self.commit(incoming, arrived);
                Reply::store(
                    context,
                    message_id,
                    sop_class,
                    sop_instance,
                    status,
                    comment,
                )
            }
            Pending::None => return Ok(()),
        };
        self.respond(assoc, &reply)?;
        if self.stopping() {
            return Err(End::Stopping);
        }
        Ok(())
    }

    /// Checks, places, hands on and makes durable a received instance; the status to answer.
    /// The pipeline gets it as soon as it is placed, so rendering overlaps the sync; the
    /// sender hears of success only once the sync is done.
    fn commit(&self, mut incoming: Incoming, arrived: Instant) -> (u16, Option<String>) {
        let shared = self.shared;
        let checked = incoming.seal().map_err(|e| e.to_string()).and_then(|()| {
            // An instance is at most max_instance_bytes: so is any frame of it.
            let limits = crate::decode::DecodeLimits {
                max_frame_bytes: shared.options.max_instance_bytes,
                ..Default::default()
            };
            crate::decode::check_received(incoming.path(), limits)
        });
        if let Err(reason) = checked {
            incoming.abandon();
            shared.stats.refused_from(&self.origin);
            tracing::warn!("refusing an instance from {}: {reason}", self.origin);
            return (
                status::CANNOT_UNDERSTAND,
                Some(format!("cannot read the data set: {reason}")),
            );
        }
        let refuse = |e: &dyn std::fmt::Display| {
            shared.stats.refused_from(&self.origin);
            tracing::warn!("refusing an instance from {}: {e}", self.origin);
            (
                status::OUT_OF_RESOURCES,
                Some(format!("cannot make the instance durable: {e}")),
            )
        };
        let (entry, placed) = match shared.spool.place(incoming) {
            Ok(placed) => placed,
            Err(e) => return refuse(&e),
        };
        let bytes = entry.bytes;
        tracing::debug!(
            "received {} from {} ({bytes} bytes)",
            entry.rel.display(),
            self.origin
        );
        let input = LiveInput {
            path: entry.path,
            rel: entry.rel,
            arrived,
            origin: self.origin.clone(),
            skip_existing: false,
        };
        // In the spool now: if the pipeline is gone (the run is ending), the next start
        // renders it from there.
        if shared.feed.submit(input).is_err() {
            tracing::info!("the pipeline is closing; the instance waits in the spool");
        }
        if let Err(e) = shared.spool.make_durable(placed) {
            // Not acknowledged: the sender sends it again (rendered again, same outputs).
            return refuse(&e);
        }
        shared.stats.arrived(&self.origin, bytes);
        (status::SUCCESS, None)
    }

    fn respond(&self, assoc: &mut ServerAssociation<TcpStream>, reply: &Reply) -> Result<(), End> {
        let bytes = dimse::encode_response(&Response {
            request_field: reply.request_field,
            sop_class: reply.sop_class.as_deref(),
            message_id: reply.message_id,
            status: reply.status,
            sop_instance: reply.sop_instance.as_deref(),
            error_comment: reply.comment.as_deref(),
        });
        assoc
            .send(&Pdu::PData {
                data: vec![PDataValue {
                    presentation_context_id: reply.context,
                    value_type: PDataValueType::Command,
                    is_last: true,
                    data: bytes,
                }],
            })
            .map_err(|e| End::Abort(format!("cannot send the response: {}", error_chain(&e))))
    }
}
