//! vram-probe: checks delivered GPUs against a `.vram` plan and measures real workloads.
//!
//! - [`nvml`] opens NVML at run time (nvml-wrapper) and reads devices; a missing driver is an
//!   error value, never a panic.
//! - [`reading::Reading`] is how a value that NVML could not give is carried: the reason, never 0.
//!
//! The binary (`src/main.rs`) parses arguments, prints and chooses exit codes.

pub mod nvml;
pub mod reading;

/// The version of this crate, recorded in reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod attribution;
pub mod check;
pub mod compare;
pub mod devices;
pub mod framework;
pub mod oom;
pub mod prometheus;
pub mod report;
pub mod run;
pub mod sampler;
pub mod ticker;
pub mod timeline;
pub mod verify;
