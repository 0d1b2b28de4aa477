//! Encoders and atomic writers: the last stage of a slice.

pub mod atomic;
pub mod dicom;
pub mod encode;
pub mod error;
pub mod naming;
pub mod options;
pub mod png;
pub mod verify;
pub mod zlib;
