//! transformers' `QuantizedCache` (`cache_layout quantized`): what a quantized KV cache holds
//! and the transient of its update.
//!
//! Read in transformers' `cache_utils.py` (`QuantizedCache.update`, the versions that use the
//! `quanto` package) and quanto 0.2.0 (`MaxOptimizer`, `AffineQuantizer`, `QBitsTensor`):
//! - The first update of a layer (the prompt) quantizes its keys and values whole and leaves the
//!   window empty. Every later update dequantizes the layer's whole quantized cache, keys and
//!   values, and concatenates each with the window and the new token(s): that is what attention
//!   reads. When the window already holds `residual_length - 1` tokens, the concatenation is
//!   quantized whole into the new cache and the window emptied; otherwise the new token is
//!   appended to the window. So the window holds at most `residual_length - 1` tokens.
//! - The dequantized tensors are local variables of `update`, alive until it returns, beside the
//!   concatenations; quantizing the keys then computes `round(base / scale)` over them in their
//!   16-bit type, two temporaries of the keys' size alive at once (the division's result and the
//!   rounding's), before the `+ zeropoint`, the clamp and the packing, which are no larger.
//!
//! So one layer's update holds, beside the cache: its dequantized keys and values, their
//! concatenations over the whole context, and two 16-bit temporaries of the keys.

use super::Placement;
use super::calc::{self, Overflow, Product, formula};
use super::llm;
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::hir::{AttentionKind, Shape};
use crate::precision::Precision;

/// Where the layout's facts come from, for the components' provenance.
const SOURCE: &str = "transformers QuantizedCache.update (quanto backend): the window of the newest tokens, re-quantized with the whole cache when it reaches residual_length; quanto 0.2.0 MaxOptimizer / AffineQuantizer / PackedTensor";

/// The quantized cache and its window (category cache), and the transient of one layer's update
/// (intermediate). `stored` is the cache's precision, `window` the activations'; `residual` is
/// `residual_length`.
pub(crate) fn components(
    shape: &Shape,
    placement: &Placement,
    stored: Precision,
    window: Precision,
    context: u64,
    sessions: u64,
    residual: u64,
) -> Result<Vec<Component>, Overflow> {
    // `residual_length` 0 and 1 both re-quantize at every step: the window stays empty.
    let window_tokens = (residual.max(1) - 1).min(context);
    let mut quantized =
        llm::kv_cache(shape, placement, stored, context - window_tokens, sessions, 1)?;
    if window_tokens > 0 {
        quantized.formula =
            formula!("{}; the newest {window_tokens} tokens are in the window", quantized.formula);
    }
    quantized.source = Some(SOURCE.into());
    let mut components = vec![quantized];
    if window_tokens > 0 {
        let mut recent = llm::kv_cache(shape, placement, window, window_tokens, sessions, 1)?;
        recent.name = "KV cache: residual window".into();
        recent.formula =
            formula!("{}: at most residual_length − 1 tokens in {}", recent.formula, window.name());
        recent.source = Some(SOURCE.into());
        components.push(recent);
    }
    components.push(update(shape, placement, window, context, sessions, residual)?);
    Ok(components)
}

/// One layer's update at a step that re-quantizes with the window full: the dequantized cache
/// (the context less the window and the new token), the concatenations over the whole context,
/// and the two temporaries of quantizing the keys.
fn update(
    shape: &Shape,
    placement: &Placement,
    precision: Precision,
    context: u64,
    sessions: u64,
    residual: u64,
) -> Result<Component, Overflow> {
    let elem = precision.bytes_per_element();
    let name = precision.name();
    // Per token of one layer: keys and values of the device's KV heads, or MLA's one latent.
    let tensors = |product: Product| match &shape.attention {
        AttentionKind::Standard => product.times(2, "(K and V)"),
        AttentionKind::Mla(_) => Ok(product),
    };
    let width = |product: Product| llm::kv_width(shape, placement, product);
    let over = |product: Product, tokens: u64, what: &'static str| {
        product.times(tokens, what)?.times(sessions, "sessions")?.bytes_each(elem, name.clone())
    };
    let dequantized = over(
        width(tensors(Product::new())?)?,
        context.saturating_sub(residual.max(1)),
        "quantized tokens",
    )?;
    let concatenated = over(width(tensors(Product::new())?)?, context, "tokens")?;
    let requantizing =
        over(width(Product::new().times(2, "(base / scale, rounded)")?)?, context, "tokens")?;
    let bytes = calc::sum([dequantized.value()?, concatenated.value()?, requantizing.value()?])?;
    let formula = formula!(
        "dequantized {} + concatenated {} + keys re-quantizing {} = {bytes}",
        dequantized.terms(),
        concatenated.terms(),
        requantizing.terms()
    );
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "KV cache: one layer dequantized".into(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(SOURCE.into()),
    })
}
