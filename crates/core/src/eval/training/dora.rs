//! DoRA (weight-decomposed LoRA, PEFT `use_dora`): what it adds to a LoRA step. Read in PEFT's
//! `tuners/lora/dora.py` (`DoraLinearLayer`) and `tuners/lora/variants.py`
//! (`DoraLinearVariant.forward`), PEFT 0.14 and later:
//! - a trainable magnitude vector of each adapted matrix's output features (counted with the
//!   adapter parameters, in the adapters' type);
//! - every forward rebuilds the adapted weight to take its column norms: `lora_B(lora_A(eye))`
//!   over an identity of the input features in the input's type (the adapters' type, to which
//!   PEFT casts the input), the base weight cast to that type (dequantized first when the base
//!   is quantized), `scaling × lora_weight` and the sum whose norm is taken: a transient of the
//!   matrix's size several times over (`weight_norm_transient`);
//! - `(magnitude / norm - 1) × base_result + magnitude / norm × lora_result × scaling`, whose two
//!   products keep the base output and the adapters' output for the magnitude's gradient: two
//!   more output-wide tensors per token (in `activations.rs`' `adapter_per_token`);
//! - with `lora_dropout` above 0 the base matmul is recomputed over the dropped-out input with
//!   the cast weight, which autograd keeps for the input's gradient (`recomputed_weights`); at 0
//!   the base layer's own output is reused (PEFT 0.14, "Faster DoRA when no dropout").

use super::Placement;
use super::device_matrix;
use super::states::intermediate;
use crate::budget::Component;
use crate::eval::calc::{Overflow, Product, formula};
use crate::hir::{Checkpointing, LoraTarget, Method, Shape, Training};
use crate::precision::Precision;
use crate::ratio::Ratio;

const SOURCE: &str = "derived: peft tuners/lora/dora.py DoraLinearLayer (get_lora_weight, \
     get_weight_norm, forward) and variants.py DoraLinearVariant.forward";

/// A count with thousands separators, as the formulas write them.
fn n(value: u64) -> String {
    let mut out = String::new();
    crate::bytes::write_thousands(&mut out, value);
    out
}

/// DoRA's settings when the method is LoRA with `dora`: the targets and the adapters' type.
fn dora(training: &Training) -> Option<(&[LoraTarget], Precision)> {
    match &training.method {
        Method::Lora { targets, dtype, dora: true, .. } => Some((targets, *dtype)),
        _ => None,
    }
}

/// The base weight as the DoRA path uses it: `Some(bytes)` when `weight.to(x.dtype)` (or the
/// dequantization before it) makes a copy in the adapters' type, `None` when it is the
/// parameter itself.
fn weight_copy(training: &Training, adapters: Precision) -> Option<Ratio> {
    let copied = !training.weights.is_float_compute() || training.weights != adapters;
    copied.then(|| adapters.bytes_per_element())
}

/// The largest forward-pass transient of one adapted matrix's column norms, `in × out = W`
/// values, `a` the adapters' bytes and `k` the compute type's:
/// - building `lora_weight`: the identity (`in² × a`), autocast's copy of it when `k ≠ a`
///   (`in² × k`, kept by `lora_A` for its weight's gradient until the forward ends) and
///   `lora_B`'s output (`W × k`);
/// - taking the norm: that copy, `lora_weight` in the input's type (`W × a`), the base weight's
///   cast copy if any (`W × a`), `scaling × lora_weight` and the sum (`2 × W × a`).
pub(super) fn weight_norm_transient(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    let Some((targets, adapters)) = dora(training) else { return Ok(None) };
    let a = adapters.bytes_per_element();
    let k = training.activations.bytes_per_element();
    let autocast_copy = adapters != training.activations;
    let copy = weight_copy(training, adapters);
    let mut largest: Option<(Ratio, String)> = None;
    for target in targets {
        let Some((input, output)) = device_matrix(shape, placement, *target) else { continue };
        let eye = Ratio::int(i128::from(input.checked_mul(input).ok_or(Overflow)?));
        let matrix = Ratio::int(i128::from(input.checked_mul(output).ok_or(Overflow)?));
        let held_eye =
            if autocast_copy { eye.checked_mul(k).ok_or(Overflow)? } else { Ratio::ZERO };
        let building = eye
            .checked_mul(a)
            .and_then(|b| b.checked_add(held_eye))
            .and_then(|b| b.checked_add(matrix.checked_mul(k)?))
            .ok_or(Overflow)?;
        let copies = Ratio::int(3 + i128::from(copy.is_some()));
        let norming = matrix
            .checked_mul(a)
            .and_then(|b| b.checked_mul(copies))
            .and_then(|b| b.checked_add(held_eye))
            .ok_or(Overflow)?;
        let peak = building.max(norming);
        if largest.as_ref().is_none_or(|(bytes, _)| peak > *bytes) {
            let (input, output) = (n(input), n(output));
            let what = if norming >= building {
                let eye_term = if autocast_copy {
                    formula!("{input}² × {k} B identity copy + ")
                } else {
                    String::new()
                };
                formula!(
                    "{}: {eye_term}{} × {input} × {output} × {a} B ({})",
                    target.name(),
                    copies,
                    adapters.name()
                )
            } else {
                let eye_term = if autocast_copy {
                    formula!("{input}² × ({a} + {k}) B identity and its copy")
                } else {
                    formula!("{input}² × {a} B identity")
                };
                formula!("{}: {eye_term} + {input} × {output} × {k} B lora_weight", target.name())
            };
            largest = Some((peak, what));
        }
    }
    let Some((peak, what)) = largest else { return Ok(None) };
    let bytes = crate::bytes::Bytes::from_ratio_ceil(peak).ok_or(Overflow)?;
    let formula = formula!("{what} = {} B", n(bytes.0));
    Ok(Some(intermediate("DoRA column norms (largest matrix)", (bytes, formula), SOURCE)))
}

/// With `lora_dropout` above 0, DoRA recomputes each adapted matrix's base matmul over the
/// dropped-out input with the weight in the input's type; autograd keeps the weight the matmul
/// ran with for the input's gradient: autocast's `k` copy when the adapters' type is not the
/// compute type, else the cast or dequantized copy, else the parameter itself (nothing new).
/// Every layer keeps them without full checkpointing, only the recomputed layer with it.
pub(super) fn recomputed_weights(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    let Some((targets, adapters)) = dora(training) else { return Ok(None) };
    let Method::Lora { dropout, .. } = &training.method else { return Ok(None) };
    if *dropout <= Ratio::ZERO {
        return Ok(None);
    }
    let (per_value, what) = if adapters != training.activations {
        (training.activations.bytes_per_element(), training.activations.name())
    } else if let Some(bytes) = weight_copy(training, adapters) {
        (bytes, adapters.name())
    } else {
        return Ok(None);
    };
    let values: u64 = targets
        .iter()
        .filter_map(|t| device_matrix(shape, placement, *t))
        .try_fold(0u64, |sum, (input, output)| sum.checked_add(input.checked_mul(output)?))
        .ok_or(Overflow)?;
    let (layers, which) = match training.checkpointing {
        // The recomputed weights are no product's output: op-level checkpointing recomputes them.
        Checkpointing::Full | Checkpointing::SelectiveOp => (1, "recomputed layer"),
        Checkpointing::None | Checkpointing::Selective => {
            let in_flight = super::in_flight(placement, training);
            (placement.layers.checked_mul(in_flight).ok_or(Overflow)?, "layers kept")
        }
    };
    let product = Product::new()
        .times(layers, which)?
        .times(values, "adapted weight values per layer")?
        .bytes_each(per_value, what)?;
    Ok(Some(intermediate("DoRA recomputed weights (kept)", product.finish()?, SOURCE)))
}
