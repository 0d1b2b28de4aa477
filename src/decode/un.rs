//! Elements of known attributes stored with VR UN (and CP-246 sequences, which
//! [`super::patch`] turns into OB) are read again with the dictionary's VR, the way their
//! bytes were written: implicit VR little endian (PS3.5 6.2.2). Without this, a Rescale Slope
//! of "1" stored as UN reads as the number 49, and a VOI LUT Sequence stored as UN is lost.
//!
//! The bytes go through dicom-rs's implicit VR reader inside a one-element data set, after
//! [`super::guard`] has checked every length in them against the bytes there are.

use dicom_core::dictionary::{DataDictionary, DataDictionaryEntry};
use dicom_core::value::Value;
use dicom_core::{Tag, VR};
use dicom_dictionary_std::StandardDataDictionary;
use dicom_object::InMemDicomObject;

/// Re-reads the UN elements of known attributes of `obj` and of its items, recursively.
/// Returns a warning per attribute re-read (or left alone because its bytes are unusable).
pub fn normalize(obj: &mut InMemDicomObject) -> Vec<String> {
    let mut warnings = Vec::new();
    normalize_into(obj, 0, &mut warnings);
    warnings
}

fn normalize_into(obj: &mut InMemDicomObject, depth: usize, warnings: &mut Vec<String>) {
    if depth > super::guard::MAX_SEQUENCE_DEPTH {
        return;
    }
    let tags: Vec<Tag> = obj.tags().collect();
    for tag in tags {
        let Some(elem) = obj.get(tag) else {
            continue;
        };
        let Some(dict_vr) = dictionary_vr(tag) else {
            continue; // private or unknown: nothing to read it as
        };
        let bytes_vr = matches!(elem.vr(), VR::UN) || (elem.vr() == VR::OB && dict_vr == VR::SQ);
        if bytes_vr && dict_vr != VR::UN && dict_vr != elem.vr() {
            let Value::Primitive(p) = elem.value() else {
                continue;
            };
            let bytes = p.to_bytes().into_owned();
            match reread(tag, dict_vr, &bytes) {
                Ok(new) => {
                    warnings.push(format!(
                        "({:04X},{:04X}) stored as {}: read as {}",
                        tag.group(),
                        tag.element(),
                        stored_as(elem.vr()),
                        new.vr()
                    ));
                    obj.put(new);
                }
                Err(e) => warnings.push(format!(
                    "({:04X},{:04X}) stored as {} cannot be read as {dict_vr}: {e}; ignored",
                    tag.group(),
                    tag.element(),
                    stored_as(elem.vr())
                )),
            }
        }
        // Items of sequences (re-read ones included) may hold UN elements too.
        if let Some(mut elem) = obj.take(tag) {
            if let Some(items) = elem.items_mut() {
                for item in items.iter_mut() {
                    normalize_into(item, depth + 1, warnings);
                }
            }
            obj.put(elem);
        }
    }
}

/// How the element was stored: an OB where a sequence belongs is a CP-246 sequence that
/// [`super::patch`] turned into OB.
fn stored_as(vr: VR) -> &'static str {
    match vr {
        VR::OB => "UN with undefined length (CP-246)",
        _ => "UN",
    }
}

/// The VR the standard dictionary gives `tag` (`None` for private and unknown tags).
fn dictionary_vr(tag: Tag) -> Option<VR> {
    if tag.group() % 2 == 1 {
        return None;
    }
    StandardDataDictionary
        .by_tag(tag)
        .map(|e| e.vr().relaxed())
        .filter(|&vr| vr != VR::UN)
}

/// Reads `bytes` (the value of `tag`, implicit VR little endian) as an element of `vr`.
fn reread(tag: Tag, vr: VR, bytes: &[u8]) -> Result<dicom_object::mem::InMemElement, String> {
    let mut data = Vec::with_capacity(bytes.len() + 8);
    data.extend(tag.group().to_le_bytes());
    data.extend(tag.element().to_le_bytes());
    // A sequence whose bytes end with a Sequence Delimitation Item (CP-246) keeps its
    // undefined length; anything else is read with its own.
    let delimited = vr == VR::SQ && bytes.ends_with(&[0xfe, 0xff, 0xdd, 0xe0, 0, 0, 0, 0]);
    let len = if delimited {
        u32::MAX
    } else {
        u32::try_from(bytes.len()).map_err(|_| "too long".to_string())?
    };
    data.extend(len.to_le_bytes());
    data.extend_from_slice(bytes);
    // Every length inside must fit before dicom-rs allocates it.
    super::guard::check_implicit_bytes(&data)?;
    let ts = dicom_transfer_syntax_registry::entries::IMPLICIT_VR_LITTLE_ENDIAN.erased();
    let obj = InMemDicomObject::read_dataset_with_ts(&data[..], &ts)
        .map_err(|e| super::error_chain(&e))?;
    let elem = obj.get(tag).ok_or("nothing read")?;
    if elem.vr() != vr && !(vr == VR::SQ && elem.items().is_some()) {
        return Err(format!("read as {}", elem.vr()));
    }
    Ok(elem.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicom_core::{DataElement, PrimitiveValue};
    use dicom_dictionary_std::tags;

    fn un(tag: Tag, bytes: &[u8]) -> dicom_object::mem::InMemElement {
        DataElement::new(tag, VR::UN, PrimitiveValue::from(bytes.to_vec()))
    }

    #[test]
    fn known_attributes_stored_as_un_are_read_with_the_dictionary_vr() {
        let mut obj = InMemDicomObject::new_empty();
        obj.put(un(tags::RESCALE_SLOPE, b"1 "));
        obj.put(un(tags::WINDOW_CENTER, b"40\\-600"));
        obj.put(un(tags::ROWS, &512u16.to_le_bytes()));
        obj.put(un(Tag(0x0009, 0x1010), b"private"));
        let warnings = normalize(&mut obj);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        let slope = obj.get(tags::RESCALE_SLOPE).unwrap();
        assert_eq!(slope.vr(), VR::DS);
        assert_eq!(slope.to_float64().unwrap(), 1.0);
        let centers = obj
            .get(tags::WINDOW_CENTER)
            .unwrap()
            .to_multi_float64()
            .unwrap();
        assert_eq!(centers, vec![40.0, -600.0]);
        assert_eq!(obj.get(tags::ROWS).unwrap().to_int::<u32>().unwrap(), 512);
        assert_eq!(obj.get(Tag(0x0009, 0x1010)).unwrap().vr(), VR::UN);
    }

    #[test]
    fn sequences_stored_as_un_are_parsed_as_implicit_vr_items() {
        // One item holding (0028,3003) LUT Explanation "AB", then a delimiter (CP-246).
        let mut v = vec![0xfe, 0xff, 0x00, 0xe0, 10, 0, 0, 0];
        v.extend([0x28, 0x00, 0x03, 0x30, 2, 0, 0, 0, b'A', b'B']);
        v.extend([0xfe, 0xff, 0xdd, 0xe0, 0, 0, 0, 0]);
        let mut obj = InMemDicomObject::new_empty();
        obj.put(DataElement::new(
            tags::VOILUT_SEQUENCE,
            VR::OB,
            PrimitiveValue::from(v.clone()),
        ));
        normalize(&mut obj);
        let items = obj.get(tags::VOILUT_SEQUENCE).unwrap().items().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(
            items[0]
                .get(tags::LUT_EXPLANATION)
                .unwrap()
                .to_str()
                .unwrap(),
            "AB"
        );
        // A length inside that runs past the bytes is refused before anything is allocated.
        v[4..8].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
        let mut obj = InMemDicomObject::new_empty();
        obj.put(un(tags::VOILUT_SEQUENCE, &v));
        let warnings = normalize(&mut obj);
        assert!(warnings[0].contains("ignored"), "{warnings:?}");
        assert_eq!(obj.get(tags::VOILUT_SEQUENCE).unwrap().vr(), VR::UN);
    }
}
