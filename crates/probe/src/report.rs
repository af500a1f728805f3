//! The acceptance report that `vram-probe run` writes: one serde model, versioned
//! ([`crate::devices::SCHEMA_VERSION`]), documented field by field in `docs/probe.md`.
//!
//! Bump the schema version whenever a field changes meaning or disappears. Figures that could
//! not be measured are [`Reading::Unavailable`] with the reason, never 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::check::CheckResult;
use crate::framework::FrameworkView;
use crate::nvml::{DeviceInfo, SystemInfo};
use crate::oom::OomMatch;
use crate::reading::Reading;
use crate::sampler::{Gap, Outlived, Peak, SamplingStats, Timeline};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub schema_version: u32,
    /// `vram-probe-run`.
    pub kind: String,
    pub software: Software,
    pub conditions: Conditions,
    /// How the run ended: `exited`, `interrupted` by a signal the probe forwarded, or
    /// `timed_out` (`--timeout`: the probe stopped the commands).
    pub ended_by: String,
    /// The signal that interrupted the run (`SIGINT`, `SIGTERM`).
    pub signal: Option<String>,
    /// From the first command's start to the last one's end.
    pub duration_ms: f64,
    pub commands: Vec<CommandReport>,
    pub devices: Vec<DeviceRun>,
    pub timeline: Timeline,
    pub sampling: SamplingStats,
    /// The estimate beside the measurement, with `--check`.
    pub check: Option<CheckResult>,
    /// `pass` or `fail`.
    pub verdict: String,
    /// Why it failed (empty on a pass).
    pub reasons: Vec<String>,
    /// What the reader should know that does not fail the run (a figure the platform never gives,
    /// and what is reported instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Software versions: what produced and what ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Software {
    pub probe_version: String,
    pub vram_core_version: String,
    pub system: SystemInfo,
    /// The Linux kernel release.
    pub kernel: Reading<String>,
}

fn count_not_recorded() -> Reading<u32> {
    Reading::unavailable("not recorded (a report of an earlier probe)")
}

/// The conditions of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// When the run started, ms since the Unix epoch.
    pub started_at_unix_ms: u64,
    pub interval_us: u64,
    /// `--timeout`, when given.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// How many GPUs NVML counted, or why it could not.
    #[serde(default = "count_not_recorded")]
    pub device_count: Reading<u32>,
    /// `CUDA_VISIBLE_DEVICES` as the commands inherit it: how their device numbers map to
    /// NVML's. Recorded always (it is a condition of the run, not a secret); absent when unset.
    #[serde(default)]
    pub cuda_visible_devices: Option<String>,
    /// Every GPU as it was before the commands started (identity, memory, MIG, ECC).
    pub devices: Vec<DeviceInfo>,
    /// Whether command lines and the environment were recorded (`--record-command`).
    pub command_recorded: bool,
    /// The environment of the probe, only with `--record-command`.
    pub environment: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandReport {
    pub index: usize,
    /// The command line, only with `--record-command`.
    pub argv: Option<Vec<String>>,
    pub pid: Option<u32>,
    /// Why it could not start.
    pub spawn_error: Option<String>,
    pub started_ms: f64,
    pub duration_ms: f64,
    pub exit: Exit,
    /// Output lines that look like an out-of-memory error.
    pub oom: Vec<OomMatch>,
    /// What the workload itself reported (allocated and reserved peaks, quality).
    pub framework: Option<FrameworkView>,
    /// Why the framework view could not be read, when the workload wrote a bad one.
    pub framework_error: Option<String>,
    /// Its processes that still held GPU memory after its own process exited (a fork, a
    /// daemon): the probe kept measuring until they released it, or until stopped.
    #[serde(default)]
    pub outlived: Option<Outlived>,
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it (`SIGSEGV`, `SIGKILL`), when it crashed or was killed.
    pub signal: Option<String>,
    pub success: bool,
}

/// One GPU over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceRun {
    pub index: u32,
    pub uuid: Reading<String>,
    pub name: Reading<String>,
    pub architecture: Reading<String>,
    pub total: Reading<u64>,
    /// Device-level used memory just before the commands started.
    pub baseline_used: Reading<u64>,
    /// The device-level peak (NVML's `used`).
    pub peak_used: Reading<Peak>,
    /// `peak_used − baseline_used`: what the run added at its peak.
    pub peak_over_baseline: Reading<u64>,
    /// Per command: the peak of its processes (itself and its descendants) on this GPU.
    pub command_peaks: Vec<Reading<Peak>>,
    /// All commands together at the same instant: the measured overlap, not a sum of peaks.
    pub combined_peak: Reading<Peak>,
    /// The sum of the commands' separate peaks (what summing would have assumed).
    pub sum_of_command_peaks: Reading<u64>,
    /// Processes on this GPU that belong to no command.
    pub others_peak: Reading<Peak>,
    /// Framework, process and device views side by side, per command that reported a view.
    pub views: Vec<Views>,
    pub gaps: Vec<Gap>,
    /// Why NVML's process list failed on every sample, if it did (some platforms never give
    /// one): the per-process figures are then unavailable for the whole run, and the device view
    /// over the baseline is the measurement. Not a gap in the peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_list_unavailable: Option<String>,
}

/// The three views of one command's memory on one device, and what lies between them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Views {
    pub command: usize,
    /// `torch.cuda.max_memory_allocated()`: live tensors.
    pub framework_allocated: u64,
    /// `torch.cuda.max_memory_reserved()`: tensors and the allocator's cache.
    pub framework_reserved: u64,
    /// NVML's per-process peak for the command's process tree.
    pub process: Reading<u64>,
    /// The device-level peak over the baseline.
    pub device: Reading<u64>,
    /// `reserved − allocated`: the caching allocator's cache and fragmentation.
    pub allocator_cache: u64,
    /// `process − reserved`: the CUDA context, kernels, library workspaces (cuBLAS, NCCL) and
    /// anything else allocated outside the framework's allocator.
    pub outside_allocator: Reading<i64>,
    /// `device − process`: other processes and the driver.
    pub outside_process: Reading<i64>,
}

impl RunReport {
    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Reads a report written by `vram-probe run`.
    pub fn from_json(text: &str) -> Result<RunReport, String> {
        serde_json::from_str(text).map_err(|e| format!("not a vram-probe run report: {e}"))
    }

    /// The measured peak of a device for comparisons: the commands' combined process peak
    /// when NVML gave per-process figures, else the device-level peak over the baseline.
    pub fn measured(&self, device: usize) -> Option<(u64, &'static str)> {
        let d = self.devices.get(device)?;
        if let Some(p) = d.combined_peak.known() {
            return Some((p.bytes, "process"));
        }
        d.peak_over_baseline.value().map(|b| (b, "device over baseline"))
    }
}
