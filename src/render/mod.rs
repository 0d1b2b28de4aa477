//! The render chain shared by every backend: the user's window vocabulary ([`spec`]), the
//! per-frame plan as data ([`plan`]), the exact scalar arithmetic ([`chain`], [`color`]) and
//! its compilation to tables ([`table`]); the operators applied to the rendering (resize,
//! rotation, flips, inversion: [`ops`]) and the frames a run takes ([`frames`]).

pub mod chain;
pub mod color;
pub mod error;
pub mod frames;
pub mod ops;
pub mod overlay;
pub mod plan;
pub mod spec;
pub mod table;

pub use plan::{plan_frame, FramePlan, RenderOptions};
