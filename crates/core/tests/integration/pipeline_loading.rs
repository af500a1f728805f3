//! How a pipeline was loaded and prepared, and how it guides: a cast after loading
//! (`loaded_as`), fused q/k/v projections (`fuse_qkv`) and guidance in one batch or two passes
//! (`cfg`), pinned by hand.

use crate::support::{check, component};

/// A DiT pipeline with a T5-style encoder whose feed-forward outputs transformers keeps in fp32
/// under an fp16 load, and `extra` settings in its diffusion block.
fn pipeline(extra: &str) -> String {
    format!(
        "model dit {{ params 2 billion; attention_qkv 300 million }}\n\
         model te {{ params 4 billion; keep_in_fp32 1 billion }}\n\
         workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; weights fp16; \
         architecture dit; resolution 512 x 512; hidden 1536{extra} }} }}\ncheck w on h100-sxm-80gb"
    )
}

fn errors(source: &str) -> Vec<String> {
    let outcome = vram_core::evaluate(source);
    outcome.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.code.to_string()).collect()
}

#[test]
fn a_cast_after_a_bf16_load_keeps_nothing_in_fp32() {
    // Loaded in fp16, the encoder's kept modules stay fp32: 3 B parameters at 2 B, 1 B at 4 B.
    let fp16 = check(&pipeline(""));
    assert_eq!(component(&fp16, "text encoder weights: te"), Some(3_000_000_000 * 2));
    assert_eq!(component(&fp16, "text encoder fp32 layers: te"), Some(1_000_000_000 * 4));
    // Loaded in bf16 and cast with `.to(torch.float16)`: every parameter is fp16.
    let cast = check(&pipeline("; loaded_as bf16"));
    assert_eq!(component(&cast, "text encoder weights: te"), Some(4_000_000_000 * 2));
    assert_eq!(component(&cast, "text encoder fp32 layers: te"), None);
    assert_eq!(errors(&pipeline("; loaded_as nf4")), ["E013"]);
}

#[test]
fn fused_projections_keep_the_originals() {
    // `to_qkv` is a second copy of the 300 M q, k and v parameters, in fp16.
    let fused = check(&pipeline("; fuse_qkv true"));
    assert_eq!(component(&fused, "denoiser fused q/k/v copies: dit"), Some(300_000_000 * 2));
    assert_eq!(component(&check(&pipeline("")), "denoiser fused q/k/v copies: dit"), None);
    // Without the model's q/k/v count there is nothing to copy from.
    let without_count = pipeline("; fuse_qkv true").replace("; attention_qkv 300 million", "");
    assert_eq!(errors(&without_count), ["E011"]);
}

#[test]
fn separate_guidance_passes_hold_one_batch() {
    let step = "denoiser activations (one block)";
    // 512 × 512: 32 × 32 patches + 77 text tokens, 1,536 wide, 12 tensors of 2 B; guidance in
    // one batch doubles it, two passes do not.
    let one = (1024 + 77) * 1536 * 12 * 2;
    assert_eq!(component(&check(&pipeline("; cfg true")), step), Some(2 * one));
    assert_eq!(component(&check(&pipeline("; cfg separate")), step), Some(one));
    assert_eq!(component(&check(&pipeline("; cfg false")), step), Some(one));
    assert_eq!(errors(&pipeline("; cfg twice")), ["E015"]);
}

#[test]
fn a_transformer_s_mlp_width_sizes_its_step() {
    let step = "denoiser activations (one block)";
    // Wan 2.1 1.3B's blocks: 1,536 wide, an MLP of 8,960: the block's input, the residual, the
    // attention's output and the MLP's normalised input, the MLP's input and output, per token
    // of 1,024 patches + 77 text tokens, one pass (`cfg separate`).
    let wide = check(&pipeline("; cfg separate; ffn 8960"));
    assert_eq!(component(&wide, step), Some((1024 + 77) * (4 * 1536 + 2 * 8960) * 2));
    // Without it the MLP is 4 × hidden: 12 × hidden in all.
    let generic = check(&pipeline("; cfg separate"));
    assert_eq!(component(&generic, step), Some((1024 + 77) * 1536 * 12 * 2));
    // A UNet's widths follow its channels.
    let unet = pipeline("; ffn 8960").replace("architecture dit", "architecture unet");
    assert!(errors(&unet).contains(&"E013".to_string()));
}

#[test]
fn a_pipeline_cast_on_the_device_held_its_load_type_first() {
    let layerwise = "; weights bf16; denoiser_weights fp8-layerwise; text_encoder_weights int8";
    let source = |extra: &str| pipeline(extra).replace("weights fp16; ", "");
    // Cast or quantized before the move: the stored types alone.
    let before = check(&source(layerwise));
    assert_eq!(component(&before, "weights as loaded, before the cast"), None);
    // Moved whole in bf16, then cast: 6 B parameters at 2 B were resident at once, which
    // outweighs sampling; the component is what that load held beyond the stored weights.
    let after = check(&source(&format!("{layerwise}; loaded_on_device true")));
    let stored: u64 = after.devices[0]
        .components
        .iter()
        .filter(|c| c.category == vram_core::budget::Category::Persistent)
        .map(|c| c.bytes.0)
        .sum();
    let loaded = component(&after, "weights as loaded, before the cast").expect("a load phase");
    assert_eq!(stored + loaded, 6_000_000_000 * 2);
    // Nothing cast: `loaded_on_device` alone does nothing and says so.
    let outcome = vram_core::evaluate(&pipeline("; loaded_on_device true"));
    assert!(outcome.diagnostics.iter().any(|d| d.code == "W005"));
}
