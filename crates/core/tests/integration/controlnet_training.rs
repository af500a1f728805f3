//! Training a ControlNet beside a frozen UNet (`controlnet` in a trained pipeline, diffusers'
//! train_controlnet.py): the ControlNet's fp32 weights and training state, what the step stores
//! on each side of the residuals, pinned by hand counts; and what such a pipeline refuses.

use crate::support::{check, codes, component};

/// SD 1.5's UNet, text encoder, VAE and its ControlNet at 512 × 512 (levels at 64², 32², 16² and
/// 8² with 320, 640, 1280 and 1280 channels), with `pipeline` and `training` fields added.
fn sd(pipeline: &str, training: &str) -> String {
    format!(
        "model u {{ params 859_520_964 }}\nmodel te {{ params 123_060_480 }}\nmodel ae {{ params 83_653_863 }}\n\
         model c {{ params 361_279_120 }}\n\
         workload w {{ runtime none; diffusion {{ denoiser u; text_encoders te; vae ae; controlnet c; \
         architecture unet; hidden 320; heads 8; channel_mult 1 2 4 4; layers_per_block 2; \
         cross_attention_dim 768; resolution 512 x 512{pipeline} }}\n training {{ method full; {training} }} }}\n\
         check w on a100-sxm4-80gb"
    )
}

#[test]
fn the_controlnet_trains_in_fp32_beside_the_frozen_pipeline() {
    // The script zeroes the gradients in place unless given --set_grads_to_none.
    let fp32 = check(&sd("; weights fp32", "optimizer adamw; zero_grad zeros"));
    assert_eq!(component(&fp32, "frozen denoiser weights: u"), Some(859_520_964 * 4));
    assert_eq!(component(&fp32, "trained ControlNet weights: c"), Some(361_279_120 * 4));
    assert_eq!(component(&fp32, "ControlNet gradients"), Some(361_279_120 * 4));
    assert_eq!(component(&fp32, "ControlNet optimizer state"), Some(361_279_120 * 8));
    // No master copy: the trained weights are fp32 already; the denoiser has no state.
    let names: Vec<_> = fp32.devices[0].components.iter().map(|c| c.name.to_string()).collect();
    assert!(names.iter().all(|n| !n.contains("master") && n != "gradients"), "{names:?}");
    // Mixed precision (`--mixed_precision fp16`): the frozen models in fp16, the ControlNet
    // still fp32, with the fp16 copies autocast keeps of its weights.
    let fp16 = check(&sd("; weights fp16", "optimizer adamw; activations fp16"));
    assert_eq!(component(&fp16, "frozen denoiser weights: u"), Some(859_520_964 * 2));
    assert_eq!(component(&fp16, "trained ControlNet weights: c"), Some(361_279_120 * 4));
    assert_eq!(
        component(&fp16, "ControlNet 16-bit weight copies (autocast)"),
        Some(361_279_120 * 2)
    );
    assert_eq!(component(&fp16, "16-bit weight copies (autocast)"), None);
}

#[test]
fn the_controlnet_keeps_the_down_half_and_the_denoiser_its_up_half() {
    // fp32, one image, fused attention. Values per position, by the counts of
    // `unet_activations.rs` (a ResNet 3 tensors of its input's channels and 3 of its output's,
    // an attention block 3c, a trained transformer layer 28c, a frozen one 21c):
    // ControlNet (trained down blocks and mid block):
    // - level 0: 3 × (640 + 640) + 2 × 28 × 320 + 2 × 960 + the downsampler's 320 = 24,000;
    // - level 1: 3 × (960 + 1280) + 2 × 28 × 640 + 3840 + 640 = 47,040;
    // - level 2: 3 × (1920 + 2560) + 2 × 28 × 1280 + 7680 + 1280 = 94,080;
    // - level 3: four ResNets 3 × (5120 + 5120), the mid layer 28 × 1280 and its block 3840:
    //   70,400.
    // Frozen denoiser (up blocks):
    // - level 0: 3 × (2240 + 960) + 3 × 21 × 320 + 2880 + 640 + 960 = 34,240;
    // - level 1: 3 × (4160 + 1920) + 3 × 21 × 640 + 5760 + 1280 = 65,600;
    // - level 2: 3 × (7040 + 3840) + 3 × 21 × 1280 + 11,520 + 1280 = 126,080;
    // - level 3: 3 × (7680 + 3840) = 34,560.
    // Each cross-attention keeps its keys and values over the 77 text tokens, 154c: seven
    // layers on the ControlNet's side, nine on the denoiser's.
    let checks = check(&sd("; weights fp32", "optimizer adamw"));
    let controlnet = 24_000 * 4096
        + 47_040 * 1024
        + 94_080 * 256
        + 70_400 * 64
        + 154 * (2 * 320 + 2 * 640 + 2 * 1280 + 1280);
    let denoiser = 34_240 * 4096
        + 65_600 * 1024
        + 126_080 * 256
        + 34_560 * 64
        + 154 * (3 * 320 + 3 * 640 + 3 * 1280);
    assert_eq!((controlnet, denoiser), (175_950_080, 242_944_640));
    assert_eq!(
        component(&checks, "ControlNet activations (down and mid blocks)"),
        Some(controlnet * 4)
    );
    assert_eq!(
        component(&checks, "frozen denoiser activations (up blocks, beside the ControlNet)"),
        Some(denoiser * 4)
    );
    // The conditioning embedding's SiLU inputs and outputs: 4 × 16 channels at 512², 4 × 32 at
    // 256², 4 × 96 at 128², 2 × 256 at 64².
    let embedding =
        4 * 16 * 512 * 512 + 4 * 32 * 256 * 256 + 4 * 96 * 128 * 128 + 2 * 256 * 64 * 64;
    assert_eq!(component(&checks, "ControlNet conditioning embedding"), Some(embedding * 4));
    // The residuals the loop holds: conv_in's 320 × 64², two ResNets and a downsampler a level
    // (the last without), the mid block's 1280 × 8²: 6,717,440 values.
    assert_eq!(component(&checks, "ControlNet outputs"), Some(6_717_440 * 4));
    assert_eq!(component(&checks, "ControlNet conditioning image"), Some(3 * 512 * 512 * 4));
    // `tools/unet-train-peak.py controlnet 32 32` counts diffusers' own step at 256 × 256
    // within 0.2 % of these counts at that size (465,739,648 B kept after the forward pass).
}

#[test]
fn checkpointing_reaches_the_controlnet_alone() {
    // `--gradient_checkpointing` calls controlnet.enable_gradient_checkpointing(): its blocks
    // keep their inputs and what lies outside them (level 0: 640 + 640 + 1920 + 320 = 3520;
    // level 1: 960 + 1280 + 3840 + 640 = 6720; level 2: 1920 + 2560 + 7680 + 1280 = 13,440;
    // level 3: 5120 + 1280 + 3840 = 10,240) and recompute the largest, a level-0 trained layer
    // (28 × 320 × 4096); the denoiser's up half stores what it stored.
    let plain = check(&sd("; weights fp32", "optimizer adamw"));
    let checkpointed = check(&sd("; weights fp32", "optimizer adamw; checkpointing full"));
    let kept = 3520 * 4096 + 6720 * 1024 + 13_440 * 256 + 10_240 * 64;
    let recomputed = 28 * 320 * 4096;
    assert_eq!(
        component(&checkpointed, "ControlNet activations (down and mid blocks)"),
        Some((kept + recomputed) * 4)
    );
    let up = "frozen denoiser activations (up blocks, beside the ControlNet)";
    assert_eq!(component(&checkpointed, up), component(&plain, up));
}

#[test]
fn what_a_trained_controlnet_refuses() {
    let fp32 = "; weights fp32";
    assert!(codes(&sd(fp32, "optimizer adamw")).is_empty());
    // It trains in full.
    assert_eq!(
        codes(&sd(fp32, "optimizer adamw").replace("method full", "method lora { rank 4 }")),
        ["E013"]
    );
    // The text encoders stay frozen; the denoiser is not gathered a block at a time.
    assert_eq!(codes(&sd(fp32, "train_text_encoders true")), ["E014"]);
    assert_eq!(codes(&sd(fp32, "sharding zero3")), ["E014"]);
    // A transformer's ControlNet is sampled only.
    let flux = "model t { params 12 billion }\nmodel c { params 3.3 billion }\n\
                workload w { runtime none; diffusion { denoiser t; controlnet c; \
                controlnet_blocks 4; weights bf16; architecture dit; hidden 3072; heads 24; \
                layers 57; resolution 512 x 512 }\n training { method full } }\n\
                check w on h100-sxm-80gb";
    assert!(codes(flux).contains(&"E013".to_string()), "{:?}", codes(flux));
}
