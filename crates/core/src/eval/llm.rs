//! Transformer language models: parameter counts, weights per device, KV cache (and what an
//! encoder-decoder holds beside it through a generation) and the inference transient peak.
//! Formulas and their sources: DOMAIN.md §2.1 (parameters), §3.1-3.2 (KV cache, tensor
//! parallel), §4 (logits and intermediates), §1.7 (tensors that stay unquantized).

use super::Placement;
use super::calc::{Overflow, Product, div_ceil, formula};
use super::params;
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::Bytes;
use crate::hir::{Attention, AttentionKind, Logits, Mlp, Shape};
use crate::precision::Precision;
use crate::quant::{Matrix, WeightFormat};
use crate::ratio::Ratio;

/// The weight components of a device under a weight format: the layer matrices (per
/// precision when a preset mixes them), norms and biases, the embedding, the output head and the
/// final norm. Quantizers leave the embedding, head and norms at 16-bit (DOMAIN.md §1.7), except
/// llama.cpp presets, which have their own rules ([`crate::quant`]).
pub(crate) fn weights(
    shape: &Shape,
    placement: &Placement,
    format: WeightFormat,
    category: Category,
    label: &str,
) -> Result<Vec<Component>, Overflow> {
    weights_keeping(shape, placement, format, None, category, label)
}

/// [`weights`], with the embedding, output head, norms and biases of a quantized format held in
/// `unquantized` instead of the format's own choice (a training framework's cast).
pub(crate) fn weights_keeping(
    shape: &Shape,
    placement: &Placement,
    format: WeightFormat,
    unquantized: Option<Precision>,
    category: Category,
    label: &str,
) -> Result<Vec<Component>, Overflow> {
    let gqa = shape.heads / shape.kv_heads.max(1);
    let layers = placement.first_layer..placement.first_layer + placement.layers;
    let mut by_precision = by_precision(
        shape,
        format,
        layers.map(|layer| (layer, params::held_matrices(shape, layer, placement))),
    )?;
    let kept = kept_in_fp32(shape, placement, format, gqa, &mut by_precision)?;
    // One entry per precision, so an unstable sort gives the same order.
    by_precision.sort_unstable();
    let mut components = Vec::new();
    let (total, terms) = precision_sum(&by_precision)?;
    if total.0 > 0 {
        let formula = if let [(precision, params)] = by_precision.as_slice() {
            // One precision: show the per-layer structure.
            let per_layer = params / placement.layers.max(1);
            let exact = per_layer * placement.layers.max(1) == *params;
            let encoder = shape.encoder_layers_in(placement.first_layer, placement.layers);
            let product = if shape.encoder.is_some() {
                // Encoder and decoder layers differ (cross-attention): no per-layer count.
                let decoder = placement.layers - encoder;
                Product::new().times(
                    *params,
                    formula!("params ({encoder} encoder + {decoder} decoder layers)"),
                )?
            } else if exact {
                Product::new().times(placement.layers, "layers")?.times(per_layer, "params")?
            } else {
                Product::new().times(*params, "params")?
            };
            product.bytes_each(precision.bytes_per_element(), precision.name())?.finish()?.1
        } else {
            formula!("{} = {total}", terms.join(" + "))
        };
        components.push(component(format!("{label}: layer matrices"), category, total, formula));
    }
    if let Some(kept) = kept {
        components.push(Component {
            source: Some(
                "transformers `_keep_in_fp32_modules` (T5: `wo`): kept in fp32 when the model \
                 loads in fp16 or through a bitsandbytes quantizer"
                    .into(),
            ),
            ..component(format!("{label}: layers kept in fp32"), category, kept.0, kept.1)
        });
    }
    let small = unquantized.unwrap_or(format.small());
    let (small_params, per_layer) =
        params::layers_small(shape, placement.first_layer, placement.layers, placement.tensor);
    let small_product = match per_layer {
        Some(per_layer) => Product::new()
            .times(placement.layers, "layers")?
            .times(per_layer, "norm and bias params")?,
        // Encoder and decoder layers differ (cross-attention norms, position tables).
        None => Product::new().times(small_params, "norm, bias and position params")?,
    };
    let (bytes, formula) =
        small_product.bytes_each(small.bytes_per_element(), small.name())?.finish()?;
    if bytes.0 > 0 {
        components.push(component(format!("{label}: norms and biases"), category, bytes, formula));
    }
    let ends = params::ends(shape, placement);
    for (name, count, what, precision) in [
        (
            "embedding",
            ends.embedding,
            "vocab × hidden params",
            unquantized.unwrap_or(format.embedding(shape.tied_embeddings)),
        ),
        ("output head", ends.head, "vocab × hidden params", unquantized.unwrap_or(format.output())),
        ("final norm", ends.final_norm, "params", small),
    ] {
        if count == 0 {
            continue;
        }
        let (bytes, formula) = Product::new()
            .times(count, what)?
            .bytes_each(precision.bytes_per_element(), precision.name())?
            .finish()?;
        components.push(component(format!("{label}: {name}"), category, bytes, formula));
    }
    Ok(components)
}

/// The cos and sin tables of rotary position embeddings that transformers' modelling code built
/// in every attention layer at load, `positions` rows (the config's `max_position_embeddings`)
/// of `head_dim` each, in the type the model loads in (`torch.get_default_dtype()` while
/// `from_pretrained` builds it): `LlamaRotaryEmbedding` from 4.31 (4.38-4.39 as `_cos_cached`
/// kept for compatibility) and `MistralRotaryEmbedding`, `Qwen2RotaryEmbedding` and their copies
/// `_set_cos_sin_cache`, registered as buffers that move to the device with their layer. Later
/// versions compute cos and sin for the step's positions only (one rotary module per model).
pub(crate) fn rope_tables(
    shape: &Shape,
    placement: &Placement,
    positions: u64,
    precision: Precision,
) -> Result<Component, Overflow> {
    let (bytes, formula) = Product::new()
        .times(placement.layers, "layers")?
        .times(2, "tables (cos, sin)")?
        .times(positions, "positions")?
        .times(shape.head_dim, "head_dim")?
        .bytes_each(precision.bytes_per_element(), precision.name())?
        .finish()?;
    Ok(Component {
        source: Some(
            "transformers `LlamaRotaryEmbedding` (4.31-4.39), `MistralRotaryEmbedding` and \
             `Qwen2RotaryEmbedding` `_set_cos_sin_cache(max_position_embeddings)`: one per \
             attention layer, buffers of the load dtype"
                .into(),
        ),
        ..component("rotary tables (per layer)".to_string(), Category::Persistent, bytes, formula)
    })
}

/// The parameters of `matrices` (each layer's, with its index) per precision under `format`, in
/// the order the precisions first appear.
pub(crate) fn by_precision(
    shape: &Shape,
    format: WeightFormat,
    matrices: impl Iterator<Item = (u64, Vec<(Matrix, u64)>)>,
) -> Result<Vec<(Precision, u64)>, Overflow> {
    let gqa = shape.heads / shape.kv_heads.max(1);
    let mut by_precision: Vec<(Precision, u64)> = Vec::new();
    for (layer, layer_matrices) in matrices {
        for (matrix, params) in layer_matrices {
            let precision = format.matrix(matrix, layer, shape.layers, gqa);
            match by_precision.iter_mut().find(|(p, _)| *p == precision) {
                Some((_, total)) => *total = total.checked_add(params).ok_or(Overflow)?,
                None => by_precision.push((precision, params)),
            }
        }
    }
    Ok(by_precision)
}

/// The bytes of parameters counted per precision, and each precision's product as a term.
pub(crate) fn precision_sum(
    by_precision: &[(Precision, u64)],
) -> Result<(Bytes, Vec<String>), Overflow> {
    let mut total = Bytes::ZERO;
    let mut terms = Vec::new();
    for (precision, params) in by_precision {
        let product = Product::new()
            .times(*params, "params")?
            .bytes_each(precision.bytes_per_element(), precision.name())?;
        total = super::calc::add(total, product.value()?)?;
        terms.push(product.terms());
    }
    Ok((total, terms))
}

/// This device's share of the model's `keep_in_fp32` parameters, taken out of the layer
/// matrices' count at their format's precision, and their bytes in fp32. `None` when the model
/// has none or the format converts them like the rest ([`Precision::keeps_fp32_modules`]): a
/// bf16 or fp32 load converts every layer alike, and other checkpoints' formats are as stored.
fn kept_in_fp32(
    shape: &Shape,
    placement: &Placement,
    format: WeightFormat,
    gqa: u64,
    by_precision: &mut [(Precision, u64)],
) -> Result<Option<(Bytes, String)>, Overflow> {
    let precision = format.matrix(Matrix::Down, placement.first_layer, shape.layers, gqa);
    if shape.keep_in_fp32 == 0 || !precision.keeps_fp32_modules() {
        return Ok(None);
    }
    let Some((_, params)) = by_precision.iter_mut().find(|(p, _)| *p == precision) else {
        return Ok(None);
    };
    // Spread evenly over the layers, and split by tensor parallelism as the layer's matrices are.
    let these_layers = u128::from(shape.keep_in_fp32) * u128::from(placement.layers)
        / u128::from(shape.layers.max(1));
    let here = u64::try_from(these_layers).map_err(|_| Overflow)?.div_ceil(placement.tensor.max(1));
    let here = here.min(*params);
    *params -= here;
    let (bytes, formula) = Product::new()
        .times(here, "params")?
        .bytes_each(Precision::Fp32.bytes_per_element(), Precision::Fp32.name())?
        .finish()?;
    Ok(Some((bytes, formula)))
}

fn component(name: String, category: Category, bytes: Bytes, formula: String) -> Component {
    Component {
        held_by: HeldBy::Tensors,
        name: name.into(),
        category,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: None,
    }
}

/// One cached key (or value, or MLA latent) per token and layer on this device: `kv_heads ×
/// head_dim` with `ceil(kv_heads / tensor)` heads, or MLA's `kv_lora_rank + rope_dim`.
pub(crate) fn kv_width(
    shape: &Shape,
    placement: &Placement,
    product: Product,
) -> Result<Product, Overflow> {
    match &shape.attention {
        AttentionKind::Standard => product
            .times(div_ceil(shape.kv_heads, placement.tensor), "kv_heads")?
            .times(shape.head_dim, "head_dim"),
        AttentionKind::Mla(mla) => {
            product.times(mla.kv_lora_rank + mla.rope_dim, "(kv_lora_rank + rope_dim)")
        }
    }
}

/// KV cache per device. Standard attention: `2 × layers × kv_heads × head_dim × tokens × bytes`
/// with `ceil(kv_heads / tensor)` heads per device (replicated, never below one, when tensor >
/// kv_heads: vLLM `get_num_kv_heads`). MLA: one latent of `kv_lora_rank + rope_dim` per token
/// per layer, no factor 2 and not sharded by tensor parallelism (vLLM `MLAAttentionSpec`).
/// Sliding-window layers keep at most the window. `block` rounds each sequence up to whole
/// pages of that many tokens (vLLM's paged cache). DOMAIN.md §3.
pub(crate) fn kv_cache(
    shape: &Shape,
    placement: &Placement,
    precision: Precision,
    context: u64,
    sessions: u64,
    block: u64,
) -> Result<Component, Overflow> {
    let paged = |tokens: u64| div_ceil(tokens, block) * block;
    let per_token = |product: Product| kv_width(shape, placement, product);
    let factor = if matches!(shape.attention, AttentionKind::Standard) { 2 } else { 1 };
    let layers = placement.first_layer..placement.first_layer + placement.layers;
    // An encoder layer caches nothing: the decoder's layers hold the cache.
    let cached =
        placement.layers - shape.encoder_layers_in(placement.first_layer, placement.layers);
    let local =
        layers.clone().filter(|&l| shape.is_local(l) && !shape.is_encoder_layer(l)).count() as u64;
    let global = cached - local;
    let mut total = Bytes::ZERO;
    let mut terms = Vec::new();
    let groups = [
        (global, paged(context), "layers"),
        (
            local,
            paged(context.min(shape.window.as_ref().map_or(context, |w| w.tokens))),
            "sliding-window layers",
        ),
    ];
    for (count, tokens, what) in groups {
        if count == 0 {
            continue;
        }
        let mut product = Product::new();
        if factor == 2 {
            product = product.times(2, "(K and V)")?;
        }
        let product = per_token(product.times(count, what)?)?
            .times(tokens, "tokens")?
            .times(sessions, "sessions")?
            .bytes_each(precision.bytes_per_element(), precision.name())?;
        total = super::calc::add(total, product.value()?)?;
        terms.push(product.terms());
    }
    // A scale and zero point per token and KV head, for K and for V: fp32 for `int8-token`,
    // 16-bit for LMDeploy's.
    let params = match precision {
        Precision::Int8Token => Some((8, "fp32 scale + zero")),
        Precision::Lmdeploy { .. } => Some((4, "16-bit scale + zero")),
        _ => None,
    };
    if let (Some((bytes, what)), AttentionKind::Standard) = (params, &shape.attention) {
        let tokens = paged(context);
        let scales = Product::new()
            .times(2, "(K and V)")?
            .times(cached, "layers")?
            .times(div_ceil(shape.kv_heads, placement.tensor), "kv_heads")?
            .times(tokens, "tokens")?
            .times(sessions, "sessions")?
            .bytes_each(Ratio::int(bytes), what)?;
        total = super::calc::add(total, scales.value()?)?;
        terms.push(scales.terms());
    }
    let formula = formula!("{} = {total}", terms.join(" + "));
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "KV cache".into(),
        category: Category::Cache,
        bytes: total,
        provenance: Provenance::Formula,
        formula,
        source: Some("DOMAIN.md §3: vLLM AttentionSpec / MLAAttentionSpec page sizes; heads per GPU as vLLM get_num_kv_heads".into()),
    })
}

/// What an encoder-decoder model holds for the whole generation besides its decoder's cache:
/// every decoder layer's cross-attention keys and values, computed once from the encoder's
/// output at the first decoder step (`2 × decoder layers × kv_heads × head_dim × source tokens`,
/// transformers `EncoderDecoderCache.cross_attention_cache`, filled by `T5Attention` when
/// `is_cross_attention` and not yet `is_updated`), and the encoder's output itself, which
/// `generate` keeps in its `model_kwargs` (`encoder_outputs`) until the end. Nothing for a
/// decoder-only model, or on a device without decoder layers (a pipeline stage of the encoder).
pub(crate) fn encoder_decoder_held(
    shape: &Shape,
    placement: &Placement,
    cache: Precision,
    activations: Precision,
    source: u64,
    sessions: u64,
) -> Result<Vec<Component>, Overflow> {
    let decoder =
        placement.layers - shape.encoder_layers_in(placement.first_layer, placement.layers);
    if shape.encoder.is_none() || decoder == 0 {
        return Ok(Vec::new());
    }
    let mut components = Vec::new();
    let product = Product::new().times(2, "(K and V)")?.times(decoder, "decoder layers")?;
    let (bytes, formula) = kv_width(shape, placement, product)?
        .times(source, "source tokens")?
        .times(sessions, "sessions")?
        .bytes_each(cache.bytes_per_element(), cache.name())?
        .finish()?;
    components.push(Component {
        held_by: HeldBy::Tensors,
        name: "cross-attention K/V (from the encoder output)".into(),
        category: Category::Cache,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some("transformers modeling_t5.py T5Attention (cross-attention K/V computed once, kept in EncoderDecoderCache)".into()),
    });
    // Only the first decoder step reads it (to fill the cross-attention cache), but `generate`
    // passes it to every step.
    let (bytes, formula) = Product::new()
        .times(source, "source tokens")?
        .times(sessions, "sessions")?
        .times(shape.hidden, "hidden")?
        .bytes_each(activations.bytes_per_element(), activations.name())?
        .finish()?;
    components.push(Component {
        held_by: HeldBy::Tensors,
        name: "encoder output (kept for generation)".into(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some("transformers GenerationMixin: encoder_outputs stay in model_kwargs for every decoder step".into()),
    });
    Ok(components)
}

/// The MLP width a token passes through: the dense `ffn`, or in MoE layers its active experts
/// and the shared ones, whichever is wider.
fn mlp_width(shape: &Shape) -> u64 {
    match &shape.moe {
        Some(moe) => {
            let moe_width = moe.active * moe.expert_ffn + moe.shared * moe.shared_ffn;
            if moe.dense_layers > 0 { moe_width.max(shape.ffn) } else { moe_width }
        }
        None => shape.ffn,
    }
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
    /// What the step does with the head's output.
    pub head: HeadUse,
    /// Bytes per weight of the copies a quantized layer makes of its whole matrix to multiply
    /// it ([`dequantized_copies`]); `None` when its kernel reads the packed weight.
    pub dequantized: Option<(Ratio, String)>,
    /// llama.cpp's compute graph (ggml) rather than PyTorch's: eager scores kept once in F32,
    /// and the KQ mask, a graph input, beside every layer ([`kq_mask`]).
    pub ggml: bool,
    /// The model runs as a transformers model (`runtime pytorch`). Its forward keeps
    /// `inputs_embeds` (on the first stage) and its layer loop the layer's input referenced while
    /// a layer runs, beside the residual and normed input; other runtimes' layers take the stream
    /// in place. And split over GPUs by accelerate (`device_map`), it returns its outputs on the
    /// the fp32 logits there at the end of each forward pass, after the first GPU's layers ran.
    pub transformers: bool,
    /// The weights this device copies from host memory to run llama.cpp's host-held products
    /// (partial offload, [`super::offload`]).
    pub host_copies: super::offload::HostCopies,
}

/// What a forward step does with the vocabulary head's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadUse {
    /// Logits for the sampled rows (or every row under `logits all`), upcast to fp32.
    Sample,
    /// A sampler that applies top-k and top-p by sorting every row's vocabulary, as vLLM's
    /// profile run does ([`SORTING_SAMPLER_BYTES`]).
    SortingSampler,
    /// The log-probabilities of every prompt token, taken in place: TGI's warm-up (its
    /// router's warm-up requests set `prefill_logprobs: true`, and `flash_causal_lm.py` runs
    /// `torch.log_softmax(out, -1, out=out)` on the head's output for every prefill token, in
    /// the activations' type).
    PromptLogprobs,
}

/// ggml's KQ mask: one row of `key_length` cells (every cell of llama.cpp's cache, which its
/// worst-case graph attends over) per token of the batch, the tokens padded to
/// `GGML_KQ_MASK_PAD` (32), in F32 (`build_inp_KQ_mask`); under flash attention the layers read
/// its F16 cast, and the F32 input, whose one consumer is that cast, is freed by ggml-alloc
/// before the first layer. It is alive through every layer and freed before the output layer.
fn kq_mask(step: &Step) -> Result<Product, Overflow> {
    let (bytes, what) = match step.attention {
        Attention::Eager => (4, "F32"),
        Attention::Fused => (2, "F16 cast"),
    };
    Product::new()
        .times(step.key_length, "cells")?
        .times(step.tokens.div_ceil(32).checked_mul(32).ok_or(Overflow)?, "tokens padded to 32")?
        .bytes_each(Ratio::int(bytes), what)
}

/// What a bitsandbytes 4-bit layer holds of its weight while it multiplies a step of more than
/// one token: `MatMul4Bit` dequantizes the whole matrix into the type it was loaded in
/// (`dequantize_4bit`, `quant_state.dtype`) and casts that to its input's type, which
/// `Linear4bit` first cast to `compute`; only a single row takes the `gemv_4bit` kernel, which
/// reads the packed weight (bitsandbytes `matmul_4bit`). LLM.int8, GPTQ and AWQ inference
/// kernels read their packed weights.
pub(crate) fn dequantized_copies(
    weights: crate::quant::WeightFormat,
    loaded: Precision,
    compute: Precision,
    tokens: u64,
) -> Option<(Ratio, String)> {
    let crate::quant::WeightFormat::Uniform(stored) = weights else { return None };
    if !stored.is_bitsandbytes_4bit() || tokens < 2 {
        return None;
    }
    let dequantized = loaded.bytes_per_element();
    if compute == loaded {
        return Some((dequantized, format!("dequantized {}", loaded.name())));
    }
    let both = dequantized.checked_add(compute.bytes_per_element())?;
    Some((both, format!("dequantized {} + its {} cast", loaded.name(), compute.name())))
}

/// The widest matrix one layer multiplies, per tensor-parallel rank: an MLP projection (a MoE
/// layer's experts are multiplied one at a time) or the query projection.
fn widest_matrix(shape: &Shape, tensor: u64) -> u64 {
    let mlp = match &shape.moe {
        Some(moe) => {
            let widest = moe.expert_ffn.max(moe.shared_ffn);
            if moe.dense_layers > 0 { widest.max(shape.ffn) } else { widest }
        }
        None => shape.ffn,
    };
    div_ceil(mlp.max(shape.heads * shape.head_dim), tensor)
}

/// Bytes per vocabulary entry of one sampled row while a sorting sampler sorts it, besides the
/// logits in the model's precision that the caller still holds: the fp32 copy the sampler
/// works on (4), the sort's outputs, values (4) and int64 indices (8), the int64 index input
/// PyTorch fills for a segmented sort (8, `Sort.cu` `segmented_sort_pairs`), and CUB's
/// alternate key and value buffers (4 + 8: `DeviceSegmentedRadixSort::SortPairs` without
/// double buffers allocates them in its temporary storage). The sort is the sampler's peak:
/// afterwards the masks, softmax and cumulative sum (4 + 4 + 1 + 1 + 4) are fewer bytes.
///
/// vLLM samples its profile run's rows with `top_p 0.99, top_k vocab - 1` in V0
/// (`ModelRunner.profile_run`, "to reflect the accurate memory usage") and with `top_p 0.9,
/// top_k vocab - 1` in V1 (`GPUModelRunner._dummy_sampler_run`), both through
/// `logits.sort(dim=-1)`. (The newer V1 runner notes that its dummy sampler "may skip top_k,
/// top_p", which would take this peak out of its profile but not out of serving.)
pub(crate) const SORTING_SAMPLER_BYTES: u64 = 4 + 4 + 8 + 8 + 4 + 8;

/// The sampler's peak over the hidden states: `rows` rows of logits in the model's precision
/// and [`SORTING_SAMPLER_BYTES`] per entry while they are sorted. After the last layer only its
/// output is alive, not the residual beside it, so one of the two hidden-state tensors
/// (`hidden_bytes` / 2) is taken off.
fn sorting_sampler(
    rows: u64,
    shape: &Shape,
    step: &Step,
    hidden_bytes: Bytes,
) -> Result<(Bytes, String), Overflow> {
    let per_entry = step
        .precision
        .bytes_per_element()
        .checked_add(Ratio::int(i128::from(SORTING_SAMPLER_BYTES)))
        .ok_or(Overflow)?;
    let sampler = Product::new()
        .times(rows, "rows")?
        .times(shape.vocab, "vocab")?
        .bytes_each(per_entry, formula!("logits {} + sort", step.precision.name()))?;
    let residual = Bytes(hidden_bytes.0 / 2);
    let bytes = Bytes(sampler.value()?.0.saturating_sub(residual.0));
    let formula = formula!("sampler {} − {residual} (residual freed)", sampler.terms());
    Ok((bytes, formula))
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
    let hidden_tensors = match (step.transformers, placement.stage) {
        (false, _) => (2, "(residual and normed input)"),
        (true, 1..) => (3, "(the layer's input the loop keeps, residual and normed input)"),
        (true, 0) => (
            4,
            "(the input embeddings and the layer's input the forward keeps, residual and normed input)",
        ),
    };
    let (hidden_bytes, hidden_formula) = Product::new()
        .times(hidden_tensors.0, hidden_tensors.1)?
        .times(step.tokens, "tokens")?
        .times(shape.hidden, "hidden")?
        .bytes_each(elem, name.clone())?
        .finish()?;
    let heads = shape.heads / t;
    let kv_heads = div_ceil(shape.kv_heads, t);
    let qkv = Product::new()
        .times(step.tokens, "tokens")?
        .times(2 * heads + 2 * kv_heads, "(q, k, v, out) heads")?
        .times(shape.head_dim, "head_dim")?
        .bytes_each(elem, name.clone())?;
    let mut attention_bytes = qkv.value()?;
    let mut attention_formula = qkv.terms();
    if step.attention == Attention::Eager {
        // Scores in the model's precision plus their fp32 softmax (transformers'
        // eager_attention_forward), for every query against every key: DOMAIN.md §4.2. ggml
        // computes KQ in F32 and ggml-alloc writes the softmax over its input
        // (`ggml_op_can_inplace` lists GGML_OP_SOFT_MAX): one F32 matrix.
        let (per_score, what) = if step.ggml {
            (Ratio::int(4), "F32 scores, softmax in place")
        } else {
            let per_score = elem
                .checked_mul(Ratio::int(2))
                .and_then(|x| x.checked_add(Ratio::int(4)))
                .ok_or(Overflow)?;
            (per_score, "2 scores + fp32 softmax")
        };
        let scores = Product::new()
            .times(step.tokens, "queries")?
            .times(step.key_length, "keys")?
            .times(heads, "heads")?
            .bytes_each(per_score, what)?;
        attention_bytes = super::calc::add(attention_bytes, scores.value()?)?;
        attention_formula = formula!("{attention_formula} + {}", scores.terms());
    }
    // What a token's MLP holds at once: the activated gate, the up projection and their
    // product; a fused gate and up projection keeps its whole output (both halves) while the
    // activation and the product are made; a plain MLP its up projection and the activation.
    let (mlp_tensors, mlp_what) = match shape.mlp {
        Mlp::Gated => (3, "(gate, up, product)"),
        Mlp::GatedFused => (4, "(fused gate and up, activation, product)"),
        Mlp::Plain => (2, "(up, activation)"),
    };
    let mlp = Product::new()
        .times(mlp_tensors, mlp_what)?
        .times(step.tokens, "tokens")?
        .times(div_ceil(mlp_width(shape), t), "ffn (per token)")?
        .bytes_each(elem, name.clone())?;
    let mut mlp_bytes = mlp.value()?;
    let mut mlp_formula = mlp.terms();
    if let Some((per_weight, what)) = &step.dequantized {
        // The widest matrix's copies beside the MLP's outputs.
        let copies = Product::new()
            .times(shape.hidden, "hidden")?
            .times(widest_matrix(shape, t), "widest matrix (per rank)")?
            .bytes_each(*per_weight, what.clone())?;
        mlp_bytes = super::calc::add(mlp_bytes, copies.value()?)?;
        mlp_formula = formula!("{mlp_formula} + {}", copies.terms());
    }
    if let Some((copy, terms)) = &step.host_copies.layer {
        // A host-held layer's product runs here on its weight's copy, one at a time.
        mlp_bytes = super::calc::add(mlp_bytes, *copy)?;
        mlp_formula = formula!("{mlp_formula} + host weight copied {terms}");
    }
    if step.ggml {
        // The mask sits beside each layer's attention and MLP, not beside the logits.
        let mask = kq_mask(step)?;
        let bytes = mask.value()?;
        attention_bytes = super::calc::add(attention_bytes, bytes)?;
        mlp_bytes = super::calc::add(mlp_bytes, bytes)?;
        attention_formula = formula!("{attention_formula} + KQ mask {}", mask.terms());
        mlp_formula = formula!("{mlp_formula} + KQ mask {}", mask.terms());
    }
    // Encoders with a small task head compute no vocabulary logits.
    let last = placement.stage + 1 == placement.stages && shape.output == crate::hir::Output::Lm;
    let logit_rows = match step.logits {
        Logits::Last if step.head != HeadUse::PromptLogprobs => step.sequences.min(step.tokens),
        Logits::Last | Logits::All => step.tokens,
    };
    // A head in host memory runs here on its copy when the batch is large enough (only a
    // vocabulary head has one: `HostCopies::of`).
    let head_copy = step.host_copies.head.as_ref();
    let rows = if last || head_copy.is_some() { logit_rows } else { 0 };
    let (logits_bytes, logits_formula) = if step.head == HeadUse::SortingSampler {
        sorting_sampler(rows, shape, step, hidden_bytes)?
    } else if step.head == HeadUse::PromptLogprobs {
        let logits = Product::new()
            .times(rows, "rows (every prompt token)")?
            .times(shape.vocab, "vocab")?
            .bytes_each(elem, formula!("{name}, log-softmaxed in place"))?;
        (logits.value()?, formula!("prompt log-probabilities {}", logits.terms()))
    } else {
        // Logits are upcast to fp32 for sampling or the loss (DOMAIN.md §4.1): the head's
        // output in the activations' type is alive beside its fp32 copy while `.float()` makes
        // it (transformers' `logits = logits.float()`). llama.cpp's graph writes fp32 logits.
        let upcast_from = if step.ggml || step.precision == Precision::Fp32 {
            None
        } else {
            Some(step.precision)
        };
        let (per_logit, what) = match upcast_from {
            Some(p) => (
                Ratio::int(4).checked_add(p.bytes_per_element()).ok_or(Overflow)?,
                formula!("fp32 + the {} output it is cast from", p.name()),
            ),
            None => (Ratio::int(4), "fp32".to_string()),
        };
        let logits = Product::new()
            .times(rows, "rows")?
            .times(shape.vocab, "vocab")?
            .bytes_each(per_logit, what)?;
        match head_copy {
            Some((copy, terms)) => (
                super::calc::add(logits.value()?, *copy)?,
                formula!("logits {} + host head copied {terms}", logits.terms()),
            ),
            None => (logits.value()?, formula!("logits {}", logits.terms())),
        }
    };
    // The first of several pipeline stages gets the logits back, when its layers are done.
    let returned = if step.transformers && placement.stage == 0 && placement.stages > 1 {
        let copy = Product::new()
            .times(logit_rows, "rows")?
            .times(shape.vocab, "vocab")?
            .bytes_each(Ratio::int(4), "fp32")?;
        Some((copy.value()?, copy.terms()))
    } else {
        None
    };
    let (logits_bytes, logits_formula) = match returned {
        Some((bytes, terms)) if rows == 0 => {
            (bytes, formula!("logits returned to the first GPU {terms}"))
        }
        _ => (logits_bytes, logits_formula),
    };
    let peak = attention_bytes.max(mlp_bytes).max(logits_bytes);
    let formula = formula!(
        "max(attention {} = {}; MLP {} = {}; {} = {}) = {peak}",
        attention_formula,
        attention_bytes.human(),
        mlp_formula,
        mlp_bytes.human(),
        logits_formula,
        logits_bytes.human(),
    );
    Ok(vec![
        Component {
            held_by: HeldBy::Tensors,
            name: "hidden states".into(),
            category: Category::Intermediate,
            bytes: hidden_bytes,
            provenance: Provenance::Formula,
            formula: hidden_formula,
            source: None,
        },
        Component {
            held_by: HeldBy::Tensors,
            name: "forward-step peak (one layer or logits)".into(),
            category: Category::Intermediate,
            bytes: peak,
            provenance: Provenance::Formula,
            formula,
            source: Some(step_source(step).into()),
        },
    ])
}

/// Where a forward step's figures come from.
fn step_source(step: &Step) -> &'static str {
    if step.host_copies.layer.is_some() || step.host_copies.head.is_some() {
        return "DOMAIN.md §4.1-4.3: activations are freed layer by layer; llama.cpp's scheduler runs a host-held layer's products on the device for a batch of 32 tokens or more, each on a copy of its weight (ggml_backend_sched op offload, CUDA offload_op)";
    }
    match (step.head == HeadUse::SortingSampler, &step.dequantized) {
        (true, _) => {
            "DOMAIN.md §4.1-4.3: activations are freed layer by layer; vLLM's profile run samples its rows with top-k and top-p (V0 ModelRunner.profile_run, V1 _dummy_sampler_run), sorting each row (PyTorch Sort.cu segmented_sort_pairs over CUB)"
        }
        (false, Some(_)) => {
            "DOMAIN.md §4.1-4.3: activations are freed layer by layer; logits upcast to fp32; bitsandbytes MatMul4Bit dequantizes a whole matrix for more than one row (dequantize_4bit, then a cast to the compute type)"
        }
        (false, None) => {
            "DOMAIN.md §4.1-4.3: activations are freed layer by layer; logits upcast to fp32"
        }
    }
}
