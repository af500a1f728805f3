//! A trained diffusion pipeline: the `diffusion { ... }` section with the denoiser's block
//! structure, and a `training { ... }` section for the denoiser (method, precision, optimizer,
//! checkpointing, attention).
//!
//! Each pipeline's structure comes from its model's configuration ([`pipeline`]); the rest is
//! read from the point, and what the source leaves open is taken from the example command it
//! publishes, with an assumption saying so.

use std::fmt::Write as _;

use super::Cx;
use super::conditions::{Distribution, Offload};
use crate::gaps::{Gap, assume, data, feature};

/// The fixed settings of a trained pipeline.
struct Pipeline {
    denoiser: &'static str,
    encoders: &'static [&'static str],
    vae: &'static str,
    /// The `diffusion` section's structure lines (architecture, sizes, text tokens).
    structure: &'static str,
    /// A video denoiser's causal VAE: the frames it compresses into each latent frame after the
    /// first (`None` for an image pipeline).
    temporal: Option<u64>,
    /// The ControlNet of the pipeline's UNet that `models.vram` declares, which diffusers'
    /// train_controlnet scripts train beside it (`None`: a transformer's, not modelled).
    controlnet: Option<&'static str>,
}

/// The pipeline for a `model` wording, or the gap that stops it.
fn pipeline(model: &str) -> Result<Pipeline, Gap> {
    let name = model.trim().rsplit('/').next().unwrap_or_default().to_lowercase();
    let text: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
    let has = |keys: &[&str]| keys.iter().any(|k| text.contains(k));
    if has(&["stablediffusionv1", "stablediffusion1", "sdv1", "sd14", "sd15"]) {
        // CompVis v1 UNet (configs/stable-diffusion/v1-inference.yaml, diffusers
        // unet/config.json), shared by v1.4 and v1.5: model_channels 320, channel_mult
        // [1, 2, 4, 4], num_res_blocks 2, attention at the three upper levels, 8 heads,
        // context_dim 768 (CLIP-L); prompts of 77 CLIP tokens.
        Ok(Pipeline {
            denoiser: "sd14-unet",
            encoders: &["clip-l-text"],
            vae: "sd-vae",
            structure: "    architecture  unet\n    hidden        320\n    heads         8\n    \
                        channel_mult  1 2 4 4\n    layers_per_block 2\n    \
                        cross_attention_dim 768\n    text_tokens   77 tokens\n",
            temporal: None,
            controlnet: Some("sd15-controlnet"),
        })
    } else if has(&["stablediffusionxl", "sdxl"]) && !has(&["refiner"]) {
        // SDXL base 1.0's unet/config.json: block_out_channels 320 640 1280,
        // layers_per_block 2, transformer_layers_per_block 1 2 10 with no attention at the
        // first level, 64-wide heads, use_linear_projection true, cross_attention_dim 2048
        // (CLIP-L and bigG concatenated);
        // prompts of 77 CLIP tokens, as for inference (`express/diffusion.rs`).
        Ok(Pipeline {
            denoiser: "sdxl-unet",
            encoders: &["clip-l-text", "clip-g-text"],
            vae: "sdxl-vae",
            structure: "    architecture  unet\n    hidden        320\n    \
                        channel_mult  1 2 4\n    layers_per_block 2\n    \
                        transformer_layers 0 2 10\n    head_dim      64\n    \
                        linear_projection true\n    \
                        cross_attention_dim 2048\n    text_tokens   77 tokens\n",
            temporal: None,
            controlnet: Some("sdxl-controlnet"),
        })
    } else if has(&["flux1dev", "fluxdev"]) {
        // FLUX.1-dev: hidden 3072, 24 heads, 19 double and 38 single blocks (DOMAIN.md §7.1);
        // T5 max_sequence_length 512 (the training script's default).
        Ok(Pipeline {
            denoiser: "flux1-dev-transformer",
            encoders: &["t5-xxl-encoder", "clip-l-text"],
            vae: "flux-vae",
            structure: "    architecture  dit\n    hidden        3072\n    heads         24\n    \
                        layers        57  # 19 double + 38 single blocks\n    \
                        single_layers 38\n    text_tokens   512 tokens\n    \
                        qk_norm       true\n",
            temporal: None,
            controlnet: None,
        })
    } else if let Some(pipeline) = transformer_pipeline(&has) {
        Ok(pipeline)
    } else {
        Err(Gap::feature(
            feature::PIPELINE,
            format!(
                "{model}: no trained pipeline in crates/accuracy/src/express/diffusion_training.rs"
            ),
        ))
    }
}

/// The transformer denoisers whose blocks the language writes as uniform DiT blocks: SD3 and
/// SD 3.5 (MMDiT), CogVideoX and HunyuanVideo attending jointly over the latent patches and the
/// text; Wan 2.1, PixArt and LTX-Video's 2 B transformer over the patches with a
/// cross-attention to the text. Each
/// block's attention and MLP store per token what a DiT block does; MMDiT-X's second attention
/// in SD 3.5 Medium's first 13 blocks and the fp32 rotary embeddings of the video models are
/// not counted. Those that normalize their queries and keys say so (`qk_norm`, from each
/// model's diffusers configuration or block defaults: FLUX, SD 3.5, CogVideoX, HunyuanVideo,
/// Wan 2.1 and LTX-Video; not SD3 Medium or PixArt).
fn transformer_pipeline(has: &dyn Fn(&[&str]) -> bool) -> Option<Pipeline> {
    if has(&["stablediffusion3", "sd3"]) {
        // transformer/config.json (models.vram): 64-wide heads; 3.5 Large 38 layers of 38
        // heads, 3.5 Medium and SD3 Medium 24 of 24. The diffusers SD3 training scripts encode
        // 77 CLIP tokens and `--max_sequence_length` 77 T5 tokens, joined in one sequence.
        let large = has(&["35large", "sd35l"]);
        let medium35 = has(&["35medium", "sd35m"]);
        // SD 3.5's blocks normalize queries and keys (its configurations' `qk_norm`
        // "rms_norm"); SD3 Medium's do not (`qk_norm` null).
        let (denoiser, structure) = if large {
            (
                "sd35-large-transformer",
                "    architecture  dit\n    hidden        2432\n    heads         38\n    \
                 layers        38\n    text_tokens   154 tokens  # 77 CLIP + 77 T5\n    \
                 qk_norm       true\n",
            )
        } else if medium35 {
            (
                "sd35-medium-transformer",
                "    architecture  dit\n    hidden        1536\n    heads         24\n    \
                 layers        24\n    text_tokens   154 tokens  # 77 CLIP + 77 T5\n    \
                 qk_norm       true\n",
            )
        } else {
            (
                "sd3-medium-transformer",
                "    architecture  dit\n    hidden        1536\n    heads         24\n    \
                 layers        24\n    text_tokens   154 tokens  # 77 CLIP + 77 T5\n    \
                 qk_norm       false\n",
            )
        };
        return Some(Pipeline {
            denoiser,
            encoders: &["clip-l-text", "clip-g-text", "t5-xxl-encoder"],
            vae: "sd3-vae",
            structure,
            temporal: None,
            controlnet: None,
        });
    }
    if has(&["cogvideox"]) && !has(&["cogvideox15"]) {
        // CogVideoX transformer/config.json: 2b 30 layers of 30 heads of 64, 5b 42 of 48;
        // 226 T5 tokens (max_text_seq_length); 2 × 2 patches of 8× latents, 4 frames each.
        let five = has(&["5b"]);
        return Some(Pipeline {
            denoiser: if five { "cogvideox-5b-transformer" } else { "cogvideox-2b-transformer" },
            encoders: &["t5-xxl-encoder"],
            vae: "cogvideox-vae",
            structure: if five {
                "    architecture  dit\n    hidden        3072\n    heads         48\n    \
                 layers        42\n    text_tokens   226 tokens\n    qk_norm       true\n"
            } else {
                "    architecture  dit\n    hidden        1920\n    heads         30\n    \
                 layers        30\n    text_tokens   226 tokens\n    qk_norm       true\n"
            },
            temporal: Some(4),
            controlnet: None,
        });
    }
    if has(&["hunyuanvideo"]) && !has(&["i2v"]) {
        // HunyuanVideoTransformer3DModel (models.vram): 24 heads of 128, 20 double-stream and 40
        // single-stream blocks; its pipeline's 256 LLaVA tokens (max_sequence_length).
        return Some(Pipeline {
            denoiser: "hunyuan-video-transformer",
            encoders: &["llava-llama3-8b-text", "clip-l-text"],
            vae: "hunyuan-video-vae",
            structure: "    architecture  dit\n    hidden        3072\n    heads         24\n    \
                        layers        60  # 20 double + 40 single blocks\n    \
                        single_layers 40\n    text_tokens   256 tokens\n    \
                        qk_norm       true\n",
            temporal: Some(4),
            controlnet: None,
        });
    }
    if has(&["wan21"]) && !has(&["i2v", "vace", "flf2v"]) {
        // Wan 2.1 T2V transformer/config.json (models.vram): 1.3B 30 layers of 12 heads of 128
        // (1536), ffn_dim 8960; 14B 40 layers of 40 heads (5120), ffn_dim 13824. Each block's
        // cross-attention reads the umT5 embeddings after the condition embedder projects them
        // to the model's width; 512 tokens (max_sequence_length); 2 × 2 patches of 8× latents
        // of 4 frames each.
        let small = has(&["13b"]) && !has(&["14b"]);
        return Some(Pipeline {
            denoiser: if small {
                "wan21-t2v-1.3b-transformer"
            } else {
                "wan21-t2v-14b-transformer"
            },
            encoders: &["umt5-xxl-encoder"],
            vae: "wan-vae",
            structure: if small {
                "    architecture  dit\n    hidden        1536\n    heads         12\n    \
                 layers        30\n    ffn           8960\n    \
                 cross_attention_dim 1536\n    text_tokens   512 tokens\n    \
                 qk_norm       true\n"
            } else {
                "    architecture  dit\n    hidden        5120\n    heads         40\n    \
                 layers        40\n    ffn           13824\n    \
                 cross_attention_dim 5120\n    text_tokens   512 tokens\n    \
                 qk_norm       true\n"
            },
            temporal: Some(4),
            controlnet: None,
        });
    }
    if has(&["pixart"]) {
        // PixArt XL/2 (models.vram): 28 layers of 16 heads of 72 (1152), a cross-attention over
        // the T5 embeddings projected to 1152; 120 T5 tokens for alpha, 300 for Sigma
        // (max_sequence_length).
        let sigma = has(&["sigma"]);
        return Some(Pipeline {
            denoiser: if sigma { "pixart-sigma-xl-2" } else { "pixart-alpha-xl-2" },
            encoders: &["t5-xxl-encoder"],
            vae: if sigma { "sdxl-vae" } else { "sd-vae" },
            structure: if sigma {
                "    architecture  dit\n    hidden        1152\n    heads         16\n    \
                 layers        28\n    cross_attention_dim 1152\n    \
                 text_tokens   300 tokens\n    qk_norm       false\n"
            } else {
                "    architecture  dit\n    hidden        1152\n    heads         16\n    \
                 layers        28\n    cross_attention_dim 1152\n    \
                 text_tokens   120 tokens\n    qk_norm       false\n"
            },
            temporal: None,
            controlnet: None,
        });
    }
    if has(&["ltxvideo", "ltxv"]) && !has(&["13b", "097", "098"]) {
        // LTX-Video 0.9.0 to 0.9.5 (models.vram): 28 layers of 32 heads of 64, each with a
        // cross-attention over the T5 embeddings projected to 2048 (cross_attention_dim); 128
        // T5 tokens (max_sequence_length); its VAE compresses 32 × 32 pixels and 8 frames into
        // each latent, which the transformer takes unpatched.
        return Some(Pipeline {
            denoiser: "ltxv-2b-transformer",
            encoders: &["t5-xxl-encoder"],
            vae: "",
            structure: "    architecture  dit\n    hidden        2048\n    heads         32\n    \
                        layers        28\n    cross_attention_dim 2048\n    \
                        text_tokens   128 tokens\n    \
                        patch_pixels  32  # 32 x 32 pixels per latent, no patching\n    \
                        qk_norm       true\n",
            temporal: Some(8),
            controlnet: None,
        });
    }
    None
}

/// The latent frames a video denoiser trains on: the point's frames through the causal VAE
/// (the first frame alone, then `temporal` frames per latent frame).
fn latent_frames(cx: &mut Cx<'_>, temporal: u64) -> Option<u64> {
    let text = cx.point.image_or_video.clone().unwrap_or_default();
    if let Some(latent) = super::diffusion::latent_frames_stated(&text) {
        return Some(latent);
    }
    let Some(frames) = super::diffusion::video_frames(&text) else {
        cx.gap(Gap::data(data::IMAGE_SIZE, format!("image_or_video = {text:?}: no frames")));
        return None;
    };
    if frames == 0 || (frames - 1) % temporal != 0 {
        cx.unreadable("image_or_video frames", &frames.to_string());
        return None;
    }
    Some((frames - 1) / temporal + 1)
}

/// The section's lines, or `None` when a gap stops it.
pub(super) fn body(cx: &mut Cx<'_>, distribution: &Distribution) -> Option<String> {
    // Only the point's own parallelism and offload fields say how the measured run was
    // distributed (its other settings may quote an example configuration it did not use).
    // Read on, so that the point's other gaps are listed too.
    let stated = [&cx.point.parallelism, &cx.point.offload]
        .into_iter()
        .flatten()
        .filter(|text| !super::conditions::is_none_word(&text.to_lowercase()))
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    let (sharding, offload) = if stated.is_empty() {
        (None, &Offload::None)
    } else {
        (distribution.sharding, &distribution.offload)
    };
    let gathered = matches!(sharding, Some("zero3" | "fsdp-full"))
        || matches!(offload, Offload::Parameters(_));
    let pipeline = match pipeline(&cx.point.model) {
        Ok(pipeline) => pipeline,
        Err(gap) => {
            if gathered {
                cx.gap(Gap::feature(feature::SHARDED_DENOISER, stated.clone()));
            }
            cx.gap(gap);
            return None;
        }
    };
    // Gathered a block at a time, the step is sized by the denoiser's blocks.
    if gathered && !declares_blocks(pipeline.denoiser) {
        cx.gap(Gap::feature(feature::SHARDED_DENOISER, stated.clone()));
    }
    let resolution = super::diffusion::resolution(cx);
    let batch = batch(cx);
    let precision = precision(cx);
    let pure = trains_loaded_type(cx);
    let finetune = cx.point.finetune_method.as_deref().unwrap_or_default().to_lowercase();
    let trained_controlnet = pipeline.controlnet.filter(|_| finetune.contains("controlnet"));
    let method = method(cx, uneven_blocks(pipeline.denoiser), pure, trained_controlnet.is_some());
    let checkpointing = checkpointing(cx);
    let optimizer = optimizer(cx);
    let ((width, height), batch, (weights, denoiser, activations), method, checkpointing) =
        (resolution?, batch?, precision?, method?, checkpointing?);
    let optimizer = optimizer?;
    let point = cx.point;
    let settings = point.other_settings.clone().unwrap_or_default().to_lowercase();
    let full = method.trim_start().starts_with("method        full");
    let trains_encoders = settings.contains("train_text_encoder");
    if trains_encoders && full {
        cx.assume(
            assume::SCRIPT_SETTING,
            "train_text_encoders: the example command's --train_text_encoder fine-tunes the \
             text encoder in full beside the UNet",
        );
    } else if trains_encoders {
        cx.assume(assume::TEXT_ENCODER_FROZEN, "--train_text_encoder in the example command");
    }
    let image = point.image_or_video.clone().unwrap_or_default().to_lowercase();
    // Latents encoded beforehand ("pre-cached", "pre-computed", kohya's "cached to disk"), or
    // the encoders stated off the GPU: no encoders and no VAE in the step.
    let cached = ["pre-cached", "pre-computed", "precomputed", "cached to disk"];
    let precomputed = (image.contains("latents") && cached.iter().any(|w| image.contains(w)))
        || image.contains("not on gpu");
    let frames = match pipeline.temporal {
        Some(_) if !precomputed => {
            cx.gap(Gap::feature(
                feature::VIDEO_ENCODE,
                "a video encoded by the causal VAE during training",
            ));
            return None;
        }
        Some(temporal) => Some(latent_frames(cx, temporal)?),
        None => None,
    };

    let mut out = String::from("  diffusion {\n");
    let _ = writeln!(out, "    denoiser      {}", pipeline.denoiser);
    let offload_text = point.offload.clone().unwrap_or_default().to_lowercase();
    if precomputed {
        out.push_str(
            "    # latents and text embeddings computed beforehand: no encoders, no VAE\n",
        );
    } else if offload_text.contains("text encoder") {
        // The embeddings made, the encoders leave the GPU; the VAE encodes each batch.
        out.push_str("    # text encoders offloaded after the embeddings are made\n");
        let _ = writeln!(out, "    vae           {}", pipeline.vae);
    } else {
        let _ = writeln!(out, "    text_encoders {}", pipeline.encoders.join(" "));
        let _ = writeln!(out, "    vae           {}", pipeline.vae);
    }
    if let Some(controlnet) = trained_controlnet {
        let _ = writeln!(out, "    controlnet    {controlnet}  # trained, the UNet frozen");
    }
    let _ = writeln!(out, "    weights       {weights}");
    if denoiser != weights {
        let _ = writeln!(out, "    denoiser_weights {denoiser}");
    }
    out.push_str(pipeline.structure);
    let _ = writeln!(out, "    resolution    {width} x {height}");
    if let (Some(latent), Some(temporal)) = (frames, pipeline.temporal) {
        let _ = writeln!(
            out,
            "    frames        {latent}  # latent frames: the first alone, then {temporal} per latent"
        );
    }
    let _ = writeln!(out, "    batch         {batch}");
    out.push_str("  }\n  training {\n");
    out.push_str(&method);
    if let Some(activations) = activations {
        let _ = writeln!(out, "    activations   {activations}  # mixed precision (autocast)");
    }
    let _ = writeln!(out, "    optimizer     {optimizer}");
    if let Some(kind) = pure.filter(|_| full) {
        let _ = writeln!(out, "    master        none  # trained in its loaded {kind}");
        let _ = writeln!(out, "    gradients     {kind}");
    }
    let _ = writeln!(out, "    checkpointing {}", if checkpointing { "full" } else { "none" });
    if let Some(sharding) = sharding {
        let _ = writeln!(out, "    sharding      {sharding}");
    }
    match offload {
        Offload::Optimizer(_) => out.push_str("    offload       optimizer\n"),
        Offload::Parameters(_) => out.push_str("    offload       parameters\n"),
        Offload::None => {}
    }
    if cx.before_pytorch_2() {
        cx.assume(
            assume::SCRIPT_SETTING,
            "diffusers attention before PyTorch 2.0 (early 2023) without xformers: eager \
             (baddbmm, softmax), whose probabilities are kept for the backward pass",
        );
        out.push_str("    attention     eager\n");
    }
    if trains_encoders && full {
        out.push_str("    train_text_encoders true  # --train_text_encoder\n");
    }
    out.push_str(&cx.gradient_lifetime().unwrap_or_default());
    out.push_str("  }\n");
    Some(out)
}

/// The denoiser's batch: the stated one, doubled by DreamBooth's prior preservation (each step
/// concatenates the instance and class images).
fn batch(cx: &mut Cx<'_>) -> Option<u64> {
    let batch = cx
        .point
        .batch_size
        .or_else(|| cx.smallest_or_gap(Gap::data(data::BATCH, "batch_size: none")))?;
    let settings = cx.point.other_settings.clone().unwrap_or_default().to_lowercase();
    if settings.contains("prior preservation") {
        cx.assume(
            assume::SCRIPT_SETTING,
            "DreamBooth prior preservation (the example command's --with_prior_preservation): \
             each step runs the instance and class images together, twice the batch",
        );
        return Some(2 * batch);
    }
    Some(batch)
}

/// The pipeline's precision, the denoiser's, and autocast's 16-bit type under mixed precision.
fn precision(cx: &mut Cx<'_>) -> Option<(&'static str, &'static str, Option<&'static str>)> {
    let point = cx.point;
    // "not stated (no --mixed_precision in command)" states nothing.
    let stated = |text: &Option<String>| {
        let lower = text.clone().unwrap_or_default().to_lowercase();
        if super::conditions::says_unstated(&lower) { String::new() } else { lower }
    };
    let compute = stated(&point.compute_dtype);
    let quantization = stated(&point.quantization);
    let weights = stated(&point.weight_precision);
    let base = if compute.is_empty() && weights.is_empty() {
        cx.assume(
            assume::SCRIPT_SETTING,
            "precision not stated: fp32, as the example command sets no --mixed_precision \
             (accelerate's default is none)",
        );
        "fp32"
    } else {
        // The compute type, else the weights' stated precision (a data set that gives only
        // `weight_precision`: the script's --mixed_precision casts the frozen parts to it).
        let stated = if compute.is_empty() { weights.clone() } else { compute.clone() };
        match stated.replace("float", "fp").replace("bfp", "bf") {
            s if s.starts_with("bf16") => "bf16",
            s if s.starts_with("fp16") => "fp16",
            s if s.starts_with("fp32") => "fp32",
            _ => {
                cx.unreadable("compute_dtype", &stated);
                return None;
            }
        }
    };
    let denoiser = if quantization.contains("nf4") {
        // diffusers' BitsAndBytesConfig: bnb_4bit_use_double_quant defaults to False.
        "nf4"
    } else if quantization.is_empty() || quantization == "none" {
        base
    } else if quantization.contains("layerwise") {
        // diffusers' enable_layerwise_casting (finetrainers --layerwise_upcasting_modules):
        // fp8 storage, each layer cast to the compute type for its turn.
        "fp8-layerwise"
    } else if quantization.contains("int2") {
        cx.gap(Gap::feature(feature::TWO_BIT_WEIGHTS, quantization.clone()));
        return None;
    } else if quantization.contains("int8") {
        // optimum-quanto's qint8 (SimpleTuner int8-quanto): one byte a weight and a scale per
        // output row.
        "int8"
    } else if quantization.contains("int4") {
        "int4"
    } else if quantization.contains("fp8") {
        // kohya's --fp8_base, optimum-quanto's qfloat8: weights stored in float8.
        "fp8"
    } else {
        cx.unreadable("quantization", &quantization);
        return None;
    };
    let activations = (compute.contains("mixed") && denoiser != base).then_some(base);
    Some((base, denoiser, activations))
}

/// `method full`, or `method lora { ... }` with the rank and the attention projections adapted.
/// `uneven`: what the count leaves out of a denoiser whose adapted blocks are not all in its
/// `layers` (HunyuanVideo's token refiner). `controlnet`: the point trains a ControlNet the
/// pipeline declares, in full.
fn method(
    cx: &mut Cx<'_>,
    uneven: Option<&str>,
    pure: Option<&str>,
    controlnet: bool,
) -> Option<String> {
    let point = cx.point;
    let text = point.finetune_method.clone().unwrap_or_default();
    let lower = text.to_lowercase();
    if controlnet {
        return Some(
            "    method        full  # the ControlNet (diffusers train_controlnet.py)\n".into(),
        );
    }
    if ["controlnet", "t2i-adapter", "ip-adapter"].iter().any(|w| lower.contains(w)) {
        cx.gap(Gap::feature(feature::SIDE_NETWORK, text));
        return None;
    }
    if ["lokr", "loha", "lycoris"].iter().any(|w| lower.contains(w)) {
        cx.gap(Gap::feature(feature::LYCORIS, text));
        return None;
    }
    if !lower.contains("lora") {
        if lower.contains("full") {
            return Some("    method        full\n".to_string());
        }
        cx.unreadable("finetune_method", &text);
        return None;
    }
    let settings = point.other_settings.clone().unwrap_or_default().to_lowercase();
    // kohya sd-scripts' networks (networks.lora, lora_flux) adapt every Linear (and 1 × 1
    // convolution) inside the denoiser's transformer blocks (UNET_TARGET_REPLACE_MODULE), with
    // `--network_dim` as the rank.
    let kohya = lower.contains("network_dim") || settings.contains("network_dim");
    let stated = super::lora::rank(&lower);
    let rank = stated.or_else(|| super::lora::rank(&settings));
    let named: Vec<&str> = ["to_q", "to_k", "to_v", "to_out"]
        .into_iter()
        .zip(["q", "k", "v", "o"])
        .filter(|(module, _)| lower.contains(module))
        .map(|(_, target)| target)
        .collect();
    let targets = if kohya {
        cx.assume(assume::KOHYA_TARGETS, text.clone());
        vec!["q", "k", "v", "o", "up", "down"]
    } else if !named.is_empty() {
        named
    } else if point.framework.contains("PEFT") && settings.contains("dreambooth") {
        cx.assume(
            assume::SCRIPT_SETTING,
            "LoRA rank and targets from the example command (--lora_r 16) and PEFT's DreamBooth \
             example UNET_TARGET_MODULES: to_q and to_v",
        );
        vec!["q", "v"]
    } else {
        cx.assume(
            assume::RUNTIME_DEFAULT,
            "LoRA targets not named: diffusers' LoRA training scripts' to_k, to_q, to_v, to_out.0",
        );
        vec!["q", "k", "v", "o"]
    };
    if let Some(detail) = uneven {
        cx.assume(assume::UNIFORM_BLOCKS, detail);
    }
    let Some(rank) = rank.filter(|_| !targets.is_empty()) else {
        cx.gap(Gap::data(data::LORA_SETUP, text));
        return None;
    };
    let dtype = if let Some(kind) = pure {
        format!("\n      dtype   {kind}")
    } else {
        cx.assume(assume::LORA_DTYPE, "denoiser adapters");
        String::new()
    };
    Some(format!(
        "    method lora {{\n      rank    {rank}\n      targets {}{dtype}\n    }}\n",
        targets.join(" ")
    ))
}

/// For a denoiser with blocks beside its `layers` that LoRA adapts too, what the count leaves
/// out (single-stream blocks, `single_layers`, are counted as they are).
/// Whether `models.vram` gives the denoiser its `largest_block` (and so its `outside_blocks`).
fn declares_blocks(denoiser: &str) -> bool {
    let opening = format!("model {denoiser} ");
    crate::MODELS_VRAM.split("\nmodel ").any(|entry| {
        format!("model {entry}").starts_with(&opening)
            && entry.split('}').next().is_some_and(|body| body.contains("largest_block"))
    })
}

fn uneven_blocks(denoiser: &str) -> Option<&'static str> {
    match denoiser {
        // 20 double blocks with q, k, v and to_out.0, 40 single blocks with q, k and v, and two
        // token-refiner blocks (q, k, v and out: PEFT adapts them too) the layers leave out:
        // rank × 6,144 × 8 beside rank × 6,144 × (80 + 120), 4 % more.
        "hunyuan-video-transformer" => Some(
            "the two token-refiner blocks, whose q, k, v and output projections PEFT adapts \
             too, left out: about 4 % more adapter parameters",
        ),
        _ => None,
    }
}

/// The 16-bit type a trainer that keeps the denoiser in its loaded type trains in: finetrainers
/// (`--transformer_dtype`, bf16 by default, with no fp32 copy and no upcast of the adapters) and
/// SimpleTuner's `adamw_bf16` (bf16 weights and states). Their parameters, adapters, gradients
/// and AdamW moments are then all that type. `None` for the diffusers example scripts, which
/// keep what they train in fp32.
fn trains_loaded_type(cx: &mut Cx<'_>) -> Option<&'static str> {
    let point = cx.point;
    let text = format!(
        "{} {}",
        point.framework.to_lowercase(),
        point.optimizer.as_deref().unwrap_or_default().to_lowercase()
    );
    let weights = point.weight_precision.as_deref().unwrap_or_default().to_lowercase();
    if !weights.starts_with("bf16") {
        return None;
    }
    if text.contains("finetrainers") {
        cx.assume(
            assume::SCRIPT_SETTING,
            "finetrainers trains the transformer in --transformer_dtype (bf16): no fp32 copy, \
             adapters, gradients and AdamW moments in bf16",
        );
        return Some("bf16");
    }
    if text.contains("adamw_bf16") {
        cx.assume(
            assume::SCRIPT_SETTING,
            "SimpleTuner's adamw_bf16: bf16 weights, adapters, gradients and moments",
        );
        return Some("bf16");
    }
    None
}

/// Full checkpointing, none, or the source's table label when the point leaves it open.
fn checkpointing(cx: &mut Cx<'_>) -> Option<bool> {
    let point = cx.point;
    if let Some(stated) = point.activation_checkpointing {
        // diffusers' denoisers checkpoint whole blocks: selective reads as on.
        return Some(stated != crate::data::Checkpointing::Off);
    }
    let method = point.finetune_method.clone().unwrap_or_default().to_lowercase();
    if method.contains("gradient checkpointing") {
        return Some(true);
    }
    if point.source_id == "S03" {
        cx.assume(
            assume::SOURCE_LABEL,
            "checkpointing: the table's own column 'PEFT-LoRA with Gradient Checkpointing' \
             beside this one says this column ran without it",
        );
        return Some(false);
    }
    cx.gap(Gap::data(data::CHECKPOINTING, "activation_checkpointing: none"));
    None
}

/// The optimizer word: the stated one, read as the LLM training points read it, else the
/// example scripts' torch AdamW, or bitsandbytes' 8-bit AdamW where the settings pass
/// `--use_8bit_adam`.
fn optimizer(cx: &mut Cx<'_>) -> Option<&'static str> {
    let stated = cx.point.optimizer.clone().unwrap_or_default().to_lowercase();
    // The scripts' `--use_8bit_adam` swaps their AdamW for bitsandbytes' 8-bit one.
    if super::training::without_negated(&cx.point.all_text()).contains("use_8bit_adam")
        && (stated.is_empty() || stated.contains("adam"))
    {
        return Some("adamw-8bit");
    }
    if !stated.is_empty() {
        return super::training::optimizer(cx);
    }
    cx.assume(
        assume::SCRIPT_SETTING,
        "optimizer not stated: the example script's torch.optim.AdamW (no --use_8bit_adam)",
    );
    Some("adamw")
}

#[cfg(test)]
mod tests {
    use super::super::express;
    use crate::data::Point;
    use crate::gaps::assume;

    /// A point of `workload` `diffusion_training` with `fields` (a JSON object) over the defaults.
    fn point(fields: &str) -> Point {
        let defaults = serde_json::json!({
            "id": "T-001", "source_id": "T", "workload": "diffusion_training",
            "framework": "diffusers train_dreambooth_lora_flux_miniature.py + PEFT + accelerate",
            "batch_size": 1, "num_gpus": 1, "gpu_type": "RTX 4090 24GB",
            "measurement_method": "not stated", "measured_kind": "peak", "value": 9,
            "unit": "GB", "quality": "C"
        });
        super::super::test_point(defaults, fields)
    }

    #[test]
    fn flux_qlora_on_cached_latents_loads_the_transformer_alone() {
        let expressed = express(&point(
            r#"{"model": "black-forest-labs/FLUX.1-dev (transformer only trained)",
                "compute_dtype": "bf16 mixed precision", "weight_precision": "nf4",
                "quantization": "bitsandbytes NF4", "optimizer": "bitsandbytes AdamW8bit",
                "finetune_method": "QLoRA rank 4 on to_k,to_q,to_v,to_out.0",
                "image_or_video": "512x768 images; latents and text embeddings pre-cached",
                "activation_checkpointing": true}"#,
        ))
        .expect("expressible");
        // The workload, after the models every generated source declares.
        let source = expressed.source.split("workload point").nth(1).expect("a workload");
        assert!(!source.contains("text_encoders") && !source.contains(" vae "), "{source}");
        assert!(source.contains("denoiser_weights nf4") && source.contains("layers        57"));
        assert!(source.contains("targets q k v o") && source.contains("optimizer     adamw-8bit"));
        assert!(source.contains("activations   bf16") && source.contains("checkpointing full"));
        assert!(source.contains("single_layers 38") && source.contains("qk_norm       true"));
        // Its single-stream blocks are declared: nothing is counted that FLUX does not have.
        let labels: Vec<&str> = expressed.assumptions.iter().map(|a| a.label).collect();
        assert!(!labels.contains(&assume::UNIFORM_BLOCKS), "{labels:?}");
    }

    #[test]
    fn peft_dreambooth_reads_its_example_command() {
        let expressed = express(&point(
            r#"{"model": "CompVis/stable-diffusion-v1-4", "source_id": "S03",
                "framework": "PEFT + transformers", "framework_version": "PEFT ~0.2-0.3 era (early 2023)",
                "finetune_method": "LoRA (DreamBooth)", "image_or_video": "512x512 image",
                "gpu_type": "A100 80GB", "activation_checkpointing": false,
                "other_settings": "DreamBooth; README example command: train_text_encoder, prior preservation, LoRA r=16 (UNet)"}"#,
        ))
        .expect("expressible");
        let source = &expressed.source;
        assert!(
            source.contains("text_encoders clip-l-text") && source.contains("vae           sd-vae")
        );
        assert!(source.contains("weights       fp32") && source.contains("batch         2"));
        assert!(source.contains("rank    16") && source.contains("targets q v"));
        assert!(source.contains("attention     eager") && source.contains("checkpointing none"));
        let labels: Vec<&str> = expressed.assumptions.iter().map(|a| a.label).collect();
        assert!(labels.contains(&assume::TEXT_ENCODER_FROZEN), "{labels:?}");
    }

    /// SDXL and SD 1.5 by their usual names; the precision from `weight_precision` alone; an
    /// 8-bit AdamW written with a hyphen, or passed as `--use_8bit_adam`; Prodigy.
    #[test]
    fn other_pipelines_and_wordings() {
        let sdxl = express(&point(
            r#"{"model": "stabilityai/stable-diffusion-xl-base-1.0",
                "framework": "diffusers train_dreambooth_lora_sdxl.py", "weight_precision": "fp16",
                "finetune_method": "LoRA rank 4 on UNet", "optimizer": "AdamW 8-bit",
                "image_or_video": "1024x1024", "activation_checkpointing": true}"#,
        ))
        .expect("expressible");
        let source = sdxl.source.split("workload point").nth(1).expect("a workload");
        assert!(source.contains("denoiser      sdxl-unet"), "{source}");
        assert!(source.contains("text_encoders clip-l-text clip-g-text"), "{source}");
        assert!(source.contains("transformer_layers 0 2 10"), "{source}");
        assert!(source.contains("weights       fp16"), "{source}");
        assert!(source.contains("optimizer     adamw-8bit"), "{source}");
        let sd15 = express(&point(
            r#"{"model": "runwayml/stable-diffusion-v1-5", "compute_dtype": "bf16",
                "finetune_method": "full", "image_or_video": "512 x 512",
                "activation_checkpointing": false}"#,
        ))
        .expect("expressible");
        assert!(sd15.source.contains("denoiser      sd14-unet"), "{}", sd15.source);
        let prodigy = express(&point(
            r#"{"model": "runwayml/stable-diffusion-v1-5", "compute_dtype": "bf16",
                "finetune_method": "full", "image_or_video": "512x512", "optimizer": "Prodigy",
                "activation_checkpointing": false}"#,
        ));
        let prodigy = prodigy.expect("expressible");
        assert!(prodigy.source.contains("optimizer     prodigy"), "{}", prodigy.source);
        let eight_bit = express(&point(
            r#"{"model": "runwayml/stable-diffusion-v1-5", "compute_dtype": "bf16",
                "finetune_method": "full", "image_or_video": "512x512",
                "other_settings": "--use_8bit_adam --gradient_checkpointing",
                "activation_checkpointing": true}"#,
        ))
        .expect("expressible");
        assert!(eight_bit.source.contains("optimizer     adamw-8bit"), "{}", eight_bit.source);
    }

    /// The workload written for a point with `fields`, after the models it declares.
    fn trained(fields: &str) -> String {
        let expressed = express(&point(fields)).expect("expressible");
        let source = expressed.source.split("workload point").nth(1).expect("a workload");
        source.to_string()
    }

    /// A video transformer trained on cached latents: its frames through the causal VAE, and
    /// finetrainers' pure bf16 (no master copy, bf16 adapters and moments).
    #[test]
    fn video_transformers_train_on_latent_frames() {
        let source = trained(
            r#"{"model": "THUDM/CogVideoX-5b", "framework": "finetrainers train.py",
                "weight_precision": "bf16", "compute_dtype": "bf16",
                "optimizer": "AdamW (example command --optimizer adamw without --use_8bit_bnb)",
                "finetune_method": "full fine-tune of the transformer",
                "image_or_video": "video 49x480x720 (frames x height x width); latents pre-cached",
                "activation_checkpointing": true}"#,
        );
        assert!(source.contains("denoiser      cogvideox-5b-transformer"), "{source}");
        assert!(source.contains("resolution    720 x 480"), "{source}");
        // 49 frames: the first alone, then 48 in latents of 4.
        assert!(source.contains("frames        13"), "{source}");
        assert!(source.contains("optimizer     adamw\n"), "{source}");
        assert!(source.contains("master        none") && source.contains("gradients     bf16"));
        let source = trained(
            r#"{"model": "Lightricks/LTX-Video", "framework": "finetrainers train.py",
                "weight_precision": "bf16", "optimizer": "AdamW",
                "finetune_method": "LoRA rank 128 on to_q,to_k,to_v,to_out.0",
                "image_or_video": "video 49x512x768; conditions and latents pre-cached",
                "activation_checkpointing": true}"#,
        );
        assert!(source.contains("denoiser      ltxv-2b-transformer"), "{source}");
        assert!(source.contains("patch_pixels  32") && source.contains("frames        7"));
        assert!(source.contains("dtype   bf16") && !source.contains("master"), "{source}");
        let source = trained(
            r#"{"model": "Wan-AI/Wan2.1-T2V-14B", "compute_dtype": "bf16",
                "weight_precision": "bf16", "optimizer": "AdamW",
                "finetune_method": "LoRA rank 32 on to_q,to_k,to_v,to_out.0",
                "image_or_video": "832x480, 81 frames; latents and text embeddings pre-cached",
                "activation_checkpointing": true}"#,
        );
        assert!(source.contains("denoiser      wan21-t2v-14b-transformer"), "{source}");
        assert!(
            source.contains("cross_attention_dim 5120") && source.contains("ffn           13824")
        );
        assert!(source.contains("frames        21"), "{source}");
        // Encoding the video inside the step is not modelled.
        let on_the_fly = express(&point(
            r#"{"model": "Lightricks/LTX-Video", "framework": "finetrainers train.py",
                "weight_precision": "bf16", "optimizer": "AdamW",
                "finetune_method": "LoRA rank 128 on to_q,to_k,to_v,to_out.0",
                "image_or_video": "video 49x512x768, encoded on the fly each step",
                "activation_checkpointing": true}"#,
        ))
        .expect_err("a video encode in the step");
        assert!(
            on_the_fly.iter().any(|g| g.label == crate::gaps::feature::VIDEO_ENCODE),
            "{on_the_fly:?}"
        );
        // Latents "pre-computed" or "cached to disk" are encoded beforehand too; text
        // embeddings alone are not latents.
        for cached in ["latents pre-computed (--precompute_conditions)", "latents cached to disk"] {
            let source = trained(&format!(
                r#"{{"model": "Lightricks/LTX-Video", "weight_precision": "bf16",
                    "optimizer": "AdamW", "finetune_method": "LoRA rank 32 on to_q,to_k",
                    "image_or_video": "video 49x512x768; {cached}",
                    "activation_checkpointing": true}}"#
            ));
            assert!(!source.contains("vae           "), "{source}");
        }
        let text_only = trained(
            r#"{"model": "stabilityai/stable-diffusion-xl-base-1.0", "weight_precision": "bf16",
                "optimizer": "AdamW", "finetune_method": "LoRA rank 4",
                "image_or_video": "1024x1024 images; text embeddings pre-computed",
                "activation_checkpointing": true}"#,
        );
        assert!(text_only.contains("vae           sdxl-vae"), "{text_only}");
    }

    /// DeepSpeed's ZeRO-2 and optimizer offload as the point states them; its parameter offload
    /// (the blocks gathered one at a time) is a missing feature.
    #[test]
    fn a_denoiser_s_states_sharded_and_offloaded_as_stated() {
        let source = trained(
            r#"{"model": "stabilityai/stable-diffusion-xl-base-1.0", "weight_precision": "bf16",
                "finetune_method": "full fine-tune of the U-net", "optimizer": "AdamW",
                "image_or_video": "1024x1024 images", "activation_checkpointing": true,
                "num_gpus": 2, "parallelism": "DeepSpeed ZeRO stage 2, 2 GPUs",
                "offload": "optimizer states to CPU"}"#,
        );
        assert!(source.contains("sharding      zero2"), "{source}");
        assert!(source.contains("offload       optimizer"), "{source}");
        let gathered = express(&point(
            r#"{"model": "stabilityai/stable-diffusion-xl-base-1.0", "weight_precision": "bf16",
                "finetune_method": "full fine-tune of the U-net", "optimizer": "AdamW",
                "image_or_video": "1024x1024 images", "activation_checkpointing": true,
                "num_gpus": 2, "parallelism": "DeepSpeed ZeRO stage 3, 2 GPUs",
                "offload": "parameters and optimizer to CPU"}"#,
        ))
        .expect_err("blocks gathered one at a time");
        assert!(gathered.iter().any(|g| g.label == crate::gaps::feature::SHARDED_DENOISER));
    }

    #[test]
    fn kohya_networks_adapt_the_attention_and_the_feed_forward() {
        let source = express(&point(
            r#"{"model": "stabilityai/stable-diffusion-xl-base-1.0",
                "finetune_method": "LoRA network_dim 32", "weight_precision": "fp16",
                "image_or_video": "1024x1024", "optimizer": "AdamW8bit",
                "activation_checkpointing": true,
                "other_settings": "sdxl_train_network.py --network_train_unet_only"}"#,
        ))
        .expect("kohya's networks are expressed")
        .source;
        assert!(source.contains("rank    32\n      targets q k v o up down"), "{source}");
    }

    #[test]
    fn an_unknown_pipeline_is_a_gap() {
        let found =
            express(&point(r#"{"model": "some/unknown-diffusion", "finetune_method": "full"}"#));
        assert!(found.is_err());
    }
}
