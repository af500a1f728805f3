//! The model states of training: master copy, gradients and optimizer state, each divided over
//! the data ranks its sharding stage covers, and what the optimizer step holds beside them.
//! Sources: DOMAIN.md §5.1 (bytes per parameter), §5.2 (ZeRO and FSDP sharding).

use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::eval::calc::{Overflow, Product, div_ceil, formula};
use crate::hir::{Offload, Sharding, Training};
use crate::precision::Precision;
use crate::ratio::Ratio;

/// A model state: tensors whose bytes come from a formula.
pub(in crate::eval) fn state(
    name: &str,
    bytes_formula: (crate::bytes::Bytes, String),
    source: &str,
) -> Component {
    formula_tensors(Category::TrainingState, name, bytes_formula, source)
}

/// What the step holds for a while (activations, copies, transients): tensors whose bytes come
/// from a formula.
pub(in crate::eval) fn intermediate(
    name: &str,
    bytes_formula: (crate::bytes::Bytes, String),
    source: &str,
) -> Component {
    formula_tensors(Category::Intermediate, name, bytes_formula, source)
}

fn formula_tensors(
    category: Category,
    name: &str,
    (bytes, formula): (crate::bytes::Bytes, String),
    source: &str,
) -> Component {
    Component {
        held_by: HeldBy::Tensors,
        name: name.to_string().into(),
        category,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(source.to_string().into()),
    }
}

/// How many ways a model state is divided: the data-parallel degree once the sharding stage
/// covers it (ZeRO paper §5, FSDP sharding strategies; DOMAIN.md §5.2), else 1.
pub(super) fn divisor(training: &Training, covered_from: Sharding, data: u64) -> u64 {
    if training.sharding >= covered_from { data } else { 1 }
}

/// `params` values of `precision`, divided over `ways` data ranks when sharded.
pub(in crate::eval) fn sharded(
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
    let per_state = if training.optimizer.is_eight_bit() {
        training.optimizer.bytes_per_state()
    } else {
        training.master.unwrap_or(updated).bytes_per_element()
    };
    let per_param = per_state.checked_mul(Ratio::int(i128::from(states))).ok_or(Overflow)?;
    let label_states = formula!("{states} {} states", training.optimizer.name());
    let (bytes, formula) = sharded(params, label, per_param, label_states, ways)?;
    if training.states_memory == crate::hir::StatesMemory::Paged {
        // bitsandbytes' paged optimizers allocate their states with cudaMallocManaged: on the
        // device while there is room, but outside PyTorch's allocator, so only the device view
        // (nvidia-smi) sees them.
        return Ok(Some(Component {
            held_by: HeldBy::Runtime,
            ..state(
                name,
                (bytes, formula!("{formula}, paged (unified memory, outside the allocator)")),
                "bitsandbytes paged optimizers (Paged AdamW, Paged AdamW8bit): states in CUDA unified memory (cudaMallocManaged), evicted to the host under pressure",
            )
        }));
    }
    Ok(Some(state(name, (bytes, formula), states_source(training.optimizer))))
}

/// Where an optimizer's per-parameter states are read: each is created like the parameter it
/// updates (`zeros_like`, or a clone).
fn states_source(optimizer: crate::hir::Optimizer) -> &'static str {
    use crate::hir::Optimizer as O;
    match optimizer {
        O::AdamW | O::AdamW8bit | O::Adafactor | O::Sgd | O::SgdMomentum => {
            "DOMAIN.md §5.1: AdamW keeps two moments per parameter, in the updated parameter's precision (8-bit AdamW: 1 B + an fp32 absmax per 256), SGD with momentum one"
        }
        O::Lion => "Lion (Chen et al. 2023; lion-pytorch, bitsandbytes Lion): exp_avg",
        O::Lamb => "LAMB (You et al. 2019; Apex FusedLAMB, timm Lamb): exp_avg, exp_avg_sq",
        O::Rmsprop => "torch.optim.RMSprop, defaults (momentum 0, centered False): square_avg",
        O::Adagrad => "torch.optim.Adagrad: sum",
        O::Sophia => "Sophia (Liu et al. 2023, SophiaG): exp_avg, hessian",
        O::Adan => {
            "Adan (Xie et al. 2022, sail-sg/Adan): exp_avg, exp_avg_sq, exp_avg_diff, pre_grad"
        }
        O::Prodigy => "Prodigy (konstmish/prodigy): exp_avg, exp_avg_sq, s, p0 (slice_p 1)",
        O::AdamWScheduleFree => {
            "Schedule-free AdamW (facebookresearch/schedule_free AdamWScheduleFree): z, exp_avg_sq"
        }
        O::Lion8bit | O::Rmsprop8bit | O::Adagrad8bit | O::SgdMomentum8bit => {
            "bitsandbytes Optimizer1State (Lion8bit, RMSprop8bit, Adagrad8bit, SGD8bit): one uint8 state1 and an fp32 absmax1 per 256-value block"
        }
    }
}

/// DeepSpeed's default `sub_group_size` (ZeRO-3 configuration).
pub(in crate::eval) const SUB_GROUP_SIZE: u64 = 1_000_000_000;

/// What the optimizer step holds on top of the model states while it runs, for `params` trained
/// parameters updated in `updated` precision, divided over `ways` optimizer partitions; `None`
/// when the step needs nothing of its own or runs on the host.
/// - DeepSpeed ZeRO-1/2 (ZeRO-3: per sub-group, `stage3.py` `_prepare_fp32_grad_for_sub_group`)
///   flatten the partition's 16-bit gradients and cast the flat copy to fp32
///   (`stage_1_and_2.py`: `flatten(averaged_gradients[i]).to(fp32)`), holding both at once.
/// - PyTorch's foreach AdamW holds state-sized intermediates over every parameter: from 2.1
///   one, the square root of the second moment (`torch/optim/adamw.py`, `_multi_tensor_adamw`:
///   `_foreach_sqrt(exp_avg_sqs)`, `eps` added in place); in 2.0 also the denominator built
///   from it (`_foreach_add(exp_avg_sq_sqrt, eps)`, pytorch/pytorch#97712).
fn step_transient(
    params: u64,
    label: &'static str,
    training: &Training,
    updated: Precision,
    ways: u64,
) -> Result<Option<(crate::bytes::Bytes, String)>, Overflow> {
    // Stepped in the backward pass, each parameter has its own optimizer: its temporaries are
    // one tensor's, left out like a per-tensor loop's.
    // GaLore's optimizer loops over the parameters one at a time (`galore.rs` counts its step).
    if training.offload != Offload::None
        || params == 0
        || training.levers.step_in_backward
        || training.galore_rank.is_some()
    {
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
    // bitsandbytes' paged optimizers step each tensor with one fused kernel: no temporaries.
    if training.foreach_intermediates > 0
        && training.optimizer == crate::hir::Optimizer::AdamW
        && training.sharding == Sharding::None
        && training.states_memory == crate::hir::StatesMemory::Allocator
    {
        let per_state = training.master.unwrap_or(updated);
        let (bytes, what) = if training.foreach_intermediates == 1 {
            (
                per_state.bytes_per_element(),
                formula!("{} sqrt of the second moment", per_state.name()),
            )
        } else {
            let n = training.foreach_intermediates;
            let bytes =
                per_state.bytes_per_element().checked_mul(Ratio::int(n.into())).ok_or(Overflow)?;
            let what = formula!(
                "{n} × {}, the sqrt of the second moment and the denominator: PyTorch 2.0",
                per_state.name()
            );
            (bytes, what)
        };
        return sharded(params, label, bytes, what, 1).map(Some);
    }
    Ok(None)
}

/// The gradients, in `g`, of `params` trained parameters: all of them, divided over the data
/// ranks when sharded; or, when the optimizer steps in the backward pass, only the largest
/// tensor's (`largest` values), the one gradient that can be waiting for its step (a tied
/// embedding's waits from the output head's backward to the embedding's).
fn gradients(
    params: u64,
    label: &'static str,
    g: Precision,
    training: &Training,
    data: u64,
    largest: u64,
) -> Result<(crate::bytes::Bytes, String), Overflow> {
    if training.levers.step_in_backward {
        let product = Product::new()
            .times(largest.min(params), "params of the largest trained tensor")?
            .bytes_each(g.bytes_per_element(), g.name())?;
        return product.finish();
    }
    sharded(
        params,
        label,
        g.bytes_per_element(),
        g.name(),
        divisor(training, Sharding::Zero2, data),
    )
}

const GRADIENTS_SOURCE: &str = "DOMAIN.md §5.1";
const STEP_IN_BACKWARD_SOURCE: &str = "torchtune optimizer_in_bwd: one optimizer per parameter, stepped by register_post_accumulate_grad_hook, which then frees the gradient";

/// Master copy, gradients and optimizer state of `params` trained parameters, each divided over
/// the data ranks its sharding stage covers; master and optimizer stay on the host when
/// offloaded, and so do the gradients of sharded training. `largest`: the values of the
/// largest trained tensor. What the optimizer step holds of its own goes to `phase`, and so do
/// gradients freed after every step.
#[allow(clippy::too_many_arguments)]
/// `state_params`: the values the optimizer keeps states for, per state (`params`, or fewer
/// under GaLore, whose layer matrices keep projected states).
pub(in crate::eval) fn trained_states(
    prefix: &str,
    params: u64,
    state_params: u64,
    label: &'static str,
    training: &Training,
    data: u64,
    updated: Precision,
    factored: Option<u64>,
    largest: u64,
    phase: &mut StepPhase,
) -> Result<Vec<Component>, Overflow> {
    let mut components = Vec::new();
    let master_ways = divisor(training, Sharding::Zero1, data);
    phase.transients.extend(step_transient(params, label, training, updated, master_ways)?);
    let on_device = training.offload == Offload::None;
    if let (Some(master), true) = (training.master, on_device) {
        let figures =
            sharded(params, label, master.bytes_per_element(), master.name(), master_ways)?;
        components.push(state(&format!("{prefix}master weights"), figures, "DOMAIN.md §5.1: mixed precision keeps an fp32 master copy (DeepSpeed memory.rst, HF model_memory_anatomy)"));
    }
    // Offloaded with sharding, each reduced gradient goes to the host; what stays on the device
    // is the buckets (ZeRO-1/2) or the gathered layer's gradients (ZeRO-3, FSDP).
    if !training.gradients_on_host() {
        let figures = gradients(params, label, training.gradients, training, data, largest)?;
        if training.gradients_freed_each_step() {
            phase.gradients.push((figures.0, formula!("{prefix}gradients {}", figures.1)));
        } else {
            components.push(state(
                &format!("{prefix}gradients"),
                figures,
                gradients_source(training),
            ));
        }
    }
    if on_device {
        let state_label = if state_params == params {
            label
        } else {
            "values (the other params and the layer matrices' projected gradients)"
        };
        components.extend(optimizer_state(
            &format!("{prefix}optimizer state"),
            state_params,
            state_label,
            training,
            master_ways,
            updated,
            factored,
        )?);
    }
    Ok(components)
}

/// LoRA adapters on this device: their count (with its formula label), precision and, for a
/// factored optimizer, their row and column count.
pub(in crate::eval) struct Adapters {
    pub(in crate::eval) kind: AdapterKind,
    pub(in crate::eval) params: u64,
    pub(in crate::eval) label: String,
    pub(in crate::eval) dtype: Precision,
    pub(in crate::eval) factored: Option<u64>,
    /// Values of the largest adapter matrix (`rank × max(in, out)`).
    pub(in crate::eval) largest: u64,
}

/// What the trained module next to a frozen model is.
#[derive(Clone, Copy)]
pub(in crate::eval) enum AdapterKind {
    Lora,
    /// Prefix tuning's encoder: the trained keys and values (and their MLP).
    Prefix,
    /// Prompt tuning's (or P-tuning's) encoder: the trained input embeddings (and their MLP).
    Prompt,
}

impl AdapterKind {
    fn name(self) -> &'static str {
        match self {
            AdapterKind::Lora => "LoRA adapters",
            AdapterKind::Prefix => "prefix encoder",
            AdapterKind::Prompt => "prompt encoder",
        }
    }

    fn source(self) -> &'static str {
        match self {
            AdapterKind::Lora => "DOMAIN.md §5.4: PEFT lora_A (in × r) and lora_B (r × out)",
            AdapterKind::Prefix => {
                "PEFT PrefixEncoder: an Embedding of num_virtual_tokens × (num_layers × 2 × token_dim), fp32"
            }
            AdapterKind::Prompt => {
                "PEFT PromptEmbedding (num_virtual_tokens × token_dim) or PromptEncoder (its MLP), fp32"
            }
        }
    }
}

fn gradients_source(training: &Training) -> &'static str {
    if training.levers.step_in_backward { STEP_IN_BACKWARD_SOURCE } else { GRADIENTS_SOURCE }
}

/// The adapters, their gradients and their optimizer state; what the optimizer step needs of
/// its own goes to `step`.
pub(in crate::eval) fn adapter_states(
    adapters: &Adapters,
    training: &Training,
    data: u64,
    phase: &mut StepPhase,
) -> Result<Vec<Component>, Overflow> {
    let Adapters { params, dtype, .. } = *adapters;
    let mut components = Vec::new();
    // ZeRO-3 and FSDP's full sharding partition every parameter, the adapters' too.
    let weight_ways = divisor(training, Sharding::Zero3, data);
    let weights = sharded(
        params,
        adapters.label.clone(),
        dtype.bytes_per_element(),
        dtype.name(),
        weight_ways,
    )?;
    let kind = adapters.kind;
    let source = if weight_ways > 1 {
        match kind {
            AdapterKind::Lora => {
                "DOMAIN.md §5.4: PEFT lora_A (in × r) and lora_B (r × out); §5.2: ZeRO-3 / FSDP full sharding"
            }
            AdapterKind::Prefix | AdapterKind::Prompt => {
                "PEFT prompt learning, fp32; DOMAIN.md §5.2: ZeRO-3 / FSDP full sharding"
            }
        }
    } else {
        kind.source()
    };
    components.push(state(kind.name(), weights, source));
    let figures = gradients(params, "adapter params", dtype, training, data, adapters.largest)?;
    if training.gradients_freed_each_step() {
        phase.gradients.push((figures.0, formula!("adapter gradients {}", figures.1)));
    } else {
        let source = if training.levers.step_in_backward {
            STEP_IN_BACKWARD_SOURCE
        } else {
            "DOMAIN.md §5.4"
        };
        components.push(state("adapter gradients", figures, source));
    }
    let master_ways = divisor(training, Sharding::Zero1, data);
    phase.transients.extend(step_transient(
        params,
        "adapter params",
        training,
        dtype,
        master_ways,
    )?);
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

/// What the step holds beyond the model states once the backward pass is over: the optimizer's
/// temporaries and, when the loop frees the gradients after every step, the gradients
/// themselves (they exist from the backward pass to the step, never in the forward pass).
#[derive(Default)]
pub(in crate::eval) struct StepPhase {
    pub(in crate::eval) transients: Vec<(crate::bytes::Bytes, String)>,
    pub(in crate::eval) gradients: Vec<(crate::bytes::Bytes, String)>,
}

/// The optimizer step runs after the backward pass has freed its activations, so the device
/// holds the larger of the two phases' transients: the step is counted only for what it needs
/// beyond the backward pass's intermediates. Gradients freed after every step belong to the
/// step's phase too: the backward pass frees each layer's activations as it makes that
/// layer's gradients, so the peak is the larger of the intermediates and the gradients with
/// the step's temporaries, not their sum.
pub(in crate::eval) fn optimizer_step(
    components: &[Component],
    phase: &StepPhase,
) -> Result<Option<Component>, Overflow> {
    let step = || phase.gradients.iter().chain(&phase.transients);
    let needed = crate::eval::calc::sum(step().map(|(bytes, _)| *bytes))?;
    let backward = crate::eval::calc::sum(
        components.iter().filter(|c| c.category == Category::Intermediate).map(|c| c.bytes),
    )?;
    let freed_gradients = !phase.gradients.is_empty();
    if needed <= backward && !freed_gradients {
        return Ok(None);
    }
    let held = if phase.gradients.len() + phase.transients.len() == 1 {
        step().map(|(_, formula)| formula.clone()).collect()
    } else {
        let terms: Vec<String> = step().map(|(_, f)| formula!("({f})")).collect();
        formula!("{} = {needed}", terms.join(" + "))
    };
    if !freed_gradients {
        let beyond = crate::bytes::Bytes(needed.0 - backward.0);
        let formula = formula!(
            "{held}, less the backward pass's intermediates ({backward}) freed before the step = {beyond}"
        );
        return Ok(Some(intermediate(
            "optimizer step",
            (beyond, formula),
            "DeepSpeed stage_1_and_2.py (flat gradients cast to fp32); torch.optim.AdamW foreach (one sqrt temporary)",
        )));
    }
    let name = if phase.transients.is_empty() {
        "gradients (freed each step)"
    } else {
        "gradients and optimizer step"
    };
    let beyond = crate::bytes::Bytes(needed.0.saturating_sub(backward.0));
    let formula = if needed > backward {
        formula!(
            "{held}, less the forward and backward passes' intermediates ({backward}), freed as the gradients are made = {beyond}"
        )
    } else {
        formula!(
            "{held}, within the forward and backward passes' intermediates ({backward}), freed as the gradients are made: nothing beyond them"
        )
    };
    // Transient like the step it ends in: a phase that other phases (a VAE encode before the
    // forward pass) overlap with, not a state held through the step.
    Ok(Some(intermediate(
        name,
        (beyond, formula),
        "PyTorch 2.0+ zero_grad(set_to_none=True), its default: no gradient exists in the forward pass, and the backward pass makes them as it frees the activations",
    )))
}
