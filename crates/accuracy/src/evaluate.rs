//! Runs the core on a point's source and reads the estimate the measurement corresponds to.
//!
//! A generated source that does not check is a bug in the harness, not a property of the data:
//! it is reported as [`Outcome::HarnessError`] with the core's diagnostics, and the test suite
//! fails on it.

use vram_core::budget::{Category, CheckBudget, DeviceBudget, HeldBy};

use crate::data::Point;
use crate::express::{Expressed, Expression};
use crate::gaps::{Assumption, Gap};
use crate::target::{Scope, Selector, Target};
use crate::units::UnitRule;
use crate::views::View;

/// One point's result.
#[derive(Clone, Debug)]
pub struct PointResult {
    pub id: String,
    pub workload: String,
    pub model: String,
    pub quality: String,
    pub outcome: Outcome,
}

/// What happened to a point.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// A peak or component, compared as a number.
    Compared(Compared),
    /// An out-of-memory report or a largest run that fitted, compared as a verdict.
    Verdict(VerdictResult),
    /// Not expressible: every reason.
    Unexpressed(Vec<Gap>),
    /// The generated source did not check: a harness bug.
    HarnessError { source: String, diagnostics: Vec<String> },
}

/// A numeric comparison.
#[derive(Clone, Debug)]
pub struct Compared {
    pub target: Target,
    pub measured: f64,
    pub estimate: f64,
    /// The estimate's three views (summed or the largest device, as the target's scope says).
    pub views: [f64; 3],
    /// `(estimate - measured) / measured`, in percent.
    pub error_percent: f64,
    /// The core's band around the estimate, in the compared view (`low`, `high`), for peaks;
    /// `None` for components, which the core gives no band of their own.
    pub band: Option<[f64; 2]>,
    pub unit_rule: UnitRule,
    /// The estimate's persistent tensors (the weights) on the compared device(s): what any
    /// reading of the whole device holds at least.
    pub persistent: f64,
    pub assumptions: Vec<Assumption>,
    pub source: String,
}

/// A verdict comparison.
#[derive(Clone, Debug)]
pub struct VerdictResult {
    pub expect_fits: bool,
    pub estimate_fits: bool,
    /// The estimate's largest device-view peak and what that device can allocate (its capacity
    /// less the driver's reserve), in bytes.
    pub device_peak: f64,
    pub capacity: f64,
    pub assumptions: Vec<Assumption>,
    pub source: String,
}

impl Compared {
    /// Whether the measurement falls inside the band, where there is one.
    pub fn in_band(&self) -> Option<bool> {
        self.band.map(|[low, high]| low <= self.measured && self.measured <= high)
    }
}

impl VerdictResult {
    pub fn agrees(&self) -> bool {
        self.expect_fits == self.estimate_fits
    }
}

/// Evaluates an expressed point.
pub fn evaluate(point: &Point, expression: Expression) -> PointResult {
    let outcome = match expression {
        Err(gaps) => Outcome::Unexpressed(gaps),
        Ok(expressed) => run(expressed),
    };
    PointResult {
        id: point.id.clone(),
        workload: point.workload.clone(),
        model: point.model.clone(),
        quality: point.quality.clone(),
        outcome,
    }
}

fn run(expressed: Expressed) -> Outcome {
    let outcome = vram_core::evaluate(&expressed.source);
    let errors: Vec<String> = outcome
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| format!("{} {} (at byte {})", d.code, d.message, d.primary.start))
        .collect();
    // A stated value outside the language's ranges (a batch of a billion, say) is the data's
    // problem, not the harness's: the point is unexpressed with the core's words for it.
    let out_of_range = outcome.diagnostics.iter().filter(|d| d.is_error());
    if !errors.is_empty() && out_of_range.clone().all(|d| d.code == "E007") {
        let detail: Vec<String> = out_of_range.map(|d| d.message.clone()).collect();
        return Outcome::Unexpressed(vec![Gap::data(
            crate::gaps::data::UNREADABLE,
            format!("a stated value outside the language's range: {}", detail.join("; ")),
        )]);
    }
    // A point that ran what the core says its device cannot run: the data shows a path the
    // language lacks for this runtime, a feature gap, not a fault of the harness.
    let incapable = outcome.diagnostics.iter().filter(|d| d.is_error());
    if !errors.is_empty() && incapable.clone().all(|d| d.code == "E040") {
        let detail: Vec<String> = incapable.map(|d| d.message.clone()).collect();
        return Outcome::Unexpressed(vec![Gap::feature(
            crate::gaps::feature::RUNS_WITHOUT_CAPABILITY,
            detail.join("; "),
        )]);
    }
    let check = outcome.budget.checks.first();
    let (Some(check), true) = (check, errors.is_empty()) else {
        let mut diagnostics = errors;
        if diagnostics.is_empty() {
            diagnostics.push("the source has no evaluated check".to_string());
        }
        return Outcome::HarnessError { source: expressed.source, diagnostics };
    };
    match &expressed.target {
        Target::Verdict { expect_fits } => {
            if !expressed.lower_bound.is_empty() && check.verdict.fits() {
                // The smallest length or batch fits: the report's own, unstated, may not.
                let undecided = |gap: &Gap| Gap {
                    detail: format!(
                        "{}; the smallest fits, so the report is undecided",
                        gap.detail
                    ),
                    ..gap.clone()
                };
                return Outcome::Unexpressed(expressed.lower_bound.iter().map(undecided).collect());
            }
            let device_peak = largest(check, |d| float(d.views.device));
            let capacity = check.devices.first().map_or(0.0, |d| float(d.capacity.usable));
            Outcome::Verdict(VerdictResult {
                expect_fits: *expect_fits,
                estimate_fits: check.verdict.fits(),
                device_peak,
                capacity,
                assumptions: expressed.assumptions,
                source: expressed.source,
            })
        }
        target => compare(check, &expressed, target),
    }
}

fn compare(check: &CheckBudget, expressed: &Expressed, target: &Target) -> Outcome {
    let scope = match target {
        Target::Peak { scope, .. } | Target::Component { scope, .. } => *scope,
        Target::Verdict { .. } => Scope::EachDevice,
    };
    let combine = |value: &dyn Fn(&DeviceBudget) -> f64| match scope {
        Scope::EachDevice => largest(check, value),
        Scope::SumOfDevices => check.devices.iter().map(value).sum(),
    };
    let views = [View::Allocated, View::Reserved, View::Device]
        .map(|view| combine(&|d: &DeviceBudget| view_of(d, view)));
    let mut band = None;
    let estimate = match target {
        Target::Peak { view, .. } => {
            band = Some(peak_band(check, *view, scope));
            combine(&|d: &DeviceBudget| view_of(d, *view))
        }
        Target::Component { selector: Selector::KvPool, .. } => match kv_pool(check, scope) {
            Some(bytes) => bytes,
            None => {
                return Outcome::Unexpressed(vec![Gap::feature(
                    crate::gaps::feature::VLLM_POOL,
                    "the core reports no KV pool for this check",
                )]);
            }
        },
        Target::Component { selector: Selector::KvPoolTokens, .. } => {
            let tokens = check.devices.iter().filter_map(|d| d.kv_pool.as_ref()).map(|p| p.tokens);
            #[allow(clippy::cast_precision_loss, reason = "token counts below 2^53")]
            match tokens.max() {
                // Each GPU of a tensor-parallel group holds its heads of the same tokens.
                Some(tokens) => tokens as f64,
                None => {
                    return Outcome::Unexpressed(vec![Gap::feature(
                        crate::gaps::feature::VLLM_POOL,
                        "the core reports no KV pool for this check",
                    )]);
                }
            }
        }
        // A runtime that pre-allocates a pool logs the pool as its KV cache (vLLM's "KV cache
        // size", SGLang's "KV Cache is allocated"): what the sessions use is a part of it.
        Target::Component { selector: Selector::KvCache, .. }
            if let Some(pool) = kv_pool(check, scope) =>
        {
            pool
        }
        Target::Component { selector, .. } => combine(&|d| {
            d.components.iter().filter(|c| selector.includes(c)).map(|c| float(c.bytes)).sum()
        }),
        Target::Verdict { .. } => 0.0,
    };
    let (Some(measured), Some(unit_rule)) = (expressed.measured, expressed.unit_rule) else {
        return Outcome::HarnessError {
            source: expressed.source.clone(),
            diagnostics: vec!["a compared point without a measured value".to_string()],
        };
    };
    let persistent = combine(&|d: &DeviceBudget| {
        d.components
            .iter()
            .filter(|c| c.category == Category::Persistent)
            .map(|c| float(c.bytes))
            .sum()
    });
    Outcome::Compared(Compared {
        target: target.clone(),
        measured,
        estimate,
        views,
        error_percent: (estimate - measured) / measured * 100.0,
        band,
        unit_rule,
        persistent,
        assumptions: expressed.assumptions.clone(),
        source: expressed.source.clone(),
    })
}

/// A device's peak in one view.
fn view_of(device: &DeviceBudget, view: View) -> f64 {
    float(match view {
        View::Allocated => device.views.allocated,
        View::Reserved => device.views.reserved,
        View::Device => device.views.device,
        View::AtRest => return at_rest(device),
        View::BetweenSteps => return at_rest(device) + caches(device),
        View::AllocatedAndOutside => {
            let outside = device.views.device.0.saturating_sub(device.views.reserved.0);
            vram_core::bytes::Bytes(device.views.allocated.0.saturating_add(outside))
        }
    }) + pool_in_place_of_sessions(device)
}

/// A server that pre-allocates a KV pool (vLLM, SGLang, TGI, LMDeploy) holds the whole pool
/// whatever its sessions need: what a measured peak reads is its budget with the pool in place
/// of the sessions' KV cache. The difference, in bytes (0 without a pool).
fn pool_in_place_of_sessions(device: &DeviceBudget) -> f64 {
    let Some(pool) = &device.kv_pool else { return 0.0 };
    let sessions: f64 = device
        .components
        .iter()
        .filter(|c| c.category == Category::Cache)
        .map(|c| float(c.bytes))
        .sum();
    float(pool.bytes) - sessions
}

/// The caches a decoding step leaves allocated for the next: the KV cache (or a pool standing in
/// for it, see [`pool_in_place_of_sessions`]).
fn caches(device: &DeviceBudget) -> f64 {
    let caches: f64 = device
        .components
        .iter()
        .filter(|c| c.category == Category::Cache)
        .map(|c| float(c.bytes))
        .sum();
    caches + pool_in_place_of_sessions(device)
}

/// What stays allocated between runs: persistent tensors and the workspaces PyTorch's caching
/// allocator keeps for the process (the cuBLAS workspace, allocated through it and kept per
/// handle and stream).
fn at_rest(device: &DeviceBudget) -> f64 {
    device
        .components
        .iter()
        .filter(|c| {
            c.category == Category::Persistent
                || (c.category == Category::Workspace && c.held_by == HeldBy::Tensors)
        })
        .map(|c| float(c.bytes))
        .sum()
}

/// The band of the compared device(s), moved into the compared view. The core states each
/// device's band around its total (`used`, the device view); a view that leaves components out
/// sits below the total by exactly those components, so the band is moved down by the same
/// bytes, keeping its width: the uncertainty of the left-out components (the CUDA context's,
/// mostly) stays in it, which makes the allocated and reserved bands slightly wide. A total over
/// devices adds their bands; a per-device peak is the largest device's.
fn peak_band(check: &CheckBudget, view: View, scope: Scope) -> [f64; 2] {
    let moved = |d: &DeviceBudget| {
        // A pooling server's band scales with the pool that stands in for its sessions' cache.
        let used = float(d.used) + pool_in_place_of_sessions(d);
        let scale = if d.used.0 == 0 { 1.0 } else { used / float(d.used) };
        let shift = used - view_of(d, view);
        [float(d.band.low) * scale - shift, float(d.band.high) * scale - shift]
    };
    match scope {
        Scope::SumOfDevices => {
            check.devices.iter().map(moved).fold([0.0, 0.0], |[l, h], [a, b]| [l + a, h + b])
        }
        Scope::EachDevice => check
            .devices
            .iter()
            .max_by(|a, b| view_of(a, view).total_cmp(&view_of(b, view)))
            .map_or([0.0, 0.0], moved),
    }
}

/// Bytes as a float, for errors and tables (estimates stay exact integers in the core).
#[allow(clippy::cast_precision_loss, reason = "byte counts below 2^53 are exact in f64")]
pub fn float(bytes: vram_core::bytes::Bytes) -> f64 {
    bytes.0 as f64
}

/// The largest per-device value.
fn largest(check: &CheckBudget, value: impl Fn(&DeviceBudget) -> f64) -> f64 {
    check.devices.iter().map(value).fold(0.0, f64::max)
}

/// The KV pool's bytes where the core reports one (`kv_pool` of a device budget). Read through
/// the budget's JSON, so that the harness builds whether or not the core has the field yet.
fn kv_pool(check: &CheckBudget, scope: Scope) -> Option<f64> {
    let json = serde_json::to_value(check).ok()?;
    let pools: Vec<f64> = json
        .get("devices")?
        .as_array()?
        .iter()
        .filter_map(|d| d.get("kv_pool")?.get("bytes")?.as_f64())
        .collect();
    if pools.is_empty() {
        return None;
    }
    Some(match scope {
        Scope::EachDevice => pools.iter().copied().fold(0.0, f64::max),
        Scope::SumOfDevices => pools.iter().sum(),
    })
}
