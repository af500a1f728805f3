//! LTX-Video's 3D decoder (`video_vae ltx`, `ltx-0.9.1`, `ltx-0.9.5`): every latent frame in one
//! call, pinned by the bounds a hand count gives.

use crate::support::{self, check, component};

fn pipeline(extra: &str) -> String {
    format!(
        "model dit {{ params 1.9 billion }}\nmodel te {{ params 4.8 billion }}\nmodel ae {{ params 419 million }}\n\
         workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights bf16; \
         architecture dit; hidden 2048; patch_pixels 32; resolution 768 x 512; text_tokens 128 tokens{extra} }} }}\n\
         check w on h100-sxm-80gb"
    )
}

fn decode(extra: &str) -> u64 {
    let check = check(&pipeline(extra));
    component(&check, "VAE decode peak (3D)").expect("an LTX-Video decode")
}

fn codes(extra: &str) -> Vec<String> {
    support::codes(&pipeline(extra))
}

/// One tensor of the last up block over 121 frames: 128 channels × 121 × (512 / 4) × (768 / 4),
/// 2 B each.
const LAST_BLOCK: u64 = 128 * 121 * 128 * 192 * 2;

#[test]
fn the_decode_peaks_in_a_resnet_block_of_the_last_up_block() {
    let v090 = decode("; video_frames 121; video_vae ltx");
    // A ResNet block's input, its first convolution's output and the second norm's variance:
    // an fp32 copy and its square (two tensors' worth each), six in all, beside the latents.
    let latents = 128 * 16 * 16 * 24 * 2;
    assert!(v090 >= 6 * LAST_BLOCK + latents, "{v090}");
    assert!(v090 < 7 * LAST_BLOCK, "{v090}");
    // The later decoders reach the same last block: 128 channels, the same peak but for the
    // timestep modulation's tensors, which come after the variance's.
    let v095 = decode("; video_frames 121; video_vae ltx-0.9.5");
    assert!(v095.abs_diff(v090) < LAST_BLOCK / 10, "{v090} {v095}");
    // The decode grows with the frames, every frame decoded at once: 161 frames hold a third
    // more than 121.
    let longer = decode("; video_frames 161; video_vae ltx");
    assert!(longer > v090 + v090 / 4, "{v090} {longer}");
}

#[test]
fn a_tiled_decode_holds_one_tile_s_decoder_and_the_tiles_before() {
    // 768 × 512 pixels are 24 × 16 latents: tiles of 16 latents (512 pixels) every 14, so rows
    // of 16 and 2 latents and columns of 16 and 10. The first tile, 512 × 512 pixels, is the
    // largest: its last up block holds six 128-channel tensors of 121 frames × 128 × 128.
    let whole = decode("; video_frames 121; video_vae ltx");
    let tiled = decode("; video_frames 121; video_vae ltx; vae_tiling true");
    let tile_block = 128 * 121 * 128 * 128 * 2;
    assert!(tiled >= 6 * tile_block, "{tiled}");
    assert!(tiled < whole, "{tiled} {whole}");
    // A video no larger than a tile decodes whole, tiling or not.
    let small = pipeline("; video_frames 121; video_vae ltx").replace("768 x 512", "512 x 512");
    let small_tiled = pipeline("; video_frames 121; video_vae ltx; vae_tiling true")
        .replace("768 x 512", "512 x 512");
    let peak = |source: &str| {
        component(&vram_core::evaluate(source).budget.checks[0], "VAE decode peak (3D)")
    };
    assert_eq!(peak(&small), peak(&small_tiled));
}

#[test]
fn the_ltx_decoder_takes_eight_frames_a_latent_and_refuses_what_it_does_not_model() {
    // 125 frames are 1 + 4 × 31, not a whole number of LTX-Video's 8-frame latents.
    assert!(codes("; video_frames 125; video_vae ltx").contains(&"E013".to_string()));
    for refused in ["vae_temporal 8", "vae_cache replaced"] {
        let found = codes(&format!("; video_frames 121; video_vae ltx-0.9.1; {refused}"));
        assert!(found.contains(&"E014".to_string()), "{refused}: {found:?}");
    }
    assert_eq!(codes("; video_vae ltx"), ["W005"]);
}
