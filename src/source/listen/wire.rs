//! Reading PDUs off an established association's stream into one reusable buffer.
//!
//! Why not dicom-ul's `receive`: its reader (0.10.1) appends BufReader's 8 KiB reads to a
//! `BytesMut`, copies each PDU out of it, then copies every PDV into a fresh `Vec`. A profile
//! of `dicomflow listen` put 18 % of its CPU samples there (BENCHMARKS.md, "Real-time ingest",
//! session 18), much of it page faults of the PDV-sized allocations. The listener only streams
//! a PDV's bytes to the spool, so here a P-DATA-TF PDU is read into a buffer the association
//! keeps and is handed out as borrowed PDV views: no allocation per PDU or PDV. Every other
//! PDU (release, abort, anything unexpected) is rare and goes through dicom-ul's own parser,
//! so its handling stays dicom-ul's.
//!
//! The reader is resumable: a read that times out (the stream's short read timeout lets the
//! association loop look at its stop flag and timeouts) keeps the bytes read so far, and the
//! next call goes on from there. The buffer never grows beyond the largest PDU accepted plus
//! its header; a PDU declaring more is refused from its header, as dicom-ul's strict mode
//! refuses it.

use std::io::{ErrorKind, Read};

use dicom_ul::pdu::{Pdu, ReadError};

/// PDU type (1 byte), reserved (1), length (4, big endian).
const HEADER: usize = 6;
/// PDU type of P-DATA-TF (PS3.8 §9.3.5).
const P_DATA_TF: u8 = 0x04;
/// PDV item: length (4), presentation context ID (1), message control header (1).
const ITEM_HEADER: usize = 6;
/// What the buffer starts at: commands and echoes are small, and an association that never
/// sends a large PDU should not hold the maximum.
const INITIAL: usize = 64 << 10;

/// Why no PDU came out of the stream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Nothing arrived within the stream's read timeout; the bytes read so far are kept.
    #[error("no bytes within the read timeout")]
    TimedOut,
    /// The peer closed the connection (at a PDU boundary or in the middle of one).
    #[error("connection closed by peer")]
    Closed,
    /// Reading from the stream failed.
    #[error("cannot read from the peer: {0}")]
    Read(#[source] std::io::Error),
    /// The PDU header declares more than the maximum PDU length we announced.
    #[error("incoming PDU was too large: length {length}, maximum is {max}")]
    TooLarge { length: u32, max: u32 },
    /// A PDV item of a P-DATA-TF PDU declares a length below its own header.
    #[error(
        "P-DATA-TF PDU: the presentation data value item at byte {at} has length {length} \
         (must be >= 2)"
    )]
    ItemTooShort { at: usize, length: u32 },
    /// A PDV item of a P-DATA-TF PDU runs past the end of the PDU (or its header does).
    #[error(
        "P-DATA-TF PDU: the presentation data value item at byte {at} needs {needs} bytes, \
         {left} left in the PDU"
    )]
    ItemPastEnd { at: usize, needs: u64, left: usize },
    /// dicom-ul found a PDU incomplete that its header says is whole (not expected: its
    /// reader and this one read the same header).
    #[error("PDU of type {kind:#04x}: dicom-ul found it incomplete")]
    Incomplete { kind: u8 },
    /// dicom-ul could not parse a PDU other than P-DATA-TF.
    #[error("invalid PDU")]
    Pdu(#[source] ReadError),
}

/// One presentation data value of a P-DATA-TF PDU, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pdv<'a> {
    /// Presentation context ID.
    pub context: u8,
    /// Message control header bit 0: a command fragment (else a data set fragment).
    pub is_command: bool,
    /// Message control header bit 1: the last fragment of the command or data set.
    pub is_last: bool,
    /// The fragment.
    pub data: &'a [u8],
}

/// The PDVs of a P-DATA-TF PDU, in order; checked whole before the first is handed out.
#[derive(Debug, Clone)]
pub struct Pdvs<'a> {
    rest: &'a [u8],
    /// Offset of `rest` in the PDU body, for error messages.
    at: usize,
}

impl<'a> Pdvs<'a> {
    /// The PDVs of a P-DATA-TF body, or why it is malformed (the checks of dicom-ul's reader:
    /// an item header needs 6 bytes, its length is at least 2 and stays inside the PDU).
    pub fn new(body: &'a [u8]) -> Result<Pdvs<'a>, WireError> {
        let pdvs = Pdvs { rest: body, at: 0 };
        let mut check = pdvs.clone();
        while check.split()?.is_some() {}
        Ok(pdvs)
    }

    /// Takes the next PDV off `rest`.
    fn split(&mut self) -> Result<Option<Pdv<'a>>, WireError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let past_end = |needs: u64| WireError::ItemPastEnd {
            at: self.at,
            needs,
            left: self.rest.len(),
        };
        let Some((&[l0, l1, l2, l3, context, control], after)) =
            self.rest.split_first_chunk::<ITEM_HEADER>()
        else {
            return Err(past_end(ITEM_HEADER as u64));
        };
        let length = u32::from_be_bytes([l0, l1, l2, l3]);
        if length < 2 {
            return Err(WireError::ItemTooShort {
                at: self.at,
                length,
            });
        }
        // The item length counts the context ID and the control header.
        let value = (length - 2) as usize;
        let Some((data, rest)) = after.split_at_checked(value) else {
            return Err(past_end(4 + u64::from(length)));
        };
        self.rest = rest;
        self.at += ITEM_HEADER + value;
        Ok(Some(Pdv {
            context,
            is_command: control & 0x01 != 0,
            is_last: control & 0x02 != 0,
            data,
        }))
    }
}

impl<'a> Iterator for Pdvs<'a> {
    type Item = Pdv<'a>;

    fn next(&mut self) -> Option<Pdv<'a>> {
        // Checked whole in `new`: no error is left to meet here.
        self.split().ok().flatten()
    }
}

/// A PDU received.
#[derive(Debug)]
pub enum Received<'a> {
    /// A P-DATA-TF PDU, its PDVs borrowed from the reader's buffer.
    PData(Pdvs<'a>),
    /// Any other PDU, parsed by dicom-ul.
    Other(Pdu),
}

/// Reads PDUs from a stream into one buffer of at most `max_pdu` + 6 bytes.
#[derive(Debug)]
pub struct PduReader {
    buf: Vec<u8>,
    /// `buf[start..end]` holds the bytes read and not yet handed out.
    start: usize,
    end: usize,
    max_pdu: u32,
}

impl PduReader {
    /// A reader for PDUs of at most `max_pdu` bytes (after the header) that starts with the
    /// bytes `pending`, read from the stream before it took over (dicom-ul's read buffer after
    /// the negotiation). More than a PDU's worth of them is kept too, so nothing is lost.
    pub fn new(max_pdu: u32, pending: &[u8]) -> PduReader {
        let size = INITIAL.min(Self::limit_of(max_pdu)).max(pending.len());
        let mut buf = vec![0; size];
        buf[..pending.len()].copy_from_slice(pending);
        PduReader {
            buf,
            start: 0,
            end: pending.len(),
            max_pdu,
        }
    }

    fn limit_of(max_pdu: u32) -> usize {
        HEADER + max_pdu as usize
    }

    /// The buffer's size: at most `max_pdu` + 6, or the bytes handed to `new` if more.
    pub fn buffer_len(&self) -> usize {
        self.buf.len()
    }

    /// The next PDU. On [`WireError::TimedOut`] call again: the PDU in progress is kept.
    /// After any other error the stream is out of step: end the association.
    pub fn next<R: Read + ?Sized>(&mut self, stream: &mut R) -> Result<Received<'_>, WireError> {
        self.fill(stream, HEADER)?;
        // In bounds: `fill` returned, so `buf[start..end]` holds at least the header.
        let header = &self.buf[self.start..self.start + HEADER];
        let kind = header[0];
        let length = u32::from_be_bytes([header[2], header[3], header[4], header[5]]);
        if length > self.max_pdu {
            return Err(WireError::TooLarge {
                length,
                max: self.max_pdu,
            });
        }
        let total = HEADER + length as usize;
        self.fill(stream, total)?;
        let at = self.start;
        self.start += total;
        if self.start == self.end {
            // Nothing buffered past this PDU: the next read starts at the front.
            self.start = 0;
            self.end = 0;
        }
        // In bounds: `fill` returned, so the buffer holds the whole PDU from `at`.
        let pdu = &self.buf[at..at + total];
        if kind == P_DATA_TF {
            return Pdvs::new(&pdu[HEADER..]).map(Received::PData);
        }
        match dicom_ul::pdu::read_pdu(pdu, self.max_pdu, true) {
            Ok(Some(pdu)) => Ok(Received::Other(pdu)),
            Ok(None) => Err(WireError::Incomplete { kind }),
            Err(e) => Err(WireError::Pdu(e)),
        }
    }

    /// Reads until `buf[start..]` holds `n` bytes (`n` <= max PDU + 6), making room first.
    fn fill<R: Read + ?Sized>(&mut self, stream: &mut R, n: usize) -> Result<(), WireError> {
        if self.end - self.start >= n {
            return Ok(());
        }
        if self.start + n > self.buf.len() {
            // Move the partial PDU to the front; grow to the limit if it still does not fit.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if n > self.buf.len() {
                self.buf.resize(Self::limit_of(self.max_pdu).max(n), 0);
            }
        }
        while self.end - self.start < n {
            let room = self.buf.get_mut(self.end..).unwrap_or_default();
            match stream.read(room) {
                Ok(0) => return Err(WireError::Closed),
                // A reader claiming more than it was given is not believed past the buffer.
                Ok(k) => self.end = (self.end + k).min(self.buf.len()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(WireError::TimedOut)
                }
                Err(e) => return Err(WireError::Read(e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::io;

    use dicom_ul::pdu::{AbortRQServiceProviderReason, AbortRQSource, PDataValue, PDataValueType};

    use super::*;

    const MAX: u32 = 4096;

    /// A stream handing out the given pieces of `bytes` one per read, with a read timeout
    /// (alternately `WouldBlock` and `TimedOut`) before each piece.
    struct Trickle {
        pieces: VecDeque<Vec<u8>>,
        stall: bool,
        stalls: usize,
    }

    impl Trickle {
        fn new(bytes: &[u8], cuts: &[usize]) -> Trickle {
            let mut pieces = VecDeque::new();
            let mut from = 0;
            for &cut in cuts.iter().chain([&bytes.len()]) {
                // An empty read would be the end of the stream.
                if cut > from {
                    pieces.push_back(bytes[from..cut].to_vec());
                }
                from = cut;
            }
            Trickle {
                pieces,
                stall: true,
                stalls: 0,
            }
        }

        fn bytewise(bytes: &[u8]) -> Trickle {
            Trickle::new(bytes, &(1..bytes.len()).collect::<Vec<_>>())
        }
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.stall = !self.stall;
            if !self.stall {
                self.stalls += 1;
                let kind = if self.stalls.is_multiple_of(2) {
                    ErrorKind::WouldBlock
                } else {
                    ErrorKind::TimedOut
                };
                return Err(io::Error::new(kind, "read timeout"));
            }
            let Some(piece) = self.pieces.front_mut() else {
                return Ok(0);
            };
            let n = piece.len().min(out.len());
            out[..n].copy_from_slice(&piece[..n]);
            piece.drain(..n);
            if piece.is_empty() {
                self.pieces.pop_front();
            }
            Ok(n)
        }
    }

    fn pdv(context: u8, command: bool, last: bool, data: &[u8]) -> PDataValue {
        PDataValue {
            presentation_context_id: context,
            value_type: if command {
                PDataValueType::Command
            } else {
                PDataValueType::Data
            },
            is_last: last,
            data: data.to_vec(),
        }
    }

    fn encode(pdus: &[Pdu]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for pdu in pdus {
            dicom_ul::write_pdu(&mut bytes, pdu).unwrap();
        }
        bytes
    }

    /// What the reader made of one PDU, owned (P-DATA-TF as dicom-ul's type, to compare).
    fn owned(received: Received<'_>) -> Pdu {
        match received {
            Received::PData(pdvs) => Pdu::PData {
                data: pdvs
                    .map(|p| pdv(p.context, p.is_command, p.is_last, p.data))
                    .collect(),
            },
            Received::Other(pdu) => pdu,
        }
    }

    /// Every PDU of the stream, retrying after timeouts, until it ends (or fails).
    fn read_all(reader: &mut PduReader, stream: &mut impl Read) -> (Vec<Pdu>, WireError) {
        let mut got = Vec::new();
        loop {
            match reader.next(stream) {
                Ok(r) => got.push(owned(r)),
                Err(WireError::TimedOut) => {}
                Err(e) => return (got, e),
            }
        }
    }

    /// A command in two PDVs of one PDU, a data set over two PDUs (several PDVs in the first),
    /// an empty P-DATA-TF, a release request and an abort.
    fn conversation() -> Vec<Pdu> {
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        vec![
            Pdu::PData {
                data: vec![pdv(1, true, false, b"abcd"), pdv(1, true, true, b"ef")],
            },
            Pdu::PData {
                data: vec![
                    pdv(1, false, false, &data[..1000]),
                    pdv(1, false, false, &[]),
                    pdv(3, false, false, &data[1000..2000]),
                ],
            },
            Pdu::PData {
                data: vec![pdv(1, false, true, &data[2000..])],
            },
            Pdu::PData { data: vec![] },
            Pdu::ReleaseRQ,
            Pdu::AbortRQ {
                source: AbortRQSource::ServiceProvider(AbortRQServiceProviderReason::UnexpectedPdu),
            },
        ]
    }

    #[test]
    fn pdus_cut_at_every_byte_boundary_come_out_whole() {
        let pdus = conversation();
        let bytes = encode(&pdus);
        for cut in 0..=bytes.len() {
            let mut reader = PduReader::new(MAX, &[]);
            let (got, end) = read_all(&mut reader, &mut Trickle::new(&bytes, &[cut]));
            assert!(
                got == pdus,
                "cut at {cut}: {} of {} PDUs",
                got.len(),
                pdus.len()
            );
            assert!(matches!(end, WireError::Closed), "cut at {cut}: {end}");
        }
        // One byte per read, a timeout before each.
        let mut reader = PduReader::new(MAX, &[]);
        let (got, end) = read_all(&mut reader, &mut Trickle::bytewise(&bytes));
        assert_eq!(got, pdus);
        assert!(matches!(end, WireError::Closed));
        assert!(reader.buffer_len() <= MAX as usize + HEADER);
    }

    #[test]
    fn bytes_read_before_the_takeover_come_first() {
        let pdus = conversation();
        let bytes = encode(&pdus);
        for taken in [0, 1, 5, 6, 20, bytes.len() / 2, bytes.len()] {
            let (ahead, rest) = bytes.split_at(taken);
            let mut reader = PduReader::new(MAX, ahead);
            let (got, _) = read_all(&mut reader, &mut Trickle::bytewise(rest));
            assert!(got == pdus, "{taken} bytes read ahead: {} PDUs", got.len());
        }
    }

    #[test]
    fn a_pdu_of_the_maximum_length_fits_and_the_buffer_stays_bounded() {
        let value = vec![9u8; MAX as usize - ITEM_HEADER];
        let pdus = vec![
            Pdu::PData {
                data: vec![pdv(1, false, false, b"x")],
            },
            Pdu::PData {
                data: vec![pdv(1, false, true, &value)],
            },
            Pdu::ReleaseRQ,
        ];
        let bytes = encode(&pdus);
        let mut reader = PduReader::new(MAX, &[]);
        let (got, _) = read_all(&mut reader, &mut Trickle::new(&bytes, &[3, 20, 3000]));
        assert_eq!(got, pdus);
        assert_eq!(reader.buffer_len(), MAX as usize + HEADER);
    }

    #[test]
    fn a_pdu_longer_than_the_maximum_is_refused_from_its_header() {
        for length in [MAX + 1, u32::MAX] {
            let mut bytes = vec![P_DATA_TF, 0];
            bytes.extend_from_slice(&length.to_be_bytes());
            let mut reader = PduReader::new(MAX, &[]);
            let (got, end) = read_all(&mut reader, &mut Trickle::bytewise(&bytes));
            assert!(got.is_empty());
            assert!(
                matches!(end, WireError::TooLarge { length: l, max: MAX } if l == length),
                "{end}"
            );
            assert!(end.to_string().contains("too large"));
            assert!(reader.buffer_len() <= MAX as usize + HEADER);
        }
    }

    /// A P-DATA-TF PDU around `body`.
    fn p_data(body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![P_DATA_TF, 0];
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn malformed_pdv_items_are_refused_with_a_reason() {
        let good = [0, 0, 0, 4, 1, 3, b'a', b'b'];
        let cases: [(Vec<u8>, &str); 4] = [
            // Item length 1: below the context ID and control header it counts.
            ([&good[..], &[0, 0, 0, 1, 1, 3]].concat(), "must be >= 2"),
            // Item running past the end of the PDU.
            (
                [&good[..], &[0, 0, 0, 9, 1, 3, 1, 2]].concat(),
                "needs 13 bytes, 8 left",
            ),
            ([0, 0, 0, 0xff, 1, 3].to_vec(), "needs 259 bytes, 6 left"),
            // A tail too short for an item header.
            ([&good[..], &[0, 0, 0]].concat(), "needs 6 bytes, 3 left"),
        ];
        for (body, why) in cases {
            let bytes = p_data(&body);
            // dicom-ul refuses the same PDUs.
            assert!(dicom_ul::read_pdu(&bytes[..], MAX, true).is_err());
            let mut reader = PduReader::new(MAX, &[]);
            let (got, end) = read_all(&mut reader, &mut Trickle::bytewise(&bytes));
            assert!(got.is_empty());
            assert!(end.to_string().contains(why), "{end}, expected {why}");
        }
    }

    #[test]
    fn other_pdus_are_parsed_by_dicom_ul() {
        // An unknown PDU type is dicom-ul's `Unknown`; a release request of 2 bytes its error.
        let unknown = [0x09, 0, 0, 0, 0, 4, 1, 2, 3, 4];
        let mut reader = PduReader::new(MAX, &[]);
        let (got, _) = read_all(&mut reader, &mut Trickle::bytewise(&unknown));
        assert!(
            matches!(&got[..], [Pdu::Unknown { pdu_type: 9, data }] if data == &[1, 2, 3, 4]),
            "{got:?}"
        );
        let short_release = [0x05, 0, 0, 0, 0, 2, 0, 0];
        let mut reader = PduReader::new(MAX, &[]);
        let (got, end) = read_all(&mut reader, &mut Trickle::bytewise(&short_release));
        assert!(got.is_empty());
        assert!(matches!(end, WireError::Pdu(_)), "{end}");
    }

    #[test]
    fn a_connection_closed_in_the_middle_of_a_pdu_ends_it() {
        let bytes = encode(&conversation());
        for len in [1, 5, 6, 12, 20] {
            let mut reader = PduReader::new(MAX, &[]);
            let (got, end) = read_all(&mut reader, &mut Trickle::bytewise(&bytes[..len]));
            assert!(got.is_empty());
            assert!(matches!(end, WireError::Closed), "{end}");
        }
    }

    #[test]
    fn other_read_errors_are_reported() {
        struct Reset;
        impl Read for Reset {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::new(ErrorKind::ConnectionReset, "reset by peer"))
            }
        }
        let mut reader = PduReader::new(MAX, &[]);
        let end = reader.next(&mut Reset).unwrap_err();
        assert!(matches!(end, WireError::Read(_)), "{end}");
        assert!(end.to_string().contains("reset by peer"));
    }
}
