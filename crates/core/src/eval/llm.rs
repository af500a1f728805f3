//! Decoder-only transformers: parameter counts, weights per device, KV cache and the inference
//! transient peak. Formulas and their sources: DOMAIN.md §2.1 (parameters), §3.1-3.2 (KV cache,
//! tensor parallel), §4 (logits and intermediates), §1.7 (tensors that stay unquantized).

use super::Placement;
use super::calc::{Overflow, Product, div_ceil};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::Bytes;
use crate::hir::{Attention, Logits, Mlp, Shape};
use crate::precision::Precision;
use crate::ratio::Ratio;

/// Parameters of the decoder layers and embeddings, split the way devices hold them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Parameters {
    /// Linear-layer matrices of one layer (attention and MLP): the part that quantizes.
    pub layer_matrices: u64,
    /// Norms and biases of one layer: small, kept at 16-bit by quantizers.
    pub layer_small: u64,
    /// Input embedding matrix.
    pub embedding: u64,
    /// Output projection (0 when tied to the embedding and on the same device).
    pub head: u64,
    /// Final norm.
    pub final_norm: u64,
}

/// Parameters of one layer's matrices, sharded over `tensor` devices.
fn layer_matrices(shape: &Shape, tensor: u64) -> u64 {
    let heads = shape.heads / tensor;
    let kv_heads = div_ceil(shape.kv_heads, tensor);
    let ffn = div_ceil(shape.ffn, tensor);
    let q_and_o = 2 * shape.hidden * heads * shape.head_dim;
    let k_and_v = 2 * shape.hidden * kv_heads * shape.head_dim;
    let mlp_matrices = match shape.mlp {
        Mlp::Gated => 3,
        Mlp::Plain => 2,
    };
    q_and_o + k_and_v + mlp_matrices * shape.hidden * ffn
}

fn layer_small(shape: &Shape, tensor: u64) -> u64 {
    let bias = if shape.qkv_bias {
        (shape.heads / tensor + 2 * div_ceil(shape.kv_heads, tensor)) * shape.head_dim
    } else {
        0
    };
    2 * shape.hidden + bias
}

/// The whole model's parameter count: DOMAIN.md §2.1. `None` if it overflows `u64`.
pub fn parameter_count(shape: &Shape) -> Option<u64> {
    let per_layer = layer_matrices(shape, 1).checked_add(layer_small(shape, 1))?;
    let embeddings = shape.vocab.checked_mul(shape.hidden)?;
    let head = if shape.tied_embeddings { 0 } else { embeddings };
    per_layer
        .checked_mul(shape.layers)?
        .checked_add(embeddings)?
        .checked_add(head)?
        .checked_add(shape.hidden)
}

/// What a device at `placement` holds of the model.
pub(crate) fn device_parameters(shape: &Shape, placement: &Placement) -> Parameters {
    let t = placement.tensor;
    let first = placement.stage == 0;
    let last = placement.stage + 1 == placement.stages;
    let vocab_shard = div_ceil(shape.vocab, t) * shape.hidden;
    // A tied head shares the embedding matrix only when both sit on the same device.
    let head = match (last, shape.tied_embeddings && first) {
        (true, false) => vocab_shard,
        _ => 0,
    };
    Parameters {
        layer_matrices: layer_matrices(shape, t),
        layer_small: layer_small(shape, t),
        embedding: if first { vocab_shard } else { 0 },
        head,
        final_norm: if last { shape.hidden } else { 0 },
    }
}

/// The weight components of a device. Quantized formats apply to the layers' matrices; the
/// embedding, the output head, norms and biases stay at the 16-bit `companion` precision, as
/// bitsandbytes, GPTQ/AWQ and vLLM's FP8 leave them (DOMAIN.md §1.7).
pub(crate) fn weights(
    shape: &Shape,
    placement: &Placement,
    precision: Precision,
    companion: Precision,
    category: Category,
    label: &str,
) -> Result<Vec<Component>, Overflow> {
    let params = device_parameters(shape, placement);
    let layers = placement.layers;
    let small_precision = if precision.is_float_compute() { precision } else { companion };
    let mut components = Vec::new();
    let (bytes, formula) = Product::new()
        .times(layers, "layers")?
        .times(params.layer_matrices, "params")?
        .bytes_each(precision.bytes_per_element(), precision.name())?
        .finish()?;
    components.push(component(format!("{label}: layer matrices"), category, bytes, formula));
    let (bytes, formula) = Product::new()
        .times(layers, "layers")?
        .times(params.layer_small, "norm and bias params")?
        .bytes_each(small_precision.bytes_per_element(), small_precision.name())?
        .finish()?;
    if bytes.0 > 0 {
        components.push(component(format!("{label}: norms and biases"), category, bytes, formula));
    }
    for (name, count, what) in [
        ("embedding", params.embedding, "vocab × hidden params"),
        ("output head", params.head, "vocab × hidden params"),
        ("final norm", params.final_norm, "params"),
    ] {
        if count == 0 {
            continue;
        }
        let (bytes, formula) = Product::new()
            .times(count, what)?
            .bytes_each(small_precision.bytes_per_element(), small_precision.name())?
            .finish()?;
        components.push(component(format!("{label}: {name}"), category, bytes, formula));
    }
    Ok(components)
}

fn component(name: String, category: Category, bytes: Bytes, formula: String) -> Component {
    Component {
        held_by: HeldBy::Tensors,
        name,
        category,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: None,
    }
}

/// KV cache: `2 × layers × kv_heads × head_dim × tokens × bytes`, kv heads per device
/// `ceil(kv_heads / tensor)` (replicated, never below one, when tensor > kv_heads).
pub(crate) fn kv_cache(
    shape: &Shape,
    placement: &Placement,
    precision: Precision,
    context: u64,
    sessions: u64,
) -> Result<Component, Overflow> {
    let (bytes, formula) = Product::new()
        .times(2, "(K and V)")?
        .times(placement.layers, "layers")?
        .times(div_ceil(shape.kv_heads, placement.tensor), "kv_heads")?
        .times(shape.head_dim, "head_dim")?
        .times(context, "tokens")?
        .times(sessions, "sessions")?
        .bytes_each(precision.bytes_per_element(), precision.name())?
        .finish()?;
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "KV cache".to_string(),
        category: Category::Cache,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(
            "DOMAIN.md §3.1: vLLM AttentionSpec page size; heads per GPU as vLLM get_num_kv_heads"
                .into(),
        ),
    })
}

/// The transient peak of one forward step over `tokens` tokens of `sequences` sequences.
pub(crate) struct Step {
    pub tokens: u64,
    pub sequences: u64,
    /// Longest key length attended to (for eager attention scores).
    pub key_length: u64,
    pub logits: Logits,
    pub attention: Attention,
    pub precision: Precision,
}

/// Hidden states that stay alive through the step (the residual and the normed input), and
/// the largest transient: one layer's attention or MLP intermediates, or the logits buffer.
pub(crate) fn forward_step(
    shape: &Shape,
    placement: &Placement,
    step: &Step,
) -> Result<Vec<Component>, Overflow> {
    let elem = step.precision.bytes_per_element();
    let name = step.precision.name();
    let t = placement.tensor;
    let (hidden_bytes, hidden_formula) = Product::new()
        .times(2, "(residual and normed input)")?
        .times(step.tokens, "tokens")?
        .times(shape.hidden, "hidden")?
        .bytes_each(elem, name)?
        .finish()?;
    let heads = shape.heads / t;
    let kv_heads = div_ceil(shape.kv_heads, t);
    let qkv = Product::new()
        .times(step.tokens, "tokens")?
        .times(2 * heads + 2 * kv_heads, "(q, k, v, out) heads")?
        .times(shape.head_dim, "head_dim")?
        .bytes_each(elem, name)?;
    let mut attention_bytes = qkv.value()?;
    let mut attention_formula = qkv.terms();
    if step.attention == Attention::Eager {
        // Scores in the model's precision plus their fp32 softmax (transformers'
        // eager_attention_forward), for every query against every key: DOMAIN.md §4.2.
        let per_score = elem
            .checked_mul(Ratio::int(2))
            .and_then(|x| x.checked_add(Ratio::int(4)))
            .ok_or(Overflow)?;
        let scores = Product::new()
            .times(step.tokens, "queries")?
            .times(step.key_length, "keys")?
            .times(heads, "heads")?
            .bytes_each(per_score, "2 scores + fp32 softmax")?;
        attention_bytes = super::calc::add(attention_bytes, scores.value()?)?;
        attention_formula = format!("{attention_formula} + {}", scores.terms());
    }
    let mlp_tensors = match shape.mlp {
        Mlp::Gated => 3,
        Mlp::Plain => 2,
    };
    let mlp = Product::new()
        .times(mlp_tensors, "(gate, up, product)")?
        .times(step.tokens, "tokens")?
        .times(div_ceil(shape.ffn, t), "ffn")?
        .bytes_each(elem, name)?;
    let mlp_bytes = mlp.value()?;
    let last = placement.stage + 1 == placement.stages;
    let logit_rows = match step.logits {
        Logits::Last => step.sequences.min(step.tokens),
        Logits::All => step.tokens,
    };
    // Logits are upcast to fp32 for sampling or the loss (DOMAIN.md §4.1).
    let logits = Product::new()
        .times(if last { logit_rows } else { 0 }, "rows")?
        .times(shape.vocab, "vocab")?
        .bytes_each(Ratio::int(4), "fp32")?;
    let logits_bytes = logits.value()?;
    let peak = attention_bytes.max(mlp_bytes).max(logits_bytes);
    let formula = format!(
        "max(attention {} = {}; MLP {} = {}; logits {} = {}) = {peak}",
        attention_formula,
        attention_bytes.human(),
        mlp.terms(),
        mlp_bytes.human(),
        logits.terms(),
        logits_bytes.human(),
    );
    Ok(vec![
        Component {
            held_by: HeldBy::Tensors,
            name: "hidden states".to_string(),
            category: Category::Intermediate,
            bytes: hidden_bytes,
            provenance: Provenance::Formula,
            formula: hidden_formula,
            source: None,
        },
        Component {
            held_by: HeldBy::Tensors,
            name: "forward-step peak (one layer or logits)".to_string(),
            category: Category::Intermediate,
            bytes: peak,
            provenance: Provenance::Formula,
            formula,
            source: Some(
                "DOMAIN.md §4.1-4.3: activations are freed layer by layer; logits upcast to fp32"
                    .into(),
            ),
        },
    ])
}
