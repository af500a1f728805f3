//! Training and fine-tuning: one device's components of a training step. This module places the
//! weights (whole, sharded or gathered a layer at a time), counts LoRA adapters and the copies
//! autocast and quantized bases make; `states` holds the master copy, gradients, optimizer state
//! and the optimizer step, `activations` what the step stores for the backward pass.
//! Sources: DOMAIN.md §5.1 (bytes per parameter), §5.3 (activations, Korthikanti et al. 2022
//! adapted to gated MLPs and grouped-query attention), §5.4 (LoRA).

use super::Placement;
use super::calc::{Overflow, Product, div_ceil, formula};
use super::{llm, params};
use crate::budget::{Category, Component};
use crate::hir::{Checkpointing, LoraTarget, Method, Mlp, Offload, Shape, Sharding, Training};
use crate::precision::Precision;
use crate::quant::WeightFormat;
use crate::ratio::Ratio;

mod activations;
mod deepspeed;
mod dora;
mod freeze;
mod frozen;
mod galore;
mod prompt_learning;
mod reference;
mod reserve;
mod seq2seq;
mod states;

pub(in crate::eval) use reserve::{Replays, allocator_cache};

pub(super) use activations::{activations, adapter_inputs, softmax_gradients};
pub(super) use deepspeed::{accumulating_partition, buckets};
use states::divisor;
pub(super) use states::{
    AdapterKind, Adapters, StepPhase, adapter_states, intermediate, optimizer_step, sharded, state,
    trained_states,
};

/// Every parameter this device holds.
fn device_params(shape: &Shape, placement: &Placement) -> Result<u64, Overflow> {
    params::device_parameter_count(shape, placement).ok_or(Overflow)
}

/// LoRA adapter parameters on this device: `rank × (in + out)` per adapted matrix per layer
/// (PEFT `lora_A`, `lora_B`), and with DoRA `out` more (its magnitude vector), sharded with the
/// base matrix under tensor parallelism.
fn lora_params(
    shape: &Shape,
    placement: &Placement,
    rank: u64,
    targets: &[LoraTarget],
    dora: bool,
) -> Result<u64, Overflow> {
    lora_shapes(shape, placement, rank, targets, dora).map(|(params, _)| params)
}

/// Adapter parameters on this device and, for a factored optimizer, their row and column
/// counts: `(in + r) + (r + out)` per adapted matrix per layer, and a DoRA magnitude's `out`
/// values (a vector keeps its whole second moment).
fn lora_shapes(
    shape: &Shape,
    placement: &Placement,
    rank: u64,
    targets: &[LoraTarget],
    dora: bool,
) -> Result<(u64, u64), Overflow> {
    let t = placement.tensor;
    let mut per_layer = 0u64;
    let mut factored = 0u64;
    // PEFT matches target names by suffix, so `q` adapts a T5 decoder layer's self-attention
    // `SelfAttention.q` and its cross-attention `EncDecAttention.q` alike.
    let mut per_cross = 0u64;
    let mut factored_cross = 0u64;
    for target in targets {
        let (input, output) = adapted_matrix(shape, *target).unwrap_or((0, 0));
        let magnitude = if dora { output } else { 0 };
        let params = rank
            .checked_mul(input + output)
            .and_then(|p| p.checked_add(magnitude))
            .ok_or(Overflow)?;
        per_layer = per_layer.checked_add(params).ok_or(Overflow)?;
        let factors = if input + output > 0 { input + output + 2 * rank + magnitude } else { 0 };
        factored += factors;
        if target.is_attention() {
            per_cross = per_cross.checked_add(params).ok_or(Overflow)?;
            factored_cross += factors;
        }
    }
    let cross = placement.layers - shape.encoder_layers_in(placement.first_layer, placement.layers);
    let cross = if shape.encoder.is_some() { cross } else { 0 };
    let params = div_ceil(per_layer, t)
        .checked_mul(placement.layers)
        .and_then(|p| p.checked_add(div_ceil(per_cross, t).checked_mul(cross)?))
        .ok_or(Overflow)?;
    let factored = div_ceil(factored, t)
        .checked_mul(placement.layers)
        .and_then(|p| p.checked_add(div_ceil(factored_cross, t).checked_mul(cross)?))
        .ok_or(Overflow)?;
    Ok((params, factored))
}

/// The `(in, out)` features of the layer matrix a LoRA target adapts; `None` for a gate in a
/// plain (ungated) MLP, which has none.
pub(super) fn adapted_matrix(shape: &Shape, target: LoraTarget) -> Option<(u64, u64)> {
    let q = shape.heads * shape.head_dim;
    let kv = shape.kv_heads * shape.head_dim;
    match target {
        LoraTarget::Q => Some((shape.hidden, q)),
        LoraTarget::K | LoraTarget::V => Some((shape.hidden, kv)),
        LoraTarget::O => Some((q, shape.hidden)),
        LoraTarget::Gate if shape.mlp == Mlp::Plain => None,
        LoraTarget::Gate | LoraTarget::Up => Some((shape.hidden, shape.ffn)),
        LoraTarget::Down => Some((shape.ffn, shape.hidden)),
    }
}

/// The `(in, out)` features of an adapted matrix on this device: column-parallel projections
/// split their outputs over the tensor ranks, row-parallel ones (o, down) their inputs.
pub(super) fn device_matrix(
    shape: &Shape,
    placement: &Placement,
    target: LoraTarget,
) -> Option<(u64, u64)> {
    let (input, output) = adapted_matrix(shape, target)?;
    let t = placement.tensor;
    Some(match target {
        LoraTarget::O | LoraTarget::Down => (input.div_ceil(t), output),
        _ => (input, output.div_ceil(t)),
    })
}

/// Values of the largest parameter tensor on this device: the embedding, the output head or
/// the largest layer matrix.
fn largest_tensor(shape: &Shape, placement: &Placement) -> u64 {
    let ends = params::ends(shape, placement);
    let first = placement.first_layer;
    let matrices = (first..first + placement.layers)
        .flat_map(|layer| params::layer_matrices(shape, layer, placement.tensor))
        .map(|(_, n)| n)
        .max()
        .unwrap_or(0);
    ends.embedding.max(ends.head).max(matrices)
}

/// Values of the largest adapter matrix: `rank × max(in, out)` of the widest target.
fn largest_adapter(shape: &Shape, placement: &Placement, rank: u64, targets: &[LoraTarget]) -> u64 {
    targets
        .iter()
        .filter_map(|t| adapted_matrix(shape, *t))
        .map(|(input, output)| rank.saturating_mul(div_ceil(input.max(output), placement.tensor)))
        .max()
        .unwrap_or(0)
}

/// ZeRO-3 / FSDP gather one layer's full weights (and produce its full gradients) at a time:
/// DeepSpeed's `largest_layer_memory = 4 × largest_layer_params` for 16-bit training.
fn gathered_layer(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Component, Overflow> {
    let largest = (placement.first_layer..placement.first_layer + placement.layers.max(1))
        .map(|layer| {
            params::layer_matrices(shape, layer, placement.tensor)
                .iter()
                .map(|(_, n)| n)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let per_param =
        training.weights.bytes_per_element().checked_mul(Ratio::int(2)).ok_or(Overflow)?;
    let product = Product::new()
        .times(largest, "params of the largest layer")?
        .bytes_each(per_param, "gathered weights + their gradients")?;
    Ok(intermediate(
        "gathered layer (ZeRO-3)",
        product.finish()?,
        "DOMAIN.md §5.2: DeepSpeed estimate_zero3_model_states_mem_needs",
    ))
}

/// The model's weights as this device keeps them through the step: none under parameter
/// offload (they live on the host), this device's shard under ZeRO-3 / FSDP (`sharded_source`),
/// otherwise every weight it holds, a quantized base keeping its other parameters in
/// `unquantized` (PEFT's k-bit cast).
fn resident_weights(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    data: u64,
    label: &str,
    sharded_source: &'static str,
) -> Result<Vec<Component>, Overflow> {
    if training.offload == Offload::Parameters {
        return Ok(Vec::new());
    }
    let ways = divisor(training, Sharding::Zero3, data);
    if ways > 1 {
        let params = device_params(shape, placement)?;
        let w = training.weights;
        return Ok(vec![Component {
            category: Category::Persistent,
            ..state(
                label,
                sharded(params, "params", w.bytes_per_element(), w.name(), ways)?,
                sharded_source,
            )
        }]);
    }
    let kept = (!training.weights.is_float_compute()).then_some(training.unquantized);
    llm::weights_keeping(
        shape,
        placement,
        WeightFormat::Uniform(training.weights),
        kept,
        Category::Persistent,
        label,
    )
}

pub(crate) fn components(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    data: u64,
) -> Result<Vec<Component>, Overflow> {
    let mut components = Vec::new();
    let base_label = match training.method {
        Method::Full | Method::Freeze { .. } => "weights",
        Method::Lora { .. } | Method::Prefix { .. } | Method::Prompt { .. } => {
            "frozen base weights"
        }
    };
    let params = device_params(shape, placement)?;
    components.extend(resident_weights(
        shape,
        placement,
        training,
        data,
        base_label,
        "DOMAIN.md §5.2: ZeRO-3 / FSDP full sharding",
    )?);
    if let Some(positions) = training.rope_tables {
        // Built in the type the model loads in: the weights' own float type, else (a quantized
        // load) the activations' `torch_dtype`.
        let load = if training.weights.is_float_compute() {
            training.weights
        } else {
            training.activations
        };
        components.push(crate::eval::llm::rope_tables(shape, placement, positions, load)?);
    }
    if training.offload == Offload::Parameters || divisor(training, Sharding::Zero3, data) > 1 {
        // Parameters offloaded (DeepSpeed `offload_param`) or sharded arrive a layer at a time.
        components.push(gathered_layer(shape, placement, training)?);
    } else {
        let kept = (!training.weights.is_float_compute()).then_some(training.unquantized);
        components.extend(autocast_head_copy(shape, placement, training, kept)?);
    }
    components.extend(reference::weights(shape, placement, training, data)?);
    // The layers autograd records: a frozen prefix of the model records none (freeze tuning).
    let recorded = match &training.method {
        Method::Freeze { layers, extra } => {
            freeze::recorded_layers(shape, placement, training, *layers, extra)
        }
        _ => *placement,
    };
    // Autocast's copies of fp32 weights live until the backward pass of the layer that made
    // them, for the layers autograd records.
    let cast = if recorded == *placement { params } else { device_params(shape, &recorded)? };
    components.extend(autocast_copies(cast, training)?);
    let mut phase = StepPhase::default();
    let trained = match &training.method {
        Method::Full => {
            // GaLore: the layer matrices keep states for their projected gradients.
            let galore = match training.galore_rank {
                Some(rank) => Some((rank, galore::projected(shape, placement, rank)?)),
                None => None,
            };
            let state_params = galore.as_ref().map_or(Ok(params), |(_, projected)| {
                (params - projected.params.min(params))
                    .checked_add(projected.state_values)
                    .ok_or(Overflow)
            })?;
            if let Some((rank, projected)) = &galore {
                components
                    .push(galore::projectors_and_step(projected, *rank, training, &mut phase)?);
            }
            components.extend(trained_states(
                "",
                params,
                state_params,
                "params",
                training,
                data,
                training.weights,
                params::factored_state_values(shape, placement),
                largest_tensor(shape, placement),
                &mut phase,
            )?);
            params
        }
        Method::Lora { rank, targets, dtype, save, dora, .. } => {
            let adapter_params = lora_params(shape, placement, *rank, targets, *dora)?;
            let names: Vec<&str> = targets.iter().map(|t| t.name()).collect();
            let magnitudes = if *dora { ", with DoRA magnitudes" } else { "" };
            let label = formula!("adapter params (rank {rank}, {}{magnitudes})", names.join(" "));
            let factored =
                lora_shapes(shape, placement, *rank, targets, *dora).ok().map(|(_, f)| f);
            let largest = largest_adapter(shape, placement, *rank, targets);
            let adapters = Adapters {
                kind: AdapterKind::Lora,
                params: adapter_params,
                label,
                dtype: *dtype,
                factored,
                largest,
            };
            components.extend(adapter_states(&adapters, training, data, &mut phase)?);
            // PEFT `modules_to_save`: whole modules trained next to the adapters, as a
            // trainable copy of the module with its own gradients and optimizer state.
            let ends = params::ends(shape, placement);
            let saved: u64 = save.iter().map(|module| ends.of(*module)).sum();
            if saved > 0 {
                let a = training.activations;
                let copy = Product::new()
                    .times(saved, "params")?
                    .bytes_each(a.bytes_per_element(), a.name())?;
                components.push(state(
                    "saved modules (trainable copy)",
                    copy.finish()?,
                    "PEFT ModulesToSaveWrapper keeps a trainable copy of each saved module",
                ));
                // A parameter's gradient has the parameter's type: the copy's, whatever the
                // adapters' gradients are (PyTorch's AMP keeps fp32 gradients only for fp32
                // parameters; DeepSpeed keeps them in the compute type).
                let copy_gradients = Training { gradients: a, ..training.clone() };
                components.extend(trained_states(
                    "saved modules: ",
                    saved,
                    saved,
                    "params",
                    &copy_gradients,
                    data,
                    training.activations,
                    // Each saved module is a vocab × hidden matrix.
                    Some(
                        save.len() as u64
                            * (div_ceil(shape.vocab, placement.tensor) + shape.hidden),
                    ),
                    ends.embedding.max(ends.head),
                    &mut phase,
                )?);
            }
            adapter_params + saved
        }
        Method::Freeze { layers, extra } => {
            let trained = freeze::trained(shape, placement, *layers, extra)?;
            let label = formula!("trained layers ({} of {}): ", trained.layers, shape.layers);
            components.extend(trained_states(
                &label,
                trained.params,
                trained.params,
                "params",
                training,
                data,
                training.weights,
                trained.factored,
                trained.largest,
                &mut phase,
            )?);
            trained.params
        }
        Method::Prefix { tokens, projection } => {
            let encoder = prompt_learning::prefix_encoder(shape, placement, *tokens, *projection)?;
            components.extend(adapter_states(&encoder, training, data, &mut phase)?);
            components
                .push(prompt_learning::saved_keys_values(shape, placement, training, *tokens)?);
            encoder.params
        }
        // The prompt encoder sits with the input embedding, on the first pipeline stage.
        Method::Prompt { tokens, encoder } if placement.stage == 0 => {
            let encoder = prompt_learning::prompt_encoder(shape, *tokens, *encoder)?;
            components.extend(adapter_states(&encoder, training, data, &mut phase)?);
            encoder.params
        }
        Method::Prompt { .. } => 0,
    };
    components.extend(deepspeed::buckets(training, data)?);
    components.extend(deepspeed::accumulating_partition(trained, training, data)?);
    // Prompt tuning runs the frozen model over the virtual tokens too.
    let ran = match &training.method {
        Method::Prompt { tokens, .. } => {
            std::borrow::Cow::Owned(prompt_learning::with_virtual_tokens(training, *tokens)?)
        }
        _ => std::borrow::Cow::Borrowed(training),
    };
    components.extend(activations(shape, &recorded, &ran)?);
    components.extend(reference::logits(shape, placement, training)?);
    components.extend(saved_dequantized_weights(shape, placement, training)?);
    components.extend(dora::weight_norm_transient(shape, placement, training)?);
    components.extend(dora::recomputed_weights(shape, placement, training)?);
    components.extend(optimizer_step(&components, &phase)?);
    Ok(components)
}

/// An fp32 output head under autocast (a k-bit base after PEFT's cast): its matmul runs on a
/// 16-bit copy of the weight, which the matmul keeps for the backward pass (the gradient of its
/// input), so the copy is alive from the logits until the head's backward. A frozen weight is
/// not a leaf autocast caches, so nothing else holds it.
fn autocast_head_copy(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    kept: Option<Precision>,
) -> Result<Option<Component>, Overflow> {
    let a = training.activations;
    let last = placement.stage + 1 == placement.stages;
    if kept != Some(Precision::Fp32) || a == Precision::Fp32 || !last {
        return Ok(None);
    }
    let head = params::ends(shape, placement).head;
    if head == 0 {
        return Ok(None);
    }
    let product = Product::new()
        .times(head, "output head params")?
        .bytes_each(a.bytes_per_element(), a.name())?;
    Ok(Some(intermediate(
        "output head: autocast copy",
        product.finish()?,
        "torch.autocast casts the fp32 head to the compute type for its matmul, which saves the copy for backward",
    )))
}

/// Autocast keeps 16-bit copies of the fp32 weights it casts (HF model_memory_anatomy: "6 bytes
/// per parameter" for weights under mixed precision); none when weights and activations share
/// a precision.
pub(super) fn autocast_copies(
    params: u64,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    if training.weights != Precision::Fp32 || training.activations == Precision::Fp32 {
        return Ok(None);
    }
    let a = training.activations;
    let copies =
        Product::new().times(params, "params")?.bytes_each(a.bytes_per_element(), a.name())?;
    Ok(Some(intermediate(
        "16-bit weight copies (autocast)",
        copies.finish()?,
        "DOMAIN.md §5.1: HF model_memory_anatomy, mixed precision weights",
    )))
}

/// A GPTQ base dequantizes each matrix to fp16 (its scales' type) in the forward pass once the
/// input has at least `kernel_switch_threshold` (128) rows, and multiplies with a plain
/// `torch.matmul(x, weights)`, which autograd makes keep the fp16 matrix for the input's
/// gradient (AutoGPTQ `qlinear_cuda_old.py` / `qlinear_cuda.py` `forward`; training must use these
/// kernels, as the exllama ones have no backward). Every layer's matrices stay dequantized until
/// its backward pass; with full checkpointing only the recomputed layer's do. Shorter inputs take
/// the fused kernel path, which saves nothing.
fn saved_dequantized_weights(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    const KERNEL_SWITCH_THRESHOLD: u64 = 128;
    if !matches!(training.weights, Precision::Gptq { .. })
        || training.sequence.saturating_mul(activations::batch(training).0)
            < KERNEL_SWITCH_THRESHOLD
    {
        return Ok(None);
    }
    let first = placement.first_layer;
    let largest = (first..first + placement.layers)
        .map(|layer| {
            params::layer_matrices(shape, layer, placement.tensor).iter().map(|(_, n)| n).sum()
        })
        .max()
        .unwrap_or(0u64);
    let layers = match training.checkpointing {
        // A dequantized matrix is a product's input, not its output: op-level checkpointing
        // recomputes it.
        Checkpointing::Full | Checkpointing::SelectiveOp => 1,
        Checkpointing::None | Checkpointing::Selective => {
            placement.layers.checked_mul(in_flight(placement, training)).ok_or(Overflow)?
        }
    };
    let fp16 = Precision::Fp16;
    let product = Product::new()
        .times(layers, "layers kept")?
        .times(largest, "matrix params per layer")?
        .bytes_each(fp16.bytes_per_element(), fp16.name())?;
    Ok(Some(intermediate(
        "dequantized GPTQ matrices (saved for backward)",
        product.finish()?,
        "AutoGPTQ QuantLinear (cuda, cuda-old) forward: fp16 dequantization and torch.matmul above kernel_switch_threshold = 128 rows",
    )))
}

/// The micro-batches whose activations a pipeline stage holds at once: under 1F1B stage `s` of
/// `n` has `n - s` in flight; a sequential pipeline (accelerate's `device_map`) runs one at a
/// time through every stage.
pub(super) fn in_flight(placement: &Placement, training: &Training) -> u64 {
    match training.pipeline_schedule {
        crate::hir::PipelineSchedule::OneForwardOneBackward => placement.stages - placement.stage,
        crate::hir::PipelineSchedule::Sequential => 1,
    }
}
