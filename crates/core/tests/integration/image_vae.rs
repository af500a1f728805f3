//! Sana's deep-compression autoencoder (`image_vae dc-ae`): 32 × 32 pixels to a latent, its
//! decode replayed, pinned by hand counts.

use crate::support::{check, codes, component};

fn source(extra: &str) -> String {
    format!(
        "model t {{ params 1.6 billion }}\nmodel ae {{ params 312 million }}\n\
         workload w {{ runtime diffusers; diffusion {{ denoiser t; vae ae; weights bf16; \
         architecture dit; hidden 2240; text_tokens 300 tokens; resolution 1024 x 1024; \
         image_vae dc-ae{extra} }} }}\ncheck w on h100-sxm-80gb"
    )
}

#[test]
fn a_dc_ae_decode_peaks_at_a_top_level_norm() {
    // 32 × 32 latents decode to 1024 × 1024: 6.5 tensors of 128 channels at every pixel in
    // bf16, beside them the latents repeated to 1,024 channels and the latents themselves.
    let decode = component(&check(&source("")), "VAE decode peak").expect("a decode");
    let unit = 128 * 1024 * 1024 * 2;
    let repeated = 1024 * 32 * 32 * 2;
    let latents = 32 * 32 * 32 * 2;
    assert_eq!(decode, unit * 13 / 2 + repeated + latents);
}

#[test]
fn its_latents_are_the_transformers_tokens_unpatched() {
    // Without offload the decode is the largest transient, so offload the models to see the
    // step: 32 × 32 tokens + 300 text tokens, twice for guidance, 12 tensors of 2,240 in bf16.
    let step = component(&check(&source("; offload model")), "denoiser activations (one block)");
    assert_eq!(step, Some(2 * (32 * 32 + 300) * 2240 * 12 * 2));
}

#[test]
fn a_tiled_dc_ae_decode_holds_a_tile_and_the_tiles_before() {
    // A narrow denoiser, so that the decode stays the largest transient at 4096².
    let at_4k = |extra: &str| {
        source(extra).replace("1024 x 1024", "4096 x 4096").replace("hidden 2240", "hidden 64")
    };
    let whole = component(&check(&at_4k("")), "VAE decode peak");
    let tiled = component(&check(&at_4k("; vae_tiling true")), "VAE decode peak");
    // A 512 × 512 tile holds 6.5 tensors of 128 channels of its own pixels at its norm.
    let tile = 128 * 512 * 512 * 2;
    let (whole, tiled) = (whole.expect("whole"), tiled.expect("tiled"));
    assert!(tiled >= tile * 13 / 2 && tiled < whole / 8, "{tiled} {whole}");
}

#[test]
fn what_a_dc_ae_refuses() {
    let video = source("; video_frames 49");
    assert!(codes(&video).contains(&"E014".to_string()), "{:?}", codes(&video));
    let trained = "model t { params 1.6 billion }\nmodel ae { params 312 million }\n\
        workload w { runtime pytorch; diffusion { denoiser t; vae ae; denoiser_weights bf16; \
        architecture dit; hidden 2240; layers 20; resolution 1024 x 1024; image_vae dc-ae }; \
        training { method full; optimizer adamw; checkpointing full } }\ncheck w on h100-sxm-80gb";
    assert!(codes(trained).contains(&"E013".to_string()), "{:?}", codes(trained));
    assert!(codes(&source("").replace("dc-ae", "dc")).contains(&"E015".to_string()));
}
