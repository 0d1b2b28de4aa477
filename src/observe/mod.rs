//! What happened during a run, as it happens: [`stats`] (per-stage HDR histograms, counters,
//! gauges and GPU figures that the dashboard, the summary and the report read), [`hdr`] (their
//! histograms as report text, for merging reports) and [`trace`]
//! (the Chrome trace-event timeline). Stages record; views only read.

pub mod hdr;
pub mod stats;
pub mod trace;
