//! Training a ControlNet beside a frozen UNet denoiser, as diffusers' scripts do
//! (huggingface/diffusers at 58eb52c, `examples/controlnet/train_controlnet.py` and
//! `train_controlnet_sdxl.py`):
//! - the ControlNet (`ControlNetModel.from_unet`: a copy of the UNet's `conv_in`, down blocks and
//!   mid block, a zero convolution per residual and a conditioning embedding) is trained in full
//!   in fp32 (the scripts refuse to start otherwise); the UNet, VAE and text encoder are frozen
//!   and cast to the mixed-precision type;
//! - each step runs the ControlNet, whose residuals the UNet adds to its skip connections and to
//!   its mid block's output. The UNet's down blocks and mid block see no tensor that needs a
//!   gradient, so autograd records only its up blocks, where the residuals join; the ControlNet
//!   records everything. Its activations are those of the UNet's down half and mid block, the
//!   denoiser's those of its up half (`unet_activations.rs`);
//! - `--gradient_checkpointing` calls `controlnet.enable_gradient_checkpointing()` alone in
//!   train_controlnet.py: the frozen UNet's up half stores all it records (train_controlnet_sdxl.py
//!   enables the UNet's too, which diffusers honours in eval mode since PR #9878: not modelled);
//! - the loop keeps the residuals (`down_block_res_samples`, `mid_block_res_sample`) through the
//!   backward pass, and the conditioning image is the batch's.

use super::calc::{Overflow, Product, formula};
use super::diffusion;
use super::training as llm_training;
use super::unet_activations::{self, Halves, Level};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::hir::{Checkpointing, ControlNet, Diffusion, Layered, Training};
use crate::quant::WeightFormat;

/// `ControlNetConditioningEmbedding`'s `block_out_channels` (diffusers' default, used by the
/// SD 1.x and SDXL ControlNets): `conv_in` from the image's 3 channels to 16, then per pair a
/// convolution at the same size and a stride-2 one to the next width, each followed by SiLU.
const EMBEDDING_CHANNELS: [u64; 4] = [16, 32, 96, 256];

/// The trained ControlNet's weights, 16-bit autocast copies, gradients and optimizer state, and
/// its parameter count; `None` when its model has no parameter count.
pub(super) fn states(
    program: &Layered<'_>,
    diffusion: &Diffusion,
    control: &ControlNet,
    training: &Training,
    data: u64,
    phase: &mut llm_training::StepPhase,
) -> Result<Option<(Vec<Component>, u64)>, Overflow> {
    let Some(params) = diffusion::parameter_count(program, &control.model) else {
        return Ok(None);
    };
    let format = WeightFormat::Uniform(training.weights);
    let mut out =
        diffusion::weights(program, diffusion, &control.model, format, "trained ControlNet")?;
    if let Some(mut copies) = llm_training::autocast_copies(params, training)? {
        copies.name = format!("ControlNet {}", copies.name).into();
        out.push(copies);
    }
    out.extend(super::diffusion_training::trained_in_full(
        "ControlNet ",
        params,
        training,
        data,
        phase,
    )?);
    Ok(Some((out, params)))
}

/// What one step stores: the ControlNet's down half and mid block (under the training's
/// checkpointing), the frozen denoiser's up half (unchecked), the conditioning embedding, the
/// residuals and the conditioning image the loop holds.
pub(super) fn activations(
    diffusion: &Diffusion,
    control: &ControlNet,
    levels: &[Level],
    training: &Training,
) -> Result<Vec<Component>, Overflow> {
    let mut out = vec![
        unet_activations::stored(
            diffusion,
            levels,
            training,
            Halves::Down,
            training.checkpointing,
            "ControlNet activations (down and mid blocks)",
        )?,
        unet_activations::stored(
            diffusion,
            levels,
            training,
            Halves::Up,
            Checkpointing::None,
            "frozen denoiser activations (up blocks, beside the ControlNet)",
        )?,
        conditioning_embedding(diffusion, training)?,
    ];
    out.extend(diffusion::control_outputs(diffusion, control, training.activations, true)?);
    out.extend(unet_activations::softmax_backward(diffusion, levels, training)?);
    Ok(out)
}

/// What `ControlNetConditioningEmbedding` stores over the conditioning image's pixels: each
/// SiLU's input and output (the next convolution's input), at every width but the last twice
/// (a convolution at the same size, then a stride-2 one to the next width, rounding up), at the
/// last once (its SiLU's output is `conv_out`'s input). The image itself, `conv_in`'s input, is
/// the batch's (`ControlNet conditioning image`); `conv_out`'s output is added to the
/// ControlNet's first features and not kept.
fn conditioning_embedding(
    diffusion: &Diffusion,
    training: &Training,
) -> Result<Component, Overflow> {
    let (mut width, mut height) = (diffusion.width, diffusion.height);
    let mut values = 0u64;
    let mut terms = Vec::new();
    for (i, &channels) in EMBEDDING_CHANNELS.iter().enumerate() {
        let tensors = if i + 1 == EMBEDDING_CHANNELS.len() { 2 } else { 4 };
        let at = width
            .checked_mul(height)
            .and_then(|n| n.checked_mul(channels * tensors))
            .ok_or(Overflow)?;
        values = values.checked_add(at).ok_or(Overflow)?;
        terms.push(formula!("{tensors} × {channels} ch × {width} × {height}"));
        (width, height) = (width.div_ceil(2), height.div_ceil(2));
    }
    let elem = training.activations;
    let product = Product::new()
        .times(diffusion.batch, "batch")?
        .times(values, format!("({})", terms.join(" + ")))?
        .bytes_each(elem.bytes_per_element(), elem.name())?;
    let bytes = product.value()?;
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: "ControlNet conditioning embedding".into(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula: formula!("{} = {bytes}", product.terms()),
        source: Some(
            "diffusers ControlNetConditioningEmbedding (block_out_channels 16, 32, 96, 256): \
             each SiLU's input and output, kept for the backward pass"
                .into(),
        ),
    })
}
