//! The render chain shared by every backend: the user's window vocabulary ([`spec`]), the
//! per-frame plan as data ([`plan`]), the exact scalar arithmetic ([`chain`], [`color`]) and
//! its compilation to tables ([`table`]).

pub mod chain;
pub mod color;
pub mod overlay;
pub mod plan;
pub mod spec;
pub mod table;

pub use plan::{plan_frame, FramePlan, RenderOptions};
