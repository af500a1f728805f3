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
//!   input and output (8h), 10 × tokens × hidden elements;
//! - UNet denoiser: at the latent resolution with its base channels, the same 10 per position
//!   (a ResNet block's input, norms and convolution outputs, the attention block's projections);
//! - VAE decoder: the last upsampling hands 2c channels to the full-resolution stage, whose first
//!   ResNet holds its input and norm output (2 × 2c) and its convolution output and residual
//!   (2 × c): 6c per pixel; tiling decodes 512 × 512 tiles (diffusers' `tile_sample_min_size`).

use super::calc::{self, Overflow, Product};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::Bytes;
use crate::hir::{Diffusion, DiffusionOffload, Layered};
use crate::precision::Precision;
use crate::quant::WeightFormat;
use crate::ratio::Ratio;

fn formula(
    name: String,
    category: Category,
    product: Product,
    source: &str,
) -> Result<Component, Overflow> {
    let bytes = product.value()?;
    Ok(Component {
        held_by: HeldBy::Tensors,
        name,
        category,
        bytes,
        provenance: Provenance::Formula,
        formula: product.finish()?.1,
        source: Some(source.to_string()),
    })
}

/// A pipeline model's parameter count: the one declared, or its shape's.
pub(super) fn parameter_count(program: &Layered<'_>, model: &str) -> Option<u64> {
    let found = program.model(model)?;
    found.params.or_else(|| found.shape.as_ref().and_then(crate::eval::parameter_count))
}

/// A pipeline model's weights, `role` naming it: the parameters in `format`, and the ones its
/// loader keeps in fp32 (see [`kept_precision`]).
pub(super) fn weights(
    program: &Layered<'_>,
    model: &str,
    format: WeightFormat,
    role: &str,
) -> Result<Vec<Component>, Overflow> {
    let Some(found) = program.model(model) else { return Ok(Vec::new()) };
    let Some(params) = parameter_count(program, model) else {
        return Ok(Vec::new());
    };
    let precision = format.matrix(crate::quant::Matrix::Up, 0, 1, 1);
    let kept = found.keep_in_fp32.filter(|_| precision.bytes_per_element() < Ratio::int(4));
    let kept_precision = kept_precision(precision);
    let (kept, kept_precision) = match (kept, kept_precision) {
        (Some(kept), Some(p)) => (kept.min(params), p),
        _ => (0, precision),
    };
    let product = Product::new()
        .times(params - kept, "params")?
        .bytes_each(precision.bytes_per_element(), precision.name())?;
    let mut out = vec![formula(
        format!("{role} weights: {model}"),
        Category::Persistent,
        product,
        "the model's parameter count",
    )?];
    if kept > 0 {
        let product = Product::new()
            .times(kept, "params")?
            .bytes_each(kept_precision.bytes_per_element(), kept_precision.name())?;
        out.push(formula(
            format!("{role} fp32 layers: {model}"),
            Category::Persistent,
            product,
            "transformers `_keep_in_fp32_modules`: kept in fp32 by fp16 loads and bitsandbytes quantizers",
        )?);
    }
    Ok(out)
}

/// The precision of a model's keep-in-fp32 parameters when the rest is stored in `precision`.
/// transformers (and diffusers, for its own models) keep `_keep_in_fp32_modules` in fp32 when a
/// model is loaded with `torch_dtype=torch.float16` or through a quantizer that asks for it, as
/// the bitsandbytes ones do (`modeling_utils.py`: `use_keep_in_fp32_modules = ... and
/// (torch_dtype == torch.float16 or hasattr(hf_quantizer, "use_keep_in_fp32_modules"))`; the
/// bitsandbytes 4-bit and 8-bit quantizers set `use_keep_in_fp32_modules = True`).
/// A bf16 load converts them like any other layer, and so do quantizers applied after loading
/// (optimum-quanto, torchao), whose formats are not fp16.
fn kept_precision(precision: Precision) -> Option<Precision> {
    match precision {
        Precision::Fp16
        | Precision::Int8Bnb
        | Precision::Nf4
        | Precision::Nf4Dq
        | Precision::Fp4
        | Precision::Fp4Dq => Some(Precision::Fp32),
        _ => None,
    }
}

/// The denoising step's freed blocks, still reserved while the VAE decodes. PyTorch's caching
/// allocator keeps freed blocks for reuse and serves a request only from a block at least as
/// large (blocks are split, never merged across segments; `CUDACachingAllocator.cpp`), so when
/// the decoder's full-resolution tensors (batch × 2 × base channels × pixels, the input of the
/// last up-block) are larger than every tensor of a transformer step (its MLP's 4 × hidden per
/// token), none of the step's blocks serve the decode and they stay reserved beside it: the
/// reserved peak is the sum of both phases' transients, the allocated peak only the larger.
/// UNet steps are left out: their largest tensor is not derived here.
fn stranded_denoise_blocks(
    diffusion: &Diffusion,
    denoise_peak: Bytes,
) -> Result<Option<Component>, Overflow> {
    if diffusion.denoiser.unet || diffusion.vae.is_none() || denoise_peak == Bytes::ZERO {
        return Ok(None);
    }
    let guided = if diffusion.cfg { 2 } else { 1 };
    let latent = (diffusion.width / 8) * (diffusion.height / 8) * diffusion.frames;
    let tokens = latent / 4 + diffusion.text_tokens;
    let step_largest = Product::new()
        .times(diffusion.batch, "batch")?
        .times(guided, "(guidance)")?
        .times(tokens, "tokens")?
        .times(4 * diffusion.denoiser.hidden, "MLP width")?
        .bytes_each(diffusion.denoiser.weights.companion().bytes_per_element(), "")?
        .value()?;
    let pixels = if diffusion.vae_tiling {
        diffusion.width.min(512) * diffusion.height.min(512)
    } else {
        diffusion.width * diffusion.height * diffusion.frames
    };
    let decode_largest = Product::new()
        .times(diffusion.batch, "batch")?
        .times(pixels, "pixels")?
        .times(2 * diffusion.vae_channels, "channels")?
        .bytes_each(diffusion.vae_weights.companion().bytes_per_element(), "")?
        .value()?;
    if decode_largest <= step_largest {
        return Ok(None);
    }
    Ok(Some(Component {
        held_by: HeldBy::AllocatorCache,
        name: "allocator cache (denoising step)".to_string(),
        category: Category::Workspace,
        bytes: denoise_peak,
        provenance: Provenance::Formula,
        formula: format!(
            "the denoiser activations' {denoise_peak}, kept reserved: its largest tensor \
             ({step_largest}) is smaller than the decoder's ({decode_largest})"
        ),
        source: Some(
            "PyTorch CUDACachingAllocator: freed blocks stay reserved and serve only requests they can hold".into(),
        ),
    }))
}

pub(crate) fn components(
    program: &Layered<'_>,
    diffusion: &Diffusion,
) -> Result<Vec<Component>, Overflow> {
    let elem = diffusion.denoiser.weights.companion();
    let guided = if diffusion.cfg { 2 } else { 1 };
    let mut encode = Vec::new();
    for (encoder, format) in diffusion.text_encoders.iter().zip(&diffusion.text_encoder_weights) {
        encode.extend(weights(program, encoder, *format, "text encoder")?);
    }
    let mut denoise = Vec::new();
    denoise.extend(weights(
        program,
        &diffusion.denoiser.model,
        diffusion.denoiser.weights,
        "denoiser",
    )?);
    let latent = (diffusion.width / 8) * (diffusion.height / 8) * diffusion.frames;
    let product = if diffusion.denoiser.unet {
        Product::new()
            .times(diffusion.batch, "batch")?
            .times(guided, "(guidance)")?
            .times(latent, "latent positions")?
            .times(diffusion.denoiser.hidden, "base channels")?
            .times(10, "live tensors")?
    } else {
        let tokens = latent / 4 + diffusion.text_tokens;
        Product::new()
            .times(diffusion.batch, "batch")?
            .times(guided, "(guidance)")?
            .times(tokens, "tokens (latent patches + text)")?
            .times(diffusion.denoiser.hidden, "hidden")?
            .times(10, "(2 residual + 8 MLP) per token")?
    };
    let product = product.bytes_each(elem.bytes_per_element(), elem.name())?;
    denoise.push(formula(
        "denoiser activations (one block)".into(),
        Category::Intermediate,
        product,
        "DOMAIN.md §7.1 latent sizing; derived, see eval/diffusion.rs",
    )?);
    let mut decode = Vec::new();
    if let Some(vae) = &diffusion.vae {
        decode.extend(weights(program, vae, diffusion.vae_weights, "VAE")?);
        let pixels = if diffusion.vae_tiling {
            (diffusion.width.min(512)) * (diffusion.height.min(512))
        } else {
            diffusion.width * diffusion.height * diffusion.frames
        };
        let vae_elem = diffusion.vae_weights.companion();
        let product = Product::new()
            .times(diffusion.batch, "batch")?
            .times(pixels, if diffusion.vae_tiling { "pixels of a 512² tile" } else { "pixels" })?
            .times(6 * diffusion.vae_channels, "(6 × base channels)")?
            .bytes_each(vae_elem.bytes_per_element(), vae_elem.name())?;
        decode.push(formula(
            "VAE decode peak".into(),
            Category::Intermediate,
            product,
            "DOMAIN.md §7.1: decoding at full resolution is frequently the peak",
        )?);
    }
    let total = |phase: &[Component]| calc::sum(phase.iter().map(|c| c.bytes));
    match diffusion.offload {
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
            let winner = if decode_peak > denoise_peak { &decode } else { &denoise };
            out.extend(winner.iter().filter(|c| c.category == Category::Intermediate).cloned());
            if decode_peak > denoise_peak {
                out.extend(stranded_denoise_blocks(diffusion, denoise_peak)?);
            }
            Ok(out)
        }
        DiffusionOffload::Model => {
            // One model on the device at a time: the heaviest phase is the peak.
            let phases = [encode, denoise, decode];
            let mut best = 0;
            let mut best_bytes = Bytes::ZERO;
            for (i, phase) in phases.iter().enumerate() {
                let bytes = total(phase)?;
                if bytes > best_bytes {
                    best = i;
                    best_bytes = bytes;
                }
            }
            Ok(phases.into_iter().nth(best).unwrap_or_default())
        }
    }
}
