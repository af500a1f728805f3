//! A denoiser of several experts taking turns over the steps (`denoiser_experts`, Wan 2.2's
//! `transformer` and `transformer_2`): a copy of the weights per expert, resident together
//! unless the pipeline offloads its models.

fn pipeline(extra: &str) -> String {
    format!(
        "model dit {{ params 14 billion; largest_module 70 million }}\n\
         model te {{ params 5.7 billion; largest_module 1 billion }}\n\
         model ae {{ params 127 million; largest_module 4 million }}\n\
         workload w {{ runtime none; diffusion {{ denoiser dit; text_encoders te; vae ae; weights bf16; \
         architecture dit; hidden 5120; ffn 13824; resolution 832 x 480; video_frames 81; \
         video_vae wan; cfg separate; text_tokens 512 tokens{extra} }} }}\n\
         check w on h200-sxm"
    )
}

fn used(extra: &str) -> u64 {
    let outcome = vram_core::evaluate(&pipeline(extra));
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks[0].devices[0].used.0
}

fn codes(extra: &str) -> Vec<String> {
    vram_core::evaluate(&pipeline(extra)).diagnostics.iter().map(|d| d.code.to_string()).collect()
}

/// One expert's bf16 weights.
const EXPERT: u64 = 14_000_000_000 * 2;

#[test]
fn two_experts_are_resident_together_without_offload() {
    assert_eq!(used("; denoiser_experts 2") - used(""), EXPERT);
    assert_eq!(used("; denoiser_experts 3") - used(""), 2 * EXPERT);
    assert_eq!(used("; denoiser_experts 1"), used(""));
}

#[test]
fn model_offload_holds_one_expert_at_a_time() {
    // diffusers' model_cpu_offload_seq runs transformer, then transformer_2: one on the device.
    assert_eq!(used("; denoiser_experts 2; offload model"), used("; offload model"));
    // Moved to the device whole before offloading was enabled, both were resident at once.
    let loaded = "; offload model; loaded_on_device true";
    assert_eq!(used(&format!("; denoiser_experts 2{loaded}")) - used(loaded), EXPERT);
    // Sequential offload moves one module at a time, whatever the experts.
    assert_eq!(used("; denoiser_experts 2; offload sequential"), used("; offload sequential"));
}

#[test]
fn experts_are_a_sampling_setting_in_range() {
    assert!(codes("; denoiser_experts 9").contains(&"E007".to_string()));
    assert!(codes("; denoiser_experts 0").contains(&"E007".to_string()));
}
