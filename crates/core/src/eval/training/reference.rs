//! DPO's reference model: the weights a frozen copy keeps on the device, and the logits of the
//! reference pass, which TRL's `DPOTrainer.get_batch_loss_metrics` runs under `no_grad` after
//! the policy's `concatenated_forward` and before its backward pass, so that everything the
//! policy stored for its backward pass is still held.

use super::{Overflow, Placement, Product};
use crate::budget::Component;
use crate::hir::{Objective, Output, Reference, Shape, Training};

const SOURCE: &str = "TRL DPOTrainer: get_batch_loss_metrics runs concatenated_forward (chosen and \
                      rejected as one batch), then compute_ref_log_probs under no_grad";

/// A frozen copy's weights, stored as the trained model's are (`weights`): sharded with them
/// under ZeRO-3 (TRL prepares the reference with the policy's DeepSpeed stage 3), left on the
/// host with them under parameter offload.
pub(super) fn weights(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    data: u64,
) -> Result<Vec<Component>, Overflow> {
    if training.objective != Objective::Dpo(Reference::Copy) {
        return Ok(Vec::new());
    }
    super::resident_weights(
        shape,
        placement,
        training,
        data,
        "reference model (frozen copy)",
        "TRL prepare_deepspeed: the reference model under the policy's ZeRO-3",
    )
}

/// The reference pass's logits over both sequences of every pair, in the compute type, held
/// beside the policy's stored activations and loss path until the log-probabilities are taken
/// (TRL's `selective_log_softmax` then works a row at a time). The pass's per-layer transients
/// (a few hidden-sized tensors) are far smaller than a vocabulary of logits and are left out.
pub(super) fn logits(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    let Objective::Dpo(reference) = training.objective else {
        return Ok(None);
    };
    let last = placement.stage + 1 == placement.stages;
    if reference == Reference::Precomputed || !last || shape.output != Output::Lm {
        return Ok(None);
    }
    let a = training.activations;
    let product = Product::new()
        .times(training.sequence, "tokens")?
        .times_count(super::activations::batch(training))?
        .times(shape.vocab, "vocab")?
        .bytes_each(a.bytes_per_element(), a.name())?;
    Ok(Some(super::states::intermediate(
        "reference pass: logits (no_grad)",
        product.finish()?,
        SOURCE,
    )))
}
