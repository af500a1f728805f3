//! The `diffusion { ... }` section of a point: the pipeline's models (declared with sourced
//! parameter counts in `models.vram`), their precisions, the image size, the batch and the
//! offload.
//!
//! Each pipeline is one row of [`pipeline`] (in `pipelines.rs`); its fixed settings (architecture, hidden size, text
//! tokens, guidance) come from the model's own configuration and the diffusers pipeline's
//! defaults. A point's precisions are read from its `quantization` (the scheme) and its
//! `weight_precision` (which components the scheme applies to).

use std::fmt::Write as _;

use super::Cx;
use super::pipelines::{Encoder, Pipeline, pipeline};
use crate::gaps::{Gap, assume, data, feature};

/// A network the pipeline runs beside its denoiser that no pipeline here declares (ControlNet,
/// T2I-Adapter, IP-Adapter's image encoder, AnimateDiff's motion modules, SDXL's refiner), named anywhere in
/// the point: its weights and activations would be missing from the estimate, so the point is
/// a feature gap rather than the bare pipeline's.
fn side_network(point: &crate::data::Point) -> Option<&'static str> {
    let text = crate::data::lower_joined([
        Some(point.model.as_str()),
        Some(point.framework.as_str()),
        point.other_settings.as_deref(),
        point.image_or_video.as_deref(),
    ])
    .replace(['-', '_', ' ', '|'], "");
    [
        ("controlnet", "ControlNet"),
        ("t2iadapter", "T2I-Adapter"),
        ("ipadapter", "IP-Adapter"),
        ("animatediff", "AnimateDiff"),
        ("motionadapter", "AnimateDiff"),
        ("instantid", "InstantID"),
        // SDXL's refiner: a second UNet (with CLIP-G) that denoises the base's last steps.
        ("refiner", "a refiner"),
    ]
    .into_iter()
    .find_map(|(key, name)| text.contains(key).then_some(name))
}

/// A ControlNet `models.vram` declares, recognised in the point's wording (its model may name
/// the ControlNet rather than the pipeline): the base pipeline's model and the section's lines.
/// lllyasviel's SD 1.5 ControlNets (`sd-controlnet-*`, `control_v11p_sd15_*`) share one layout,
/// as do diffusers' full-size SDXL ones (`controlnet-*-sdxl-1.0`; not the `-mid` and `-small`
/// variants); InstantX's FLUX.1-dev canny ControlNet has 5 double-stream and 10 single-stream
/// blocks (its config.json: `num_layers` 5, `num_single_layers` 10).
fn declared_controlnet(point: &crate::data::Point) -> Option<(&'static str, &'static str)> {
    let text = crate::data::lower_joined([
        Some(point.model.as_str()),
        Some(point.framework.as_str()),
        point.other_settings.as_deref(),
    ])
    .replace(['-', '_', ' ', '|', '.', '/'], "");
    if text.contains("sdxl") {
        let reduced = text.contains("sdxl10mid") || text.contains("sdxl10small");
        return (!reduced).then_some((
            "stabilityai/stable-diffusion-xl-base-1.0",
            "    controlnet    sdxl-controlnet\n",
        ));
    }
    if text.contains("flux") {
        return (text.contains("instantx") && text.contains("canny")).then_some((
            "black-forest-labs/FLUX.1-dev",
            "    controlnet    flux-controlnet-canny\n    controlnet_blocks 15\n",
        ));
    }
    let sd15 = ["sdcontrolnet", "sd15", "stablediffusionv15"];
    sd15.iter()
        .any(|key| text.contains(key))
        .then_some(("runwayml/stable-diffusion-v1-5", "    controlnet    sd15-controlnet\n"))
}

/// The section's lines, or `None` when a gap stops it.
pub(super) fn body(cx: &mut Cx<'_>) -> Option<String> {
    let network = side_network(cx.point);
    let control = network.and_then(|n| declared_controlnet(cx.point).filter(|_| n == "ControlNet"));
    if let (Some(network), None) = (network, control) {
        let what = format!("{network} beside {}", cx.point.model);
        cx.gap(Gap::feature(feature::SIDE_NETWORK, what));
        return None;
    }
    let pipeline_model = match control {
        // The model may be the ControlNet's name: its base pipeline then.
        Some((base, _)) if pipeline(&cx.point.model).is_err() => base,
        _ => cx.point.model.as_str(),
    };
    let mut pipeline = match pipeline(pipeline_model) {
        Ok(pipeline) => pipeline,
        Err(gaps) => {
            for gap in gaps {
                cx.gap(gap);
            }
            return None;
        }
    };
    if pipeline.encoders == [Encoder::T5, Encoder::ClipL, Encoder::ClipG] && drops_t5(cx.point) {
        // StableDiffusion3Pipeline.from_pretrained(..., text_encoder_3=None): the T5 prompt
        // embeddings become zeros of the same shape, so the joint tokens stay as they are.
        cx.assume(assume::PIPELINE_DEFAULT, "the T5 encoder left out (text_encoder_3=None)");
        pipeline.encoders = &[Encoder::ClipL, Encoder::ClipG];
    }
    let resolution = match &pipeline.video {
        Some(video) if !states_size(cx) => {
            let text = cx.point.image_or_video.clone().unwrap_or_default().to_lowercase();
            let named = video.named_sizes.iter().find(|(word, _)| text.contains(word));
            if let Some((word, size)) = named {
                cx.assume(
                    assume::PIPELINE_DEFAULT,
                    format!("{word}: {} x {} (the model's own size names)", size.0, size.1),
                );
                Some(*size)
            } else {
                cx.assume(assume::PIPELINE_DEFAULT, video.size_note);
                Some((video.width, video.height))
            }
        }
        _ => match pipeline.side {
            Some((side, note))
                if cx.point.image_or_video.as_deref().and_then(image_size).is_none() =>
            {
                cx.assume(assume::PIPELINE_DEFAULT, note);
                Some((side, side))
            }
            _ => resolution(cx),
        },
    };
    let video_frames = pipeline.video.as_ref().map(|video| {
        stated_frames(cx).unwrap_or_else(|| {
            cx.assume(assume::PIPELINE_DEFAULT, video.frames_note);
            video.frames
        })
    });
    // A video VAE takes the first frame alone and then `temporal` frames a latent (4, the
    // language's default, or LTX-Video's 8): 1 + 4k or 1 + 8k frames; CogVideoXPipeline pads
    // other counts only for CogVideoX 1.5's temporal patches.
    let temporal = pipeline.video.as_ref().map_or(4, |video| video.temporal);
    if let Some(frames) = video_frames.filter(|frames| *frames == 0 || (frames - 1) % temporal != 0)
    {
        cx.unreadable("image_or_video frames", &frames.to_string());
        return None;
    }
    let precisions = precisions(cx, &pipeline);
    // The pipeline repeats each prompt's latents `num_images_per_prompt` (or, for video,
    // `num_videos_per_prompt`) times: a batch of prompts × images.
    // Said beside the image's size, the count may be what the batch already holds ("batch 4:
    // 4 images per prompt"); a different batch is the prompts.
    let per_prompt = cx
        .point
        .setting_count(&["num_images_per_prompt", "num_videos_per_prompt"])
        .or_else(|| {
            images_per_prompt(cx.point.image_or_video.as_deref().unwrap_or_default())
                .filter(|n| Some(*n) != cx.point.batch_size)
        })
        .filter(|n| *n > 1);
    let batch = cx
        .point
        .batch_size
        .or_else(|| per_prompt.map(|_| 1))
        .or_else(|| cx.smallest_or_gap(Gap::data(data::BATCH, "batch_size: none")))
        .map_or(0, |prompts| prompts.saturating_mul(per_prompt.unwrap_or(1)));
    let switches = offload(cx, batch);
    let ((width, height), (base, denoiser, encoders), switches) =
        (resolution?, precisions?, switches?);
    if batch == 0 {
        return None;
    }
    if cx.point.other_settings.as_deref().unwrap_or_default().contains("torch.compile") {
        cx.assume(
            assume::NOT_MODELLED,
            "torch.compile: S19 measures the same peak with and without it (14.9453 and \
             14.9448 GB)",
        );
    }
    cx.assume(assume::PIPELINE_DEFAULT, pipeline.tokens_note);
    // A denoiser benchmarked alone (diffusers' benchmarks: one forward of the model on inputs
    // shaped like the pipeline's) holds no text encoder or VAE, and its one call is one batch.
    let alone = denoiser_alone(cx.point);
    if alone {
        cx.assume(
            assume::SOURCE_LABEL,
            "the denoiser's forward alone: no text encoder or VAE, one call without guidance",
        );
    }

    let names: Vec<&str> = pipeline.encoders.iter().map(|e| e.model()).collect();
    let mut out = String::from("  diffusion {\n");
    let _ = writeln!(out, "    denoiser      {}", pipeline.denoiser);
    if alone {
        // Nothing but the denoiser is on the device.
    } else if switches.text_encoder_on_cpu {
        cx.assume(assume::NOT_MODELLED, "the text encoder on the CPU: not on the device");
        out.push_str("    # the text encoder runs on the CPU\n");
    } else {
        let _ = writeln!(out, "    text_encoders {}", names.join(" "));
    }
    if !alone {
        let _ = writeln!(out, "    vae           {}", pipeline.vae);
    }
    if !alone && pipeline.denoiser == "sd14-unet" && loads_safety_checker(cx.point) {
        cx.assume(
            assume::PIPELINE_DEFAULT,
            "StableDiffusionPipeline loads the Stable Diffusion 1.x checkpoint's safety checker \
             (its model_index.json names one) unless safety_checker=None is passed",
        );
        out.push_str("    safety_checker sd-safety-checker\n");
    }
    // A VAE the pipeline loads in fp32 makes fp32 the load type the other models differ from.
    let vae_fp32 = pipeline.vae_fp32.filter(|_| !alone);
    let vae_type = if let Some(code) = vae_fp32.filter(|_| base != "fp32") {
        cx.assume(assume::PIPELINE_DEFAULT, format!("the VAE in fp32: {code}"));
        "fp32"
    } else {
        base
    };
    let _ = writeln!(out, "    weights       {vae_type}");
    if let Some((load, script)) = script_load_dtype(&cx.point.source_id).filter(|(l, _)| *l != base)
    {
        cx.assume(assume::SCRIPT_SETTING, format!("loaded in {load}, then cast: {script}"));
        let _ = writeln!(out, "    loaded_as     {load}");
    }
    if denoiser != vae_type {
        let _ = writeln!(out, "    denoiser_weights {denoiser}");
    }
    if !alone && !switches.text_encoder_on_cpu && encoders.iter().any(|e| *e != vae_type) {
        let first = encoders[0];
        let words = if encoders.iter().all(|e| *e == first) {
            first.to_string()
        } else {
            encoders.join(" ")
        };
        let _ = writeln!(out, "    text_encoder_weights {words}");
    }
    let architecture = if pipeline.unet.is_some() { "unet" } else { "dit" };
    let _ = writeln!(out, "    architecture  {architecture}");
    let _ = writeln!(out, "    hidden        {}", pipeline.hidden);
    out.push_str(pipeline.unet.unwrap_or_default());
    out.push_str(pipeline.extra);
    if let Some((_, lines)) = control {
        out.push_str(lines);
    }
    let _ = writeln!(out, "    resolution    {width} x {height}");
    if let Some(frames) = video_frames {
        let _ = writeln!(out, "    video_frames  {frames}");
        let by_release = pipeline.video.as_ref().is_some_and(|v| v.caches_by_release);
        if by_release && cx.diffusers_before_0_31() {
            cx.assume(
                assume::SCRIPT_SETTING,
                "vae_cache replaced: a diffusers older than 0.31 (huggingface/diffusers#9524, \
                 2024-09-28), whose causal convolutions replace their own caches as they run",
            );
            out.push_str("    vae_cache     replaced  # diffusers before 0.31\n");
        }
    }
    let _ = writeln!(out, "    batch         {batch}");
    let cfg =
        if alone { "false" } else { super::guidance::cfg(cx, pipeline.cfg, pipeline.guidance_off) };
    let _ = writeln!(out, "    cfg           {cfg}");
    let _ = writeln!(out, "    text_tokens   {} tokens", text_tokens(cx, &pipeline));
    let settings = cx.point.other_settings.as_deref().unwrap_or_default().to_lowercase();
    if settings.contains("fuse_qkv true") || settings.contains("fuse_qkv_projections()") {
        out.push_str("    fuse_qkv      true\n");
    }
    if let Some(source) = pipeline.rope_fp32 {
        let _ = writeln!(out, "    rope          fp32  # {source}");
    }
    // diffusers upcasts only a float16 VAE (`needs_upcasting = self.vae.dtype == torch.float16
    // and self.vae.config.force_upcast`): a bf16 one decodes in bf16.
    if let (Some(code), true) = (pipeline.vae_upcast.filter(|_| !alone), base == "fp16") {
        let _ = writeln!(out, "    vae_upcast    true  # {code}");
    }
    let settings = cx.point.other_settings.as_deref().unwrap_or_default().to_lowercase();
    let script_tiles = pipeline.video.as_ref().and_then(|v| v.script_tiles).filter(|_| {
        !cx.point.framework.to_lowercase().contains("diffusers")
            && !settings.contains("no vae tiling")
    });
    if let Some(script) = script_tiles {
        cx.assume(assume::SCRIPT_SETTING, script);
    }
    let tiling_named = ["vae tiling", "vae_tiling", "enable_tiling"]
        .iter()
        .any(|word| super::conditions::named_on(&settings, word));
    if switches.vae_tiling || script_tiles.is_some() || tiling_named {
        out.push_str("    vae_tiling    true\n");
        if let Some(video) = &pipeline.video {
            let _ = writeln!(out, "    vae_tile      {} x {}", video.tile.0, video.tile.1);
        }
    }
    let slicing_named = ["vae slicing", "vae_slicing", "enable_slicing"]
        .iter()
        .any(|word| super::conditions::named_on(&settings, word));
    if switches.vae_slicing || (slicing_named && batch > 1) {
        out.push_str("    vae_slicing   true\n");
    }
    if let Some(group) = &switches.group {
        out.push_str(if group.leaves {
            "    offload       leaves\n"
        } else {
            "    offload       blocks\n"
        });
        if let (false, Some(per_group)) = (group.leaves, group.per_group) {
            let _ = writeln!(out, "    blocks_per_group {per_group}");
        }
        if group.stream {
            out.push_str("    offload_stream true\n");
        }
    }
    if pipeline.unet.is_some() {
        if let Some(slice) = switches.attention_slicing {
            out.push_str("    attention     sliced\n");
            if slice != "auto" {
                let _ = writeln!(out, "    attention_slice {slice}");
            }
        } else if cx.diffusers_eager_attention() {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                "diffusers before 0.13 (or PyTorch 1.x) without xformers: AttnProcessor's \
                 materialized scores",
            );
            out.push_str("    attention     eager\n");
        }
    } else if switches.attention_slicing.is_some() {
        cx.unreadable("offload", "attention slicing on a transformer denoiser");
        return None;
    }
    // diffusers' benchmarks move the model to the device before enabling layerwise casting
    // (`benchmarking_utils.py`, `model_init_fn`); so do scripts that say they cast after `.to()`.
    let settings = cx.point.other_settings.as_deref().unwrap_or_default().to_lowercase();
    let benchmark = alone && cx.point.framework.to_lowercase().contains("benchmark");
    let cast_after_move = settings.contains("after .to(") || settings.contains("after moving");
    if switches.whole == WholeOffload::None
        && switches.group.is_none()
        && denoiser == "fp8-layerwise"
        && (benchmark || cast_after_move)
    {
        cx.assume(
            assume::SCRIPT_SETTING,
            "layerwise casting enabled after the bf16 model was moved to the device \
             (diffusers benchmarks/benchmarking_utils.py model_init_fn: model.to(device), then \
             enable_layerwise_casting)",
        );
        out.push_str("    loaded_on_device true\n");
    }
    if switches.whole != WholeOffload::None {
        out.push_str(if switches.whole == WholeOffload::Sequential {
            "    offload       sequential\n"
        } else {
            "    offload       model\n"
        });
        if let Some(code) = loaded_before_offload(&cx.point.source_id) {
            cx.assume(assume::LOADED_BEFORE_OFFLOAD, code);
            out.push_str("    loaded_on_device true\n");
        }
    }
    // S18 quantizes while loading, through diffusers' PipelineQuantizationConfig; its layerwise
    // casting is applied to the loaded transformer.
    let quantized = denoiser != base || encoders.iter().any(|e| *e != base);
    let cast = layerwise_casting(cx.point.quantization.as_deref().unwrap_or_default());
    if cx.point.framework.contains("PipelineQuantizationConfig") && quantized && !cast {
        out.push_str("    quantize_on_load true\n");
    }
    out.push_str("  }\n");
    Some(out)
}

/// Whether a point measures the denoiser's forward pass alone, as its scope, its framework or
/// its settings say (diffusers' `benchmarks/`: `FluxTransformer2DModel` called on random
/// inputs, `max_memory_allocated` over its forwards).
fn denoiser_alone(point: &crate::data::Point) -> bool {
    let text = crate::data::lower_joined([
        point.components_included.as_deref(),
        point.measurement_scope.as_deref(),
        Some(point.framework.as_str()),
        point.other_settings.as_deref(),
    ]);
    [
        "denoiser only",
        "transformer only",
        "unet only",
        "denoiser alone",
        "forward pass only",
        "forward only",
        "denoiser forward",
        "transformer forward",
        "unet forward",
        "model forward",
        "transformer2dmodel",
        "transformer3dmodel",
        "unet2dconditionmodel",
        "benchmarking_",
        "collated_results",
        "diffusers/benchmarks",
    ]
    .iter()
    .any(|phrase| text.contains(phrase))
}

/// The frames a point's video wording states.
fn stated_frames(cx: &Cx<'_>) -> Option<u64> {
    video_frames(cx.point.image_or_video.as_deref().unwrap_or_default())
}

/// The frames a video wording states: `49 frames`, `49f`, HunyuanVideo's `720px1280px129f`, or
/// the first of a `frames x height x width` bucket (`49x512x768`: the video training scripts'
/// `--video_resolution_buckets`).
pub(super) fn video_frames(text: &str) -> Option<u64> {
    let text = text.to_lowercase();
    if let Some((_, _, frames)) = px_setting(&text) {
        return Some(frames);
    }
    if let Some((frames, _, _)) = bucket(&text) {
        return Some(frames);
    }
    let words: Vec<&str> = text.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    words
        .windows(2)
        .find(|pair| pair[1] == "frames")
        .and_then(|pair| pair[0].parse().ok())
        .or_else(|| words.iter().find_map(|w| w.strip_suffix('f')?.parse().ok()))
}

/// The first `count` numbers a wording joins by `x`, `×`, `*` or `by` alone (spaces allowed
/// around it), each a whole word: `49x512x768`, `1024 x 1024`, `512 by 768`, never the `x` of
/// a word (`text`, `megapixel`).
fn joined(text: &str, count: usize) -> Option<Vec<u64>> {
    let chars: Vec<char> = text.to_lowercase().replace(" by ", " x ").chars().collect();
    (0..chars.len()).find_map(|start| {
        let starts_number = chars[start].is_ascii_digit()
            && (start == 0 || !chars[start - 1].is_ascii_alphanumeric());
        if !starts_number {
            return None;
        }
        let mut at = start;
        let mut numbers = Vec::with_capacity(count);
        for i in 0..count {
            if i > 0 {
                while chars.get(at) == Some(&' ') {
                    at += 1;
                }
                if !matches!(chars.get(at), Some('x' | '×' | '*')) {
                    return None;
                }
                at += 1;
                while chars.get(at) == Some(&' ') {
                    at += 1;
                }
            }
            let digits: String = chars[at..].iter().take_while(|c| c.is_ascii_digit()).collect();
            numbers.push(digits.parse().ok()?);
            at += digits.len();
        }
        // A unit may follow (`1024x1024px`), another dimension may not.
        let ends =
            chars.get(at).is_none_or(|c| !c.is_ascii_digit() && !matches!(c, 'x' | '×' | '*'));
        ends.then_some(numbers)
    })
}

/// A video training bucket, frames × height × width: `49x512x768`.
fn bucket(text: &str) -> Option<(u64, u64, u64)> {
    joined(text, 3).map(|n| (n[0], n[1], n[2]))
}

/// Whether the point states a size (`720x480`) in its image or video wording.
fn states_size(cx: &Cx<'_>) -> bool {
    image_size(cx.point.image_or_video.as_deref().unwrap_or_default()).is_some()
}

/// The first `W x H` a wording states, however it is spelled: `1024x1024`, `1024 x 1024`,
/// `1024×1024`, `1024*1024`, `1024 by 1024`.
pub(super) fn image_size(text: &str) -> Option<(u64, u64)> {
    if let Some((height, width, _)) = px_setting(text) {
        return Some((width, height));
    }
    if let Some((_, height, width)) = bucket(text) {
        return Some((width, height));
    }
    let pair = joined(text, 2).map(|n| (n[0], n[1]));
    // One side for a square: `512px`, `1024^2`.
    pair.or_else(|| {
        text.to_lowercase().split(|c: char| !(c.is_ascii_alphanumeric() || c == '^')).find_map(
            |word| {
                let side = word.strip_suffix("px").or_else(|| word.strip_suffix("^2"))?;
                let side: u64 = side.parse().ok()?;
                Some((side, side))
            },
        )
    })
}

/// Latent frames a wording states as such: `32 latent frames`, `--num_latent_t 32`.
pub(super) fn latent_frames_stated(text: &str) -> Option<u64> {
    let lower = text.to_lowercase();
    let words: Vec<&str> =
        lower.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
    words
        .windows(3)
        .find_map(|w| (w[1] == "latent" && w[2] == "frames").then(|| w[0].parse().ok()).flatten())
        .or_else(|| {
            words
                .windows(2)
                .find_map(|w| (w[0] == "num_latent_t").then(|| w[1].parse().ok()).flatten())
        })
}

/// HunyuanVideo's spelling of a setting, height, width and frames: `720px1280px129f`.
fn px_setting(text: &str) -> Option<(u64, u64, u64)> {
    text.to_lowercase().split(|c: char| !c.is_ascii_alphanumeric()).find_map(|word| {
        let (height, rest) = word.split_once("px")?;
        let (width, frames) = rest.split_once("px")?;
        let frames = frames.strip_suffix('f')?;
        Some((height.parse().ok()?, width.parse().ok()?, frames.parse().ok()?))
    })
}

/// The image size, `1024x1024` in the source's wording.
pub(super) fn resolution(cx: &mut Cx<'_>) -> Option<(u64, u64)> {
    let text = cx.point.image_or_video.clone().unwrap_or_default();
    let lower = text.trim().to_lowercase();
    // "training resolution not in config (... validation video_dims 768x448x89)": a size
    // named after such a wording is another run's.
    let unstated = lower.is_empty()
        || super::conditions::says_unstated(&lower)
        || lower.contains("resolution not");
    let found = image_size(&text).filter(|_| !lower.contains("resolution not"));
    if found.is_none() {
        let label = if unstated { data::IMAGE_SIZE } else { data::UNREADABLE };
        cx.gap(Gap::data(label, format!("image_or_video = {text:?}")));
    }
    found
}

/// Where a source's published code moves the whole pipeline to the device before it enables
/// model offload, that code.
fn loaded_before_offload(source_id: &str) -> Option<&'static str> {
    match source_id {
        // Its model-offload example: `DiffusionPipeline.from_pretrained(...).to("cuda")`, then
        // `pipeline.enable_model_cpu_offload()`. A draft of the same table lists group
        // offloading at the same 12.2369 GB, a scheme that never holds a whole model: the
        // reading is something both share, the load.
        "S19" => Some(
            "diffusers docs/source/en/optimization/speed-memory-optims.md (#11703): \
             from_pretrained(...).to(\"cuda\"), then enable_model_cpu_offload()",
        ),
        _ => None,
    }
}

/// The pipeline's memory switches its `offload` wording names, each as diffusers spells it or
/// in words: model offload (`enable_model_cpu_offload`, "model CPU offload"), sequential offload
/// (`enable_sequential_cpu_offload`, "sequential CPU offload") and a tiled decode
/// (`enable_vae_tiling`, "VAE tiling"), joined by `+` or commas, and group offloading
/// (`enable_group_offload`, "group offloading") with its arguments (`block_level` or
/// `leaf_level`, `num_blocks_per_group=2`, `use_stream=True`), attention slicing
/// (`enable_attention_slicing`, with its slice size) and Wan's `generate.py` flags
/// (`--offload_model`, `--t5_cpu`), and VAE slicing (`enable_vae_slicing`: one image of the batch
/// decodes at a time, which changes nothing for one image).
struct Switches {
    /// diffusers' own offloads: whole models, or one module at a time.
    whole: WholeOffload,
    vae_tiling: bool,
    group: Option<GroupOffload>,
    /// `enable_attention_slicing` and its slice size (`"auto"` unless stated: `"max"` or a
    /// count).
    attention_slicing: Option<&'static str>,
    /// The text encoder runs on the CPU (Wan's `--t5_cpu`): not on the device at all.
    text_encoder_on_cpu: bool,
    /// The VAE decodes a batch one image at a time (`enable_vae_slicing`).
    vae_slicing: bool,
}

/// `enable_model_cpu_offload` or `enable_sequential_cpu_offload`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WholeOffload {
    None,
    Model,
    Sequential,
}

/// diffusers group offloading as the source states it: leaf level or block level, blocks per
/// group when stated (diffusers requires it at block level), and a prefetching stream.
struct GroupOffload {
    leaves: bool,
    per_group: Option<u64>,
    stream: bool,
}

/// The group-offloading argument a part of the wording states, if it is one: the level, the
/// blocks per group (`num_blocks_per_group=2`, "2 blocks per group") or the stream; devices and
/// copy settings are read and change nothing.
fn group_argument(group: &mut GroupOffload, part: &str) -> bool {
    let digits = |s: &str| s.chars().filter(char::is_ascii_digit).collect::<String>().parse().ok();
    // Where the groups go and how they are copied change nothing on the device.
    let placement = ["device", "non_blocking", "record_stream", "low_cpu_mem_usage"];
    if placement.iter().any(|word| part.contains(word)) {
        return true;
    }
    if part.contains("leaf_level") || part.contains("leaf level") {
        group.leaves = true;
    } else if part.contains("blocks_per_group") || part.contains("blocks per group") {
        group.per_group = digits(part);
    } else if part.contains("stream") {
        group.stream = !part.contains("false");
    } else {
        return part.contains("block_level") || part.contains("block level");
    }
    true
}

/// An `enable_attention_slicing` argument: `"max"`, `"auto"` or a count of heads.
fn slice_size(part: &str) -> Option<&'static str> {
    let word = part.trim_start_matches("slice_size").trim_matches(['=', '\'', '"', ' ']);
    match word {
        "max" => Some("max"),
        "auto" => Some("auto"),
        "1" => Some("1"),
        "2" => Some("2"),
        "4" => Some("4"),
        "8" => Some("8"),
        _ => None,
    }
}

fn offload(cx: &mut Cx<'_>, batch: u64) -> Option<Switches> {
    let mut switches = Switches {
        whole: WholeOffload::None,
        vae_tiling: false,
        group: None,
        attention_slicing: None,
        text_encoder_on_cpu: false,
        vae_slicing: false,
    };
    let stated = cx
        .point
        .offload
        .clone()
        .filter(|stated| !super::conditions::is_none_word(stated))
        .or_else(|| offload_in_settings(cx.point.other_settings.as_deref()));
    let Some(stated) = stated else { return Some(switches) };
    let lower = stated.to_lowercase();
    // diffusers' `apply_group_offloading(module, ...)` offloads the one model it is given;
    // `pipe.enable_group_offload(...)` offloads every model, which is what the language writes.
    if lower.contains("apply_group_offloading") && !lower.contains("enable_group_offload") {
        cx.gap(Gap::feature(feature::PARTIAL_GROUP_OFFLOAD, stated));
        return None;
    }
    for part in lower.split(['+', ',', ';', '(', ')']).map(str::trim).filter(|p| !p.is_empty()) {
        if part.contains("group_offload") || part.contains("group offload") {
            let group = switches.group.get_or_insert(GroupOffload {
                leaves: false,
                per_group: None,
                stream: false,
            });
            group_argument(group, part);
        } else if switches.group.as_mut().is_some_and(|group| group_argument(group, part)) {
            // An argument of the group offloading named before it.
        } else if part.contains("attention slicing") || part.contains("enable_attention_slicing") {
            switches.attention_slicing = Some("auto");
        } else if let (Some(slice), Some(size)) =
            (&mut switches.attention_slicing, slice_size(part))
        {
            // The slice size written after the call.
            *slice = size;
        } else if part.contains("t5_cpu") || part.contains("offload_model") {
            // Wan's generate.py: `--t5_cpu` encodes with umT5 on the CPU; `--offload_model True`
            // moves the encoder and the DiT to the CPU after their turns, with
            // `torch.cuda.empty_cache()` (WanT2V.generate): one model at a time, as diffusers'
            // model offload.
            switches.text_encoder_on_cpu |= part.contains("t5_cpu");
            if part.contains("offload_model") && !part.contains("false") {
                switches.whole = WholeOffload::Model;
            }
        } else if part.contains("sequential")
            || part.contains("use-cpu-offload")
            || part.contains("use_cpu_offload")
        {
            // HunyuanVideo's sample_video.py: `--use-cpu-offload` calls
            // `pipeline.enable_sequential_cpu_offload()` (hyvideo/inference.py).
            switches.whole = WholeOffload::Sequential;
        } else if part.contains("model") && (part.contains("offload") || part.contains("cpu")) {
            if switches.whole == WholeOffload::None {
                switches.whole = WholeOffload::Model;
            }
        } else if part.contains("tiling") || part.contains("tiled") {
            switches.vae_tiling = true;
        } else if part.contains("vae slicing")
            || part.contains("vae_slicing")
            || part.contains("enable_slicing")
        {
            if batch > 1 {
                switches.vae_slicing = true;
            } else {
                cx.assume(assume::NOT_MODELLED, "VAE slicing: one image decodes alone anyway");
            }
        } else {
            cx.unreadable("offload", &stated);
            return None;
        }
    }
    Some(switches)
}

/// The offload calls a point names among its other settings when its `offload` field is empty
/// (`enable_model_cpu_offload, vae.enable_tiling()`): the parts that name an offload, for
/// [`offload`] to read. Group offloading, whose arguments follow it in parts of their own, is
/// passed whole so that an argument it cannot read makes the point unexpressed, not ignored.
fn offload_in_settings(settings: Option<&str>) -> Option<String> {
    let settings = settings?;
    let lower = settings.to_lowercase();
    if lower.contains("group_offload") || lower.contains("group offload") {
        return Some(settings.to_string());
    }
    let parts: Vec<&str> = settings
        .split([',', ';', '+'])
        .map(str::trim)
        .filter(|part| {
            let part = part.to_lowercase();
            (part.contains("offload") || part.contains("t5_cpu"))
                && !part.contains("no offload")
                && !part.contains("without offload")
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The base (VAE and unquantized models), denoiser and text encoder precisions (one per
/// encoder, in the pipeline's order).
fn precisions(
    cx: &mut Cx<'_>,
    pipeline: &Pipeline,
) -> Option<(&'static str, &'static str, Vec<&'static str>)> {
    let point = cx.point;
    let q = point.quantization.clone().unwrap_or_default().to_lowercase();
    let w = point.weight_precision.clone().unwrap_or_default().to_lowercase();
    let compute = point.compute_dtype.clone().unwrap_or_default().to_lowercase();
    // diffusers' layerwise casting named where a scheme is not: the precision or the settings
    // ("layerwise upcasting", `enable_layerwise_casting`).
    let q = if (q.is_empty() || q == "none")
        && (layerwise_casting(&w)
            || layerwise_casting(point.other_settings.as_deref().unwrap_or_default()))
    {
        "layerwise_casting".to_string()
    } else {
        q
    };
    let stated = if compute.is_empty() { &w } else { &compute };
    let base = match float_type(stated) {
        Some(base) => base,
        // A quantized denoiser with no compute type stated: the rest of the pipeline loads in
        // the type its documentation passes as `torch_dtype` (bf16 for the transformer
        // pipelines, fp16 for the UNet ones).
        None if compute.is_empty() && !q.is_empty() && q != "none" => {
            let documented = if pipeline.unet.is_some() { "fp16" } else { "bf16" };
            cx.assume(
                assume::PIPELINE_DEFAULT,
                format!(
                    "compute type not stated beside {w:?}: the pipeline's documented {documented}"
                ),
            );
            documented
        }
        // A type the source leaves out is missing data, not a wording to learn.
        None if stated.is_empty() || stated.starts_with("not stated") => {
            cx.gap(Gap::data(data::PRECISION, format!("weight_precision {w:?}, no compute_dtype")));
            return None;
        }
        None => {
            cx.unreadable("compute_dtype", &compute);
            return None;
        }
    };
    if q.is_empty() || q == "none" {
        return Some((base, base, vec![base; pipeline.encoders.len()]));
    }
    let scheme = scheme(cx, &q, &w)?;
    // Which encoders the scheme applies to, from the weight_precision wording.
    let all = pipeline.encoders.to_vec();
    // The quantization field may name the components too ("bnb 4-bit transformer and T5").
    let w = format!("{w} {q}");
    // The pipeline's main text encoder, the one "TE" means when a pipeline has a large one
    // beside CLIP: T5 (FLUX, SD3, PixArt), else the first (Qwen-Image's Qwen2.5-VL,
    // HunyuanVideo's LLaVA-Llama-3, Wan's umT5).
    let main = if all.contains(&Encoder::T5) { Encoder::T5 } else { all[0] };
    if let Some((denoiser, encoders)) = named_components(&w, &all) {
        let formats =
            all.iter().map(|e| if encoders.contains(e) { scheme } else { base }).collect();
        return Some((base, if denoiser { scheme } else { base }, formats));
    }
    let quantized: Vec<Encoder> = if w.contains("all 3 tes") {
        all.clone()
    } else if w.contains("te1 + te3") {
        vec![Encoder::ClipL, Encoder::T5]
    } else if w.contains("te1 only") {
        vec![Encoder::ClipL]
    } else if w.contains("+ t5")
        || w.contains("and t5")
        || w.contains("+ te ")
        || w.contains("te + ")
        || settings_name_encoders(point.other_settings.as_deref())
    {
        vec![main]
    } else if w.contains("transformer only") || w.contains(", te ") {
        Vec::new()
    } else if let Some(script) = script_quantizes_text_encoder(&point.source_id) {
        cx.assume(assume::SCRIPT_SETTING, format!("the text encoder quantized too: {script}"));
        vec![main]
    } else {
        // The common use, a quantization config passed to the denoiser's own from_pretrained
        // (or diffusers' components_to_quantize naming the transformer or UNet alone).
        cx.assume(
            assume::PIPELINE_DEFAULT,
            format!("which components are quantized not stated ({w:?}): the denoiser only"),
        );
        Vec::new()
    };
    // One format per encoder, in the pipeline's order (`text_encoder_weights a b c`).
    let encoders =
        all.iter().map(|encoder| if quantized.contains(encoder) { scheme } else { base }).collect();
    Some((base, scheme, encoders))
}

/// The components a wording names as quantized, by diffusers' names: a `components_to_quantize`
/// list, or text encoders named alone ("on text_encoder_3 (T5-XXL) only"). `text_encoder`,
/// `text_encoder_2` and `text_encoder_3` are the pipeline's encoders in diffusers' order (the
/// CLIP encoders before T5: FLUX's `text_encoder_2` and SD3's `text_encoder_3` are T5);
/// `transformer` and `unet` the denoiser. `None` when the wording names components some other
/// way.
fn named_components(text: &str, listed_order: &[Encoder]) -> Option<(bool, Vec<Encoder>)> {
    let mut all = listed_order.to_vec();
    if all.contains(&Encoder::T5) && all.contains(&Encoder::ClipL) {
        all.sort_by_key(|e| match e {
            Encoder::ClipL => 0,
            Encoder::ClipG => 1,
            _ => 2,
        });
    }
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let encoder_at = |word: &str| match word {
        "text_encoder" => all.first().copied(),
        "text_encoder_2" => all.get(1).copied(),
        "text_encoder_3" => all.get(2).copied(),
        _ => None,
    };
    let encoders: Vec<Encoder> = words.iter().filter_map(|w| encoder_at(w)).collect();
    let denoiser = words.iter().any(|w| matches!(*w, "transformer" | "unet" | "denoiser"));
    let listed = text.contains("components_to_quantize");
    let alone = words.contains(&"only") && !denoiser;
    (!encoders.is_empty() && (listed || alone)).then_some((denoiser, encoders))
}

/// Whether the point runs Stable Diffusion 3 without its T5 encoder (`text_encoder_3=None`,
/// "without T5", "T5 dropped").
fn drops_t5(point: &crate::data::Point) -> bool {
    let text = point.all_text().replace(' ', "");
    [
        "text_encoder_3=none",
        "text_encoder_3:none",
        "withoutt5",
        "t5dropped",
        "dropt5",
        "droppingt5",
        "t5removed",
    ]
    .iter()
    .any(|phrase| text.contains(phrase))
}

/// The dtype a source's script loads its pipeline in before casting it to the row's type.
fn script_load_dtype(source_id: &str) -> Option<(&'static str, &'static str)> {
    match source_id {
        "S20" => Some((
            "bf16",
            "sayakpaul/diffusers-torchao inference/benchmark_video.py load_pipeline: \
             from_pretrained(torch_dtype=torch.bfloat16), then module.to(dtype) for fp16 rows",
        )),
        _ => None,
    }
}

/// The script behind a source's table when it quantizes the text encoder with the denoiser on
/// every row, whether or not a row's wording says so.
fn script_quantizes_text_encoder(source_id: &str) -> Option<&'static str> {
    match source_id {
        // Its int8 rows say "TE + transformer"; the benchmark applies each scheme to both.
        "S20" => Some(
            "sayakpaul/diffusers-torchao inference/benchmark_video.py load_pipeline applies the \
             scheme to pipe.text_encoder and pipe.transformer",
        ),
        _ => None,
    }
}

/// Whether a point's other settings say the scheme applies to the text encoder ("int8
/// weight-only on TE, transformer and VAE").
fn settings_name_encoders(settings: Option<&str>) -> bool {
    let settings = settings.unwrap_or_default().to_lowercase();
    settings.contains("on te,") || settings.contains("on te ") || settings.contains("te + ")
}

/// The floating-point type a precision wording starts with, in any of its usual spellings.
fn float_type(text: &str) -> Option<&'static str> {
    let spellings: [(&[&str], &'static str); 3] = [
        (&["bf16", "bfloat16"], "bf16"),
        (&["fp16", "float16", "half"], "fp16"),
        (&["fp32", "float32"], "fp32"),
    ];
    spellings
        .iter()
        .find(|(words, _)| words.iter().any(|word| text.starts_with(word)))
        .map(|(_, precision)| *precision)
}

/// Whether a wording names diffusers' layerwise casting (`enable_layerwise_casting`: fp8 storage,
/// upcast to the compute type one layer at a time).
fn layerwise_casting(text: &str) -> bool {
    let text = text.to_lowercase().replace(['-', '_', ' '], "");
    text.contains("layerwisecasting") || text.contains("layerwiseupcasting")
}

/// The language's precision for a quantization scheme, with the assumption it carries.
fn scheme(cx: &mut Cx<'_>, q: &str, w: &str) -> Option<&'static str> {
    let word = if q.contains("gguf") {
        // A k-quant file's mix (`Q4_K_S`, `Q4_K_M`) is written as its main type.
        let types =
            ["q4_1", "q8_0", "q2_k", "q4_0", "q5_0", "q5_1", "q3_k", "q4_k", "q5_k", "q6_k"];
        let Some(ggml) = types.into_iter().find(|t| w.contains(t)) else {
            cx.unreadable("weight_precision", w);
            return None;
        };
        cx.assume(
            assume::GGUF_UNIFORM,
            format!(
                "{ggml} for every transformer weight (city96/FLUX.1-dev-gguf keeps some tensors \
                 at higher precision; the Q2_K file mixes k-types)"
            ),
        );
        ggml
    } else if layerwise_casting(q) {
        // The skipped modules are the denoiser's `layerwise_skip` (models.vram).
        "fp8-layerwise"
    } else if q.contains("nf4") || w.contains("nf4") {
        // diffusers' BitsAndBytesConfig: bnb_4bit_use_double_quant defaults to False.
        "nf4"
    } else if ["bnb", "bitsandbytes"].iter().any(|b| q.contains(b))
        && ["4-bit", "4bit", "4 bit"].iter().any(|b| q.contains(b) || w.contains(b))
    {
        // BitsAndBytesConfig(load_in_4bit=True) with no type: bnb_4bit_quant_type "fp4".
        cx.assume(
            assume::RUNTIME_DEFAULT,
            format!("{q:?}: bitsandbytes' default 4-bit type, fp4 (the same bytes as NF4)"),
        );
        "fp4"
    } else if q.contains("llm.int8") {
        // bitsandbytes' 8-bit loader, which keeps `_keep_in_fp32_modules` (T5's `wo`) in fp32.
        "int8-bnb"
    } else if q.contains("int8_weight_only") || q.contains("int8") {
        "int8"
    } else if (q.contains("float8") || q.contains("fp8"))
        && !crate::gpus::gpu(&cx.point.gpu_type).is_some_and(|gpu| crate::gpus::runs_fp8(&gpu))
    {
        // A weight-only FP8 scheme (torchao float8_weight_only, quanto qfloat8) on a GPU
        // without FP8 compute stores one byte per weight and upcasts each weight as it is used:
        // the language's FP8 storage with per-layer casting.
        cx.assume(
            assume::EQUIVALENT_FORMAT,
            format!("{q:?} on a GPU without FP8 compute: FP8 storage cast as each layer runs"),
        );
        "fp8-layerwise"
    } else if q.contains("float8") || q.contains("qfloat8") || q.contains("fp8") {
        "fp8"
    } else if q.contains("int4_weight_only") || q.contains("int4") {
        // torchao int4_weight_only (group_size 128, bf16 scale and zero) and quanto qint4
        // (group 128, scale and shift in the weight's bf16): 4.25 bits per weight.
        "int4-g128"
    } else {
        cx.unreadable("quantization", q);
        return None;
    };
    Some(word)
}

/// The text tokens beside the latents: the pipeline's default, or a stated
/// `max_sequence_length` where the pipeline pads its T5 or LLM prompt to it (FLUX, SD3 after its
/// 77 CLIP tokens, PixArt, CogVideoX, Wan, HunyuanVideo, LTX-Video); CLIP-only pipelines and
/// Qwen-Image, which caps rather than pads, keep their own.
fn text_tokens(cx: &mut Cx<'_>, pipeline: &Pipeline) -> u64 {
    let pads = pipeline
        .encoders
        .iter()
        .any(|e| matches!(e, Encoder::T5 | Encoder::UmT5 | Encoder::LlavaLlama3));
    let Some(stated) = cx.point.setting_count(&["max_sequence_length"]).filter(|n| *n > 0) else {
        return pipeline.text_tokens;
    };
    if !pads {
        return pipeline.text_tokens;
    }
    cx.assume(assume::SCRIPT_SETTING, format!("max_sequence_length {stated}: the padded prompt"));
    if pipeline.encoders.contains(&Encoder::ClipG) { 77 + stated } else { stated }
}

/// Whether diffusers loaded a pipeline's safety checker: it runs the pipeline through diffusers
/// and says nothing of turning the checker off (`safety_checker=None`, "no safety checker").
fn loads_safety_checker(point: &crate::data::Point) -> bool {
    let text = point.all_text().replace(' ', "");
    let off =
        ["safety_checker=none", "safety_checkernone", "safety_checker:none", "nosafetychecker"]
            .iter()
            .chain(&["withoutsafetychecker", "safetycheckerdisabled", "safety_checkerdisabled"])
            .chain(&["safetycheckeroff", "requires_safety_checker=false"])
            .any(|phrase| text.contains(phrase));
    point.framework.to_lowercase().contains("diffusers") && !off
}

/// Images per prompt as the image field says them: `num_images_per_prompt 4`, "4 images per
/// prompt".
fn images_per_prompt(text: &str) -> Option<u64> {
    let lower = text.to_lowercase().replace(['=', ':', '(', ')', ','], " ");
    let words: Vec<&str> = lower.split_whitespace().collect();
    words.iter().enumerate().find_map(|(at, word)| {
        if matches!(*word, "num_images_per_prompt" | "num_videos_per_prompt") {
            return words.get(at + 1)?.parse().ok();
        }
        let count: u64 = word.parse().ok()?;
        let (noun, per, prompt) = (words.get(at + 1)?, words.get(at + 2)?, words.get(at + 3)?);
        (matches!(*noun, "images" | "videos") && *per == "per" && prompt.starts_with("prompt"))
            .then_some(count)
    })
}

#[cfg(test)]
mod tests {
    use super::{image_size, latent_frames_stated, offload_in_settings, px_setting, video_frames};

    /// An SDXL point with `offload` as written.
    fn sdxl(offload: &str, batch: u64) -> Result<String, Vec<crate::gaps::Gap>> {
        let defaults = serde_json::json!({
            "id": "D-1", "source_id": "D", "workload": "diffusion_inference",
            "model": "stabilityai/stable-diffusion-xl-base-1.0", "framework": "diffusers",
            "weight_precision": "fp16", "gpu_type": "RTX 3060 12GB", "image_or_video": "1024x1024",
            "measured_kind": "peak", "value": 5, "unit": "GB",
            "measurement_method": "torch.cuda.max_memory_allocated()"
        });
        let changes = serde_json::json!({"offload": offload, "batch_size": batch}).to_string();
        let point = super::super::test_point(defaults, &changes);
        super::super::express(&point).map(|expressed| expressed.source)
    }

    #[test]
    fn hunyuan_video_wan_2_2_and_qwen_image_in_their_wordings() {
        // HunyuanVideo's README wording: height, width and frames; its own sample_video.py
        // tiles the decode by default.
        let defaults = serde_json::json!({
            "id": "H-1", "source_id": "H", "workload": "diffusion_inference",
            "model": "tencent/HunyuanVideo", "framework": "HunyuanVideo sample_video.py",
            "weight_precision": "bf16", "gpu_type": "H800 80GB", "batch_size": 1,
            "image_or_video": "720px1280px129f", "measured_kind": "peak", "value": 60,
            "unit": "GB", "measurement_method": "not stated"
        });
        let own = super::super::express(&super::super::test_point(defaults.clone(), "{}"))
            .expect("expressible")
            .source;
        assert!(own.contains("denoiser      hunyuan-video-transformer"), "{own}");
        assert!(own.contains("text_encoders llava-llama3-8b-text clip-l-text"), "{own}");
        assert!(own.contains("resolution    1280 x 720"), "{own}");
        assert!(
            own.contains("video_frames  129") && own.contains("video_vae     hunyuan"),
            "{own}"
        );
        assert!(
            own.contains("vae_tiling    true") && own.contains("vae_tile      256 x 256"),
            "{own}"
        );
        assert!(own.contains("cfg           false"), "{own}");
        // Wan 2.2's A14B: the two experts, one at a time under `--offload_model True`.
        let wan22 = serde_json::json!({
            "id": "W-1", "source_id": "W", "workload": "diffusion_inference",
            "model": "Wan-AI/Wan2.2-T2V-A14B", "framework": "Wan2.2 generate.py",
            "weight_precision": "bf16", "gpu_type": "H100 80GB", "batch_size": 1,
            "image_or_video": "1280*720, 81 frames", "measured_kind": "peak", "value": 40,
            "unit": "GB", "measurement_method": "not stated",
            "offload": "--offload_model True --convert_model_dtype"
        });
        let wan22 = super::super::express(&super::super::test_point(wan22, "{}"))
            .expect("expressible")
            .source;
        assert!(wan22.contains("denoiser_experts 2"), "{wan22}");
        assert!(
            wan22.contains("offload       model") && wan22.contains("resolution    1280 x 720")
        );
        // `--use-cpu-offload` is sequential offload.
        let offloaded = super::super::express(&super::super::test_point(
            defaults.clone(),
            r#"{"offload": "--use-cpu-offload"}"#,
        ))
        .expect("expressible")
        .source;
        assert!(offloaded.contains("offload       sequential"), "{offloaded}");
        // diffusers without enable_tiling decodes whole; its 540p is 960 x 544.
        let untiled = super::super::express(&super::super::test_point(
            defaults.clone(),
            r#"{"framework": "diffusers HunyuanVideoPipeline", "image_or_video": "540p, 129 frames"}"#,
        ))
        .expect("expressible")
        .source;
        assert!(!untiled.contains("vae_tiling"), "{untiled}");
        assert!(untiled.contains("resolution    960 x 544"), "{untiled}");
        // Qwen-Image: Wan 2.1's VAE over its one latent frame, a negative prompt's pass.
        let qwen = super::super::express(&super::super::test_point(
            defaults.clone(),
            r#"{"model": "Qwen/Qwen-Image", "framework": "diffusers", "image_or_video": "1328x1328"}"#,
        ))
        .expect("expressible")
        .source;
        assert!(qwen.contains("text_encoders qwen2.5-vl-7b-text"), "{qwen}");
        assert!(qwen.contains("video_vae     wan") && qwen.contains("video_frames  1"), "{qwen}");
        assert!(
            qwen.contains("resolution    1328 x 1328") && qwen.contains("cfg           separate")
        );
        // CogVideoX1.5-5B patches two latent frames deep; its defaults are 81 frames of 1360 x 768.
        let cogvideox_1_5 = super::super::express(&super::super::test_point(
            defaults.clone(),
            r#"{"model": "THUDM/CogVideoX1.5-5B", "framework": "diffusers CogVideoXPipeline", "image_or_video": null}"#,
        ))
        .expect("expressible")
        .source;
        assert!(cogvideox_1_5.contains("denoiser      cogvideox1.5-5b-transformer"));
        assert!(cogvideox_1_5.contains("patch_frames  2"), "{cogvideox_1_5}");
        assert!(
            cogvideox_1_5.contains("resolution    1360 x 768")
                && cogvideox_1_5.contains("video_frames  81"),
            "{cogvideox_1_5}"
        );
        // Its editing checkpoint encodes a reference image too: not this pipeline.
        let edit = super::super::express(&super::super::test_point(
            defaults.clone(),
            r#"{"model": "Qwen/Qwen-Image-Edit", "framework": "diffusers"}"#,
        ));
        assert!(edit.is_err());
        // Mochi at its pipeline's defaults (19 frames of 848 × 480), its decoder Mochi's own.
        let mochi = super::super::express(&super::super::test_point(
            defaults.clone(),
            r#"{"model": "genmo/mochi-1-preview", "framework": "diffusers MochiPipeline", "image_or_video": null}"#,
        ))
        .expect("expressible")
        .source;
        assert!(
            mochi.contains("video_frames  19")
                && mochi.contains("resolution    848 x 480")
                && mochi.contains("video_vae     mochi")
                && mochi.contains("vae           mochi-vae"),
            "{mochi}"
        );
        // Sana: Gemma 2's 300 tokens, the DC-AE's 32 x 32-pixel latents unpatched.
        let sana = super::super::express(&super::super::test_point(
            defaults.clone(),
            r#"{"model": "Efficient-Large-Model/Sana_1600M_1024px_diffusers", "framework": "diffusers SanaPipeline", "image_or_video": null}"#,
        ))
        .expect("expressible")
        .source;
        assert!(
            sana.contains("image_vae     dc-ae")
                && sana.contains("text_encoders gemma2-2b-text")
                && sana.contains("resolution    1024 x 1024"),
            "{sana}"
        );
        // A pipeline the harness does not declare is a missing feature, not missing data.
        let gaps = super::super::express(&super::super::test_point(
            defaults,
            r#"{"model": "stabilityai/stable-video-diffusion-img2vid-xt"}"#,
        ))
        .expect_err("no Stable Video Diffusion pipeline");
        assert_eq!(gaps[0].label, crate::gaps::feature::PIPELINE);
    }

    #[test]
    fn a_denoiser_benchmarked_alone_has_no_encoders_vae_or_guidance() {
        let defaults = serde_json::json!({
            "id": "B-1", "source_id": "B", "workload": "diffusion_inference",
            "model": "black-forest-labs/FLUX.1-dev", "framework": "diffusers benchmarks",
            "weight_precision": "bf16", "gpu_type": "H100 80GB", "batch_size": 1,
            "image_or_video": "1024x1024", "measured_kind": "peak", "value": 22.61, "unit": "GB",
            "measurement_method": "torch.cuda.max_memory_allocated()",
            "components_included": "FluxTransformer2DModel forward only"
        });
        let workload =
            |source: String| source.split("workload point").nth(1).expect("a workload").to_string();
        let alone = workload(
            super::super::express(&super::super::test_point(defaults.clone(), "{}"))
                .expect("expressible")
                .source,
        );
        assert!(alone.contains("denoiser      flux1-dev-transformer"), "{alone}");
        assert!(!alone.contains("text_encoders") && !alone.contains("vae "), "{alone}");
        assert!(alone.contains("cfg           false"), "{alone}");
        // The whole pipeline's wording keeps every model.
        let whole = workload(
            super::super::express(&super::super::test_point(
                defaults.clone(),
                r#"{"components_included": "resident pipeline weights + activations"}"#,
            ))
            .expect("expressible")
            .source,
        );
        assert!(whole.contains("text_encoders t5-xxl-encoder clip-l-text"), "{whole}");
        assert!(whole.contains("vae           flux-vae"), "{whole}");
        // LTX-Video 0.9.7 alone: unpatched 32 × 32-pixel latents of 8 frames each; its whole
        // pipeline adds T5 and 0.9.5's VAE, whose decoder 0.9.7 keeps.
        let ltx =
            r#""model": "Lightricks/LTX-Video-0.9.7-dev", "image_or_video": "704x512, 161 frames""#;
        let alone = workload(
            super::super::express(&super::super::test_point(
                defaults.clone(),
                &format!("{{{ltx}}}"),
            ))
            .expect("expressible")
            .source,
        );
        assert!(alone.contains("patch_pixels  32"), "{alone}");
        assert!(
            alone.contains("video_vae     ltx-0.9.5") && !alone.contains("\n    vae "),
            "{alone}"
        );
        assert!(alone.contains("video_frames  161"), "{alone}");
        let pipeline = workload(
            super::super::express(&super::super::test_point(
                defaults.clone(),
                &format!(
                    r#"{{{ltx}, "framework": "diffusers LTXPipeline", "components_included": "the whole pipeline"}}"#
                ),
            ))
            .expect("expressible")
            .source,
        );
        assert!(pipeline.contains("text_encoders t5-xxl-encoder"), "{pipeline}");
        assert!(pipeline.contains("vae           ltxv-vae-0.9.5"), "{pipeline}");
        // The 2 B releases by the names they go by, each with its own VAE; 121 frames are
        // 1 + 8 × 15, while 125 (1 + 4 × 31) is no whole number of LTX-Video's latents.
        let release = |model: &str, frames: u64| {
            super::super::express(&super::super::test_point(
                defaults.clone(),
                &format!(
                    r#"{{"model": "{model}", "image_or_video": "768x512, {frames} frames", "framework": "diffusers LTXPipeline", "components_included": "the whole pipeline"}}"#
                ),
            ))
            .map(|expressed| workload(expressed.source))
        };
        for (model, vae, decoder) in [
            ("Lightricks/LTX-Video", "ltxv-vae-0.9.0", "ltx\n"),
            ("Lightricks/LTX-Video-0.9.1", "ltxv-vae-0.9.1", "ltx-0.9.1"),
            ("Lightricks/LTX-Video-0.9.5", "ltxv-vae-0.9.5", "ltx-0.9.5"),
            ("LTX-Video 2B v0.9.6 distilled", "ltxv-vae-0.9.5", "ltx-0.9.5"),
        ] {
            let source = release(model, 121).expect("expressible");
            assert!(source.contains("denoiser      ltxv-2b-transformer"), "{model}: {source}");
            assert!(source.contains(&format!("vae           {vae}")), "{model}: {source}");
            assert!(source.contains(&format!("video_vae     {decoder}")), "{model}: {source}");
        }
        assert!(release("Lightricks/LTX-Video", 125).is_err());
        // Its tiled decode is modelled: tiles of 512 pixels (diffusers' default).
        let tiled = workload(
            super::super::express(&super::super::test_point(
                defaults,
                r#"{"model": "Lightricks/LTX-Video", "image_or_video": "768x512, 121 frames", "framework": "diffusers LTXPipeline", "components_included": "the whole pipeline", "offload": "VAE tiling"}"#,
            ))
            .expect("expressible")
            .source,
        );
        assert!(
            tiled.contains("vae_tiling    true") && tiled.contains("vae_tile      512 x 512"),
            "{tiled}"
        );
    }

    #[test]
    fn wan_s_own_offload_flags() {
        let defaults = serde_json::json!({
            "id": "X-1", "source_id": "X", "workload": "diffusion_inference",
            "model": "Wan-AI/Wan2.1-T2V-1.3B", "framework": "Wan2.1 generate.py",
            "weight_precision": "bf16", "gpu_type": "RTX 4090", "batch_size": 1,
            "image_or_video": "832x480, 81 frames", "offload": "--offload_model True --t5_cpu",
            "measured_kind": "peak", "value": 8, "unit": "GB",
            "measurement_method": "torch.cuda.max_memory_allocated()"
        });
        let point = super::super::test_point(defaults.clone(), "{}");
        let source = super::super::express(&point).expect("expressible").source;
        assert!(source.contains("offload       model"), "{source}");
        // Other spellings of the checkpoint name the same pipeline; image-to-video does not.
        let spelled = |model: &str| {
            let point =
                super::super::test_point(defaults.clone(), &format!(r#"{{"model": "{model}"}}"#));
            super::super::express(&point)
        };
        assert!(
            spelled("Wan 2.1 T2V 1.3B").expect("expressible").source.contains("wan21-t2v-1.3b")
        );
        assert!(spelled("wan2.1-t2v-14b").expect("expressible").source.contains("wan21-t2v-14b"));
        assert!(spelled("Wan2.1-I2V-14B-480P").is_err());
        // The README's size names.
        let at = |size: &str| {
            let fields = format!(r#"{{"image_or_video": "{size}, 81 frames"}}"#);
            let point = super::super::test_point(defaults.clone(), &fields);
            super::super::express(&point).expect("expressible").source
        };
        assert!(at("720P").contains("resolution    1280 x 720"), "{}", at("720P"));
        assert!(at("480P").contains("resolution    832 x 480"));
        assert!(
            !source.contains("text_encoders") && source.contains("video_vae     wan"),
            "{source}"
        );
    }

    #[test]
    fn wan_keeps_its_caches_and_tiles_its_decode() {
        let point = |fields: &str| {
            let defaults = serde_json::json!({
                "id": "X-1", "source_id": "X", "workload": "diffusion_inference",
                "model": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "framework": "diffusers 0.30",
                "weight_precision": "bf16", "gpu_type": "A100 80GB", "batch_size": 1,
                "measured_kind": "peak", "value": 20, "unit": "GB",
                "measurement_method": "torch.cuda.max_memory_allocated()"
            });
            super::super::express(&super::super::test_point(defaults, fields))
        };
        // A release before 0.31 changes CogVideoX's caches, not Wan's decoder.
        let old = point("{}").expect("expressible").source;
        assert!(!old.contains("vae_cache") && old.contains("video_vae     wan"), "{old}");
        let tiled = point(r#"{"offload": "VAE tiling"}"#).expect("expressible").source;
        assert!(
            tiled.contains("vae_tiling    true") && tiled.contains("vae_tile      256 x 256"),
            "{tiled}"
        );
    }

    #[test]
    fn the_torchao_video_benchmark_quantizes_the_text_encoder_too() {
        let point = |source: &str| {
            let defaults = serde_json::json!({
                "id": "X-1", "source_id": source, "workload": "diffusion_inference",
                "model": "THUDM/CogVideoX-5b", "framework": "diffusers CogVideoXPipeline",
                "weight_precision": "int4 weight-only", "quantization": "torchao int4wo",
                "compute_dtype": "bf16", "gpu_type": "A100 80GB", "batch_size": 1,
                "measured_kind": "peak", "value": 18, "unit": "GB",
                "measurement_method": "torch.cuda.max_memory_allocated()"
            });
            let point = super::super::test_point(defaults, "{}");
            super::super::express(&point).expect("expressible").source
        };
        // diffusers-torchao's benchmark_video.py quantizes pipe.text_encoder with the transformer.
        let s20 = point("S20");
        assert!(s20.contains("text_encoder_weights int4-g128"), "{s20}");
        // Elsewhere an unstated scope is the denoiser alone.
        let other = point("X");
        assert!(
            other.contains("denoiser_weights int4-g128") && !other.contains("text_encoder_weights")
        );
    }

    #[test]
    fn components_are_read_by_their_diffusers_names() {
        use super::{Encoder, named_components};
        let flux = [Encoder::T5, Encoder::ClipL];
        let sd3 = [Encoder::T5, Encoder::ClipL, Encoder::ClipG];
        assert_eq!(
            named_components("components_to_quantize=['transformer','text_encoder_2']", &flux),
            Some((true, vec![Encoder::T5]))
        );
        assert_eq!(
            named_components("llm.int8 on text_encoder_3 (t5-xxl) only", &sd3),
            Some((false, vec![Encoder::T5]))
        );
        assert_eq!(
            named_components(
                "components_to_quantize=['transformer', 'text_encoder']",
                &[Encoder::QwenVl]
            ),
            Some((true, vec![Encoder::QwenVl]))
        );
        assert_eq!(named_components("nf4 (transformer + t5)", &flux), None);
        // A stated max_sequence_length pads FLUX's T5 prompt; SD3 adds its 77 CLIP tokens.
        let tokens = |model: &str| {
            expressed(
                model,
                r#"{"image_or_video": "1024x1024", "other_settings": "max_sequence_length=256"}"#,
            )
        };
        assert!(tokens("black-forest-labs/FLUX.1-dev").contains("text_tokens   256 tokens"));
        let sd3 = tokens("stabilityai/stable-diffusion-3-medium-diffusers");
        assert!(sd3.contains("text_tokens   333 tokens"), "{sd3}");
        assert!(
            tokens("stabilityai/stable-diffusion-xl-base-1.0").contains("text_tokens   77 tokens")
        );
    }

    #[test]
    fn stable_diffusion_1_loads_its_safety_checker_unless_told_not_to() {
        let loaded =
            expressed("runwayml/stable-diffusion-v1-5", r#"{"image_or_video": "512x512"}"#);
        assert!(loaded.contains("safety_checker sd-safety-checker"), "{loaded}");
        let off = expressed(
            "runwayml/stable-diffusion-v1-5",
            r#"{"image_or_video": "512x512", "other_settings": "safety_checker=None"}"#,
        );
        assert!(!off.contains("safety_checker"), "{off}");
        let sdxl = expressed(
            "stabilityai/stable-diffusion-xl-base-1.0",
            r#"{"image_or_video": "1024x1024"}"#,
        );
        assert!(!sdxl.contains("safety_checker"), "{sdxl}");
    }

    #[test]
    fn images_per_prompt_multiply_the_batch() {
        let four = expressed(
            "stabilityai/stable-diffusion-xl-base-1.0",
            r#"{"image_or_video": "1024x1024", "other_settings": "num_images_per_prompt=4"}"#,
        );
        assert!(four.contains("batch         4"), "{four}");
        let eight = expressed(
            "stabilityai/stable-diffusion-xl-base-1.0",
            r#"{"image_or_video": "1024x1024", "batch_size": 2,
                "other_settings": "num_images_per_prompt 4"}"#,
        );
        assert!(eight.contains("batch         8"), "{eight}");
        // Said with the image's size.
        for image in
            ["1024x1024, 25 steps, 4 images per prompt", "1024x1024 (num_images_per_prompt 4)"]
        {
            let fields = format!(r#"{{"image_or_video": "{image}", "batch_size": 1}}"#);
            let said = expressed("stabilityai/stable-diffusion-xl-base-1.0", &fields);
            assert!(said.contains("batch         4"), "{image}: {said}");
        }
        let noted = expressed(
            "stabilityai/stable-diffusion-xl-base-1.0",
            r#"{"image_or_video": "1024x1024, 4 images per prompt", "batch_size": 4}"#,
        );
        assert!(noted.contains("batch         4"), "{noted}");
    }

    #[test]
    fn a_declared_controlnet_runs_beside_its_pipeline() {
        // Named by the ControlNet alone: SDXL's pipeline, with the full-size SDXL ControlNet.
        let sdxl =
            expressed("diffusers/controlnet-canny-sdxl-1.0", r#"{"image_or_video": "1024x1024"}"#);
        assert!(sdxl.contains("denoiser      sdxl-unet"), "{sdxl}");
        assert!(sdxl.contains("controlnet    sdxl-controlnet"), "{sdxl}");
        let flux = expressed(
            "black-forest-labs/FLUX.1-dev",
            r#"{"image_or_video": "1024x1024", "other_settings": "FluxControlNetModel.from_pretrained('InstantX/FLUX.1-dev-Controlnet-Canny')"}"#,
        );
        assert!(flux.contains("controlnet_blocks 15"), "{flux}");
        let sd15 = expressed("lllyasviel/sd-controlnet-canny", r#"{"image_or_video": "512x512"}"#);
        assert!(sd15.contains("controlnet    sd15-controlnet"), "{sd15}");
    }

    #[test]
    fn a_network_beside_the_denoiser_is_a_feature_gap() {
        // diffusers' reduced SDXL ControlNets have layouts of their own.
        let gaps = expressed_gaps(
            "diffusers/controlnet-canny-sdxl-1.0-small",
            r#"{"image_or_video": "1024x1024"}"#,
        );
        assert_eq!(gaps[0].label, crate::gaps::feature::SIDE_NETWORK);
        assert!(gaps[0].detail.starts_with("ControlNet"), "{}", gaps[0].detail);
        let ip = expressed_gaps(
            "stabilityai/stable-diffusion-xl-base-1.0",
            r#"{"image_or_video": "1024x1024", "other_settings": "load_ip_adapter(h94/IP-Adapter)"}"#,
        );
        assert_eq!(ip[0].label, crate::gaps::feature::SIDE_NETWORK);
    }

    #[test]
    fn group_offloading_of_one_model_is_a_missing_feature() {
        let gaps = expressed_gaps(
            "black-forest-labs/FLUX.1-dev",
            r#"{"weight_precision": "bf16", "image_or_video": "1024x1024",
                "offload": "apply_group_offloading(pipe.transformer, onload_device='cuda', offload_type='block_level', num_blocks_per_group=2)"}"#,
        );
        assert!(
            gaps.iter().any(|g| g.label == crate::gaps::feature::PARTIAL_GROUP_OFFLOAD),
            "{gaps:?}"
        );
    }

    #[test]
    fn offload_calls_among_the_other_settings() {
        let read = |s: &str| offload_in_settings(Some(s));
        assert_eq!(
            read("enable_model_cpu_offload, vae.enable_tiling()").as_deref(),
            Some("enable_model_cpu_offload")
        );
        assert_eq!(
            read("guidance 6; enable_sequential_cpu_offload()").as_deref(),
            Some("enable_sequential_cpu_offload()")
        );
        assert_eq!(
            read("--offload_model True --t5_cpu").as_deref(),
            Some("--offload_model True --t5_cpu")
        );
        assert_eq!(read("no offload, 50 steps"), None);
        assert_eq!(read("guidance 3.5"), None);
        let group = "enable_group_offload(onload_device=cuda, offload_type=block_level)";
        assert_eq!(read(group).as_deref(), Some(group));
    }

    #[test]
    fn bitsandbytes_four_bit_in_its_wordings() {
        let flux = "black-forest-labs/FLUX.1-dev";
        // NF4 named in the precision, the components named in the quantization.
        let both = expressed(
            flux,
            r#"{"weight_precision": "nf4", "quantization": "bnb 4-bit transformer and T5"}"#,
        );
        assert!(both.contains("denoiser_weights nf4"), "{both}");
        assert!(both.contains("text_encoder_weights nf4 bf16"), "{both}");
        // 4-bit with no type is bitsandbytes' default, FP4.
        let default = expressed(
            flux,
            r#"{"weight_precision": "4-bit", "quantization": "bitsandbytes (load_in_4bit)"}"#,
        );
        assert!(default.contains("denoiser_weights fp4"), "{default}");
        // The text encoders stay in the pipeline's type (no line of their own).
        assert!(!default.contains("text_encoder_weights"), "{default}");
    }

    #[test]
    fn offload_switches_in_their_wordings() {
        let both = sdxl("model CPU offload + VAE tiling", 1).expect("expressible");
        assert!(both.contains("offload       model") && both.contains("vae_tiling    true"));
        let call = sdxl("enable_model_cpu_offload()", 1).expect("expressible");
        assert!(call.contains("offload       model") && !call.contains("vae_tiling"));
        let slicing = sdxl("enable_vae_slicing()", 1).expect("one image decodes alone anyway");
        assert!(!slicing.contains("offload       model"));
        let batch = sdxl("enable_vae_slicing()", 4).expect("a batch decoded image by image");
        assert!(batch.contains("vae_slicing   true"), "{batch}");
        assert!(!slicing.contains("vae_slicing"), "{slicing}");
        // The calls among the other settings, with no offload stated.
        let defaults = serde_json::json!({
            "id": "D-1", "source_id": "D", "workload": "diffusion_inference",
            "model": "stabilityai/stable-diffusion-xl-base-1.0", "framework": "diffusers",
            "weight_precision": "fp16", "gpu_type": "RTX 3060 12GB", "image_or_video": "1024x1024",
            "measured_kind": "peak", "value": 5, "unit": "GB", "batch_size": 4,
            "measurement_method": "torch.cuda.max_memory_allocated()"
        });
        let in_settings = |settings: &str| {
            let changes = serde_json::json!({ "other_settings": settings }).to_string();
            let point = super::super::test_point(defaults.clone(), &changes);
            super::super::express(&point).map(|expressed| expressed.source).expect("expressible")
        };
        let calls = in_settings("pipe.enable_vae_slicing(); pipe.enable_vae_tiling()");
        assert!(calls.contains("vae_slicing   true") && calls.contains("vae_tiling    true"));
        assert!(!in_settings("no vae slicing, 25 steps").contains("vae_slicing"));
        assert!(!in_settings("no VAE tiling (it would reduce the peak)").contains("vae_tiling"));
        // Only a float16 VAE is upcast for the decode; SDXL in bf16 decodes in bf16.
        assert!(in_settings("").contains("vae_upcast    true"));
        let bf16 = serde_json::json!({ "weight_precision": "bf16" }).to_string();
        let bf16 = super::super::test_point(defaults.clone(), &bf16);
        let bf16 = super::super::express(&bf16).expect("expressible").source;
        assert!(!bf16.contains("vae_upcast"), "{bf16}");
        let sequential = sdxl("enable_sequential_cpu_offload()", 1).expect("expressible");
        assert!(sequential.contains("offload       sequential"), "{sequential}");
        let words = sdxl("sequential CPU offload + VAE tiling", 1).expect("expressible");
        assert!(words.contains("offload       sequential") && words.contains("vae_tiling    true"));
        let sliced = sdxl("attention slicing", 1).expect("expressible");
        assert!(sliced.contains("attention     sliced"), "{sliced}");
        let max =
            sdxl("enable_attention_slicing('max') + model CPU offload", 1).expect("expressible");
        assert!(
            max.contains("attention_slice max") && max.contains("offload       model"),
            "{max}"
        );
        let group = sdxl(
            "pipe.transformer.enable_group_offload(onload_device, offload_type='block_level', num_blocks_per_group=2)",
            1,
        )
        .expect("expressible");
        assert!(group.contains("offload       blocks") && group.contains("blocks_per_group 2"));
        let leaves = sdxl("group offloading (leaf_level, use_stream=True) + VAE tiling", 1)
            .expect("expressible");
        assert!(leaves.contains("offload       leaves") && leaves.contains("offload_stream true"));
        assert!(leaves.contains("vae_tiling    true"), "{leaves}");
    }

    /// The denoiser of an fp16 point of `model` at `size` on an A100, expressed and evaluated
    /// without errors ([`expressed`]).
    fn denoiser(model: &str, size: &str) -> String {
        let changes = serde_json::json!({"image_or_video": size, "gpu_type": "A100 80GB"});
        expressed(model, &changes.to_string())
            .lines()
            .find_map(|line| line.trim().strip_prefix("denoiser "))
            .map(|rest| rest.trim().to_string())
            .unwrap_or_default()
    }

    #[test]
    fn added_pipelines_evaluate_with_their_denoisers() {
        let cases = [
            ("PixArt-alpha/PixArt-XL-2-1024-MS", "1024x1024", "pixart-alpha-xl-2"),
            ("stabilityai/stable-diffusion-2-1", "768x768", "sd21-unet"),
            ("stabilityai/stable-diffusion-3.5-large", "1024x1024", "sd35-large-transformer"),
            ("stabilityai/stable-diffusion-3.5-medium", "1024x1024", "sd35-medium-transformer"),
            // Other wordings of the same pipelines.
            ("Stable Diffusion 2.1", "512x512", "sd21-unet"),
            ("SD 3.5 Large", "1024x1024", "sd35-large-transformer"),
            ("PixArt-alpha", "1024x1024", "pixart-alpha-xl-2"),
            ("playgroundai/playground-v2.5-1024px-aesthetic", "1024x1024", "sdxl-unet"),
        ];
        for (model, size, expected) in cases {
            assert_eq!(denoiser(model, size), expected, "{model}");
        }
        // Neighbours that are other pipelines stay unexpressed.
        for model in
            ["stabilityai/stable-diffusion-2-inpainting", "PixArt-alpha/PixArt-XL-2-512x512"]
        {
            assert!(super::pipeline(model).is_err(), "{model}");
        }
    }

    /// A diffusers point for `model` on an RTX 4090, with `changes` over its defaults.
    fn diffusion_point(model: &str, changes: &str) -> crate::data::Point {
        let defaults = serde_json::json!({
            "id": "T-1", "source_id": "T", "workload": "diffusion_inference",
            "model": model, "framework": "diffusers", "weight_precision": "fp16",
            "gpu_type": "RTX 4090", "batch_size": 1,
            "measured_kind": "peak", "value": 10, "unit": "GB",
            "measurement_method": "torch.cuda.max_memory_allocated()"
        });
        super::super::test_point(defaults, changes)
    }

    /// The gaps that stop a point with `changes` from being expressed.
    fn expressed_gaps(model: &str, changes: &str) -> Vec<crate::gaps::Gap> {
        match super::super::express(&diffusion_point(model, changes)) {
            Ok(_) => panic!("{model}: expressed"),
            Err(gaps) => gaps,
        }
    }

    /// The workload a point with `changes` expresses, the diffusion section's lines.
    fn expressed(model: &str, changes: &str) -> String {
        let point = diffusion_point(model, changes);
        let source =
            super::super::express(&point).unwrap_or_else(|gaps| panic!("{model}: {gaps:?}")).source;
        let errors: Vec<_> = vram_core::evaluate(&source)
            .diagnostics
            .into_iter()
            .filter(vram_core::diagnostic::Diagnostic::is_error)
            .collect();
        assert!(errors.is_empty(), "{model}: {errors:?}");
        source.split("workload point").nth(1).expect("a workload").to_string()
    }

    #[test]
    fn turbo_checkpoints_run_without_guidance_at_their_own_size() {
        let turbo = expressed("stabilityai/sdxl-turbo", "{}");
        assert!(turbo.contains("denoiser      sdxl-unet"), "{turbo}");
        assert!(turbo.contains("resolution    512 x 512"), "{turbo}");
        assert!(turbo.contains("cfg           false"), "{turbo}");
        let sd_turbo = expressed("stabilityai/sd-turbo", "{}");
        assert!(sd_turbo.contains("denoiser      sd21-unet"), "{sd_turbo}");
        assert!(sd_turbo.contains("resolution    512 x 512"), "{sd_turbo}");
        assert!(sd_turbo.contains("cfg           false"), "{sd_turbo}");
        let large = expressed("stabilityai/stable-diffusion-3.5-large-turbo", "{}");
        assert!(large.contains("denoiser      sd35-large-transformer"), "{large}");
        assert!(large.contains("cfg           false"), "{large}");
        // A scale above 1 stated for a turbo model brings the unconditional batch back.
        let guided =
            expressed("stabilityai/sdxl-turbo", r#"{"other_settings": "guidance_scale 2.0"}"#);
        assert!(guided.contains("cfg           true"), "{guided}");
    }

    #[test]
    fn a_stated_scale_decides_guidance_and_an_unstated_size_is_the_pipelines() {
        let base = expressed("stabilityai/stable-diffusion-xl-base-1.0", "{}");
        assert!(base.contains("resolution    1024 x 1024"), "{base}");
        assert!(base.contains("cfg           true"), "{base}");
        let off = expressed(
            "stabilityai/stable-diffusion-xl-base-1.0",
            r#"{"image_or_video": "768x768, guidance_scale=1.0"}"#,
        );
        assert!(off.contains("resolution    768 x 768"), "{off}");
        assert!(off.contains("cfg           false"), "{off}");
        // Wan's second pass follows the same rule; FLUX's embedded guidance adds no batch.
        let wan = expressed("Wan-AI/Wan2.1-T2V-1.3B", r#"{"other_settings": "no CFG"}"#);
        assert!(wan.contains("cfg           false"), "{wan}");
        let flux =
            expressed("black-forest-labs/FLUX.1-dev", r#"{"other_settings": "guidance 3.5"}"#);
        assert!(flux.contains("resolution    1024 x 1024"), "{flux}");
        assert!(flux.contains("cfg           false"), "{flux}");
        let true_cfg = expressed(
            "black-forest-labs/FLUX.1-dev",
            r#"{"other_settings": "true_cfg_scale=4.0 with a negative prompt"}"#,
        );
        assert!(true_cfg.contains("cfg           separate"), "{true_cfg}");
        let sd15 = expressed("runwayml/stable-diffusion-v1-5", "{}");
        assert!(sd15.contains("resolution    512 x 512"), "{sd15}");
        let sd21_base = expressed("stabilityai/stable-diffusion-2-1-base", "{}");
        assert!(sd21_base.contains("resolution    512 x 512"), "{sd21_base}");
        let sd21 = expressed("stabilityai/stable-diffusion-2-1", "{}");
        assert!(sd21.contains("resolution    768 x 768"), "{sd21}");
    }

    #[test]
    fn image_sizes_in_their_usual_spellings() {
        assert_eq!(image_size("1024x1024"), Some((1024, 1024)));
        assert_eq!(image_size("1024 x 1024 image"), Some((1024, 1024)));
        assert_eq!(image_size("49 frames of 720×480"), Some((720, 480)));
        assert_eq!(image_size("768*512, 30 steps"), Some((768, 512)));
        assert_eq!(image_size("512 by 768 images"), Some((512, 768)));
        assert_eq!(image_size("images pre-cached"), None);
        assert_eq!(image_size("4x upscaling"), None);
        // HunyuanVideo's README: height, width and frames.
        assert_eq!(image_size("720px1280px129f"), Some((1280, 720)));
        assert_eq!(px_setting("544px960px129f"), Some((544, 960, 129)));
        // A video training bucket: frames, height, width.
        assert_eq!(image_size("video 49x512x768 (frames x height x width)"), Some((768, 512)));
        assert_eq!(video_frames("video 49x512x768 (frames x height x width)"), Some(49));
        assert_eq!(video_frames("768x512, 49 frames"), Some(49));
        assert_eq!(video_frames("Resolution: 768x512, 49f"), Some(49));
        assert_eq!(video_frames("1024x1024 images"), None);
        assert_eq!(image_size("1024x1024px, 30 steps"), Some((1024, 1024)));
        // One side of a square.
        assert_eq!(image_size("512px images; latents pre-cached"), Some((512, 512)));
        assert_eq!(image_size("1 megapixel (1024^2 pixel area) images"), Some((1024, 1024)));
        assert_eq!(latent_frames_stated("video, --num_latent_t 32 (32 latent frames)"), Some(32));
        assert_eq!(latent_frames_stated("video 49x512x768"), None);
        // Three numbers only where they are joined: not across words ("text", "T5").
        assert_eq!(
            image_size("512x768 images; text embeddings (VAE/T5 not on GPU)"),
            Some((512, 768))
        );
    }
}
