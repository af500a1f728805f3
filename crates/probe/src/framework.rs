//! The framework's own view of a run, as the workload reports it.
//!
//! A framework knows what its allocator did (PyTorch's `max_memory_allocated` and
//! `max_memory_reserved`), which NVML cannot see; NVML knows the whole process and device,
//! which the framework cannot. The probe gives each command the path of a file in the
//! [`FILE_ENV`] environment variable; the workload writes a [`FrameworkView`] there at exit
//! (`python/vram_probe_report.py` does this for PyTorch), and the probe puts it in the report
//! beside the process and device views. The format is documented in `docs/probe.md`.

use serde::{Deserialize, Serialize};

/// The environment variable that tells a workload where to write its view.
pub const FILE_ENV: &str = "VRAM_PROBE_FRAMEWORK_FILE";

/// What a workload writes: `{"schema_version": 1, "kind": "vram-probe-framework", ...}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrameworkView {
    pub schema_version: u32,
    /// `vram-probe-framework`.
    pub kind: String,
    /// `pytorch`.
    pub framework: String,
    pub framework_version: Option<String>,
    /// The CUDA version the framework was built with.
    pub cuda_version: Option<String>,
    pub devices: Vec<FrameworkDevice>,
    /// The workload's own measure of output quality, to compare runs (a precision change).
    #[serde(default)]
    pub quality: Option<Quality>,
}

/// One device as the framework numbers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrameworkDevice {
    /// The framework's device index (after CUDA_VISIBLE_DEVICES).
    pub index: u32,
    /// The device's UUID (`GPU-…`) when the framework knows it; it maps the device to NVML's
    /// numbering. Without it, the framework's index is taken as NVML's.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Peak bytes in live tensors.
    pub allocated_peak: u64,
    /// Peak bytes the caching allocator held.
    pub reserved_peak: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    /// `eval_loss`, `accuracy`, …
    pub metric: String,
    pub value: f64,
    /// Whether a larger value is better (accuracy) or worse (loss).
    pub higher_is_better: bool,
}

/// Reads a view file; `Ok(None)` when the workload wrote none.
pub fn read(path: &std::path::Path) -> Result<Option<FrameworkView>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("the framework view {} is not valid: {e}", path.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(format!("cannot read the framework view {}: {error}", path.display())),
    }
}
