//! `vram-probe compare A B`: two runs side by side (peak, time, errors, quality).
//!
//! This is how a precision or batch change is validated: the memory it saves (per GPU peak),
//! what it costs in time, and whether the workload's own quality metric held.

use serde::{Deserialize, Serialize};

use crate::framework::Quality;
use crate::report::RunReport;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub a: RunSummary,
    pub b: RunSummary,
    /// Per GPU index present in either run.
    pub devices: Vec<DeviceDelta>,
    /// `b − a`, in ms.
    pub duration_delta_ms: f64,
    /// The quality change, when both runs report the same metric.
    pub quality: Option<QualityDelta>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub file: String,
    pub duration_ms: f64,
    pub verdict: String,
    pub failed_commands: usize,
    pub oom_lines: usize,
    pub gap_samples: u64,
    pub quality: Option<Quality>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceDelta {
    pub index: u32,
    /// The measured peak in each run (processes, else device over baseline), if any.
    pub a: Option<u64>,
    pub b: Option<u64>,
    /// Which view each figure is (`process` or `device over baseline`).
    pub view_a: Option<String>,
    pub view_b: Option<String>,
    /// `a − b`: memory saved by B (negative when B needs more).
    pub saved: Option<i64>,
    /// `saved / a`, in percent.
    pub saved_percent: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualityDelta {
    pub metric: String,
    pub a: f64,
    pub b: f64,
    /// `b − a`.
    pub delta: f64,
    /// `better`, `same` or `worse`, from the metric's direction.
    pub change: String,
}

fn summary(file: &str, report: &RunReport) -> RunSummary {
    RunSummary {
        file: file.to_string(),
        duration_ms: report.duration_ms,
        verdict: report.verdict.clone(),
        failed_commands: report.commands.iter().filter(|c| !c.exit.success).count(),
        oom_lines: report.commands.iter().map(|c| c.oom.len()).sum(),
        gap_samples: report.devices.iter().flat_map(|d| &d.gaps).map(|g| g.failed_samples).sum(),
        quality: report
            .commands
            .iter()
            .find_map(|c| c.framework.as_ref().and_then(|f| f.quality.clone())),
    }
}

/// Compares run `b` with run `a`.
pub fn compare(file_a: &str, a: &RunReport, file_b: &str, b: &RunReport) -> Comparison {
    let mut indices: Vec<u32> = a.devices.iter().chain(&b.devices).map(|d| d.index).collect();
    indices.sort_unstable();
    indices.dedup();
    let measured = |r: &RunReport, index: u32| {
        r.devices.iter().position(|d| d.index == index).and_then(|slot| r.measured(slot))
    };
    let devices = indices
        .into_iter()
        .map(|index| {
            let ma = measured(a, index);
            let mb = measured(b, index);
            let saved = match (ma, mb) {
                (Some((x, _)), Some((y, _))) => Some(signed(x) - signed(y)),
                _ => None,
            };
            #[expect(clippy::cast_precision_loss, reason = "a percentage for people")]
            let saved_percent = match (saved, ma) {
                (Some(s), Some((x, _))) if x > 0 => Some(s as f64 / x as f64 * 100.0),
                _ => None,
            };
            DeviceDelta {
                index,
                a: ma.map(|m| m.0),
                b: mb.map(|m| m.0),
                view_a: ma.map(|m| m.1.to_string()),
                view_b: mb.map(|m| m.1.to_string()),
                saved,
                saved_percent,
            }
        })
        .collect();
    let sa = summary(file_a, a);
    let sb = summary(file_b, b);
    let quality = match (&sa.quality, &sb.quality) {
        (Some(qa), Some(qb)) if qa.metric == qb.metric => {
            let delta = qb.value - qa.value;
            let better = if qa.higher_is_better { delta > 0.0 } else { delta < 0.0 };
            let change = if delta == 0.0 {
                "same"
            } else if better {
                "better"
            } else {
                "worse"
            };
            Some(QualityDelta {
                metric: qa.metric.clone(),
                a: qa.value,
                b: qb.value,
                delta,
                change: change.to_string(),
            })
        }
        _ => None,
    };
    Comparison {
        duration_delta_ms: sb.duration_ms - sa.duration_ms,
        a: sa,
        b: sb,
        devices,
        quality,
    }
}

fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}
