//! Training a diffusion pipeline's denoiser: the frozen text encoders and VAE that are loaded,
//! the denoiser's weights, its training state (full fine-tuning or LoRA, through the language
//! model path's own functions in `training/`) and the activations one step stores, from the
//! denoiser's block structure.
//!
//! The step encodes the images and prompts without gradients before the denoiser runs; their
//! transients are freed before its forward pass, so the step's transient peak is the larger of
//! the VAE encode's (`vae_encode.rs`, in the VAE's precision) and the denoiser's, never their
//! sum; the text encoders' at 77 or 512 tokens are small beside either and not counted. The
//! denoiser runs once per step on its batch (no guidance batch). Text encoders and a VAE left
//! out of the `diffusion` section are not loaded (latents and embeddings computed beforehand).
//!
//! Activations [derived from the block structure; DOMAIN.md §5.3 for transformer blocks]:
//! - transformer (DiT/MMDiT): each block stores what a pre-norm transformer layer stores
//!   (`training::activations`, Korthikanti et al. adapted), with multi-head attention and a
//!   plain GELU MLP of 4 × hidden (DiT `mlp_ratio` 4; FLUX.1 `mlp_ratio` 4.0), over the latent
//!   patches (2 × 2 after the VAE's 8× downsampling) and the text tokens;
//! - UNet: per level, what its blocks store (`unet_activations.rs`).

use super::allocator::CachingAllocator;
use super::calc::{self, Overflow, Product, formula};
use super::controlnet_training;
use super::training::{self as llm_training, AdapterKind, Adapters};
use super::unet_activations::{self, Halves, Weights};
use super::vae_encode::{self, EncoderShape};
use super::{Placement, diffusion, dit_block};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::{Bytes, group_thousands};
use crate::hir::{
    AttentionKind, Biases, BlockLayout, Checkpointing, DenoiserBlocks, Diffusion, LoraTarget,
    Method, Mlp, Norm, Output, Shape, Training,
};
use crate::ratio::Ratio;

/// A DiT block's MLP width over its hidden size (DiT, Peebles and Xie 2023, `mlp_ratio=4.0`;
/// FLUX.1 `mlp_ratio` 4.0 in its published configuration).
const DIT_MLP_RATIO: u64 = 4;
/// A DiT block's feed-forward width: as declared, else `DIT_MLP_RATIO` × hidden.
fn dit_ffn(diffusion: &Diffusion) -> u64 {
    diffusion.denoiser.ffn.unwrap_or(DIT_MLP_RATIO * diffusion.denoiser.hidden)
}

/// diffusers' `BasicTransformerBlock` feed-forward: `FeedForward(dim, mult=4)`, GEGLU.
const UNET_FF_MULT: u64 = 4;

/// `data`: the data-parallel ranks, over which `sharding` divides the trained states.
pub(crate) fn components(
    program: &crate::hir::Layered<'_>,
    diffusion: &Diffusion,
    training: &Training,
    data: u64,
) -> Result<Vec<Component>, Overflow> {
    let mut components = Vec::new();
    let trained = training.text_encoders == crate::hir::TextEncoders::Trained;
    let encoder_role = if trained { "text encoder" } else { "frozen text encoder" };
    for (encoder, format) in diffusion.text_encoders.iter().zip(&diffusion.text_encoder_weights) {
        components.extend(diffusion::weights(program, diffusion, encoder, *format, encoder_role)?);
    }
    if let Some(vae) = &diffusion.vae {
        components.extend(diffusion::weights(
            program,
            diffusion,
            vae,
            diffusion.vae_weights,
            "frozen VAE",
        )?);
    }
    let denoiser = &diffusion.denoiser;
    // Beside a trained ControlNet, `method full` is the ControlNet's: the denoiser is frozen.
    let control = diffusion.controlnet.as_ref();
    let role =
        if training.method.is_full() && control.is_none() { "denoiser" } else { "frozen denoiser" };
    let gathered = if super::denoiser_gather::gathers(training, data) {
        super::denoiser_gather::weights(program, diffusion, training, data, role)?
    } else {
        None
    };
    match gathered {
        Some(gathered) => components.extend(gathered),
        None => components.extend(diffusion::denoiser_weights(program, diffusion, role)?),
    }
    let (Some(params), Some(blocks)) =
        (diffusion::parameter_count(program, &denoiser.model), &denoiser.blocks)
    else {
        return Ok(components);
    };
    let mut phase = llm_training::StepPhase::default();
    let trained = if let Some(control) = control {
        // The frozen denoiser keeps its own type; autocast copies an fp32 one.
        let precision = denoiser.weights.matrix(crate::quant::Matrix::Up, 0, 1, 1);
        let frozen = Training { weights: precision, ..training.clone() };
        components.extend(llm_training::autocast_copies(params, &frozen)?);
        let (states, trained) =
            controlnet_training::states(program, diffusion, control, training, data, &mut phase)?
                .unwrap_or_default();
        components.extend(states);
        trained
    } else {
        components.extend(llm_training::autocast_copies(params, training)?);
        let (states, trained) =
            denoiser_states(diffusion, blocks, params, training, data, &mut phase)?;
        components.extend(states);
        trained
    };
    // DeepSpeed's reduce buckets and, while gradients accumulate, the next micro-batch's
    // partition, as for a language model.
    components.extend(llm_training::buckets(training, data)?);
    components.extend(llm_training::accumulating_partition(trained, training, data)?);
    components.extend(text_encoder_states(program, diffusion, training, data, &mut phase)?);
    components.extend(match control {
        Some(control) => {
            let levels = unet_activations::levels(diffusion, blocks)?;
            controlnet_training::activations(diffusion, control, &levels, training)?
        }
        None => activations(diffusion, blocks, training)?,
    });
    components.extend(llm_training::optimizer_step(&components, &phase)?);
    components.extend(vae_encode(diffusion, &components)?);
    Ok(components)
}

/// The master copy, gradients and optimizer state of `params` trained in full (a denoiser, or a
/// ControlNet with `prefix` "ControlNet "), every gradient held to the step: a step in the
/// backward pass is refused for a pipeline by the checker.
pub(super) fn trained_in_full(
    prefix: &str,
    params: u64,
    training: &Training,
    data: u64,
    phase: &mut llm_training::StepPhase,
) -> Result<Vec<Component>, Overflow> {
    llm_training::trained_states(
        prefix,
        params,
        params,
        "params",
        training,
        data,
        training.weights,
        None,
        params,
        phase,
    )
}

/// The denoiser's own training state, fully trained or adapted, and the parameters trained.
fn denoiser_states(
    diffusion: &Diffusion,
    blocks: &DenoiserBlocks,
    params: u64,
    training: &Training,
    data: u64,
    phase: &mut llm_training::StepPhase,
) -> Result<(Vec<Component>, u64), Overflow> {
    Ok(match &training.method {
        Method::Full => (trained_in_full("", params, training, data, phase)?, params),
        Method::Lora { rank, targets, dtype, .. } => {
            let adapters = adapters(diffusion, blocks, *rank, targets, *dtype)?;
            (llm_training::adapter_states(&adapters, training, data, phase)?, adapters.params)
        }
        // The checker refuses freeze, prefix and prompt tuning for a denoiser (E013).
        Method::Freeze { .. } | Method::Prefix { .. } | Method::Prompt { .. } => (Vec::new(), 0),
    })
}

/// The text encoders' training state when they are fine-tuned beside the denoiser
/// (`train_text_encoders`, diffusers' DreamBooth `--train_text_encoder`): the gradients,
/// optimizer state and master copy of all their parameters, through the language-model path.
/// Their activations over 77 tokens are a few MB and not counted.
fn text_encoder_states(
    program: &crate::hir::Layered<'_>,
    diffusion: &Diffusion,
    training: &Training,
    data: u64,
    phase: &mut llm_training::StepPhase,
) -> Result<Vec<Component>, Overflow> {
    if training.text_encoders == crate::hir::TextEncoders::Frozen {
        return Ok(Vec::new());
    }
    let params: u64 = diffusion
        .text_encoders
        .iter()
        .filter_map(|encoder| diffusion::parameter_count(program, encoder))
        .sum();
    if params == 0 {
        return Ok(Vec::new());
    }
    // Trained in full, an encoder is in a float type: its own, else the training's.
    let updated = match diffusion.text_encoder_weights.first() {
        Some(crate::quant::WeightFormat::Uniform(p)) if p.is_float_compute() => *p,
        _ => training.weights,
    };
    llm_training::trained_states(
        "text encoders: ",
        params,
        params,
        "text encoder params",
        training,
        data,
        updated,
        None,
        params,
        phase,
    )
}

/// The VAE encode of each batch's pixels (diffusers' DreamBooth and LoRA training scripts call
/// `vae.encode(pixel_values)` every step, under `torch.no_grad()`, before the denoiser's
/// forward), replayed through the caching allocator (`vae_encode.rs`) on the VAE's precision.
/// Its tensors are all freed before the denoiser's forward pass, so the allocated view counts
/// only what its peak exceeds the step's other intermediates by; the reserved view keeps its
/// segments, which the step's later tensors reuse (they are not replayed), so the cache adds
/// what the encode reserved beyond the larger transient.
fn vae_encode(diffusion: &Diffusion, step: &[Component]) -> Result<Vec<Component>, Overflow> {
    if diffusion.vae.is_none() {
        return Ok(Vec::new());
    }
    let element = diffusion.vae_weights.companion();
    let shape = EncoderShape {
        images: diffusion.batch.checked_mul(diffusion.frames).ok_or(Overflow)?,
        height: diffusion.height,
        width: diffusion.width,
        base_channels: diffusion.vae_channels,
        // SD's and SDXL's autoencoders (UNet pipelines) have 4 latent channels, SD3's and
        // FLUX's (DiT pipelines) 16.
        latent_channels: if diffusion.denoiser.unet { 4 } else { 16 },
        element: element.bytes_per_element(),
    };
    let mut alloc = CachingAllocator::new();
    vae_encode::replay(&mut alloc, &shape)?;
    let (encode, reserved) = (alloc.peak_allocated(), alloc.peak_reserved());
    let others =
        calc::sum(step.iter().filter(|c| c.category == Category::Intermediate).map(|c| c.bytes))?;
    let source = "diffusers AutoencoderKL Encoder under no_grad, replayed through PyTorch's \
                  CUDACachingAllocator (vae_encode.rs)";
    let mut out = Vec::new();
    if let Some(beyond) = encode.0.checked_sub(others.0).filter(|b| *b > 0) {
        let beyond = Bytes(beyond);
        out.push(Component {
            held_by: HeldBy::Tensors,
            name: "VAE encode (beyond the denoiser's step)".into(),
            category: Category::Intermediate,
            bytes: beyond,
            provenance: Provenance::Formula,
            formula: formula!(
                "{encode} live encoding {} image(s) of {} × {} pixels in {} (a \
                 full-resolution ResNet block's convolution with cuDNN's copies: 5 × {} \
                 channels, beside the pixels), less the step's other intermediates ({others}), \
                 freed before it = {beyond}",
                shape.images,
                shape.width,
                shape.height,
                element.name(),
                shape.base_channels,
            ),
            source: Some(source.into()),
        });
    }
    let transient = encode.max(others);
    if let Some(extra) = reserved.0.checked_sub(transient.0).filter(|e| *e > 0) {
        let extra = Bytes(extra);
        out.push(Component {
            held_by: HeldBy::AllocatorCache,
            name: "allocator cache (VAE encode)".into(),
            category: Category::Workspace,
            bytes: extra,
            provenance: Provenance::Formula,
            formula: formula!(
                "{reserved} reserved by replaying the encoder's tensors, less the {transient} \
                 the step holds live at its peak = {extra}"
            ),
            source: Some(source.into()),
        });
    }
    Ok(out)
}

/// The denoiser's LoRA adapters: `rank × (in + out)` per adapted projection (PEFT `lora_A`,
/// `lora_B`). A transformer block's projections are hidden × hidden; a UNet transformer layer
/// has a self-attention (c × c) and a cross-attention whose keys and values read the text
/// encoder's `cross_attention_dim`.
fn adapters(
    diffusion: &Diffusion,
    blocks: &DenoiserBlocks,
    rank: u64,
    targets: &[LoraTarget],
    dtype: crate::precision::Precision,
) -> Result<Adapters, Overflow> {
    let hidden = diffusion.denoiser.hidden;
    let per_rank = match &blocks.layout {
        BlockLayout::Transformer { layers, cross_attention, single_layers, .. } => {
            // A DiT block's feed-forward: hidden -> ffn -> hidden (GELU).
            let ffn = dit_ffn(diffusion);
            let per_block = attention_per_rank(targets, hidden, *cross_attention)?
                .checked_add(feed_forward_per_rank(targets, hidden, ffn, ffn)?)
                .ok_or(Overflow)?;
            let single = (*single_layers).min(*layers);
            let per_single =
                attention_per_rank(&single_stream_targets(targets), hidden, *cross_attention)?;
            (layers - single)
                .checked_mul(per_block)
                .zip(single.checked_mul(per_single))
                .and_then(|(a, b)| a.checked_add(b))
                .ok_or(Overflow)?
        }
        BlockLayout::Unet { cross_attention_dim, .. } => {
            let mut sum = 0u64;
            for level in unet_activations::levels(diffusion, blocks)? {
                // A BasicTransformerBlock's GEGLU feed-forward: `ff.net.0.proj` makes the value
                // and its gate (c -> 2 × 4c), `ff.net.2` reads 4c.
                let c = level.channels;
                let inner = UNET_FF_MULT.checked_mul(c).ok_or(Overflow)?;
                let up_out = inner.checked_mul(2).ok_or(Overflow)?;
                let per_block =
                    attention_per_rank(targets, level.channels, Some(*cross_attention_dim))?
                        .checked_add(feed_forward_per_rank(targets, c, up_out, inner)?)
                        .ok_or(Overflow)?;
                sum = per_block
                    .checked_mul(level.layers())
                    .and_then(|n| sum.checked_add(n))
                    .ok_or(Overflow)?;
            }
            sum
        }
    };
    let names: Vec<&str> = targets.iter().map(|t| t.name()).collect();
    let params = rank.checked_mul(per_rank).ok_or(Overflow)?;
    Ok(Adapters {
        kind: AdapterKind::Lora,
        params,
        label: formula!(
            "adapter params (rank {rank} × {}, {})",
            group_thousands(per_rank),
            names.join(" ")
        ),
        dtype,
        factored: None,
        // A step in the backward pass is refused for a denoiser: every gradient is held.
        largest: params,
    })
}

/// LoRA parameters per rank on one block's attention projections of `width` channels: each
/// target of the self-attention reads and writes `width` (lora_A `in × r`, lora_B `r × out`);
/// with a cross-attention over text embeddings of `text_width`, PEFT's `to_q` … `to_out.0`
/// match its projections too, its keys and values reading the text's width.
fn attention_per_rank(
    targets: &[LoraTarget],
    width: u64,
    text_width: Option<u64>,
) -> Result<u64, Overflow> {
    let mut sum = 0u64;
    for target in targets.iter().filter(|t| t.is_attention()) {
        let mut per_target = width.checked_mul(2).ok_or(Overflow)?;
        if let Some(text) = text_width {
            let input = if matches!(target, LoraTarget::K | LoraTarget::V) { text } else { width };
            per_target =
                input.checked_add(width).and_then(|n| per_target.checked_add(n)).ok_or(Overflow)?;
        }
        sum = sum.checked_add(per_target).ok_or(Overflow)?;
    }
    Ok(sum)
}

/// LoRA parameters per rank on one block's feed-forward of `width` channels: `up` (diffusers'
/// `ff.net.0.proj`) reads `width` and writes `up_out`, `down` (`ff.net.2`) reads `down_in`
/// and writes `width`.
fn feed_forward_per_rank(
    targets: &[LoraTarget],
    width: u64,
    up_out: u64,
    down_in: u64,
) -> Result<u64, Overflow> {
    let mut sum = 0u64;
    for target in targets {
        let matrix = match target {
            LoraTarget::Up => width.checked_add(up_out),
            LoraTarget::Down => down_in.checked_add(width),
            _ => Some(0),
        };
        sum = matrix.and_then(|n| sum.checked_add(n)).ok_or(Overflow)?;
    }
    Ok(sum)
}

fn activations(
    diffusion: &Diffusion,
    blocks: &DenoiserBlocks,
    training: &Training,
) -> Result<Vec<Component>, Overflow> {
    match &blocks.layout {
        BlockLayout::Transformer { layers, cross_attention, qk_norm, single_layers } => {
            let block = dit_block::Block {
                hidden: diffusion.denoiser.hidden,
                ffn: dit_ffn(diffusion),
                heads: blocks.heads.at(diffusion.denoiser.hidden),
                qk_norm: *qk_norm,
                single: *single_layers,
            };
            let mut out = transformer_activations(
                diffusion,
                blocks,
                *layers,
                *cross_attention,
                &block,
                training,
            )?;
            if let Some(width) = *cross_attention {
                out.push(cross_attention_activations(
                    diffusion, *layers, width, *qk_norm, training,
                )?);
            }
            Ok(out)
        }
        BlockLayout::Unet { .. } => {
            let levels = unet_activations::levels(diffusion, blocks)?;
            let mut out = vec![unet_activations::stored(
                diffusion,
                &levels,
                training,
                Halves::Both(match &training.method {
                    Method::Full => Weights::Trained,
                    Method::Lora { rank, targets, .. } => Weights::Adapted { rank: *rank, targets },
                    _ => Weights::Frozen,
                }),
                training.checkpointing,
                "denoiser activations (UNet)",
            )?];
            out.extend(unet_activations::softmax_backward(diffusion, &levels, training)?);
            Ok(out)
        }
    }
}

/// A transformer denoiser's blocks: what each keeps and what the last or recomputed one holds
/// besides (`dit_block.rs`), over every token when the blocks attend jointly, over the latent
/// patches alone when a cross-attention reads the text. What LoRA adapters keep and eager
/// attention's scores come from the language model path, the blocks taken as the layers of a
/// language model without a vocabulary (as is the whole count under op-level checkpointing).
fn transformer_activations(
    diffusion: &Diffusion,
    blocks: &DenoiserBlocks,
    layers: u64,
    cross_attention: Option<u64>,
    block: &dit_block::Block,
    training: &Training,
) -> Result<Vec<Component>, Overflow> {
    let hidden = diffusion.denoiser.hidden;
    let heads = blocks.heads.at(hidden);
    let shape = Shape {
        layers,
        hidden,
        ffn: dit_ffn(diffusion),
        heads,
        kv_heads: heads,
        head_dim: hidden / heads,
        vocab: 0,
        tied_embeddings: false,
        biases: Biases::All,
        norm: Norm::Layer,
        positions: 0,
        output: Output::None,
        dropout: false,
        mlp: Mlp::Plain,
        attention: AttentionKind::Standard,
        moe: None,
        window: None,
        encoder: None,
        keep_in_fp32: 0,
    };
    let tokens =
        if cross_attention.is_some() { diffusion.image_tokens() } else { diffusion.tokens() }
            .ok_or(Overflow)?;
    let placement =
        Placement { tensor: 1, stage: 0, stages: 1, first_layer: 0, layers, host_experts: 0 };
    let step = Training { sequence: tokens, micro_batch: diffusion.batch, ..training.clone() };
    let mut out = llm_training::activations(&shape, &placement, &step)?;
    if let Some(inputs) = single_stream_adapter_inputs(&shape, &placement, &step, block)? {
        out.retain(|c| c.name != "LoRA saved inputs");
        out.push(inputs);
    }
    if let Some(blocks) = dit_block::activations(diffusion, block, layers, tokens, training)? {
        out.retain(|c| c.name != "activations" && c.name != "last layer's forward transients");
        out.splice(0..0, blocks);
    }
    let tokens_are = if cross_attention.is_some() {
        "tokens = latent patches (W/16 × H/16), the text read by a cross-attention"
    } else {
        "tokens = latent patches (W/16 × H/16) + text tokens"
    };
    for component in &mut out {
        // The blocks' own count is named already; the language model path's parts are not.
        let as_layer = !component.name.starts_with("denoiser ");
        if as_layer {
            component.name = format!("denoiser {}", component.name).into();
        }
        let note = if as_layer { "; a DiT block as a layer with a 4h GELU MLP" } else { "" };
        component.source = Some(
            format!("{}; {tokens_are}{note}", component.source.as_deref().unwrap_or_default())
                .into(),
        );
    }
    Ok(out)
}

/// Of LoRA's targets, those a single-stream block has: q, k and v, but no output projection or
/// `ff` MLP of its own (FLUX.1's and HunyuanVideo's single blocks project the attention and the
/// MLP together with `proj_out`).
fn single_stream_targets(targets: &[LoraTarget]) -> Vec<LoraTarget> {
    targets
        .iter()
        .copied()
        .filter(|t| matches!(t, LoraTarget::Q | LoraTarget::K | LoraTarget::V))
        .collect()
}

/// The adapters' kept inputs when some blocks are single-stream: those have no output projection
/// of their own (FLUX.1's and HunyuanVideo's single blocks project the attention and the MLP
/// together with `proj_out`) and no `ff` MLP, so of the targets only q, k and v adapt them. The
/// double-stream blocks keep what the language model path counts for every target; under full
/// checkpointing the recomputed block is a single-stream one (`dit_block.rs` recomputes the block
/// that holds the most, which at equal widths is the single-stream block). `None` when no block
/// is single-stream or no target is missing from them.
fn single_stream_adapter_inputs(
    shape: &Shape,
    placement: &Placement,
    step: &Training,
    block: &dit_block::Block,
) -> Result<Option<Component>, Overflow> {
    let Method::Lora { targets, .. } = &step.method else { return Ok(None) };
    let single = block.single.min(placement.layers);
    let kept = single_stream_targets(targets);
    if single == 0 || kept.len() == targets.len() {
        return Ok(None);
    }
    let inputs = |layers: u64, training: &Training| {
        llm_training::adapter_inputs(shape, &Placement { layers, ..*placement }, training)
    };
    let mut single_method = step.method.clone();
    if let Method::Lora { targets, .. } = &mut single_method {
        targets.clone_from(&kept);
    }
    let single_step = Training { method: single_method, ..step.clone() };
    let full = step.checkpointing == Checkpointing::Full;
    let singles = inputs(if full { 1 } else { single }, &single_step)?;
    let doubles = if full || single == placement.layers {
        None
    } else {
        inputs(placement.layers - single, step)?
    };
    let (bytes, formula) = match (&doubles, &singles) {
        (Some(d), Some(s)) => {
            let bytes = calc::add(d.bytes, s.bytes)?;
            (
                bytes,
                formula!(
                    "double-stream blocks: {} + single-stream blocks (q, k, v only): {} = {} B",
                    d.formula,
                    s.formula,
                    group_thousands(bytes.0)
                ),
            )
        }
        (None, Some(s)) => {
            (s.bytes, formula!("single-stream blocks (q, k, v only): {}", s.formula))
        }
        (Some(d), None) => (d.bytes, d.formula.clone()),
        (None, None) => return Ok(None),
    };
    let source = singles.as_ref().or(doubles.as_ref()).and_then(|c| c.source.clone());
    Ok(Some(Component { bytes, formula, source, ..singles.or(doubles).ok_or(Overflow)? }))
}

/// What a block's cross-attention keeps for the backward pass beside its self-attention: per
/// latent patch the projections' input (the residual stream after the self-attention), the
/// queries and the attention's output (to_out's input); per text token the keys and values;
/// under a q/k norm, the fp32 copies autocast makes of the queries and keys it normalizes; and
/// what LoRA adapters on its projections keep.
/// Every block keeps them, or only the recomputed one under full checkpointing.
fn cross_attention_activations(
    diffusion: &Diffusion,
    layers: u64,
    cross_width: u64,
    qk_norm: bool,
    training: &Training,
) -> Result<Component, Overflow> {
    let stored_layers = if training.checkpointing == Checkpointing::Full { 1 } else { layers };
    let patches = diffusion.image_tokens().ok_or(Overflow)?;
    let per_sample = patches
        .checked_mul(3)
        .and_then(|n| n.checked_add(diffusion.text_tokens.checked_mul(2)?))
        .ok_or(Overflow)?;
    let blocks = || {
        Product::new()
            .times(stored_layers, if stored_layers == 1 { "recomputed layer" } else { "layers" })?
            .times(diffusion.batch, "batch")
    };
    let kept = blocks()?
        .times(per_sample, "(3 × patches + 2 × text tokens)")?
        .times(diffusion.denoiser.hidden, "hidden")?
        .bytes_each(training.activations.bytes_per_element(), training.activations.name())?;
    let norms = if qk_norm {
        let tokens = patches.checked_add(diffusion.text_tokens).ok_or(Overflow)?;
        Some(
            blocks()?
                .times(tokens, "(patches + text tokens)")?
                .times(diffusion.denoiser.hidden, "hidden")?
                .bytes_each(Ratio::int(4), "fp32 q/k norm copies")?,
        )
    } else {
        None
    };
    // LoRA on the cross-attention's projections keeps each adapter's input: the patches for
    // q and o, the text (of the text encoder's width) for k and v.
    let adapted = |wanted: &[LoraTarget]| match &training.method {
        Method::Lora { targets, .. } => {
            targets.iter().filter(|t| wanted.contains(t)).count() as u64
        }
        _ => 0,
    };
    let (on_patches, on_text) =
        (adapted(&[LoraTarget::Q, LoraTarget::O]), adapted(&[LoraTarget::K, LoraTarget::V]));
    let adapter_elements = on_patches
        .checked_mul(patches)
        .and_then(|n| n.checked_mul(diffusion.denoiser.hidden))
        .zip(on_text.checked_mul(diffusion.text_tokens).and_then(|n| n.checked_mul(cross_width)))
        .and_then(|(a, b)| a.checked_add(b))
        .ok_or(Overflow)?;
    let adapters = if adapter_elements > 0 {
        Some(
            blocks()?
                .times(
                    adapter_elements,
                    "elements the adapters keep (q, o over the patches; k, v over the text)",
                )?
                .bytes_each(
                    training.activations.bytes_per_element(),
                    training.activations.name(),
                )?,
        )
    } else {
        None
    };
    let parts: Vec<&Product> =
        [Some(&kept), norms.as_ref(), adapters.as_ref()].into_iter().flatten().collect();
    let bytes = calc::sum(parts.iter().map(|p| p.value()).collect::<Result<Vec<_>, _>>()?)?;
    let terms = formula!(
        "{} = {} B",
        parts.iter().map(|p| p.terms()).collect::<Vec<_>>().join(" + "),
        group_thousands(bytes.0)
    );
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "denoiser cross-attention".into(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula: terms,
        source: Some(
            "derived: autograd keeps each matmul's input and SDPA its queries, keys, values and \
             output (diffusers attn2: to_q over the patches, to_k and to_v over the text)"
                .into(),
        ),
    })
}
