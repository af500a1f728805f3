//! Preference objectives (DPO, ORPO) on Llama 3.1 8B, pinned against hand computations: a
//! pair's chosen and rejected sequences run as one batch, and DPO's reference model adds its
//! weights (a frozen copy) and its pass's logits.

use vram_core::budget::CheckBudget;

fn outcome(method: &str, extra: &str) -> vram_core::Outcome {
    vram_core::evaluate(&format!(
        "workload w {{ model llama3.1-8b; runtime none; training {{ {method}; weights bf16; micro_batch 2; sequence 1024 tokens; checkpointing full; {extra} }} }}\ncheck w on h200-sxm"
    ))
}

fn check(method: &str, extra: &str) -> CheckBudget {
    let outcome = outcome(method, extra);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

fn bytes(check: &CheckBudget, name: &str) -> Option<u64> {
    check.devices[0].components.iter().find(|c| c.name == name).map(|c| c.bytes.0)
}

fn persistent_starting(check: &CheckBudget, prefix: &str) -> u64 {
    check.devices[0]
        .components
        .iter()
        .filter(|c| c.name.starts_with(prefix))
        .map(|c| c.bytes.0)
        .sum()
}

const LORA: &str = "method lora { rank 16; targets all }";
const VOCAB: u64 = 128_256;
const PARAMS: u64 = 8_030_261_248;

#[test]
fn a_pair_runs_twice_the_sequences() {
    let sft = check(LORA, "");
    let orpo = check(LORA, "objective orpo");
    // Full checkpointing keeps each layer's input: 32 layers × 1,024 tokens × 4,096 × 2 B per
    // sequence, plus one recomputed layer; both scale with the sequences.
    for name in ["activations", "LoRA saved inputs", "logits and loss"] {
        let one = bytes(&sft, name).expect(name);
        assert_eq!(bytes(&orpo, name), Some(2 * one), "{name}");
    }
    // The fp32 loss path holds 12 B per logit: 4 sequences × 1,024 tokens × 128,256; under full
    // checkpointing, less the recomputed layer (the activations beyond the 32 layers' inputs),
    // which it never meets.
    let layer = bytes(&orpo, "activations").expect("activations") - 32 * 4 * 1024 * 4096 * 2;
    assert_eq!(bytes(&orpo, "logits and loss"), Some(4 * 1024 * VOCAB * 12 - layer));
    // ORPO has no reference: no reference pass, no second copy.
    assert_eq!(bytes(&orpo, "reference pass: logits (no_grad)"), None);
}

#[test]
fn dpo_with_adapters_runs_its_reference_on_the_base() {
    let dpo = check(LORA, "objective dpo");
    // The reference pass's bf16 logits over both sequences of both pairs.
    assert_eq!(bytes(&dpo, "reference pass: logits (no_grad)"), Some(4 * 1024 * VOCAB * 2));
    // PEFT's base with its adapters off is the reference: no second copy of the weights.
    assert_eq!(persistent_starting(&dpo, "reference model"), 0);
    let precomputed = check(LORA, "objective dpo; reference precomputed");
    assert_eq!(bytes(&precomputed, "reference pass: logits (no_grad)"), None);
    let orpo = check(LORA, "objective orpo");
    assert_eq!(
        precomputed.devices[0].used, orpo.devices[0].used,
        "precomputed log-probabilities leave the pair's own cost"
    );
}

#[test]
fn full_dpo_keeps_a_frozen_copy() {
    let dpo = check("method full; optimizer adamw", "objective dpo");
    // Every parameter again in bf16.
    assert_eq!(persistent_starting(&dpo, "reference model (frozen copy)"), PARAMS * 2);
    // Under ZeRO-3 over 8 GPUs the copy is sharded as the policy is.
    let sharded = vram_core::evaluate(
        "workload w { model llama3.1-8b; runtime none; training { method full; weights bf16; \
         micro_batch 2; sequence 1024 tokens; checkpointing full; sharding zero3; objective dpo } }\n\
         check w on dgx-h100 split data 8",
    );
    let errors: Vec<_> = sharded.diagnostics.iter().filter(|d| d.is_error()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let device = &sharded.budget.checks[0].devices[0];
    let copy: u64 = device
        .components
        .iter()
        .filter(|c| c.name.starts_with("reference model"))
        .map(|c| c.bytes.0)
        .sum();
    assert_eq!(copy, (PARAMS * 2).div_ceil(8));
}

#[test]
fn references_it_cannot_have_are_refused() {
    let codes = |method: &str, extra: &str| -> Vec<String> {
        outcome(method, extra)
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.code.to_string())
            .collect()
    };
    assert_eq!(codes(LORA, "reference copy"), ["E013"]);
    assert_eq!(codes(LORA, "objective orpo; reference precomputed"), ["E013"]);
    assert_eq!(codes("method full", "objective dpo; reference adapters_off"), ["E014"]);
    assert_eq!(codes(LORA, "objective kto"), ["E015"]);
}
