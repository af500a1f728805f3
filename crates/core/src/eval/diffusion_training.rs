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
//! - UNet: per level, every ResNet, attention block and transformer layer stores the inputs of
//!   its operations (see [`RESNET_TENSORS`], [`ATTENTION_BLOCK_TENSORS`],
//!   [`TRANSFORMER_LAYER_TENSORS`]) at that level's positions and channels; eager attention adds
//!   each layer's probabilities, with the level's heads. Full checkpointing (diffusers
//!   `enable_gradient_checkpointing`: one checkpoint per ResNet and per `BasicTransformerBlock`,
//!   huggingface/diffusers transformer_2d.py at 58eb52c) keeps each one's input and recomputes
//!   the largest in the backward pass.

use super::allocator::CachingAllocator;
use super::calc::{self, Overflow, Product, formula};
use super::training::{self as llm_training, AdapterKind, Adapters};
use super::vae_encode::{self, EncoderShape};
use super::{Placement, diffusion, dit_block};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::Bytes;
use crate::hir::{
    Attention, AttentionKind, Biases, BlockLayout, Checkpointing, DenoiserBlocks, Diffusion,
    LoraTarget, Method, Mlp, Norm, Output, Shape, Training,
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

/// Tensors of `c` channels a UNet ResNet block stores per position (diffusers `ResnetBlock2D`):
/// GroupNorm 1's input, SiLU's input, conv 1's input, GroupNorm 2's input, SiLU's input and
/// conv 2's input; autograd keeps each operation's input. Coming up, the input is the
/// concatenated skip connection, about twice the channels: see [`UP_RESNET_TENSORS`].
const RESNET_TENSORS: u64 = 6;

/// A ResNet block coming up: its first three tensors have the concatenated skip channels
/// (about 2c: the previous level's output and the skip of the same level), 3 × 2c + 3c.
const UP_RESNET_TENSORS: u64 = 9;

/// Tensors of `c` channels a UNet attention block (diffusers `Transformer2DModel`) stores per
/// position around its transformer layers: GroupNorm input and output (proj_in's input) and
/// proj_out's input.
const ATTENTION_BLOCK_TENSORS: u64 = 3;

/// Tensors of `c` channels one transformer layer (diffusers `BasicTransformerBlock`, one of a
/// `Transformer2DModel`'s `transformer_blocks`) stores per position: self-attention: LayerNorm
/// input and output, q, k, v, attention output (to_out's input); cross-attention: LayerNorm
/// input and output, q, attention output; feed-forward: LayerNorm input and output, GEGLU
/// projection (8c: value and gate), GELU output (4c) and product (4c). 6 + 4 + 18 = 28; an SD
/// 1.x attention block of one layer stores 3 + 28 = 31.
const TRANSFORMER_LAYER_TENSORS: u64 = 28;

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
    let role = if training.method.is_full() { "denoiser" } else { "frozen denoiser" };
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
    components.extend(llm_training::autocast_copies(params, training)?);
    let mut phase = llm_training::StepPhase::default();
    let trained = match &training.method {
        Method::Full => {
            components.extend(llm_training::trained_states(
                "",
                params,
                params,
                "params",
                training,
                data,
                training.weights,
                None,
                // Refused for a denoiser by the checker: every gradient is held.
                params,
                &mut phase,
            )?);
            params
        }
        Method::Lora { rank, targets, dtype, .. } => {
            let adapters = adapters(diffusion, blocks, *rank, targets, *dtype)?;
            components.extend(llm_training::adapter_states(&adapters, training, data, &mut phase)?);
            adapters.params
        }
        // The checker refuses freeze, prefix and prompt tuning for a denoiser (E013).
        Method::Freeze { .. } | Method::Prefix { .. } | Method::Prompt { .. } => 0,
    };
    // DeepSpeed's reduce buckets and, while gradients accumulate, the next micro-batch's
    // partition, as for a language model.
    components.extend(llm_training::buckets(training, data)?);
    components.extend(llm_training::accumulating_partition(trained, training, data)?);
    components.extend(text_encoder_states(program, diffusion, training, data, &mut phase)?);
    components.extend(activations(diffusion, blocks, training)?);
    components.extend(llm_training::optimizer_step(&components, &phase)?);
    components.extend(vae_encode(diffusion, &components)?);
    Ok(components)
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
            for level in unet_levels(diffusion, blocks)? {
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
                    .checked_mul(level.layers)
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
            thousands(per_rank),
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

/// `99,648` for 99648, as formulas write numbers.
fn thousands(value: u64) -> String {
    let mut out = String::new();
    crate::bytes::write_thousands(&mut out, value);
    out
}

/// One level of a UNet: its positions per sample, channels, and blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Level {
    width: u64,
    height: u64,
    positions: u64,
    channels: u64,
    /// Heads of this level's attention layers.
    heads: u64,
    /// ResNet blocks going down and in the mid block.
    resnets_down: u64,
    /// ResNet blocks coming up (their input has the concatenated skip).
    resnets_up: u64,
    /// Attention blocks (`Transformer2DModel`) going down, coming up and in the mid block.
    attention_blocks: u64,
    /// Transformer layers (`BasicTransformerBlock`) of all those attention blocks.
    layers: u64,
}

/// The levels of a UNet (diffusers `UNet2DConditionModel`, huggingface/diffusers
/// src/diffusers/models/unets/unet_2d_condition.py and unet_2d_blocks.py at 58eb52c): level `i`
/// at the latent resolution halved `i` times (stride-2 convolutions round up),
/// `layers_per_block` ResNets going down and one more coming up, each followed by an attention
/// block of the level's transformer layers where it has any (`CrossAttnDownBlock2D`,
/// `CrossAttnUpBlock2D`); the deepest level adds the mid block, two ResNets around one attention
/// block (`UNetMidBlock2DCrossAttn`). SD 1.x: layers 1 1 1 0, mid 1; SDXL
/// (stabilityai/stable-diffusion-xl-base-1.0 unet/config.json, `transformer_layers_per_block`
/// [1, 2, 10] over `DownBlock2D`, `CrossAttnDownBlock2D`, `CrossAttnDownBlock2D`): 0 2 10, mid 10.
fn unet_levels(diffusion: &Diffusion, blocks: &DenoiserBlocks) -> Result<Vec<Level>, Overflow> {
    let BlockLayout::Unet {
        channel_mult,
        layers_per_block,
        transformer_layers,
        mid_transformer_layers,
        ..
    } = &blocks.layout
    else {
        return Ok(Vec::new());
    };
    let (mut w, mut h) = (diffusion.width.div_ceil(8), diffusion.height.div_ceil(8));
    let last = channel_mult.len() - 1;
    let mut levels = Vec::with_capacity(channel_mult.len());
    for (i, (mult, &layers)) in channel_mult.iter().zip(transformer_layers).enumerate() {
        let deepest = i == last;
        // One attention block after every ResNet going down and coming up.
        let up_and_down = if layers > 0 { 2 * layers_per_block + 1 } else { 0 };
        let mid = u64::from(deepest && *mid_transformer_layers > 0);
        let channels = diffusion.denoiser.hidden.checked_mul(*mult).ok_or(Overflow)?;
        levels.push(Level {
            width: w,
            height: h,
            positions: w
                .checked_mul(h)
                .and_then(|n| n.checked_mul(diffusion.frames))
                .ok_or(Overflow)?,
            channels,
            heads: blocks.heads.at(channels),
            resnets_down: layers_per_block + if deepest { 2 } else { 0 },
            resnets_up: layers_per_block + 1,
            attention_blocks: up_and_down + mid,
            layers: up_and_down
                .checked_mul(layers)
                .and_then(|n| n.checked_add(mid * mid_transformer_layers))
                .ok_or(Overflow)?,
        });
        (w, h) = (w.div_ceil(2), h.div_ceil(2));
    }
    Ok(levels)
}

/// Bytes of eager attention probabilities per score: the fp32 softmax output and, when the
/// activations are 16-bit, its cast copy that the product with V keeps (as for a language model,
/// `training/activations.rs`).
fn per_score(training: &Training) -> Result<Ratio, Overflow> {
    let e = training.activations.bytes_per_element();
    if e < Ratio::int(4) { Ratio::int(4).checked_add(e).ok_or(Overflow) } else { Ok(Ratio::int(4)) }
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
            let levels = unet_levels(diffusion, blocks)?;
            let mut out = vec![unet_activations(diffusion, &levels, training)?];
            out.extend(softmax_backward(diffusion, &levels, training)?);
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
                    thousands(bytes.0)
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
        thousands(bytes.0)
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

/// A UNet's stored activations over its levels; with full checkpointing, every ResNet's and
/// transformer layer's input and the largest of them recomputed.
fn unet_activations(
    diffusion: &Diffusion,
    levels: &[Level],
    training: &Training,
) -> Result<Component, Overflow> {
    let elem = training.activations;
    let e = elem.bytes_per_element();
    let batch = diffusion.batch;
    let eager = training.attention == Attention::Eager;
    let scores_per_layer = |level: &Level| -> Result<Bytes, Overflow> {
        if !eager || level.layers == 0 {
            return Ok(Bytes::ZERO);
        }
        // Self-attention over the level's positions, cross-attention over the text tokens.
        let keys = level.positions.checked_add(diffusion.text_tokens).ok_or(Overflow)?;
        Product::new()
            .times(batch, "batch")?
            .times(level.heads, "heads")?
            .times(level.positions, "queries")?
            .times(keys, "keys")?
            .bytes_each(per_score(training)?, "")?
            .value()
    };
    let mut terms = Vec::new();
    let mut total = Bytes::ZERO;
    let mut largest_block = Bytes::ZERO;
    let mut largest_text = String::new();
    for (i, level) in levels.iter().enumerate() {
        // diffusers checkpoints each ResNet and each transformer layer (`BasicTransformerBlock`);
        // each keeps its input.
        let tensors_per_position = match training.checkpointing {
            Checkpointing::Full => level.resnets_down + level.resnets_up + level.layers,
            // Op-level checkpointing is a decoder layer's policy: a UNet keeps what it keeps
            // unchecked.
            Checkpointing::None | Checkpointing::Selective | Checkpointing::SelectiveOp => {
                RESNET_TENSORS * level.resnets_down
                    + UP_RESNET_TENSORS * level.resnets_up
                    + ATTENTION_BLOCK_TENSORS * level.attention_blocks
                    + TRANSFORMER_LAYER_TENSORS * level.layers
            }
        };
        let stored = Product::new()
            .times(batch, "batch")?
            .times(level.positions, "positions")?
            .times(level.channels, "channels")?
            .times(tensors_per_position, "tensors")?
            .bytes_each(e, elem.name())?
            .value()?;
        let scores = scores_per_layer(level)?;
        let level_scores = if training.checkpointing == Checkpointing::None {
            Bytes(scores.0.checked_mul(level.layers).ok_or(Overflow)?)
        } else {
            Bytes::ZERO
        };
        let level_bytes = calc::add(stored, level_scores)?;
        total = calc::add(total, level_bytes)?;
        let scores_text = if level_scores > Bytes::ZERO {
            formula!(" + {} blocks' eager probabilities {level_scores}", level.layers)
        } else {
            String::new()
        };
        terms.push(formula!(
            "level {i} ({} × {} positions × {} ch × {tensors_per_position} tensors) {stored}{scores_text}",
            level.width,
            level.height,
            level.channels,
        ));
        if training.checkpointing == Checkpointing::Full {
            // The block recomputed in the backward pass holds all its tensors (and scores): a
            // transformer layer's, beside its attention block's own, which are stored outside
            // the checkpoints.
            let (tensors, label) = if level.layers > 0 {
                (ATTENTION_BLOCK_TENSORS + TRANSFORMER_LAYER_TENSORS, "transformer block")
            } else {
                (UP_RESNET_TENSORS, "ResNet block")
            };
            let block = Product::new()
                .times(batch, "batch")?
                .times(level.positions, "positions")?
                .times(level.channels * tensors, "")?
                .bytes_each(e, "")?
                .value()?;
            let block = calc::add(block, scores)?;
            if block > largest_block {
                largest_block = block;
                largest_text = formula!("level {i} {label} recomputed {block}");
            }
        }
    }
    let bytes = calc::add(total, largest_block)?;
    let checkpoints =
        if training.checkpointing == Checkpointing::Full { "block inputs: " } else { "" };
    let mut text = formula!("{checkpoints}{} (batch {batch}, {})", terms.join(" + "), elem.name());
    if largest_block > Bytes::ZERO {
        text = formula!("{text} + {largest_text}");
    }
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "denoiser activations (UNet)".into(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula: formula!("{text} = {bytes}"),
        source: Some(
            "derived from diffusers ResnetBlock2D and BasicTransformerBlock (tensors autograd keeps); eval/diffusion_training.rs".into(),
        ),
    })
}

/// The softmax backward of the first attention differentiated at the largest level (see
/// `training::softmax_gradients`) is the peak, while the rest of the stored activations are
/// still alive.
fn softmax_backward(
    diffusion: &Diffusion,
    levels: &[Level],
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    let Some(level) = levels.iter().filter(|l| l.layers > 0).max_by_key(|l| l.positions) else {
        return Ok(None);
    };
    if training.attention != Attention::Eager {
        return Ok(None);
    }
    let keys = level.positions.checked_add(diffusion.text_tokens).ok_or(Overflow)?;
    llm_training::softmax_gradients(
        (diffusion.batch, "batch"),
        level.heads,
        level.positions,
        (keys, "keys (positions + text tokens)"),
    )
    .map(Some)
}
