//! Training a diffusion denoiser: its structure-derived adapters and activations pinned to hand
//! computations, the training state shared with language models, and the diagnostics for
//! settings a trained pipeline cannot have.

use vram_core::budget::CheckBudget;

fn evaluate(source: &str) -> Vec<CheckBudget> {
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks
}

fn component(check: &CheckBudget, name: &str) -> u64 {
    let components = &check.devices[0].components;
    components
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no component {name:?} in {components:#?}"))
        .bytes
        .0
}

fn names(check: &CheckBudget) -> Vec<String> {
    check.devices[0].components.iter().map(|c| c.name.clone()).collect()
}

/// An SD 1.x pipeline (UNet of 320 base channels, levels 1 2 4 4, two blocks per level, CLIP-L
/// context of 768) at 512 × 512, with `pipeline` and `training` fields added.
fn sd(pipeline: &str, training: &str) -> String {
    format!(
        "model unet {{ params 860 million }}\nmodel te {{ params 123 million }}\nmodel ae {{ params 84 million }}\n\
         workload w {{\n runtime none\n diffusion {{ denoiser unet; text_encoders te; vae ae; weights bf16; architecture unet; hidden 320; heads 8; channel_mult 1 2 4 4; layers_per_block 2; cross_attention_dim 768; resolution 512 x 512{pipeline} }}\n training {{ {training} }}\n}}\n\
         check w on a100-sxm4-80gb"
    )
}

/// FLUX.1-dev's transformer (57 blocks of 3072, 24 heads) at 512 × 768 with 512 text tokens.
fn flux(pipeline: &str, training: &str) -> String {
    format!(
        "model flux {{ params 11_901.41 million }}\n\
         workload w {{\n runtime none\n diffusion {{ denoiser flux; weights bf16; architecture dit; hidden 3072; heads 24; layers 57; resolution 512 x 768; text_tokens 512 tokens{pipeline} }}\n training {{ {training} }}\n}}\n\
         check w on h100-sxm-80gb"
    )
}

#[test]
fn sd_unet_lora_rank_4_on_every_attention_projection() {
    // Per transformer block of c channels: self-attention q, k, v, o of c × c (2c each) and
    // cross-attention q, o (2c each) and k, v reading 768 (768 + c each): 14c + 1536 per rank.
    // Five blocks at 320, five at 640, five at 1280 and the mid block's one at 1280:
    // 5 × 6016 + 5 × 10496 + 6 × 19456 = 199,296 per rank; rank 4: 797,184 (computed by hand
    // from the layout above).
    let checks = evaluate(&sd("", "method lora { rank 4 }"));
    assert_eq!(component(&checks[0], "LoRA adapters"), 797_184 * 4);
    assert_eq!(component(&checks[0], "adapter gradients"), 797_184 * 4);
    assert_eq!(component(&checks[0], "adapter optimizer state"), 797_184 * 8);
    // Only the query and value: q (2c + 2c) and v (2c + 768 + c) = 7c + 768 per rank.
    let qv = evaluate(&sd("", "method lora { rank 16; targets q v }"));
    let per_rank = 5 * (7 * 320 + 768) + 5 * (7 * 640 + 768) + 6 * (7 * 1280 + 768);
    assert_eq!(component(&qv[0], "LoRA adapters"), 16 * per_rank * 4);
}

#[test]
fn unet_activations_are_every_block_s_tensors_per_level() {
    // Levels at 64², 32², 16² and 8² latent positions with 320, 640, 1280 and 1280 channels.
    // Attention levels: 2 ResNets down (6 tensors), 3 up (9) and 5 transformer blocks (31):
    // 194 tensors; the deepest: 2 down and 2 mid ResNets, 3 up, the mid transformer: 82.
    let checks = evaluate(&sd("", "method lora { rank 4 }"));
    let expected = 2 * (4096 * 320 * 194 + 1024 * 640 * 194 + 256 * 1280 * 194 + 64 * 1280 * 82);
    assert_eq!(component(&checks[0], "denoiser activations (UNet)"), expected);
    // The batch multiplies every level.
    let two = evaluate(&sd("; batch 2", "method lora { rank 4 }"));
    assert_eq!(component(&two[0], "denoiser activations (UNet)"), 2 * expected);
}

#[test]
fn unet_checkpointing_keeps_block_inputs_and_recomputes_the_largest_block() {
    // Inputs: 10 blocks per attention level, 8 at the deepest; the largest block is a level-0
    // transformer block (4096 × 320 × 31 elements).
    let checks = evaluate(&sd("", "method lora { rank 4 }; checkpointing full"));
    let inputs = 4096 * 320 * 10 + 1024 * 640 * 10 + 256 * 1280 * 10 + 64 * 1280 * 8;
    let recomputed = 4096 * 320 * 31;
    assert_eq!(component(&checks[0], "denoiser activations (UNet)"), 2 * (inputs + recomputed));
}

#[test]
fn eager_unet_attention_keeps_its_probabilities() {
    // Per transformer block: 8 heads × 4096 queries × (4096 + 77) keys at level 0, in fp32
    // softmax plus its bf16 copy (6 B), five blocks; the same at the smaller levels.
    let fused = evaluate(&sd("", "method lora { rank 4 }"));
    let eager = evaluate(&sd("", "method lora { rank 4 }; attention eager"));
    let scores = |p: u64, blocks: u64| blocks * 8 * p * (p + 77) * 6;
    let expected = scores(4096, 5) + scores(1024, 5) + scores(256, 5) + scores(64, 1);
    let difference = component(&eager[0], "denoiser activations (UNet)")
        - component(&fused[0], "denoiser activations (UNet)");
    assert_eq!(difference, expected);
    // Differentiating the first level-0 attention holds two fp32 score-sized gradients.
    assert_eq!(
        component(&eager[0], "eager attention backward (softmax gradients)"),
        2 * 8 * 4096 * (4096 + 77) * 4
    );
    assert!(names(&fused[0]).iter().all(|n| !n.starts_with("eager attention backward")));
}

#[test]
fn transformer_denoiser_blocks_are_language_model_layers_over_patches_and_text() {
    // 512 × 768 pixels: 64 × 96 latents, 32 × 48 = 1536 patches of 2 × 2, and 512 text tokens.
    // Per token per block: 4h (norms, residual) + 4h (q, k, v, attention output) + 2 × 4h
    // (GELU MLP input and activation) + 4 B × 24 heads of softmax statistics / 2 B = 49,200.
    let tokens = 1536 + 512;
    let full = evaluate(&flux("", "method lora { rank 4 }; checkpointing full"));
    let expected = 57 * tokens * 3072 * 2 + tokens * 49_200 * 2;
    assert_eq!(component(&full[0], "denoiser activations"), expected);
    let stored = evaluate(&flux("", "method lora { rank 4 }"));
    assert_eq!(component(&stored[0], "denoiser activations"), 57 * tokens * 49_200 * 2);
    // Rank 4 on q, k, v and o of 57 blocks: 57 × 4 × 4 × (3072 + 3072).
    assert_eq!(component(&full[0], "LoRA adapters"), 57 * 4 * 4 * 6144 * 4);
}

#[test]
fn full_denoiser_fine_tuning_keeps_the_language_model_states() {
    // bf16 weights: fp32 master, fp32 gradients and two fp32 AdamW moments (DOMAIN.md §5.1).
    let checks = evaluate(&sd("", "method full"));
    let params = 860_000_000;
    assert_eq!(component(&checks[0], "denoiser weights: unet"), params * 2);
    assert_eq!(component(&checks[0], "master weights"), params * 4);
    assert_eq!(component(&checks[0], "gradients"), params * 4);
    assert_eq!(component(&checks[0], "optimizer state"), params * 8);
    // The frozen models stay resident in the pipeline's precision.
    assert_eq!(component(&checks[0], "frozen text encoder weights: te"), 123_000_000 * 2);
    assert_eq!(component(&checks[0], "frozen VAE weights: ae"), 84_000_000 * 2);
}

#[test]
fn quantized_denoiser_with_8_bit_adam_and_no_encoders_loaded() {
    let checks = evaluate(&flux(
        "; denoiser_weights nf4",
        "method lora { rank 4 }; optimizer adamw-8bit; checkpointing full",
    ));
    let found = names(&checks[0]);
    assert!(found.iter().all(|n| !n.contains("text encoder") && !n.contains("VAE")), "{found:?}");
    assert_eq!(
        component(&checks[0], "frozen denoiser weights: flux"),
        // NF4: 4 bits and an fp32 absmax per 64 weights, 0.5625 B.
        11_901_410_000 * 9 / 16
    );
    // 8-bit AdamW: two 1-byte states and an fp32 absmax per 256 each.
    let adapters: u64 = 57 * 4 * 4 * 6144;
    assert_eq!(component(&checks[0], "adapter optimizer state"), adapters * 2 * 260 / 256);
}

/// The error codes `source` produces.
fn codes(source: &str) -> Vec<String> {
    let outcome = vram_core::evaluate(source);
    outcome.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.code.to_string()).collect()
}

#[test]
fn settings_a_trained_pipeline_cannot_have_are_diagnostics() {
    for (pipeline, training, code) in [
        ("; cfg true", "method lora { rank 4 }", "E013"),
        ("; vae_tiling true", "method lora { rank 4 }", "E013"),
        ("", "method lora { rank 4 }; sequence 77 tokens", "E013"),
        ("", "method lora { rank 4 }; weights bf16", "E013"),
        ("", "method lora { rank 4 }; loss bf16", "E013"),
        ("", "method lora { rank 4; targets down }", "E015"),
        ("; layers 12", "method lora { rank 4 }", "E013"),
        ("", "method lora { rank 4; modules_to_save head }", "E013"),
    ] {
        let found = codes(&sd(pipeline, training));
        assert!(found.contains(&code.to_string()), "{pipeline} {training}: {found:?}");
    }
    // The block structure is required for training, not for sampling.
    let without = sd("", "method lora { rank 4 }").replace("; heads 8", "");
    assert!(codes(&without).contains(&"E011".to_string()));
    // The trained model is the denoiser, not a workload `model`.
    let with_model =
        sd("", "method lora { rank 4 }").replace(" runtime none", " runtime none\n model unet");
    assert!(codes(&with_model).contains(&"E013".to_string()));
    // A GGUF mix samples, but cannot be trained.
    let gguf = flux("; denoiser_weights q4_1", "method lora { rank 4 }");
    assert!(codes(&gguf).contains(&"E013".to_string()));
    let sampled = gguf.replace(" training { method lora { rank 4 } }\n", "");
    assert!(!sampled.contains("training"));
    assert!(codes(&sampled).is_empty(), "{:?}", codes(&sampled));
    // Full fine-tuning of a 4-bit denoiser.
    assert!(codes(&flux("; denoiser_weights nf4", "method full")).contains(&"E013".to_string()));
}

#[test]
fn the_largest_batch_of_a_trained_pipeline_is_its_diffusion_batch() {
    // `find max batch` searches the diffusion batch; a trained pipeline has no sequence.
    let lora = sd("", "method lora { rank 4 }").replace("a100-sxm4-80gb", "rtx-4090");
    let with_context = format!("{lora}\nfind max context for w on rtx-4090");
    assert_eq!(codes(&with_context).len(), 1, "{:?}", codes(&with_context));
    let outcome = vram_core::evaluate(&format!("{lora}\nfind max batch for w on rtx-4090"));
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    let found = outcome.budget.queries[0].value.expect("a batch fits");
    // Checked independently: the file written with that batch fits, one more does not.
    let fits = |batch: u64| {
        let checks = evaluate(&lora.replace("512 x 512", &format!("512 x 512; batch {batch}")));
        matches!(checks[0].verdict, vram_core::budget::Verdict::Fits { .. })
    };
    assert!(found > 1 && fits(found) && !fits(found + 1), "{found}");
}
