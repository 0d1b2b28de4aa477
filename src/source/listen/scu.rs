//! The other side of the listener: a small Storage SCU on dicom-ul, used by `dicomflow bench
//! listen` (where DCMTK's `storescu` is not installed, and to pace sends at a fixed rate) and
//! by the tests. It sends DICOM files as they are (their own transfer syntax, no transcoding),
//! streaming each data set from disk into P-DATA PDUs.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dicom_object::meta::FileMetaTable;
use dicom_ul::association::client::ClientAssociationOptions;
use dicom_ul::pdu::{PDataValue, PDataValueType, PresentationContextResultReason};
use dicom_ul::{ClientAssociation, Pdu};

use super::dimse::{encode_request, response_status, C_ECHO_RQ, C_STORE_RQ};

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScuError {
    /// The association could not be established.
    #[error("cannot associate with {addr}: {reason}")]
    Associate { addr: String, reason: String },
    /// A file could not be read.
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// No accepted presentation context fits the file.
    #[error(
        "{path}: no accepted presentation context for SOP class {sop_class} in {transfer_syntax}"
    )]
    NoContext {
        path: PathBuf,
        sop_class: String,
        transfer_syntax: String,
    },
    /// The network failed or the peer broke the protocol.
    #[error("network: {0}")]
    Network(String),
}

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct ScuOptions {
    /// `host:port`.
    pub addr: String,
    pub called_ae: String,
    pub calling_ae: String,
    /// Largest PDU we receive.
    pub max_pdu: u32,
}

impl Default for ScuOptions {
    fn default() -> Self {
        ScuOptions {
            addr: "127.0.0.1:11112".into(),
            called_ae: "DICOMFLOW".into(),
            calling_ae: "DICOMFLOW-SCU".into(),
            max_pdu: 262_144,
        }
    }
}

/// A file ready to send: its SOP class, instance, syntax and where its data set starts.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub path: PathBuf,
    pub sop_class: String,
    pub sop_instance: String,
    pub transfer_syntax: String,
    /// Byte offset of the data set (after preamble and file meta).
    pub data_offset: u64,
}

impl Outgoing {
    /// Reads the file meta of a DICOM file (preamble + `DICM` + group 0002).
    pub fn open(path: &Path) -> Result<Outgoing, ScuError> {
        let err = |reason: String| ScuError::File {
            path: path.to_path_buf(),
            reason,
        };
        let mut f = BufReader::new(File::open(path).map_err(|e| err(e.to_string()))?);
        f.seek(SeekFrom::Start(128))
            .map_err(|e| err(e.to_string()))?;
        let meta = FileMetaTable::from_reader(&mut f)
            .map_err(|e| err(format!("no file meta information: {e}")))?;
        // Preamble, magic, then the group length element (12 bytes) and the group.
        let data_offset = 128 + 4 + 12 + meta.information_group_length as u64;
        let trim = |s: &str| s.trim_end_matches(['\0', ' ']).to_string();
        Ok(Outgoing {
            path: path.to_path_buf(),
            sop_class: trim(&meta.media_storage_sop_class_uid),
            sop_instance: trim(&meta.media_storage_sop_instance_uid),
            transfer_syntax: trim(meta.transfer_syntax()),
            data_offset,
        })
    }
}

/// One association to a Storage SCP.
pub struct Scu {
    assoc: ClientAssociation<TcpStream>,
    /// Accepted contexts: (id, abstract syntax, transfer syntax).
    contexts: Vec<(u8, String, String)>,
    next_id: u16,
}

fn net(e: impl std::fmt::Display) -> ScuError {
    ScuError::Network(e.to_string())
}

impl Scu {
    /// Associates, proposing Verification and one presentation context per (SOP class,
    /// transfer syntax) pair of `files`, each with exactly that syntax.
    pub fn connect(opts: &ScuOptions, files: &[Outgoing]) -> Result<Scu, ScuError> {
        let mut pairs: Vec<(String, String)> = files
            .iter()
            .map(|f| (f.sop_class.clone(), f.transfer_syntax.clone()))
            .collect();
        pairs.sort();
        pairs.dedup();
        let mut o = ClientAssociationOptions::new()
            .calling_ae_title(opts.calling_ae.clone())
            .called_ae_title(opts.called_ae.clone())
            .max_pdu_length(opts.max_pdu)
            .with_abstract_syntax(dicom_dictionary_std::uids::VERIFICATION.to_string());
        for (sop, ts) in pairs {
            o = o.with_presentation_context(sop, vec![ts]);
        }
        let mut assoc = o
            .establish_with(&opts.addr)
            .map_err(|e| ScuError::Associate {
                addr: opts.addr.clone(),
                reason: e.to_string(),
            })?;
        // Nagle would hold each command back until the previous data set is acknowledged.
        let _ = assoc.inner_stream().set_nodelay(true);
        let contexts = assoc
            .presentation_contexts()
            .iter()
            .filter(|pc| pc.reason == PresentationContextResultReason::Acceptance)
            .map(|pc| {
                (
                    pc.id,
                    pc.abstract_syntax.clone(),
                    pc.transfer_syntax.clone(),
                )
            })
            .collect();
        Ok(Scu {
            assoc,
            contexts,
            next_id: 1,
        })
    }

    fn message_id(&mut self) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    fn send_command(&mut self, context: u8, bytes: Vec<u8>) -> Result<(), ScuError> {
        self.assoc
            .send(&Pdu::PData {
                data: vec![PDataValue {
                    presentation_context_id: context,
                    value_type: PDataValueType::Command,
                    is_last: true,
                    data: bytes,
                }],
            })
            .map_err(net)
    }

    /// Waits for a response; its status and error comment.
    fn response(&mut self) -> Result<(u16, Option<String>), ScuError> {
        let mut command = Vec::new();
        loop {
            match self.assoc.receive().map_err(net)? {
                Pdu::PData { data } => {
                    for pdv in data {
                        if pdv.value_type != PDataValueType::Command {
                            return Err(net("data set in a response"));
                        }
                        command.extend_from_slice(&pdv.data);
                        if pdv.is_last {
                            return response_status(&command).map_err(net);
                        }
                    }
                }
                Pdu::AbortRQ { source } => {
                    return Err(net(format!("aborted by the peer ({source:?})")))
                }
                other => return Err(net(format!("unexpected {}", other.short_description()))),
            }
        }
    }

    /// C-ECHO; the status.
    pub fn echo(&mut self) -> Result<u16, ScuError> {
        let context = self
            .contexts
            .iter()
            .find(|c| c.1 == dicom_dictionary_std::uids::VERIFICATION)
            .map(|c| c.0)
            .ok_or_else(|| net("Verification was not accepted"))?;
        let id = self.message_id();
        let cmd = encode_request(
            C_ECHO_RQ,
            id,
            dicom_dictionary_std::uids::VERIFICATION,
            None,
        );
        self.send_command(context, cmd)?;
        Ok(self.response()?.0)
    }

    /// The accepted presentation context that carries `file` (its SOP class and syntax).
    pub fn context_for(&self, file: &Outgoing) -> Option<u8> {
        self.contexts
            .iter()
            .find(|c| c.1 == file.sop_class && c.2 == file.transfer_syntax)
            .map(|c| c.0)
    }

    /// The association's connection, for a peer that goes on by hand (the hostile-peer
    /// tests): the association object is dropped without a release.
    pub fn into_stream(mut self) -> Result<TcpStream, ScuError> {
        self.assoc.inner_stream().try_clone().map_err(net)
    }

    /// C-STORE of one file: its status and error comment.
    pub fn store(&mut self, file: &Outgoing) -> Result<(u16, Option<String>), ScuError> {
        let context = self.context_for(file).ok_or_else(|| ScuError::NoContext {
            path: file.path.clone(),
            sop_class: file.sop_class.clone(),
            transfer_syntax: file.transfer_syntax.clone(),
        })?;
        let mut f = File::open(&file.path).map_err(|e| ScuError::File {
            path: file.path.clone(),
            reason: e.to_string(),
        })?;
        f.seek(SeekFrom::Start(file.data_offset))
            .map_err(|e| ScuError::File {
                path: file.path.clone(),
                reason: e.to_string(),
            })?;
        let id = self.message_id();
        let cmd = encode_request(C_STORE_RQ, id, &file.sop_class, Some(&file.sop_instance));
        self.send_command(context, cmd)?;
        {
            let mut writer = self.assoc.send_pdata(context);
            std::io::copy(&mut f, &mut writer).map_err(net)?;
            writer.finish().map_err(net)?;
        }
        self.response()
    }

    /// Releases the association.
    pub fn release(self) -> Result<(), ScuError> {
        self.assoc.release().map_err(net)
    }
}

/// What a batch of sends did.
#[derive(Debug, Clone, Default)]
pub struct SendReport {
    /// Stores answered with success.
    pub stored: usize,
    /// Stores answered with a failure status, or that failed on the network.
    pub failed: Vec<(PathBuf, String)>,
    /// First command sent → last response received.
    pub elapsed: Duration,
    /// Command sent → response received, per successful store.
    pub round_trips: Vec<Duration>,
}

/// Sends `files` over `associations` concurrent associations; with `rate` (instances/s), the
/// i-th store starts no earlier than i / rate seconds after the first.
pub fn send_files(
    opts: &ScuOptions,
    files: &[Outgoing],
    associations: usize,
    rate: Option<f64>,
) -> SendReport {
    let next = AtomicUsize::new(0);
    let report = Mutex::new(SendReport::default());
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..associations.max(1) {
            s.spawn(|| {
                let mut scu = match Scu::connect(opts, files) {
                    Ok(scu) => scu,
                    Err(e) => {
                        if let Ok(mut r) = report.lock() {
                            r.failed.push((PathBuf::new(), e.to_string()));
                        }
                        return;
                    }
                };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(file) = files.get(i) else { break };
                    if let Some(rate) = rate.filter(|r| *r > 0.0) {
                        let due = start + Duration::from_secs_f64(i as f64 / rate);
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                    }
                    let t = Instant::now();
                    let result = scu.store(file);
                    let rtt = t.elapsed();
                    let Ok(mut r) = report.lock() else { break };
                    match result {
                        Ok((0, _)) => {
                            r.stored += 1;
                            r.round_trips.push(rtt);
                        }
                        Ok((status, comment)) => r.failed.push((
                            file.path.clone(),
                            format!("status {status:#06x}: {}", comment.unwrap_or_default()),
                        )),
                        Err(e) => {
                            r.failed.push((file.path.clone(), e.to_string()));
                            return;
                        }
                    }
                }
                let _ = scu.release();
            });
        }
    });
    let mut r = report.into_inner().unwrap_or_default();
    r.elapsed = start.elapsed();
    r
}
