//! Mochi 1's 3D decoder (`video_vae mochi`): every latent frame in one call, pinned by the
//! bounds a hand count gives.

use crate::support::{self, check, component};

fn pipeline(extra: &str) -> String {
    format!(
        "model dit {{ params 10 billion }}\nmodel te {{ params 4.8 billion }}\nmodel ae {{ params 362 million }}\n\
         workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights bf16; \
         architecture dit; hidden 3072; patch_pixels 16; resolution 848 x 480; text_tokens 256 tokens{extra} }} }}\n\
         check w on h100-sxm-80gb"
    )
}

fn decode(extra: &str) -> u64 {
    let check = check(&pipeline(extra));
    component(&check, "VAE decode peak (3D)").expect("a Mochi decode")
}

fn codes(extra: &str) -> Vec<String> {
    support::codes(&pipeline(extra))
}

#[test]
fn a_whole_decode_peaks_at_a_split_convolution_of_the_last_block() {
    // 85 frames are 15 latent frames, decoded to 90 and cut to 85. One tensor of the last block:
    // 128 channels × 90 frames × 480 × 848, 2 B each (9.4 GB).
    let unit: u64 = 128 * 90 * 480 * 848 * 2;
    let whole = decode("; video_frames 85; video_vae mochi");
    // Its convolutions' padded inputs (92 frames of 482 × 850) pass 2^30 elements and are split
    // in five along time: beside the block's input, the ResNet block's input, the SiLU output
    // and the padded input (1.03 units), the four later chunks' copies (81 of the 92 padded
    // frames), the chunks' outputs and their concatenation (a unit each): 6.94 units.
    let padded = 128 * 92 * 482 * 850 * 2;
    let copies = padded / 92 * 81;
    let counted = 3 * unit + padded + copies + 2 * unit;
    assert!(whole >= counted, "{whole} against {counted}");
    assert!(whole < counted + unit / 50, "{whole} against {counted}");
}

#[test]
fn a_tiled_decode_holds_one_tiles_decoder_and_the_tiles_before() {
    // Tiles of 32 latents (256 pixels) every 24: rows of 32, 32 and 12 latents, columns of 32,
    // 32, 32, 32 and 10. A whole tile's last block holds four 128-channel tensors of 90 frames
    // × 256 × 256 beside the padded input (not split: under 2^30 elements), 7.6 GB.
    let tile: u64 = 128 * 90 * 256 * 256 * 2;
    let padded: u64 = 128 * 92 * 258 * 258 * 2;
    let tiled = decode("; video_frames 85; video_vae mochi; vae_tiling true");
    assert!(tiled >= 4 * tile + padded, "{tiled}");
    let whole = decode("; video_frames 85; video_vae mochi");
    assert!(tiled < whole / 5, "{tiled} {whole}");
}

#[test]
fn the_mochi_decoder_takes_six_frames_a_latent_and_refuses_what_it_does_not_model() {
    // 81 frames are 1 + 4 × 20, not a whole number of Mochi's 6-frame latents.
    assert!(codes("; video_frames 81; video_vae mochi").contains(&"E013".to_string()));
    for refused in ["vae_temporal 4", "vae_cache replaced"] {
        let found = codes(&format!("; video_frames 85; video_vae mochi; {refused}"));
        assert!(found.contains(&"E014".to_string()), "{refused}: {found:?}");
    }
}
