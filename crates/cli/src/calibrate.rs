//! `vram calibrate REPORTS...`: probe reports into a headroom rule the language accepts.
//!
//! Each report of `vram-probe run --check` holds, per GPU, the estimate and the measured peak.
//! Grouped by architecture, the observations give the estimate's worst excess
//! (`measured − estimate`), the run-to-run spread of the same check on the same kind of GPU,
//! and the runtime outside the framework's allocator (where the workload reported its own view).
//! The rule keeps enough to absorb the worst excess plus the spread:
//!
//! - `keep` = ⌈100 · max over observations of (excess⁺ + spread) / capacity⌉ %, at least 1 %;
//! - `at_least` = max of (excess⁺ + spread), rounded up to 256 MiB, at least 256 MiB;
//!
//! one `arch` block per architecture observed, and the general rule as the worst of them. The
//! output is a `headroom` block with the evidence in comments; a test parses it with vram-core.
//!
//! Only the fields used here are read from the report (its format is in `docs/probe.md`); the
//! CLI does not link the probe or NVML.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Deserialize;

use crate::args::CalibrateFormat;

const MIB: u64 = 1 << 20;
const STEP: u64 = 256 * MIB;

/// A value, or `{"unavailable": "reason"}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Reading<T> {
    Known(T),
    Unavailable {
        #[expect(dead_code, reason = "read to accept the shape; the reason is not needed")]
        unavailable: String,
    },
}

impl<T> Reading<T> {
    fn known(&self) -> Option<&T> {
        match self {
            Reading::Known(v) => Some(v),
            Reading::Unavailable { .. } => None,
        }
    }
}

impl<T: Copy> Reading<T> {
    fn value(&self) -> Option<T> {
        self.known().copied()
    }
}

#[derive(Debug, Deserialize)]
struct Report {
    schema_version: u32,
    kind: String,
    devices: Vec<DeviceRun>,
    check: Option<Check>,
}

#[derive(Debug, Deserialize)]
struct DeviceRun {
    index: u32,
    architecture: Reading<String>,
    #[serde(default)]
    views: Vec<Views>,
}

#[derive(Debug, Deserialize)]
struct Views {
    outside_allocator: Reading<i64>,
}

#[derive(Debug, Deserialize)]
struct Check {
    check: String,
    devices: Vec<CheckDevice>,
}

#[derive(Debug, Deserialize)]
struct CheckDevice {
    index: u32,
    estimate: u64,
    capacity_declared: u64,
    capacity_measured: Reading<u64>,
    measured: Reading<u64>,
}

/// One GPU of one run: the estimate and what was measured.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Observation {
    pub(crate) report: String,
    pub(crate) check: String,
    pub(crate) gpu: u32,
    pub(crate) architecture: String,
    pub(crate) capacity: u64,
    pub(crate) estimate: u64,
    pub(crate) measured: u64,
    /// Process view minus the framework's reserved peak, where the workload reported it.
    pub(crate) outside_allocator: Option<i64>,
}

/// What one architecture's observations give.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct ArchRule {
    pub(crate) architecture: String,
    pub(crate) observations: usize,
    pub(crate) ratio_min: f64,
    pub(crate) ratio_max: f64,
    /// The largest `measured − estimate`, 0 when every peak was within its estimate.
    pub(crate) worst_excess: u64,
    /// The largest spread of measured peaks for one check (max − min).
    pub(crate) spread: u64,
    pub(crate) outside_allocator: Option<(i64, i64)>,
    pub(crate) keep_percent: u64,
    pub(crate) at_least: u64,
}

fn read(path: &PathBuf) -> Result<Vec<Observation>, String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let report: Report =
        serde_json::from_str(&text).map_err(|e| format!("{name}: not a probe report: {e}"))?;
    if report.kind != "vram-probe-run" || report.schema_version != 1 {
        return Err(format!(
            "{name}: a `{}` of schema version {}, not a vram-probe-run report of version 1",
            report.kind, report.schema_version
        ));
    }
    let Some(check) = report.check else {
        return Err(format!("{name}: has no estimate to compare (run it with `--check`)"));
    };
    let mut out = Vec::new();
    for d in &check.devices {
        let Some(measured) = d.measured.value() else { continue };
        let run = report.devices.iter().find(|r| r.index == d.index);
        let architecture = run
            .and_then(|r| r.architecture.known())
            .map_or_else(|| "unknown".to_string(), Clone::clone);
        let outside_allocator =
            run.and_then(|r| r.views.iter().filter_map(|v| v.outside_allocator.value()).max());
        out.push(Observation {
            report: name.clone(),
            check: check.check.clone(),
            gpu: d.index,
            architecture,
            capacity: d.capacity_measured.value().unwrap_or(d.capacity_declared),
            estimate: d.estimate,
            measured,
            outside_allocator,
        });
    }
    Ok(out)
}

fn round_up(bytes: u64, step: u64) -> u64 {
    bytes.div_ceil(step).saturating_mul(step)
}

/// The rule for one architecture's observations.
pub(crate) fn rule(architecture: &str, observations: &[&Observation]) -> ArchRule {
    #[expect(clippy::cast_precision_loss, reason = "ratios for people")]
    let ratio = |o: &Observation| o.measured as f64 / o.estimate.max(1) as f64;
    let mut by_check: BTreeMap<(&str, u32), (u64, u64)> = BTreeMap::new();
    for o in observations {
        let entry = by_check.entry((o.check.as_str(), o.gpu)).or_insert((o.measured, o.measured));
        entry.0 = entry.0.min(o.measured);
        entry.1 = entry.1.max(o.measured);
    }
    let spread = by_check.values().map(|(lo, hi)| hi - lo).max().unwrap_or(0);
    let worst_excess =
        observations.iter().map(|o| o.measured.saturating_sub(o.estimate)).max().unwrap_or(0);
    let needed = |o: &Observation| o.measured.saturating_sub(o.estimate) + spread;
    let keep_percent = observations
        .iter()
        .map(|o| (needed(o).saturating_mul(100)).div_ceil(o.capacity.max(1)))
        .max()
        .unwrap_or(1)
        .max(1);
    let at_least =
        round_up(observations.iter().map(|o| needed(o)).max().unwrap_or(0), STEP).max(STEP);
    let outside: Vec<i64> = observations.iter().filter_map(|o| o.outside_allocator).collect();
    ArchRule {
        architecture: architecture.to_string(),
        observations: observations.len(),
        ratio_min: observations.iter().map(|o| ratio(o)).fold(f64::INFINITY, f64::min),
        ratio_max: observations.iter().map(|o| ratio(o)).fold(0.0, f64::max),
        worst_excess,
        spread,
        outside_allocator: outside.iter().min().copied().zip(outside.iter().max().copied()),
        keep_percent,
        at_least,
    }
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes.div_ceil(MIB))
}

fn signed_mib(bytes: i64) -> String {
    let abs = mib(bytes.unsigned_abs());
    if bytes < 0 { format!("-{abs}") } else { abs }
}

/// The headroom block, with the evidence as comments.
pub(crate) fn render(rules: &[ArchRule], reports: usize, name: &str) -> String {
    let mut s = String::new();
    let observations: usize = rules.iter().map(|r| r.observations).sum();
    let _ = writeln!(
        s,
        "# Calibrated by `vram calibrate` from {reports} probe report(s), {observations} GPU observation(s)."
    );
    let _ = writeln!(
        s,
        "# keep = worst (measured - estimate) plus run-to-run spread, as a share of the GPU; \
         at_least = the same in bytes, rounded up to 256 MiB."
    );
    for r in rules {
        let _ = writeln!(
            s,
            "# {}: {} observation(s), peak/estimate {:.3}-{:.3}, worst excess {}, spread {}",
            r.architecture,
            r.observations,
            r.ratio_min,
            r.ratio_max,
            mib(r.worst_excess),
            mib(r.spread)
        );
        if let Some((lo, hi)) = r.outside_allocator {
            let _ = writeln!(
                s,
                "#   runtime outside the framework's allocator (context, kernels, libraries): {}-{}; \
                 as a profile: runtime custom {{ context {} }}",
                signed_mib(lo),
                signed_mib(hi),
                signed_mib(hi.max(0))
            );
        }
    }
    let _ = writeln!(s, "# Use it with: check WORKLOAD on TARGET headroom {name}");
    let general_keep = rules.iter().map(|r| r.keep_percent).max().unwrap_or(1);
    let general_floor = rules.iter().map(|r| r.at_least).max().unwrap_or(STEP);
    let _ = writeln!(s, "headroom {name} \"Observed on delivered machines\" {{");
    let _ = writeln!(s, "  keep     {general_keep} %");
    let _ = writeln!(s, "  at_least {}", mib(general_floor));
    for r in rules.iter().filter(|r| r.architecture != "unknown") {
        let _ = writeln!(s, "  arch {} {{", r.architecture);
        let _ = writeln!(s, "    keep     {} %", r.keep_percent);
        let _ = writeln!(s, "    at_least {}", mib(r.at_least));
        let _ = writeln!(s, "  }}");
    }
    let _ = writeln!(s, "}}");
    s
}

/// Reads the reports and derives the rules, one per architecture.
pub(crate) fn calibrate(paths: &[PathBuf]) -> Result<Vec<ArchRule>, String> {
    let mut all = Vec::new();
    for path in paths {
        all.extend(read(path)?);
    }
    if all.is_empty() {
        return Err("no GPU in these reports has both an estimate and a measured peak".to_string());
    }
    let mut by_arch: BTreeMap<&str, Vec<&Observation>> = BTreeMap::new();
    for o in &all {
        by_arch.entry(o.architecture.as_str()).or_default().push(o);
    }
    Ok(by_arch.iter().map(|(arch, obs)| rule(arch, obs)).collect())
}

/// `vram calibrate`.
pub(crate) fn run(paths: &[PathBuf], name: &str, format: CalibrateFormat) -> u8 {
    match calibrate(paths) {
        Ok(rules) => {
            match format {
                CalibrateFormat::Vram => out!("{}", render(&rules, paths.len(), name)),
                CalibrateFormat::Json => outln!(
                    "{}",
                    serde_json::to_string_pretty(&rules).unwrap_or_else(|e| format!("\"{e}\""))
                ),
            }
            0
        }
        Err(error) => {
            eprintln!("error: {error}");
            2
        }
    }
}
