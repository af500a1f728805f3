//! A UNet's attention scores while sampling without a fused kernel (diffusers `AttnProcessor`)
//! and under attention slicing (`enable_attention_slicing`), pinned by hand.

use vram_core::budget::CheckBudget;

fn sd15(attention: &str) -> vram_core::Outcome {
    vram_core::evaluate(&sd15_source(attention))
}

fn check(attention: &str) -> CheckBudget {
    let outcome = sd15(attention);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

fn component(check: &CheckBudget, prefix: &str) -> Option<u64> {
    check.devices[0].components.iter().find(|c| c.name.starts_with(prefix)).map(|c| c.bytes.0)
}

const SCORES: &str = "denoiser attention scores";

#[test]
fn eager_attention_holds_every_heads_scores_and_softmax() {
    // The first level: 64 × 64 = 4,096 positions; 2 (guidance) × 8 heads rows; the scores and
    // their softmax, 2 B each.
    assert_eq!(component(&check("; attention eager"), SCORES), Some(2 * 16 * 4096 * 4096 * 2));
    // A fused kernel materializes none.
    assert_eq!(component(&check(""), SCORES), None);
    assert_eq!(component(&check("; attention fused"), SCORES), None);
}

#[test]
fn slicing_holds_one_slice_of_heads() {
    // Without a VAE in the pipeline the denoising step is the only phase with tensors (the
    // decode at 512², 384 MiB, would otherwise outweigh a slice's scores).
    let check = |attention: &str| {
        let outcome = vram_core::evaluate(&sd15_source(attention).replace("; vae ae", ""));
        assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
        outcome.budget.checks.into_iter().next().expect("one check")
    };
    // "auto": half of the layer's 8 heads at a time.
    let auto = check("; attention sliced");
    assert_eq!(component(&auto, SCORES), Some(2 * 4 * 4096 * 4096 * 2));
    // "max": one head at a time; or a stated count.
    assert_eq!(
        component(&check("; attention sliced; attention_slice max"), SCORES),
        Some(2 * 4096 * 4096 * 2)
    );
    assert_eq!(
        component(&check("; attention sliced; attention_slice 2"), SCORES),
        Some(2 * 2 * 4096 * 4096 * 2)
    );
    // The slice makes the peak smaller than eager attention's.
    let used = |c: &CheckBudget| c.devices[0].used.0;
    assert!(used(&auto) < used(&check("; attention eager")));
}

#[test]
fn unfused_attention_needs_a_unet_and_its_structure() {
    let codes = |outcome: vram_core::Outcome| -> Vec<String> {
        outcome.diagnostics.iter().map(|d| d.code.to_string()).collect()
    };
    // Without the heads the scores cannot be sized.
    let without_heads =
        vram_core::evaluate(&sd15_source("; attention eager").replace("heads 8; ", ""));
    assert!(codes(without_heads).contains(&"E011".to_string()));
    // A slice size without slicing does nothing.
    assert_eq!(codes(sd15("; attention_slice max")), ["W005"]);
}

/// SD 1.5 at 512 × 512 in fp16 with guidance: 8 heads at every level, attention at the first
/// three levels (64², 32² and 16² latent positions).
fn sd15_source(attention: &str) -> String {
    format!(
        "model unet {{ params 860 million }}\nmodel te {{ params 123 million }}\nmodel ae {{ params 84 million }}\n\
         workload w {{ runtime none; diffusion {{ denoiser unet; text_encoders te; vae ae; weights fp16; \
         architecture unet; hidden 320; heads 8; channel_mult 1 2 4 4; layers_per_block 2; \
         cross_attention_dim 768; transformer_layers 1 1 1 0; resolution 512 x 512{attention} }} }}\n\
         check w on t4"
    )
}
