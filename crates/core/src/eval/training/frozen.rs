//! What a layer holds that the trained layer's count does not say: a frozen projection keeps no
//! input for its backward pass, a fused q/k/v projection's output stays whole behind the value
//! the attention keeps, and a layer's forward pass holds tensors no backward node keeps while
//! its MLP's output projection runs.
//!
//! Counted against transformers' Llama with PEFT's LoRA on the CPU, under bf16 autocast with
//! CUDA's fp32 ops (`tools/dit-train-peak.py`'s `CudaAutocast`; the counter of
//! `tools/decode-peak.py`): `a_lora_layer_keeps_what_peft_keeps` and
//! `a_checkpointed_lora_step_holds_what_peft_holds` in `tests/integration/reference.rs`.

use super::activations::{batch, stream};
use crate::bytes::Bytes;
use crate::eval::Placement;
use crate::eval::calc::{Overflow, Product, div_ceil};
use crate::hir::{Checkpointing, LoraTarget, Method, Mlp, Shape, Training};
use crate::ratio::Ratio;

/// A denoiser's blocks (no vocabulary) go through the language model's count with their own
/// meaning of its terms (modulated norms, fp32 norm copies under autocast; checked against
/// CogVideoX-5b's block, `a_dit_block_keeps_what_diffusers_keeps` in
/// `tests/integration/reference.rs`): what is said here is about a language model's layer.
fn is_language_model(shape: &Shape) -> bool {
    shape.vocab > 0
}

/// The hidden width of one device's norm outputs and residual: split over the tensor ranks
/// under sequence parallelism, whole otherwise.
fn device_hidden(shape: &Shape, placement: &Placement, training: &Training) -> u64 {
    if training.sequence_parallel { div_ceil(shape.hidden, placement.tensor) } else { shape.hidden }
}

/// How LoRA adapters treat their input, when the base is frozen.
struct Adapters<'a> {
    targets: &'a [LoraTarget],
    /// PEFT's `x.to(lora_A.weight.dtype)` copies the input (the adapters' type is not the
    /// stream's), bytes per element of the copy.
    cast: Option<Ratio>,
    /// A dropout ahead of `lora_A` makes a new tensor of its input.
    dropout: bool,
    /// `lora_A` keeps the very tensor the base projection reads (no copy, no dropout).
    keeps_input: bool,
}

/// The adapters of a method whose layers keep a frozen base: LoRA's, or none for prefix and
/// prompt tuning (the layers run frozen, trained tensors only outside their projections).
fn adapters<'a>(shape: &Shape, training: &'a Training) -> Option<Adapters<'a>> {
    if !is_language_model(shape) {
        return None;
    }
    let (targets, dtype, dropout) = match &training.method {
        Method::Lora { targets, dtype, dropout, .. } => (targets.as_slice(), dtype, dropout),
        Method::Prefix { .. } | Method::Prompt { .. } => {
            return Some(Adapters { targets: &[], cast: None, dropout: false, keeps_input: false });
        }
        Method::Full | Method::Freeze { .. } => return None,
    };
    let stream = stream(training);
    let dropout = !dropout.is_negative() && *dropout > Ratio::ZERO;
    let cast = (*dtype != stream).then(|| dtype.bytes_per_element());
    let keeps_input = !dropout && cast.is_none() && stream == training.activations;
    Some(Adapters { targets, cast, dropout, keeps_input })
}

impl Adapters<'_> {
    fn keep(&self, reads: &[LoraTarget]) -> bool {
        self.keeps_input && self.targets.iter().any(|t| reads.contains(t))
    }

    fn adapted(&self, target: LoraTarget) -> bool {
        self.targets.contains(&target)
    }
}

/// The projection that reads the MLP's product (gated) or activation (plain).
const DOWN: [LoraTarget; 1] = [LoraTarget::Down];
const QKV: [LoraTarget; 3] = [LoraTarget::Q, LoraTarget::K, LoraTarget::V];
const MLP_IN: [LoraTarget; 2] = [LoraTarget::Gate, LoraTarget::Up];

/// Which of the trained count's tensors a frozen base leaves unkept, elements per token.
struct Unkept {
    /// The attention norm's output: read only by q, k and v.
    attention_norm: u64,
    /// The MLP norm's output: read only by gate and up (a plain MLP's first projection).
    mlp_norm: u64,
    /// The MLP's product (gated) or activation (plain): read only by the output projection.
    down_input: u64,
}

fn unkept(shape: &Shape, placement: &Placement, training: &Training) -> Option<Unkept> {
    let adapters = adapters(shape, training)?;
    let h = device_hidden(shape, placement, training);
    Some(Unkept {
        attention_norm: if adapters.keep(&QKV) { 0 } else { h },
        mlp_norm: if adapters.keep(&MLP_IN) { 0 } else { h },
        down_input: if adapters.keep(&DOWN) { 0 } else { div_ceil(shape.ffn, placement.tensor) },
    })
}

/// Elements per token of one layer that the trained count (`layer_elements_per_token`: a
/// projection keeps its input for its weight's gradient) holds and a frozen base does not. A
/// frozen projection's backward pass needs only its weight, so nothing keeps the attention norm's
/// output, the MLP norm's output or the MLP's product (a plain MLP's activation) unless an
/// adapter keeps that very tensor: PEFT's `lora_A` does when the adapters share the stream's type
/// and have no dropout; otherwise it keeps its own copy, counted as the adapters' saved inputs.
/// The norm's inputs, the attention kernel's q/k/v and output and the gate and up outputs (which
/// the activation and the product keep) stay. With Llama's shapes under PEFT's fp32 adapters
/// that is 2h + ffn of the count's 4h + 2.5h + 4·ffn (plus the norms' fp32 copies).
pub(super) fn frozen_unkept_elements(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> u64 {
    unkept(shape, placement, training).map_or(0, |u| u.attention_norm + u.mlp_norm + u.down_input)
}

/// Elements per token of one fused q/k/v projection's output that stay alive beside the value
/// the attention keeps (`fused_qkv`): the value is a view of that output (litgpt's
/// `qkv.split`, Qwen v1's `c_attn(...).split`, `qkv[..., a:b]`), so the whole output's storage
/// lives as long as the attention's saved value, while the query and key the attention keeps
/// are the rotated copies; its query and key parts come on top of the count's q, k and v.
/// litgpt's code of October 2023 (8641822) on the CPU keeps the whole `qkv` output, 3h for a
/// multi-head model, where the count held the value's h.
pub(super) fn fused_qkv_elements(shape: &Shape, placement: &Placement, training: &Training) -> u64 {
    let Method::Lora { fused_qkv: true, .. } = &training.method else {
        return 0;
    };
    if !is_language_model(shape) {
        return 0;
    }
    let t = placement.tensor;
    ((shape.heads / t) + div_ceil(shape.kv_heads, t)) * shape.head_dim
}

/// Bytes per token a layer's forward pass holds beside what its backward nodes keep, at its
/// peak: while the MLP's output projection runs. The residual (kept by the layer for its last
/// addition) and the projection's output, h each; the MLP's input and product where no backward
/// node keeps them (a frozen base, [`frozen_unkept_elements`]); and when that projection is
/// adapted, PEFT's copy of its input in the adapters' type and, with a dropout, the dropout's
/// output of that copy (the compute-type copy `lora_A` keeps is among the saved inputs). Under
/// full (and op-level) checkpointing the recomputed layer also has the gradient of its output
/// arriving.
///
/// transformers' Llama with PEFT (rank 16 on every projection, fp32 adapters, bf16 autocast) at
/// 2,048 tokens: 11.25 hidden-wide bf16 tensors per token at the last layer's output projection
/// (product 2.75, its fp32 copy 5.5, residual, MLP input and output 1 each), and the measured
/// step holds 11.5 above what its layers keep.
pub(super) fn forward_transient(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<(Bytes, String), Overflow> {
    let c = stream(training).bytes_per_element();
    let h = device_hidden(shape, placement, training);
    let ffn = div_ceil(shape.ffn, placement.tensor);
    let mut elements = 2 * h;
    let mut what = vec!["residual and output projection's output (2h)".to_string()];
    if let Some(unkept) = unkept(shape, placement, training) {
        if unkept.mlp_norm > 0 {
            elements += unkept.mlp_norm;
            what.push("the MLP's input, which no frozen projection keeps (h)".into());
        }
        if unkept.down_input > 0 {
            elements += unkept.down_input;
            let product = if shape.mlp == Mlp::Plain { "activation" } else { "product" };
            what.push(format!("the MLP's {product}, which no frozen projection keeps (ffn)"));
        }
    }
    if matches!(training.checkpointing, Checkpointing::Full | Checkpointing::SelectiveOp) {
        elements += h;
        what.push("the gradient arriving at the recomputed layer (h)".into());
    }
    let mut bytes = Ratio::int(i128::from(elements)).checked_mul(c).ok_or(Overflow)?;
    if let Some(adapters) = adapters(shape, training).filter(|a| a.adapted(LoraTarget::Down)) {
        let copies = match (adapters.cast, adapters.dropout) {
            (Some(a), true) => Some((a.checked_mul(Ratio::int(2)).ok_or(Overflow)?, "2 × ")),
            (Some(a), false) => Some((a, "")),
            (None, _) => None,
        };
        if let Some((per, times)) = copies {
            let extra = Ratio::int(i128::from(ffn)).checked_mul(per).ok_or(Overflow)?;
            bytes = bytes.checked_add(extra).ok_or(Overflow)?;
            let dropout = if adapters.dropout { " and its dropout's output" } else { "" };
            what.push(format!(
                "{times}ffn in the adapters' type: PEFT's copy of the output projection's input{dropout}"
            ));
        }
    }
    Product::new()
        .times(training.sequence, "tokens")?
        .times_count(batch(training))?
        .bytes_each(bytes, what.join(" + "))?
        .finish()
}

pub(super) const SOURCE: &str = "derived: transformers LlamaDecoderLayer and LlamaMLP, peft \
     tuners/lora/layer.py Linear.forward (`x.to(lora_A.weight.dtype)`), counted under bf16 \
     autocast (tools/dit-train-peak.py CudaAutocast)";
