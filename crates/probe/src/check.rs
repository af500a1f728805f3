//! Reading a `.vram` file's estimate, and holding a measurement against it (`run --check`).
//!
//! The budget's devices are in rank order, and rank `i` is taken to run on GPU `i` as NVML
//! numbers them (set `CUDA_VISIBLE_DEVICES` in the same order). The measured figure is the
//! commands' combined per-process peak (NVML), else the device-level peak over the baseline;
//! it is compared with the estimate's device view (`used`), its uncertainty band, and the
//! headroom rule against the device's real capacity.

use serde::{Deserialize, Serialize};
use vram_core::budget::{CheckBudget, DeviceBudget};

use crate::reading::Reading;

/// A `.vram` file evaluated by vram-core.
#[derive(Debug)]
pub struct Plan {
    pub name: String,
    pub source: String,
    pub outcome: vram_core::Outcome,
}

/// Reads and evaluates `path`, with the model files its `from "path"`s name (read relative to
/// its folder, as `vram check` does); errors are rendered diagnostics or an IO message.
pub fn load(path: &std::path::Path) -> Result<Plan, String> {
    let name = path.display().to_string();
    let source = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let dir = path.parent().unwrap_or_else(|| std::path::Path::new(""));
    let outcome = vram_files::evaluate(&source, dir, vram_core::catalog::builtin());
    let errors: Vec<_> =
        outcome.diagnostics.iter().filter(|d| d.is_error() && d.code != "E040").cloned().collect();
    if !errors.is_empty() {
        return Err(vram_render::render(&errors, &name, &source, vram_render::Color::Never));
    }
    Ok(Plan { name, source, outcome })
}

/// The estimate beside the measurement, for one check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub file: String,
    pub check: String,
    pub title: Option<String>,
    pub devices: Vec<CheckDevice>,
    /// `pass` when the headroom rule held on every device at the measured peak.
    pub verdict: String,
    pub reasons: Vec<String>,
    /// Observations that do not fail the check (an estimate that was low).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckDevice {
    /// Rank in the check, and the GPU index it is compared with.
    pub index: u32,
    /// The declared device.
    pub device: String,
    /// The estimate in the device view (what NVML shows for the workload).
    pub estimate: u64,
    pub estimate_low: u64,
    pub estimate_high: u64,
    pub headroom: u64,
    pub headroom_rule: String,
    pub capacity_declared: u64,
    /// The GPU's real total.
    pub capacity_measured: Reading<u64>,
    pub measured: Reading<u64>,
    /// `process` or `device over baseline`.
    pub measured_view: Option<String>,
    /// `measured / estimate`.
    pub ratio: Option<f64>,
    /// `within_estimate`, `within_band`, `over_estimate`, `headroom_broken`, `unmeasured` or
    /// `no_gpu`.
    pub status: String,
}

/// What the run measured on one GPU, for [`compare`].
#[derive(Clone, Debug)]
pub struct Measured {
    pub total: Option<u64>,
    /// What this GPU's driver keeps of `total` (NVML's `reserved`).
    pub reserved: Option<u64>,
    pub peak: Option<(u64, &'static str)>,
}

/// Compares `check` with what was measured on each GPU (by index).
pub fn compare(file: &str, check: &CheckBudget, gpus: &[Measured]) -> CheckResult {
    let mut reasons = Vec::new();
    let mut notes = Vec::new();
    let devices: Vec<CheckDevice> = check
        .devices
        .iter()
        .map(|budget| {
            let gpu = gpus.get(budget.index as usize);
            let row = device_row(budget, gpu);
            match row.status.as_str() {
                "headroom_broken" => reasons.push(format!(
                    "GPU {}: the measured peak leaves less than the headroom ({})",
                    row.index, row.headroom_rule
                )),
                "unmeasured" => reasons.push(format!("GPU {}: no peak was measured", row.index)),
                "no_gpu" => reasons.push(format!(
                    "rank {} of the check has no GPU {} on this machine",
                    row.index, row.index
                )),
                "over_estimate" => notes.push(format!(
                    "GPU {}: the peak is above the estimate's band (ratio {:.3}); calibrate with \
                     `vram calibrate`",
                    row.index,
                    row.ratio.unwrap_or(0.0)
                )),
                _ => {}
            }
            row
        })
        .collect();
    CheckResult {
        file: file.to_string(),
        check: check.id.clone(),
        title: check.title.clone(),
        devices,
        verdict: if reasons.is_empty() { "pass" } else { "fail" }.to_string(),
        reasons,
        notes,
    }
}

fn device_row(budget: &DeviceBudget, gpu: Option<&Measured>) -> CheckDevice {
    let estimate = budget.used.0;
    let capacity_measured = match gpu.and_then(|g| g.total) {
        Some(total) => Reading::Known(total),
        None => Reading::unavailable("not measured"),
    };
    // What the workload could allocate: the total less what this GPU's driver keeps (the
    // catalog's reserve is one driver release's; NVML reads this one's).
    let reserved = gpu.and_then(|g| g.reserved).unwrap_or(budget.capacity.reserved.0);
    let capacity =
        capacity_measured.value().unwrap_or(budget.capacity.bytes.0).saturating_sub(reserved);
    let peak = gpu.and_then(|g| g.peak);
    #[expect(clippy::cast_precision_loss, reason = "a ratio for people")]
    let ratio = peak.filter(|_| estimate > 0).map(|(m, _)| m as f64 / estimate as f64);
    let status = match (gpu, peak) {
        (None, _) => "no_gpu",
        (Some(_), None) => "unmeasured",
        (Some(_), Some((m, _))) if m.saturating_add(budget.headroom.bytes.0) > capacity => {
            "headroom_broken"
        }
        (Some(_), Some((m, _))) if m <= estimate => "within_estimate",
        (Some(_), Some((m, _))) if m <= budget.band.high.0 => "within_band",
        (Some(_), Some(_)) => "over_estimate",
    };
    CheckDevice {
        index: budget.index,
        device: budget.device.clone(),
        estimate,
        estimate_low: budget.band.low.0,
        estimate_high: budget.band.high.0,
        headroom: budget.headroom.bytes.0,
        headroom_rule: budget.headroom.rule.clone(),
        capacity_declared: budget.capacity.bytes.0,
        capacity_measured,
        measured: match peak {
            Some((m, _)) => Reading::Known(m),
            None => Reading::unavailable("no successful sample"),
        },
        measured_view: peak.map(|(_, view)| view.to_string()),
        ratio,
        status: status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check on an L4 (23,034 MiB, of which its catalogued driver keeps 582,680,576 B).
    fn l4_check() -> CheckBudget {
        let outcome = vram_core::evaluate(
            "workload w { components { x 10 GiB persistent } }\ncheck w on l4\n",
        );
        outcome.budget.checks.into_iter().next().expect("one check")
    }

    #[test]
    fn headroom_is_judged_against_what_this_gpus_driver_leaves() {
        let check = l4_check();
        let budget = &check.devices[0];
        let total = budget.capacity.bytes.0;
        let headroom = budget.headroom.bytes.0;
        // A peak that leaves exactly the headroom beside the catalog's reserve.
        let peak = total - budget.capacity.reserved.0 - headroom;
        let row = |reserved: Option<u64>| {
            let gpu = Measured { total: Some(total), reserved, peak: Some((peak, "process")) };
            compare("plan.vram", &check, &[gpu]).devices[0].status.clone()
        };
        // NVML unread: the catalog's reserve; read and the same: the headroom holds.
        assert_ne!(row(None), "headroom_broken");
        assert_ne!(row(Some(budget.capacity.reserved.0)), "headroom_broken");
        // A driver that keeps one MiB more leaves the peak less than the headroom.
        assert_eq!(row(Some(budget.capacity.reserved.0 + (1 << 20))), "headroom_broken");
    }
}
