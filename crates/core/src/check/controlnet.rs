//! A ControlNet in a trained pipeline is what trains (diffusers' `train_controlnet.py` and
//! `train_controlnet_sdxl.py`): in full, in fp32, beside a frozen UNet. The training section's
//! settings that would train something else, or gather the denoiser, are refused here.

use crate::ast::{Block, Field};
use crate::diagnostic::Diagnostic;
use crate::hir::{Diffusion, Method, Offload, Sharding, TextEncoders, Training};

/// The precision the training section's weights are: the ControlNet trains in fp32.
pub(super) const TRAINED: crate::precision::Precision = crate::precision::Precision::Fp32;

/// `false` when `training` asks for what a trained ControlNet is not modelled with (reported).
/// `training_field`: the workload's `training` field; `swap`: a `*blocks_to_swap` field of the
/// pipeline.
pub(super) fn fits(
    training: &Training,
    diffusion: &Diffusion,
    training_field: &Field,
    swap: Option<&Field>,
    diagnostics: &mut Vec<Diagnostic>,
) -> bool {
    if diffusion.controlnet.is_none() {
        return true;
    }
    let block = training_field.block.as_ref();
    let at = |key: &str| written(block, key).map_or(training_field.key.span, |f| f.span);
    let refusal = if !matches!(training.method, Method::Full) {
        Some((
            "E013",
            at("method"),
            "a ControlNet trains in full; adapters beside it are not modelled".to_owned(),
            "write `method full`, or remove `controlnet` to train adapters on the denoiser",
        ))
    } else if training.text_encoders == TextEncoders::Trained {
        Some((
            "E014",
            at("train_text_encoders"),
            "the text encoders stay frozen beside a trained ControlNet".to_owned(),
            "remove `train_text_encoders`",
        ))
    } else if training.sharding == Sharding::Zero3 || training.offload == Offload::Parameters {
        Some((
            "E014",
            at(if training.offload == Offload::Parameters { "offload" } else { "sharding" }),
            "gathering a denoiser a block at a time beside a trained ControlNet is not modelled"
                .to_owned(),
            "use `sharding zero2` or none",
        ))
    } else {
        swap.map(|field| {
            (
                "E014",
                field.key.span,
                format!("`{}` beside a trained ControlNet is not modelled", field.key.name),
                "remove the swap",
            )
        })
    };
    let Some((code, span, message, help)) = refusal else { return true };
    diagnostics.push(Diagnostic::error(code, span, message).with_help(help));
    false
}

fn written<'a>(block: Option<&'a Block>, key: &str) -> Option<&'a Field> {
    block?.fields.iter().find(|f| f.key.name == key)
}
