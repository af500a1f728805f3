//! What a training step stores for the backward pass: each layer's activations (Korthikanti et
//! al. 2022 adapted to gated MLPs and grouped-query attention, DOMAIN.md §5.3), the checkpoints
//! under recomputation, eager attention's scores and the softmax backward's gradients.

use super::states::intermediate;
use crate::budget::Component;
use crate::bytes::Bytes;
use crate::eval::Placement;
use crate::eval::calc::{Overflow, Product, div_ceil, formula};
use crate::hir::{
    Attention, Checkpointing, FusedLoss, LoraTarget, Method, Mlp, Saved, Shape, Training,
};
use crate::precision::Precision;
use crate::ratio::Ratio;

/// Bytes one layer stores for the backward pass, per token:
/// attention: norm input and output (2h), q/k/v (`(heads + 2·kv_heads)·head_dim`), attention
/// output (`heads·head_dim`), fp32 softmax statistics (4 B per head);
/// MLP: norm input and output (2h), gate, up, activation and product (4·ffn; 2·ffn ungated);
/// under a frozen base, less what no frozen projection keeps, and with a fused q/k/v projection
/// its whole output behind the kept value (`frozen.rs`);
/// with dropout, a one-byte mask after attention and after the MLP.
/// The h-sized tensors are replicated across tensor-parallel ranks; the rest is sharded.
fn layer_activation_formula(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Product, Overflow> {
    let per_token = layer_elements_per_token(shape, placement, training)?;
    let elem = stream(training).bytes_per_element();
    Product::new()
        .times(training.sequence, "tokens")?
        .times_count(batch(training))?
        .times(per_token, "elements per token per layer")?
        .bytes_each(elem, stream(training).name())
}

/// [`layer_activation_formula`]'s elements per token of one layer, with the byte-sized
/// statistics and masks folded in as elements of the stream's type (rounded up).
pub(super) fn layer_elements_per_token(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<u64, Overflow> {
    let t = placement.tensor;
    let heads = shape.heads / t;
    let kv_heads = div_ceil(shape.kv_heads, t);
    let ffn_tensors = match shape.mlp {
        Mlp::Gated | Mlp::GatedFused => 4,
        Mlp::Plain => 2,
    };
    // Sequence parallelism splits the h-sized tensors (norms, residuals) over the tensor ranks too.
    let replicated =
        if training.sequence_parallel { div_ceil(4 * shape.hidden, t) } else { 4 * shape.hidden };
    let elements = (replicated
        + (2 * heads + 2 * kv_heads) * shape.head_dim
        + ffn_tensors * div_ceil(shape.ffn, t))
    .saturating_sub(super::frozen::frozen_unkept_elements(shape, placement, training))
        + super::frozen::fused_qkv_elements(shape, placement, training);
    // Softmax statistics are 4 fp32 bytes per head per token; with dropout, the attention and
    // MLP outputs' one-byte masks (Korthikanti et al.: sbh each). Fold them in as elements.
    let masks = if shape.dropout { 2 * div_ceil(shape.hidden, t) } else { 0 };
    let norms = 2 * eager_rms_norm_bytes(shape, training);
    let norms = if training.sequence_parallel { div_ceil(norms, t) } else { norms };
    with_bytes_as_elements(elements, 4 * heads + masks + norms, training)
}

/// Elements per token of one layer that torchtitan's op-level selective checkpointing saves
/// (`_apply_op_sac`: `MUST_SAVE` for the outputs of `aten.mm` and the fused attention kernels,
/// except every second `mm` of the layer, counted from the layer's start): the layer's input
/// (the checkpoint's), the attention output with its fp32 log-sum-exp per head, and of the
/// products in the order a Llama block runs them (q, k, v, o, then gate, up, down; up, down for
/// a plain MLP) the first, third, fifth and seventh: q, v, gate and down.
pub(super) fn op_saved_elements(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<u64, Overflow> {
    let t = placement.tensor;
    let q = (shape.heads / t) * shape.head_dim;
    let kv = div_ceil(shape.kv_heads, t) * shape.head_dim;
    let ffn = div_ceil(shape.ffn, t);
    let hidden = if training.sequence_parallel { div_ceil(shape.hidden, t) } else { shape.hidden };
    let products: Vec<u64> = match shape.mlp {
        Mlp::Gated | Mlp::GatedFused => vec![q, kv, kv, hidden, ffn, ffn, hidden],
        Mlp::Plain => vec![q, kv, kv, hidden, ffn, hidden],
    };
    let saved_products: u64 = products.iter().step_by(2).sum();
    let elements = hidden + q + saved_products;
    with_bytes_as_elements(elements, 4 * (shape.heads / t), training)
}

/// What one eager RMSNorm keeps per token beyond the input and output counted as stream
/// elements. It computes in fp32 (transformers' `LlamaRMSNorm`, torchtune's `RMSNorm`:
/// `x.to(float32)`, then `pow(2)` and the product with `rsqrt` both save that fp32 copy, 4 B
/// where a 16-bit input counted 2), and `weight * x.to(input_dtype)` saves the normalized
/// tensor for the weight's gradient when the weight trains (full fine-tuning). Compiled layers
/// fuse the norm and keep its input; LayerNorm is one native op that keeps its input.
pub(super) fn eager_rms_norm_bytes(shape: &Shape, training: &Training) -> u64 {
    if shape.norm != crate::hir::Norm::Rms || training.levers.compile {
        return 0;
    }
    let stream = u64::try_from(stream(training).bytes_per_element().ceil()).unwrap_or(4);
    let upcast = 4u64.saturating_sub(stream);
    // The norms of trained layers train too (full and freeze tuning).
    let normalized =
        if matches!(training.method, Method::Full | Method::Freeze { .. }) { stream } else { 0 };
    (upcast + normalized) * shape.hidden
}

/// `elements` plus `bytes` counted as elements of the stream's type, rounded up: how byte-sized
/// statistics and masks join a per-token element count.
pub(super) fn with_bytes_as_elements(
    elements: u64,
    bytes: u64,
    training: &Training,
) -> Result<u64, Overflow> {
    let elem = stream(training).bytes_per_element();
    let extra = Ratio::int(i128::from(bytes)).checked_div(elem).ok_or(Overflow)?;
    let total = Ratio::int(i128::from(elements)).checked_add(extra).ok_or(Overflow)?;
    u64::try_from(total.ceil()).map_err(|_| Overflow)
}

/// The type a layer's stored activations have. Usually the compute type; but a quantized base
/// whose embedding was cast to fp32 (PEFT's k-bit preparation) feeds fp32 into the residual
/// stream, the residual adds promote every layer's output back to fp32, and bitsandbytes layers
/// return their input's type: the layer inputs and most of what a layer stores are fp32, though
/// autocast runs the matmuls in 16-bit.
pub(super) fn stream(training: &Training) -> Precision {
    let cast = training.unquantized == Precision::Fp32 && !training.weights.is_float_compute();
    if cast { Precision::Fp32 } else { training.activations }
}

pub(in crate::eval) fn activations(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Vec<Component>, Overflow> {
    if let (Some(_), Some(source)) = (&shape.encoder, training.source) {
        let (mut components, recomputed) =
            super::seq2seq::activations(shape, placement, training, source)?;
        components.extend(logits(shape, placement, training, recomputed)?);
        return Ok(components);
    }
    let (mut components, recomputed) = decoder_activations(shape, placement, training)?;
    let loss = logits(shape, placement, training, recomputed)?;
    if recomputed.is_none() {
        components.extend(last_layer_transient(shape, placement, training, loss.as_ref())?);
    }
    components.extend(loss);
    Ok(components)
}

/// Without recomputation, the last layer's forward pass holds its transients
/// ([`super::frozen::forward_transient`]) beside every layer's stored tensors; the loss comes
/// after them and frees its own before the backward pass reaches the layers, so the two never
/// meet: the step holds the larger, and this counts what the transients exceed the loss by.
fn last_layer_transient(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    loss: Option<&Component>,
) -> Result<Option<Component>, Overflow> {
    // A pipeline stage before the last has no loss: its last layer's transients count whole.
    let (transient, held) = super::frozen::forward_transient(shape, placement, training)?;
    let loss = loss.map_or(Bytes::ZERO, |l| l.bytes);
    let beyond = Bytes(transient.0.saturating_sub(loss.0));
    if beyond == Bytes::ZERO {
        return Ok(None);
    }
    Ok(Some(intermediate(
        "last layer's forward transients",
        (beyond, formula!("{held}, less the loss's {loss} it never meets = {beyond}")),
        super::frozen::SOURCE,
    )))
}

/// Sequences per micro-batch, with their label: a preference pair runs its chosen and rejected
/// sequences as one batch of twice the pairs (TRL `concatenated_forward`).
pub(super) fn batch(training: &Training) -> (u64, &'static str) {
    match training.objective.sequences_per_sample() {
        1 => (training.micro_batch, "micro_batch"),
        n => {
            (training.micro_batch.saturating_mul(n), "sequences (each pair's chosen and rejected)")
        }
    }
}

/// Layers whose stored activations are on the device at once: all of them, or with activation
/// offloading two (torchtune `OffloadActivations`: the layer being computed and the one whose
/// tensors are in transfer on the side stream, in either pass).
pub(super) fn kept_layers(layers: u64, training: &Training) -> u64 {
    if training.levers.offload_activations { layers.min(2) } else { layers }
}

/// A decoder-only model's layers: their activations, what LoRA adapters keep, eager scores;
/// and, under full checkpointing, the one recomputed layer's stored bytes.
fn decoder_activations(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<(Vec<Component>, Option<Bytes>), Overflow> {
    let elem = stream(training);
    let per_layer = layer_activation_formula(shape, placement, training)?;
    let per_layer_bytes = per_layer.value()?;
    // 1F1B pipeline schedule: stage s keeps (stages - s) micro-batches in flight.
    let in_flight = super::in_flight(placement, training);
    let layers = kept_layers(placement.layers, training);
    let which =
        if layers < placement.layers { "layers on the device (offloaded)" } else { "layers" };
    let mut components = Vec::new();
    let source = if training.levers.offload_activations {
        "DOMAIN.md §5.3: Korthikanti et al. 2022 (Table 2) adapted to gated MLP, GQA; torchtune OffloadActivations moves saved tensors to the host"
    } else {
        "DOMAIN.md §5.3: Korthikanti et al. 2022 (Table 2) adapted to gated MLP, GQA, no dropout"
    };
    // The recomputed layer's bytes, with what its forward pass holds besides, under recomputation.
    let mut recomputed = None;
    let (bytes, formula) = match training.checkpointing {
        Checkpointing::None | Checkpointing::Selective => {
            let total = Product::new()
                .times(layers, which)?
                .times(in_flight, "micro-batches in flight")?
                .bytes_each(
                    Ratio::int(i128::from(per_layer_bytes.0)),
                    formula!("per layer: {}", per_layer.terms()),
                )?;
            total.finish()?
        }
        Checkpointing::Full | Checkpointing::SelectiveOp => {
            // What every layer keeps: its input alone under full checkpointing, what the
            // op-level policy saves under it; one layer's rest is recomputed in backward.
            let (kept, what, named) = if training.checkpointing == Checkpointing::Full {
                (shape.hidden, "hidden", "checkpoints")
            } else {
                (op_saved_elements(shape, placement, training)?, "saved elements", "saved outputs")
            };
            let kept = Product::new()
                .times(layers, which)?
                .times(in_flight, "micro-batches in flight")?
                .times(training.sequence, "tokens")?
                .times_count(batch(training))?
                .times(kept, what)?
                .bytes_each(elem.bytes_per_element(), elem.name())?;
            let (transient, held) = super::frozen::forward_transient(shape, placement, training)?;
            let layer = crate::eval::calc::add(per_layer_bytes, transient)?;
            recomputed = Some(layer);
            let bytes = crate::eval::calc::add(kept.value()?, layer)?;
            (
                bytes,
                formula!(
                    "{named} {} + one recomputed layer {} + what its forward pass holds besides \
                     ({held}) = {bytes}",
                    kept.terms(),
                    per_layer.terms()
                ),
            )
        }
    };
    components.push(intermediate("activations", (bytes, formula), source));
    if let Some(adapters) = adapter_inputs(shape, placement, training)? {
        components.push(adapters);
    }
    if let Some(kept) = kept_4bit_inputs(shape, placement, training)? {
        components.push(kept);
    }
    if training.attention == Attention::Eager {
        components.extend(eager_attention(shape, placement, training)?);
    }
    Ok((components, recomputed))
}

/// What a bitsandbytes release before 0.43.2 keeps beside the layer's activations: each 4-bit
/// matrix's input, held on the autograd context (`MatMul4Bit`'s `ctx.tensors = (A, B)`,
/// bitsandbytes PR #1270) from the forward pass until the graph is freed. Per token and layer
/// the matrices read four inputs: the attention norm's output (q, k, v), the attention output
/// (o), the MLP norm's output (gate and up, or a plain MLP's first matrix) and the MLP's
/// product (down), in the stream's type. A frozen 16-bit matrix keeps none of them, since its
/// own backward needs only its weight. Every layer holds them without recomputation. Under
/// checkpointing the first forward runs without a graph, and the one recomputed layer's inputs
/// are among the tensors its per-layer count already holds.
fn kept_4bit_inputs(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    if !training.bnb_keeps_inputs {
        return Ok(None);
    }
    let t = placement.tensor;
    let hidden = shape.hidden;
    let attention_out = (shape.heads / t) * shape.head_dim;
    let ffn = div_ceil(shape.ffn, t);
    let per_token = 2 * hidden + attention_out + ffn;
    if matches!(training.checkpointing, Checkpointing::Full | Checkpointing::SelectiveOp) {
        return Ok(None);
    }
    let in_flight = super::in_flight(placement, training);
    let mut product = Product::new().times(kept_layers(placement.layers, training), "layers")?;
    if in_flight > 1 {
        product = product.times(in_flight, "micro-batches in flight")?;
    }
    let elem = stream(training);
    let product = product
        .times_count(batch(training))?
        .times(training.sequence, "tokens")?
        .times(
            per_token,
            "4-bit matrix inputs per token (2 norm outputs, attention output, MLP product)",
        )?
        .bytes_each(elem.bytes_per_element(), elem.name())?;
    Ok(Some(intermediate(
        "4-bit layers' kept inputs",
        product.finish()?,
        "bitsandbytes before 0.43.2: MatMul4Bit.forward keeps ctx.tensors = (A, B) (PR #1270 drops A)",
    )))
}

/// The loss over the last stage's logits, `sequence` tokens (a decoder's target) per sample.
///
/// Under full checkpointing the loss and the recomputed layer (`recomputed`, its stored bytes)
/// never meet: the backward pass runs the loss's backward first and frees its tensors, which
/// only its own backward nodes kept, before it recomputes the last layer. The step then holds
/// the checkpoints beside the larger of the two, so the loss counts only what it exceeds the
/// recomputed layer by.
fn logits(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    recomputed: Option<Bytes>,
) -> Result<Option<Component>, Overflow> {
    let Some(loss) = whole_loss(shape, placement, training)? else {
        return Ok(None);
    };
    let loss = with_head_contribution(loss, shape, placement, training)?;
    let Some(layer) = recomputed else {
        return Ok(Some(loss));
    };
    let beyond = Bytes(loss.bytes.0.saturating_sub(layer.0));
    let formula = formula!(
        "{}, less the recomputed layer's {layer} it never meets (the loss's tensors are freed \
         before the last layer is recomputed) = {beyond}",
        loss.formula
    );
    Ok(Some(Component { bytes: beyond, formula, ..loss }))
}

/// A trained output head applied in chunks (torchtune's chunked output beside
/// `CEWithChunkedOutputLoss`) gets one weight-gradient contribution per chunk, which autograd
/// sums into the gradient it holds for the head (`InputBuffer::accumulate`): each chunk's
/// `vocab × hidden` contribution exists beside that sum, and beside the loss's tensors. The sum
/// itself is the head's gradient, counted with the other gradients.
fn with_head_contribution(
    loss: Component,
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Component, Overflow> {
    let trains_head = match &training.method {
        Method::Full => true,
        Method::Lora { save: modules, .. } | Method::Freeze { extra: modules, .. } => modules
            .iter()
            .any(|m| *m == Saved::Head || (shape.tied_embeddings && *m == Saved::Embeddings)),
        _ => false,
    };
    if !trains_head || training.loss_chunks <= 1 || training.levers.fused_loss == FusedLoss::Linear
    {
        return Ok(loss);
    }
    let contribution = Product::new()
        .times(div_ceil(shape.vocab, placement.tensor), "vocab")?
        .times(shape.hidden, "hidden")?
        .bytes_each(training.gradients.bytes_per_element(), training.gradients.name())?;
    let (bytes, terms) = contribution.finish()?;
    let total = crate::eval::calc::add(loss.bytes, bytes)?;
    let formula = formula!(
        "{} + one of {} chunks' contribution to the trained head's gradient ({terms}) = {total}",
        loss.formula,
        training.loss_chunks
    );
    Ok(Component { bytes: total, formula, ..loss })
}

/// The loss's own peak, before it is set against the recomputed layer.
fn whole_loss(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    if placement.stage + 1 == placement.stages && shape.output == crate::hir::Output::Lm {
        // The cross-entropy path at its peak, per logit: in the backward pass the log-softmax
        // kept from the forward pass, its incoming gradient and the logits' outgoing gradient,
        // each in the loss's precision: 12 B in fp32. The forward pass never holds more: 16-bit
        // logits, their shifted contiguous copy, the fp32 upcast and the fp32 log-softmax are
        // 2 + 2 + 4 + 4 B, and fp32 logits skip the upcast (4 + 4 + 4 B). A 16-bit loss (remote
        // code without `.float()`, no autocast) has no upcast: 2 + 2 + 2 B forward, 3 × 2 B back.
        if training.levers.fused_loss == FusedLoss::Linear {
            return fused_linear_chunk(shape, training).map(Some);
        }
        let (per_logit, what, source) = per_logit(training)?;
        let logits = Product::new()
            .times(training.sequence, "tokens")?
            .times_count(batch(training))?
            .times(shape.vocab, "vocab")?
            .bytes_each(per_logit, what)?;
        return Ok(Some(intermediate("logits and loss", logits.finish()?, source)));
    }
    Ok(None)
}

/// The head fused with the loss: Liger's `LigerFusedLinearCrossEntropy` splits the tokens
/// into `ceil(V / h)` chunks, so a chunk's logits hold about as many values as the hidden
/// states (tokens × h), computed in the compute type and upcast to fp32 for the softmax; Cut
/// Cross-Entropy keeps its blocks on chip and holds less. An upper bound for both.
fn fused_linear_chunk(shape: &Shape, training: &Training) -> Result<Component, Overflow> {
    let c = training.activations.bytes_per_element();
    let per = c.checked_add(Ratio::int(4)).ok_or(Overflow)?;
    let chunk = Product::new()
        .times(training.sequence, "tokens")?
        .times_count(batch(training))?
        .times(shape.hidden, "hidden (a chunk of V / h tokens' logits)")?
        .bytes_each(per, formula!("{} + fp32 4 B", training.activations.name()))?;
    Ok(intermediate(
        "logits and loss (one fused chunk)",
        chunk.finish()?,
        "Liger Kernel fused_linear_cross_entropy: chunk_size = next_power_of_2(BT / ceil(V / H))",
    ))
}

/// Bytes per logit at the loss's peak, what they are, and their source.
///
/// The whole sequence at once: the log-softmax kept from the forward pass, its incoming gradient
/// and the logits' outgoing gradient, each in the loss's precision (3 L). In `n` chunks (the
/// head returns 16-bit chunks, each upcast on its own): the forward pass holds every 16-bit
/// chunk and every kept log-softmax beside one chunk's upcast (c + L + L/n); the backward pass
/// the kept log-softmax beside one chunk's two gradients and its 16-bit cast (L + (2L + c)/n).
/// Compiled, the loss is one fused graph that keeps its input and recomputes the softmax. In
/// chunks it receives the 16-bit chunks and upcasts each inside: every 16-bit chunk and one
/// chunk's gradient (c + c/n). Whole, it receives logits the model already upcast to the loss's
/// precision (torchtune's `output(h).float()` when unchunked): that input and its gradient
/// (2 L; the 16-bit logits and the upcast, c + L, are held only in passing).
fn per_logit(training: &Training) -> Result<(Ratio, String, &'static str), Overflow> {
    let loss = training.loss;
    let l = loss.bytes_per_element();
    let c = training.activations.bytes_per_element();
    let n = Ratio::int(i128::from(training.loss_chunks.max(1)));
    let over_n = |r: Ratio| r.checked_div(n).ok_or(Overflow);
    let add = |a: Ratio, b: Ratio| a.checked_add(b).ok_or(Overflow);
    if training.levers.fused_loss == FusedLoss::Logits {
        // The kernel keeps the logits for its backward pass and overwrites them with their
        // gradient; its per-row fp32 loss and log-sum-exp (8 B a token) are left out.
        let what =
            format!("{} logits, their gradient written over them", training.activations.name());
        return Ok((
            c,
            what,
            "Unsloth Fast_CrossEntropyLoss (kernels/cross_entropy_loss.py): the backward kernel \
             stores each row's gradient over its logits",
        ));
    }
    if training.levers.compile && training.loss_chunks > 1 {
        let per = add(c, over_n(c)?)?;
        let what = format!(
            "{} logits kept by the compiled loss + one of {} chunks' gradient",
            training.activations.name(),
            training.loss_chunks
        );
        return Ok((
            per,
            what,
            "torch.compile fuses the upcast, log-softmax and its backward (the partitioner recomputes the softmax from the saved 16-bit input)",
        ));
    }
    if training.levers.compile {
        let per = l.checked_mul(Ratio::int(2)).ok_or(Overflow)?;
        let what = format!("{} logits kept by the compiled loss + their gradient", loss.name());
        return Ok((
            per,
            what,
            "torch.compile fuses the log-softmax and its backward (the partitioner recomputes the softmax from the saved input, the model's upcast logits)",
        ));
    }
    let source = if loss == Precision::Fp32 {
        "DOMAIN.md §4.1: training logits are upcast to fp32 for the cross-entropy loss"
    } else {
        "the workload's `loss`: the cross-entropy runs on the 16-bit logits"
    };
    if training.loss_chunks <= 1 {
        let per = l.checked_mul(Ratio::int(3)).ok_or(Overflow)?;
        let what = format!("{} log-softmax + its gradient + the logits' gradient", loss.name());
        return Ok((per, what, source));
    }
    let upcast = if l == c { Ratio::ZERO } else { l };
    let forward = add(add(c, l)?, over_n(upcast)?)?;
    let two_l = l.checked_mul(Ratio::int(2)).ok_or(Overflow)?;
    let backward = add(l, over_n(add(two_l, c)?)?)?;
    let per = if forward >= backward { forward } else { backward };
    let what = format!(
        "{} log-softmax kept + one of {} chunks' upcast and gradients",
        loss.name(),
        training.loss_chunks
    );
    Ok((
        per,
        what,
        "torchtune CEWithChunkedOutputLoss: the head's output in chunks, each upcast and its log-softmax kept",
    ))
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
    let (per_score, kept) = kept_per_score(shape, training)?;
    let (layers, which) = match training.checkpointing {
        Checkpointing::None => (kept_layers(placement.layers, training), "layers"),
        // The eager softmax is no kernel torchtitan's op-level policy saves: recomputed too.
        Checkpointing::Selective | Checkpointing::SelectiveOp | Checkpointing::Full => {
            (1, "recomputed layer")
        }
    };
    let heads = shape.heads / placement.tensor;
    let scores = Product::new()
        .times(layers, which)?
        .times_count(batch(training))?
        .times(heads, "heads")?
        .times(training.sequence, "queries")?
        .times(training.sequence, "keys")?
        .bytes_each(per_score, kept)?;
    Ok(vec![
        intermediate(
            "attention scores (eager)",
            scores.finish()?,
            "DOMAIN.md §4.2: eager attention materializes batch × heads × s²",
        ),
        softmax_gradients(batch(training), heads, training.sequence, (training.sequence, "keys"))?,
    ])
}

/// Bytes an eager attention keeps per score for the backward pass, and what they are.
pub(super) fn kept_per_score(
    shape: &Shape,
    training: &Training,
) -> Result<(Ratio, String), Overflow> {
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
    Ok((per_score, kept))
}

/// The backward pass through one eager attention's softmax holds, beside the probabilities it
/// kept, the gradient arriving for them (from the product with V) and the gradient it computes
/// for the scores (`softmax_backward_data`: dS = P ⊙ (dP − Σ dP ⊙ P)), both score-sized and in
/// fp32 (the softmax runs in fp32). `batch` and `keys` come with the names their formula uses.
pub(in crate::eval) fn softmax_gradients(
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
    Ok(intermediate(
        "eager attention backward (softmax gradients)",
        product.finish()?,
        "derived: PyTorch softmax backward (grad_output and grad_input beside the saved output)",
    ))
}

/// What PEFT's LoRA layers keep for the backward pass beyond the base layer's own input
/// (peft `tuners/lora/layer.py`, `Linear.forward`: `x = x.to(lora_A.weight.dtype)`, then
/// `result + lora_B(lora_A(dropout(x))) * scaling`; `lora_dropout` is `nn.Identity` at 0).
/// Per adapted matrix and token, with `c` the compute type's bytes (autocast's 16-bit type, or
/// the activations' own without autocast):
/// - with dropout, its one-byte mask, and the dropped-out input `lora_A` keeps, in the compute
///   type (under autocast the 16-bit copy it makes for the matmul): `1 + c` per input element;
/// - without dropout, `lora_A` keeps its input, a new tensor only when a cast copies it (the
///   adapters' type is not the stream's, so `x.to` copies and autocast copies back; or the
///   stream is fp32 under 16-bit autocast): `c` per input element, else nothing;
/// - `lora_B` keeps `lora_A`'s rank-wide output: `r × c`.
///
/// Adapters on one fused q/k/v projection (`fused_qkv`: litgpt's `LoRAQKVLinear`, PEFT on
/// Qwen's `c_attn`) share its input and its dropout: that input counts once.
///
/// Every layer keeps them without recomputation or with selective recomputation (which
/// recomputes the attention core, not the projections); under full checkpointing only the
/// recomputed layer does.
pub(in crate::eval) fn adapter_inputs(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    let Some((per_token, what)) = adapter_per_token(shape, placement, training, |_| true)? else {
        return Ok(None);
    };
    // As the layer activations: a pipeline stage keeps every micro-batch it has in flight.
    let in_flight = super::in_flight(placement, training);
    let (layers, which) = match training.checkpointing {
        // An adapter's own products shift the op-level policy's count of matrix products; its
        // inputs are counted as kept.
        Checkpointing::None | Checkpointing::Selective | Checkpointing::SelectiveOp => {
            (placement.layers, "layers")
        }
        Checkpointing::Full => (1, "recomputed layer"),
    };
    let mut product = Product::new().times(layers, which)?;
    if in_flight > 1 && training.checkpointing != Checkpointing::Full {
        product = product.times(in_flight, "micro-batches in flight")?;
    }
    let product = product
        .times_count(batch(training))?
        .times(training.sequence, "tokens")?
        .bytes_each(per_token, what)?;
    Ok(Some(intermediate("LoRA saved inputs", product.finish()?, ADAPTER_SOURCE)))
}

pub(super) const ADAPTER_SOURCE: &str = "derived: peft tuners/lora/layer.py Linear.forward (dropout \
     mask and output, cast copies, lora_A's output) under autocast";

/// What the LoRA adapters of one layer whose targets `adapts` accepts keep per token (see
/// [`adapter_inputs`]), and what that is; `None` without adapters or when they keep nothing.
pub(super) fn adapter_per_token(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    adapts: impl Fn(LoraTarget) -> bool,
) -> Result<Option<(Ratio, String)>, Overflow> {
    let Method::Lora { rank, targets, dtype, dropout, dora, fused_qkv, .. } = &training.method
    else {
        return Ok(None);
    };
    let mut inputs = 0u64;
    let mut outputs = 0u64;
    let mut adapted = 0u64;
    let mut qkv_input_counted = false;
    for target in targets.iter().filter(|t| adapts(**t)) {
        // Column-parallel projections see the whole input on every rank; row-parallel ones
        // (o, down) a tensor-parallel slice of it.
        let Some((input, output)) = super::device_matrix(shape, placement, *target) else {
            continue;
        };
        // A fused q/k/v projection's adapters drop out its input once for all of them.
        let qkv = matches!(target, LoraTarget::Q | LoraTarget::K | LoraTarget::V);
        let shared = *fused_qkv && qkv && qkv_input_counted;
        qkv_input_counted |= qkv;
        let input = if shared { 0 } else { input };
        inputs = inputs.checked_add(input).ok_or(Overflow)?;
        outputs = outputs.checked_add(output).ok_or(Overflow)?;
        adapted += 1;
    }
    let compute = training.activations;
    let c = compute.bytes_per_element();
    let stream = stream(training);
    let (per_input, kept) = if !dropout.is_negative() && *dropout > Ratio::ZERO {
        (
            c.checked_add(Ratio::ONE).ok_or(Overflow)?,
            format!("1 B mask + {} dropout output", compute.name()),
        )
    } else if *dtype != stream || stream != compute {
        (c, format!("{} copy of the input", compute.name()))
    } else {
        (Ratio::ZERO, String::new())
    };
    let rank_bytes = Ratio::int(i128::from(adapted.checked_mul(*rank).ok_or(Overflow)?))
        .checked_mul(c)
        .ok_or(Overflow)?;
    // DoRA's two products keep the base output and the adapters' output (see `dora.rs`).
    let dora_outputs = if *dora { outputs.checked_mul(2).ok_or(Overflow)? } else { 0 };
    let dora_bytes = Ratio::int(i128::from(dora_outputs)).checked_mul(c).ok_or(Overflow)?;
    let per_token = Ratio::int(i128::from(inputs))
        .checked_mul(per_input)
        .and_then(|b| b.checked_add(rank_bytes))
        .and_then(|b| b.checked_add(dora_bytes))
        .ok_or(Overflow)?;
    if per_token == Ratio::ZERO {
        return Ok(None);
    }
    let mut what = if kept.is_empty() {
        formula!("rank-{rank} {} outputs", compute.name())
    } else {
        formula!("{kept} over {inputs} input features + rank-{rank} {} outputs", compute.name())
    };
    if *dora {
        what.push_str(&formula!(" + DoRA base and adapter outputs over 2 × {outputs} features"));
    }
    Ok(Some((per_token, what)))
}
