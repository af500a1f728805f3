//! Prompt learning beside a frozen model (PEFT's prompt-learning methods).
//!
//! Prefix tuning (Li & Liang 2021; PEFT `PrefixTuningConfig`, ChatGLM's P-tuning v2): every
//! attention layer reads `tokens` trained keys and values before the sequence's own.
//!
//! PEFT's `PrefixEncoder` holds them as one fp32 embedding of `tokens × (layers × 2 ×
//! token_dim)` values, where `token_dim` is the width of a layer's keys (the key-value heads'
//! for grouped-query attention), or, with `prefix_projection`, makes them from a
//! `tokens × token_dim` embedding through `Linear(token_dim, p)`, `Tanh` and
//! `Linear(p, layers × 2 × token_dim)`. The gradient reaches them through every layer's
//! attention, so every layer stores its activations as under LoRA; each layer's attention also
//! keeps the prefix's keys and values, concatenated before the sequence's, for its backward pass.
//!
//! Prompt tuning (Lester et al. 2021; PEFT `PromptTuningConfig`) and P-tuning (Liu et al. 2021;
//! `PromptEncoderConfig`): `tokens` trained input embeddings, `tokens × hidden` fp32 values, or
//! for P-tuning made by PEFT's MLP prompt encoder (`Linear(hidden, e)`, `ReLU`, `Linear(e, e)`,
//! `ReLU`, `Linear(e, hidden)`), are concatenated before every sample's own; the frozen model
//! then runs, and keeps its activations and logits, over `sequence + tokens` positions (PEFT
//! pads the labels with -100 for them).

use super::super::Placement;
use super::super::calc::{Overflow, Product, div_ceil, formula};
use super::states::{AdapterKind, Adapters, intermediate};
use crate::budget::Component;
use crate::hir::{Checkpointing, Shape, Training};
use crate::precision::Precision;

/// The width of one layer's keys on this device (`token_dim`, split over tensor ranks).
fn key_width(shape: &Shape, placement: &Placement) -> u64 {
    div_ceil(shape.kv_heads, placement.tensor) * shape.head_dim
}

/// The prefix encoder's parameters on this device, as adapters of their own.
pub(super) fn prefix_encoder(
    shape: &Shape,
    placement: &Placement,
    tokens: u64,
    projection: Option<u64>,
) -> Result<Adapters, Overflow> {
    let width = key_width(shape, placement);
    let out = placement.layers.checked_mul(2 * width).ok_or(Overflow)?;
    let checked = |a: u64, b: u64| a.checked_mul(b).ok_or(Overflow);
    let (params, factored, largest, label) = match projection {
        None => (
            checked(tokens, out)?,
            tokens + out,
            checked(tokens, out)?,
            formula!("prefix params ({tokens} tokens × {} layers × 2 × {width})", placement.layers),
        ),
        Some(p) => {
            let token_dim = shape.kv_heads * shape.head_dim;
            let matrices = [checked(tokens, token_dim)?, checked(token_dim, p)?, checked(p, out)?];
            let params =
                matrices.iter().try_fold(p + out, |sum, n| sum.checked_add(*n)).ok_or(Overflow)?;
            let factored = (tokens + token_dim) + (token_dim + p) + p + (p + out) + out;
            let largest = matrices.iter().copied().max().unwrap_or(0);
            let label = formula!(
                "prefix params ({tokens} × {token_dim} embedding, MLP {token_dim} → {p} → {} \
                 layers × 2 × {width})",
                placement.layers
            );
            (params, factored, largest, label)
        }
    };
    Ok(Adapters {
        kind: AdapterKind::Prefix,
        params,
        label,
        dtype: Precision::Fp32,
        factored: Some(factored),
        largest,
    })
}

/// The prompt encoder's parameters (on the first pipeline stage, with the input embedding), as
/// adapters of their own.
pub(super) fn prompt_encoder(
    shape: &Shape,
    tokens: u64,
    encoder: Option<u64>,
) -> Result<Adapters, Overflow> {
    let h = shape.hidden;
    let checked = |a: u64, b: u64| a.checked_mul(b).ok_or(Overflow);
    let embedding = checked(tokens, h)?;
    let (params, factored, largest, label) = match encoder {
        None => {
            (embedding, tokens + h, embedding, formula!("prompt params ({tokens} tokens × {h})"))
        }
        Some(e) => {
            let matrices = [embedding, checked(h, e)?, checked(e, e)?, checked(e, h)?];
            let params = matrices
                .iter()
                .try_fold(2 * e + h, |sum, n| sum.checked_add(*n))
                .ok_or(Overflow)?;
            let factored = (tokens + h) + (h + e) + e + (e + e) + e + (e + h) + h;
            let largest = matrices.iter().copied().max().unwrap_or(0);
            let label =
                formula!("prompt params ({tokens} × {h} embedding, MLP {h} → {e} → {e} → {h})");
            (params, factored, largest, label)
        }
    };
    Ok(Adapters {
        kind: AdapterKind::Prompt,
        params,
        label,
        dtype: Precision::Fp32,
        factored: Some(factored),
        largest,
    })
}

/// The training step as the frozen model runs it under prompt tuning: `tokens` more positions
/// in every sample.
pub(super) fn with_virtual_tokens(training: &Training, tokens: u64) -> Result<Training, Overflow> {
    let sequence = training.sequence.checked_add(tokens).ok_or(Overflow)?;
    Ok(Training { sequence, ..training.clone() })
}

/// The prefix's keys and values each layer's attention keeps for the backward pass, in the
/// compute type: the part the concatenation adds before the sequence's own (counted with the
/// layer's activations). Under full checkpointing only the recomputed layer holds them.
pub(super) fn saved_keys_values(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    tokens: u64,
) -> Result<Component, Overflow> {
    let layers = if training.checkpointing == Checkpointing::Full { 1 } else { placement.layers };
    let a = training.activations;
    let product = Product::new()
        .times_count(super::activations::batch(training))?
        .times(tokens, "prefix tokens")?
        .times(layers, "layers")?
        .times(2 * key_width(shape, placement), "keys and values")?
        .bytes_each(a.bytes_per_element(), a.name())?;
    Ok(intermediate(
        "prefix keys and values (saved for backward)",
        product.finish()?,
        "PEFT prefix tuning: past_key_values concatenated before each layer's keys and values",
    ))
}
