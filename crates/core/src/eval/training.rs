//! Training and fine-tuning: model states (weights, master copy, gradients, optimizer) and
//! activations. Sources: DOMAIN.md §5.1 (bytes per parameter), §5.3 (activations, Korthikanti et
//! al. 2022 adapted to gated MLPs and grouped-query attention), §5.4 (LoRA).

use super::Placement;
use super::calc::{Overflow, Product, div_ceil};
use super::{llm, params};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::hir::{Attention, Checkpointing, LoraTarget, Method, Mlp, Shape, Training};
use crate::quant::WeightFormat;
use crate::ratio::Ratio;

/// Every parameter this device holds.
fn device_params(shape: &Shape, placement: &Placement) -> Result<u64, Overflow> {
    params::device_parameter_count(shape, placement).ok_or(Overflow)
}

/// LoRA adapter parameters on this device: `rank × (in + out)` per adapted matrix per layer
/// (PEFT `lora_A`, `lora_B`), sharded with the base matrix under tensor parallelism.
fn lora_params(
    shape: &Shape,
    placement: &Placement,
    rank: u64,
    targets: &[LoraTarget],
) -> Result<u64, Overflow> {
    let t = placement.tensor;
    let q = shape.heads * shape.head_dim;
    let kv = shape.kv_heads * shape.head_dim;
    let mut per_layer = 0u64;
    for target in targets {
        let (input, output) = match target {
            LoraTarget::Q => (shape.hidden, q),
            LoraTarget::K | LoraTarget::V => (shape.hidden, kv),
            LoraTarget::O => (q, shape.hidden),
            LoraTarget::Gate | LoraTarget::Up
                if shape.mlp == Mlp::Gated || *target == LoraTarget::Up =>
            {
                (shape.hidden, shape.ffn)
            }
            LoraTarget::Gate | LoraTarget::Up => (0, 0),
            LoraTarget::Down => (shape.ffn, shape.hidden),
        };
        per_layer = per_layer
            .checked_add(rank.checked_mul(input + output).ok_or(Overflow)?)
            .ok_or(Overflow)?;
    }
    div_ceil(per_layer, t).checked_mul(placement.layers).ok_or(Overflow)
}

fn state(name: &str, bytes_formula: (crate::bytes::Bytes, String), source: &str) -> Component {
    Component {
        held_by: HeldBy::Tensors,
        name: name.to_string(),
        category: Category::TrainingState,
        bytes: bytes_formula.0,
        provenance: Provenance::Formula,
        formula: bytes_formula.1,
        source: Some(source.to_string()),
    }
}

/// The optimizer's fp32 state for `params` trained parameters, if it keeps any.
fn optimizer_state(
    name: &str,
    params: u64,
    label: &'static str,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    let states = training.optimizer.states();
    if states == 0 {
        return Ok(None);
    }
    let product = Product::new()
        .times(params, label)?
        .times(states, format!("{} states", training.optimizer.name()))?
        .bytes_each(Ratio::int(4), "fp32")?;
    let source =
        "DOMAIN.md §5.1: AdamW keeps two fp32 moments per parameter, SGD with momentum one";
    Ok(Some(state(name, product.finish()?, source)))
}

pub(crate) fn components(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Vec<Component>, Overflow> {
    let mut components = Vec::new();
    match &training.method {
        Method::Full => {
            components.extend(llm::weights(
                shape,
                placement,
                WeightFormat::Uniform(training.weights),
                Category::Persistent,
                "weights",
            )?);
            let params = device_params(shape, placement)?;
            if let Some(master) = training.master {
                let product = Product::new()
                    .times(params, "params")?
                    .bytes_each(master.bytes_per_element(), master.name())?;
                components.push(state("master weights", product.finish()?, "DOMAIN.md §5.1: mixed precision keeps an fp32 master copy (DeepSpeed memory.rst, HF model_memory_anatomy)"));
            }
            let gradients = training.gradients;
            let product = Product::new()
                .times(params, "params")?
                .bytes_each(gradients.bytes_per_element(), gradients.name())?;
            components.push(state("gradients", product.finish()?, "DOMAIN.md §5.1"));
            components.extend(optimizer_state("optimizer state", params, "params", training)?);
        }
        Method::Lora { rank, targets, dtype } => {
            components.extend(llm::weights(
                shape,
                placement,
                WeightFormat::Uniform(training.weights),
                Category::Persistent,
                "frozen base weights",
            )?);
            let params = lora_params(shape, placement, *rank, targets)?;
            let names: Vec<&str> = targets.iter().map(|t| t.name()).collect();
            let label = format!("adapter params (rank {rank}, {})", names.join(" "));
            let weights = Product::new()
                .times(params, label)?
                .bytes_each(dtype.bytes_per_element(), dtype.name())?;
            components.push(state(
                "LoRA adapters",
                weights.finish()?,
                "DOMAIN.md §5.4: PEFT lora_A (in × r) and lora_B (r × out)",
            ));
            let gradients = Product::new()
                .times(params, "adapter params")?
                .bytes_each(dtype.bytes_per_element(), dtype.name())?;
            components.push(state("adapter gradients", gradients.finish()?, "DOMAIN.md §5.4"));
            components.extend(optimizer_state(
                "adapter optimizer state",
                params,
                "adapter params",
                training,
            )?);
        }
    }
    components.extend(activations(shape, placement, training)?);
    Ok(components)
}

/// Bytes one layer stores for the backward pass, per token:
/// attention: norm input and output (2h), q/k/v (`(heads + 2·kv_heads)·head_dim`), attention
/// output (`heads·head_dim`), fp32 softmax statistics (4 B per head);
/// MLP: norm input and output (2h), gate, up, activation and product (4·ffn; 2·ffn ungated).
/// The h-sized tensors are replicated across tensor-parallel ranks; the rest is sharded.
fn layer_activation_formula(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Product, Overflow> {
    let t = placement.tensor;
    let heads = shape.heads / t;
    let kv_heads = div_ceil(shape.kv_heads, t);
    let ffn_tensors = match shape.mlp {
        Mlp::Gated => 4,
        Mlp::Plain => 2,
    };
    let elements = 4 * shape.hidden
        + (2 * heads + 2 * kv_heads) * shape.head_dim
        + ffn_tensors * div_ceil(shape.ffn, t);
    let elem = training.weights.companion().bytes_per_element();
    // Softmax statistics are 4 fp32 bytes per head per token; fold them in as elements.
    let stats = Ratio::int(i128::from(4 * heads)).checked_div(elem).ok_or(Overflow)?;
    let per_token = Ratio::int(i128::from(elements)).checked_add(stats).ok_or(Overflow)?;
    let per_token = u64::try_from(per_token.ceil()).map_err(|_| Overflow)?;
    Product::new()
        .times(training.sequence, "tokens")?
        .times(training.micro_batch, "micro_batch")?
        .times(per_token, "elements per token per layer")?
        .bytes_each(elem, training.weights.companion().name())
}

fn activations(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Vec<Component>, Overflow> {
    let elem = training.weights.companion();
    let per_layer = layer_activation_formula(shape, placement, training)?;
    let per_layer_bytes = per_layer.value()?;
    // 1F1B pipeline schedule: stage s keeps (stages - s) micro-batches in flight.
    let in_flight = placement.stages - placement.stage;
    let mut components = Vec::new();
    let source =
        "DOMAIN.md §5.3: Korthikanti et al. 2022 (Table 2) adapted to gated MLP, GQA, no dropout";
    let (bytes, formula) = match training.checkpointing {
        Checkpointing::None => {
            let total = Product::new()
                .times(placement.layers, "layers")?
                .times(in_flight, "micro-batches in flight")?
                .bytes_each(
                    Ratio::int(i128::from(per_layer_bytes.0)),
                    format!("per layer: {}", per_layer.terms()),
                )?;
            total.finish()?
        }
        Checkpointing::Full => {
            // Only each layer's input is kept; one layer is recomputed at a time in backward.
            let inputs = Product::new()
                .times(placement.layers, "layers")?
                .times(in_flight, "micro-batches in flight")?
                .times(training.sequence, "tokens")?
                .times(training.micro_batch, "micro_batch")?
                .times(shape.hidden, "hidden")?
                .bytes_each(elem.bytes_per_element(), elem.name())?;
            let bytes = super::calc::add(inputs.value()?, per_layer_bytes)?;
            (
                bytes,
                format!(
                    "checkpoints {} + one recomputed layer {} = {bytes}",
                    inputs.terms(),
                    per_layer.terms()
                ),
            )
        }
    };
    components.push(Component {
        held_by: HeldBy::Tensors,
        name: "activations".to_string(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(source.to_string()),
    });
    if training.attention == Attention::Eager {
        let scores = Product::new()
            .times(placement.layers, "layers")?
            .times(training.micro_batch, "micro_batch")?
            .times(shape.heads / placement.tensor, "heads")?
            .times(training.sequence, "queries")?
            .times(training.sequence, "keys")?
            .bytes_each(elem.bytes_per_element(), elem.name())?;
        components.push(Component {
            held_by: HeldBy::Tensors,
            name: "attention scores (eager)".to_string(),
            category: Category::Intermediate,
            bytes: scores.value()?,
            provenance: Provenance::Formula,
            formula: scores.finish()?.1,
            source: Some("DOMAIN.md §4.2: eager attention materializes batch × heads × s²".into()),
        });
    }
    if placement.stage + 1 == placement.stages {
        // Logits in the compute precision, their fp32 upcast, and the fp32 log-softmax kept for
        // the backward pass of the cross-entropy loss (DOMAIN.md §4.1).
        let per_logit = elem.bytes_per_element().checked_add(Ratio::int(8)).ok_or(Overflow)?;
        let logits = Product::new()
            .times(training.sequence, "tokens")?
            .times(training.micro_batch, "micro_batch")?
            .times(shape.vocab, "vocab")?
            .bytes_each(
                per_logit,
                format!("{} logits + fp32 copy + fp32 log-softmax", elem.name()),
            )?;
        let (bytes, formula) = logits.finish()?;
        components.push(Component {
            held_by: HeldBy::Tensors,
            name: "logits and loss".to_string(),
            category: Category::Intermediate,
            bytes,
            provenance: Provenance::Formula,
            formula,
            source: Some("DOMAIN.md §4.1: training logits are upcast to fp32 for the loss".into()),
        });
    }
    Ok(components)
}
