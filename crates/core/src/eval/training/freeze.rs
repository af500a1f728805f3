//! Freeze tuning (LLaMA-Factory `finetuning_type: freeze`): the last layers of the model, and
//! the end modules named with them, train in full; every other weight is frozen.
//!
//! What it changes beside full training: only the trained parameters have gradients, optimizer
//! state and a master copy; and autograd records the forward pass from the first tensor that
//! requires a gradient, so without checkpointing only the trained layers store activations.
//! With full (reentrant) checkpointing the recipe makes the embeddings' output require a
//! gradient (`enable_input_require_grads`, which LLaMA-Factory's checkpointing calls, so that a
//! checkpointed layer's output carries one at all): then every layer keeps its checkpoint and
//! is recomputed, as in LoRA training. Training the input embedding also needs every layer's
//! backward pass.

use super::super::Placement;
use super::super::calc::{Overflow, div_ceil};
use super::super::params;
use crate::hir::{Checkpointing, Saved, Shape, Training};

/// The trained part of the model on this device.
pub(super) struct Trained {
    pub(super) params: u64,
    /// Rows and columns of the trained matrices and values of its vectors (a factored
    /// optimizer's state, Adafactor's).
    pub(super) factored: Option<u64>,
    /// Values of the largest trained tensor.
    pub(super) largest: u64,
    /// Trained layers on this device.
    pub(super) layers: u64,
}

/// The layers of this device that train: the last `trained` of the model's, as a placement of
/// their own (a middle pipeline stage, so that it holds neither end of the model).
fn trained_layers(shape: &Shape, placement: &Placement, trained: u64) -> Placement {
    let first_trained = shape.layers.saturating_sub(trained);
    let start = placement.first_layer.max(first_trained);
    let end = placement.first_layer + placement.layers;
    Placement {
        tensor: placement.tensor,
        stage: 1,
        stages: 3,
        first_layer: start,
        layers: end.saturating_sub(start),
        host_experts: 0,
    }
}

/// The trained layers and end modules on this device.
pub(super) fn trained(
    shape: &Shape,
    placement: &Placement,
    trained: u64,
    extra: &[Saved],
) -> Result<Trained, Overflow> {
    let layers = trained_layers(shape, placement, trained);
    let in_layers = params::device_parameter_count(shape, &layers).ok_or(Overflow)?;
    let ends = params::ends(shape, placement);
    let extra_params: u64 = extra.iter().map(|module| ends.of(*module)).sum();
    let params = in_layers.checked_add(extra_params).ok_or(Overflow)?;
    // Each end module on this device is a vocab × hidden matrix to a factored optimizer.
    let extra_factored = extra.iter().filter(|module| ends.of(**module) > 0).count() as u64
        * (div_ceil(shape.vocab, placement.tensor) + shape.hidden);
    let factored = params::factored_state_values(shape, &layers)
        .and_then(|values| values.checked_add(extra_factored));
    let largest_matrix = (layers.first_layer..layers.first_layer + layers.layers)
        .flat_map(|layer| params::layer_matrices(shape, layer, placement.tensor))
        .map(|(_, n)| n)
        .max()
        .unwrap_or(0);
    let largest_end = if extra_params > 0 { ends.embedding.max(ends.head) } else { 0 };
    Ok(Trained {
        params,
        factored,
        largest: largest_matrix.max(largest_end),
        layers: layers.layers,
    })
}

/// The layers whose forward pass autograd records: the trained ones, or all of them when full
/// checkpointing (which makes the input require a gradient) or a trained embedding puts the
/// whole model in the graph.
pub(super) fn recorded_layers(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    trained: u64,
    extra: &[Saved],
) -> Placement {
    if training.checkpointing == Checkpointing::Full || extra.contains(&Saved::Embeddings) {
        return *placement;
    }
    let layers = trained_layers(shape, placement, trained);
    Placement { stage: placement.stage, stages: placement.stages, ..layers }
}
