//! Checking `diffusion` sections: a pipeline of a denoiser, text encoders and a VAE, each a
//! model declared by its parameter count, with the image size, batch and guidance.

use super::Scope;
use super::fields::{Fields, Repeat};
use super::quantity::Dim;
use crate::ast::{Block, DeclarationKind};
use crate::diagnostic::Diagnostic;
use crate::hir::{Denoiser, Diffusion, DiffusionOffload};
use crate::quant::WeightFormat;

/// `text_encoder_weights`: one format for every text encoder, or one per encoder in the order of
/// `text_encoders` (pipelines often quantize T5 alone). Absent: the pipeline's `weights`.
fn encoder_formats(
    fields: &Fields<'_>,
    encoders: usize,
    weights: WeightFormat,
) -> Option<Vec<WeightFormat>> {
    let Some(field) = fields.get("text_encoder_weights") else {
        return Some(vec![weights; encoders]);
    };
    let mut formats = Vec::with_capacity(field.values.len());
    for word in fields.words(field) {
        let Some(format) = WeightFormat::from_name(&word.name) else {
            let mut names: Vec<&str> = crate::precision::Precision::NAMES.to_vec();
            names.extend(crate::quant::Preset::ALL.iter().map(|p| p.name()));
            fields.word_in(field, word, &names);
            return None;
        };
        formats.push(format);
    }
    if formats.len() != field.values.len() {
        return None;
    }
    if let [format] = formats.as_slice() {
        return Some(vec![*format; encoders]);
    }
    if formats.len() != encoders {
        fields.push(Diagnostic::error(
            "E013",
            field.span,
            format!(
                "`text_encoder_weights` takes one format, or one per text encoder ({encoders} here); it has {}",
                formats.len()
            ),
        ));
        return None;
    }
    Some(formats)
}

pub(super) fn diffusion(
    block: &Block,
    scope: &Scope<'_>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Diffusion> {
    const KNOWN: &[(&str, Repeat)] = &[
        ("denoiser", Repeat::Once),
        ("text_encoders", Repeat::Once),
        ("vae", Repeat::Once),
        ("weights", Repeat::Once),
        ("denoiser_weights", Repeat::Once),
        ("text_encoder_weights", Repeat::Once),
        ("architecture", Repeat::Once),
        ("hidden", Repeat::Once),
        ("resolution", Repeat::Once),
        ("frames", Repeat::Once),
        ("batch", Repeat::Once),
        ("cfg", Repeat::Once),
        ("text_tokens", Repeat::Once),
        ("vae_channels", Repeat::Once),
        ("vae_tiling", Repeat::Once),
        ("vae_tile", Repeat::Once),
        ("offload", Repeat::Once),
    ];
    let fields = Fields::new("a diffusion section", block, KNOWN);
    let model = |ident: &crate::ast::Ident| match scope.expect(ident, &[DeclarationKind::Model]) {
        Ok(_) => Some(ident.name.clone()),
        Err(diagnostic) => {
            fields.push(diagnostic);
            None
        }
    };
    let denoiser_model = fields.name("denoiser").and_then(model);
    if !fields.has("denoiser") {
        fields.missing("denoiser", "denoiser flux1-dev-transformer");
    }
    let mut text_encoders = Vec::new();
    if let Some(field) = fields.get("text_encoders") {
        for word in fields.words(field) {
            text_encoders.extend(model(word));
        }
    }
    let vae = fields.name("vae").and_then(model);
    let weights = fields
        .weight_format("weights")
        .unwrap_or(WeightFormat::Uniform(crate::precision::Precision::Bf16));
    let denoiser_weights = fields.weight_format("denoiser_weights").unwrap_or(weights);
    let text_encoder_weights = encoder_formats(&fields, text_encoders.len(), weights);
    let architecture = fields.choice("architecture", &["dit", "unet"]).map(|(w, _)| w == "unet");
    if !fields.has("architecture") {
        fields.missing("architecture", "architecture dit");
    }
    let hidden = fields.whole("hidden", Dim::Count, 1, 1 << 16, "3072");
    if !fields.has("hidden") {
        fields.missing("hidden", "hidden 3072");
    }
    let resolution =
        fields.get("resolution").and_then(|f| fields.dimensions(f, 8, 1 << 16, "1024 x 1024"));
    if !fields.has("resolution") {
        fields.missing("resolution", "resolution 1024 x 1024");
    }
    let frames = fields.whole("frames", Dim::Count, 1, 4096, "13").unwrap_or(1);
    let batch = fields.whole("batch", Dim::Count, 1, 4096, "1").unwrap_or(1);
    let cfg = fields.boolean("cfg").unwrap_or(true);
    let text_tokens =
        fields.whole("text_tokens", Dim::Tokens, 0, 100_000, "512 tokens").unwrap_or(77);
    let vae_channels = fields.whole("vae_channels", Dim::Count, 1, 4096, "128").unwrap_or(128);
    let vae_tiling = fields.boolean("vae_tiling").unwrap_or(false);
    // diffusers' AutoencoderKL tiles at its config's `sample_size`: 1024 for the SDXL, SD3 and
    // FLUX autoencoders, 512 for SD 1.x's.
    let vae_tile = fields.whole("vae_tile", Dim::Count, 8, 1 << 16, "1024").unwrap_or(1024);
    let offload = fields.choice("offload", &["none", "model"]).map(|(w, _)| w == "model");
    let found = fields.finish();
    let ok = found.is_empty();
    diagnostics.extend(found);
    let (width, height) = resolution?;
    let text_encoder_weights = text_encoder_weights?;
    let denoiser = Denoiser {
        model: denoiser_model?,
        unet: architecture?,
        hidden: hidden?,
        weights: denoiser_weights,
    };
    ok.then(|| Diffusion {
        denoiser,
        text_encoders,
        text_encoder_weights,
        vae,
        vae_weights: weights,
        width,
        height,
        frames,
        batch,
        cfg,
        text_tokens,
        vae_channels,
        vae_tile: vae_tiling.then_some(vae_tile),
        offload: if offload == Some(true) {
            DiffusionOffload::Model
        } else {
            DiffusionOffload::None
        },
    })
}
