//! Wan 2.1's causal 3D decoder (`video_vae wan`): one latent frame at a time, pinned by the
//! bounds a hand count gives.

use vram_core::budget::CheckBudget;

fn pipeline(extra: &str) -> String {
    format!(
        "model dit {{ params 1.4 billion }}\nmodel te {{ params 5.7 billion }}\nmodel ae {{ params 127 million }}\n\
         workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights fp32; \
         denoiser_weights bf16; text_encoder_weights bf16; architecture dit; hidden 1536; ffn 8960; \
         vae_channels 96; resolution 832 x 480; cfg separate; text_tokens 512 tokens{extra} }} }}\n\
         check w on h100-sxm-80gb"
    )
}

fn decode(extra: &str) -> u64 {
    let outcome = vram_core::evaluate(&pipeline(extra));
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    let check: &CheckBudget = &outcome.budget.checks[0];
    let found =
        check.devices[0].components.iter().find(|c| c.name == "VAE decode peak (causal 3D)");
    found.expect("a causal decode").bytes.0
}

fn codes(extra: &str) -> Vec<String> {
    vram_core::evaluate(&pipeline(extra)).diagnostics.iter().map(|d| d.code.to_string()).collect()
}

/// One full-resolution frame of the last up block: 96 channels × 832 × 480 × 4 B.
const FRAME: u64 = 96 * 832 * 480 * 4;

#[test]
fn a_later_chunk_holds_its_four_frames_several_times_over() {
    let wan = decode("; video_frames 81; video_vae wan");
    // At a last-block convolution of a four-frame chunk: the block's input and the SiLU output
    // (4 frames each), the cache clone (2), the concatenation with the previous cache (6) and
    // the padded input (6), beside the seven full-resolution caches (2 frames each).
    assert!(wan >= (4 + 4 + 2 + 6 + 6 + 7 * 2) * FRAME, "{wan}");
    // The decode does not grow with the video but for the frames concatenated so far: 3
    // channels, held twice while joined.
    let shorter = decode("; video_frames 41; video_vae wan");
    assert!(wan - shorter <= 2 * 40 * (FRAME / 96 * 3), "{wan} {shorter}");
    // CogVideoX's decoder over the same video holds its two-frame batches differently.
    assert_ne!(wan, decode("; video_frames 81"));
    // Wan's base channels are 96 unless told.
    let defaulted = pipeline("; video_frames 81; video_vae wan").replace("vae_channels 96; ", "");
    let outcome = vram_core::evaluate(&defaulted);
    let found = outcome.budget.checks[0].devices[0]
        .components
        .iter()
        .find(|c| c.name == "VAE decode peak (causal 3D)")
        .map(|c| c.bytes.0);
    assert_eq!(found, Some(wan));
}

#[test]
fn the_wan_decoder_refuses_the_cogvideox_settings() {
    assert!(
        codes("; video_frames 81; video_vae wan; vae_cache replaced").contains(&"E014".to_string())
    );
    assert!(codes("; video_frames 81; video_vae wan; vae_tiling true").is_empty());
    assert_eq!(codes("; video_vae wan"), ["W005"]);
}

#[test]
fn a_tiled_decode_holds_one_tile_s_chunks_and_the_tiles_before() {
    // 832 × 480 pixels are 104 × 60 latents: tiles of 32 latents (256 pixels) every 24, rows of
    // 32, 32 and 12 latents, columns of 32, 32, 32, 32 and 8. A 256 × 256 tile's last block
    // holds what the untiled decode's does over a far smaller plane, beside the tiles decoded
    // before it (3 channels × 81 frames × 256² × 4 B each, at most fifteen of them).
    let whole = decode("; video_frames 81; video_vae wan");
    let tiled = decode("; video_frames 81; video_vae wan; vae_tiling true");
    assert!(tiled < whole / 2, "{tiled} {whole}");
    let tile_video = 3 * 81 * 256 * 256 * 4;
    assert!(tiled > 14 * tile_video, "{tiled}");
}
