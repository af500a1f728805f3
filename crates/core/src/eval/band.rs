//! Uncertainty bands: how far the measured peak may be from each total.
//!
//! Every component contributes in proportion to how it was obtained. Read from a header it is
//! exact; computed from a declared shape it carries the error of the formula; taken from a
//! runtime profile it carries the spread of the published observations behind the profile.
//! The relative errors below are the first version, set from those spreads (DOMAIN.md §4.5, §6);
//! the accuracy benchmark (`vram-accuracy`) measures how often the band holds and is the check
//! on them.

use super::calc::{self, Overflow};
use crate::budget::{Band, BandBasis, Category, Component, Provenance};
use crate::bytes::Bytes;

/// Relative error, in parts per thousand, of a component by category and provenance.
fn per_mille(component: &Component) -> u64 {
    match (component.provenance, component.category) {
        (Provenance::Exact | Provenance::Observed, _) => 0,
        // Weights, KV cache and optimizer state follow from the shape up to tensors a formula
        // leaves out (rotary tables, MoE routers' biases, vision towers): a few percent.
        (Provenance::Formula, Category::Persistent | Category::Cache | Category::TrainingState) => {
            30
        }
        // Activations depend on kernels, fusion and the framework's tensor lifetimes; published
        // activation peaks for one model and shape differ by 1.5-2x across runtimes (vLLM 1.0 to
        // 2.4 GiB, DOMAIN.md §4.5).
        (Provenance::Formula, Category::Intermediate | Category::Workspace) => 350,
        // Runtime constants: CUDA context 0.16 to 1.3 GiB across versions and GPUs (§6.1),
        // NCCL and CUDA-graph figures from single observations (§6.3, §6.5).
        (Provenance::Assumed, _) => 500,
    }
}

/// How far published measurements of a workload kind fell below and above the estimate, in
/// parts per thousand of the device total: the 95th percentile of each side's shortfall over the
/// accuracy benchmark's compared peaks (its dev set and its own checks), so that together they
/// hold about 90 % of them. These are fits across many points, not constants from one:
/// `cargo run -p vram-accuracy --release -- --fit-bands` prints them from the data
/// (docs/accuracy.md, "Band widths"), and they are set to its figures rounded up to the next
/// 10 ‰.
pub fn measured_margins(basis: BandBasis) -> (u64, u64) {
    match basis {
        BandBasis::Inference => (INFERENCE_BELOW, INFERENCE_ABOVE),
        BandBasis::Training => (TRAINING_BELOW, TRAINING_ABOVE),
        BandBasis::Diffusion => (DIFFUSION_BELOW, DIFFUSION_ABOVE),
        BandBasis::Components => (0, 0),
    }
}

// Fitted with `vram-accuracy --fit-bands` over 354 inference, 210 training and 65 diffusion peaks:
// the dev set and the accuracy crate's own checks (profiles 2026.11; see measured_margins).
const INFERENCE_BELOW: u64 = 110;
const INFERENCE_ABOVE: u64 = 150;
const TRAINING_BELOW: u64 = 90;
const TRAINING_ABOVE: u64 = 420;
const DIFFUSION_BELOW: u64 = 50;
const DIFFUSION_ABOVE: u64 = 190;

/// The band around `used`: on each side, the wider of the components' own uncertainty and the
/// measured spread of the workload kind.
pub(crate) fn band(
    components: &[Component],
    used: Bytes,
    basis: BandBasis,
) -> Result<Band, Overflow> {
    let spread = calc::sum(components.iter().map(|c| share(c.bytes, per_mille(c))))?;
    let (below, above) = measured_margins(basis);
    let below = share(used, below).max(spread);
    let above = share(used, above).max(spread);
    Ok(Band { low: Bytes(used.0.saturating_sub(below.0)), high: calc::add(used, above)?, basis })
}

/// `per_mille` thousandths of `bytes`, rounded up.
fn share(bytes: Bytes, per_mille: u64) -> Bytes {
    let exact = u128::from(bytes.0) * u128::from(per_mille);
    Bytes(u64::try_from(exact.div_ceil(1000)).unwrap_or(u64::MAX))
}
