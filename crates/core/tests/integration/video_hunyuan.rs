//! HunyuanVideo's causal 3D decoder (`video_vae hunyuan`): chunks of five latent frames, each
//! decoded whole with a causal attention mask over its positions, or in tiles.

use vram_core::budget::CheckBudget;

fn pipeline(extra: &str) -> String {
    format!(
        "model dit {{ params 12.8 billion }}\nmodel te {{ params 7.5 billion }}\nmodel ae {{ params 246 million }}\n\
         workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights fp16; \
         denoiser_weights bf16; architecture dit; hidden 3072; ffn 12288; resolution 1280 x 720; \
         cfg false; text_tokens 256 tokens{extra} }} }}\n\
         check w on h100-sxm-80gb"
    )
}

fn decode(extra: &str) -> Option<u64> {
    let outcome = vram_core::evaluate(&pipeline(extra));
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    let check: &CheckBudget = &outcome.budget.checks[0];
    let found =
        check.devices[0].components.iter().find(|c| c.name == "VAE decode peak (causal 3D)");
    found.map(|c| c.bytes.0)
}

fn codes(extra: &str) -> Vec<String> {
    vram_core::evaluate(&pipeline(extra)).diagnostics.iter().map(|d| d.code.to_string()).collect()
}

#[test]
fn the_untiled_decode_builds_a_mask_over_a_chunks_positions() {
    // 129 frames: chunks of 5 latent frames of 90 × 160 latents, 72,000 positions. The mask is
    // filled in fp32 beside the boolean comparison (5 B a pair) and cast to fp16 (2 B) while the
    // fill is live: the decode holds at least 6 B a pair.
    let pairs: u64 = 72_000 * 72_000;
    let whole = decode("; video_frames 129; video_vae hunyuan").expect("the decode is the peak");
    assert!(whole >= 6 * pairs, "{whole}");
    // A chunk never grows past five latent frames: 33 and 17 latent frames decode with the same
    // mask, the longer video holding more decoded chunks (at most 3 × 2 B a pixel of each of
    // its 64 more frames, held in the chunks and again in the joined video, plus the latents).
    let shorter = decode("; video_frames 65; video_vae hunyuan").expect("the decode is the peak");
    assert!(whole > shorter && whole - shorter < 3 * 2 * 1280 * 720 * 64 * 3, "{whole} {shorter}");
}

#[test]
fn tiles_of_256_pixels_by_default() {
    // Tiled, the decode is no longer the peak: the transformer's step is.
    assert_eq!(decode("; video_frames 129; video_vae hunyuan; vae_tiling true"), None);
    // The default tile is the decoder's own 256 × 256 (not an image VAE's 1024): the same budget
    // as the tile written out, and a different one from a 512 tile.
    let budget = |extra: &str| {
        let outcome = vram_core::evaluate(&pipeline(extra));
        serde_json::to_string(&outcome.budget.checks[0].devices[0]).expect("serializable")
    };
    let tiled = "; video_frames 129; video_vae hunyuan; vae_tiling true";
    assert_eq!(budget(tiled), budget(&format!("{tiled}; vae_tile 256 x 256")));
    assert_ne!(budget(tiled), budget(&format!("{tiled}; vae_tile 512 x 512")));
}

#[test]
fn the_hunyuan_decoder_refuses_the_settings_it_does_not_have() {
    let refused = |extra: &str| codes(&format!("; video_frames 129; video_vae hunyuan{extra}"));
    assert!(refused("; vae_cache replaced").contains(&"E014".to_string()));
    assert!(refused("; vae_temporal 8").contains(&"E014".to_string()));
    assert!(refused("; vae_tiling true").is_empty());
    // A video that is not 1 + 4k frames.
    assert!(codes("; video_frames 128; video_vae hunyuan").contains(&"E013".to_string()));
}
