//! GaLore (Zhao et al. 2024, "Memory-Efficient LLM Training by Gradient Low-Rank Projection";
//! read in `galore_torch/galore_projector.py` and `adamw.py`, the optimizers transformers'
//! `optim="galore_adamw"` runs): every layer matrix `m × n` is trained from a rank-`r`
//! projection of its gradient.
//! - `project`: the projector is the SVD's `r` leading singular vectors on the smaller side
//!   (`Vh[:r]` when `m ≥ n`, else `U[:, :r]`), `r × min(m, n)` values in the gradient's type,
//!   and the projected gradient is `r × max(m, n)`; AdamW's two moments are `zeros_like` it.
//! - `get_orthogonal_matrix`: at the first step and every `update_proj_gap` steps, the SVD of
//!   the gradient cast to fp32 (`torch.linalg.svd(matrix.float(), full_matrices=False)`): the
//!   fp32 copy, `U` (`m × k`) and `Vh` (`k × n`), `k = min(m, n)`.
//! - `project_back`: the update back at full size, `m × n` in the gradient's type, scaled.
//!
//! The optimizer loops over the parameters one at a time, so the step holds one matrix's
//! temporaries: the largest of the SVD and the projected-back update. Embeddings, the output
//! head and norms keep ordinary states.

use super::Placement;
use super::device_matrix;
use super::states::{StepPhase, state};
use crate::budget::Component;
use crate::eval::calc::{Overflow, Product, formula};
use crate::hir::{LoraTarget, Shape, Training};
use crate::precision::Precision;

/// The layer matrices GaLore projects on this device.
pub(super) struct Projected {
    /// Their parameters.
    pub params: u64,
    /// The values of their projected gradients, per optimizer state: `r × max(m, n)` each.
    pub state_values: u64,
    /// The values of their projectors: `r × min(m, n)` each.
    pub projector_values: u64,
    /// The largest matrix, `(m, n)`, whose step temporaries are the step's.
    pub largest: (u64, u64),
}

/// Every layer matrix of a dense decoder (q, k, v, o and the MLP's), tensor-parallel slices on
/// this device, projected at `rank` (at most the matrix's smaller side).
pub(super) fn projected(
    shape: &Shape,
    placement: &Placement,
    rank: u64,
) -> Result<Projected, Overflow> {
    let mut per_layer = (0u64, 0u64, 0u64);
    let mut largest = (0u64, 0u64);
    for target in LoraTarget::ALL {
        let Some((input, output)) = device_matrix(shape, placement, target) else { continue };
        let r = rank.min(input.min(output));
        let params = input.checked_mul(output).ok_or(Overflow)?;
        per_layer.0 = per_layer.0.checked_add(params).ok_or(Overflow)?;
        let states = r.checked_mul(input.max(output)).ok_or(Overflow)?;
        let projector = r.checked_mul(input.min(output)).ok_or(Overflow)?;
        per_layer.1 = per_layer.1.checked_add(states).ok_or(Overflow)?;
        per_layer.2 = per_layer.2.checked_add(projector).ok_or(Overflow)?;
        if u128::from(params) > u128::from(largest.0) * u128::from(largest.1) {
            largest = (output, input);
        }
    }
    let layers = placement.layers;
    let times = |v: u64| v.checked_mul(layers).ok_or(Overflow);
    Ok(Projected {
        params: times(per_layer.0)?,
        state_values: times(per_layer.1)?,
        projector_values: times(per_layer.2)?,
        largest,
    })
}

/// The projectors, kept in the gradients' type, and the step's temporaries for the largest
/// matrix (into `phase`).
pub(super) fn projectors_and_step(
    projected: &Projected,
    rank: u64,
    training: &Training,
    phase: &mut StepPhase,
) -> Result<Component, Overflow> {
    let g = training.gradients;
    let projectors = Product::new()
        .times(projected.projector_values, formula!("rank-{rank} projector values"))?
        .bytes_each(g.bytes_per_element(), g.name())?;
    let (m, n) = projected.largest;
    let k = m.min(n);
    // The SVD: an fp32 copy of a 16-bit gradient, U and Vh in fp32.
    let copy = if g == Precision::Fp32 { 0 } else { m.checked_mul(n).ok_or(Overflow)? };
    let svd_values = copy
        .checked_add(m.checked_mul(k).ok_or(Overflow)?)
        .and_then(|v| v.checked_add(k.checked_mul(n)?))
        .ok_or(Overflow)?;
    let fp32 = Precision::Fp32;
    let svd = Product::new()
        .times(svd_values, formula!("values of the {m} × {n} matrix's SVD (fp32 copy, U, Vh)"))?
        .bytes_each(fp32.bytes_per_element(), fp32.name())?;
    let back = Product::new()
        .times(
            m.checked_mul(n).ok_or(Overflow)?,
            formula!("values of the {m} × {n} update projected back"),
        )?
        .bytes_each(g.bytes_per_element(), g.name())?;
    let step = if svd.value()? >= back.value()? { svd } else { back };
    phase.transients.push(step.finish()?);
    Ok(state(
        "GaLore projectors",
        projectors.finish()?,
        "galore_torch GaLoreProjector: the SVD's leading singular vectors on the matrix's smaller side, in the gradient's type",
    ))
}
