//! What the listener negotiates: the abstract syntaxes (Verification and the storage SOP
//! classes of images) and the transfer syntaxes dicomflow's decoders read. Among the syntaxes
//! a sender proposes for one presentation context, the first one listed here is not
//! preferred: dicom-ul accepts the first the *sender* lists that is also in
//! [`TRANSFER_SYNTAXES`], so a sender that proposes its file's compressed syntax first keeps
//! it (no transcoding on either side).

use dicom_dictionary_std::uids;

/// Transfer syntaxes whose data sets and pixel data dicomflow decodes (explicit big endian is
/// retired, and still found in archives).
#[allow(deprecated)]
pub const TRANSFER_SYNTAXES: &[&str] = &[
    uids::EXPLICIT_VR_LITTLE_ENDIAN,
    uids::IMPLICIT_VR_LITTLE_ENDIAN,
    uids::DEFLATED_EXPLICIT_VR_LITTLE_ENDIAN,
    uids::EXPLICIT_VR_BIG_ENDIAN,
    uids::JPEG_BASELINE8_BIT,
    uids::JPEG_EXTENDED12_BIT,
    uids::JPEG_LOSSLESS,
    uids::JPEG_LOSSLESS_SV1,
    uids::JPEGLS_LOSSLESS,
    uids::JPEGLS_NEAR_LOSSLESS,
    uids::JPEG2000_LOSSLESS,
    uids::JPEG2000,
    uids::HTJ2K_LOSSLESS,
    uids::HTJ2K_LOSSLESS_RPCL,
    uids::HTJ2K,
    uids::RLE_LOSSLESS,
];

/// Storage SOP classes of images (every "… Image Storage" class of PS3.4 Annex B, retired
/// ones included because older modalities still send them, and the enhanced US volume),
/// plus Verification for C-ECHO.
#[allow(deprecated)]
pub const ABSTRACT_SYNTAXES: &[&str] = &[
    uids::VERIFICATION,
    uids::COMPUTED_RADIOGRAPHY_IMAGE_STORAGE,
    uids::DIGITAL_X_RAY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::DIGITAL_X_RAY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::DIGITAL_MAMMOGRAPHY_X_RAY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::DIGITAL_MAMMOGRAPHY_X_RAY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::DIGITAL_INTRA_ORAL_X_RAY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::DIGITAL_INTRA_ORAL_X_RAY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::X_RAY_ANGIOGRAPHIC_IMAGE_STORAGE,
    uids::ENHANCED_XA_IMAGE_STORAGE,
    uids::X_RAY_RADIOFLUOROSCOPIC_IMAGE_STORAGE,
    uids::ENHANCED_XRF_IMAGE_STORAGE,
    uids::X_RAY_ANGIOGRAPHIC_BI_PLANE_IMAGE_STORAGE,
    uids::POSITRON_EMISSION_TOMOGRAPHY_IMAGE_STORAGE,
    uids::LEGACY_CONVERTED_ENHANCED_PET_IMAGE_STORAGE,
    uids::X_RAY3_D_ANGIOGRAPHIC_IMAGE_STORAGE,
    uids::X_RAY3_D_CRANIOFACIAL_IMAGE_STORAGE,
    uids::BREAST_TOMOSYNTHESIS_IMAGE_STORAGE,
    uids::BREAST_PROJECTION_X_RAY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::BREAST_PROJECTION_X_RAY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::ENHANCED_PET_IMAGE_STORAGE,
    uids::INTRAVASCULAR_OPTICAL_COHERENCE_TOMOGRAPHY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::INTRAVASCULAR_OPTICAL_COHERENCE_TOMOGRAPHY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::CT_IMAGE_STORAGE,
    uids::ENHANCED_CT_IMAGE_STORAGE,
    uids::LEGACY_CONVERTED_ENHANCED_CT_IMAGE_STORAGE,
    uids::CT_IMAGE_STORAGE_FOR_PROCESSING,
    uids::ENHANCED_CT_IMAGE_STORAGE_FOR_PROCESSING,
    uids::LEGACY_CONVERTED_ENHANCED_CT_IMAGE_STORAGE_FOR_PROCESSING,
    uids::NUCLEAR_MEDICINE_IMAGE_STORAGE,
    uids::ULTRASOUND_MULTI_FRAME_IMAGE_STORAGE_RETIRED,
    uids::ULTRASOUND_MULTI_FRAME_IMAGE_STORAGE,
    uids::MR_IMAGE_STORAGE,
    uids::ENHANCED_MR_IMAGE_STORAGE,
    uids::ENHANCED_MR_COLOR_IMAGE_STORAGE,
    uids::LEGACY_CONVERTED_ENHANCED_MR_IMAGE_STORAGE,
    uids::RT_IMAGE_STORAGE,
    uids::ENHANCED_RT_IMAGE_STORAGE,
    uids::ENHANCED_CONTINUOUS_RT_IMAGE_STORAGE,
    uids::NUCLEAR_MEDICINE_IMAGE_STORAGE_RETIRED,
    uids::DICOSCT_IMAGE_STORAGE,
    uids::DICOS_DIGITAL_X_RAY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::DICOS_DIGITAL_X_RAY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::ULTRASOUND_IMAGE_STORAGE_RETIRED,
    uids::ULTRASOUND_IMAGE_STORAGE,
    uids::ENHANCED_US_VOLUME_STORAGE,
    uids::PHOTOACOUSTIC_IMAGE_STORAGE,
    uids::EDDY_CURRENT_IMAGE_STORAGE,
    uids::EDDY_CURRENT_MULTI_FRAME_IMAGE_STORAGE,
    uids::THERMOGRAPHY_IMAGE_STORAGE,
    uids::THERMOGRAPHY_MULTI_FRAME_IMAGE_STORAGE,
    uids::SECONDARY_CAPTURE_IMAGE_STORAGE,
    uids::MULTI_FRAME_SINGLE_BIT_SECONDARY_CAPTURE_IMAGE_STORAGE,
    uids::MULTI_FRAME_GRAYSCALE_BYTE_SECONDARY_CAPTURE_IMAGE_STORAGE,
    uids::MULTI_FRAME_GRAYSCALE_WORD_SECONDARY_CAPTURE_IMAGE_STORAGE,
    uids::MULTI_FRAME_TRUE_COLOR_SECONDARY_CAPTURE_IMAGE_STORAGE,
    uids::VL_IMAGE_STORAGE_TRIAL,
    uids::VL_ENDOSCOPIC_IMAGE_STORAGE,
    uids::VIDEO_ENDOSCOPIC_IMAGE_STORAGE,
    uids::VL_MICROSCOPIC_IMAGE_STORAGE,
    uids::VIDEO_MICROSCOPIC_IMAGE_STORAGE,
    uids::VL_SLIDE_COORDINATES_MICROSCOPIC_IMAGE_STORAGE,
    uids::VL_PHOTOGRAPHIC_IMAGE_STORAGE,
    uids::VIDEO_PHOTOGRAPHIC_IMAGE_STORAGE,
    uids::OPHTHALMIC_PHOTOGRAPHY8_BIT_IMAGE_STORAGE,
    uids::OPHTHALMIC_PHOTOGRAPHY16_BIT_IMAGE_STORAGE,
    uids::OPHTHALMIC_TOMOGRAPHY_IMAGE_STORAGE,
    uids::WIDE_FIELD_OPHTHALMIC_PHOTOGRAPHY_STEREOGRAPHIC_PROJECTION_IMAGE_STORAGE,
    uids::WIDE_FIELD_OPHTHALMIC_PHOTOGRAPHY3_D_COORDINATES_IMAGE_STORAGE,
    uids::OPHTHALMIC_OPTICAL_COHERENCE_TOMOGRAPHY_EN_FACE_IMAGE_STORAGE,
    uids::VL_WHOLE_SLIDE_MICROSCOPY_IMAGE_STORAGE,
    uids::DERMOSCOPIC_PHOTOGRAPHY_IMAGE_STORAGE,
    uids::CONFOCAL_MICROSCOPY_IMAGE_STORAGE,
    uids::CONFOCAL_MICROSCOPY_TILED_PYRAMIDAL_IMAGE_STORAGE,
    uids::VL_MULTI_FRAME_IMAGE_STORAGE_TRIAL,
];

/// True for a storage SOP class the listener accepts.
pub fn is_image_storage(sop_class: &str) -> bool {
    sop_class != uids::VERIFICATION && ABSTRACT_SYNTAXES.contains(&sop_class)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicom_encoding::transfer_syntax::TransferSyntaxIndex;

    #[test]
    fn every_transfer_syntax_is_known_to_the_registry_the_association_checks() {
        // dicom-ul accepts a listed syntax only when the registry does not mark it
        // unsupported: a missing codec feature would silently refuse it.
        for ts in TRANSFER_SYNTAXES {
            let entry = dicom_transfer_syntax_registry::TransferSyntaxRegistry.get(ts);
            assert!(
                entry.is_some_and(|e| !e.is_unsupported()),
                "{ts} is not usable"
            );
        }
        assert!(is_image_storage(uids::CT_IMAGE_STORAGE));
        assert!(!is_image_storage(uids::VERIFICATION));
        assert!(!is_image_storage(uids::BASIC_TEXT_SR_STORAGE));
    }
}
