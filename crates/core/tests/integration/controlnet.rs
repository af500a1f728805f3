//! A ControlNet beside the denoiser (`controlnet`): its weights, the outputs it hands the
//! denoiser at each step and the conditioning image, pinned by hand counts.

use crate::support::{check, codes, component};

/// SD 1.5's UNet and a ControlNet at 512 × 512 in fp16, with `extra` pipeline lines.
fn unet(extra: &str) -> String {
    format!(
        "model u {{ params 860 million }}\nmodel c {{ params 367_177_360 }}\nmodel ae {{ params 84 million }}\n\
         workload w {{ runtime diffusers; diffusion {{ denoiser u; vae ae; controlnet c; weights fp16; \
         architecture unet; hidden 320; channel_mult 1 2 4 4; layers_per_block 2; \
         resolution 512 x 512{extra} }} }}\ncheck w on h100-sxm-80gb"
    )
}

/// FLUX.1-dev's shape with a 15-block ControlNet at 1024 × 1024 in bf16.
fn transformer(extra: &str) -> String {
    format!(
        "model t {{ params 12 billion }}\nmodel c {{ params 3.3 billion }}\nmodel ae {{ params 84 million }}\n\
         workload w {{ runtime diffusers; diffusion {{ denoiser t; vae ae; controlnet c; weights bf16; \
         architecture dit; hidden 3072; cfg false; text_tokens 512 tokens; \
         resolution 1024 x 1024{extra} }} }}\ncheck w on h100-sxm-80gb"
    )
}

#[test]
fn a_unet_controlnet_hands_over_its_down_block_residuals() {
    // Without a VAE the step is the largest transient.
    let check = check(&unet("").replace("vae ae; ", ""));
    assert_eq!(component(&check, "ControlNet weights: c"), Some(367_177_360 * 2));
    // 64 × 64 latents: conv_in's 320 channels, two ResNets of 320 and a downsampler (320 at
    // 32²), two of 640 and one (640 at 16²), two of 1280 and one (1280 at 8²), two of 1280 at
    // 8² and the mid block's 1280: 6,717,440 values, twice for guidance, 2 B each.
    let values = 320 * 4096 * 3
        + 320 * 1024
        + 640 * 1024 * 2
        + 640 * 256
        + 1280 * 256 * 2
        + 1280 * 64
        + 1280 * 64 * 2
        + 1280 * 64;
    assert_eq!(values, 6_717_440);
    assert_eq!(component(&check, "ControlNet outputs"), Some(values * 2 * 2));
    // The conditioning image at the output's size, three colours, the guided batch.
    assert_eq!(component(&check, "ControlNet conditioning image"), Some(3 * 512 * 512 * 2 * 2));
}

#[test]
fn a_transformer_controlnet_hands_over_a_sample_per_control_block() {
    let check = check(&transformer("; controlnet_blocks 15; offload model"));
    // 4,096 image tokens (64 × 64 patches) of 3,072 per control block, one batch (no guidance).
    assert_eq!(component(&check, "ControlNet outputs"), Some(15 * 4096 * 3072 * 2));
    assert_eq!(component(&check, "ControlNet weights: c"), Some(3_300_000_000 * 2));
    // Under model offload the step's phase holds the denoiser and the ControlNet together.
    assert_eq!(component(&check, "denoiser weights: t"), Some(24_000_000_000));
}

#[test]
fn under_model_offload_the_controlnet_stays_through_the_decode() {
    // Small models: the decode is the largest phase, and the ControlNet, hooked outside the
    // pipeline's chain, is still on the device.
    let source = unet("; offload model")
        .replace("params 860 million", "params 10 million")
        .replace("resolution 512 x 512", "resolution 2048 x 2048");
    let check = check(&source);
    assert!(component(&check, "VAE decode peak").is_some(), "{:#?}", check.devices[0].components);
    assert_eq!(component(&check, "ControlNet weights: c"), Some(367_177_360 * 2));
    assert_eq!(component(&check, "denoiser weights: u"), None);
}

#[test]
fn what_a_controlnet_needs_and_refuses() {
    // A transformer ControlNet needs its control blocks.
    assert!(codes(&transformer("")).contains(&"E011".to_string()), "{:?}", codes(&transformer("")));
    // A UNet's follows its levels, not a block count.
    assert!(codes(&unet("; controlnet_blocks 15")).contains(&"E013".to_string()));
    // Module-by-module offload of a ControlNet is not modelled.
    for offload in ["sequential", "blocks", "leaves"] {
        let found = codes(&transformer(&format!("; controlnet_blocks 15; offload {offload}")));
        assert!(found.contains(&"E014".to_string()), "{offload}: {found:?}");
    }
    // `controlnet_blocks` alone does nothing, and says so.
    let alone = transformer("; controlnet_blocks 15").replace("controlnet c; ", "");
    assert_eq!(codes(&alone), ["W005"]);
}
