//! Diffusion pipelines: the weights of every component, the denoiser's activations at the
//! latent resolution, and the VAE decoder's peak at the output resolution (DOMAIN.md §7.1).
//!
//! The phases run one after another (encode the prompt, denoise, decode), so the transient
//! peak is the largest phase's, over weights that all stay resident unless the pipeline offloads
//! whole models between phases (diffusers `enable_model_cpu_offload`).
//!
//! Activation formulas [derived, to be checked by the accuracy benchmark]:
//! - transformer denoiser: one block live at a time over `tokens` (latent patches of 2 × 2 after
//!   the VAE's 8× downsampling, plus the text tokens): residual and norm (2h) and the MLP's 4h
//!   input and output (8h), 10 × tokens × hidden elements; with `rope fp32` (FLUX), the key's
//!   rotation adds a rotated copy and three fp32 tensors of the key's size ([`rope_fp32`]);
//! - UNet denoiser: at the latent resolution with its base channels, the same 10 per position
//!   (a ResNet block's input, norms and convolution outputs, the attention block's projections);
//! - VAE decoder: the convolution of the last upsample holds its 2c-channel input at half
//!   resolution, the nearest copy, its output and cuDNN's NHWC copies of those two: 8.5c per
//!   pixel (`vae_decode.rs` replays every tensor of the decoder and finds no larger moment); a
//!   tiled decode holds one tile's
//!   (diffusers' `tile_sample_min_size`, the VAE config's `sample_size`: 1024 for the SDXL, SD3
//!   and FLUX autoencoders, 512 for SD 1.x's); with `vae_upcast` (SDXL's `force_upcast`) the
//!   decoder computes in fp32 and its weights are fp32 during the decode ([`vae_upcast`]).
//! - a video pipeline's causal 3D VAE (`video_frames`): the denoiser sees the latent frames
//!   (`(frames - 1) / temporal + 1`) in one sequence, and the decode peak is the allocated peak
//!   of replaying the causal decoder's frame batches (`vae_video.rs`), one tile's when tiled.
//!
//! Reserved view: the caching allocator keeps every freed block, so after the decode it holds
//! the denoising step's blocks (the tensors alive at the step's peak, allocated in order and
//! freed) and each decoder stage's segments (`decode_cache`). What else is
//! resident at the decode is small and left out: the latents (16 × 128² × 2 B = 512 KiB for
//! FLUX at 1024², a small-pool block) and the text embeddings (512 × 4096 × 2 B = 4 MiB for
//! T5-XXL, one 20 MiB segment).

use std::borrow::Cow;

use super::allocator::{CachingAllocator, split_releasable};
use super::calc::{self, Overflow, Product, formula};
use super::vae_blocks::VideoLatents;
use super::vae_dc::{self, DcShape};
use super::vae_decode::{self, DecoderShape};
use super::vae_hunyuan;
use super::vae_ltx;
use super::vae_mochi;
use super::vae_video::{self, VideoShape};
use super::vae_wan;
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::Bytes;
use crate::hir::{
    AttentionSlice, BlockLayout, ControlNet, ControlOutputs, Diffusion, DiffusionAttention,
    DiffusionOffload, ImageVae, Layered, LtxVae, Rope, VideoDecoder,
};
use crate::precision::Precision;
use crate::quant::WeightFormat;
use crate::ratio::Ratio;

fn formula(
    name: impl Into<Cow<'static, str>>,
    category: Category,
    product: Product,
    source: &'static str,
) -> Result<Component, Overflow> {
    let bytes = product.value()?;
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: name.into(),
        category,
        bytes,
        provenance: Provenance::Formula,
        formula: product.finish()?.1,
        source: Some(source.into()),
    })
}

/// A pipeline model's parameter count: the one declared, or its shape's.
pub(super) fn parameter_count(program: &Layered<'_>, model: &str) -> Option<u64> {
    let found = program.model(model)?;
    found.params.or_else(|| found.shape.as_ref().and_then(crate::eval::parameter_count))
}

/// A pipeline model's weights, `role` naming it: the parameters in `format`; the ones its loader
/// keeps out of the format (see [`kept_precision`]); under a quantized format, the parameters
/// outside linear layers, at the load dtype; under layerwise casting, the modules it skips.
pub(super) fn weights(
    program: &Layered<'_>,
    diffusion: &Diffusion,
    model: &str,
    format: WeightFormat,
    role: &str,
) -> Result<Vec<Component>, Overflow> {
    weights_beside_host(program, diffusion, model, format, role, None)
}

/// The denoiser's weights, less the blocks it swaps to the host (`blocks_to_swap`), trained or
/// sampled.
pub(super) fn denoiser_weights(
    program: &Layered<'_>,
    diffusion: &Diffusion,
    role: &str,
) -> Result<Vec<Component>, Overflow> {
    let denoiser = &diffusion.denoiser;
    let swapped = super::block_swap::swapped(program, diffusion)?;
    weights_beside_host(
        program,
        diffusion,
        &denoiser.model,
        denoiser.weights,
        role,
        swapped.as_ref(),
    )
}

/// [`weights`], less the blocks a denoiser keeps on the host (`swapped`).
fn weights_beside_host(
    program: &Layered<'_>,
    diffusion: &Diffusion,
    model: &str,
    format: WeightFormat,
    role: &str,
    swapped: Option<&super::block_swap::Swapped>,
) -> Result<Vec<Component>, Overflow> {
    let Some(found) = program.model(model) else { return Ok(Vec::new()) };
    let Some(params) = parameter_count(program, model) else {
        return Ok(Vec::new());
    };
    let precision = format.matrix(crate::quant::Matrix::Up, 0, 1, 1);
    // The pipeline's `weights` precision is the dtype its models are loaded in, unless it was
    // loaded in another and cast (`loaded_as`).
    let load = diffusion.preparation.loaded_as.unwrap_or_else(|| diffusion.vae_weights.companion());
    let kept = found.keep_in_fp32.filter(|_| precision.bytes_per_element() < Ratio::int(4));
    // Cast to fp16 after a load in another type, every parameter is fp16.
    let cast_after_load = diffusion.preparation.loaded_as.is_some_and(|l| l != Precision::Fp16);
    let kept_precision = if cast_after_load && precision == Precision::Fp16 {
        None
    } else {
        kept_precision(precision, load, diffusion.preparation.quantize_on_load)
    };
    let (kept, kept_precision) = match (kept, kept_precision) {
        (Some(kept), Some(p)) => (kept.min(params), p),
        _ => (0, precision),
    };
    // Quantizers replace linear layers only; GGUF files decide per tensor and are left alone.
    let linear_only = !precision.is_float_compute() && !matches!(precision, Precision::Ggml(_));
    let outside = match found.outside_linear {
        Some(outside) if linear_only => outside.min(params - kept),
        _ => 0,
    };
    // diffusers' layerwise casting leaves the modules its name patterns match at the load dtype.
    let skipped = match (precision, found.layerwise_skip) {
        (Precision::Fp8Layerwise, Some(skipped)) => skipped.min(params - kept - outside),
        _ => 0,
    };
    let in_format = params - kept - outside - skipped;
    let mut out = vec![match swapped {
        None => {
            let product = Product::new()
                .times(in_format, "params")?
                .bytes_each(precision.bytes_per_element(), precision.name())?;
            formula(
                format!("{role} weights: {model}"),
                Category::Persistent,
                product,
                "the model's parameter count",
            )?
        }
        Some(swapped) => on_device(in_format, swapped, precision, role, model)?,
    }];
    if kept > 0 {
        let product = Product::new()
            .times(kept, "params")?
            .bytes_each(kept_precision.bytes_per_element(), kept_precision.name())?;
        out.push(formula(
            format!("{role} {} layers: {model}", kept_precision.name()),
            Category::Persistent,
            product,
            "transformers `_keep_in_fp32_modules`: fp32 under fp16 loads and bitsandbytes \
             quantizers; left unconverted at the load dtype by the other quantizers applied while \
             loading (torchao, quanto: `modules_to_not_convert`)",
        )?);
    }
    let mut at_load = |count: u64, what: &str, source: &'static str| -> Result<(), Overflow> {
        if count > 0 {
            let product = Product::new()
                .times(count, "params")?
                .bytes_each(load.bytes_per_element(), load.name())?;
            out.push(formula(
                format!("{role} {what}: {model}"),
                Category::Persistent,
                product,
                source,
            )?);
        }
        Ok(())
    };
    at_load(
        outside,
        "embeddings and norms",
        "weight-only quantizers replace `nn.Linear` layers only (bitsandbytes, torchao, \
         optimum-quanto; diffusers layerwise casting casts linear and convolution layers)",
    )?;
    at_load(
        skipped,
        "layers layerwise casting skips",
        "diffusers `apply_layerwise_casting`: modules whose names match \
         DEFAULT_SKIP_MODULES_PATTERN (pos_embed, patch_embed, norm, ^proj_in$, ^proj_out$) \
         are not cast",
    )?;
    Ok(out)
}

/// The denoiser's weights left on the device when `swapped` blocks' wait on the host.
fn on_device(
    in_format: u64,
    swapped: &super::block_swap::Swapped,
    precision: Precision,
    role: &str,
    model: &str,
) -> Result<Component, Overflow> {
    let count = in_format.saturating_sub(swapped.params);
    let per = precision.bytes_per_element();
    let bytes = Bytes::for_elements(count, per).ok_or(Overflow)?;
    Ok(Component {
        held_by: HeldBy::Tensors,
        category: Category::Persistent,
        name: format!("{role} weights on the device: {model}").into(),
        bytes,
        provenance: Provenance::Formula,
        formula: calc::formula!(
            "({} params − ({}) on the host = {} params) × {per} B ({}) = {bytes}",
            crate::bytes::group_thousands(in_format),
            swapped.terms,
            crate::bytes::group_thousands(count),
            precision.name()
        ),
        source: Some(
            "kohya's custom_offloading_utils.ModelOffloader: the swapped blocks' weights wait on \
             the host and are copied into the device tensors of a block that has run"
                .into(),
        ),
    })
}

/// diffusers' `Attention.fuse_projections` (`fuse_qkv_projections`) concatenates `to_q`, `to_k`
/// and `to_v` into a new `to_qkv` and leaves the three in place: a second copy of the
/// denoiser's q/k/v parameters (`attention_qkv`) in its weights' format.
fn fused_qkv(program: &Layered<'_>, diffusion: &Diffusion) -> Result<Option<Component>, Overflow> {
    let model = &diffusion.denoiser.model;
    let Some(params) = program
        .model(model)
        .and_then(|m| m.attention_qkv)
        .filter(|_| diffusion.preparation.fuse_qkv)
    else {
        return Ok(None);
    };
    let precision = diffusion.denoiser.weights.matrix(crate::quant::Matrix::Up, 0, 1, 1);
    let product = Product::new()
        .times(params, "q, k and v params")?
        .bytes_each(precision.bytes_per_element(), precision.name())?;
    formula(
        format!("denoiser fused q/k/v copies: {model}"),
        Category::Persistent,
        product,
        "diffusers Attention.fuse_projections: torch.cat of to_q, to_k and to_v into a new \
         to_qkv; the originals stay",
    )
    .map(Some)
}

/// Every model's weights in the pipeline, as loaded (an upcast VAE at its stored type): what an
/// offloading pipeline keeps on the host between the models' turns on the device.
pub(super) fn pipeline_weights(
    program: &Layered<'_>,
    diffusion: &Diffusion,
) -> Result<Bytes, Overflow> {
    let mut parts = Vec::new();
    for (encoder, format) in diffusion.text_encoders.iter().zip(&diffusion.text_encoder_weights) {
        parts.extend(weights(program, diffusion, encoder, *format, "text encoder")?);
    }
    let denoiser = &diffusion.denoiser;
    parts.extend(weights(program, diffusion, &denoiser.model, denoiser.weights, "denoiser")?);
    parts.extend(other_experts(program, diffusion)?);
    if let Some(vae) = &diffusion.vae {
        parts.extend(weights(program, diffusion, vae, diffusion.vae_weights, "VAE")?);
    }
    calc::sum(parts.iter().map(|c| c.bytes))
}

/// The weights of a multi-expert denoiser's other experts (`denoiser_experts`: Wan 2.2's
/// `transformer_2`), copies of the denoiser's: resident beside it without offload, on the host
/// between their turns with it (diffusers' `model_cpu_offload_seq` runs `transformer`, then
/// `transformer_2`, one on the device at a time).
fn other_experts(
    program: &Layered<'_>,
    diffusion: &Diffusion,
) -> Result<Option<Component>, Overflow> {
    let denoiser = &diffusion.denoiser;
    let more = denoiser.experts.saturating_sub(1);
    if more == 0 {
        return Ok(None);
    }
    let one = weights(program, diffusion, &denoiser.model, denoiser.weights, "denoiser")?;
    let one = calc::sum(one.iter().map(|c| c.bytes))?;
    let bytes = one.0.checked_mul(more).ok_or(Overflow)?;
    Ok(Some(Component {
        held_by: HeldBy::Tensors,
        name: format!("denoiser weights: {}, the other experts", denoiser.model).into(),
        category: Category::Persistent,
        bytes: Bytes(bytes),
        provenance: Provenance::Formula,
        formula: formula!("{more} more experts × {one} (a copy of the denoiser's weights each)"),
        source: Some(
            "diffusers WanPipeline: transformer and transformer_2 (boundary_ratio), one \
             running at a time"
                .into(),
        ),
    }))
}

/// The pipeline as it was moved to the device before its weights were cast or quantized
/// (`loaded_on_device` beside `loaded_as`, layerwise casting or a quantizer applied after
/// loading): every model's parameters in the pipeline's load type, `loaded_as` or its `weights`;
/// a format a quantizer applied while loading stays as stored. The component is what that
/// load held beyond `stored`, the persistent bytes sampling keeps; `None` when nothing was cast
/// after the move.
fn as_loaded(
    program: &Layered<'_>,
    diffusion: &Diffusion,
    stored: Bytes,
) -> Result<Option<Component>, Overflow> {
    let preparation = diffusion.preparation;
    if !preparation.loaded_on_device || diffusion.offload != DiffusionOffload::None {
        return Ok(None);
    }
    let mut models: Vec<(&str, WeightFormat)> = diffusion
        .text_encoders
        .iter()
        .map(String::as_str)
        .zip(diffusion.text_encoder_weights.iter().copied())
        .collect();
    for _ in 0..diffusion.denoiser.experts {
        models.push((&diffusion.denoiser.model, diffusion.denoiser.weights));
    }
    if let Some(vae) = &diffusion.vae {
        models.push((vae, diffusion.vae_weights));
    }
    let mut params = 0u64;
    let mut loaded = Bytes::ZERO;
    let mut load_type = None;
    for (model, format) in models {
        let Some(count) = parameter_count(program, model) else { continue };
        let precision = format.matrix(crate::quant::Matrix::Up, 0, 1, 1);
        let quantized_on_load = preparation.quantize_on_load && !precision.is_float_compute();
        // The pipeline's `weights` are its load type unless `loaded_as` says (as in `weights`).
        let load = if quantized_on_load {
            precision
        } else {
            preparation.loaded_as.unwrap_or_else(|| diffusion.vae_weights.companion())
        };
        let then = Product::new()
            .times(count, "params")?
            .bytes_each(load.bytes_per_element(), load.name())?;
        params = params.checked_add(count).ok_or(Overflow)?;
        loaded = calc::add(loaded, then.value()?)?;
        load_type.get_or_insert(load);
    }
    let Some(extra) = loaded.0.checked_sub(stored.0).filter(|extra| *extra > 0) else {
        return Ok(None);
    };
    let load = load_type.map_or_else(|| "its load type".into(), Precision::name);
    let mut params_text = String::new();
    crate::bytes::write_thousands(&mut params_text, params);
    Ok(Some(Component {
        held_by: HeldBy::Tensors,
        name: "weights as loaded, before the cast".into(),
        category: Category::Intermediate,
        bytes: Bytes(extra),
        provenance: Provenance::Formula,
        formula: formula!(
            "{params_text} params resident as loaded, {load} ({loaded}), less the {stored} they \
             keep once cast"
        ),
        source: Some(
            "moved to the device (`.to(\"cuda\")`) before `enable_layerwise_casting`, `.to(dtype)` \
             or a quantizer: every model resident in its load type first"
                .into(),
        ),
    }))
}

/// The precision of a model's keep-in-fp32 parameters when the rest is stored in `precision`,
/// the pipeline loads in `load`, and `on_load` says a quantizer was applied while loading.
/// transformers (and diffusers, for its own models) keep `_keep_in_fp32_modules` in fp32 when a
/// model is loaded with `torch_dtype=torch.float16` or through a quantizer that asks for it, as
/// the bitsandbytes ones do (`modeling_utils.py`: `use_keep_in_fp32_modules = ... and
/// (torch_dtype == torch.float16 or hasattr(hf_quantizer, "use_keep_in_fp32_modules"))`; the
/// bitsandbytes 4-bit and 8-bit quantizers set `use_keep_in_fp32_modules = True`).
/// Every quantizer applied while loading is also handed the model's `_keep_in_fp32_modules`
/// (`hf_quantizer.preprocess_model(..., keep_in_fp32_modules=model._keep_in_fp32_modules)`
/// since transformers' loading rewrite of 2025), and torchao's and quanto's add them to
/// `modules_to_not_convert`: those parameters stay at the load dtype (fp32 under an fp16 load).
/// A bf16 load converts them like any other layer, and so do quantizers applied after loading
/// (optimum-quanto `quantize`, torchao `quantize_`) and a cast to fp16 after a bf16 load
/// (`.to(torch.float16)` casts every parameter).
fn kept_precision(precision: Precision, load: Precision, on_load: bool) -> Option<Precision> {
    match precision {
        p if p.keeps_fp32_modules() => Some(Precision::Fp32),
        p if on_load && !p.is_float_compute() && !matches!(p, Precision::Ggml(_)) => {
            Some(if load == Precision::Fp16 { Precision::Fp32 } else { load })
        }
        _ => None,
    }
}

/// The tensors one transformer step holds at its peak, in the order they are created, per token
/// of the guided batch. Generic, a block that runs its attention and then its MLP: the block's
/// input, the residual after the attention, the attention's output and the MLP's normalised
/// input ([`step_narrow_tensors`], hidden each) and the MLP's input and output (its inner width
/// each, 4 × hidden unless `ffn` says), as the activation formula counts them. With fp32 rotary
/// embeddings,
/// the FLUX single-stream block at its key's rotation ([`rope_fp32`]): the previous block's
/// output, the concatenated residual, the norm (hidden each), the MLP's GELU output (4 ×
/// hidden), the rotated query, the key and the value (hidden each), the key's rotated copy
/// (hidden), and three fp32 tensors of the key's size.
fn transformer_step_tensors(diffusion: &Diffusion) -> Result<Vec<Bytes>, Overflow> {
    let guided = diffusion.cfg.batch_factor();
    let tokens = diffusion.tokens().ok_or(Overflow)?;
    let width = |values: u64, element: Ratio| {
        Product::new()
            .times(diffusion.batch, "batch")?
            .times(guided, "(guidance)")?
            .times(tokens, "tokens")?
            .times(values, "width")?
            .bytes_each(element, "")?
            .value()
    };
    let element = diffusion.denoiser.weights.companion().bytes_per_element();
    let hidden = diffusion.denoiser.hidden;
    let narrow = width(hidden, element)?;
    let wide = width(diffusion.denoiser.mlp_width(), element)?;
    Ok(match diffusion.denoiser.rope {
        Rope::None => {
            let count = usize::try_from(step_narrow_tensors(Rope::None)).unwrap_or(0);
            let mut held = vec![narrow; count];
            held.extend([wide, wide]);
            held
        }
        Rope::Fp32 => {
            let fp32 = width(hidden, Ratio::int(4))?;
            let mut held = vec![narrow, narrow, narrow, wide, narrow, narrow, narrow, narrow];
            held.extend([fp32; 3]);
            held
        }
    })
}

/// The tensors of the hidden width a transformer step holds beside its MLP's two: a block that
/// runs its attention and then its MLP (SD3's, PixArt's, CogVideoX's, Wan's, Mochi's blocks in
/// diffusers) holds the block's input (the model's loop keeps it until the block returns), the
/// residual after the attention, the attention's output (still named) and the MLP's normalised
/// input: 4. Counted on diffusers' own blocks on the CPU (the storage counter of
/// `tools/decode-peak.py` around a two-block model, the difference between two token counts):
/// 5.0 for SD3, 4.2 for Wan 2.1 (its rotary table of complex values the rest), 4.7 for
/// CogVideoX-5b, 6.0 for Mochi (its fp32 rotary tables beside). With fp32 rotary embeddings the
/// FLUX single-stream block is counted instead, 2 here and its own tensors in
/// [`rope_fp32`].
fn step_narrow_tensors(rope: Rope) -> u64 {
    match rope {
        Rope::None => 4,
        Rope::Fp32 => 2,
    }
}

/// Bytes per token and hidden unit of fp32 rotary position embeddings applied to the key of a
/// FLUX single-stream block, beside the block's generic tensors (diffusers
/// `models/embeddings.py` `apply_rotary_emb`, `transformers/transformer_flux.py`
/// `FluxAttnProcessor` and `FluxSingleTransformerBlock`, read at 58eb52c). The block computes
/// its MLP's GELU output before the attention and keeps it, so the attention's query, key and
/// value join the previous block's output, the concatenated residual, its norm and that 4 ×
/// hidden output: 10 × hidden. `apply_rotary_emb` then builds the rotated copy
/// `torch.stack([-x_imag, x_real])` in the key's dtype and evaluates `x.float() * cos +
/// x_rotated.float() * sin`: at its addition three fp32 tensors of the key's size are alive
/// (the two products and their sum; before it, a product, a cast copy and the other product).
/// An fp32 key gives the same count: `.float()` returns the tensor itself, and the two products
/// and the sum are new. RMSNorm of the query and key peaks lower (its fp32 copy and square of
/// one tensor), and so does the output projection's concatenated input (5 × hidden beside the
/// kept tensors). Under torch.compile Inductor may fuse the pointwise rotation and never hold
/// the fp32 tensors; the field describes eager execution.
fn rope_fp32(element: Ratio) -> Option<Ratio> {
    element.checked_add(Ratio::int(3 * 4))
}

/// The decoder's shape: a tiled decode runs it on one tile at a time (diffusers'
/// `tiled_decode`, tiles of `tile_sample_min_size` pixels, clipped by the image; an image no
/// larger than a tile is decoded whole), frames decode as a batch of images.
fn decoder_shape(diffusion: &Diffusion) -> DecoderShape {
    let batch = diffusion.decode_batch();
    let (height, width, images) = if let Some((tile_w, tile_h)) = diffusion.vae_tile {
        (diffusion.height.min(tile_h), diffusion.width.min(tile_w), batch)
    } else {
        (diffusion.height, diffusion.width, batch.saturating_mul(diffusion.frames))
    };
    DecoderShape {
        images,
        height,
        width,
        base_channels: diffusion.vae_channels,
        element: decode_precision(diffusion).bytes_per_element(),
    }
}

/// A video pipeline's causal 3D decoder and the decode it runs.
enum VideoDecode {
    CogVideoX(VideoShape),
    Wan(VideoLatents),
    Hunyuan(VideoLatents),
    Ltx(VideoLatents, LtxVae),
    Mochi(VideoLatents),
}

/// The 3D decoder's shape for a video pipeline (`video_frames`). Wan's, HunyuanVideo's and
/// LTX-Video's replays tile it themselves; CogVideoX's is given the whole frame, or one tile of
/// at most `vae_tile` pixels while the other tiles' decoded frames are held (diffusers
/// `AutoencoderKLCogVideoX.tiled_decode` decodes every tile's frame batches and keeps every
/// decoded tile, then blends them).
fn video_shape(diffusion: &Diffusion) -> Option<VideoDecode> {
    let video = diffusion.video?;
    let element = decode_precision(diffusion).bytes_per_element();
    let latents = || VideoLatents {
        videos: diffusion.decode_batch(),
        latent_frames: diffusion.frames,
        height: diffusion.height,
        width: diffusion.width,
        tile: diffusion.vae_tile.map(|(width, height)| (height, width)),
        base_channels: diffusion.vae_channels,
        element,
    };
    match video.decoder {
        VideoDecoder::Hunyuan => return Some(VideoDecode::Hunyuan(latents())),
        VideoDecoder::Wan => return Some(VideoDecode::Wan(latents())),
        VideoDecoder::Ltx(version) => return Some(VideoDecode::Ltx(latents(), version)),
        VideoDecoder::Mochi => return Some(VideoDecode::Mochi(latents())),
        VideoDecoder::CogVideoX => {}
    }
    let (height, width, other_tiles) = match diffusion.vae_tile {
        Some((tile_w, tile_h)) if diffusion.width > tile_w || diffusion.height > tile_h => (
            diffusion.height.min(tile_h),
            diffusion.width.min(tile_w),
            vae_video::other_tiles(diffusion.height, diffusion.width, tile_h, tile_w),
        ),
        _ => (diffusion.height, diffusion.width, 0),
    };
    Some(VideoDecode::CogVideoX(VideoShape {
        videos: diffusion.batch,
        latent_frames: diffusion.frames,
        temporal: video.temporal,
        height,
        width,
        base_channels: diffusion.vae_channels,
        element,
        other_tiles,
        caches_replaced: video.caches == crate::hir::VaeCaches::Replaced,
    }))
}

/// Replays the decode through `alloc`: the causal 3D decoder's frame batches for a video, else
/// the 2D decoder over every image (or tile). Gives the decoded plane, height and width.
fn replay_decode(
    alloc: &mut CachingAllocator,
    diffusion: &Diffusion,
) -> Result<(u64, u64), Overflow> {
    match video_shape(diffusion) {
        Some(VideoDecode::CogVideoX(shape)) => {
            vae_video::replay(alloc, &shape)?;
            Ok((shape.height, shape.width))
        }
        Some(VideoDecode::Wan(shape)) => {
            vae_wan::replay(alloc, &shape)?;
            Ok((shape.height, shape.width))
        }
        Some(VideoDecode::Hunyuan(shape)) => {
            vae_hunyuan::replay(alloc, &shape)?;
            Ok((shape.height, shape.width))
        }
        Some(VideoDecode::Ltx(shape, version)) => {
            vae_ltx::replay(alloc, &shape, version)?;
            Ok((shape.height, shape.width))
        }
        Some(VideoDecode::Mochi(shape)) => {
            vae_mochi::replay(alloc, &shape)?;
            Ok((shape.height, shape.width))
        }
        None if diffusion.image_vae == ImageVae::DcAe => {
            let shape = dc_shape(diffusion);
            vae_dc::replay(alloc, &shape)?;
            Ok((shape.height, shape.width))
        }
        None => {
            let shape = decoder_shape(diffusion);
            vae_decode::replay(alloc, &shape)?;
            Ok((shape.height, shape.width))
        }
    }
}

/// Under `vae_slicing`, the images (or videos) decoded before the last one, held until the
/// batch is concatenated (diffusers `AutoencoderKL.decode`: `decoded_slices = [self._decode(
/// z_slice).sample for z_slice in z.split(1)]`, then `torch.cat`): 3 channels at the output's
/// size each, in the decoder's type.
fn sliced_outputs(diffusion: &Diffusion) -> Result<Option<Component>, Overflow> {
    let earlier = diffusion.batch.saturating_sub(1);
    if !diffusion.vae_slicing || earlier == 0 {
        return Ok(None);
    }
    let frames = diffusion.video.map_or(diffusion.frames, |video| video.frames);
    let element = decode_precision(diffusion);
    let product = Product::new()
        .times(earlier, "earlier slices")?
        .times(frames, "frames")?
        .times(diffusion.width * diffusion.height, "pixels")?
        .times(3, "channels")?
        .bytes_each(element.bytes_per_element(), element.name())?;
    Ok(Some(formula(
        "decoded images of the earlier slices",
        Category::Intermediate,
        product,
        "diffusers AutoencoderKL.decode under enable_slicing: each slice's output is kept for \
         the final torch.cat",
    )?))
}

/// The precision the decoder computes in: fp32 when the pipeline upcasts the VAE for the decode
/// ([`vae_upcast`]), else the VAE's.
fn decode_precision(diffusion: &Diffusion) -> Precision {
    if diffusion.vae_upcast { Precision::Fp32 } else { diffusion.vae_weights.companion() }
}

/// What upcasting an fp16 VAE for the decode adds to the decode phase: 2 B more per parameter
/// (4 B fp32 in place of 2 B fp16) for the parameters not already kept in fp32.
///
/// diffusers' SDXL pipelines (`pipeline_stable_diffusion_xl.py` and its img2img and inpaint
/// siblings, read at 58eb52c) compute `needs_upcasting = self.vae.dtype == torch.float16 and
/// self.vae.config.force_upcast` before the decode, call `upcast_vae()`, which is
/// `self.vae.to(dtype=torch.float32)` (the whole autoencoder, encoder included), decode, and
/// cast back with `self.vae.to(dtype=torch.float16)`. `Module.to` converts one parameter at a
/// time (`torch/nn/modules/module.py` `_apply`: `param_applied = fn(param)`, then
/// `param.data = param_applied` or a new `Parameter` in its place, which drops the fp16 storage
/// before the next parameter is converted), so both copies of the whole VAE never exist at
/// once: during the decode only the fp32 copy does, and the phase holds 4 B per parameter. At
/// the conversion itself one parameter is held in both precisions (the largest, a 512 × 512 × 3
/// × 3 kernel at c = 128, 4.5 MiB in fp16) before any decoder tensor exists, far below the
/// decode's peak. The freed fp16 storages stay in the allocator's cache (blocks of at most
/// 4.5 MiB, which the decoder's tensors at 1024², 32 MiB and more in fp32, cannot reuse); that
/// reserved remainder, at most 2 B per parameter, is not replayed.
fn vae_upcast(program: &Layered<'_>, diffusion: &Diffusion) -> Result<Option<Component>, Overflow> {
    let Some(vae) = diffusion.vae.as_deref().filter(|_| diffusion.vae_upcast) else {
        return Ok(None);
    };
    let Some(params) = parameter_count(program, vae) else { return Ok(None) };
    let kept = program.model(vae).and_then(|found| found.keep_in_fp32).unwrap_or(0).min(params);
    let product = Product::new()
        .times(params - kept, "params")?
        .bytes_each(Ratio::int(4 - 2), "fp32 4 B in place of fp16 2 B")?;
    formula(
        format!("VAE upcast to fp32 for the decode: {vae}"),
        Category::Intermediate,
        product,
        "diffusers SDXL pipelines: `upcast_vae()` (`self.vae.to(dtype=torch.float32)`) when the \
         VAE is fp16 and its config says `force_upcast`; cast back after the decode \
         (eval/diffusion.rs)",
    )
    .map(Some)
}

/// What the caching allocator holds beyond the largest phase's live tensors once the decode
/// has run: the denoising step's freed blocks (a transformer step's tensors; a UNet step's are
/// not derived and left out) stay cached, serve the decoder's tensors they can hold, and every
/// decoder stage whose tensors no cached block holds adds segments of its own
/// (`allocator.rs`, `vae_decode.rs`). The allocated view never sees it.
///
/// `upcast` is what the fp32 copy of an upcast VAE adds at the decode ([`vae_upcast`]): live
/// beside the replayed tensors and part of `allocated_peak` when the decode is the largest phase.
///
/// `step_cached` is false when the step's blocks were returned before the decode: accelerate's
/// `CpuOffload` hook calls `torch.cuda.empty_cache()` right after it offloads the previous model
/// (`clear_device_cache`, since accelerate 0.34), so under model offload the decode starts from
/// an empty cache.
///
/// Beside the component, what of the reserved peak a device without room gets back: the same
/// sequence replayed by a pressed allocator (`allocator.rs`) reserves less, because the segments
/// of the step and of the earlier stages go back to the driver when a later stage needs room.
fn decode_cache(
    diffusion: &Diffusion,
    allocated_peak: Bytes,
    upcast: Bytes,
    step_cached: bool,
) -> Result<Option<(Component, Bytes)>, Overflow> {
    if diffusion.vae.is_none() {
        return Ok(None);
    }
    let step = if diffusion.denoiser.unet || !step_cached {
        None
    } else {
        Some(transformer_step_tensors(diffusion)?)
    };
    let replayed = |mut alloc: CachingAllocator| -> Result<(Bytes, (u64, u64)), Overflow> {
        if let Some(step) = &step {
            let held: Vec<_> =
                step.iter().map(|bytes| alloc.alloc(*bytes)).collect::<Result<_, _>>()?;
            for tensor in held {
                alloc.free(tensor);
            }
        }
        let plane = replay_decode(&mut alloc, diffusion)?;
        Ok((alloc.peak_reserved(), plane))
    };
    let (reserved, (height, width)) = replayed(CachingAllocator::new())?;
    let (pressed, _) = replayed(CachingAllocator::pressed())?;
    let releasable = Bytes(reserved.0.saturating_sub(pressed.0));
    let at_decode = calc::sum([reserved, upcast])?;
    let Some(extra) = at_decode.0.checked_sub(allocated_peak.0).filter(|extra| *extra > 0) else {
        return Ok(None);
    };
    let upcast = if upcast > Bytes::ZERO {
        formula!(", with the {upcast} the VAE's fp32 copy adds,")
    } else {
        ",".to_string()
    };
    let cached = match &step {
        Some(step) => formula!(
            "the denoising step's freed blocks ({}), then ",
            step.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        ),
        None => String::new(),
    };
    let component = Component {
        held_by: HeldBy::AllocatorCache,
        name: if step.is_some() {
            "allocator cache (denoising step and VAE decode stages)"
        } else {
            "allocator cache (VAE decode stages)"
        }
        .into(),
        category: Category::Workspace,
        bytes: Bytes(extra),
        provenance: Provenance::Formula,
        formula: formula!(
            "{reserved} reserved by replaying {cached}the decoder's tensors from {} × {} latents \
             to {} × {} pixels through the caching allocator{upcast} less the \
             {allocated_peak} the largest phase holds live",
            height / latent_factor(diffusion),
            width / latent_factor(diffusion),
            height,
            width,
        ),
        source: Some(
            if diffusion.video.is_some_and(|v| v.decoder == VideoDecoder::Wan) {
                "PyTorch CUDACachingAllocator (best fit, 2 MiB rounding, no merging across \
                 segments); diffusers AutoencoderKLWan decoder (vae_wan.rs)"
            } else if diffusion.video.is_some_and(|v| matches!(v.decoder, VideoDecoder::Ltx(_))) {
                "PyTorch CUDACachingAllocator (best fit, 2 MiB rounding, no merging across \
                 segments); diffusers AutoencoderKLLTXVideo decoder (vae_ltx.rs)"
            } else if diffusion.video.is_some_and(|v| v.decoder == VideoDecoder::Mochi) {
                "PyTorch CUDACachingAllocator (best fit, 2 MiB rounding, no merging across \
                 segments); diffusers AutoencoderKLMochi decoder (vae_mochi.rs)"
            } else if diffusion.video.is_some_and(|v| v.decoder == VideoDecoder::Hunyuan) {
                "PyTorch CUDACachingAllocator (best fit, 2 MiB rounding, no merging across \
                 segments); diffusers AutoencoderKLHunyuanVideo decoder (vae_hunyuan.rs)"
            } else if diffusion.video.is_some() {
                "PyTorch CUDACachingAllocator (best fit, 2 MiB rounding, no merging across \
                 segments); diffusers AutoencoderKLCogVideoX decoder (vae_video.rs)"
            } else {
                "PyTorch CUDACachingAllocator (best fit, 2 MiB rounding, no merging across \
                 segments); diffusers AutoencoderKL Decoder (vae_decode.rs)"
            }
            .into(),
        ),
    };
    Ok(Some((component, releasable)))
}

/// Pixels per latent on a side: LTX-Video's VAE folds 32 × 32, the others 8 × 8.
fn latent_factor(diffusion: &Diffusion) -> u64 {
    match diffusion.video.map(|v| v.decoder) {
        Some(VideoDecoder::Ltx(_)) => vae_ltx::SPATIAL_FACTOR,
        None if diffusion.image_vae == ImageVae::DcAe => vae_dc::SPATIAL_FACTOR,
        _ => vae_decode::SPATIAL_FACTOR,
    }
}

/// Sana's deep-compression decoder over the decoded images (one at a time under
/// `vae_slicing`), whole or in tiles.
fn dc_shape(diffusion: &Diffusion) -> DcShape {
    DcShape {
        images: diffusion.decode_batch().saturating_mul(diffusion.frames),
        height: diffusion.height,
        width: diffusion.width,
        base_channels: diffusion.vae_channels,
        element: decode_precision(diffusion).bytes_per_element(),
        tile: diffusion.vae_tile.map(|(width, height)| (height, width)),
    }
}

/// The deep-compression decoder's allocated peak, its tensors replayed (`vae_dc.rs`).
fn dc_decode_peak(diffusion: &Diffusion) -> Result<Component, Overflow> {
    let shape = dc_shape(diffusion);
    let mut alloc = CachingAllocator::new();
    vae_dc::replay(&mut alloc, &shape)?;
    let tiles = match shape.tile {
        Some((height, width)) if shape.height > height || shape.width > width => {
            formula!(
                " in tiles of {width} × {height} pixels every 7/8 of a tile, kept until joined,"
            )
        }
        _ => String::new(),
    };
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "VAE decode peak".into(),
        category: Category::Intermediate,
        bytes: alloc.peak_allocated(),
        provenance: Provenance::Formula,
        formula: formula!(
            "the largest live tensors of decoding {} image(s) of {} × {} pixels from 32 × 32-pixel \
             latents{tiles} with the DC-AE decoder, {} channels at the output's level, {} B each, \
             its RMS norms' fp32 copies, and the latents",
            shape.images,
            shape.width,
            shape.height,
            shape.base_channels,
            shape.element,
        ),
        source: Some(
            "diffusers AutoencoderDC (dc-ae-f32c32-sana-1.0): ResBlocks with RMS norms at the \
             three levels nearest the pixels, EfficientViT blocks below (vae_dc.rs)"
                .into(),
        ),
    })
}

/// The causal 3D decoder's allocated peak: its chunks replayed (`vae_video.rs`, `vae_wan.rs`).
fn video_decode_peak(decode: &VideoDecode) -> Result<Component, Overflow> {
    let shape = match decode {
        VideoDecode::CogVideoX(shape) => shape,
        VideoDecode::Wan(shape) => return wan_decode_peak(shape),
        VideoDecode::Hunyuan(shape) => return hunyuan_decode_peak(shape),
        VideoDecode::Ltx(shape, version) => return ltx_decode_peak(shape, *version),
        VideoDecode::Mochi(shape) => return mochi_decode_peak(shape),
    };
    let mut alloc = CachingAllocator::new();
    vae_video::replay(&mut alloc, shape)?;
    let first = shape
        .latent_frames
        .min(vae_video::FRAME_BATCH + shape.latent_frames % vae_video::FRAME_BATCH);
    let tile = if shape.other_tiles > 0 { formula!("a tile of ") } else { String::new() };
    let caches = if shape.caches_replaced {
        "each causal convolution's cache replacing the batch before's as it runs"
    } else {
        "the causal convolutions' caches of the batch before"
    };
    Ok(causal_decode_peak(
        alloc.peak_allocated(),
        formula!(
            "the largest live tensors of decoding {} latent frames to {tile}{} × {} pixels in \
             batches of {} ({first} first, {} frames out), {} channels at the base, {} B each, \
             with {caches}{}",
            shape.latent_frames,
            shape.width,
            shape.height,
            vae_video::FRAME_BATCH,
            vae_video::output_frames(first, shape.temporal),
            shape.base_channels,
            shape.element,
            if shape.other_tiles > 0 {
                formula!(" and the other tiles' {} pixels a frame, decoded", shape.other_tiles)
            } else {
                String::new()
            },
        ),
        "diffusers AutoencoderKLCogVideoX: CogVideoXDecoder3D over frame batches with causal \
         conv caches, spatial norms (vae_video.rs)",
    ))
}

/// A causal 3D decoder's allocated peak as a component.
fn causal_decode_peak(bytes: Bytes, formula: String, source: &'static str) -> Component {
    Component {
        held_by: HeldBy::Tensors,
        name: "VAE decode peak (causal 3D)".into(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula,
        source: Some(source.into()),
    }
}

/// Wan's decoder, one latent frame at a time: its allocated peak.
fn wan_decode_peak(shape: &VideoLatents) -> Result<Component, Overflow> {
    let mut alloc = CachingAllocator::new();
    vae_wan::replay(&mut alloc, shape)?;
    Ok(causal_decode_peak(
        alloc.peak_allocated(),
        formula!(
            "the largest live tensors of decoding {} latent frames to {} × {} pixels one latent \
             frame at a time ({} frames out), {} channels at the base, {} B each, with every \
             causal convolution's last two input frames cached and the video so far",
            shape.latent_frames,
            shape.width,
            shape.height,
            vae_wan::output_frames(shape.latent_frames),
            shape.base_channels,
            shape.element,
        ),
        "diffusers AutoencoderKLWan: WanDecoder3d per latent frame with CACHE_T = 2 causal conv \
         caches, RMS norms (vae_wan.rs)",
    ))
}

/// LTX-Video's decoder, every frame in one call: its allocated peak.
fn ltx_decode_peak(shape: &VideoLatents, version: LtxVae) -> Result<Component, Overflow> {
    let mut alloc = CachingAllocator::new();
    vae_ltx::replay(&mut alloc, shape, version)?;
    let release = match version {
        LtxVae::V090 => "0.9.0",
        LtxVae::V091 => "0.9.1",
        LtxVae::V095 => "0.9.5",
    };
    let component = causal_decode_peak(
        alloc.peak_allocated(),
        formula!(
            "the largest live tensors of decoding {} latent frames to {} × {} pixels in one call \
             ({} frames out) with LTX-Video {release}'s decoder, {} channels in its last up \
             block, {} B each, its norms' variance in fp32, and the latents",
            shape.latent_frames,
            shape.width,
            shape.height,
            vae_ltx::output_frames(shape.latent_frames),
            shape.base_channels,
            shape.element,
        ),
        "diffusers AutoencoderKLLTXVideo: LTXVideoDecoder3d over all the latents, not causal, \
         RMS norms, 2 × 2 × 2 upsamplers (vae_ltx.rs)",
    );
    Ok(Component { name: "VAE decode peak (3D)".into(), ..component })
}

/// Mochi's decoder, every frame in one call (tile by tile under `vae_tiling`): its allocated
/// peak.
fn mochi_decode_peak(shape: &VideoLatents) -> Result<Component, Overflow> {
    let mut alloc = CachingAllocator::new();
    vae_mochi::replay(&mut alloc, shape)?;
    let tiles = match shape.tile {
        Some((height, width)) if shape.height > height || shape.width > width => formula!(
            " in tiles of {width} × {height} pixels every three quarters of a tile, every tile \
             kept until they are joined,"
        ),
        _ => String::new(),
    };
    let component = causal_decode_peak(
        alloc.peak_allocated(),
        formula!(
            "the largest live tensors of decoding {} latent frames to {} × {} pixels in one call \
             ({} frames out, {} decoded){tiles} with Mochi's decoder, {} channels in its last \
             block, {} B each, its convolutions' padded inputs, and the latents",
            shape.latent_frames,
            shape.width,
            shape.height,
            vae_mochi::output_frames(shape.latent_frames),
            shape.latent_frames * vae_mochi::TEMPORAL_FACTOR,
            shape.base_channels,
            shape.element,
        ),
        "diffusers AutoencoderKLMochi: MochiDecoder3D over all the latents, replicate-padded \
         CogVideoXSafeConv3d convolutions, chunked group norms (vae_mochi.rs)",
    );
    Ok(Component { name: "VAE decode peak (3D)".into(), ..component })
}

/// HunyuanVideo's decoder, chunk by chunk (tile by tile under `vae_tiling`): its allocated
/// peak.
fn hunyuan_decode_peak(shape: &VideoLatents) -> Result<Component, Overflow> {
    let mut alloc = CachingAllocator::new();
    vae_hunyuan::replay(&mut alloc, shape)?;
    let chunks = vae_hunyuan::chunks(shape.latent_frames);
    let tiles = match shape.tile {
        Some((height, width)) if shape.height > height || shape.width > width => {
            formula!(
                " in tiles of {width} × {height} pixels every three quarters of a tile, every tile kept until they are joined,"
            )
        }
        _ => String::new(),
    };
    Ok(causal_decode_peak(
        alloc.peak_allocated(),
        formula!(
            "the largest live tensors of decoding {} latent frames to {} × {} pixels in {} \
             chunks of up to {} latent frames ({} frames out each){tiles} with the causal \
             attention mask over a chunk's positions, {} channels at the base, {} B each, and \
             the chunks decoded before",
            shape.latent_frames,
            shape.width,
            shape.height,
            chunks.len(),
            chunks.iter().max().copied().unwrap_or(0),
            vae_hunyuan::output_frames(chunks.iter().max().copied().unwrap_or(0)),
            shape.base_channels,
            shape.element,
        ),
        "diffusers AutoencoderKLHunyuanVideo: _temporal_tiled_decode over chunks of 5 latent \
         frames every 3, HunyuanVideoDecoder3D with prepare_causal_attention_mask \
         (vae_hunyuan.rs)",
    ))
}

pub(crate) fn components(
    program: &Layered<'_>,
    diffusion: &Diffusion,
) -> Result<Vec<Component>, Overflow> {
    let elem = diffusion.denoiser.weights.companion();
    let guided = diffusion.cfg.batch_factor();
    let mut encode = Vec::new();
    for (encoder, format) in diffusion.text_encoders.iter().zip(&diffusion.text_encoder_weights) {
        encode.extend(weights(program, diffusion, encoder, *format, "text encoder")?);
    }
    let mut denoise = Vec::new();
    denoise.extend(denoiser_weights(program, diffusion, "denoiser")?);
    denoise.extend(fused_qkv(program, diffusion)?);
    let latent = (diffusion.width / 8) * (diffusion.height / 8) * diffusion.frames;
    let product = if diffusion.denoiser.unet {
        Product::new()
            .times(diffusion.batch, "batch")?
            .times(guided, "(guidance)")?
            .times(latent, "latent positions")?
            .times(diffusion.denoiser.hidden, "base channels")?
            .times(10, "live tensors")?
    } else {
        let tokens = diffusion.tokens().ok_or(Overflow)?;
        let narrow = step_narrow_tensors(diffusion.denoiser.rope);
        let product = Product::new()
            .times(diffusion.batch, "batch")?
            .times(guided, "(guidance)")?
            .times(tokens, "tokens (latent patches + text)")?;
        match diffusion.denoiser.ffn {
            None => product
                .times(diffusion.denoiser.hidden, "hidden")?
                .times(narrow + 8, formula!("({narrow} hidden-wide + 8 MLP) per token"))?,
            Some(ffn) => {
                let hidden = diffusion.denoiser.hidden;
                let values = hidden
                    .checked_mul(narrow)
                    .and_then(|h| h.checked_add(ffn.checked_mul(2)?))
                    .ok_or(Overflow)?;
                product.times(
                    values,
                    formula!("({narrow} × {hidden} hidden-wide + 2 × {ffn} MLP) per token"),
                )?
            }
        }
    };
    let product = product.bytes_each(elem.bytes_per_element(), elem.name())?;
    denoise.push(formula(
        "denoiser activations (one block)",
        Category::Intermediate,
        product,
        "DOMAIN.md §7.1 latent sizing; derived, see eval/diffusion.rs",
    )?);
    denoise.extend(unfused_attention(diffusion, guided, elem)?);
    if !diffusion.denoiser.unet && diffusion.denoiser.rope == Rope::Fp32 {
        let tokens = diffusion.tokens().ok_or(Overflow)?;
        let per_unit = rope_fp32(elem.bytes_per_element()).ok_or(Overflow)?;
        let product = Product::new()
            .times(diffusion.batch, "batch")?
            .times(guided, "(guidance)")?
            .times(tokens, "tokens")?
            .times(diffusion.denoiser.hidden, "hidden")?
            .bytes_each(
                per_unit,
                formula!("(the key's rotated copy in {} + 3 fp32 tensors × 4 B)", elem.name()),
            )?;
        denoise.push(formula(
            "denoiser activations (fp32 rotary embedding)",
            Category::Intermediate,
            product,
            "diffusers apply_rotary_emb in FluxAttnProcessor: `x.float() * cos + \
             x_rotated.float() * sin` on the key, beside the single-stream block's 10 × hidden \
             (eval/diffusion.rs)",
        )?);
    }
    let others: Vec<Component> = other_experts(program, diffusion)?.into_iter().collect();
    let mut decode = Vec::new();
    let upcast = vae_upcast(program, diffusion)?;
    let upcast_bytes = upcast.as_ref().map_or(Bytes::ZERO, |c| c.bytes);
    if let Some(vae) = &diffusion.vae {
        decode.extend(weights(program, diffusion, vae, diffusion.vae_weights, "VAE")?);
        // Sequential and group offload upcast module by module (`parts`): no whole fp32 copy.
        if !diffusion.offload.moves_parts() {
            decode.extend(upcast);
        }
        if let Some(shape) = video_shape(diffusion) {
            decode.push(video_decode_peak(&shape)?);
        } else if diffusion.image_vae == ImageVae::DcAe {
            decode.push(dc_decode_peak(diffusion)?);
        } else {
            let pixels = if let Some((tile_w, tile_h)) = diffusion.vae_tile {
                diffusion.width.min(tile_w) * diffusion.height.min(tile_h)
            } else {
                diffusion.width * diffusion.height * diffusion.frames
            };
            let vae_elem = decode_precision(diffusion);
            let product = Product::new()
                .times(
                    diffusion.decode_batch(),
                    if diffusion.vae_slicing { "image (sliced)" } else { "batch" },
                )?
                .times(
                    pixels,
                    if diffusion.vae_tile.is_some() { "pixels of a tile" } else { "pixels" },
                )?
                .times(
                    vae_decode::PEAK_QUARTERS,
                    "quarter-tensors (the last upsample's input 1, its nearest copy 4, its \
                     convolution's output 4, cuDNN's NHWC copies of those two 8)",
                )?
                .times(2 * diffusion.vae_channels, "(2 × base channels)")?
                .bytes_each(vae_elem.bytes_per_element(), vae_elem.name())?
                .divided(4, "quarters")?;
            decode.push(formula(
                "VAE decode peak",
                Category::Intermediate,
                product,
                "diffusers AutoencoderKL Decoder: the convolution of the Upsample2D into full \
                 resolution, with cuDNN's NCHW-to-NHWC workspace (vae_decode.rs, vae_blocks.rs)",
            )?);
        }
        decode.extend(sliced_outputs(diffusion)?);
    }
    if let Some(control) = &diffusion.controlnet {
        // Model offload hooks a ControlNet on its own, outside the pipeline's chain (it is
        // called at every step): it moves in at its first call and stays until the pipeline
        // frees its hooks at the end, through the decode (diffusers `enable_model_cpu_offload`).
        let resident =
            weights(program, diffusion, &control.model, diffusion.vae_weights, "ControlNet")?;
        if diffusion.offload == DiffusionOffload::None {
            denoise.extend(resident);
        } else {
            denoise.extend(resident.iter().cloned());
            decode.extend(resident);
        }
        denoise.extend(control_outputs(diffusion, control, elem, false)?);
    }
    let mut placed = match diffusion.offload {
        DiffusionOffload::None => {
            // Every model resident; the largest phase's transient on top.
            let mut out: Vec<Component> = Vec::new();
            let transient = |phase: &[Component]| {
                calc::sum(
                    phase.iter().filter(|c| c.category == Category::Intermediate).map(|c| c.bytes),
                )
            };
            let denoise_peak = transient(&denoise)?;
            let decode_peak = transient(&decode)?;
            for phase in [&encode, &denoise, &decode] {
                out.extend(phase.iter().filter(|c| c.category == Category::Persistent).cloned());
            }
            out.extend(others);
            let winner = if decode_peak > denoise_peak { &decode } else { &denoise };
            let winner_peak = decode_peak.max(denoise_peak);
            // Loaded whole before a cast, the pipeline held its load type's weights once: the
            // peak when they outweigh the stored weights by more than sampling's transients.
            let stored = calc::sum(out.iter().map(|c| c.bytes))?;
            let allocated_peak = match as_loaded(program, diffusion, stored)? {
                Some(load) if load.bytes > winner_peak => {
                    let bytes = load.bytes;
                    out.push(load);
                    bytes
                }
                _ => {
                    out.extend(
                        winner.iter().filter(|c| c.category == Category::Intermediate).cloned(),
                    );
                    winner_peak
                }
            };
            out.extend(
                decode_cache(diffusion, allocated_peak, upcast_bytes, true)?
                    .map(split_releasable)
                    .unwrap_or_default(),
            );
            out
        }
        DiffusionOffload::Model { loaded_on_device } => offloaded(
            diffusion,
            [encode, denoise, decode],
            upcast_bytes,
            loaded_on_device.then_some(others),
        )?,
        DiffusionOffload::Sequential { loaded_on_device } => parts(
            program,
            diffusion,
            &[encode, denoise, decode],
            Parts::Modules { buffers_stay: true, at_once: 1 },
            loaded_on_device.then_some(others),
        )?,
        DiffusionOffload::Group { per_group, stream, loaded_on_device } => {
            let at_once = if stream { 2 } else { 1 };
            let moved = if per_group == 0 {
                Parts::Modules { buffers_stay: false, at_once }
            } else {
                Parts::Blocks { per_group, at_once }
            };
            parts(
                program,
                diffusion,
                &[encode, denoise, decode],
                moved,
                loaded_on_device.then_some(others),
            )?
        }
    };
    // diffusers keeps the safety checker on the device under every offload
    // (`_exclude_from_cpu_offload = ["safety_checker"]`: `model.to(device)` in
    // `enable_model_cpu_offload` and `enable_sequential_cpu_offload`).
    if let Some(checker) = &diffusion.safety_checker {
        placed.extend(weights(
            program,
            diffusion,
            checker,
            diffusion.vae_weights,
            "safety checker",
        )?);
    }
    Ok(placed)
}

/// What a ControlNet leaves beside the denoiser's step: its outputs, which the pipeline holds
/// while the denoiser runs and adds them to its own (diffusers `StableDiffusionControlNetPipeline`:
/// `down_block_res_samples, mid_block_res_sample = self.controlnet(...)`, then
/// `self.unet(..., down_block_additional_residuals=..., mid_block_additional_residual=...)`),
/// and the conditioning image, prepared once at the pipeline's size for the guided batch.
/// `trained`: the ControlNet trains, and the training loop holds both through the backward pass
/// (diffusers `train_controlnet.py`).
pub(super) fn control_outputs(
    diffusion: &Diffusion,
    control: &ControlNet,
    elem: Precision,
    trained: bool,
) -> Result<Vec<Component>, Overflow> {
    let guided = diffusion.cfg.batch_factor();
    let (values, label, source) = match &control.outputs {
        ControlOutputs::Unet { channel_mult, layers_per_block } => {
            let plane = |level: usize| -> Result<u64, Overflow> {
                let shift = u32::try_from(level).map_err(|_| Overflow)?;
                let side =
                    1u64.checked_shl(shift).and_then(|s| s.checked_mul(8)).ok_or(Overflow)?;
                (diffusion.width / side).checked_mul(diffusion.height / side).ok_or(Overflow)
            };
            let channels =
                |level: usize| diffusion.denoiser.hidden.saturating_mul(channel_mult[level]);
            // `conv_in`'s output, then each level's ResNet outputs and (but the last level's)
            // its downsampler's at the next level's size, then the mid block's.
            let mut sum = channels(0).checked_mul(plane(0)?).ok_or(Overflow)?;
            let last = channel_mult.len() - 1;
            for level in 0..=last {
                let resnets = layers_per_block.checked_mul(channels(level));
                let at = resnets.and_then(|c| c.checked_mul(plane(level).ok()?));
                sum = sum.checked_add(at.ok_or(Overflow)?).ok_or(Overflow)?;
                let next = if level < last { level + 1 } else { level };
                let extra = channels(level).checked_mul(plane(next)?).ok_or(Overflow)?;
                sum = sum.checked_add(extra).ok_or(Overflow)?;
            }
            (
                sum,
                formula!(
                    "down-block residuals (conv_in, {} ResNets and a downsampler a level, the mid block)",
                    layers_per_block
                ),
                "diffusers ControlNetModel.forward: down_block_res_samples and mid_block_res_sample, \
                 held while the UNet adds them",
            )
        }
        ControlOutputs::Transformer { blocks } => (
            diffusion
                .image_tokens()
                .and_then(|t| t.checked_mul(*blocks))
                .and_then(|t| t.checked_mul(diffusion.denoiser.hidden))
                .ok_or(Overflow)?,
            formula!(
                "{blocks} control blocks × image tokens × {} hidden",
                diffusion.denoiser.hidden
            ),
            "diffusers FluxControlNetModel / SD3ControlNetModel: one block sample per control \
             block, held while the transformer adds them",
        ),
    };
    let outputs = Product::new()
        .times(diffusion.batch, "batch")?
        .times(guided, "(guidance)")?
        .times(values, label)?
        .bytes_each(elem.bytes_per_element(), elem.name())?;
    let (source, image_source) = if trained {
        (
            "diffusers train_controlnet.py: down_block_res_samples and mid_block_res_sample, \
             bound until the next step",
            "diffusers train_controlnet.py: the batch's conditioning_pixel_values, the \
             conditioning embedding's input",
        )
    } else {
        (
            source,
            "diffusers prepare_image: the control image at the output's size, repeated for the \
             guided batch, on the device through the steps",
        )
    };
    let image = Product::new()
        .times(diffusion.batch, "batch")?
        .times(guided, "(guidance)")?
        .times(3, "colours")?
        .times(diffusion.width, "width")?
        .times(diffusion.height, "height")?
        .bytes_each(elem.bytes_per_element(), elem.name())?;
    Ok(vec![
        formula("ControlNet outputs", Category::Intermediate, outputs, source)?,
        formula("ControlNet conditioning image", Category::Intermediate, image, image_source)?,
    ])
}

/// A UNet's attention scores while sampling without a fused kernel, at the attention level
/// where they peak. diffusers' `Attention.get_attention_scores` (`AttnProcessor`,
/// `SlicedAttnProcessor`) runs `baddbmm` over an empty tensor of the scores' size, drops it,
/// and takes the softmax beside the scores: two score-sized tensors at once, in the compute
/// type, over `batch × heads` rows of `positions²` (all of them eagerly; `slice` at a time under
/// attention slicing, half of a layer's heads for `"auto"`, one for `"max"`). Level `i` of a
/// UNet has `(width / 8 / 2^i) × (height / 8 / 2^i)` positions; the mid block's attention is at
/// the deepest level.
fn unfused_attention(
    diffusion: &Diffusion,
    guided: u64,
    elem: Precision,
) -> Result<Option<Component>, Overflow> {
    let slice = match diffusion.attention {
        DiffusionAttention::Fused => return Ok(None),
        DiffusionAttention::Eager => None,
        DiffusionAttention::Sliced(slice) => Some(slice),
    };
    let Some(blocks) = &diffusion.denoiser.blocks else { return Ok(None) };
    let BlockLayout::Unet { channel_mult, transformer_layers, mid_transformer_layers, .. } =
        &blocks.layout
    else {
        return Ok(None);
    };
    let mut levels: Vec<usize> = (0..channel_mult.len())
        .filter(|level| transformer_layers.get(*level).is_some_and(|n| *n > 0))
        .collect();
    if *mid_transformer_layers > 0 {
        levels.push(channel_mult.len() - 1);
    }
    let mut best: Option<(u128, Product)> = None;
    for level in levels {
        let heads = blocks.heads.at(diffusion.denoiser.hidden.saturating_mul(channel_mult[level]));
        let shift = u32::try_from(level).map_err(|_| Overflow)?;
        let side = 1u64.checked_shl(shift).and_then(|s| s.checked_mul(8)).ok_or(Overflow)?;
        let positions = (diffusion.width / side)
            .checked_mul(diffusion.height / side)
            .and_then(|p| p.checked_mul(diffusion.frames))
            .ok_or(Overflow)?;
        let rows = diffusion.batch.checked_mul(guided).and_then(|b| b.checked_mul(heads));
        let rows = rows.ok_or(Overflow)?;
        let (rows, label) = match slice {
            None => (rows, "batch × heads rows".to_string()),
            Some(AttentionSlice::Auto) => {
                ((heads / 2).max(1), format!("rows of a slice (half of {heads} heads)"))
            }
            Some(AttentionSlice::Max) => (1, "row of a slice (one head)".to_string()),
            Some(AttentionSlice::Heads(n)) => (n.min(rows), "rows of a slice".to_string()),
        };
        let product = Product::new()
            .times(2, "score-sized tensors (scores, softmax)")?
            .times(rows, label)?
            .times(positions, formula!("level-{level} positions"))?
            .times(positions, "positions")?
            .bytes_each(elem.bytes_per_element(), elem.name())?;
        let bytes = u128::from(product.value()?.0);
        if best.as_ref().is_none_or(|(b, _)| bytes > *b) {
            best = Some((bytes, product));
        }
    }
    let Some((_, product)) = best else { return Ok(None) };
    let name = if slice.is_some() {
        "denoiser attention scores (sliced)"
    } else {
        "denoiser attention scores (eager)"
    };
    formula(
        name,
        Category::Intermediate,
        product,
        "diffusers Attention.get_attention_scores: baddbmm over an empty tensor, then the softmax \
         (AttnProcessor; SlicedAttnProcessor a slice of batch × heads at a time)",
    )
    .map(Some)
}

/// Model offload (diffusers `enable_model_cpu_offload`): accelerate's `CpuOffload` hook on each
/// model, chained in the pipeline's `model_cpu_offload_seq`, moves the previous model to the CPU
/// and empties the allocator's cache before it moves its own model in (`pre_forward`), so one
/// model and its phase's tensors are on the device at a time, and no earlier phase's freed
/// blocks stay reserved: the decode's cache is the decoder's own stages (`decode_cache`).
/// A pipeline moved to the device whole before offloading was enabled (`loaded_on_device`,
/// with the other experts' weights, `denoiser_experts`) had every model's weights resident at
/// once, which is the peak when they outweigh every phase.
fn offloaded(
    diffusion: &Diffusion,
    phases: [Vec<Component>; 3],
    upcast: Bytes,
    loaded_on_device: Option<Vec<Component>>,
) -> Result<Vec<Component>, Overflow> {
    let total = |phase: &[Component]| calc::sum(phase.iter().map(|c| c.bytes));
    let mut best = 0;
    let mut best_bytes = Bytes::ZERO;
    for (i, phase) in phases.iter().enumerate() {
        let bytes = total(phase)?;
        if bytes > best_bytes {
            best = i;
            best_bytes = bytes;
        }
    }
    if let Some(weights) = loaded_whole(&phases, loaded_on_device, best_bytes)? {
        return Ok(weights);
    }
    let [_, _, decode] = &phases;
    let decode_peak =
        calc::sum(decode.iter().filter(|c| c.category == Category::Intermediate).map(|c| c.bytes))?;
    let cache = decode_cache(diffusion, decode_peak, upcast, false)?;
    let decode_total = total(decode)?;
    let mut out = phases.into_iter().nth(best).unwrap_or_default();
    if let Some((mut cache, releasable)) = cache {
        // The reserved view's peak is the decode's reserved bytes when they exceed the largest
        // phase's allocated bytes; the component carries the difference.
        let reserved = calc::sum([decode_total, cache.bytes])?;
        if best == 2 {
            out.extend(split_releasable((cache, releasable)));
        } else if let Some(extra) = reserved.0.checked_sub(best_bytes.0).filter(|e| *e > 0) {
            let cached = cache.bytes;
            cache.bytes = Bytes(extra);
            cache.formula = formula!(
                "{reserved} reserved at the decode ({decode_total} allocated + {cached} cached), \
                 less the {best_bytes} the largest phase holds"
            );
            out.extend(split_releasable((cache, releasable)));
        }
    }
    Ok(out)
}

/// A pipeline moved to the device whole before offloading was enabled (`loaded_on_device`:
/// `Some` with the other experts' weights) held every model's weights at once: those weights
/// when they outweigh `best_bytes`, the largest phase; `None` otherwise.
fn loaded_whole(
    phases: &[Vec<Component>; 3],
    loaded_on_device: Option<Vec<Component>>,
    best_bytes: Bytes,
) -> Result<Option<Vec<Component>>, Overflow> {
    let Some(others) = loaded_on_device else { return Ok(None) };
    let weights: Vec<Component> = phases
        .iter()
        .flatten()
        .filter(|c| c.category == Category::Persistent)
        .cloned()
        .chain(others)
        .collect();
    let resident = calc::sum(weights.iter().map(|c| c.bytes))?;
    Ok((resident > best_bytes).then_some(weights))
}

/// What an offload that moves parts of models has on the device beside a phase's tensors.
#[derive(Clone, Copy)]
enum Parts {
    /// One module's own tensors at a time, `at_once` of them (2 when a stream prefetches the
    /// next); `buffers_stay`: every model's buffers stay on the device.
    Modules { buffers_stay: bool, at_once: u64 },
    /// Groups of `per_group` top-level blocks, `at_once` groups, beside everything outside the
    /// model's block lists.
    Blocks { per_group: u64, at_once: u64 },
}

/// Offload that moves parts of models, one phase's model at a time:
/// - sequential offload (diffusers `enable_sequential_cpu_offload`): accelerate's `cpu_offload`
///   keeps every model's weights on the host and hooks each module that holds tensors of its own
///   (`attach_align_device_hook`), moving that module's tensors to the device just before its
///   forward and back to the meta device after it, so a phase holds one module's weights, at
///   most its model's largest (`largest_module`), beside every model's buffers, which stay on
///   the device;
/// - group offloading (diffusers `enable_group_offload`, `hooks/group_offloading.py`): at block
///   level each top-level `ModuleList` is cut into groups of `num_blocks_per_group` blocks, and
///   everything else of the model is one group, on the device for the whole of its forward; a
///   model without block lists is that one group. At leaf level every leaf module is a group, its
///   buffers with it. `use_stream` prefetches the next group while the current one runs (and
///   diffusers then sets one block per group): two groups at once.
///
/// The largest phase is the peak. An upcast VAE's modules arrive in fp32 (the hooks cast each to
/// the parameter's new dtype), and no fp32 copy of the whole VAE exists. Freed weight blocks stay
/// in the caching allocator, which serves the next group from them; no `empty_cache` runs
/// between phases, so the reserved view is the unoffloaded pipeline's (`decode_cache`).
fn parts(
    program: &Layered<'_>,
    diffusion: &Diffusion,
    phases: &[Vec<Component>; 3],
    moved: Parts,
    loaded_on_device: Option<Vec<Component>>,
) -> Result<Vec<Component>, Overflow> {
    let transients = |phase: &[Component]| -> Vec<Component> {
        phase.iter().filter(|c| c.category == Category::Intermediate).cloned().collect()
    };
    let vae_format = if diffusion.vae_upcast {
        WeightFormat::Uniform(Precision::Fp32)
    } else {
        diffusion.vae_weights
    };
    let [encode, denoise, decode] = phases;
    let owners: [Vec<(&str, WeightFormat, &str)>; 3] = [
        diffusion
            .text_encoders
            .iter()
            .zip(&diffusion.text_encoder_weights)
            .map(|(m, f)| (m.as_str(), *f, "text encoder"))
            .collect(),
        vec![(diffusion.denoiser.model.as_str(), diffusion.denoiser.weights, "denoiser")],
        diffusion.vae.iter().map(|m| (m.as_str(), vae_format, "VAE")).collect(),
    ];
    let mut resident = Vec::new();
    if let Parts::Modules { buffers_stay: true, .. } = moved {
        resident = buffers_on_device(program, diffusion, &owners)?;
    }
    let mut best: Vec<Component> = Vec::new();
    let mut best_bytes = Bytes::ZERO;
    let mut peak_transient = Bytes::ZERO;
    for ((phase, models), persistent) in
        [encode, denoise, decode].into_iter().zip(&owners).zip(phases)
    {
        let tensors = transients(phase);
        peak_transient = peak_transient.max(calc::sum(tensors.iter().map(|c| c.bytes))?);
        let mut held = resident.clone();
        held.extend(tensors);
        // The phase's models run one after another: the largest one's parts are the peak.
        let mut on_device: Vec<Component> = Vec::new();
        let mut on_device_bytes = Bytes::ZERO;
        for (model, format, role) in models {
            let candidate = match moved {
                Parts::Modules { at_once, .. } => {
                    largest_module_weights(program, model, *format, role, at_once)?
                        .into_iter()
                        .collect()
                }
                Parts::Blocks { per_group, at_once } => {
                    let whole = persistent.iter().filter(|c| {
                        c.category == Category::Persistent
                            && c.name.ends_with(&format!(": {model}"))
                    });
                    block_groups(program, model, *format, role, per_group, at_once)?
                        .unwrap_or_else(|| whole.cloned().collect())
                }
            };
            let bytes = calc::sum(candidate.iter().map(|c| c.bytes))?;
            if bytes > on_device_bytes || on_device.is_empty() {
                on_device = candidate;
                on_device_bytes = bytes;
            }
        }
        held.extend(on_device);
        let bytes = calc::sum(held.iter().map(|c| c.bytes))?;
        if bytes > best_bytes || best.is_empty() {
            best = held;
            best_bytes = bytes;
        }
    }
    if let Some(weights) = loaded_whole(phases, loaded_on_device, best_bytes)? {
        return Ok(weights);
    }
    best.extend(
        decode_cache(diffusion, peak_transient, Bytes::ZERO, true)?
            .map(split_releasable)
            .unwrap_or_default(),
    );
    Ok(best)
}

/// Every model's buffers, which sequential offload leaves on the device through every phase.
fn buffers_on_device(
    program: &Layered<'_>,
    diffusion: &Diffusion,
    owners: &[Vec<(&str, WeightFormat, &str)>; 3],
) -> Result<Vec<Component>, Overflow> {
    let load = diffusion.vae_weights.companion();
    let mut resident = Vec::new();
    for (model, _, role) in owners.iter().flatten() {
        let Some(buffers) = program.model(model).and_then(|m| m.buffers) else { continue };
        let product = Product::new()
            .times(buffers, "buffer values")?
            .bytes_each(load.bytes_per_element(), load.name())?;
        resident.push(formula(
            format!("{role} buffers on the device: {model}"),
            Category::Persistent,
            product,
            "accelerate cpu_offload with offload_buffers=False (diffusers' default): \
             AlignDevicesHook.init_hook moves every buffer to the execution device",
        )?);
    }
    Ok(resident)
}

/// Block-level group offloading of a model that declares its blocks: `at_once` groups of
/// `per_group` of its largest block, and everything outside its block lists. `None` when the
/// model declares no blocks (the caller holds it whole).
fn block_groups(
    program: &Layered<'_>,
    model: &str,
    format: WeightFormat,
    role: &str,
    per_group: u64,
    at_once: u64,
) -> Result<Option<Vec<Component>>, Overflow> {
    const SOURCE: &str = "diffusers enable_group_offload, block_level \
         (hooks/group_offloading.py _apply_group_offloading_block_level)";
    let Some(blocks) = program.model(model).and_then(|m| m.blocks) else { return Ok(None) };
    let precision = format.matrix(crate::quant::Matrix::Up, 0, 1, 1);
    let mut groups = Product::new();
    if at_once > 1 {
        groups = groups.times(at_once, "groups (the next one prefetched)")?;
    }
    let groups = groups
        .times(per_group, "blocks per group")?
        .times(blocks.largest, "params of its largest block")?
        .bytes_each(precision.bytes_per_element(), precision.name())?;
    let outside = Product::new()
        .times(blocks.outside, "params outside its block lists")?
        .bytes_each(precision.bytes_per_element(), precision.name())?;
    Ok(Some(vec![
        formula(
            format!("{role} weights on the device: block groups of {model}"),
            Category::Persistent,
            groups,
            SOURCE,
        )?,
        formula(
            format!("{role} weights on the device: the rest of {model}"),
            Category::Persistent,
            outside,
            SOURCE,
        )?,
    ]))
}

/// The weights of `model`'s largest module in `format`: its `largest_module`, else the largest
/// matrix its shape has (the token embedding, an attention projection or an MLP matrix).
fn largest_module_weights(
    program: &Layered<'_>,
    model: &str,
    format: WeightFormat,
    role: &str,
    at_once: u64,
) -> Result<Option<Component>, Overflow> {
    let Some(found) = program.model(model) else { return Ok(None) };
    let params = match (found.largest_module, &found.shape) {
        (Some(params), _) => params,
        (None, Some(shape)) => {
            let h = shape.hidden;
            let ffn = shape.moe.as_ref().map_or(shape.ffn, |moe| shape.ffn.max(moe.expert_ffn));
            let attention = shape.heads.checked_mul(shape.head_dim).ok_or(Overflow)?;
            [shape.vocab, attention, ffn]
                .into_iter()
                .map(|width| width.checked_mul(h).ok_or(Overflow))
                .try_fold(0, |largest, p| p.map(|p| largest.max(p)))?
        }
        (None, None) => return Ok(None),
    };
    let precision = format.matrix(crate::quant::Matrix::Up, 0, 1, 1);
    let mut product = Product::new();
    if at_once > 1 {
        product = product.times(at_once, "modules (the next one prefetched)")?;
    }
    let product = product
        .times(params, "params of its largest module")?
        .bytes_each(precision.bytes_per_element(), precision.name())?;
    formula(
        format!("{role} weights on the device: the largest module of {model}"),
        Category::Persistent,
        product,
        "diffusers enable_sequential_cpu_offload (accelerate's cpu_offload, \
         attach_align_device_hook) or leaf-level enable_group_offload: one module's own tensors \
         on the device for its forward",
    )
    .map(Some)
}
