//! A transformer denoiser's tokens per latent patch (`patch_pixels`, `patch_frames`), pinned by
//! hand.

use vram_core::budget::CheckBudget;

/// A 4,096-wide DiT on 704 × 512 × 161 frames under a VAE of temporal factor 8, 256 text
/// tokens, with `extra` settings.
fn check(extra: &str) -> CheckBudget {
    let outcome = vram_core::evaluate(&format!(
        "model dit {{ params 13 billion }}\n\
         workload w {{ runtime none; diffusion {{ denoiser dit; weights bf16; architecture dit; \
         hidden 4096; vae_temporal 8; resolution 704 x 512; video_frames 161; cfg false; \
         text_tokens 256 tokens{extra} }} }}\ncheck w on h100-sxm-80gb"
    ));
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

fn step(check: &CheckBudget) -> u64 {
    let name = "denoiser activations (one block)";
    let found = check.devices[0].components.iter().find(|c| c.name == name);
    found.unwrap_or_else(|| panic!("no {name:?}")).bytes.0
}

#[test]
fn tokens_cover_patch_pixels_on_a_side() {
    // 161 frames are 21 latent frames. LTX-Video's VAE makes one latent of 32 × 32 pixels and
    // the transformer takes it unpatched: 22 × 16 × 21 = 7,392 tokens, + 256 text tokens,
    // 12 tensors of 4,096 bf16 values each (4 of the hidden width, the MLP's two of 4×).
    assert_eq!(step(&check("; patch_pixels 32")), (22 * 16 * 21 + 256) * 4096 * 2 * 12);
    // The default, an 8× VAE under 2 × 2 patches: 44 × 32 × 21 tokens.
    assert_eq!(step(&check("")), (44 * 32 * 21 + 256) * 4096 * 2 * 12);
    let outcome = vram_core::evaluate(
        "model dit { params 1 billion }\nworkload w { runtime none; diffusion { denoiser dit; weights bf16; architecture dit; hidden 1024; resolution 512 x 512; patch_pixels 12 } }\ncheck w on h100-sxm-80gb",
    );
    let codes: Vec<String> =
        outcome.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.code.to_string()).collect();
    assert_eq!(codes, ["E007"]);
}

#[test]
fn temporal_patches_span_latent_frames_padded_to_a_whole_patch() {
    // CogVideoX 1.5 patches two latent frames deep: the 21 latent frames pad to 22, 11 deep,
    // each 44 × 32 on a side: 44 × 32 × 11 tokens, + 256 text tokens.
    assert_eq!(step(&check("; patch_frames 2")), (44 * 32 * 11 + 256) * 4096 * 2 * 12);
    // A UNet has no patches: the setting says it does nothing there.
    let outcome = vram_core::evaluate(
        "model unet { params 1 billion }\nworkload w { runtime none; diffusion { denoiser unet; weights fp16; architecture unet; hidden 320; resolution 512 x 512; patch_frames 2 } }\ncheck w on h100-sxm-80gb",
    );
    let codes: Vec<String> = outcome.diagnostics.iter().map(|d| d.code.to_string()).collect();
    assert_eq!(codes, ["W005"]);
}
