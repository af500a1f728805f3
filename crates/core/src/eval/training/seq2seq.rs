//! What a training step of an encoder-decoder model (T5, BART) stores for the backward pass.
//!
//! The encoder's layers run over the `source` tokens and store what a decoder-only layer stores
//! ([`layer_elements_per_token`]); the decoder's layers run over the `sequence` (target) tokens
//! and store that too, plus their cross-attention's tensors: on the target side its norm's
//! input and output, the queries and the attention output (and, with dropout, the mask after
//! it); on the source side the keys and values it projects from the encoder's output. The
//! encoder's output itself is stored once, as the input of every cross-attention's k and v.
//! Structure: transformers `modeling_t5.py` (`T5Block`: `T5LayerSelfAttention`,
//! `T5LayerCrossAttention` in decoder blocks, `T5LayerFF`; `T5Attention.forward` computes
//! k and v from `key_value_states` when it is a cross-attention).

use super::activations::{
    ADAPTER_SOURCE, adapter_per_token, eager_rms_norm_bytes, kept_per_score,
    layer_elements_per_token, softmax_gradients, stream, with_bytes_as_elements,
};
use super::states::intermediate;
use crate::budget::Component;
use crate::bytes::Bytes;
use crate::eval::Placement;
use crate::eval::calc::{Overflow, Product, add, div_ceil, formula};
use crate::hir::{Attention, Checkpointing, LoraTarget, Shape, Training};
use crate::ratio::Ratio;

const SOURCE: &str = "DOMAIN.md §5.3 per layer (Korthikanti et al. 2022), over transformers \
                      modeling_t5.py's T5Block: encoder layers at the source length, decoder \
                      layers at the target length with their cross-attention";

/// The layers of each stack on this device, and the token counts they run over.
struct Stacks {
    encoder: u64,
    decoder: u64,
    source: u64,
    target: u64,
    batch: (u64, &'static str),
    /// Micro-batches a pipeline stage keeps in flight (1F1B).
    in_flight: u64,
}

impl Stacks {
    fn new(shape: &Shape, placement: &Placement, training: &Training, source: u64) -> Stacks {
        let encoder = shape.encoder_layers_in(placement.first_layer, placement.layers);
        let kept = |layers: u64| super::activations::kept_layers(layers, training);
        Stacks {
            encoder: kept(encoder),
            decoder: kept(placement.layers - encoder),
            source,
            target: training.sequence,
            batch: super::activations::batch(training),
            in_flight: super::in_flight(placement, training),
        }
    }
}

/// A sum of products written as `name product + name product = total`.
#[derive(Default)]
struct Sum {
    total: Bytes,
    terms: Vec<String>,
}

impl Sum {
    fn add(&mut self, name: &str, product: &Product) -> Result<(), Overflow> {
        self.total = add(self.total, product.value()?)?;
        self.terms.push(formula!("{name} {}", product.terms()));
        Ok(())
    }

    fn finish(self) -> (Bytes, String) {
        let total = self.total;
        (total, formula!("{} = {total}", self.terms.join(" + ")))
    }
}

pub(super) fn activations(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    source: u64,
) -> Result<(Vec<Component>, Option<Bytes>), Overflow> {
    let stacks = Stacks::new(shape, placement, training, source);
    let (stored, recomputed) = stored(shape, placement, training, &stacks)?;
    let mut components = vec![intermediate("activations", stored, SOURCE)];
    components.extend(adapters(shape, placement, training, &stacks)?);
    if training.attention == Attention::Eager {
        components.extend(eager(shape, placement, training, &stacks)?);
    }
    Ok((components, recomputed))
}

/// Per token: a layer's own tensors, and a cross-attention's on its target and source sides.
struct PerToken {
    layer: u64,
    cross_target: u64,
    cross_source: u64,
}

fn per_token(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<PerToken, Overflow> {
    let t = placement.tensor;
    let heads = shape.heads / t;
    let kv_heads = div_ceil(shape.kv_heads, t);
    let h = shape.hidden;
    // The norm's input and output are h-sized (split by sequence parallelism), the queries and
    // the attention output sharded by heads; fp32 softmax statistics (4 B per head) and the
    // dropout mask (1 B per element) folded in as elements, as the layer's own.
    let replicated = if training.sequence_parallel { div_ceil(2 * h, t) } else { 2 * h };
    let elements = replicated + 2 * heads * shape.head_dim;
    let masks = if shape.dropout { div_ceil(h, t) } else { 0 };
    // The cross-attention's own norm computes in fp32 like the layer's (T5LayerNorm).
    let norm = eager_rms_norm_bytes(shape, training);
    let norm = if training.sequence_parallel { div_ceil(norm, t) } else { norm };
    Ok(PerToken {
        layer: layer_elements_per_token(shape, placement, training)?,
        cross_target: with_bytes_as_elements(elements, 4 * heads + masks + norm, training)?,
        cross_source: 2 * kv_heads * shape.head_dim,
    })
}

/// The layers' stored activations: every layer's, or under full checkpointing each layer's
/// input and one recomputed layer (the larger of an encoder and a decoder layer), whose bytes
/// come back beside the total.
fn stored(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    stacks: &Stacks,
) -> Result<((Bytes, String), Option<Bytes>), Overflow> {
    let each = per_token(shape, placement, training)?;
    let stream = stream(training);
    let elem = stream.bytes_per_element();
    let tokens = |layers: u64, which: &'static str, tokens: u64, what: &'static str| {
        Product::new()
            .times(stacks.in_flight, "micro-batches in flight")?
            .times(layers, which)?
            .times(tokens, what)?
            .times_count(stacks.batch)
    };
    let decoder_each = each.layer + each.cross_target;
    let mut sum = Sum::default();
    let mut recomputed_bytes = None;
    if training.checkpointing == Checkpointing::Full {
        // Each layer's input is kept (the decoder's with the encoder output beside it); one
        // layer is recomputed at a time in the backward pass.
        if stacks.encoder > 0 {
            let inputs = tokens(stacks.encoder, "encoder layers", stacks.source, "source tokens")?;
            sum.add(
                "encoder checkpoints",
                &inputs.times(shape.hidden, "hidden")?.bytes_each(elem, stream.name())?,
            )?;
        }
        if stacks.decoder > 0 {
            let inputs = tokens(stacks.decoder, "decoder layers", stacks.target, "target tokens")?;
            sum.add(
                "decoder checkpoints",
                &inputs.times(shape.hidden, "hidden")?.bytes_each(elem, stream.name())?,
            )?;
        }
        let encoder_layer = Product::new()
            .times(stacks.source, "source tokens")?
            .times_count(stacks.batch)?
            .times(each.layer, "elements per token")?
            .bytes_each(elem, stream.name())?;
        let decoder_elements = stacks
            .target
            .checked_mul(decoder_each)
            .and_then(|t| t.checked_add(stacks.source.checked_mul(each.cross_source)?))
            .ok_or(Overflow)?;
        let what = formula!(
            "({} target tokens × {decoder_each} + {} source tokens × {} cross-attention K/V) \
             elements",
            stacks.target,
            stacks.source,
            each.cross_source
        );
        let decoder_layer = Product::new()
            .times_count(stacks.batch)?
            .times(decoder_elements, what)?
            .bytes_each(elem, stream.name())?;
        let recomputed = match (stacks.encoder > 0, stacks.decoder > 0) {
            (true, true) if encoder_layer.value()? > decoder_layer.value()? => encoder_layer,
            (true, false) => encoder_layer,
            _ => decoder_layer,
        };
        recomputed_bytes = Some(recomputed.value()?);
        sum.add("one recomputed layer", &recomputed)?;
    } else {
        if stacks.encoder > 0 {
            let encoder = tokens(stacks.encoder, "encoder layers", stacks.source, "source tokens")?
                .times(each.layer, "elements per token")?
                .bytes_each(elem, stream.name())?;
            sum.add("encoder", &encoder)?;
        }
        if stacks.decoder > 0 {
            let decoder = tokens(stacks.decoder, "decoder layers", stacks.target, "target tokens")?
                .times(decoder_each, "elements per token (with cross-attention)")?
                .bytes_each(elem, stream.name())?;
            sum.add("decoder", &decoder)?;
            let cross = tokens(stacks.decoder, "decoder layers", stacks.source, "source tokens")?
                .times(each.cross_source, "cross-attention K/V elements")?
                .bytes_each(elem, stream.name())?;
            sum.add("cross-attention K/V", &cross)?;
        }
    }
    if stacks.decoder > 0 {
        let output = Product::new()
            .times(stacks.in_flight, "micro-batches in flight")?
            .times(stacks.source, "source tokens")?
            .times_count(stacks.batch)?
            .times(shape.hidden, "hidden")?
            .bytes_each(elem, stream.name())?;
        sum.add("encoder output", &output)?;
    }
    Ok((sum.finish(), recomputed_bytes))
}

/// What PEFT's LoRA layers keep (see `activations.rs`' `adapter_inputs`): every layer's
/// adapters over its own tokens, and in a decoder layer the cross-attention's too, whose q and
/// o read target tokens and whose k and v read the encoder's output (source tokens).
fn adapters(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    stacks: &Stacks,
) -> Result<Option<Component>, Overflow> {
    let all = adapter_per_token(shape, placement, training, |_| true)?;
    let Some((all, what)) = all else { return Ok(None) };
    let target_side = |t: LoraTarget| matches!(t, LoraTarget::Q | LoraTarget::O);
    let source_side = |t: LoraTarget| matches!(t, LoraTarget::K | LoraTarget::V);
    let zero = || (Ratio::ZERO, String::new());
    let queries = adapter_per_token(shape, placement, training, target_side)?.unwrap_or_else(zero);
    let keys = adapter_per_token(shape, placement, training, source_side)?.unwrap_or_else(zero);
    let bytes = |layers: u64, tokens: u64, per_token: Ratio| -> Result<Ratio, Overflow> {
        Ratio::int(i128::from(layers))
            .checked_mul(Ratio::int(i128::from(tokens)))
            .and_then(|r| r.checked_mul(per_token))
            .ok_or(Overflow)
    };
    let sum3 = |a: Ratio, b: Ratio, c: Ratio| a.checked_add(b).and_then(|x| x.checked_add(c));
    // Without full checkpointing every layer keeps them (selective recomputation recomputes
    // the attention core, not the projections); with it, only the recomputed layer.
    let every_layer = training.checkpointing != Checkpointing::Full;
    let in_flight = if every_layer { stacks.in_flight } else { 1 };
    let encoder_layer = bytes(1, stacks.source, all)?;
    let decoder_layer = sum3(
        bytes(1, stacks.target, all)?,
        bytes(1, stacks.target, queries.0)?,
        bytes(1, stacks.source, keys.0)?,
    )
    .ok_or(Overflow)?;
    let per_sample = if every_layer {
        let encoder = bytes(stacks.encoder, 1, encoder_layer)?;
        encoder.checked_add(bytes(stacks.decoder, 1, decoder_layer)?).ok_or(Overflow)?
    } else if stacks.decoder == 0 {
        encoder_layer
    } else if stacks.encoder == 0 {
        decoder_layer
    } else {
        encoder_layer.max(decoder_layer)
    };
    if per_sample == Ratio::ZERO {
        return Ok(None);
    }
    let which = if every_layer {
        formula!(
            "per sample: {} encoder layers × {} source tokens + {} decoder layers × ({} target \
             tokens + cross-attention q, o over them, k, v over {} source tokens) of {what}",
            stacks.encoder,
            stacks.source,
            stacks.decoder,
            stacks.target,
            stacks.source
        )
    } else {
        formula!("per sample, the recomputed layer: {what}")
    };
    let product = Product::new()
        .times(in_flight, "micro-batches in flight")?
        .times_count(stacks.batch)?
        .bytes_each(per_sample, which)?;
    Ok(Some(intermediate("LoRA saved inputs", product.finish()?, ADAPTER_SOURCE)))
}

/// Eager attention's kept scores (transformers' T5 attention is eager: `torch.matmul` scores
/// plus the position bias, `softmax(scores.float())`, `type_as`, dropout): the encoder's
/// source × source per layer, a decoder layer's target × target and target × source; and one
/// attention's softmax backward, the largest.
fn eager(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    stacks: &Stacks,
) -> Result<Vec<Component>, Overflow> {
    let (per_score, kept) = kept_per_score(shape, training)?;
    let heads = shape.heads / placement.tensor;
    let square = |n: u64| n.checked_mul(n).ok_or(Overflow);
    let encoder_layer = square(stacks.source)?;
    let decoder_layer = square(stacks.target)?
        .checked_add(stacks.target.checked_mul(stacks.source).ok_or(Overflow)?)
        .ok_or(Overflow)?;
    let (scores, which) = match training.checkpointing {
        Checkpointing::None => (
            stacks
                .encoder
                .checked_mul(encoder_layer)
                .and_then(|e| e.checked_add(stacks.decoder.checked_mul(decoder_layer)?))
                .ok_or(Overflow)?,
            formula!(
                "({} encoder layers × {}² + {} decoder layers × ({}² + {} × {})) scores per head",
                stacks.encoder,
                stacks.source,
                stacks.decoder,
                stacks.target,
                stacks.target,
                stacks.source
            ),
        ),
        Checkpointing::Selective | Checkpointing::SelectiveOp | Checkpointing::Full => {
            let largest = match (stacks.encoder > 0, stacks.decoder > 0) {
                (true, true) => encoder_layer.max(decoder_layer),
                (true, false) => encoder_layer,
                _ => decoder_layer,
            };
            (largest, "scores per head of the recomputed layer".to_string())
        }
    };
    let product = Product::new()
        .times_count(stacks.batch)?
        .times(heads, "heads")?
        .times(scores, which)?
        .bytes_each(per_score, kept)?;
    // One attention's backward at a time: the largest queries × keys among those here.
    let mut pairs = Vec::new();
    if stacks.encoder > 0 {
        pairs.push((stacks.source, stacks.source));
    }
    if stacks.decoder > 0 {
        pairs.push((stacks.target, stacks.target));
        pairs.push((stacks.target, stacks.source));
    }
    let (queries, keys) = pairs
        .into_iter()
        .max_by_key(|(q, k)| u128::from(*q) * u128::from(*k))
        .unwrap_or((stacks.target, stacks.target));
    Ok(vec![
        intermediate(
            "attention scores (eager)",
            product.finish()?,
            "DOMAIN.md §4.2 per attention: transformers modeling_t5.py T5Attention (eager, with \
             a position bias) over source × source, target × target and target × source",
        ),
        softmax_gradients(stacks.batch, heads, queries, (keys, "keys"))?,
    ])
}
