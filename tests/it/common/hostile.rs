//! Hostile DICOM corpus, generated at test time from a valid `dicomflow synth` file by
//! byte-level edits (nothing binary is committed for these cases, so every case is reviewable
//! here). Used by `tests/it/robustness.rs` and `tests/it/adversarial.rs`; `fuzz/seeds/` holds
//! a few of these files too.
//!
//! The valid file is Explicit VR Little Endian with a file meta group and no sequences, so a
//! tiny element reader/writer is enough: [`Dicom::parse`] splits it into meta and data set
//! elements, the cases edit those, and [`Dicom::to_bytes`] writes them back (recomputing the
//! meta group length). Cases whose bytes must lie (lengths past EOF, wrong VRs, nesting) are
//! assembled from raw element bytes with [`raw_elem`] / [`raw_elem_len`].

use std::path::{Path, PathBuf};

/// What the pipeline must report for a hostile file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// `status: failed` with a non-empty failure reason.
    Failed,
    /// `status: skipped` with a non-empty skip reason (not DICOM, DICOMDIR, no image).
    Skipped,
}

impl Expect {
    pub fn as_str(self) -> &'static str {
        match self {
            Expect::Failed => "failed",
            Expect::Skipped => "skipped",
        }
    }
}

/// One hostile file.
#[derive(Debug, Clone)]
pub struct Case {
    /// Short name (also the file name, plus the extension in `path`).
    pub name: &'static str,
    pub path: PathBuf,
    pub expect: Expect,
    /// What the file does to the reader.
    pub what: &'static str,
}

/// One explicit VR little endian element.
#[derive(Debug, Clone, PartialEq)]
pub struct Elem {
    pub group: u16,
    pub element: u16,
    pub vr: [u8; 2],
    pub value: Vec<u8>,
}

/// VRs with the long (reserved + 32-bit) length form in explicit VR.
fn long_form(vr: [u8; 2]) -> bool {
    matches!(
        &vr,
        b"OB"
            | b"OD"
            | b"OF"
            | b"OL"
            | b"OV"
            | b"OW"
            | b"SQ"
            | b"UC"
            | b"UN"
            | b"UR"
            | b"UT"
            | b"SV"
            | b"UV"
    )
}

/// Element bytes with the true length (no padding: callers choose what they write).
pub fn raw_elem(group: u16, element: u16, vr: &[u8; 2], value: &[u8]) -> Vec<u8> {
    raw_elem_len(group, element, vr, value.len() as u32, value)
}

/// Element bytes whose length field says `len`, whatever `value` holds.
pub fn raw_elem_len(group: u16, element: u16, vr: &[u8; 2], len: u32, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + value.len());
    out.extend_from_slice(&group.to_le_bytes());
    out.extend_from_slice(&element.to_le_bytes());
    out.extend_from_slice(vr);
    if long_form(*vr) {
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&len.to_le_bytes());
    } else {
        out.extend_from_slice(&(len as u16).to_le_bytes());
    }
    out.extend_from_slice(value);
    out
}

/// An item / delimiter header (FFFE,xxxx) with a 32-bit length.
pub fn item_header(element: u16, len: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    out.extend_from_slice(&0xfffeu16.to_le_bytes());
    out.extend_from_slice(&element.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out
}

/// Encapsulated Pixel Data: empty Basic Offset Table, the fragments (padded to even), end.
pub fn encapsulated(fragments: &[Vec<u8>]) -> Vec<u8> {
    let mut out = raw_elem_len(0x7fe0, 0x0010, b"OB", 0xffff_ffff, &[]);
    out.extend(item_header(0xe000, 0));
    for f in fragments {
        let mut f = f.clone();
        if f.len() % 2 == 1 {
            f.push(0);
        }
        out.extend(item_header(0xe000, f.len() as u32));
        out.extend(f);
    }
    out.extend(item_header(0xe0dd, 0));
    out
}

/// A parsed explicit VR little endian file (preamble assumed zero).
#[derive(Debug, Clone)]
pub struct Dicom {
    pub meta: Vec<Elem>,
    pub data: Vec<Elem>,
}

impl Dicom {
    /// Splits a file written by `dicomflow synth` into elements. Panics on anything else
    /// (undefined lengths, implicit VR): this reads our own fixtures, not hostile input.
    pub fn parse(bytes: &[u8]) -> Dicom {
        assert_eq!(&bytes[128..132], b"DICM", "not a DICOM file with preamble");
        let mut pos = 132;
        let mut meta = Vec::new();
        let mut data = Vec::new();
        while pos < bytes.len() {
            let group = u16::from_le_bytes([bytes[pos], bytes[pos + 1]]);
            let element = u16::from_le_bytes([bytes[pos + 2], bytes[pos + 3]]);
            let vr = [bytes[pos + 4], bytes[pos + 5]];
            let (len, header) = if long_form(vr) {
                let l = u32::from_le_bytes(bytes[pos + 8..pos + 12].try_into().unwrap());
                (l as usize, 12)
            } else {
                (
                    u16::from_le_bytes([bytes[pos + 6], bytes[pos + 7]]) as usize,
                    8,
                )
            };
            assert_ne!(len, 0xffff_ffff, "undefined lengths are not expected here");
            let value = bytes[pos + header..pos + header + len].to_vec();
            pos += header + len;
            let e = Elem {
                group,
                element,
                vr,
                value,
            };
            if group == 0x0002 {
                meta.push(e);
            } else {
                data.push(e);
            }
        }
        Dicom { meta, data }
    }

    /// Preamble, `DICM` and the meta group (with a recomputed group length).
    pub fn meta_bytes(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for e in self.meta.iter().filter(|e| e.element != 0x0000) {
            body.extend(raw_elem(e.group, e.element, &e.vr, &e.value));
        }
        let mut out = vec![0u8; 128];
        out.extend_from_slice(b"DICM");
        out.extend(raw_elem(
            0x0002,
            0x0000,
            b"UL",
            &(body.len() as u32).to_le_bytes(),
        ));
        out.extend(body);
        out
    }

    /// Data set elements `pred` keeps, encoded in order.
    pub fn data_bytes_where(&self, pred: impl Fn(&Elem) -> bool) -> Vec<u8> {
        let mut out = Vec::new();
        for e in self.data.iter().filter(|e| pred(e)) {
            out.extend(raw_elem(e.group, e.element, &e.vr, &e.value));
        }
        out
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.meta_bytes();
        out.extend(self.data_bytes_where(|_| true));
        out
    }

    pub fn get(&self, group: u16, element: u16) -> Option<&Elem> {
        self.data
            .iter()
            .find(|e| e.group == group && e.element == element)
    }

    /// Replaces (or inserts in tag order) a data set element.
    pub fn set(&mut self, group: u16, element: u16, vr: &[u8; 2], value: &[u8]) -> &mut Self {
        let e = Elem {
            group,
            element,
            vr: *vr,
            value: value.to_vec(),
        };
        if let Some(old) = self
            .data
            .iter_mut()
            .find(|x| x.group == group && x.element == element)
        {
            *old = e;
        } else {
            let at = self
                .data
                .iter()
                .position(|x| (x.group, x.element) > (group, element))
                .unwrap_or(self.data.len());
            self.data.insert(at, e);
        }
        self
    }

    pub fn set_us(&mut self, group: u16, element: u16, v: u16) -> &mut Self {
        self.set(group, element, b"US", &v.to_le_bytes())
    }

    /// A text element, padded to even length with a space (or NUL for UI).
    pub fn set_str(&mut self, group: u16, element: u16, vr: &[u8; 2], s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        if v.len() % 2 == 1 {
            v.push(if vr == b"UI" { 0 } else { b' ' });
        }
        self.set(group, element, vr, &v)
    }

    pub fn remove(&mut self, group: u16, element: u16) -> &mut Self {
        self.data
            .retain(|e| !(e.group == group && e.element == element));
        self
    }

    /// Sets the meta Transfer Syntax UID.
    pub fn set_transfer_syntax(&mut self, uid: &str) -> &mut Self {
        let mut v = uid.as_bytes().to_vec();
        if v.len() % 2 == 1 {
            v.push(0);
        }
        for e in &mut self.meta {
            if e.element == 0x0010 {
                e.value = v.clone();
            }
        }
        self
    }

    /// Replaces the Pixel Data element by already encoded bytes (e.g. [`encapsulated`]).
    pub fn with_pixel_bytes(&self, pixel: &[u8]) -> Vec<u8> {
        let mut out = self.meta_bytes();
        out.extend(self.data_bytes_where(|e| e.group != 0x7fe0));
        out.extend_from_slice(pixel);
        out
    }
}

/// Deterministic pseudo-random bytes (xorshift64*).
pub fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// A JPEG lossless (process 14, SOF3) stream declaring `rows` x `cols` at `precision` bits,
/// one component, a one-code Huffman table (difference 0) and a few bytes of scan data: a
/// valid header whose decoder output is `rows * cols * 2` bytes whatever the DICOM says.
pub fn jpeg_lossless(rows: u16, cols: u16, precision: u8) -> Vec<u8> {
    let mut j = vec![0xff, 0xd8];
    // SOF3: Lf, P, Y, X, Nf, (C, HV, Tq)
    j.extend([0xff, 0xc3, 0x00, 0x0b, precision]);
    j.extend(rows.to_be_bytes());
    j.extend(cols.to_be_bytes());
    j.extend([0x01, 0x01, 0x11, 0x00]);
    // DHT: DC table 0, one code of length 1 -> category 0.
    j.extend([0xff, 0xc4, 0x00, 0x14, 0x00, 0x01]);
    j.extend([0u8; 15]);
    j.push(0x00);
    // SOS: one component, table 0, predictor 1, point transform 0.
    j.extend([0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x01, 0x00, 0x00]);
    j.extend([0u8; 64]);
    j.extend([0xff, 0xd9]);
    j
}

/// A baseline JPEG (SOF0) stream declaring `rows` x `cols`, 8-bit gray, with tables that make
/// every block "DC 0, end of block" and a few bytes of scan data.
pub fn jpeg_baseline(rows: u16, cols: u16) -> Vec<u8> {
    let mut j = vec![0xff, 0xd8];
    // DQT: table 0, all ones.
    j.extend([0xff, 0xdb, 0x00, 0x43, 0x00]);
    j.extend([1u8; 64]);
    j.extend([0xff, 0xc0, 0x00, 0x0b, 0x08]);
    j.extend(rows.to_be_bytes());
    j.extend(cols.to_be_bytes());
    j.extend([0x01, 0x01, 0x11, 0x00]);
    // DHT DC 0 and AC 0: one code of length 1 each (DC category 0, AC EOB).
    for class in [0x00u8, 0x10] {
        j.extend([0xff, 0xc4, 0x00, 0x14, class, 0x01]);
        j.extend([0u8; 15]);
        j.push(0x00);
    }
    j.extend([0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00]);
    j.extend([0u8; 64]);
    j.extend([0xff, 0xd9]);
    j
}

/// An RLE Lossless fragment: one segment that repeats zero 128 times, `runs` times.
pub fn rle_fragment(runs: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(1u32.to_le_bytes());
    f.extend(64u32.to_le_bytes());
    f.extend([0u8; 56]);
    for _ in 0..runs {
        f.extend([0x81u8, 0x00]); // -127: repeat the next byte 128 times
    }
    f
}

/// A minimal JPEG 2000 codestream (SOC + SIZ + COD + QCD + empty tile) declaring
/// `rows` x `cols`, one 8-bit component.
pub fn j2k_codestream(rows: u32, cols: u32) -> Vec<u8> {
    let mut j = vec![0xff, 0x4f];
    // SIZ: Lsiz = 38 + 3 * Csiz
    j.extend([0xff, 0x51, 0x00, 0x29, 0x00, 0x00]);
    for v in [cols, rows, 0, 0, cols, rows, 0, 0] {
        j.extend(v.to_be_bytes());
    }
    j.extend([0x00, 0x01, 0x07, 0x01, 0x01]);
    // COD: no precincts, LRCP, 1 layer, no MCT, 5 decompositions, 64x64 blocks, 5/3.
    j.extend([
        0xff, 0x52, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x01, 0x00, 0x05, 0x04, 0x04, 0x00, 0x01,
    ]);
    // QCD: no quantisation, guard bits 2, one exponent per subband.
    j.extend([0xff, 0x5c, 0x00, 0x13, 0x40]);
    j.extend([0x40u8; 16]);
    // SOT for tile 0 (length 0 = to EOC), SOD, a few bytes, EOC.
    j.extend([0xff, 0x90, 0x00, 0x0a, 0x00, 0x00, 0, 0, 0, 0, 0x00, 0x01]);
    j.extend([0xff, 0x93]);
    j.extend([0u8; 32]);
    j.extend([0xff, 0xd9]);
    j
}

/// Raw deflate (RFC 1951) of `data` in stored blocks: what a deflated transfer syntax
/// holds, without needing a compressor.
pub fn deflate_stored(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let chunks: Vec<&[u8]> = data.chunks(65535).collect();
    for (i, c) in chunks.iter().enumerate() {
        out.push(u8::from(i + 1 == chunks.len()));
        let len = c.len() as u16;
        out.extend(len.to_le_bytes());
        out.extend((!len).to_le_bytes());
        out.extend_from_slice(c);
    }
    out
}

/// `valid` re-encoded as Deflated Explicit VR Little Endian.
pub fn deflated(valid: &Dicom) -> Vec<u8> {
    let mut d = valid.clone();
    d.set_transfer_syntax(DEFLATED);
    let mut bytes = d.meta_bytes();
    bytes.extend(deflate_stored(&d.data_bytes_where(|_| true)));
    bytes
}

/// Raw deflate of `data` that never refers to what came before it (a fresh compressor,
/// ended by a sync flush on a byte boundary, not final): such pieces can be concatenated.
fn deflate_piece(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).expect("deflate");
    e.flush().expect("deflate"); // a sync flush
    std::mem::take(e.get_mut())
}

/// A decompression bomb as the adversarial pass of issue 22 built it: `valid` as a deflated
/// data set whose image is 1 x 1 and whose Pixel Data declares `declared` bytes of zeros, all
/// of them there once inflated. Deflate's 1032:1 keeps the file small: 3 GB in 2.9 MB.
pub fn deflate_bomb(valid: &Dicom, declared: u32) -> Vec<u8> {
    let mut d = valid.clone();
    d.set_transfer_syntax(DEFLATED);
    d.set_us(0x0028, 0x0010, 1).set_us(0x0028, 0x0011, 1);
    let mut head = d.data_bytes_where(|e| e.group != 0x7fe0);
    head.extend(raw_elem_len(0x7fe0, 0x0010, b"OW", declared, &[]));
    let mut bytes = d.meta_bytes();
    bytes.extend(deflate_piece(&head));
    const PIECE: usize = 1 << 20;
    let piece = deflate_piece(&vec![0u8; PIECE]);
    let mut left = declared as usize;
    while left >= PIECE {
        bytes.extend_from_slice(&piece);
        left -= PIECE;
    }
    if left > 0 {
        bytes.extend(deflate_piece(&vec![0u8; left]));
    }
    // The final block: empty, stored.
    bytes.extend([0x01, 0x00, 0x00, 0xff, 0xff]);
    bytes
}

const JPEG_LOSSLESS_SV1: &str = "1.2.840.10008.1.2.4.70";
const JPEG_BASELINE: &str = "1.2.840.10008.1.2.4.50";
const JPEG_2000: &str = "1.2.840.10008.1.2.4.90";
const RLE_LOSSLESS: &str = "1.2.840.10008.1.2.5";
const MPEG2_MAIN: &str = "1.2.840.10008.1.2.4.100";
const DEFLATED: &str = "1.2.840.10008.1.2.1.99";

/// Writes the hostile corpus into `dir` (created), derived from `valid`, a single-frame
/// 64x64 16-bit MONOCHROME2 file written by `dicomflow synth`. Returns every case.
pub fn build_corpus(dir: &Path, valid: &Path) -> Vec<Case> {
    std::fs::create_dir_all(dir).unwrap();
    let good_bytes = std::fs::read(valid).unwrap();
    let good = Dicom::parse(&good_bytes);
    let pixel_at = good_bytes.len() - good.get(0x7fe0, 0x0010).unwrap().value.len() - 12;
    let mut cases = Vec::new();
    let mut add =
        |name: &'static str, ext: &str, expect: Expect, what: &'static str, bytes: &[u8]| {
            let path = dir.join(format!("{name}{ext}"));
            std::fs::write(&path, bytes).unwrap();
            cases.push(Case {
                name,
                path,
                expect,
                what,
            });
        };

    // --- Truncation -----------------------------------------------------------------------
    // Cut inside the data set header (in the middle of an element, before Pixel Data).
    add(
        "trunc_header",
        ".dcm",
        Expect::Failed,
        "file cut in the middle of the data set header",
        &good_bytes[..pixel_at / 2 + 3],
    );
    add(
        "trunc_pixels",
        ".dcm",
        Expect::Failed,
        "file cut in the middle of the pixel data",
        &good_bytes[..pixel_at + 12 + 1000],
    );
    add(
        "trunc_pixel_header",
        ".dcm",
        Expect::Failed,
        "file cut inside the Pixel Data element header",
        &good_bytes[..pixel_at + 6],
    );

    // --- Not DICOM ------------------------------------------------------------------------
    add("empty", ".dcm", Expect::Skipped, "empty file", &[]);
    add(
        "text",
        ".txt",
        Expect::Skipped,
        "plain text",
        b"This is not a DICOM file.\nIt is a note left in the folder.\n",
    );
    let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x00\x00\x00\x00\x3a\x7e\x9b\x55".to_vec();
    png.extend(b"\x00\x00\x00\x0aIDAT\x78\x9c\x63\x60\x00\x00\x00\x02\x00\x01\xe5\x27\xde\xfc");
    png.extend(b"\x00\x00\x00\x00IEND\xae\x42\x60\x82");
    add("png", ".png", Expect::Skipped, "a PNG image", &png);
    // First bytes chosen so that they look neither like DICM nor like a bare data set.
    let mut random = random_bytes(0x5eed, 4096);
    random[0] = 0xa5;
    add("random", ".bin", Expect::Skipped, "random bytes", &random);
    add("tiny", ".dcm", Expect::Skipped, "three bytes", b"DIC");

    // --- DICOMDIR -------------------------------------------------------------------------
    // A media storage directory written here (meta SOP class 1.2.840.10008.1.3.10, a record
    // sequence with one empty item). tests/fixtures/hostile/DICOMDIR is one made by dcmmkdir.
    {
        let mut d = good.clone();
        for e in &mut d.meta {
            if e.element == 0x0002 {
                e.value = b"1.2.840.10008.1.3.10".to_vec();
            }
        }
        let mut bytes = d.meta_bytes();
        bytes.extend(raw_elem(0x0004, 0x1130, b"CS", b"HOSTILE "));
        let mut seq = item_header(0xe000, 0xffff_ffff);
        seq.extend(raw_elem(0x0004, 0x1430, b"CS", b"PATIENT "));
        seq.extend(item_header(0xe00d, 0));
        seq.extend(item_header(0xe0dd, 0));
        bytes.extend(raw_elem_len(0x0004, 0x1220, b"SQ", 0xffff_ffff, &seq));
        add(
            "DICOMDIR",
            "",
            Expect::Skipped,
            "a DICOMDIR (media storage directory)",
            &bytes,
        );
    }

    // --- Objects without an image ---------------------------------------------------------
    {
        // An image SOP class with Rows and Columns but no pixels is a damaged image (issue
        // 16 cause 3): a failure, not "not an image".
        let mut d = good.clone();
        d.remove(0x7fe0, 0x0010);
        add(
            "no_pixel_data",
            ".dcm",
            Expect::Failed,
            "image attributes but no Pixel Data element",
            &d.to_bytes(),
        );
        let mut d = good.clone();
        d.remove(0x0028, 0x0010).remove(0x0028, 0x0011);
        add(
            "pixel_data_no_rows",
            ".dcm",
            Expect::Failed,
            "Pixel Data without Rows and Columns",
            &d.to_bytes(),
        );
        let mut d = good.clone();
        d.data.retain(|e| e.group != 0x0028 && e.group != 0x7fe0);
        add(
            "image_class_no_pixels",
            ".dcm",
            Expect::Failed,
            "an image SOP class without image pixel module or Pixel Data",
            &d.to_bytes(),
        );
        let mut d = good.clone();
        d.remove(0x7fe0, 0x0010)
            .set(0x7fe0, 0x0008, b"OF", &[0u8; 16]);
        add(
            "float_pixel_data",
            ".dcm",
            Expect::Failed,
            "Float Pixel Data (a parametric map) instead of Pixel Data",
            &d.to_bytes(),
        );
        // The preamble and DICM magic damaged, the data set intact behind them.
        let mut bytes = good_bytes.clone();
        bytes[..132].iter_mut().for_each(|b| *b = 0x5a);
        add(
            "damaged_preamble",
            ".dcm",
            Expect::Failed,
            "preamble and DICM magic overwritten, Pixel Data intact",
            &bytes,
        );
        let mut d = good.clone();
        d.data.retain(|e| e.group != 0x0028 && e.group != 0x7fe0);
        d.set_str(0x0008, 0x0016, b"UI", "1.2.840.10008.5.1.4.1.1.88.11");
        add(
            "no_image_module",
            ".dcm",
            Expect::Skipped,
            "no image pixel module at all (a structured-report-like object)",
            &d.to_bytes(),
        );
    }

    // --- Bad image attributes -------------------------------------------------------------
    {
        let mut d = good.clone();
        d.set_us(0x0028, 0x0010, 0);
        add(
            "rows_zero",
            ".dcm",
            Expect::Failed,
            "Rows = 0",
            &d.to_bytes(),
        );

        let mut d = good.clone();
        d.set_us(0x0028, 0x0010, 65535)
            .set_us(0x0028, 0x0011, 65535);
        add(
            "dims_65535",
            ".dcm",
            Expect::Failed,
            "Rows = Columns = 65535 with 8 KB of pixel data",
            &d.to_bytes(),
        );

        let mut d = good.clone();
        d.set_us(0x0028, 0x0010, 8192).set_us(0x0028, 0x0011, 8192);
        add(
            "dims_8192",
            ".dcm",
            Expect::Failed,
            "Rows = Columns = 8192 (under the frame limit) with 8 KB of pixel data",
            &d.to_bytes(),
        );

        let mut d = good.clone();
        d.set_us(0x0028, 0x0002, 4);
        add(
            "spp_4",
            ".dcm",
            Expect::Failed,
            "SamplesPerPixel = 4",
            &d.to_bytes(),
        );

        // (Bits Allocated 12 is read since issue 16: packed ACR-NEMA samples.)
        let mut d = good.clone();
        d.set_us(0x0028, 0x0100, 24);
        add(
            "bits_alloc_24",
            ".dcm",
            Expect::Failed,
            "BitsAllocated = 24",
            &d.to_bytes(),
        );

        // 32 bits allocated, Pixel Data as OB holding the 16-bit data (half of what is needed).
        let mut d = good.clone();
        let px = d.get(0x7fe0, 0x0010).unwrap().value.clone();
        d.set_us(0x0028, 0x0100, 32)
            .set_us(0x0028, 0x0101, 32)
            .set_us(0x0028, 0x0102, 31)
            .set(0x7fe0, 0x0010, b"OB", &px);
        add(
            "bits_alloc_32_ob",
            ".dcm",
            Expect::Failed,
            "BitsAllocated = 32, Pixel Data OB of a 16-bit frame",
            &d.to_bytes(),
        );

        let mut d = good.clone();
        d.set_str(0x0028, 0x0008, b"IS", "1000000");
        add(
            "frames_1000000",
            ".dcm",
            Expect::Failed,
            "NumberOfFrames = 1000000 with one frame of data",
            &d.to_bytes(),
        );

        let mut d = good.clone();
        d.set_str(0x0028, 0x0004, b"CS", "HSV");
        add(
            "photometric_bogus",
            ".dcm",
            Expect::Failed,
            "PhotometricInterpretation = HSV",
            &d.to_bytes(),
        );
    }

    // --- Encoding lies --------------------------------------------------------------------
    {
        // Rows as OB with a single byte (the wrong VR and an odd length).
        let mut d = good.clone();
        d.set(0x0028, 0x0010, b"OB", &[0x07]);
        add(
            "wrong_vr_rows_ob",
            ".dcm",
            Expect::Failed,
            "Rows written as a 1-byte OB (value 7: the pixel data no longer fits)",
            &d.to_bytes(),
        );

        // Rows as a sequence whose 2-byte value cannot hold an item.
        let mut d = good.clone();
        d.set(0x0028, 0x0010, b"SQ", &[0x40, 0x00]);
        add(
            "wrong_vr_rows_sq",
            ".dcm",
            Expect::Failed,
            "Rows written as SQ",
            &d.to_bytes(),
        );

        // Columns says 16 bytes follow: the reader swallows the start of BitsAllocated.
        let mut bytes = good.meta_bytes();
        bytes.extend(good.data_bytes_where(|e| (e.group, e.element) < (0x0028, 0x0011)));
        bytes.extend(raw_elem_len(
            0x0028,
            0x0011,
            b"US",
            16,
            &64u16.to_le_bytes(),
        ));
        bytes.extend(good.data_bytes_where(|e| (e.group, e.element) > (0x0028, 0x0011)));
        add(
            "vr_length_lie",
            ".dcm",
            Expect::Failed,
            "Columns (US) claims a 16-byte value, misaligning the rest",
            &bytes,
        );

        // Odd lengths everywhere: text elements without padding and 8191 bytes of OW.
        let mut bytes = good.meta_bytes();
        for e in &good.data {
            let mut v = e.value.clone();
            if e.group == 0x7fe0 || matches!(&e.vr, b"LO" | b"PN" | b"CS" | b"DS") {
                v.pop();
            }
            bytes.extend(raw_elem(e.group, e.element, &e.vr, &v));
        }
        add(
            "odd_lengths",
            ".dcm",
            Expect::Failed,
            "odd element lengths, Pixel Data (OW) of 8191 bytes",
            &bytes,
        );

        // Pixel Data claims 4 GB.
        let mut bytes = good.meta_bytes();
        bytes.extend(good.data_bytes_where(|e| e.group != 0x7fe0));
        bytes.extend(raw_elem_len(0x7fe0, 0x0010, b"OW", 0xffff_fff0, &[0u8; 64]));
        add(
            "pixel_len_past_eof",
            ".dcm",
            Expect::Failed,
            "Pixel Data length 0xFFFFFFF0 in a 9 KB file",
            &bytes,
        );

        // A header text element claims 2 GB.
        let mut bytes = good.meta_bytes();
        bytes.extend(good.data_bytes_where(|e| (e.group, e.element) < (0x0008, 0x2111)));
        bytes.extend(raw_elem_len(
            0x0008,
            0x2111,
            b"UT",
            0x7fff_fff0,
            b"derived  ",
        ));
        bytes.extend(good.data_bytes_where(|e| (e.group, e.element) > (0x0008, 0x2111)));
        add(
            "header_len_past_eof",
            ".dcm",
            Expect::Failed,
            "DerivationDescription (UT) length 0x7FFFFFF0 in a 9 KB file",
            &bytes,
        );

        // The same lie inside a deflated data set.
        let mut d = good.clone();
        d.set_transfer_syntax(DEFLATED);
        let mut inner = good.data_bytes_where(|e| (e.group, e.element) < (0x0008, 0x2111));
        inner.extend(raw_elem_len(
            0x0008,
            0x2111,
            b"UT",
            0x7fff_fff0,
            b"derived  ",
        ));
        inner.extend(good.data_bytes_where(|e| (e.group, e.element) > (0x0008, 0x2111)));
        let mut bytes = d.meta_bytes();
        bytes.extend(deflate_stored(&inner));
        add(
            "deflated_len_past_eof",
            ".dcm",
            Expect::Failed,
            "Deflated Explicit VR LE; inflated DerivationDescription claims 0x7FFFFFF0 bytes",
            &bytes,
        );

        // File meta group length far too large.
        let mut bytes = good.meta_bytes();
        bytes[140..144].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        bytes.extend(good.data_bytes_where(|_| true));
        add(
            "meta_len_huge",
            ".dcm",
            Expect::Failed,
            "FileMetaInformationGroupLength = 0xFFFFFFF0",
            &bytes,
        );

        // A sequence of defined length 0xFFFFFFF0.
        let mut bytes = good.meta_bytes();
        bytes.extend(good.data_bytes_where(|e| (e.group, e.element) < (0x0008, 0x1115)));
        let mut item = item_header(0xe000, 8);
        item.extend(raw_elem(0x0008, 0x1150, b"UI", b"1.2\0"));
        bytes.extend(raw_elem_len(0x0008, 0x1115, b"SQ", 0xffff_fff0, &item));
        bytes.extend(good.data_bytes_where(|e| (e.group, e.element) > (0x0008, 0x1115)));
        add(
            "seq_len_huge",
            ".dcm",
            Expect::Failed,
            "a sequence whose defined length is 0xFFFFFFF0",
            &bytes,
        );

        // Sequences nested 20000 deep (undefined lengths, properly closed).
        let depth = 20_000;
        let mut nest = Vec::with_capacity(depth * 36);
        for _ in 0..depth {
            nest.extend(raw_elem_len(0x0008, 0x1115, b"SQ", 0xffff_ffff, &[]));
            nest.extend(item_header(0xe000, 0xffff_ffff));
        }
        for _ in 0..depth {
            nest.extend(item_header(0xe00d, 0));
            nest.extend(item_header(0xe0dd, 0));
        }
        let mut bytes = good.meta_bytes();
        bytes.extend(good.data_bytes_where(|e| (e.group, e.element) < (0x0008, 0x1115)));
        bytes.extend(nest);
        bytes.extend(good.data_bytes_where(|e| (e.group, e.element) > (0x0008, 0x1115)));
        add(
            "seq_nested_deep",
            ".dcm",
            Expect::Failed,
            "sequences nested 20000 deep",
            &bytes,
        );
    }

    // --- Transfer syntaxes and compressed data --------------------------------------------
    {
        let mut d = good.clone();
        d.set_transfer_syntax(MPEG2_MAIN);
        let bytes = d.with_pixel_bytes(&encapsulated(&[random_bytes(7, 512)]));
        add(
            "ts_mpeg2",
            ".dcm",
            Expect::Failed,
            "MPEG2 Main Profile transfer syntax (no decoder)",
            &bytes,
        );

        let mut d = good.clone();
        d.set_transfer_syntax("1.2.3.4.5.6.7.8.9");
        add(
            "ts_made_up",
            ".dcm",
            Expect::Failed,
            "a made-up transfer syntax UID",
            &d.to_bytes(),
        );

        // RLE Lossless claiming 65535 x 65535 (4 GiB decoded) from 64 bytes.
        let mut d = good.clone();
        d.set_transfer_syntax(RLE_LOSSLESS)
            .set_us(0x0028, 0x0010, 65535)
            .set_us(0x0028, 0x0011, 65535)
            .set_us(0x0028, 0x0100, 8)
            .set_us(0x0028, 0x0101, 8)
            .set_us(0x0028, 0x0102, 7);
        let bytes = d.with_pixel_bytes(&encapsulated(&[rle_fragment(4)]));
        add(
            "bomb_rle_65535",
            ".dcm",
            Expect::Failed,
            "RLE Lossless, Rows = Columns = 65535, 72-byte fragment",
            &bytes,
        );

        // RLE at 8192 x 8192 x 8 bits (64 MiB, under the frame limit) from 72 bytes.
        let mut d = good.clone();
        d.set_transfer_syntax(RLE_LOSSLESS)
            .set_us(0x0028, 0x0010, 8192)
            .set_us(0x0028, 0x0011, 8192)
            .set_us(0x0028, 0x0100, 8)
            .set_us(0x0028, 0x0101, 8)
            .set_us(0x0028, 0x0102, 7);
        let bytes = d.with_pixel_bytes(&encapsulated(&[rle_fragment(4)]));
        add(
            "bomb_rle_8192",
            ".dcm",
            Expect::Failed,
            "RLE Lossless, Rows = Columns = 8192, 72-byte fragment",
            &bytes,
        );

        // JPEG Lossless whose DICOM header says 65535 x 65535.
        let mut d = good.clone();
        d.set_transfer_syntax(JPEG_LOSSLESS_SV1)
            .set_us(0x0028, 0x0010, 65535)
            .set_us(0x0028, 0x0011, 65535);
        let bytes = d.with_pixel_bytes(&encapsulated(&[jpeg_lossless(65535, 65535, 16)]));
        add(
            "bomb_jpeg_ll_65535",
            ".dcm",
            Expect::Failed,
            "JPEG Lossless, DICOM and SOF3 both 65535 x 65535",
            &bytes,
        );

        // The real bomb: DICOM says 64 x 64, the JPEG stream says 65535 x 65535.
        let mut d = good.clone();
        d.set_transfer_syntax(JPEG_LOSSLESS_SV1);
        let bytes = d.with_pixel_bytes(&encapsulated(&[jpeg_lossless(65535, 65535, 16)]));
        add(
            "bomb_jpeg_ll_sof",
            ".dcm",
            Expect::Failed,
            "JPEG Lossless, DICOM 64 x 64 but SOF3 65535 x 65535",
            &bytes,
        );

        let mut d = good.clone();
        d.set_transfer_syntax(JPEG_BASELINE)
            .set_us(0x0028, 0x0100, 8)
            .set_us(0x0028, 0x0101, 8)
            .set_us(0x0028, 0x0102, 7);
        let bytes = d.with_pixel_bytes(&encapsulated(&[jpeg_baseline(65535, 65535)]));
        add(
            "bomb_jpeg_baseline_sof",
            ".dcm",
            Expect::Failed,
            "JPEG Baseline, DICOM 64 x 64 but SOF0 65535 x 65535",
            &bytes,
        );

        let mut d = good.clone();
        d.set_transfer_syntax(JPEG_2000)
            .set_us(0x0028, 0x0100, 8)
            .set_us(0x0028, 0x0101, 8)
            .set_us(0x0028, 0x0102, 7);
        let bytes = d.with_pixel_bytes(&encapsulated(&[j2k_codestream(60000, 60000)]));
        add(
            "bomb_j2k_siz",
            ".dcm",
            Expect::Failed,
            "JPEG 2000, DICOM 64 x 64 but SIZ 60000 x 60000",
            &bytes,
        );

        // Encapsulated data with garbage fragments.
        let mut d = good.clone();
        d.set_transfer_syntax(JPEG_LOSSLESS_SV1);
        let bytes = d.with_pixel_bytes(&encapsulated(&[random_bytes(11, 300)]));
        add(
            "jpeg_garbage",
            ".dcm",
            Expect::Failed,
            "JPEG Lossless transfer syntax, fragment of random bytes",
            &bytes,
        );

        // Native transfer syntax but encapsulated (undefined length) Pixel Data.
        let bytes = good.with_pixel_bytes(&encapsulated(&[random_bytes(13, 100)]));
        add(
            "native_encapsulated",
            ".dcm",
            Expect::Failed,
            "Explicit VR Little Endian with encapsulated Pixel Data",
            &bytes,
        );
    }

    // --- Magic and garbage ----------------------------------------------------------------
    {
        let mut bytes = vec![0u8; 128];
        bytes.extend_from_slice(b"DICM");
        bytes.extend(random_bytes(99, 2000));
        add(
            "dicm_garbage",
            ".dcm",
            Expect::Failed,
            "preamble + DICM, then random bytes",
            &bytes,
        );
        let mut bytes = b"DICM".to_vec();
        bytes.extend(random_bytes(101, 300));
        add(
            "dicm_at_0_garbage",
            ".dcm",
            Expect::Failed,
            "DICM at offset 0, then random bytes",
            &bytes,
        );
        // Looks like a bare data set (group 0008, explicit VR) and then is garbage.
        let mut bytes = raw_elem(0x0008, 0x0005, b"CS", b"ISO_IR 100");
        bytes.extend(random_bytes(103, 500));
        // The random bytes read as an element of an unknown VR claiming ~2.7 GB: rejected
        // before dicom-rs allocates it (without that check the header parse stops at the
        // high tag and the file is skipped as "no image").
        add(
            "bare_garbage",
            ".dcm",
            Expect::Failed,
            "bare data set header, then random bytes",
            &bytes,
        );
    }
    cases
}
