//! DIMSE command sets (PS3.7 §9.3, §E): parsing the requests a Storage and Verification SCP
//! receives (C-STORE-RQ, C-ECHO-RQ, anything else named by its command field) and encoding its
//! responses (C-STORE-RSP, C-ECHO-RSP, and the response to an operation it does not perform).
//!
//! Command sets are always implicit VR little endian and made only of group 0000 elements, a
//! few dozen bytes of fixed layout. A hand-written reader is used instead of dicom-rs's data
//! set parser because it must hold against hostile bytes with nothing but the input in
//! memory: every length is checked against the bytes present before it is used, and a
//! command never allocates more than its own size (dicom-rs sizes values from their declared
//! lengths). The reader is exercised by the `dimse` fuzz target.

/// C-STORE-RQ command field.
pub const C_STORE_RQ: u16 = 0x0001;
/// C-ECHO-RQ command field.
pub const C_ECHO_RQ: u16 = 0x0030;
/// A response's command field is its request's with this bit set.
pub const RESPONSE_BIT: u16 = 0x8000;
/// CommandDataSetType value meaning "no data set follows"; any other value means one does.
pub const NO_DATA_SET: u16 = 0x0101;

/// Status codes of the responses sent (PS3.4 Annex B.2.3, PS3.7 Annex C).
pub mod status {
    /// The operation succeeded.
    pub const SUCCESS: u16 = 0x0000;
    /// Refused: SOP class not supported.
    pub const SOP_CLASS_NOT_SUPPORTED: u16 = 0x0122;
    /// Refused: unrecognized operation (a DIMSE service this SCP does not provide).
    pub const UNRECOGNIZED_OPERATION: u16 = 0x0211;
    /// Refused: out of resources (storage full, instance above the size limit, stopping).
    pub const OUT_OF_RESOURCES: u16 = 0xA700;
    /// Error: data set does not match SOP class.
    pub const DATA_SET_MISMATCH: u16 = 0xA900;
    /// Error: cannot understand (the data set or command cannot be parsed).
    pub const CANNOT_UNDERSTAND: u16 = 0xC000;
}

/// Longest UID (PS3.5 §9.1).
const MAX_UID_LEN: usize = 64;
/// Longest Error Comment (LO).
const MAX_ERROR_COMMENT: usize = 64;

/// Why a command set could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The bytes end inside an element header or value.
    #[error("command set truncated at byte {at}: element ({group:04X},{element:04X}) needs {needed} bytes, {left} left")]
    Truncated {
        at: usize,
        group: u16,
        element: u16,
        needed: u64,
        left: usize,
    },
    /// Fewer than 8 bytes remain for an element header.
    #[error("command set truncated at byte {at}: {left} byte(s) left, an element header needs 8")]
    ShortHeader { at: usize, left: usize },
    /// A command set holds only group 0000.
    #[error("command set holds element ({group:04X},{element:04X}) outside group 0000")]
    WrongGroup { group: u16, element: u16 },
    /// Elements out of order or repeated.
    #[error("command set element (0000,{element:04X}) is out of order or repeated")]
    Order { element: u16 },
    /// A US element whose length is not 2, or a UL element whose length is not 4.
    #[error("command set element (0000,{element:04X}) has length {length}, expected {expected}")]
    Length {
        element: u16,
        length: u32,
        expected: u32,
    },
    /// A required element is missing.
    #[error("command set has no {0}")]
    Missing(&'static str),
    /// A UID that is empty, too long, or holds characters other than digits and dots.
    #[error("command set {what} is not a valid UID ({why})")]
    BadUid {
        what: &'static str,
        why: &'static str,
    },
}

/// The elements of a command set this SCP uses; the rest are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandSet {
    /// (0000,0100) CommandField.
    pub field: u16,
    /// (0000,0110) MessageID.
    pub message_id: Option<u16>,
    /// (0000,0002) AffectedSOPClassUID.
    pub sop_class: Option<String>,
    /// (0000,1000) AffectedSOPInstanceUID.
    pub sop_instance: Option<String>,
    /// (0000,0800) CommandDataSetType is present and says a data set follows.
    pub has_data_set: bool,
    /// (0000,1030) MoveOriginatorApplicationEntityTitle, when a C-MOVE caused this store.
    pub move_originator: Option<String>,
}

/// A request, as this SCP understands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// C-STORE-RQ: a data set follows.
    Store {
        message_id: u16,
        sop_class: String,
        sop_instance: String,
    },
    /// C-ECHO-RQ (Verification).
    Echo { message_id: u16, sop_class: String },
    /// Any other command: answered with "unrecognized operation" when it is a request (its
    /// data set, if any, is read and dropped).
    Other {
        field: u16,
        message_id: Option<u16>,
        sop_class: Option<String>,
    },
}

/// Reads one element header at `at`: (group, element, value length).
fn header(bytes: &[u8], at: usize) -> Result<(u16, u16, u32), CommandError> {
    let h = bytes.get(at..at + 8).ok_or(CommandError::ShortHeader {
        at,
        left: bytes.len().saturating_sub(at),
    })?;
    let group = u16::from_le_bytes([h[0], h[1]]);
    let element = u16::from_le_bytes([h[2], h[3]]);
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    Ok((group, element, len))
}

/// The elements of a command set in order: (element number, value), every length checked
/// against the bytes present and every element in group 0000.
fn elements(bytes: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), CommandError>> {
    let mut at = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || at >= bytes.len() {
            return None;
        }
        let item = (|| {
            let (group, element, len) = header(bytes, at)?;
            if group != 0x0000 {
                return Err(CommandError::WrongGroup { group, element });
            }
            let start = at + 8;
            let left = bytes.len() - start;
            if len as u64 > left as u64 {
                return Err(CommandError::Truncated {
                    at,
                    group,
                    element,
                    needed: len as u64,
                    left,
                });
            }
            at = start + len as usize;
            Ok((element, &bytes[start..at]))
        })();
        failed = item.is_err();
        Some(item)
    })
}

fn us(element: u16, v: &[u8]) -> Result<u16, CommandError> {
    match v {
        [a, b] => Ok(u16::from_le_bytes([*a, *b])),
        _ => Err(CommandError::Length {
            element,
            length: v.len() as u32,
            expected: 2,
        }),
    }
}

/// A UID value: trailing NUL and space padding removed, digits and dots only, at most 64.
fn uid(what: &'static str, v: &[u8]) -> Result<String, CommandError> {
    let end = v
        .iter()
        .rposition(|&b| b != 0 && b != b' ')
        .map_or(0, |i| i + 1);
    let v = &v[..end];
    let bad = |why| CommandError::BadUid { what, why };
    if v.is_empty() {
        return Err(bad("empty"));
    }
    if v.len() > MAX_UID_LEN {
        return Err(bad("longer than 64 characters"));
    }
    if !v.iter().all(|&b| b.is_ascii_digit() || b == b'.') {
        return Err(bad("characters other than digits and dots"));
    }
    if v[0] == b'.' || v[v.len() - 1] == b'.' || v.windows(2).any(|w| w == b"..") {
        return Err(bad("empty component"));
    }
    // Only ASCII digits and dots are left: the conversion cannot fail.
    Ok(v.iter().map(|&b| b as char).collect())
}

/// Text of an AE title: trailing and leading spaces (and NULs) removed, printable ASCII only.
fn ae(v: &[u8]) -> String {
    String::from_utf8_lossy(v)
        .trim_matches(|c: char| c == ' ' || c == '\0')
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(16)
        .collect()
}

/// Parses a command set (implicit VR little endian, group 0000).
pub fn parse_command(bytes: &[u8]) -> Result<CommandSet, CommandError> {
    let mut cmd = CommandSet::default();
    let mut field = None;
    let mut last: Option<u16> = None;
    for item in elements(bytes) {
        let (element, v) = item?;
        if last.is_some_and(|l| element <= l) {
            return Err(CommandError::Order { element });
        }
        last = Some(element);
        match element {
            0x0002 => cmd.sop_class = Some(uid("AffectedSOPClassUID", v)?),
            0x0100 => field = Some(us(element, v)?),
            0x0110 => cmd.message_id = Some(us(element, v)?),
            0x0800 => cmd.has_data_set = us(element, v)? != NO_DATA_SET,
            0x1000 => cmd.sop_instance = Some(uid("AffectedSOPInstanceUID", v)?),
            0x1030 => cmd.move_originator = Some(ae(v)),
            // Group length, priority, status, move originator message ID, ...: not needed.
            _ => {}
        }
    }
    cmd.field = field.ok_or(CommandError::Missing("CommandField (0000,0100)"))?;
    Ok(cmd)
}

impl CommandSet {
    /// What the command asks for. A C-STORE-RQ or C-ECHO-RQ missing an element the
    /// standard requires is an error (answered with "cannot understand" by the caller).
    pub fn request(self) -> Result<Request, CommandError> {
        match self.field {
            C_STORE_RQ => Ok(Request::Store {
                message_id: self.message_id.ok_or(CommandError::Missing("MessageID"))?,
                sop_class: self
                    .sop_class
                    .ok_or(CommandError::Missing("AffectedSOPClassUID"))?,
                sop_instance: self
                    .sop_instance
                    .ok_or(CommandError::Missing("AffectedSOPInstanceUID"))?,
            }),
            C_ECHO_RQ => Ok(Request::Echo {
                message_id: self.message_id.ok_or(CommandError::Missing("MessageID"))?,
                sop_class: self
                    .sop_class
                    .unwrap_or_else(|| dicom_dictionary_std::uids::VERIFICATION.to_string()),
            }),
            field => Ok(Request::Other {
                field,
                message_id: self.message_id,
                sop_class: self.sop_class,
            }),
        }
    }
}

/// A response command set to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response<'a> {
    /// The request's command field (the response bit is added).
    pub request_field: u16,
    /// AffectedSOPClassUID (omitted when unknown).
    pub sop_class: Option<&'a str>,
    /// MessageIDBeingRespondedTo.
    pub message_id: u16,
    pub status: u16,
    /// AffectedSOPInstanceUID (C-STORE).
    pub sop_instance: Option<&'a str>,
    /// ErrorComment: why a request failed (at most 64 characters are sent).
    pub error_comment: Option<&'a str>,
}

/// Appends one implicit VR LE element of group 0000.
fn put(out: &mut Vec<u8>, element: u16, value: &[u8]) {
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&element.to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// A UID value padded to even length with a NUL.
fn uid_value(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    if v.len() % 2 == 1 {
        v.push(0);
    }
    v
}

/// An LO value: printable ASCII without backslashes (others become `?`), at most 64
/// characters, padded to even length with a space.
fn lo_value(s: &str) -> Vec<u8> {
    let mut v: Vec<u8> = s
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() || c == ' ') && c != '\\' {
                c as u8
            } else {
                b'?'
            }
        })
        .take(MAX_ERROR_COMMENT)
        .collect();
    if v.len() % 2 == 1 {
        v.push(b' ');
    }
    v
}

/// Encodes a response command set (implicit VR little endian, ascending tags, with its group
/// length).
pub fn encode_response(r: &Response) -> Vec<u8> {
    let mut body = Vec::with_capacity(160);
    if let Some(c) = r.sop_class {
        put(&mut body, 0x0002, &uid_value(c));
    }
    put(
        &mut body,
        0x0100,
        &(r.request_field | RESPONSE_BIT).to_le_bytes(),
    );
    put(&mut body, 0x0120, &r.message_id.to_le_bytes());
    put(&mut body, 0x0800, &NO_DATA_SET.to_le_bytes());
    put(&mut body, 0x0900, &r.status.to_le_bytes());
    if let Some(comment) = r.error_comment {
        put(&mut body, 0x0902, &lo_value(comment));
    }
    if let Some(i) = r.sop_instance {
        put(&mut body, 0x1000, &uid_value(i));
    }
    let mut out = Vec::with_capacity(12 + body.len());
    put(&mut out, 0x0000, &(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Encodes a request command set: what a Storage or Verification SCU sends (the `bench
/// listen` sender, tests).
pub fn encode_request(
    field: u16,
    message_id: u16,
    sop_class: &str,
    sop_instance: Option<&str>,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(160);
    put(&mut body, 0x0002, &uid_value(sop_class));
    put(&mut body, 0x0100, &field.to_le_bytes());
    put(&mut body, 0x0110, &message_id.to_le_bytes());
    if field == C_STORE_RQ {
        put(&mut body, 0x0700, &0u16.to_le_bytes()); // priority: medium
    }
    let data_set_type: u16 = if field == C_STORE_RQ {
        0x0000
    } else {
        NO_DATA_SET
    };
    put(&mut body, 0x0800, &data_set_type.to_le_bytes());
    if let Some(i) = sop_instance {
        put(&mut body, 0x1000, &uid_value(i));
    }
    let mut out = Vec::with_capacity(12 + body.len());
    put(&mut out, 0x0000, &(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Reads the Status (0000,0900) and ErrorComment (0000,0902) of a response (for senders).
pub fn response_status(bytes: &[u8]) -> Result<(u16, Option<String>), CommandError> {
    let mut status = None;
    let mut comment = None;
    for item in elements(bytes) {
        let (element, v) = item?;
        match element {
            0x0900 => status = Some(us(element, v)?),
            0x0902 => comment = Some(String::from_utf8_lossy(v).trim().to_string()),
            _ => {}
        }
    }
    Ok((status.ok_or(CommandError::Missing("Status"))?, comment))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CT: &str = dicom_dictionary_std::uids::CT_IMAGE_STORAGE;

    #[test]
    fn a_store_request_round_trips() {
        let bytes = encode_request(C_STORE_RQ, 7, CT, Some("1.2.3.4.5"));
        let cmd = parse_command(&bytes).unwrap();
        assert!(cmd.has_data_set);
        assert_eq!(
            cmd.request().unwrap(),
            Request::Store {
                message_id: 7,
                sop_class: CT.into(),
                sop_instance: "1.2.3.4.5".into()
            }
        );
        let echo = parse_command(&encode_request(C_ECHO_RQ, 1, "1.2.840.10008.1.1", None)).unwrap();
        assert!(!echo.has_data_set);
        assert!(matches!(
            echo.request().unwrap(),
            Request::Echo { message_id: 1, .. }
        ));
    }

    #[test]
    fn a_store_request_with_optional_elements_parses() {
        // A C-STORE-RQ with a zero group length, priority, a move originator and odd UIDs
        // padded with NUL, the way DCMTK and others send them.
        let mut b = Vec::new();
        put(&mut b, 0x0000, &0u32.to_le_bytes());
        put(&mut b, 0x0002, b"1.2.840.10008.5.1.4.1.1.2\0");
        put(&mut b, 0x0100, &1u16.to_le_bytes());
        put(&mut b, 0x0110, &3u16.to_le_bytes());
        put(&mut b, 0x0700, &2u16.to_le_bytes());
        put(&mut b, 0x0800, &0x0001u16.to_le_bytes());
        put(&mut b, 0x1000, b"1.2.826.0.1.3680043.2.1125.1.1\0");
        put(&mut b, 0x1030, b"MOVESCU ");
        let cmd = parse_command(&b).unwrap();
        assert_eq!(cmd.sop_class.as_deref(), Some(CT));
        assert_eq!(
            cmd.sop_instance.as_deref(),
            Some("1.2.826.0.1.3680043.2.1125.1.1")
        );
        assert_eq!(cmd.move_originator.as_deref(), Some("MOVESCU"));
        assert!(cmd.has_data_set);
    }

    #[test]
    fn responses_encode_in_tag_order_with_their_group_length() {
        let bytes = encode_response(&Response {
            request_field: C_STORE_RQ,
            sop_class: Some(CT),
            message_id: 9,
            status: status::OUT_OF_RESOURCES,
            sop_instance: Some("1.2.3"),
            error_comment: Some("spool full: no space left on device\\x ü"),
        });
        let mut at = 0;
        let mut tags = Vec::new();
        while at < bytes.len() {
            let (g, e, len) = header(&bytes, at).unwrap();
            assert_eq!(g, 0);
            assert_eq!(len % 2, 0, "odd length for (0000,{e:04X})");
            tags.push(e);
            at += 8 + len as usize;
        }
        assert_eq!(
            tags,
            [0x0000, 0x0002, 0x0100, 0x0120, 0x0800, 0x0900, 0x0902, 0x1000]
        );
        let group_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        assert_eq!(group_len, bytes.len() - 12);
        let (status, comment) = response_status(&bytes).unwrap();
        assert_eq!(status, status::OUT_OF_RESOURCES);
        assert_eq!(
            comment.as_deref(),
            Some("spool full: no space left on device?x ?")
        );
        // The response's command field has the response bit.
        let cmd = parse_command(&bytes).unwrap();
        assert_eq!(cmd.field, C_STORE_RQ | RESPONSE_BIT);
    }

    #[test]
    fn hostile_command_sets_are_errors_not_panics() {
        let good = encode_request(C_STORE_RQ, 7, CT, Some("1.2.3.4.5"));
        // Every truncation fails cleanly (or parses, when cut at an element boundary).
        for n in 0..good.len() {
            let _ = parse_command(&good[..n]);
        }
        // A declared length far past the end.
        let mut huge = Vec::new();
        huge.extend_from_slice(&[0, 0, 0x02, 0, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            parse_command(&huge),
            Err(CommandError::Truncated { .. })
        ));
        // Another group.
        let mut other = Vec::new();
        put(&mut other, 0x0100, &1u16.to_le_bytes());
        other[0] = 8;
        assert!(matches!(
            parse_command(&other),
            Err(CommandError::WrongGroup { group: 8, .. })
        ));
        // A UID that would make a path.
        let mut evil = Vec::new();
        put(&mut evil, 0x0002, &uid_value(CT));
        put(&mut evil, 0x0100, &1u16.to_le_bytes());
        put(&mut evil, 0x0110, &1u16.to_le_bytes());
        put(&mut evil, 0x0800, &0u16.to_le_bytes());
        put(&mut evil, 0x1000, b"../../etc/passwd");
        assert!(matches!(
            parse_command(&evil),
            Err(CommandError::BadUid { .. })
        ));
        // A store without an instance UID parses, but is not a valid request.
        let no_instance = encode_request(C_STORE_RQ, 7, CT, None);
        assert_eq!(
            parse_command(&no_instance).unwrap().request(),
            Err(CommandError::Missing("AffectedSOPInstanceUID"))
        );
        // Repeated elements.
        let mut twice = Vec::new();
        put(&mut twice, 0x0100, &1u16.to_le_bytes());
        put(&mut twice, 0x0100, &1u16.to_le_bytes());
        assert_eq!(
            parse_command(&twice),
            Err(CommandError::Order { element: 0x0100 })
        );
        // A US of the wrong size.
        let mut wide = Vec::new();
        put(&mut wide, 0x0100, &1u32.to_le_bytes());
        assert!(matches!(
            parse_command(&wide),
            Err(CommandError::Length { expected: 2, .. })
        ));
        assert_eq!(
            parse_command(&[]),
            Err(CommandError::Missing("CommandField (0000,0100)"))
        );
    }

    #[test]
    fn uids_are_checked() {
        assert_eq!(uid("x", b"1.2.3\0").unwrap(), "1.2.3");
        assert_eq!(uid("x", b"1.2.3 ").unwrap(), "1.2.3");
        for bad in [&b""[..], b"\0\0", b"1..2", b".1", b"1.", b"1.2/3", b"1.2.a"] {
            assert!(uid("x", bad).is_err(), "{bad:?}");
        }
        assert!(uid("x", &[b'1'; 65]).is_err());
        assert!(uid("x", &[b'1'; 64]).is_ok());
    }
}
