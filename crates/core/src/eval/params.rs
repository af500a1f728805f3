//! Parameters of a transformer, matrix by matrix and device by device.
//!
//! An encoder-decoder model's layers are one list, the encoder's first; a decoder layer adds a
//! cross-attention (q, k, v, o and a norm: transformers `modeling_t5.py` `T5LayerCrossAttention`,
//! `modeling_bart.py` `encoder_attn`), each stack has a position table and a final norm, and one
//! token embedding serves both (T5's `shared`).
//!
//! Dense layers follow DOMAIN.md §2.1 (SwiGLU or plain MLP, RMSNorm, optional q/k/v biases);
//! mixture-of-experts layers §2.2 (every expert resident, a router, shared experts, leading dense
//! layers); multi-head latent attention §2.3 (Megatron's formula). Tensor parallelism shards
//! heads and MLP width; the MLA down-projections and MoE routers are replicated, as vLLM does.

use super::Placement;
use super::calc::div_ceil;
use crate::hir::{AttentionKind, Biases, Norm, Output, Saved, Shape};
use crate::quant::Matrix;

/// The matrices of layer `layer` on a device of tensor degree `tensor`, with their parameters.
/// A matrix kind may appear more than once (shared and routed experts).
pub(crate) fn layer_matrices(shape: &Shape, layer: u64, tensor: u64) -> Vec<(Matrix, u64)> {
    let h = shape.hidden;
    let heads = shape.heads / tensor;
    let mut matrices = Vec::with_capacity(8);
    match &shape.attention {
        AttentionKind::Standard => {
            let kv_heads = div_ceil(shape.kv_heads, tensor);
            matrices.push((Matrix::Q, h * heads * shape.head_dim));
            matrices.push((Matrix::K, h * kv_heads * shape.head_dim));
            matrices.push((Matrix::V, h * kv_heads * shape.head_dim));
            matrices.push((Matrix::O, heads * shape.head_dim * h));
        }
        AttentionKind::Mla(mla) => {
            let qk = mla.nope_dim + mla.rope_dim;
            // q: a low-rank pair when q_lora_rank is set (the down-projection replicated).
            let q = match mla.q_lora_rank {
                Some(rank) => h * rank + rank * heads * qk,
                None => h * heads * qk,
            };
            matrices.push((Matrix::Q, q));
            // kv_a_proj (replicated): the latent and the shared rope key.
            matrices.push((Matrix::K, h * (mla.kv_lora_rank + mla.rope_dim)));
            // kv_b_proj (per head): keys' no-rope part and values from the latent.
            matrices.push((Matrix::V, mla.kv_lora_rank * heads * (mla.nope_dim + mla.v_head_dim)));
            matrices.push((Matrix::O, heads * mla.v_head_dim * h));
        }
    }
    if shape.has_cross_attention(layer) {
        // A decoder layer's cross-attention (`T5LayerCrossAttention`, BART `encoder_attn`):
        // q, k, v and o of the self-attention's sizes, k and v reading the encoder's output.
        let kv_heads = div_ceil(shape.kv_heads, tensor);
        matrices.push((Matrix::Q, h * heads * shape.head_dim));
        matrices.push((Matrix::K, h * kv_heads * shape.head_dim));
        matrices.push((Matrix::V, h * kv_heads * shape.head_dim));
        matrices.push((Matrix::O, heads * shape.head_dim * h));
    }
    let mlp = |matrices: &mut Vec<(Matrix, u64)>, ffn: u64, copies: u64| {
        let width = div_ceil(ffn, tensor) * h * copies;
        if shape.mlp.is_gated() {
            matrices.push((Matrix::Gate, width));
        }
        matrices.push((Matrix::Up, width));
        matrices.push((Matrix::Down, width));
    };
    match &shape.moe {
        Some(moe) if layer >= moe.dense_layers => {
            matrices.push((Matrix::Router, h * moe.experts));
            matrices.extend(expert_matrices(shape, layer, tensor));
            if moe.shared > 0 {
                mlp(&mut matrices, moe.shared_ffn, moe.shared);
            }
        }
        _ => mlp(&mut matrices, shape.ffn, 1),
    }
    matrices
}

/// The routed experts' matrices of layer `layer` (gate, up and down, each one tensor over every
/// expert, as llama.cpp stores them: `ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`); empty
/// for a dense layer. Shared experts and the router are not among them.
pub(crate) fn expert_matrices(shape: &Shape, layer: u64, tensor: u64) -> Vec<(Matrix, u64)> {
    let Some(moe) = shape.moe.as_ref().filter(|moe| layer >= moe.dense_layers) else {
        return Vec::new();
    };
    let width = div_ceil(moe.expert_ffn, tensor) * shape.hidden * moe.experts;
    let mut matrices = Vec::with_capacity(3);
    if shape.mlp.is_gated() {
        matrices.push((Matrix::Gate, width));
    }
    matrices.push((Matrix::Up, width));
    matrices.push((Matrix::Down, width));
    matrices
}

/// The matrices of layer `layer` that the device of `placement` holds: all of them, less the
/// routed experts of a layer whose experts stay in host memory (llama.cpp's `--n-cpu-moe`).
pub(crate) fn held_matrices(
    shape: &Shape,
    layer: u64,
    placement: &Placement,
) -> Vec<(Matrix, u64)> {
    let mut matrices = layer_matrices(shape, layer, placement.tensor);
    if layer < placement.host_experts {
        // `layer_matrices` lists the routed experts before any shared expert of the same size,
        // so the first equal entry is the routed one.
        for expert in expert_matrices(shape, layer, placement.tensor) {
            if let Some(at) = matrices.iter().position(|m| *m == expert) {
                matrices.remove(at);
            }
        }
    }
    matrices
}

/// Norms and biases of layer `layer`: small, kept at 16 or 32-bit by every quantizer. A
/// decoder layer of an encoder-decoder model has a third norm and its cross-attention's biases;
/// the first layer of each T5 stack holds the relative-position table, `buckets × heads`
/// (`T5Attention.relative_attention_bias`, `has_relative_attention_bias=bool(i == 0)`).
pub(crate) fn layer_small(shape: &Shape, layer: u64, tensor: u64) -> u64 {
    let heads = shape.heads / tensor;
    let qkv = (heads + 2 * div_ceil(shape.kv_heads, tensor)) * shape.head_dim;
    let cross = shape.has_cross_attention(layer);
    let bias = if shape.biases == Biases::All {
        // q/k/v (sharded), the output projection's (added once), the MLP's.
        let ffn = div_ceil(shape.ffn, tensor);
        let mlp = if shape.mlp.is_gated() { 2 * ffn } else { ffn };
        let cross_attention = if cross { qkv + shape.hidden } else { 0 };
        qkv + shape.hidden + mlp + shape.hidden + cross_attention
    } else if shape.biases == Biases::Qkv {
        qkv
    } else {
        0
    };
    let latent_norms = match &shape.attention {
        AttentionKind::Mla(mla) => mla.kv_lora_rank + mla.q_lora_rank.unwrap_or(0),
        AttentionKind::Standard => 0,
    };
    let norms = if cross { 3 } else { 2 };
    let relative = match &shape.encoder {
        Some(e) if layer == 0 || layer == e.encoder_layers => e.relative_buckets * heads,
        _ => 0,
    };
    norms * norm(shape) + bias + latent_norms + relative
}

/// Norm, bias and relative-position parameters of `count` layers from `first`, and the count
/// per layer when every one of them has the same.
pub(crate) fn layers_small(
    shape: &Shape,
    first: u64,
    count: u64,
    tensor: u64,
) -> (u64, Option<u64>) {
    let each = layer_small(shape, first, tensor);
    let mut total = 0u64;
    let mut uniform = true;
    for layer in first..first + count {
        let small = layer_small(shape, layer, tensor);
        uniform &= small == each;
        total = total.saturating_add(small);
    }
    (total, uniform.then_some(each))
}

/// Parameters of one norm: a weight, and a bias for LayerNorm.
fn norm(shape: &Shape) -> u64 {
    if shape.norm == Norm::Layer { 2 * shape.hidden } else { shape.hidden }
}

/// The whole model's parameter count. `None` if it overflows `u64`.
pub fn parameter_count(shape: &Shape) -> Option<u64> {
    let mut total = 0u64;
    for layer in 0..shape.layers {
        let matrices: u64 = layer_matrices(shape, layer, 1).iter().map(|(_, n)| n).sum();
        total = total.checked_add(matrices)?.checked_add(layer_small(shape, layer, 1))?;
    }
    let vocab = shape.vocab.checked_mul(shape.hidden)?;
    // One position table per stack; one shared token embedding (T5's `shared`).
    let positions = shape.positions.checked_mul(shape.hidden)?.checked_mul(shape.stacks())?;
    let embeddings = vocab.checked_add(positions)?;
    let head = if shape.tied_embeddings || shape.output == Output::None { 0 } else { vocab };
    let final_norms = norm(shape).checked_mul(shape.stacks())?;
    total.checked_add(embeddings)?.checked_add(head)?.checked_add(final_norms)
}

/// The embeddings and final norm a device holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ends {
    /// Input embedding (first pipeline stage).
    pub embedding: u64,
    /// Output projection (last stage; 0 when tied to the embedding on the same device).
    pub head: u64,
    /// Final norm (last stage): one per stack, both on the last stage of a pipeline.
    pub final_norm: u64,
}

impl Ends {
    /// The parameters of an end module trained whole (`modules_to_save`, freeze tuning's
    /// `extra_modules`) on this device: 0 where the device does not hold it.
    pub(crate) fn of(&self, module: Saved) -> u64 {
        match module {
            Saved::Embeddings => self.embedding,
            Saved::Head => self.head,
        }
    }
}

pub(crate) fn ends(shape: &Shape, placement: &Placement) -> Ends {
    let first = placement.stage == 0;
    let last = placement.stage + 1 == placement.stages;
    let vocab_shard = div_ceil(shape.vocab, placement.tensor) * shape.hidden;
    // A tied head shares the embedding matrix only when both sit on the same device.
    let head = if last && shape.output == Output::Lm && !(shape.tied_embeddings && first) {
        vocab_shard
    } else {
        0
    };
    // An encoder-decoder model's position tables (one per stack) sit with the embedding.
    let positions = shape.positions * shape.hidden * shape.stacks();
    Ends {
        embedding: if first { vocab_shard + positions } else { 0 },
        head,
        final_norm: if last { norm(shape) * shape.stacks() } else { 0 },
    }
}

/// Every parameter a device holds.
pub(crate) fn device_parameter_count(shape: &Shape, placement: &Placement) -> Option<u64> {
    let mut total = 0u64;
    for layer in placement.first_layer..placement.first_layer + placement.layers {
        let matrices: u64 = held_matrices(shape, layer, placement).iter().map(|(_, n)| n).sum();
        let small = layer_small(shape, layer, placement.tensor);
        total = total.checked_add(matrices)?.checked_add(small)?;
    }
    let ends = ends(shape, placement);
    total.checked_add(ends.embedding)?.checked_add(ends.head)?.checked_add(ends.final_norm)
}

/// Values Adafactor keeps for the parameters this device holds: one row and one column
/// statistic per matrix (its factored second moment), every value of a vector (norms, biases).
pub(crate) fn factored_state_values(shape: &Shape, placement: &Placement) -> Option<u64> {
    let h = shape.hidden;
    let t = placement.tensor;
    let heads = shape.heads / t;
    let matrix = |rows: u64, cols: u64, copies: u64| copies * (rows + cols);
    let mlp = |width: u64, copies: u64| {
        let count = if shape.mlp.is_gated() { 3 } else { 2 };
        count * matrix(h, div_ceil(width, t), copies)
    };
    let mut total = 0u64;
    for layer in placement.first_layer..placement.first_layer + placement.layers {
        let attentions = if shape.has_cross_attention(layer) { 2 } else { 1 };
        let attention = match &shape.attention {
            AttentionKind::Standard => {
                let kv = div_ceil(shape.kv_heads, t) * shape.head_dim;
                attentions * (matrix(h, heads * shape.head_dim, 2) + matrix(h, kv, 2))
            }
            AttentionKind::Mla(mla) => {
                let qk = mla.nope_dim + mla.rope_dim;
                let q = match mla.q_lora_rank {
                    Some(rank) => matrix(h, rank, 1) + matrix(rank, heads * qk, 1),
                    None => matrix(h, heads * qk, 1),
                };
                q + matrix(h, mla.kv_lora_rank + mla.rope_dim, 1)
                    + matrix(mla.kv_lora_rank, heads * (mla.nope_dim + mla.v_head_dim), 1)
                    + matrix(heads * mla.v_head_dim, h, 1)
            }
        };
        let feed_forward = match &shape.moe {
            Some(moe) if layer >= moe.dense_layers => {
                matrix(h, moe.experts, 1)
                    + mlp(moe.expert_ffn, moe.experts)
                    + mlp(moe.shared_ffn, moe.shared)
            }
            _ => mlp(shape.ffn, 1),
        };
        total = total.checked_add(attention + feed_forward + layer_small(shape, layer, t))?;
    }
    let ends = ends(shape, placement);
    let vocab = div_ceil(shape.vocab, t);
    let embedding = if ends.embedding > 0 {
        let positions = shape.stacks() * matrix(shape.positions, h, 1);
        matrix(vocab, h, 1) + if shape.positions > 0 { positions } else { 0 }
    } else {
        0
    };
    let head = if ends.head > 0 { matrix(vocab, h, 1) } else { 0 };
    total.checked_add(embedding)?.checked_add(head)?.checked_add(ends.final_norm)
}
