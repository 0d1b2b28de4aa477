//! What happened during a run, as it happens. A stage thread reports each interval it
//! measured once, to its [`StageClock`] (made once per thread from the run's [`stats::Stats`]
//! and optional [`trace::Tracer`]), which feeds both views from the same instants:
//! [`stats`] (per-stage HDR histograms, counters, gauges and GPU figures that the dashboard,
//! the summary and the report read; [`hdr`] writes their histograms as report text, for merging
//! reports) and [`trace`] (the Chrome trace-event timeline, written only with `--trace`).
//! Stages record; views only read.

pub mod clock;
pub mod cpu;
pub mod hdr;
pub mod stats;
pub mod trace;

pub use clock::{Parts, Piece, StageClock};
