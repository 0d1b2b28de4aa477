//! One module per subcommand: each turns its parsed arguments into library calls and returns
//! the exit code.

pub mod bench_decode;
pub mod bench_encode;
pub mod bench_gpu_encode;
pub mod bench_io;
pub mod bench_listen;
pub mod bench_transfer;
pub mod inspect;
pub mod inspect_folder;
pub mod listen;
mod live;
pub mod record;
pub mod report_merge;
pub mod run;
pub mod scan;
pub mod single;
pub mod synth;
pub mod watch;
