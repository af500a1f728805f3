//! GaLore (`galore_torch`) on Llama 3.1 8B at rank 128, pinned against hand computations.

use vram_core::budget::CheckBudget;

fn outcome(extra: &str) -> vram_core::Outcome {
    vram_core::evaluate(&format!(
        "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; master none; gradients bf16; micro_batch 1; sequence 1024 tokens; checkpointing full; {extra} }} }}\ncheck w on h200-sxm"
    ))
}

fn check(extra: &str) -> CheckBudget {
    let outcome = outcome(extra);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

fn bytes(check: &CheckBudget, name: &str) -> u64 {
    let found = check.devices[0].components.iter().find(|c| c.name == name);
    found.unwrap_or_else(|| panic!("no {name:?} component")).bytes.0
}

/// Llama 3.1 8B's parameters, and those of its 32 layers' seven matrices each:
/// 2 × 4,096² + 2 × 4,096 × 1,024 + 3 × 4,096 × 14,336.
const PARAMS: u64 = 8_030_261_248;
const MATRICES: u64 = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14_336);

#[test]
fn projected_matrices_keep_rank_wide_moments_and_projectors() {
    let galore = check("galore_rank 128");
    // Per layer the projected gradients are 128 × the larger side: q, k, v, o 4,096; gate, up
    // and down 14,336. The other parameters (embedding, head, norms) keep full moments.
    let projected = 32 * 128 * (4 * 4096 + 3 * 14_336);
    assert_eq!(bytes(&galore, "optimizer state"), (PARAMS - MATRICES + projected) * 2 * 2);
    // Projectors are 128 × the smaller side: q, o, gate, up, down 4,096; k, v 1,024; in bf16.
    let projectors = 32 * 128 * (5 * 4096 + 2 * 1024);
    assert_eq!(bytes(&galore, "GaLore projectors"), projectors * 2);
    // Plain AdamW keeps two bf16 moments for every parameter.
    assert_eq!(bytes(&check(""), "optimizer state"), PARAMS * 2 * 2);
}

#[test]
fn the_step_holds_one_matrix_s_svd() {
    // The loop frees the bf16 gradients after each step, so they and the step's temporaries
    // come after the backward pass's intermediates: the SVD of a 14,336 × 4,096 gradient, its
    // fp32 copy, U (14,336 × 4,096) and Vh (4,096 × 4,096), all fp32 (one matrix at a time:
    // no whole-model foreach temporaries).
    let galore = check("galore_rank 128");
    let svd: u64 = (14_336 * 4096 + 14_336 * 4096 + 4096 * 4096) * 4;
    let intermediates: u64 = galore.devices[0]
        .components
        .iter()
        .filter(|c| c.category == vram_core::budget::Category::Intermediate)
        .filter(|c| c.name != "gradients and optimizer step")
        .map(|c| c.bytes.0)
        .sum();
    let step = bytes(&galore, "gradients and optimizer step");
    assert_eq!(step, PARAMS * 2 + svd - intermediates);
}

#[test]
fn galore_refuses_what_it_cannot_run_with() {
    let codes = |extra: &str| -> Vec<String> {
        outcome(extra)
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.code.to_string())
            .collect()
    };
    assert_eq!(codes("galore_rank 128; method lora { rank 16 }"), ["E014"]);
    assert_eq!(codes("galore_rank 128; optimizer sgd"), ["E014"]);
    assert_eq!(codes("galore_rank 128; offload optimizer"), ["E014"]);
}
