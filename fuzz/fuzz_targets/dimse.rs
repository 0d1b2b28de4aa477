//! The listener's side of the DICOM protocol on arbitrary bytes, as they would come from a
//! peer once an association is established: PDUs are read from the bytes (the listener's own
//! reader, `wire`, with its size limit), their PDVs go through the message assembler
//! (commands over several PDVs, data sets streamed), and every complete command set is parsed
//! and interpreted as a request. The raw bytes are also parsed as a command set and as a
//! response directly. Errors are expected; a panic, an abort, a hang or an allocation beyond
//! the input's size (plus the PDU limit) is a finding.

#![no_main]

use libfuzzer_sys::fuzz_target;

use dicomflow::source::listen::dimse::{parse_command, response_status};
use dicomflow::source::listen::message::{MessageReader, Step};
use dicomflow::source::listen::wire::{PduReader, Received};

/// The listener's largest PDU, as in `listen.max_pdu` (small, so long inputs hold several).
const MAX_PDU: u32 = 16_384;
/// The listener's command set limit.
const MAX_COMMAND: usize = 64 << 10;

fuzz_target!(|data: &[u8]| {
    let _ = parse_command(data).map(|c| c.request());
    let _ = response_status(data);

    let mut reader = MessageReader::new(MAX_COMMAND);
    let mut wire = PduReader::new(MAX_PDU, &[]);
    let mut stream = data;
    let mut data_bytes = 0usize;
    // Incomplete or invalid: the listener waits for more bytes or aborts.
    while let Ok(pdu) = wire.next(&mut stream) {
        let Received::PData(pdvs) = pdu else {
            continue;
        };
        for pdv in pdvs {
            match reader.push(pdv) {
                Ok(Step::Command { command, .. }) => {
                    let _ = command.request();
                }
                Ok(Step::Data { bytes, .. }) => data_bytes += bytes.len(),
                Ok(Step::Pending) => {}
                // The listener aborts the association here.
                Err(_) => return,
            }
        }
    }
    // A data set is streamed, never more than the input.
    assert!(data_bytes <= data.len());
});
