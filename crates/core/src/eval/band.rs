//! Uncertainty bands: how far the measured peak may be from each total.
//!
//! Every component contributes in proportion to how it was obtained. Read from a header it is
//! exact; computed from a declared shape it carries the error of the formula; taken from a
//! runtime profile it carries the spread of the published observations behind the profile.
//! The relative errors below are the first version, set from those spreads (DOMAIN.md §4.5, §6);
//! the accuracy benchmark (`vram-accuracy`) measures how often the band holds and is the check
//! on them.

use super::calc::{self, Overflow};
use crate::budget::{Band, Category, Component, Provenance};
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

/// The band around `used`: the total plus and minus the components' uncertainties.
pub(crate) fn band(components: &[Component], used: Bytes) -> Result<Band, Overflow> {
    let spread = calc::sum(components.iter().map(|c| {
        let exact = u128::from(c.bytes.0) * u128::from(per_mille(c));
        Bytes(u64::try_from(exact.div_ceil(1000)).unwrap_or(u64::MAX))
    }))?;
    Ok(Band { low: Bytes(used.0.saturating_sub(spread.0)), high: calc::add(used, spread)? })
}
