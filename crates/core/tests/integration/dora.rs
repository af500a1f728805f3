//! DoRA (PEFT `use_dora`) on Llama 3.1 8B, every linear layer at rank 16, pinned against hand
//! computations from PEFT's `DoraLinearLayer`.

use vram_core::budget::CheckBudget;

fn outcome(method: &str, rest: &str) -> vram_core::Outcome {
    vram_core::evaluate(&format!(
        "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; micro_batch 2; sequence 1024 tokens; method lora {{ rank 16; targets all; {method} }}; {rest} }} }}\ncheck w on h200-sxm"
    ))
}

fn check(method: &str, rest: &str) -> CheckBudget {
    let outcome = outcome(method, rest);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

fn component(check: &CheckBudget, name: &str) -> Option<u64> {
    check.devices[0].components.iter().find(|c| c.name == name).map(|c| c.bytes.0)
}

fn bytes(check: &CheckBudget, name: &str) -> u64 {
    component(check, name).unwrap_or_else(|| panic!("no {name:?} component"))
}

/// Output features of one layer's adapted matrices: q 4,096, k and v 1,024, o 4,096, gate and
/// up 14,336, down 4,096.
const OUTPUTS: u64 = 4096 + 1024 + 1024 + 4096 + 14_336 + 14_336 + 4096;
/// Values of one layer's adapted matrices: 2 × 4,096² + 2 × 4,096 × 1,024 + 3 × 4,096 × 14,336.
const VALUES: u64 = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14_336;

#[test]
fn magnitudes_are_trained_next_to_the_adapters() {
    let lora = check("", "");
    let dora = check("dora true", "");
    // One fp32 magnitude per output feature of every adapted matrix, in 32 layers.
    assert_eq!(bytes(&dora, "LoRA adapters") - bytes(&lora, "LoRA adapters"), 32 * OUTPUTS * 4);
    // Their fp32 gradients and AdamW's two fp32 moments.
    let states = |c: &CheckBudget| bytes(c, "adapter optimizer state");
    assert_eq!(states(&dora) - states(&lora), 32 * OUTPUTS * 4 * 2);
}

#[test]
fn each_adapted_matrix_keeps_its_base_and_adapter_outputs() {
    let lora = check("", "");
    let dora = check("dora true", "");
    // Two bf16 output-wide tensors per adapted matrix, in all 32 layers, for 2 × 1,024 tokens.
    let kept = |c: &CheckBudget| bytes(c, "LoRA saved inputs");
    assert_eq!(kept(&dora) - kept(&lora), 32 * 2 * 1024 * OUTPUTS * 2 * 2);
    // Under full checkpointing only the recomputed layer keeps them.
    let lora = check("", "checkpointing full");
    let dora = check("dora true", "checkpointing full");
    assert_eq!(kept(&dora) - kept(&lora), 2 * 1024 * OUTPUTS * 2 * 2);
}

#[test]
fn the_column_norms_rebuild_the_down_projection_several_times() {
    // The down projection, 14,336 in × 4,096 out, with fp32 adapters under bf16 autocast.
    // Building lora_weight: the fp32 identity and its bf16 copy (14,336² × 6 B) and lora_B's
    // bf16 output (× 2 B). Taking the norm: the identity's copy (14,336² × 2 B), lora_weight,
    // the base weight's fp32 copy, the scaled lora_weight and the sum (4 × 4 B each). The two
    // are equal here (14,336 / 4,096 = 3.5 = 14 / 4).
    let (eye, matrix) = (14_336u64 * 14_336, 14_336u64 * 4096);
    let building = eye * 6 + matrix * 2;
    let norming = eye * 2 + matrix * 16;
    assert_eq!(building, norming);
    let dora = check("dora true", "");
    assert_eq!(bytes(&dora, "DoRA column norms (largest matrix)"), norming);
    // bf16 adapters: no copies of the identity or the weight, three bf16 matrices.
    let bf16 = check("dora true; dtype bf16", "");
    let building = eye * 2 + matrix * 2;
    let norming = matrix * 3 * 2;
    assert_eq!(bytes(&bf16, "DoRA column norms (largest matrix)"), building.max(norming));
    assert_eq!(component(&check("", ""), "DoRA column norms (largest matrix)"), None);
}

#[test]
fn dropout_makes_every_layer_keep_its_recomputed_weights() {
    let name = "DoRA recomputed weights (kept)";
    // Without dropout the base layer's output is reused: no recomputed matmul.
    assert_eq!(component(&check("dora true", ""), name), None);
    // Autocast's bf16 copy of each cast weight, every layer.
    let every = check("dora true; dropout 0.05", "");
    assert_eq!(bytes(&every, name), 32 * VALUES * 2);
    let one = check("dora true; dropout 0.05", "checkpointing full");
    assert_eq!(bytes(&one, name), VALUES * 2);
    // bf16 adapters over a bf16 base use the parameter itself.
    assert_eq!(component(&check("dora true; dropout 0.05; dtype bf16", ""), name), None);
}

#[test]
fn a_denoiser_refuses_dora() {
    let outcome = vram_core::evaluate(
        "model unet { params 860 million }\nmodel te { params 123 million }\nmodel ae { params 84 million }\n\
         workload w {\n runtime none\n diffusion { denoiser unet; text_encoders te; vae ae; weights bf16; architecture unet; hidden 320; heads 8; channel_mult 1 2 4 4; layers_per_block 2; cross_attention_dim 768; resolution 512 x 512 }\n training { method lora { rank 4; dora true } }\n}\n\
         check w on a100-sxm4-80gb",
    );
    let errors: Vec<_> = outcome.diagnostics.iter().filter(|d| d.is_error()).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].code.to_string(), "E013");
    assert!(errors[0].message.contains("denoiser"), "{}", errors[0].message);
}
