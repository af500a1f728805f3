//! A trained diffusion pipeline: the `diffusion { ... }` section with the denoiser's block
//! structure, and a `training { ... }` section for the denoiser (method, precision, optimizer,
//! checkpointing, attention).
//!
//! Each pipeline's structure comes from its model's configuration ([`pipeline`]); the rest is
//! read from the point, and what the source leaves open is taken from the example command it
//! publishes, with an assumption saying so.

use std::fmt::Write as _;

use super::Cx;
use crate::gaps::{Gap, assume, data, feature};

/// The fixed settings of a trained pipeline.
struct Pipeline {
    denoiser: &'static str,
    encoders: &'static [&'static str],
    vae: &'static str,
    /// The `diffusion` section's structure lines (architecture, sizes, text tokens).
    structure: &'static str,
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
        })
    } else if has(&["stablediffusionxl", "sdxl"]) && !has(&["refiner"]) {
        // SDXL base 1.0's unet/config.json: block_out_channels 320 640 1280,
        // layers_per_block 2, transformer_layers_per_block 1 2 10 with no attention at the
        // first level, 64-wide heads, cross_attention_dim 2048 (CLIP-L and bigG concatenated);
        // prompts of 77 CLIP tokens, as for inference (`express/diffusion.rs`).
        Ok(Pipeline {
            denoiser: "sdxl-unet",
            encoders: &["clip-l-text", "clip-g-text"],
            vae: "sdxl-vae",
            structure: "    architecture  unet\n    hidden        320\n    \
                        channel_mult  1 2 4\n    layers_per_block 2\n    \
                        transformer_layers 0 2 10\n    head_dim      64\n    \
                        cross_attention_dim 2048\n    text_tokens   77 tokens\n",
        })
    } else if has(&["flux1dev"]) {
        // FLUX.1-dev: hidden 3072, 24 heads, 19 double and 38 single blocks (DOMAIN.md §7.1);
        // T5 max_sequence_length 512 (the training script's default).
        Ok(Pipeline {
            denoiser: "flux1-dev-transformer",
            encoders: &["t5-xxl-encoder", "clip-l-text"],
            vae: "flux-vae",
            structure: "    architecture  dit\n    hidden        3072\n    heads         24\n    \
                        layers        57  # 19 double + 38 single blocks\n    \
                        text_tokens   512 tokens\n",
        })
    } else {
        Err(Gap::feature(
            feature::PIPELINE,
            format!(
                "{model}: no trained pipeline in crates/accuracy/src/express/diffusion_training.rs"
            ),
        ))
    }
}

/// The section's lines, or `None` when a gap stops it.
pub(super) fn body(cx: &mut Cx<'_>) -> Option<String> {
    let pipeline = match pipeline(&cx.point.model) {
        Ok(pipeline) => pipeline,
        Err(gap) => {
            cx.gap(gap);
            return None;
        }
    };
    let resolution = super::diffusion::resolution(cx);
    let batch = batch(cx);
    let precision = precision(cx);
    let method = method(cx, pipeline.denoiser == "flux1-dev-transformer");
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
    let precomputed = image.contains("pre-cached") || image.contains("not on gpu");

    let mut out = String::from("  diffusion {\n");
    let _ = writeln!(out, "    denoiser      {}", pipeline.denoiser);
    if precomputed {
        out.push_str(
            "    # latents and text embeddings computed beforehand: no encoders, no VAE\n",
        );
    } else {
        let _ = writeln!(out, "    text_encoders {}", pipeline.encoders.join(" "));
        let _ = writeln!(out, "    vae           {}", pipeline.vae);
    }
    let _ = writeln!(out, "    weights       {weights}");
    if denoiser != weights {
        let _ = writeln!(out, "    denoiser_weights {denoiser}");
    }
    out.push_str(pipeline.structure);
    let _ = writeln!(out, "    resolution    {width} x {height}");
    let _ = writeln!(out, "    batch         {batch}");
    out.push_str("  }\n  training {\n");
    out.push_str(&method);
    if let Some(activations) = activations {
        let _ = writeln!(out, "    activations   {activations}  # mixed precision (autocast)");
    }
    let _ = writeln!(out, "    optimizer     {optimizer}");
    let _ = writeln!(out, "    checkpointing {}", if checkpointing { "full" } else { "none" });
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
    let compute = point.compute_dtype.clone().unwrap_or_default().to_lowercase();
    let quantization = point.quantization.clone().unwrap_or_default().to_lowercase();
    let base = if compute.is_empty() && point.weight_precision.is_none() {
        cx.assume(
            assume::SCRIPT_SETTING,
            "precision not stated: fp32, as the example command sets no --mixed_precision \
             (accelerate's default is none)",
        );
        "fp32"
    } else {
        // The compute type, else the weights' stated precision (a data set that gives only
        // `weight_precision`: the script's --mixed_precision casts the frozen parts to it).
        let stated = if compute.is_empty() {
            point.weight_precision.clone().unwrap_or_default().to_lowercase()
        } else {
            compute.clone()
        };
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
    } else {
        cx.unreadable("quantization", &quantization);
        return None;
    };
    let activations = (compute.contains("mixed") && denoiser != base).then_some(base);
    Some((base, denoiser, activations))
}

/// `method full`, or `method lora { ... }` with the rank and the attention projections adapted.
/// `flux`: the denoiser is FLUX's, whose single blocks have no output projection.
fn method(cx: &mut Cx<'_>, flux: bool) -> Option<String> {
    let point = cx.point;
    let text = point.finetune_method.clone().unwrap_or_default();
    let lower = text.to_lowercase();
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
    if lower.contains("network_dim") || settings.contains("network_dim") {
        // kohya sd-scripts' networks.lora adapts every Linear (and 1 × 1 convolution) inside
        // the UNet's Transformer2DModel blocks (its UNET_TARGET_REPLACE_MODULE).
        cx.gap(Gap::feature(feature::KOHYA_LORA, text));
        return None;
    }
    let stated = super::lora::rank(&lower);
    let rank = stated.or_else(|| super::lora::rank(&settings));
    let named: Vec<&str> = ["to_q", "to_k", "to_v", "to_out"]
        .into_iter()
        .zip(["q", "k", "v", "o"])
        .filter(|(module, _)| lower.contains(module))
        .map(|(_, target)| target)
        .collect();
    let targets = if !named.is_empty() {
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
    if flux && targets.contains(&"o") {
        cx.assume(assume::UNIFORM_BLOCKS, "to_out.0 adapted in all 57 blocks");
    }
    let Some(rank) = rank.filter(|_| !targets.is_empty()) else {
        cx.gap(Gap::data(data::LORA_SETUP, text));
        return None;
    };
    cx.assume(assume::LORA_DTYPE, "denoiser adapters");
    Some(format!(
        "    method lora {{\n      rank    {rank}\n      targets {}\n    }}\n",
        targets.join(" ")
    ))
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
    if cx.point.all_text().contains("use_8bit_adam")
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
        let labels: Vec<&str> = expressed.assumptions.iter().map(|a| a.label).collect();
        assert!(labels.contains(&assume::UNIFORM_BLOCKS), "{labels:?}");
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

    #[test]
    fn kohya_networks_are_a_missing_feature() {
        let gaps = express(&point(
            r#"{"model": "stabilityai/stable-diffusion-xl-base-1.0",
                "finetune_method": "LoRA network_dim 32", "weight_precision": "fp16",
                "image_or_video": "1024x1024", "optimizer": "AdamW8bit",
                "activation_checkpointing": true,
                "other_settings": "sdxl_train_network.py --network_train_unet_only"}"#,
        ))
        .expect_err("kohya's targets are not modelled");
        assert!(gaps.iter().any(|g| g.label == crate::gaps::feature::KOHYA_LORA), "{gaps:?}");
    }

    #[test]
    fn an_unknown_pipeline_is_a_gap() {
        let found =
            express(&point(r#"{"model": "some/unknown-diffusion", "finetune_method": "full"}"#));
        assert!(found.is_err());
    }
}
