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
    check.devices[0].components.iter().map(|c| c.name.to_string()).collect()
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
    // Gradients zeroed in place stay a component of their own (freed ones join the step).
    let checks = evaluate(&sd("", "method lora { rank 4 }; zero_grad zeros"));
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
    // A ResNet keeps 3 tensors of its input's channels and 3 of its output's; an attention
    // block 3 of the level's; a frozen transformer layer 21, and with LoRA on q, k, v and o
    // also its two attentions' LayerNorm outputs (23c) and the rank-4 outputs of the six
    // adapters over the positions (24 values). Values per position:
    // - level 0 (c 320): down, ResNets reading 320 and 320: 3 × (640 + 640) = 3840, two layers
    //   2 × 7384, two attention blocks 1920, the downsampler's input 320: 20,848; up, ResNets
    //   reading 640 + 320, 320 + 320, 320 + 320: 3 × (2240 + 960) = 9600, three layers 22,152,
    //   three blocks 2880, the upsampler's input from level 1 (640) and the output norm, SiLU
    //   and conv_out (960): 36,232; 57,080 in all;
    // - level 1 (c 640): down 3 × (960 + 1280) + 2 × 14,744 + 3840 + 640 = 40,688; up
    //   3 × (4160 + 1920) + 3 × 14,744 + 5760 + 1280 = 69,512; 110,200;
    // - level 2 (c 1280): down 3 × (1920 + 2560) + 2 × 29,464 + 7680 + 1280 = 81,328; up
    //   3 × (7040 + 3840) + 3 × 29,464 + 11,520 + 1280 = 133,832; 215,160;
    // - level 3 (c 1280, no attention but the mid block's): four ResNets down and in the mid
    //   block 3 × (5120 + 5120), the mid layer 29,464 and its block 3840: 64,024; three up
    //   3 × (7680 + 3840) = 34,560; 98,584.
    // A frozen base records nothing before its first adapter, in level 0's first transformer
    // layer: not the first ResNet (3 × (320 + 320)), the attention block's GroupNorm (2 × 320)
    // nor the layer's input (320): 2880 less at level 0. Each layer's cross-attention keeps its
    // keys and values over the 77 text tokens: 154c per layer, 16 layers.
    // (`tools/unet-train-peak.py lora 32 32` counts diffusers' own step within 0.2 % of this
    // count at 256² in fp32.)
    let checks = evaluate(&sd("", "method lora { rank 4 }"));
    let per_position: u64 = (57_080 - 2880) * 4096 + 110_200 * 1024 + 215_160 * 256 + 98_584 * 64;
    let text = 154 * (5 * 320 + 5 * 640 + 5 * 1280 + 1280);
    assert_eq!(per_position + text, 398_160_256);
    let expected = 2 * (per_position + text);
    assert_eq!(component(&checks[0], "denoiser activations (UNet)"), expected);
    // The batch multiplies every level.
    let two = evaluate(&sd("; batch 2", "method lora { rank 4 }"));
    assert_eq!(component(&two[0], "denoiser activations (UNet)"), 2 * expected);
}

#[test]
fn unet_checkpointing_keeps_block_inputs_and_recomputes_the_largest_block() {
    // Each ResNet's input (its input channels), each transformer layer's (c), and outside the
    // checkpoints the attention blocks' 3c and the convolutions between blocks, per position:
    // level 0: down 640 + 640 + 1920 + 320 = 3520, up 2240 + 960 + 2880 + 1600 = 7680;
    // level 1: down 960 + 1280 + 3840 + 640, up 4160 + 1920 + 5760 + 1280: 19,840;
    // level 2: down 1920 + 2560 + 7680 + 1280, up 7040 + 3840 + 11,520 + 1280: 37,120;
    // level 3: down 5120 + 1280 + 3840, up 7680: 17,920; before the first adapter, level 0
    // keeps neither its first ResNet's input (320) nor its GroupNorm's (640). The largest block
    // recomputed is a level-0 transformer layer with its adapters: 4096 × 7384 values.
    let checks = evaluate(&sd("", "method lora { rank 4 }; checkpointing full"));
    let inputs = 4096 * (11_200 - 960) + 1024 * 19_840 + 256 * 37_120 + 64 * 17_920;
    let recomputed = 4096 * 7384;
    assert_eq!(component(&checks[0], "denoiser activations (UNet)"), 2 * (inputs + recomputed));
    // `tools/unet-train-peak.py lora 32 32 --checkpointing`: diffusers' step keeps 0.6 % more
    // at 256²; fully trained, 0.6 % more too.
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

/// SDXL's UNet (stabilityai/stable-diffusion-xl-base-1.0 unet/config.json: 320 base channels,
/// levels 1 2 4, two blocks per level, transformer layers 0 2 10, 64-wide heads, a 2048-wide
/// text context) at 1024 × 1024 in fp16, with `pipeline` and `training` fields added.
fn sdxl(pipeline: &str, training: &str) -> String {
    format!(
        "model unet {{ params 2_567.46 million }}\n\
         workload w {{\n runtime none\n diffusion {{ denoiser unet; weights fp16; architecture unet; hidden 320; channel_mult 1 2 4; layers_per_block 2; transformer_layers 0 2 10; head_dim 64; cross_attention_dim 2048; resolution 1024 x 1024{pipeline} }}\n training {{ activations fp16; {training} }}\n}}\n\
         check w on h100-sxm-80gb"
    )
}

#[test]
fn sdxl_lora_adapts_every_transformer_layer() {
    // Attention blocks: 2 down and 3 up per attention level, and the mid block at the deepest.
    // Level 1 (640 ch): 5 blocks × 2 layers = 10; level 2 (1280 ch): 5 × 10 + 10 (mid) = 60;
    // level 0 none: 70 transformer layers, diffusers' 70 BasicTransformerBlocks.
    // Per layer and rank, q and o of the self- and cross-attention 4c, k and v 2c + 2048 + c:
    // 14c + 4096; 10 × (14 × 640 + 4096) + 60 × (14 × 1280 + 4096) = 130,560 + 1,320,960 =
    // 1,451,520; rank 4: 5,806,080 parameters (23.2 MB in fp32).
    let checks = evaluate(&sdxl("", "method lora { rank 4; dtype fp32 }; zero_grad zeros"));
    assert_eq!(component(&checks[0], "LoRA adapters"), 5_806_080 * 4);
    assert_eq!(component(&checks[0], "adapter gradients"), 5_806_080 * 4);
}

#[test]
fn sdxl_activations_count_each_transformer_layer_and_skip_the_first_level() {
    // fp16, batch 1, fused attention; latent 128², levels at 128², 64², 32². A LoRA layer
    // keeps 23c + 24 values (see above). Values per position:
    // Level 0 (320 ch, no attention): down 3 × (640 + 640) + 320 = 4160; up
    // 3 × (2240 + 960) + 640 + 960 = 11,200: 15,360.
    // Level 1 (640 ch): down 3 × (960 + 1280) + 4 layers × 14,744 + 2 blocks × 1920 + 640 =
    // 70,176; up 3 × (4160 + 1920) + 6 × 14,744 + 3 × 1920 + 1280 = 113,744: 183,920.
    // Level 2 (1280 ch, with the mid block): down 3 × (4480 + 5120) + 30 × 29,464 + 3 × 3840 =
    // 924,240; up 3 × (7040 + 3840) + 30 × 29,464 + 3 × 3840 = 928,080: 1,852,320.
    // Before the first adapter (level 1's first layer) nothing is recorded: level 0's down half
    // (4160) and level 1's first ResNet, GroupNorm and layer input (3 × (320 + 640) + 3 × 640 =
    // 4800); the 70 cross-attentions keep 154c of text keys and values each.
    // (`tools/unet-train-peak.py lora 32 32 --sdxl`: diffusers' own step within 1.2 % at 256²,
    // and within 0.2 % with `linear_projection true` below, as SDXL's config.json has it.)
    let checks = evaluate(&sdxl("", "method lora { rank 4 }"));
    let elements = 16_384 * (15_360 - 4160) + 4096 * (183_920 - 4800) + 1024 * 1_852_320;
    let text = 154 * (10 * 640 + 60 * 1280);
    assert_eq!(elements + text, 2_826_764_800);
    assert_eq!(component(&checks[0], "denoiser activations (UNet)"), 2 * (elements + text));
    // SDXL's attention blocks project with linear layers (`use_linear_projection`), which
    // frozen keep nothing: each block keeps its GroupNorm's input alone, 2c fewer (5 blocks
    // at level 1, 6 at level 2), and before the first adapter one tensor fewer goes unrecorded.
    // Trained, a linear layer keeps its input as the convolution did.
    let linear = evaluate(&sdxl("; linear_projection true", "method lora { rank 4 }"));
    let fewer = 4096 * (5 * 2 * 640 - 640) + 1024 * (6 * 2 * 1280);
    assert_eq!(
        component(&checks[0], "denoiser activations (UNet)")
            - component(&linear[0], "denoiser activations (UNet)"),
        2 * fewer
    );
    let trained = |extra| {
        let checks = evaluate(&sdxl(extra, "method full"));
        component(&checks[0], "denoiser activations (UNet)")
    };
    assert_eq!(trained("; linear_projection true"), trained(""));
    // Checkpointing keeps the ResNets' and layers' inputs and what lies outside them: level 0
    // up 3840 (its down half before the first adapter, nothing), level 1 8000 - 1600 (the first
    // ResNet's input and the GroupNorm's, unrecorded) + 15,040, level 2 54,400 + 56,960; and
    // recomputes the largest block: a level-0 up ResNet reading 640 + 320 channels,
    // 3 × (960 + 320) × 16,384 (a level-1 layer is 14,744 × 4096, smaller).
    let checkpointed = evaluate(&sdxl("", "method lora { rank 4 }; checkpointing full"));
    let inputs = 16_384 * 3840 + 4096 * (23_040 - 1600) + 1024 * 111_360;
    let recomputed = 3 * 1280 * 16_384;
    assert_eq!(inputs + recomputed, 327_680_000);
    assert_eq!(
        component(&checkpointed[0], "denoiser activations (UNet)"),
        2 * (inputs + recomputed)
    );
}

#[test]
fn sdxl_eager_attention_has_more_heads_at_deeper_levels() {
    // 64-wide heads: 10 at level 1 (640 ch), 20 at level 2 (1280 ch). Per layer, heads ×
    // queries × (queries + 77 text tokens) probabilities of 6 B (fp32 softmax, fp16 copy).
    let fused = evaluate(&sdxl("", "method lora { rank 4 }"));
    let eager = evaluate(&sdxl("", "method lora { rank 4 }; attention eager"));
    let scores = |heads: u64, p: u64| heads * p * (p + 77) * 6;
    let expected = 10 * scores(10, 4096) + 60 * scores(20, 1024);
    let difference = component(&eager[0], "denoiser activations (UNet)")
        - component(&fused[0], "denoiser activations (UNet)");
    assert_eq!(difference, expected);
    // The first attention differentiated at the largest attention level, level 1 (level 0 has
    // none): two fp32 gradients of 10 heads × 4096 × 4173.
    assert_eq!(
        component(&eager[0], "eager attention backward (softmax gradients)"),
        2 * 10 * 4096 * 4173 * 4
    );
}

#[test]
fn transformer_layers_default_to_the_sd_1_layout() {
    // SD 1.x written out: one layer per attention block at the three upper levels, none at the
    // deepest, whose mid block keeps one; the same budget as the defaults.
    let implicit = evaluate(&sd("", "method lora { rank 4 }; attention eager"));
    let explicit =
        evaluate(&sd("; transformer_layers 1 1 1 0", "method lora { rank 4 }; attention eager"));
    assert_eq!(implicit, explicit);
    // 8 heads at every level are 40-wide heads at 320 channels only: `head_dim 40` gives 16 and
    // 32 heads deeper down, more probabilities.
    let wide = evaluate(
        &sd("; transformer_layers 1 1 1 0; head_dim 40", "method lora { rank 4 }; attention eager")
            .replace("; heads 8", ""),
    )
    .pop()
    .map(|check| check.devices[0].components.clone());
    let sd_8 = component(&implicit[0], "denoiser activations (UNet)");
    let scores = |heads: u64, p: u64| heads * p * (p + 77) * 6;
    let widened = wide
        .and_then(|components| {
            components.into_iter().find(|c| c.name == "denoiser activations (UNet)")
        })
        .map(|c| c.bytes.0);
    // Level 1: 5 layers × 8 more heads; level 2: 5 × 24 more; the mid layer at level 3: 24 more.
    let more = 5 * scores(8, 1024) + 5 * scores(24, 256) + scores(24, 64);
    assert_eq!(widened, Some(sd_8 + more));
    // Without the mid block's transformer layer: its 23 × 1280 + 24 values and its attention
    // block's 3 × 1280 at 64 positions, its text keys and values (154 × 1280), in bf16, and
    // its 8 heads' probabilities.
    let no_mid =
        evaluate(&sd("; mid_transformer_layers 0", "method lora { rank 4 }; attention eager"));
    assert_eq!(
        sd_8 - component(&no_mid[0], "denoiser activations (UNet)"),
        ((23 * 1280 + 24 + 3 * 1280) * 64 + 154 * 1280) * 2 + scores(8, 64)
    );
}

#[test]
fn the_per_level_structure_is_checked_against_channel_mult() {
    let lora = "method lora { rank 4 }";
    // One count per level.
    assert_eq!(
        codes(&sdxl("", lora).replace("transformer_layers 0 2 10", "transformer_layers 2 10")),
        ["E014"]
    );
    // Both a head count and a head width.
    assert_eq!(codes(&sdxl("; heads 20", lora)), ["E014"]);
    // A width that does not divide an attention level's channels (640 at level 1).
    assert_eq!(codes(&sdxl("", lora).replace("head_dim 64", "head_dim 256")), ["E014"]);
    // ... though a level without attention need not be divisible: 320 / 128 is not whole.
    assert!(codes(&sdxl("", lora).replace("head_dim 64", "head_dim 128")).is_empty());
    // Neither: the heads are missing.
    assert_eq!(codes(&sdxl("", lora).replace("; head_dim 64", "")), ["E011"]);
    // A transformer denoiser has no per-level structure.
    assert!(codes(&flux("; head_dim 128", lora)).contains(&"E013".to_string()));
    assert!(codes(&flux("; linear_projection true", lora)).contains(&"E013".to_string()));
    // Sampling does not read the attention blocks' projections.
    let sampled = "model unet { params 2_567.46 million }\n\
                   workload w { runtime none; diffusion { denoiser unet; weights fp16; \
                   architecture unet; hidden 320; resolution 1024 x 1024; \
                   linear_projection true } }\ncheck w on h100-sxm-80gb";
    let warnings: Vec<String> =
        vram_core::evaluate(sampled).diagnostics.iter().map(|d| d.code.to_string()).collect();
    assert_eq!(warnings, ["W005"]);
    assert!(codes(&flux("; transformer_layers 2", lora)).contains(&"E013".to_string()));
    // Counts are whole numbers from 0 to 64.
    assert_eq!(
        codes(&sdxl("", lora).replace("transformer_layers 0 2 10", "transformer_layers 0 2 65")),
        ["E007"]
    );
}

#[test]
fn lora_on_the_feed_forward_adds_its_two_projections_per_transformer_layer() {
    // A UNet transformer layer's GEGLU feed-forward: up c -> 8c (value and gate) and down
    // 4c -> c, (c + 8c) + (4c + c) = 14c per rank; over the layers above,
    // 14 × (5 × 320 + 5 × 640 + 6 × 1280) = 174,720 per rank beside the attention's 199,296.
    let all = evaluate(&sd("", "method lora { rank 4; targets all }"));
    assert_eq!(component(&all[0], "LoRA adapters"), (199_296 + 174_720) * 4 * 4);
    let ff = evaluate(&sd("", "method lora { rank 4; targets up down }"));
    assert_eq!(component(&ff[0], "LoRA adapters"), 174_720 * 4 * 4);
    // A DiT block's GELU feed-forward of 4 × 3072: (3072 + 12288) × 2 per rank.
    let dit = evaluate(&flux("", "method lora { rank 4; targets q k v o up down }"));
    let per_block = 4 * 6144 + 2 * (3072 + 12_288);
    assert_eq!(component(&dit[0], "LoRA adapters"), 57 * 4 * per_block * 4);
    // A denoiser's feed-forward has no gate projection of its own.
    let gate = vram_core::evaluate(&sd("", "method lora { rank 4; targets gate }"));
    assert!(
        gate.diagnostics.iter().any(vram_core::diagnostic::Diagnostic::is_error),
        "{:#?}",
        gate.diagnostics
    );
}

#[test]
fn transformer_denoiser_blocks_keep_what_a_dit_block_keeps_over_patches_and_text() {
    // 512 × 768 pixels: 64 × 96 latents, 32 × 48 = 1536 patches of 2 × 2, and 512 text tokens.
    // Per token per block in bf16 under a frozen base, without a q/k norm: the two norms' fp32
    // inputs 2 × 4h, q and k 2 × 2h, v and the attention output 2 × 2h, 4 B × 24 heads of
    // log-sum-exp, the GELU's input 2 × 4h: 24h + 96 = 73,824 B.
    let tokens = 1536 + 512;
    let per_token = 24 * 3072 + 96;
    let plain = "; qk_norm false";
    let stored = evaluate(&flux(plain, "method lora { rank 4 }"));
    assert_eq!(component(&stored[0], "denoiser activations"), 57 * tokens * per_token);
    // The last block's forward pass holds besides, at its MLP's output projection, the MLP's
    // fp32 input (4h), the product the frozen projection reads (2 × 4h) and its output (2h).
    let last = component(&stored[0], "denoiser last block's forward transients");
    assert_eq!(last, tokens * 14 * 3072);
    // A q/k norm keeps fp32 copies of q and k: 8h more; unsaid, the block has one.
    for normed in ["; qk_norm true", ""] {
        let normed = evaluate(&flux(normed, "method lora { rank 4 }"));
        assert_eq!(
            component(&normed[0], "denoiser activations"),
            57 * tokens * (per_token + 8 * 3072)
        );
    }
    // Checkpointed: each block's input, and the recomputed block with what it holds at its
    // MLP's output projection and the gradient arriving (2h).
    let full = evaluate(&flux(plain, "method lora { rank 4 }; checkpointing full"));
    let expected = 57 * tokens * 3072 * 2 + tokens * (per_token + 16 * 3072);
    assert_eq!(component(&full[0], "denoiser activations"), expected);
    // A trained block keeps besides the MLP's product (8h) and input copy (2h), q, k and v's
    // input copies (6h), the modulated norm outputs (2 × 4h) and the gated outputs (4h), and
    // holds no product it does not keep.
    let trained = evaluate(&flux(plain, "method full; checkpointing full"));
    let expected = 57 * tokens * 3072 * 2 + tokens * (per_token + 28 * 3072 + 8 * 3072);
    assert_eq!(component(&trained[0], "denoiser activations"), expected);
    // Rank 4 on q, k, v and o of 57 blocks: 57 × 4 × 4 × (3072 + 3072).
    assert_eq!(component(&full[0], "LoRA adapters"), 57 * 4 * 4 * 6144 * 4);
}

#[test]
fn single_stream_blocks_keep_one_norm_and_hold_their_concatenation() {
    // FLUX.1's 38 single-stream blocks after its 19 double-stream ones, with q/k norms. A
    // single-stream block keeps one norm's fp32 input (4h) where a double-stream one keeps two,
    // beside q and k with their fp32 copies (12h), v, the attention output (4h), the
    // log-sum-exp (96 B) and the GELU's input (8h): 28h + 96 against 32h + 96.
    let tokens = 1536 + 512;
    let h = 3072;
    let single = "; qk_norm true; single_layers 38";
    let stored = evaluate(&flux(single, "method lora { rank 4 }"));
    assert_eq!(
        component(&stored[0], "denoiser activations"),
        19 * tokens * (32 * h + 96) + 38 * tokens * (28 * h + 96)
    );
    // The last block is a single-stream one: at its output projection it holds the norm's fp32
    // output (4h), the GELU's output (8h), its concatenation with the attention output (10h)
    // and the projection's output (2h).
    let last = component(&stored[0], "denoiser last block's forward transients");
    assert_eq!(last, tokens * 24 * h);
    // Recomputed, the single-stream block holds the most (54h + 96 against 48h + 96).
    let full = evaluate(&flux(single, "method lora { rank 4 }; checkpointing full"));
    assert_eq!(
        component(&full[0], "denoiser activations"),
        57 * tokens * 2 * h + tokens * (54 * h + 96)
    );
    // A single-stream block has no output projection of its own: rank 4 on q, k and v there
    // (3 × 6144 per rank) against q, k, v and o in the double-stream blocks (4 × 6144).
    assert_eq!(component(&full[0], "LoRA adapters"), 4 * (19 * 4 * 6144 + 38 * 3 * 6144) * 4);
    // Its adapters keep three inputs where a double-stream block's keep four: the recomputed
    // block's are three quarters of what every block adapting o would keep.
    let uniform = evaluate(&flux("", "method lora { rank 4 }; checkpointing full"));
    assert_eq!(
        4 * component(&full[0], "denoiser LoRA saved inputs"),
        3 * component(&uniform[0], "denoiser LoRA saved inputs")
    );
    // No more single-stream blocks than blocks; and sampling does not read them.
    assert_eq!(codes(&flux("; single_layers 58", "method lora { rank 4 }")), ["E007"]);
    let sampled = flux("; single_layers 38", "method lora { rank 4 }")
        .lines()
        .filter(|l| !l.contains("training"))
        .collect::<Vec<_>>()
        .join("\n");
    let outcome = vram_core::evaluate(&sampled);
    let found: Vec<&str> = outcome.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(found, ["W005"], "{sampled}");
}

#[test]
fn a_cross_attention_reads_the_text_beside_self_attention_over_the_patches() {
    // The same blocks with a cross-attention over a 4096-wide text: the self-attention sequence
    // is the 1536 patches alone, and each stored block adds 3 × 1536 + 2 × 512 = 5632 values of
    // 3072 in bf16, and its adapters' inputs: q and o over the patches (2 × 1536 × 3072) and k
    // and v over the text (2 × 512 × 4096), 13,631,488 values.
    let cross = "; cross_attention_dim 4096; qk_norm false";
    let per_block = 5632 * 3072 * 2 + 13_631_488 * 2;
    let stored = evaluate(&flux(cross, "method lora { rank 4 }"));
    assert_eq!(component(&stored[0], "denoiser activations"), 57 * 1536 * (24 * 3072 + 96));
    assert_eq!(component(&stored[0], "denoiser cross-attention"), 57 * per_block);
    // Normalized queries and keys add their fp32 copies over the patches and the text.
    let normed = evaluate(&flux("; cross_attention_dim 4096", "method lora { rank 4 }"));
    assert_eq!(
        component(&normed[0], "denoiser cross-attention"),
        57 * (per_block + (1536 + 512) * 3072 * 4)
    );
    // Under full checkpointing only the recomputed block keeps them.
    let full = evaluate(&flux(cross, "method lora { rank 4 }; checkpointing full"));
    assert_eq!(component(&full[0], "denoiser cross-attention"), per_block);
    // Rank 4 on q, k, v and o of both attentions: the self-attention's 4 × 6144 per rank, the
    // cross-attention's q and o 6144 each, k and v 4096 + 3072 each: 51,200 per rank and block.
    assert_eq!(component(&full[0], "LoRA adapters"), 57 * 4 * 51_200 * 4);
    let qv = evaluate(&flux(cross, "method lora { rank 4; targets q v }"));
    assert_eq!(component(&qv[0], "LoRA adapters"), 57 * 4 * (2 * 6144 + 6144 + 7168) * 4);
    // Sampling does not read it: a warning, no error.
    let trained = flux("; cross_attention_dim 4096", "method lora { rank 4 }");
    let sampled =
        trained.lines().filter(|l| !l.contains("training")).collect::<Vec<_>>().join("\n");
    let outcome = vram_core::evaluate(&sampled);
    let found: Vec<&str> = outcome.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(found, ["W005"], "{sampled}");
    // A UNet's level fields still do not describe a transformer.
    assert!(codes(&flux("; channel_mult 1 2", "method lora { rank 4 }")).contains(&"E013".into()));
}

#[test]
fn a_denoiser_s_states_divide_over_the_data_ranks_and_its_optimizer_may_live_on_the_host() {
    // FLUX's 11,901.41 M parameters trained in full on two GPUs in bf16 with an fp32 master copy
    // and AdamW: ZeRO-2 divides the master copy, the moments and the gradients over the two
    // data ranks, and DeepSpeed's two reduce buckets of 5e8 bf16 elements sit beside them.
    let params: u64 = 11_901_410_000;
    let source = |training: &str| {
        format!(
            "model flux {{ params 11_901.41 million }}\n\
             workload w {{\n runtime none\n diffusion {{ denoiser flux; weights bf16; architecture dit; hidden 3072; heads 24; layers 57; resolution 512 x 768; text_tokens 512 tokens }}\n training {{ method full; checkpointing full; {training} }}\n}}\n\
             check w on 2 x h100-sxm-80gb split data 2"
        )
    };
    let whole = evaluate(&source(""));
    let sharded = evaluate(&source("sharding zero2"));
    assert_eq!(component(&whole[0], "master weights"), params * 4);
    assert_eq!(component(&sharded[0], "master weights"), params * 4 / 2);
    assert_eq!(component(&sharded[0], "optimizer state"), params * 8 / 2);
    assert_eq!(component(&sharded[0], "ZeRO gradient buckets (DeepSpeed)"), 2 * 500_000_000 * 2);
    // The optimizer on the host: no master copy and no moments on the device.
    let offloaded = evaluate(&source("sharding zero2; offload optimizer"));
    assert!(names(&offloaded[0]).iter().all(|n| n != "master weights" && n != "optimizer state"));
    // Gathering the denoiser's blocks one at a time needs their sizes, which this model does
    // not declare (tests/integration/denoiser_gather.rs counts a model that does).
    assert_eq!(codes(&source("sharding zero3")), ["E011"]);
    assert_eq!(codes(&source("offload parameters")), ["E011"]);
}

#[test]
fn full_denoiser_fine_tuning_keeps_the_language_model_states() {
    // bf16 weights: fp32 master, fp32 gradients and two fp32 AdamW moments (DOMAIN.md §5.1).
    let checks = evaluate(&sd("", "method full; zero_grad zeros"));
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
fn text_encoders_trained_beside_the_denoiser_keep_their_own_states() {
    // DreamBooth's --train_text_encoder: the 123 M CLIP parameters, bf16 like the pipeline,
    // gain an fp32 master (4 B), fp32 gradients (4 B) and two fp32 moments (8 B).
    let checks = evaluate(&sd("", "method full; zero_grad zeros; train_text_encoders true"));
    let te = 123_000_000;
    assert_eq!(component(&checks[0], "text encoder weights: te"), te * 2);
    assert_eq!(component(&checks[0], "text encoders: master weights"), te * 4);
    assert_eq!(component(&checks[0], "text encoders: gradients"), te * 4);
    assert_eq!(component(&checks[0], "text encoders: optimizer state"), te * 8);
    // The denoiser's own states are unchanged.
    assert_eq!(component(&checks[0], "gradients"), 860_000_000 * 4);
    // With LoRA the encoders' adapters are not modelled: a warning, and no states.
    let lora = vram_core::evaluate(&sd("", "method lora { rank 4 }; train_text_encoders true"));
    let warnings: Vec<&str> = lora.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(warnings, ["W005"]);
    assert!(names(&lora.budget.checks[0]).iter().all(|n| !n.starts_with("text encoders:")));
    // Quantized encoders cannot be trained in full; a language model has no encoders.
    let quantized = sd("; text_encoder_weights int8", "method full; train_text_encoders true");
    assert!(codes(&quantized).contains(&"E013".to_string()));
    let language = "workload w { model llama3.1-8b; runtime none; training { weights bf16; sequence 512 tokens; train_text_encoders true } }\ncheck w on h200-sxm";
    assert!(codes(language).contains(&"E013".to_string()));
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

/// A pipeline whose VAE is kept in fp32 (`weights fp32`, as diffusers' SDXL training scripts
/// do) beside a 16-bit denoiser trained as a checkpointed LoRA; `structure` gives the UNet.
fn fp32_vae(structure: &str, denoiser: &str, batch: u64, training: &str) -> Vec<CheckBudget> {
    evaluate(&format!(
        "model unet {{ params 860 million }}\nmodel ae {{ params 84 million }}\n\
         workload w {{\n runtime none\n diffusion {{ denoiser unet; vae ae; weights fp32; denoiser_weights {denoiser}; architecture unet; {structure}; batch {batch} }}\n training {{ activations {denoiser}; method lora {{ rank 4 }}; {training} }}\n}}\n\
         check w on h100-sxm-80gb"
    ))
}

const SD_UNET: &str = "hidden 320; heads 8; channel_mult 1 2 4 4; layers_per_block 2; cross_attention_dim 768; resolution 512 x 512";
const SDXL_UNET: &str = "hidden 320; channel_mult 1 2 4; layers_per_block 2; transformer_layers 0 2 10; head_dim 64; cross_attention_dim 2048; resolution 1024 x 1024";

const MIB: u64 = 1 << 20;

#[test]
fn the_vae_encode_is_the_step_s_peak_when_it_outweighs_the_denoiser() {
    // The encode's peaks by hand (`vae_encode.rs`'s tests): allocated, the fp32 pixels and six
    // full-resolution tensors of 128 channels (the second ResNet block's convolution with
    // cuDNN's copies, beside the down block's input the encoder holds); reserved, the pixels,
    // conv_in's output and workspace, a SiLU output, two convolution workspaces and a
    // small-pool segment for the moments.
    for (structure, batch, encode, reserved, activations) in [
        // SD 1.x at 512²: 3 + 6 × 128 MiB live, 20 + 128 + 132 + 128 + 2 × 256 + 2 MiB reserved
        // per image; the checkpointed bf16 UNet keeps 2 × 103,153,664 B (counted above).
        (SD_UNET, 1, 771 * MIB, 922 * MIB, 206_307_328),
        (SD_UNET, 2, 1542 * MIB, 1820 * MIB, 2 * 206_307_328),
        // SDXL at 1024²: 12 + 6 × 512 MiB live; 12 + 512 + 524 + 512 + 2 × 1024 + 2 MiB
        // reserved; the checkpointed fp16 UNet keeps 2 × 327,680,000 B (counted above).
        (SDXL_UNET, 1, 3084 * MIB, 3610 * MIB, 655_360_000),
        (SDXL_UNET, 2, 6168 * MIB, 7218 * MIB, 2 * 655_360_000),
    ] {
        let denoiser = if structure == SD_UNET { "bf16" } else { "fp16" };
        let checks = fp32_vae(structure, denoiser, batch, "checkpointing full");
        let device = &checks[0].devices[0];
        assert_eq!(component(&checks[0], "denoiser activations (UNet)"), activations);
        // The encode's tensors are freed before the denoiser's forward: the peak is the larger
        // transient, so the component is what the encode adds beyond the step's.
        assert_eq!(
            component(&checks[0], "VAE encode (beyond the denoiser's step)"),
            encode - activations,
            "batch {batch}"
        );
        // The reserved view keeps the encode's segments beyond its live peak.
        let cache = component(&checks[0], "allocator cache (VAE encode)");
        assert_eq!(cache, reserved - encode, "batch {batch}");
        assert_eq!(device.views.reserved.0 - device.views.allocated.0, cache);
    }
}

#[test]
fn a_denoiser_step_larger_than_the_encode_hides_it() {
    // Without checkpointing, the SD 1.x UNet's eager probabilities alone take gigabytes at 512²:
    // neither the encode (643 MiB live) nor its segments (922 MiB) show.
    let checks = fp32_vae(SD_UNET, "bf16", 1, "attention eager");
    let found = names(&checks[0]);
    assert!(found.iter().all(|n| !n.contains("VAE encode")), "{found:?}");
    let device = &checks[0].devices[0];
    assert_eq!(device.views.reserved, device.views.allocated);
    // Without a VAE in the pipeline (latents computed beforehand) there is no encode.
    let cached = evaluate(&flux("", "method lora { rank 4 }; checkpointing full"));
    assert!(names(&cached[0]).iter().all(|n| !n.contains("VAE encode")));
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
        ("; vae_upcast true", "method lora { rank 4 }", "E013"),
        ("", "method lora { rank 4 }; sequence 77 tokens", "E013"),
        ("", "method lora { rank 4 }; weights bf16", "E013"),
        ("", "method lora { rank 4 }; loss bf16", "E013"),
        ("", "method lora { rank 4; targets gate }", "E015"),
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
