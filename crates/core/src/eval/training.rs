//! Training and fine-tuning: model states (weights, master copy, gradients, optimizer) and
//! activations. Sources: DOMAIN.md §5.1 (bytes per parameter), §5.3 (activations, Korthikanti et
//! al. 2022 adapted to gated MLPs and grouped-query attention), §5.4 (LoRA).

use super::Placement;
use super::calc::{Overflow, Product, div_ceil, formula};
use super::{llm, params};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::hir::{
    Attention, Checkpointing, LoraTarget, Method, Mlp, Offload, Saved, Shape, Sharding, Training,
};
use crate::precision::Precision;
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
    lora_shapes(shape, placement, rank, targets).map(|(params, _)| params)
}

/// Adapter parameters on this device and, for a factored optimizer, their row and column
/// counts: `(in + r) + (r + out)` per adapted matrix per layer.
fn lora_shapes(
    shape: &Shape,
    placement: &Placement,
    rank: u64,
    targets: &[LoraTarget],
) -> Result<(u64, u64), Overflow> {
    let t = placement.tensor;
    let q = shape.heads * shape.head_dim;
    let kv = shape.kv_heads * shape.head_dim;
    let mut per_layer = 0u64;
    let mut factored = 0u64;
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
        if input + output > 0 {
            factored += input + output + 2 * rank;
        }
    }
    let params = div_ceil(per_layer, t).checked_mul(placement.layers).ok_or(Overflow)?;
    let factored = div_ceil(factored, t).checked_mul(placement.layers).ok_or(Overflow)?;
    Ok((params, factored))
}

pub(super) fn state(
    name: &str,
    bytes_formula: (crate::bytes::Bytes, String),
    source: &str,
) -> Component {
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

/// How many ways a model state is divided: the data-parallel degree once the sharding stage
/// covers it (ZeRO paper §5, FSDP sharding strategies; DOMAIN.md §5.2), else 1.
fn divisor(training: &Training, covered_from: Sharding, data: u64) -> u64 {
    if training.sharding >= covered_from { data } else { 1 }
}

/// `params` values of `precision`, divided over `ways` data ranks when sharded.
pub(super) fn sharded(
    params: u64,
    label: impl Into<std::borrow::Cow<'static, str>>,
    per_element: Ratio,
    name: impl Into<std::borrow::Cow<'static, str>>,
    ways: u64,
) -> Result<(crate::bytes::Bytes, String), Overflow> {
    let mut product = Product::new().times(params, label)?.bytes_each(per_element, name)?;
    if ways > 1 {
        product = product.divided(ways, "data ranks")?;
    }
    product.finish()
}

/// The optimizer's state for `params` trained parameters, if it keeps any.
fn optimizer_state(
    name: &str,
    params: u64,
    label: &'static str,
    training: &Training,
    ways: u64,
    updated: Precision,
    factored: Option<u64>,
) -> Result<Option<Component>, Overflow> {
    let states = training.optimizer.states();
    if states == 0 {
        return Ok(None);
    }
    if let (crate::hir::Optimizer::Adafactor, Some(values)) = (training.optimizer, factored) {
        let per_value = training.master.unwrap_or(updated).bytes_per_element();
        let product = Product::new()
            .times(values, "row and column statistics and vector values")?
            .bytes_each(per_value, "factored second moment")?;
        let mut product = product;
        if ways > 1 {
            product = product.divided(ways, "data ranks")?;
        }
        let source = "Adafactor (Shazeer and Stern 2018): a factored second moment, one statistic per row and per column of each matrix, no first moment by default (HF transformers)";
        return Ok(Some(state(name, product.finish()?, source)));
    }
    // PyTorch's optimizers create their state like the parameter they update (`zeros_like`):
    // the fp32 master when there is one, else the trained parameter itself (bf16 moments in
    // pure bf16 training). 8-bit AdamW keeps its own 8-bit format.
    let per_state = match training.optimizer {
        crate::hir::Optimizer::AdamW8bit => training.optimizer.bytes_per_state(),
        _ => training.master.unwrap_or(updated).bytes_per_element(),
    };
    let per_param = per_state.checked_mul(Ratio::int(i128::from(states))).ok_or(Overflow)?;
    let label_states = formula!("{states} {} states", training.optimizer.name());
    let (bytes, formula) = sharded(params, label, per_param, label_states, ways)?;
    let source = "DOMAIN.md §5.1: AdamW keeps two moments per parameter, in the updated parameter's precision (8-bit AdamW: 1 B + an fp32 absmax per 256), SGD with momentum one";
    Ok(Some(state(name, (bytes, formula), source)))
}

/// DeepSpeed's default `sub_group_size` (ZeRO-3 configuration).
const SUB_GROUP_SIZE: u64 = 1_000_000_000;

/// What the optimizer step holds on top of the model states while it runs, for `params` trained
/// parameters updated in `updated` precision, divided over `ways` optimizer partitions; `None`
/// when the step needs nothing of its own or runs on the host.
/// - DeepSpeed ZeRO-1/2 (ZeRO-3: per sub-group, `stage3.py` `_prepare_fp32_grad_for_sub_group`)
///   flatten the partition's 16-bit gradients and cast the flat copy to fp32
///   (`stage_1_and_2.py`: `flatten(averaged_gradients[i]).to(fp32)`), holding both at once.
/// - PyTorch's foreach AdamW holds one state-sized temporary, the square root of the second
///   moment (`torch/optim/adamw.py`, `_multi_tensor_adamw`: `_foreach_sqrt(exp_avg_sqs)`).
pub(super) fn step_transient(
    params: u64,
    label: &'static str,
    training: &Training,
    updated: Precision,
    ways: u64,
) -> Result<Option<(crate::bytes::Bytes, String)>, Overflow> {
    if training.offload != Offload::None || params == 0 {
        return Ok(None);
    }
    if training.deepspeed {
        let a = training.activations.bytes_per_element();
        let per_param = a.checked_add(Ratio::int(4)).ok_or(Overflow)?;
        let what = formula!("flat {} gradients + their fp32 copy", training.activations.name());
        if training.sharding == Sharding::Zero3 {
            // ZeRO-3 steps one sub-group of at most `sub_group_size` (1e9) elements at a time.
            let partition = div_ceil(params, ways);
            let product = Product::new()
                .times(partition.min(SUB_GROUP_SIZE), "params of the largest sub-group")?
                .bytes_each(per_param, what)?;
            return product.finish().map(Some);
        }
        return sharded(params, label, per_param, what, ways).map(Some);
    }
    if training.foreach
        && training.optimizer == crate::hir::Optimizer::AdamW
        && training.sharding == Sharding::None
    {
        let per_state = training.master.unwrap_or(updated);
        let what = formula!("{} sqrt of the second moment", per_state.name());
        return sharded(params, label, per_state.bytes_per_element(), what, 1).map(Some);
    }
    Ok(None)
}

/// Master copy, gradients and optimizer state of `params` trained parameters, each divided over
/// the data ranks its sharding stage covers; master and optimizer stay on the host when
/// offloaded, and so do the gradients of sharded training.
pub(super) fn trained_states(
    prefix: &str,
    params: u64,
    label: &'static str,
    training: &Training,
    data: u64,
    updated: Precision,
    factored: Option<u64>,
) -> Result<Vec<Component>, Overflow> {
    let mut components = Vec::new();
    let master_ways = divisor(training, Sharding::Zero1, data);
    let on_device = training.offload == Offload::None;
    if let (Some(master), true) = (training.master, on_device) {
        let figures =
            sharded(params, label, master.bytes_per_element(), master.name(), master_ways)?;
        components.push(state(&format!("{prefix}master weights"), figures, "DOMAIN.md §5.1: mixed precision keeps an fp32 master copy (DeepSpeed memory.rst, HF model_memory_anatomy)"));
    }
    // Sharded training that offloads the optimizer moves each gradient to the host as soon as
    // it is reduced: DeepSpeed ZeRO-Offload copies the reduce buckets into the CPU optimizer's
    // fp32 gradient partition (`stage_1_and_2.py` with `cpu_offload`, `stage3.py` with
    // `offload_optimizer`), FSDP's `CPUOffload` moves the reduced shard. What stays on the
    // device is the buckets (ZeRO-1/2) or the gathered layer's gradients (ZeRO-3, FSDP).
    let gradients_on_host = !on_device && training.sharding != Sharding::None;
    if !gradients_on_host {
        let g = training.gradients;
        let gradient_ways = divisor(training, Sharding::Zero2, data);
        let figures = sharded(params, label, g.bytes_per_element(), g.name(), gradient_ways)?;
        components.push(state(&format!("{prefix}gradients"), figures, "DOMAIN.md §5.1"));
    }
    if on_device {
        components.extend(optimizer_state(
            &format!("{prefix}optimizer state"),
            params,
            label,
            training,
            master_ways,
            updated,
            factored,
        )?);
    }
    Ok(components)
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
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "gathered layer (ZeRO-3)".to_string(),
        category: Category::Intermediate,
        bytes: product.value()?,
        provenance: Provenance::Formula,
        formula: product.finish()?.1,
        source: Some("DOMAIN.md §5.2: DeepSpeed estimate_zero3_model_states_mem_needs".into()),
    })
}

pub(crate) fn components(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    data: u64,
) -> Result<Vec<Component>, Overflow> {
    let mut components = Vec::new();
    let weights_ways = divisor(training, Sharding::Zero3, data);
    let base_label = match training.method {
        Method::Full => "weights",
        Method::Lora { .. } => "frozen base weights",
    };
    let params = device_params(shape, placement)?;
    if training.offload == Offload::Parameters {
        // DeepSpeed `offload_param`: parameters live on the host and arrive a layer at a time.
        components.push(gathered_layer(shape, placement, training)?);
    } else if weights_ways > 1 {
        let w = training.weights;
        components.push(Component {
            category: Category::Persistent,
            ..state(
                base_label,
                sharded(params, "params", w.bytes_per_element(), w.name(), weights_ways)?,
                "DOMAIN.md §5.2: ZeRO-3 / FSDP full sharding",
            )
        });
        components.push(gathered_layer(shape, placement, training)?);
    } else {
        // A quantized base keeps its other parameters in `unquantized` (PEFT's k-bit cast).
        let kept = (!training.weights.is_float_compute()).then_some(training.unquantized);
        components.extend(llm::weights_keeping(
            shape,
            placement,
            WeightFormat::Uniform(training.weights),
            kept,
            Category::Persistent,
            base_label,
        )?);
        components.extend(autocast_head_copy(shape, placement, training, kept)?);
    }
    components.extend(autocast_copies(params, training)?);
    let master_ways = divisor(training, Sharding::Zero1, data);
    let mut step = Vec::new();
    match &training.method {
        Method::Full => {
            step.extend(step_transient(params, "params", training, training.weights, master_ways)?);
            components.extend(trained_states(
                "",
                params,
                "params",
                training,
                data,
                training.weights,
                params::factored_state_values(shape, placement),
            )?);
        }
        Method::Lora { rank, targets, dtype, save } => {
            let adapter_params = lora_params(shape, placement, *rank, targets)?;
            let names: Vec<&str> = targets.iter().map(|t| t.name()).collect();
            let label = formula!("adapter params (rank {rank}, {})", names.join(" "));
            let factored = lora_shapes(shape, placement, *rank, targets).ok().map(|(_, f)| f);
            let adapters = Adapters { params: adapter_params, label, dtype: *dtype, factored };
            components.extend(adapter_states(&adapters, training, data, &mut step)?);
            // PEFT `modules_to_save`: whole modules trained next to the adapters, as a
            // trainable copy of the module with its own gradients and optimizer state.
            let ends = params::ends(shape, placement);
            let saved: u64 = save
                .iter()
                .map(|module| match module {
                    Saved::Embeddings => ends.embedding,
                    Saved::Head => ends.head,
                })
                .sum();
            if saved > 0 {
                step.extend(step_transient(
                    saved,
                    "params",
                    training,
                    training.activations,
                    master_ways,
                )?);
                let a = training.activations;
                let copy = Product::new()
                    .times(saved, "params")?
                    .bytes_each(a.bytes_per_element(), a.name())?;
                components.push(state(
                    "saved modules (trainable copy)",
                    copy.finish()?,
                    "PEFT ModulesToSaveWrapper keeps a trainable copy of each saved module",
                ));
                components.extend(trained_states(
                    "saved modules: ",
                    saved,
                    "params",
                    training,
                    data,
                    training.activations,
                    // Each saved module is a vocab × hidden matrix.
                    Some(
                        save.len() as u64
                            * (div_ceil(shape.vocab, placement.tensor) + shape.hidden),
                    ),
                )?);
            }
        }
    }
    if let Some(elements) =
        training.bucket_elements.filter(|_| data > 1 || training.sharding != Sharding::None)
    {
        // Gradients reduce through a bucket, double-buffered to overlap with the backward pass
        // (`overlap_comm`): two buckets of 16-bit gradients.
        let a = training.activations;
        let product = Product::new()
            .times(2, "buckets")?
            .times(elements, "elements (reduce_bucket_size)")?
            .bytes_each(a.bytes_per_element(), a.name())?;
        components.push(Component {
            category: Category::Workspace,
            ..state(
                "ZeRO gradient buckets (DeepSpeed)",
                product.finish()?,
                "DeepSpeed zero_optimization: reduce_bucket_size (default 5e8) with overlap_comm",
            )
        });
    }
    components.extend(activations(shape, placement, training)?);
    components.extend(saved_dequantized_weights(shape, placement, training)?);
    components.extend(optimizer_step(&components, &step)?);
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
    Ok(Some(Component {
        held_by: HeldBy::Tensors,
        name: "output head: autocast copy".to_string(),
        category: Category::Intermediate,
        bytes: product.value()?,
        provenance: Provenance::Formula,
        formula: product.finish()?.1,
        source: Some(
            "torch.autocast casts the fp32 head to the compute type for its matmul, which saves the copy for backward"
                .into(),
        ),
    }))
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
    Ok(Some(Component {
        category: Category::Intermediate,
        ..state(
            "16-bit weight copies (autocast)",
            copies.finish()?,
            "DOMAIN.md §5.1: HF model_memory_anatomy, mixed precision weights",
        )
    }))
}

/// LoRA adapters on this device: their count (with its formula label), precision and, for a
/// factored optimizer, their row and column count.
pub(super) struct Adapters {
    pub(super) params: u64,
    pub(super) label: String,
    pub(super) dtype: Precision,
    pub(super) factored: Option<u64>,
}

/// The adapters, their gradients and their optimizer state; what the optimizer step needs of
/// its own goes to `step`.
pub(super) fn adapter_states(
    adapters: &Adapters,
    training: &Training,
    data: u64,
    step: &mut Vec<(crate::bytes::Bytes, String)>,
) -> Result<Vec<Component>, Overflow> {
    let Adapters { params, dtype, .. } = *adapters;
    let mut components = Vec::new();
    let weights = Product::new()
        .times(params, adapters.label.clone())?
        .bytes_each(dtype.bytes_per_element(), dtype.name())?;
    components.push(state(
        "LoRA adapters",
        weights.finish()?,
        "DOMAIN.md §5.4: PEFT lora_A (in × r) and lora_B (r × out)",
    ));
    let gradient_ways = divisor(training, Sharding::Zero2, data);
    let figures =
        sharded(params, "adapter params", dtype.bytes_per_element(), dtype.name(), gradient_ways)?;
    components.push(state("adapter gradients", figures, "DOMAIN.md §5.4"));
    let master_ways = divisor(training, Sharding::Zero1, data);
    step.extend(step_transient(params, "adapter params", training, dtype, master_ways)?);
    if training.offload == Offload::None {
        components.extend(optimizer_state(
            "adapter optimizer state",
            params,
            "adapter params",
            training,
            master_ways,
            dtype,
            adapters.factored,
        )?);
    }
    Ok(components)
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
        || training.sequence.saturating_mul(training.micro_batch) < KERNEL_SWITCH_THRESHOLD
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
        Checkpointing::Full => 1,
        Checkpointing::None | Checkpointing::Selective => {
            let in_flight = placement.stages - placement.stage;
            placement.layers.checked_mul(in_flight).ok_or(Overflow)?
        }
    };
    let fp16 = Precision::Fp16;
    let product = Product::new()
        .times(layers, "layers kept")?
        .times(largest, "matrix params per layer")?
        .bytes_each(fp16.bytes_per_element(), fp16.name())?;
    let (bytes, formula) = product.finish()?;
    Ok(Some(Component {
        held_by: HeldBy::Tensors,
        name: "dequantized GPTQ matrices (saved for backward)".to_string(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(
            "AutoGPTQ QuantLinear (cuda, cuda-old) forward: fp16 dequantization and torch.matmul above kernel_switch_threshold = 128 rows".into(),
        ),
    }))
}

/// The optimizer step runs after the backward pass has freed its activations, so the device
/// holds the larger of the two phases' transients: the step is counted only for what it needs
/// beyond the backward pass's intermediates.
pub(super) fn optimizer_step(
    components: &[Component],
    step: &[(crate::bytes::Bytes, String)],
) -> Result<Option<Component>, Overflow> {
    let needed = super::calc::sum(step.iter().map(|(bytes, _)| *bytes))?;
    let backward = super::calc::sum(
        components.iter().filter(|c| c.category == Category::Intermediate).map(|c| c.bytes),
    )?;
    if needed <= backward {
        return Ok(None);
    }
    let held = if let [(_, formula)] = step {
        formula.clone()
    } else {
        let terms: Vec<String> = step.iter().map(|(_, f)| formula!("({f})")).collect();
        formula!("{} = {needed}", terms.join(" + "))
    };
    let beyond = crate::bytes::Bytes(needed.0 - backward.0);
    Ok(Some(Component {
        held_by: HeldBy::Tensors,
        name: "optimizer step".to_string(),
        category: Category::Intermediate,
        bytes: beyond,
        provenance: Provenance::Formula,
        formula: formula!(
            "{held}, less the backward pass's intermediates ({backward}) freed before the step = {beyond}"
        ),
        source: Some(
            "DeepSpeed stage_1_and_2.py (flat gradients cast to fp32); torch.optim.AdamW foreach (one sqrt temporary)".into(),
        ),
    }))
}

/// Bytes one layer stores for the backward pass, per token:
/// attention: norm input and output (2h), q/k/v (`(heads + 2·kv_heads)·head_dim`), attention
/// output (`heads·head_dim`), fp32 softmax statistics (4 B per head);
/// MLP: norm input and output (2h), gate, up, activation and product (4·ffn; 2·ffn ungated);
/// with dropout, a one-byte mask after attention and after the MLP.
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
    // Sequence parallelism splits the h-sized tensors (norms, residuals) over the tensor ranks too.
    let replicated =
        if training.sequence_parallel { div_ceil(4 * shape.hidden, t) } else { 4 * shape.hidden };
    let elements = replicated
        + (2 * heads + 2 * kv_heads) * shape.head_dim
        + ffn_tensors * div_ceil(shape.ffn, t);
    let stream = stream(training);
    let elem = stream.bytes_per_element();
    // Softmax statistics are 4 fp32 bytes per head per token; with dropout, the attention and
    // MLP outputs' one-byte masks (Korthikanti et al.: sbh each). Fold them in as elements.
    let masks = if shape.dropout { 2 * div_ceil(shape.hidden, t) } else { 0 };
    let extra_bytes = 4 * heads + masks;
    let stats = Ratio::int(i128::from(extra_bytes)).checked_div(elem).ok_or(Overflow)?;
    let per_token = Ratio::int(i128::from(elements)).checked_add(stats).ok_or(Overflow)?;
    let per_token = u64::try_from(per_token.ceil()).map_err(|_| Overflow)?;
    Product::new()
        .times(training.sequence, "tokens")?
        .times(training.micro_batch, "micro_batch")?
        .times(per_token, "elements per token per layer")?
        .bytes_each(elem, stream.name())
}

/// The type a layer's stored activations have. Usually the compute type; but a quantized base
/// whose embedding was cast to fp32 (PEFT's k-bit preparation) feeds fp32 into the residual
/// stream, the residual adds promote every layer's output back to fp32, and bitsandbytes layers
/// return their input's type: the layer inputs and most of what a layer stores are fp32, though
/// autocast runs the matmuls in 16-bit.
fn stream(training: &Training) -> Precision {
    let cast = training.unquantized == Precision::Fp32 && !training.weights.is_float_compute();
    if cast { Precision::Fp32 } else { training.activations }
}

pub(super) fn activations(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Vec<Component>, Overflow> {
    let elem = stream(training);
    let per_layer = layer_activation_formula(shape, placement, training)?;
    let per_layer_bytes = per_layer.value()?;
    // 1F1B pipeline schedule: stage s keeps (stages - s) micro-batches in flight.
    let in_flight = placement.stages - placement.stage;
    let mut components = Vec::new();
    let source =
        "DOMAIN.md §5.3: Korthikanti et al. 2022 (Table 2) adapted to gated MLP, GQA, no dropout";
    let (bytes, formula) = match training.checkpointing {
        Checkpointing::None | Checkpointing::Selective => {
            let total = Product::new()
                .times(placement.layers, "layers")?
                .times(in_flight, "micro-batches in flight")?
                .bytes_each(
                    Ratio::int(i128::from(per_layer_bytes.0)),
                    formula!("per layer: {}", per_layer.terms()),
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
                formula!(
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
        components.extend(eager_attention(shape, placement, training)?);
    }
    if placement.stage + 1 == placement.stages && shape.output == crate::hir::Output::Lm {
        // The cross-entropy path at its peak, per logit: in the backward pass the log-softmax
        // kept from the forward pass, its incoming gradient and the logits' outgoing gradient,
        // each in the loss's precision: 12 B in fp32. The forward pass never holds more: 16-bit
        // logits, their shifted contiguous copy, the fp32 upcast and the fp32 log-softmax are
        // 2 + 2 + 4 + 4 B, and fp32 logits skip the upcast (4 + 4 + 4 B). A 16-bit loss (remote
        // code without `.float()`, no autocast) has no upcast: 2 + 2 + 2 B forward, 3 × 2 B back.
        let loss = training.loss;
        let per_logit = loss.bytes_per_element().checked_mul(Ratio::int(3)).ok_or(Overflow)?;
        let what = format!("{} log-softmax + its gradient + the logits' gradient", loss.name());
        let logits = Product::new()
            .times(training.sequence, "tokens")?
            .times(training.micro_batch, "micro_batch")?
            .times(shape.vocab, "vocab")?
            .bytes_each(per_logit, what)?;
        let (bytes, formula) = logits.finish()?;
        components.push(Component {
            held_by: HeldBy::Tensors,
            name: "logits and loss".to_string(),
            category: Category::Intermediate,
            bytes,
            provenance: Provenance::Formula,
            formula,
            source: Some(if loss == Precision::Fp32 {
                "DOMAIN.md §4.1: training logits are upcast to fp32 for the cross-entropy loss"
                    .into()
            } else {
                "the workload's `loss`: the cross-entropy runs on the 16-bit logits".into()
            }),
        });
    }
    Ok(components)
}

/// What an eager (unfused) attention materializes at the training peak, batch × heads × s²
/// per layer. Stored for every layer without recomputation; with selective or full
/// recomputation, only for the one layer whose attention is recomputed in the backward pass.
/// And in the backward pass of one layer's attention, beside the probabilities it kept, the
/// gradient arriving for them and the one computed for the scores (`softmax_backward_data`:
/// dS = P ⊙ (dP − Σ dP ⊙ P)), both score-sized and in fp32 (the softmax runs in fp32).
fn eager_attention(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Vec<Component>, Overflow> {
    let elem = training.activations;
    // The softmax runs in fp32 (autocast's fp32 list; transformers' eager attention asks for
    // `dtype=float32`) and keeps its output for backward; a 16-bit run casts it back, and the
    // matmul with V keeps that copy. Attention dropout keeps a one-byte mask and its output
    // (Korthikanti et al.). DOMAIN.md §4.2.
    let e = elem.bytes_per_element();
    let mut per_score = Ratio::int(4);
    let mut kept = "fp32 softmax".to_string();
    if e < Ratio::int(4) {
        per_score = per_score.checked_add(e).ok_or(Overflow)?;
        kept = format!("{kept} + its {} copy", elem.name());
    }
    if shape.dropout {
        per_score =
            per_score.checked_add(e).and_then(|p| p.checked_add(Ratio::int(1))).ok_or(Overflow)?;
        kept = format!("{kept} + dropout output and 1 B mask");
    }
    let (layers, which) = match training.checkpointing {
        Checkpointing::None => (placement.layers, "layers"),
        Checkpointing::Selective | Checkpointing::Full => (1, "recomputed layer"),
    };
    let heads = shape.heads / placement.tensor;
    let scores = Product::new()
        .times(layers, which)?
        .times(training.micro_batch, "micro_batch")?
        .times(heads, "heads")?
        .times(training.sequence, "queries")?
        .times(training.sequence, "keys")?
        .bytes_each(per_score, kept)?;
    Ok(vec![
        Component {
            held_by: HeldBy::Tensors,
            name: "attention scores (eager)".to_string(),
            category: Category::Intermediate,
            bytes: scores.value()?,
            provenance: Provenance::Formula,
            formula: scores.finish()?.1,
            source: Some("DOMAIN.md §4.2: eager attention materializes batch × heads × s²".into()),
        },
        softmax_gradients(
            (training.micro_batch, "micro_batch"),
            heads,
            training.sequence,
            (training.sequence, "keys"),
        )?,
    ])
}

/// The backward pass through one eager attention's softmax holds, beside the probabilities it
/// kept, the gradient arriving for them (from the product with V) and the gradient it computes
/// for the scores (`softmax_backward_data`: dS = P ⊙ (dP − Σ dP ⊙ P)), both score-sized and in
/// fp32 (the softmax runs in fp32). `batch` and `keys` come with the names their formula uses.
pub(super) fn softmax_gradients(
    batch: (u64, &'static str),
    heads: u64,
    queries: u64,
    keys: (u64, &'static str),
) -> Result<Component, Overflow> {
    let product = Product::new()
        .times(2, "gradients (probabilities, scores)")?
        .times(batch.0, batch.1)?
        .times(heads, "heads")?
        .times(queries, "queries")?
        .times(keys.0, keys.1)?
        .bytes_each(Ratio::int(4), "fp32")?;
    let (bytes, formula) = product.finish()?;
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "eager attention backward (softmax gradients)".to_string(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(
            "derived: PyTorch softmax backward (grad_output and grad_input beside the saved output)".into(),
        ),
    })
}
