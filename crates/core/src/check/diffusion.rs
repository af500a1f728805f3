//! Checking `diffusion` sections: a pipeline of a denoiser, text encoders and a VAE, each a
//! model declared by its parameter count, with the image size, batch and guidance (and, for a
//! video through a causal 3D VAE, the video's frames). Next to a
//! `training` section the same pipeline is trained: the denoiser's block structure is then
//! required (its activations and LoRA adapters come from it), and settings that only inference
//! has (guidance, model offload, VAE tiling and upcast) are refused, as is `rope`, whose
//! temporaries are derived for a sampling step only.

use super::Scope;
use super::block_swap;
use super::fields::{Fields, Repeat};
use super::quantity::Dim;
use crate::ast::{Block, DeclarationKind};
use crate::diagnostic::Diagnostic;
use crate::hir::{
    AttentionSlice, BlockLayout, ControlNet, ControlOutputs, Denoiser, DenoiserBlocks, Diffusion,
    DiffusionAttention, DiffusionOffload, Guidance, Heads, ImageVae, LtxVae, Preparation, Rope,
    VaeCaches, Video, VideoDecoder,
};
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

/// `rope`: how a transformer denoiser applies rotary position embeddings (`unet`: the
/// architecture, when it was readable). A UNet has none, and a trained denoiser's activations
/// come from its block structure, whose backward through the rotation is not derived: both
/// refuse the field rather than ignore it.
/// A transformer denoiser's MLP inner width (`ffn_dim`), refused for a UNet; `Ok(None)` when
/// not given (4 × hidden), `Err` when wrong (reported).
fn ffn(fields: &Fields<'_>, unet: Option<bool>) -> Result<Option<u64>, ()> {
    let Some(field) = fields.get("ffn") else { return Ok(None) };
    if unet == Some(true) {
        fields.push(
            Diagnostic::error(
                "E013",
                field.key.span,
                "`ffn` is a transformer denoiser's MLP width; a UNet's follows its channels",
            )
            .with_help("remove `ffn`"),
        );
        return Err(());
    }
    let (value, span) = fields.quantity(field, Dim::Count, "8960").ok_or(())?;
    fields.check_whole("ffn", value, span, 1, 1 << 20).map(Some).ok_or(())
}

fn rope(fields: &Fields<'_>, unet: Option<bool>, training: bool) -> Option<Rope> {
    let field = fields.get("rope")?;
    let refused = if unet == Some(true) {
        Some("`rope` does not describe a UNet".to_string())
    } else if training {
        Some("`rope` is not modelled for a trained denoiser".to_string())
    } else {
        None
    };
    if let Some(message) = refused {
        fields.push(Diagnostic::error("E013", field.key.span, message).with_help("remove `rope`"));
        return None;
    }
    let (word, _) = fields.choice_of(field, &["none", "fp32"])?;
    Some(if word == "fp32" { Rope::Fp32 } else { Rope::None })
}

/// `video_vae`: which 3D decoder a video pipeline's VAE is, refusing the fields the chosen one
/// does not model. Wan's decoder runs one latent frame at a time (its own caches, 4× in time);
/// HunyuanVideo's decodes chunks whole, without caches, and builds only 4× in time; LTX-Video's
/// decodes every frame in one call, 8× in time; Mochi's too, 6× in time.
fn video_decoder(fields: &Fields<'_>, block: &Block) -> Result<VideoDecoder, ()> {
    let words = ["cogvideox", "wan", "hunyuan", "ltx", "ltx-0.9.1", "ltx-0.9.5", "mochi"];
    let Some((word, span)) = fields.choice("video_vae", &words) else {
        return Ok(VideoDecoder::CogVideoX);
    };
    let (decoder, refused, label): (_, &[&str], _) = match word {
        "wan" => (VideoDecoder::Wan, &["vae_cache", "vae_temporal"], "the Wan decoder chosen here"),
        "hunyuan" => (
            VideoDecoder::Hunyuan,
            &["vae_cache", "vae_temporal"],
            "the HunyuanVideo decoder chosen here",
        ),
        "ltx" | "ltx-0.9.1" | "ltx-0.9.5" => (
            VideoDecoder::Ltx(match word {
                "ltx" => LtxVae::V090,
                "ltx-0.9.1" => LtxVae::V091,
                _ => LtxVae::V095,
            }),
            &["vae_cache", "vae_temporal"],
            "the LTX-Video decoder chosen here",
        ),
        "mochi" => {
            (VideoDecoder::Mochi, &["vae_cache", "vae_temporal"], "the Mochi decoder chosen here")
        }
        _ => return Ok(VideoDecoder::CogVideoX),
    };
    if let Some(field) = block.fields.iter().find(|f| refused.contains(&f.key.name.as_str())) {
        fields.push(
            Diagnostic::error(
                "E014",
                field.key.span,
                format!("`{}` is not modelled for `video_vae {word}`", field.key.name),
            )
            .with_label(span, label)
            .with_help(format!("remove `{}`", field.key.name)),
        );
        return Err(());
    }
    Ok(decoder)
}

/// `video_frames` and `vae_temporal`: a video pipeline with a causal 3D VAE. `Ok(None)` when
/// the pipeline makes images (or gives latent `frames`), `Err` when a field was wrong (reported). A video
/// is 1 + a multiple of the temporal compression frames long (the causal VAE keeps the first
/// frame alone); `frames` gives the latent frames instead and is refused beside it; a trained
/// pipeline's video encode is not derived.
fn video(fields: &Fields<'_>, block: &Block, training: bool) -> Result<Option<Video>, ()> {
    let whole = |field, max, example| {
        let (value, span) = fields.quantity(field, Dim::Count, example)?;
        fields.check_whole(&field.key.name, value, span, 1, max)
    };
    let decoder = video_decoder(fields, block)?;
    // AutoencoderKLCogVideoX's `temporal_compression_ratio` (CogVideoX-2b and -5b vae/config.json);
    // LTX-Video's VAE folds 8 frames into a latent (`patch_size_t` 1 × three 2× upsamples).
    let temporal = match (decoder, fields.get("vae_temporal")) {
        (VideoDecoder::Ltx(_), _) => 8,
        // Mochi's up blocks expand time 3×, 2× and 1× (`temporal_expansions` (1, 2, 3)).
        (VideoDecoder::Mochi, _) => 6,
        (_, None) => 4,
        (_, Some(field)) => {
            let t = whole(field, 8, "4").ok_or(())?;
            // The decoder doubles time in at most its three upsamplers (`log2` of the ratio of
            // them).
            if !t.is_power_of_two() {
                fields.push(
                    Diagnostic::error(
                        "E013",
                        field.span,
                        format!("`vae_temporal {t}` is not 1, 2, 4 or 8"),
                    )
                    .with_help("the decoder doubles time in at most three of its upsamplers"),
                );
                return Err(());
            }
            t
        }
    };
    // diffusers 0.31 (huggingface/diffusers#9524) passes the causal convolutions' caches
    // through the call; before it, each convolution replaced its own as a module attribute.
    let caches = match fields.choice("vae_cache", &["passed", "replaced"]) {
        Some(("replaced", _)) => VaeCaches::Replaced,
        _ => VaeCaches::Passed,
    };
    let Some(field) = fields.get("video_frames") else { return Ok(None) };
    let frames = whole(field, 100_000, "49").ok_or(())?;
    if training {
        fields.push(
            Diagnostic::error(
                "E013",
                field.key.span,
                "`video_frames` is not modelled for a trained pipeline",
            )
            .with_help("give the latent frames with `frames`"),
        );
        return Err(());
    }
    if let Some(latent) = block.fields.iter().find(|f| f.key.name == "frames") {
        fields.push(
            Diagnostic::error(
                "E014",
                field.key.span,
                "`video_frames` and `frames` both give the frames",
            )
            .with_label(latent.key.span, "`frames` given here")
            .with_help("keep `video_frames` for a video VAE, or `frames` for latent frames"),
        );
        return Err(());
    }
    if (frames - 1) % temporal != 0 {
        let below = (frames - 1) / temporal * temporal + 1;
        fields.push(
            Diagnostic::error(
                "E013",
                field.span,
                format!("`video_frames {frames}` is not 1 + a multiple of {temporal}"),
            )
            .with_help(format!(
                "a causal VAE keeps the first frame and compresses {temporal} frames into each \
                 latent frame after it: {below} or {} frames",
                below + temporal
            )),
        );
        return Err(());
    }
    Ok(Some(Video { frames, temporal, caches, decoder }))
}

/// `controlnet` and what its outputs are sized by: a UNet's levels (`channel_mult`,
/// `layers_per_block`, read by [`blocks`]) or a transformer's control blocks (`controlnet_blocks`). Offloading a
/// ControlNet module by module (sequential or group offload) is not modelled (`E014`).
fn controlnet(
    fields: &Fields<'_>,
    model: Option<String>,
    unet: Option<bool>,
    offload: Option<&str>,
    levels: UnetLevels,
) -> Option<ControlNet> {
    let model = model?;
    if let Some(field) = fields.first("offload")
        && let Some(word @ ("sequential" | "blocks" | "leaves")) = offload
    {
        let control = fields.first("controlnet").map_or(field.key.span, |f| f.key.span);
        fields.push(
            Diagnostic::error(
                "E014",
                field.span,
                format!("a ControlNet under `offload {word}` is not modelled"),
            )
            .with_label(control, "the ControlNet")
            .with_help(
                "use `offload model` (the ControlNet then stays on the device once called) or none",
            ),
        );
        return None;
    }
    let outputs = if unet? {
        if let Some(field) = fields.get("controlnet_blocks") {
            fields.push(
                Diagnostic::error(
                    "E013",
                    field.key.span,
                    "`controlnet_blocks` counts a transformer ControlNet's blocks; a UNet's \
                     follows its levels",
                )
                .with_help("give `channel_mult` and `layers_per_block` instead"),
            );
            return None;
        }
        for (key, example) in
            [("channel_mult", "channel_mult 1 2 4 4"), ("layers_per_block", "layers_per_block 2")]
        {
            if !fields.has(key) {
                fields.missing(key, example);
            }
        }
        ControlOutputs::Unet {
            channel_mult: levels.channel_mult?,
            layers_per_block: levels.layers_per_block?,
        }
    } else {
        let blocks = fields.whole("controlnet_blocks", Dim::Count, 1, 4096, "15");
        if !fields.has("controlnet_blocks") {
            fields.missing("controlnet_blocks", "controlnet_blocks 15");
        }
        ControlOutputs::Transformer { blocks: blocks? }
    };
    Some(ControlNet { model, outputs })
}

/// `image_vae`: which autoencoder an image pipeline decodes with. Sana's DC-AE is replayed for
/// sampling only (a trained pipeline's encode is `AutoencoderKL`'s) and for images only (`E014`
/// beside `video_frames`, whose decoder `video_vae` names). `None` when a field was wrong
/// (reported).
fn image_vae(fields: &Fields<'_>, block: &Block, training: bool) -> Option<ImageVae> {
    let Some((word, span)) = fields.choice("image_vae", &["kl", "dc-ae"]) else {
        return if fields.has("image_vae") { None } else { Some(ImageVae::Kl) };
    };
    if word == "kl" {
        return Some(ImageVae::Kl);
    }
    if training {
        fields.push(
            Diagnostic::error(
                "E013",
                span,
                "`image_vae dc-ae` is not modelled for a trained pipeline",
            )
            .with_help("train on precomputed latents without a `vae`, or remove `image_vae`"),
        );
        return None;
    }
    if let Some(field) = block.fields.iter().find(|f| f.key.name == "video_frames") {
        fields.push(
            Diagnostic::error(
                "E014",
                field.key.span,
                "`video_frames` and `image_vae dc-ae` both name the decoder",
            )
            .with_label(span, "an image autoencoder here")
            .with_help("keep `video_vae` for a video, or `image_vae` for images"),
        );
        return None;
    }
    Some(ImageVae::DcAe)
}

/// A UNet's levels as its fields give them (`None` where absent or wrong, reported).
#[derive(Default)]
struct UnetLevels {
    channel_mult: Option<Vec<u64>>,
    layers_per_block: Option<u64>,
}

/// The fields that describe only a UNet's blocks (`cross_attention_dim` describes both).
const UNET_FIELDS: &[&str] = &[
    "channel_mult",
    "layers_per_block",
    "transformer_layers",
    "mid_transformer_layers",
    "head_dim",
    "linear_projection",
];

/// The denoiser's block structure, read when the pipeline is trained (`unet`: the architecture,
/// when it was readable). The fields of the other architecture are refused.
/// The denoiser's block structure, which a training step and unfused attention while sampling
/// (`needed`) size their tensors by; `None` when not needed.
///
/// A UNet's levels (`channel_mult`, `layers_per_block`) are read whether needed or not and
/// left in `levels`, for a ControlNet's outputs.
fn blocks(
    fields: &Fields<'_>,
    unet: Option<bool>,
    hidden: Option<u64>,
    needed: bool,
    levels: &mut UnetLevels,
) -> Option<DenoiserBlocks> {
    let unet = unet?;
    let (own, other): (&[&str], &[&str]) = if unet {
        (
            &["channel_mult", "layers_per_block", "cross_attention_dim"],
            &["layers", "qk_norm", "single_layers"],
        )
    } else {
        (&["layers"], UNET_FIELDS)
    };
    let architecture = if unet { "a UNet" } else { "a transformer denoiser" };
    for key in other {
        if let Some(field) = fields.get(key) {
            fields.push(Diagnostic::error(
                "E013",
                field.key.span,
                format!("`{key}` does not describe {architecture}"),
            ));
        }
    }
    // Kept with their fields: giving both is reported at them.
    let count_of = |field: &crate::ast::Field, example| {
        let (value, span) = fields.quantity(field, Dim::Count, example)?;
        fields.check_whole(&field.key.name, value, span, 1, 4096)
    };
    let heads_field = fields.get("heads");
    let heads = heads_field.and_then(|field| count_of(field, "24"));
    let head_dim_field = fields.get("head_dim");
    let head_dim = head_dim_field.and_then(|field| count_of(field, "64"));
    let layers = fields.whole("layers", Dim::Count, 1, 4096, "57");
    let layers_per_block = fields.whole("layers_per_block", Dim::Count, 1, 64, "2");
    let cross_field = fields.get("cross_attention_dim");
    let cross = cross_field.and_then(|field| {
        let (value, span) = fields.quantity(field, Dim::Count, "768")?;
        fields.check_whole(&field.key.name, value, span, 1, 1 << 16)
    });
    let mult = fields.get("channel_mult").and_then(|field| per_level(fields, field, 1));
    if unet {
        *levels = UnetLevels { channel_mult: mult.clone(), layers_per_block };
    }
    let transformer_layers =
        fields.get("transformer_layers").map(|field| (field, per_level(fields, field, 0)));
    let mid_layers = fields.whole("mid_transformer_layers", Dim::Count, 0, 64, "10");
    let linear_projection = fields.boolean("linear_projection");
    if !needed {
        for key in ["qk_norm", "single_layers"] {
            if let (false, Some(field)) = (unet, fields.get(key)) {
                fields.push(
                    Diagnostic::warning(
                        "W005",
                        field.key.span,
                        format!("`{key}` sizes a trained transformer's blocks; sampling does not read it"),
                    )
                    .with_help("remove it, or train the pipeline"),
                );
            }
        }
        if let (false, Some(field)) = (unet, cross_field) {
            // Sampling sizes a transformer's step by its width alone.
            fields.push(
                Diagnostic::warning(
                    "W005",
                    field.key.span,
                    "`cross_attention_dim` sizes a trained transformer's blocks; sampling does \
                     not read it",
                )
                .with_help("remove it, or train the pipeline"),
            );
        }
        return None;
    }
    let examples = [
        ("heads", "heads 24"),
        ("layers", "layers 57"),
        ("channel_mult", "channel_mult 1 2 4 4"),
        ("layers_per_block", "layers_per_block 2"),
        ("cross_attention_dim", "cross_attention_dim 768"),
    ];
    for (key, example) in examples {
        let heads_given = key == "heads" && unet && fields.has("head_dim");
        if (key == "heads" || own.contains(&key)) && !fields.has(key) && !heads_given {
            fields.missing(key, example);
        }
    }
    if let (Some(heads), Some(field)) = (heads_field, head_dim_field) {
        fields.push(
            Diagnostic::error("E014", field.key.span, "`head_dim` and `heads` both give the heads")
                .with_label(heads.key.span, "`heads` given here")
                .with_help(
                    "keep `heads` for a fixed count, or `head_dim` for heads of a fixed width",
                ),
        );
        return None;
    }
    let heads = match (heads, head_dim) {
        (Some(count), _) => Heads::Count(count),
        (None, Some(width)) => Heads::Width(width),
        (None, None) => return None,
    };
    let layout = if unet {
        let channel_mult = mult?;
        let transformer_layers = level_layers(fields, transformer_layers, &channel_mult)?;
        // diffusers builds the mid block with the deepest level's `transformer_layers_per_block`
        // (`UNet2DConditionModel.__init__`); where that level has no attention (SD 1.x/2.x) the
        // configuration's value there is the default, 1.
        let mid_transformer_layers = if fields.has("mid_transformer_layers") {
            mid_layers?
        } else {
            transformer_layers.last().copied().filter(|n| *n > 0).unwrap_or(1)
        };
        if let (Heads::Width(width), Some(field)) = (heads, head_dim_field) {
            let mut attention: Vec<usize> = (transformer_layers.iter().enumerate())
                .filter(|(_, layers)| **layers > 0)
                .map(|(level, _)| level)
                .collect();
            if mid_transformer_layers > 0 {
                attention.push(channel_mult.len() - 1);
            }
            head_width_tiles(fields, field, width, hidden?, &channel_mult, &attention)?;
        }
        BlockLayout::Unet {
            channel_mult,
            layers_per_block: layers_per_block?,
            cross_attention_dim: cross?,
            transformer_layers,
            mid_transformer_layers,
            linear_projection: linear_projection.unwrap_or(false),
        }
    } else {
        let cross_attention = if fields.has("cross_attention_dim") { Some(cross?) } else { None };
        // Most DiTs trained today normalize queries and keys; the fp32 copies count when unsaid.
        let qk_norm = fields.boolean("qk_norm").unwrap_or(true);
        let layers = layers?;
        let single_layers = match fields.get("single_layers") {
            Some(field) => {
                let (value, span) = fields.quantity(field, Dim::Count, "38")?;
                fields.check_whole(&field.key.name, value, span, 0, layers)?
            }
            None => 0,
        };
        BlockLayout::Transformer { layers, cross_attention, qk_norm, single_layers }
    };
    Some(DenoiserBlocks { heads, layout })
}

/// Checks that heads of `width` tile the channels of every level with attention (`attention`,
/// level indices): a level of `hidden × channel_mult[i]` channels has that over `width` heads.
fn head_width_tiles(
    fields: &Fields<'_>,
    field: &crate::ast::Field,
    width: u64,
    hidden: u64,
    channel_mult: &[u64],
    attention: &[usize],
) -> Option<()> {
    // hidden ≤ 2^16 and multipliers ≤ 64: the product cannot overflow.
    let Some((level, channels)) = attention
        .iter()
        .map(|&level| (level, hidden * channel_mult[level]))
        .find(|(_, channels)| channels % width != 0)
    else {
        return Some(());
    };
    fields.push(
        Diagnostic::error(
            "E014",
            field.span,
            format!("`head_dim {width}` does not divide the {channels} channels of level {level}"),
        )
        .with_help("heads of this width must tile every attention level's channels"),
    );
    None
}

/// The transformer layers of each level's attention blocks: the `transformer_layers` field
/// (with its counts, when they were readable), one per level of `channel_mult`; without it, the
/// SD 1.x/2.x layout: one layer at every level but the deepest (diffusers
/// `CrossAttnDownBlock2D` levels, then a `DownBlock2D`).
fn level_layers(
    fields: &Fields<'_>,
    given: Option<(&crate::ast::Field, Option<Vec<u64>>)>,
    channel_mult: &[u64],
) -> Option<Vec<u64>> {
    let Some((field, counts)) = given else {
        let mut counts = vec![1; channel_mult.len()];
        counts[channel_mult.len() - 1] = 0;
        return Some(counts);
    };
    let counts = counts?;
    if counts.len() != channel_mult.len() {
        fields.push(
            Diagnostic::error(
                "E014",
                field.span,
                format!(
                    "`transformer_layers` has {} levels, but `channel_mult` has {}",
                    counts.len(),
                    channel_mult.len()
                ),
            )
            .with_help("give one count per level, 0 for a level without attention"),
        );
        return None;
    }
    Some(counts)
}

/// One whole number per UNet level (`channel_mult 1 2 4 4`, `transformer_layers 0 2 10`), each
/// at least `min` and at most 64, at most 8 levels.
fn per_level(fields: &Fields<'_>, field: &crate::ast::Field, min: u64) -> Option<Vec<u64>> {
    let key = field.key.name.as_str();
    let example = if min == 0 { "transformer_layers 0 2 10" } else { "channel_mult 1 2 4 4" };
    let mut counts = Vec::new();
    for value in &field.values {
        let crate::ast::Value::Expr(expr) = value else {
            fields.push(Diagnostic::error(
                "E013",
                value.span(),
                format!("`{key}` takes whole numbers, such as `{example}`"),
            ));
            return None;
        };
        let quantity = match super::quantity::evaluate(expr) {
            Ok(q) if q.dim == Dim::Count => q,
            Ok(q) => {
                fields.push(Diagnostic::error(
                    "E005",
                    expr.span(),
                    format!("`{key}` needs counts, but this is {}", q.dim),
                ));
                return None;
            }
            Err(diagnostic) => {
                fields.push(diagnostic);
                return None;
            }
        };
        counts.push(fields.check_whole(key, quantity.value, expr.span(), min, 64)?);
    }
    if !(1..=8).contains(&counts.len()) {
        fields.push(Diagnostic::error(
            "E013",
            field.span,
            format!("`{key}` takes 1 to 8 levels; it has {}", counts.len()),
        ));
        return None;
    }
    Some(counts)
}

/// Checks a `diffusion` section; `training`: the workload also has a `training` section, so the
/// pipeline is trained rather than sampled.
pub(super) fn diffusion(
    block: &Block,
    scope: &Scope<'_>,
    training: bool,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Diffusion> {
    const KNOWN: &[(&str, Repeat)] = &[
        ("denoiser", Repeat::Once),
        ("text_encoders", Repeat::Once),
        ("vae", Repeat::Once),
        ("safety_checker", Repeat::Once),
        ("controlnet", Repeat::Once),
        ("controlnet_blocks", Repeat::Once),
        ("image_vae", Repeat::Once),
        ("weights", Repeat::Once),
        ("denoiser_weights", Repeat::Once),
        ("denoiser_experts", Repeat::Once),
        ("text_encoder_weights", Repeat::Once),
        ("architecture", Repeat::Once),
        ("hidden", Repeat::Once),
        ("ffn", Repeat::Once),
        ("resolution", Repeat::Once),
        ("frames", Repeat::Once),
        ("video_frames", Repeat::Once),
        ("vae_temporal", Repeat::Once),
        ("vae_cache", Repeat::Once),
        ("batch", Repeat::Once),
        ("cfg", Repeat::Once),
        ("text_tokens", Repeat::Once),
        ("vae_channels", Repeat::Once),
        ("patch_pixels", Repeat::Once),
        ("patch_frames", Repeat::Once),
        ("vae_tiling", Repeat::Once),
        ("vae_tile", Repeat::Once),
        ("vae_upcast", Repeat::Once),
        ("vae_slicing", Repeat::Once),
        ("offload", Repeat::Once),
        ("quantize_on_load", Repeat::Once),
        ("loaded_as", Repeat::Once),
        ("fuse_qkv", Repeat::Once),
        ("video_vae", Repeat::Once),
        ("loaded_on_device", Repeat::Once),
        ("blocks_per_group", Repeat::Once),
        ("offload_stream", Repeat::Once),
        ("attention", Repeat::Once),
        ("attention_slice", Repeat::Once),
        ("heads", Repeat::Once),
        ("layers", Repeat::Once),
        ("channel_mult", Repeat::Once),
        ("layers_per_block", Repeat::Once),
        ("cross_attention_dim", Repeat::Once),
        ("transformer_layers", Repeat::Once),
        ("mid_transformer_layers", Repeat::Once),
        ("linear_projection", Repeat::Once),
        ("head_dim", Repeat::Once),
        ("rope", Repeat::Once),
        ("qk_norm", Repeat::Once),
        ("single_layers", Repeat::Once),
        ("blocks_to_swap", Repeat::Once),
        ("single_blocks_to_swap", Repeat::Once),
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
    let safety_checker = fields.name("safety_checker").and_then(model);
    let controlnet_model = fields.name("controlnet").and_then(model);
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
    let video = video(&fields, block, training);
    let frames = fields.whole("frames", Dim::Count, 1, 4096, "13").unwrap_or(1);
    let batch = fields.whole("batch", Dim::Count, 1, 4096, "1").unwrap_or(1);
    // Two-expert pipelines (Wan 2.2 A14B) hold a copy of the denoiser's weights per expert.
    let experts = fields.whole("denoiser_experts", Dim::Count, 1, 8, "2").unwrap_or(1);
    // Training runs the denoiser once per step on its batch (captions dropped at random stand in
    // for the unconditional branch); guidance and model offload belong to sampling, and tiling to
    // the decoder, which a training step does not run.
    if training {
        let inference_only = [
            "cfg",
            "offload",
            "loaded_on_device",
            "blocks_per_group",
            "offload_stream",
            "attention",
            "attention_slice",
            "fuse_qkv",
            "vae_tiling",
            "vae_upcast",
            "vae_slicing",
            "denoiser_experts",
            "safety_checker",
            "controlnet_blocks",
        ];
        for key in inference_only {
            if let Some(field) = fields.get(key) {
                fields.push(
                    Diagnostic::error(
                        "E013",
                        field.key.span,
                        format!("`{key}` is an inference setting; this pipeline is trained"),
                    )
                    .with_help(format!("remove `{key}`, or the `training` section")),
                );
            }
        }
    }
    let cfg = match fields.choice("cfg", &["true", "false", "separate"]) {
        Some(("true", _)) => Guidance::Batched,
        Some(("separate", _)) => Guidance::Separate,
        Some(_) => Guidance::None,
        None if training => Guidance::None,
        None => Guidance::Batched,
    };
    let text_tokens =
        fields.whole("text_tokens", Dim::Tokens, 0, 100_000, "512 tokens").unwrap_or(77);
    let image_vae = image_vae(&fields, block, training);
    // Sana's transformer takes the DC-AE's 32 × 32-pixel latents unpatched.
    let patch_pixels = if image_vae == Some(ImageVae::DcAe) && !fields.has("patch_pixels") {
        32
    } else {
        patch_pixels(&fields, block)
    };
    // Latent frames per token: 1 unless the transformer patches time too (CogVideoX 1.5's
    // `patch_size_t` 2).
    let patch_frames = fields.whole("patch_frames", Dim::Count, 1, 16, "2").unwrap_or(1);
    // The decoders' base channels: 128 for the AutoencoderKL family and CogVideoX's, 96 for
    // Wan 2.1's (`base_dim`).
    let wan = matches!(&video, Ok(Some(v)) if v.decoder == VideoDecoder::Wan);
    let vae_channels = fields.whole("vae_channels", Dim::Count, 1, 4096, "128").unwrap_or(if wan {
        96
    } else {
        128
    });
    let vae_tiling = fields.boolean("vae_tiling").unwrap_or(false);
    // diffusers' AutoencoderKL tiles at its config's `sample_size`: 1024 for the SDXL, SD3 and
    // FLUX autoencoders, 512 for SD 1.x's. A width and height for tiles that are not square
    // (AutoencoderKLCogVideoX: half its `sample_width` × `sample_height`, 360 x 240).
    let vae_tile = fields.get("vae_tile").and_then(|f| fields.dimensions(f, 8, 1 << 16, "1024"));
    // Video VAEs tile at their own sizes (`default_vae_tile`).
    let default_tile = crate::hir::default_vae_tile(
        video.as_ref().ok().and_then(Option::as_ref),
        image_vae.unwrap_or(ImageVae::Kl),
    );
    let vae_tile = if fields.has("vae_tile") { vae_tile } else { Some(default_tile) };
    let vae_upcast = fields.boolean("vae_upcast").unwrap_or(false);
    let vae_slicing = fields.boolean("vae_slicing").unwrap_or(false);
    // diffusers upcasts only a VAE loaded in fp16 (`self.vae.dtype == torch.float16`).
    let vae_fp16 = weights == WeightFormat::Uniform(crate::precision::Precision::Fp16);
    let offload = fields.choice("offload", &["none", "model", "sequential", "blocks", "leaves"]);
    if let Some((word @ ("sequential" | "leaves"), span)) = offload {
        // Sequential and leaf-level offload size what they move by each model's largest module.
        let what = if word == "sequential" { "sequential offload" } else { "leaf-level offload" };
        let models = denoiser_model.iter().chain(&text_encoders).chain(&vae);
        for model in models.filter(|m| scope.program_models_without_largest_module.contains(m)) {
            fields.push(
                Diagnostic::error(
                    "E011",
                    span,
                    format!(
                        "model `{model}` has only a parameter count; {what} moves one module \
                         at a time and needs the largest one's"
                    ),
                )
                .with_help(format!(
                    "give `{model}` a `largest_module` (the parameters of its largest linear \
                     layer, embedding or convolution), or use `offload model`"
                )),
            );
        }
    }
    if let (Some(("blocks", span)), Some(model)) = (offload, &denoiser_model)
        && scope.program_models_without_blocks.contains(model)
    {
        // diffusers would cut the denoiser's block lists; without their sizes it is held whole.
        diagnostics.push(
            Diagnostic::warning(
                "W005",
                span,
                format!("denoiser `{model}` declares no blocks; `offload blocks` holds it whole"),
            )
            .with_help(format!(
                "give `{model}` its `largest_block` and `outside_blocks` (its top-level block \
                 lists' largest entry and what lies outside them)"
            )),
        );
    }
    let offload = offload.map(|(word, _)| word);
    let blocks_per_group = fields.whole("blocks_per_group", Dim::Count, 1, 4096, "2").unwrap_or(1);
    let offload_stream = fields.boolean("offload_stream").unwrap_or(false);
    let per_group_field = block.fields.iter().find(|f| f.key.name == "blocks_per_group");
    if let (true, Some(field)) = (offload_stream && blocks_per_group > 1, per_group_field) {
        // diffusers `_apply_group_offloading_block_level`: "Using streams is only supported for
        // num_blocks_per_group=1", and it sets 1.
        diagnostics.push(
            Diagnostic::warning(
                "W005",
                field.key.span,
                "`blocks_per_group` is 1 under `offload_stream true` (diffusers sets it)",
            )
            .with_help("remove `blocks_per_group`, or `offload_stream`"),
        );
    }
    let quantize_on_load = fields.boolean("quantize_on_load").unwrap_or(false);
    let fuse_qkv = fields.boolean("fuse_qkv").unwrap_or(false);
    if let (true, Some(model)) = (fuse_qkv, &denoiser_model)
        && scope.program_models_without_attention_qkv.contains(model)
    {
        let span =
            block.fields.iter().find(|f| f.key.name == "fuse_qkv").map_or(block.span, |f| f.span);
        fields.push(
            Diagnostic::error(
                "E011",
                span,
                format!("`fuse_qkv` copies the q, k and v projections of `{model}`, which gives no `attention_qkv`"),
            )
            .with_help(format!("give `{model}` its `attention_qkv` (the parameters of its attention layers' q, k and v projections)")),
        );
    }
    let loaded_as = fields.precision("loaded_as");
    let loaded_as_field = block.fields.iter().find(|f| f.key.name == "loaded_as");
    if let (Some(load), Some(field)) = (loaded_as, loaded_as_field)
        && !load.is_float_compute()
    {
        fields.push(
            Diagnostic::error(
                "E013",
                field.key.span,
                "`loaded_as` is a float type: fp32, fp16 or bf16",
            )
            .with_help("the `torch_dtype` the pipeline was loaded with, such as `loaded_as bf16`"),
        );
    }
    let loaded_on_device = fields.boolean("loaded_on_device").unwrap_or(false);
    // Weights that are not the type they were loaded in were cast or quantized after loading.
    let stored = [Some(weights), Some(denoiser_weights)]
        .into_iter()
        .chain(text_encoder_weights.iter().flatten().map(|w| Some(*w)))
        .flatten()
        .map(|w| w.matrix(crate::quant::Matrix::Up, 0, 1, 1));
    let cast_after_load = loaded_as.is_some() || stored.into_iter().any(|p| !p.is_float_compute());
    // A setting that means something only beside another is said to do nothing, not ignored
    // silently (a trained pipeline has already refused them).
    if !training {
        let alone = [
            (
                "loaded_on_device",
                // Read inside backticks: "without `offload model` or `offload sequential`".
                "offload model`, `sequential`, `blocks`, `leaves`, `loaded_as` or a weight \
                 format cast after loading",
                matches!(offload, Some("model" | "sequential" | "blocks" | "leaves"))
                    || cast_after_load,
            ),
            ("blocks_per_group", "offload blocks", offload == Some("blocks")),
            (
                "offload_stream",
                "offload blocks` or `offload leaves",
                matches!(offload, Some("blocks" | "leaves")),
            ),
            ("vae_tile", "vae_tiling true", vae_tiling),
            ("controlnet_blocks", "controlnet", fields.has("controlnet")),
            ("vae_slicing", "batch 2` or more (one image decodes alone anyway", batch > 1),
            ("patch_pixels", "architecture dit", architecture == Some(false)),
            ("patch_frames", "architecture dit", architecture == Some(false)),
            ("vae_temporal", "video_frames", fields.has("video_frames")),
            ("vae_cache", "video_frames", fields.has("video_frames")),
            ("video_vae", "video_frames", fields.has("video_frames")),
            if fields.has("vae") {
                ("vae_upcast", "weights fp16", vae_fp16)
            } else {
                ("vae_upcast", "vae", false)
            },
        ];
        for (key, needs, present) in alone {
            let written = block.fields.iter().find(|f| f.key.name == key);
            if let (false, Some(field)) = (present, written) {
                diagnostics.push(
                    Diagnostic::warning(
                        "W005",
                        field.key.span,
                        format!("`{key}` has no effect without `{needs}`"),
                    )
                    .with_help(format!("add `{needs}`, or remove `{key}`")),
                );
            }
        }
    }
    let rope = rope(&fields, architecture, training);
    let ffn = ffn(&fields, architecture);
    let attention = attention(&fields, block, architecture);
    let unfused = !matches!(attention, Some(DiffusionAttention::Fused));
    let mut levels = UnetLevels::default();
    // Swapped blocks are sized by the block layout, sampled or trained.
    let needed = training || unfused || block_swap::written(&fields);
    let blocks = blocks(&fields, architecture, hidden, needed, &mut levels);
    if let (false, Some(true), Some(field)) =
        (training, architecture, fields.first("linear_projection"))
    {
        fields.push(
            Diagnostic::warning(
                "W005",
                field.key.span,
                "`linear_projection` sizes a trained UNet's attention blocks; sampling does not \
                 read it",
            )
            .with_help("remove it, or train the pipeline"),
        );
    }
    let swap = block_swap::block_swap(
        &fields,
        scope,
        &block_swap::Context {
            unet: architecture,
            layout: blocks.as_ref().map(|b| &b.layout),
            model: denoiser_model.as_ref(),
            offload: offload.filter(|w| *w != "none"),
            experts,
            trained: training,
        },
    );
    let controlnet = if training && architecture == Some(false) {
        if let Some(field) = fields.first("controlnet") {
            fields.push(
                Diagnostic::error(
                    "E013",
                    field.key.span,
                    "training a transformer's ControlNet is not modelled",
                )
                .with_help(
                    "a UNet's ControlNet trains (diffusers train_controlnet.py); sample this \
                     one, or remove the `training` section",
                ),
            );
        }
        None
    } else {
        controlnet(&fields, controlnet_model, architecture, offload, levels)
    };
    let found = fields.finish();
    // A warning (W005) leaves the pipeline evaluated.
    let ok = !found.iter().any(Diagnostic::is_error);
    diagnostics.extend(found);
    let (width, height) = resolution?;
    let text_encoder_weights = text_encoder_weights?;
    let video = video.ok()?;
    let vae_tile = vae_tile?;
    let image_vae = image_vae?;
    let denoiser = Denoiser {
        model: denoiser_model?,
        unet: architecture?,
        hidden: hidden?,
        weights: denoiser_weights,
        rope: rope.unwrap_or(Rope::None),
        ffn: ffn.ok()?,
        blocks,
        experts,
        swap,
    };
    ok.then(|| Diffusion {
        denoiser,
        text_encoders,
        text_encoder_weights,
        vae,
        vae_weights: weights,
        safety_checker: safety_checker.filter(|_| !training),
        controlnet,
        image_vae,
        width,
        height,
        frames: video.map_or(frames, Video::latent_frames),
        video,
        batch,
        cfg,
        text_tokens,
        vae_channels,
        patch_pixels,
        patch_frames,
        vae_tile: vae_tiling.then_some(vae_tile),
        vae_upcast: vae_upcast && vae_fp16 && !training,
        vae_slicing: vae_slicing && !training,
        attention: attention.unwrap_or(DiffusionAttention::Fused),
        offload: match offload {
            Some("model") => DiffusionOffload::Model { loaded_on_device },
            Some("sequential") => DiffusionOffload::Sequential { loaded_on_device },
            Some("blocks") => DiffusionOffload::Group {
                per_group: if offload_stream { 1 } else { blocks_per_group },
                stream: offload_stream,
                loaded_on_device,
            },
            Some("leaves") => {
                DiffusionOffload::Group { per_group: 0, stream: offload_stream, loaded_on_device }
            }
            _ => DiffusionOffload::None,
        },
        preparation: Preparation { quantize_on_load, loaded_as, fuse_qkv, loaded_on_device },
    })
}

/// `attention fused | eager | sliced` and `attention_slice auto | max | N` while sampling;
/// `None` after an error. Unfused attention is modelled for a UNet, whose structure fields then
/// give each attention level's heads and positions.
fn attention(
    fields: &Fields<'_>,
    block: &crate::ast::Block,
    unet: Option<bool>,
) -> Option<DiffusionAttention> {
    let written = fields.choice("attention", &["fused", "eager", "sliced"]);
    let slice_field = block.fields.iter().find(|f| f.key.name == "attention_slice");
    let slice = match slice_field {
        None => Some(AttentionSlice::Auto),
        Some(field) => match field.values.as_slice() {
            [crate::ast::Value::Word(word)] => fields
                .word_in(field, word, &["auto", "max"])
                .map(|w| if w == "auto" { AttentionSlice::Auto } else { AttentionSlice::Max }),
            _ => fields
                .whole("attention_slice", Dim::Count, 1, 4096, "auto")
                .map(AttentionSlice::Heads),
        },
    };
    if let (Some(field), false) = (slice_field, matches!(written, Some(("sliced", _)))) {
        fields.push(
            Diagnostic::warning(
                "W005",
                field.key.span,
                "`attention_slice` has no effect without `attention sliced`",
            )
            .with_help("add `attention sliced`, or remove `attention_slice`"),
        );
    }
    let attention = match written {
        None | Some(("fused", _)) => return Some(DiffusionAttention::Fused),
        Some(("eager", span)) => (DiffusionAttention::Eager, span),
        Some((_, span)) => (DiffusionAttention::Sliced(slice?), span),
    };
    if unet == Some(false) {
        fields.push(
            Diagnostic::error(
                "E013",
                attention.1,
                "unfused attention is modelled for a UNet denoiser; a transformer denoiser runs fused",
            )
            .with_help("remove `attention`, or describe a UNet (`architecture unet`)"),
        );
        return None;
    }
    Some(attention.0)
}

/// `patch_pixels`: the pixels one transformer token spans on a side, a multiple of the VAE's 8
/// (16 when not given: an 8× VAE under 2 × 2 patches).
fn patch_pixels(fields: &Fields<'_>, block: &Block) -> u64 {
    let value = fields.whole("patch_pixels", Dim::Count, 8, 256, "32");
    let field = block.fields.iter().find(|f| f.key.name == "patch_pixels");
    match (value, field) {
        (Some(pixels), Some(field)) if pixels % 8 != 0 => {
            fields.push(
                Diagnostic::error(
                    "E007",
                    field.span,
                    format!("`patch_pixels` is {pixels}; it must be a multiple of 8"),
                )
                .with_help(
                    "the VAE's spatial factor times the patch size, such as `patch_pixels 32`",
                ),
            );
            16
        }
        (Some(pixels), _) => pixels,
        (None, _) => 16,
    }
}
