//! The listener's PDU reader (`source::listen::wire`) on arbitrary bytes, as they would come
//! from a peer once an association is established, handed over in pieces with read timeouts
//! in between (the first input byte picks the piece sizes). Each PDU (or error) it yields is
//! compared with what dicom-ul's own reader makes of the same bytes: the listener's reading
//! must accept and refuse exactly what dicom-ul's did. A panic, a disagreement, or a buffer
//! past the PDU limit is a finding.

#![no_main]

use std::io::{self, Read};

use libfuzzer_sys::fuzz_target;

use dicom_ul::pdu::{PDataValue, PDataValueType, Pdu};
use dicomflow::source::listen::wire::{PduReader, Received, WireError};

/// A small limit, so that inputs reach it (as `listen.max_pdu`, after the 6-byte header).
const MAX_PDU: u32 = 4096;

/// Hands out `bytes` in pieces of pseudo-random size, a read timeout before each.
struct Chunks<'a> {
    bytes: &'a [u8],
    state: u32,
    small: bool,
    stalled: bool,
}

impl Read for Chunks<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.stalled = !self.stalled;
        if self.stalled {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // xorshift32
        self.state ^= self.state << 13;
        self.state ^= self.state >> 17;
        self.state ^= self.state << 5;
        let most = if self.small { 8 } else { 8192 };
        let n = (1 + self.state as usize % most).min(out.len()).min(self.bytes.len());
        let (piece, rest) = self.bytes.split_at(n);
        out[..n].copy_from_slice(piece);
        self.bytes = rest;
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, bytes)) = data.split_first() else {
        return;
    };
    let mut stream = Chunks {
        bytes,
        state: u32::from(seed) | 0x100,
        small: seed & 0x80 != 0,
        stalled: false,
    };
    let mut reader = PduReader::new(MAX_PDU, &[]);
    // dicom-ul's reader over the same bytes, whole.
    let mut cursor = io::Cursor::new(bytes);
    loop {
        let ours = loop {
            match reader.next(&mut stream) {
                Err(WireError::TimedOut) => continue,
                Ok(received) => break Ok(owned(received)),
                Err(e) => break Err(e),
            }
        };
        assert!(reader.buffer_len() <= MAX_PDU as usize + 6);
        let theirs = dicom_ul::read_pdu(&mut cursor, MAX_PDU, true);
        match (ours, theirs) {
            (Ok(pdu), Ok(Some(other))) => assert_eq!(pdu, other),
            // The stream ended before a whole PDU: dicom-ul waits for more bytes.
            (Err(WireError::Closed), Ok(None)) => return,
            (Err(WireError::Pdu(_)), Err(_))
            | (Err(WireError::TooLarge { .. }), Err(_))
            | (Err(WireError::ItemTooShort { .. }), Err(_))
            | (Err(WireError::ItemPastEnd { .. }), Err(_)) => return,
            // `Incomplete` is a disagreement too: dicom-ul saw a whole PDU as incomplete.
            (ours, theirs) => panic!("wire: {ours:?}, dicom-ul: {theirs:?}"),
        }
    }
});

/// What the reader made of a PDU, owned, as dicom-ul's type (to compare).
fn owned(received: Received<'_>) -> Pdu {
    match received {
        Received::PData(pdvs) => Pdu::PData {
            data: pdvs
                .map(|p| PDataValue {
                    presentation_context_id: p.context,
                    value_type: if p.is_command {
                        PDataValueType::Command
                    } else {
                        PDataValueType::Data
                    },
                    is_last: p.is_last,
                    data: p.data.to_vec(),
                })
                .collect(),
        },
        Received::Other(pdu) => pdu,
    }
}
