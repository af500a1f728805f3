//! What one block of a diffusion transformer (DiT, MMDiT, FLUX, CogVideoX, Wan) keeps for the
//! backward pass, and what it holds besides at its largest operation, as diffusers' block code
//! runs under CUDA's bf16 autocast (accelerate's `mixed_precision bf16`, the training scripts'
//! default).
//!
//! Autocast runs layer norms in fp32 (PyTorch's "CUDA ops that can autocast to float32"), so
//! each norm keeps an fp32 copy of its input, and its output stays fp32 through the adaLN
//! modulation (`norm(x) * (1 + scale) + shift`) until a matrix product casts it. A q/k norm
//! (`qk_norm`) keeps fp32 copies of the queries and keys beside the 16-bit ones the attention
//! kernel keeps. Per token and block, with `h` the hidden size and `a` the activations'
//! bytes per element:
//! - the two norms' inputs in fp32: 2 × 4h;
//! - the attention: q and k (`a`·h each, plus 4h each under a q/k norm), v and the output: `a`·h
//!   each; the kernel's fp32 log-sum-exp, 4 B per head;
//! - the MLP: the activation function's input, `a`·ffn;
//! - a trained block (full fine-tuning) keeps besides every product's input: the MLP's product
//!   (`a`·ffn) and its input's 16-bit copy (`a`·h), the 16-bit copies autocast makes of the
//!   attention's input for q, k and v (3·`a`·h), the modulated norm outputs the scale's gradient
//!   needs (2 × 4h) and the attention and MLP outputs the gates' gradients need (2·`a`·h).
//!
//! A frozen base keeps none of those: its projections' backward needs only their weights. LoRA
//! adapters keep their own inputs, counted by the language model path (`LoRA saved inputs`).
//!
//! At the MLP's output projection the block holds more than it keeps: the MLP's fp32 input (the
//! modulated norm output, 4h), the product a frozen output projection reads but does not keep
//! (`a`·ffn) and the projection's output (`a`·h); recomputed in the backward pass, the gradient
//! arriving for the block's output (`a`·h) besides.
//!
//! A single-stream block (FLUX.1's and HunyuanVideo's `single_layers`) runs its MLP beside the
//! attention from one norm and projects their concatenation at once: it keeps one norm's input,
//! and at that projection holds the norm's output, the MLP's product and the concatenation
//! (`a`·(h + ffn)) a frozen projection does not keep.
//!
//! Counted against diffusers' own blocks (0.42.1) on the CPU under CUDA's autocast rules
//! (`tools/dit-train-peak.py`; tests in `tests/integration/reference.rs`: CogVideoX, SD3, Wan
//! and FLUX's single-stream blocks, stored and recomputed).

use super::calc::{Overflow, Product, formula};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::{Bytes, group_thousands};
use crate::hir::{Checkpointing, Diffusion, Method, Training};
use crate::ratio::Ratio;

const SOURCE: &str = "derived: diffusers' DiT blocks (CogVideoX, FLUX, SD3, Wan) under CUDA's \
                      bf16 autocast: fp32 norm inputs, q/k norm copies, the kernel's q, k, v and \
                      output, the MLP activation's input; at the output projection its fp32 \
                      input, what it reads and its output (dit_block.rs)";

/// A block's shape as the count reads it.
pub(super) struct Block {
    pub hidden: u64,
    pub ffn: u64,
    pub heads: u64,
    pub qk_norm: bool,
    /// Of the blocks, how many are parallel (single-stream) blocks.
    pub single: u64,
}

/// Bytes per token, with the terms that make them up.
struct PerToken {
    bytes: u64,
    terms: String,
}

/// How a block runs its attention and MLP.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The MLP after the attention, each from its own norm (DiT, MMDiT, FLUX's double-stream
    /// blocks, CogVideoX, Wan).
    Sequential,
    /// The MLP beside the attention from one norm, their outputs concatenated into one output
    /// projection (FLUX's and HunyuanVideo's single-stream blocks, `single_layers`).
    Parallel,
}

/// What the block keeps per token for the backward pass.
fn kept(block: &Block, kind: Kind, a: u64, trained: bool) -> Result<PerToken, Overflow> {
    let h = block.hidden;
    let mul = |x: u64, y: u64| x.checked_mul(y).ok_or(Overflow);
    let (norm_count, norms_text) = match kind {
        Kind::Sequential => (2, "two norm inputs in fp32"),
        Kind::Parallel => (1, "the norm's input in fp32"),
    };
    let norms = mul(4 * norm_count, h)?;
    let qk = if block.qk_norm { mul(2 * (4 + a), h)? } else { mul(2 * a, h)? };
    let attention = mul(2 * a, h)?.checked_add(mul(4, block.heads)?).ok_or(Overflow)?;
    let mlp = mul(a, block.ffn)?;
    let trained_extra = match (trained, kind) {
        (false, _) => 0,
        // product, MLP input copy, q/k/v input copies, modulated norm outputs, gated outputs
        (true, Kind::Sequential) => {
            mul(a, block.ffn)?.checked_add(mul(a * (1 + 3 + 2) + 8, h)?).ok_or(Overflow)?
        }
        // modulated norm output, q/k/v and MLP input copies, the concatenation, gated output
        (true, Kind::Parallel) => {
            mul(a, block.ffn)?.checked_add(mul(4 + a * (4 + 1 + 1), h)?).ok_or(Overflow)?
        }
    };
    let bytes = [norms, qk, attention, mlp, trained_extra]
        .into_iter()
        .try_fold(0u64, u64::checked_add)
        .ok_or(Overflow)?;
    let qk_text = if block.qk_norm { "q and k with their fp32 norm copies" } else { "q and k" };
    let trained_text = if trained {
        formula!(
            " + {} (a trained block: every product's input, the modulated norm outputs, the gated outputs)",
            group_thousands(trained_extra)
        )
    } else {
        String::new()
    };
    let terms = formula!(
        "{} ({norms_text}) + {} ({qk_text}) + {} (v, the attention output, its log-sum-exp) + {} \
         (the MLP activation's input){trained_text} = {} B",
        group_thousands(norms),
        group_thousands(qk),
        group_thousands(attention),
        group_thousands(mlp),
        group_thousands(bytes)
    );
    Ok(PerToken { bytes, terms })
}

/// What the block holds per token at its output projection beyond what it keeps: the MLP's
/// (or the parallel block's attention and MLP's) fp32 input, what the projection reads and a
/// frozen one does not keep, and its output; recomputed, the gradient arriving besides.
fn transient(
    block: &Block,
    kind: Kind,
    a: u64,
    trained: bool,
    recomputed: bool,
) -> Result<PerToken, Overflow> {
    let h = block.hidden;
    let input = h.checked_mul(4).ok_or(Overflow)?;
    let mlp = block.ffn.checked_mul(a).ok_or(Overflow)?;
    let (read, read_text) = match (kind, trained) {
        (Kind::Sequential, false) => (mlp, "the product it reads"),
        (Kind::Sequential, true) => (0, ""),
        // The activation's output, and the concatenation a frozen projection reads.
        (Kind::Parallel, false) => (
            h.checked_add(block.ffn)
                .and_then(|n| n.checked_mul(a))
                .and_then(|n| n.checked_add(mlp))
                .ok_or(Overflow)?,
            "the MLP's product and its concatenation with the attention output",
        ),
        (Kind::Parallel, true) => (mlp, "the MLP's product"),
    };
    let output = h.checked_mul(a).ok_or(Overflow)?;
    let gradient = if recomputed { output } else { 0 };
    let bytes = [input, read, output, gradient]
        .into_iter()
        .try_fold(0u64, u64::checked_add)
        .ok_or(Overflow)?;
    let read_text = if read == 0 {
        String::new()
    } else {
        formula!(" + {} ({read_text})", group_thousands(read))
    };
    let gradient_text = if recomputed {
        formula!(" + {} (the gradient arriving)", group_thousands(gradient))
    } else {
        String::new()
    };
    let terms = formula!(
        "{} (the fp32 input){read_text} + {} (its output){gradient_text} = {} B",
        group_thousands(input),
        group_thousands(output),
        group_thousands(bytes)
    );
    Ok(PerToken { bytes, terms })
}

fn component(name: &str, (bytes, formula): (Bytes, String)) -> Component {
    Component {
        held_by: HeldBy::Tensors,
        name: name.to_owned().into(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(SOURCE.into()),
    }
}

/// The blocks' stored activations (`denoiser activations`) over `tokens` per sample, and
/// without recomputation the last block's forward transients; `None` for a checkpointing the
/// count does not follow (op-level), left to the language model path. Of `layers` blocks the
/// last `block.single` are parallel (FLUX and HunyuanVideo run them after the double-stream
/// ones); under recomputation the block that holds the most is the one counted.
pub(super) fn activations(
    diffusion: &Diffusion,
    block: &Block,
    layers: u64,
    tokens: u64,
    training: &Training,
) -> Result<Option<Vec<Component>>, Overflow> {
    let elem = training.activations;
    let a = u64::try_from(elem.bytes_per_element().ceil()).map_err(|_| Overflow)?;
    let trained = matches!(training.method, Method::Full);
    let parallel = block.single.min(layers);
    let kinds = [(Kind::Sequential, layers - parallel), (Kind::Parallel, parallel)];
    let per_sample = |product: Product| -> Result<Product, Overflow> {
        product.times(diffusion.batch, "batch")?.times(tokens, "tokens")
    };
    let last_kind = if parallel > 0 { Kind::Parallel } else { Kind::Sequential };
    let name = |kind: Kind| match kind {
        Kind::Sequential => "blocks",
        Kind::Parallel => "single-stream blocks",
    };
    match training.checkpointing {
        Checkpointing::None | Checkpointing::Selective => {
            let mut bytes = Bytes::ZERO;
            let mut terms = Vec::new();
            for (kind, count) in kinds.into_iter().filter(|(_, count)| *count > 0) {
                let kept = kept(block, kind, a, trained)?;
                let stored = per_sample(Product::new().times(count, name(kind))?)?
                    .bytes_each(Ratio::int(i128::from(kept.bytes)), "per token per block")?;
                bytes = bytes.checked_add(stored.value()?).ok_or(Overflow)?;
                terms.push(formula!("{} (per token per block: {})", stored.terms(), kept.terms));
            }
            let held = transient(block, last_kind, a, trained, false)?;
            let last = per_sample(Product::new())?
                .bytes_each(Ratio::int(i128::from(held.bytes)), "per token")?;
            let (last_bytes, last_terms) = last.finish()?;
            Ok(Some(vec![
                component(
                    "denoiser activations",
                    (bytes, formula!("{} = {} B", terms.join(" + "), group_thousands(bytes.0))),
                ),
                component(
                    "denoiser last block's forward transients",
                    (last_bytes, formula!("{last_terms}; per token: {}", held.terms)),
                ),
            ]))
        }
        Checkpointing::Full => {
            // Offloaded (kohya's `--cpu_offload_checkpointing`), the block inputs wait on the
            // host: the one in use and the one in transfer are on the device.
            let (on_device, what) = if training.levers.offload_activations {
                (layers.min(2), "blocks' inputs on the device (offloaded)")
            } else {
                (layers, "blocks")
            };
            let checkpoints = per_sample(Product::new().times(on_device, what)?)?
                .times(block.hidden, "hidden")?
                .bytes_each(elem.bytes_per_element(), elem.name())?;
            let mut largest: Option<(u64, PerToken, PerToken)> = None;
            for (kind, _) in kinds.into_iter().filter(|(_, count)| *count > 0) {
                let kept = kept(block, kind, a, trained)?;
                let held = transient(block, kind, a, trained, true)?;
                let per_token = kept.bytes.checked_add(held.bytes).ok_or(Overflow)?;
                if largest.as_ref().is_none_or(|(most, ..)| per_token > *most) {
                    largest = Some((per_token, kept, held));
                }
            }
            let Some((per_token, kept, held)) = largest else { return Ok(None) };
            let recomputed = per_sample(Product::new().times(1, "recomputed block")?)?
                .bytes_each(Ratio::int(i128::from(per_token)), "per token")?;
            let bytes = checkpoints.value()?.checked_add(recomputed.value()?).ok_or(Overflow)?;
            let formula = formula!(
                "checkpoints {} + {} (kept: {}; held at its output projection: {}) = {} B",
                checkpoints.terms(),
                recomputed.terms(),
                kept.terms,
                held.terms,
                group_thousands(bytes.0)
            );
            Ok(Some(vec![component("denoiser activations", (bytes, formula))]))
        }
        Checkpointing::SelectiveOp => Ok(None),
    }
}
