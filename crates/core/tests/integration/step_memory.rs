//! The settings that shorten how long a training step holds its gradients, logits and
//! activations (torchtune's memory levers), pinned against hand computations.

use vram_core::budget::CheckBudget;

fn outcome(training: &str) -> vram_core::Outcome {
    vram_core::evaluate(&format!(
        "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; micro_batch 2; sequence 1024 tokens; {training} }} }}\ncheck w on h200-sxm"
    ))
}

fn check(training: &str) -> CheckBudget {
    let outcome = outcome(training);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

fn codes(training: &str) -> Vec<String> {
    outcome(training)
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.code.to_string())
        .collect()
}

/// Bytes of the component named `name` on the check's one device, if there is one.
fn component(check: &CheckBudget, name: &str) -> Option<u64> {
    check.devices[0].components.iter().find(|c| c.name == name).map(|c| c.bytes.0)
}

fn bytes(check: &CheckBudget, name: &str) -> u64 {
    component(check, name).unwrap_or_else(|| panic!("no {name:?} component"))
}

/// 2 × 1,024 tokens × 128,256 vocab.
const LOGITS: u64 = 2 * 1024 * 128_256;

#[test]
fn a_chunked_loss_keeps_the_log_softmax_and_one_chunks_upcast() {
    // Forward: bf16 chunks (2 B) + fp32 log-softmax kept (4 B) + one of 8 chunks' fp32 upcast
    // (4/8 B) = 6.5 B; backward: 4 + (2·4 + 2)/8 = 5.25 B. The forward pass is the peak.
    assert_eq!(bytes(&check("loss_chunks 8"), "logits and loss"), LOGITS * 13 / 2);
    // One chunk is the whole sequence at once: 3 × 4 B.
    assert_eq!(bytes(&check("loss_chunks 1"), "logits and loss"), LOGITS * 12);
    // Two chunks: forward 2 + 4 + 2 = 8 B, backward 4 + 10/2 = 9 B: the backward pass peaks.
    assert_eq!(bytes(&check("loss_chunks 2"), "logits and loss"), LOGITS * 9);
}

#[test]
fn a_compiled_loss_keeps_its_16_bit_input() {
    // The 16-bit logits (2 B) and one chunk's 16-bit gradient (2/8 B).
    assert_eq!(bytes(&check("compile true; loss_chunks 8"), "logits and loss"), LOGITS * 9 / 4);
    assert_eq!(bytes(&check("compile true"), "logits and loss"), LOGITS * 4);
}

#[test]
fn a_step_in_the_backward_pass_holds_one_gradient() {
    let after = check("checkpointing full");
    let during = check("checkpointing full; step_in_backward true");
    // The largest tensor is the embedding (and the untied head): 128,256 × 4,096 values, whose
    // fp32 gradient waits for its step (AMP keeps fp32 gradients).
    assert_eq!(bytes(&during, "gradients"), 128_256 * 4096 * 4);
    assert_eq!(bytes(&after, "gradients"), 8_030_261_248 * 4);
    // Each parameter has its own optimizer: no foreach temporaries over the whole model.
    assert!(component(&after, "optimizer step").is_some());
    assert_eq!(component(&during, "optimizer step"), None);
    assert_eq!(bytes(&during, "optimizer state"), bytes(&after, "optimizer state"));
}

#[test]
fn lora_stepped_in_the_backward_pass_holds_its_widest_adapters_gradient() {
    let lora = "method lora { rank 16; targets all }; step_in_backward true";
    // The widest adapted matrices are the MLP's, 4,096 × 14,336: lora_A or lora_B of the down,
    // gate or up projection is 16 × 14,336 fp32 values.
    assert_eq!(bytes(&check(lora), "adapter gradients"), 16 * 14_336 * 4);
}

#[test]
fn offloaded_activations_leave_two_layers_on_the_device() {
    let per_layer = 1024 * 2 * (4 * 4096 + 80 * 128 + 4 * 14_336 + 64) * 2;
    let layer_input = 1024 * 2 * 4096 * 2;
    // Checkpointed: two layers' inputs (one in use, one in transfer) and the recomputed layer.
    let full = check("checkpointing full; offload_activations true");
    assert_eq!(bytes(&full, "activations"), 2 * layer_input + per_layer);
    // Not checkpointed: two layers' stored activations of 32.
    let none = check("offload_activations true");
    assert_eq!(bytes(&none, "activations"), 2 * per_layer);
    assert_eq!(bytes(&check(""), "activations"), 32 * per_layer);
}

#[test]
fn a_step_in_the_backward_pass_refuses_accumulation_and_sharding() {
    assert_eq!(codes("step_in_backward true; gradient_accumulation 4"), ["E014"]);
    assert_eq!(codes("step_in_backward true; sharding zero2"), ["E014"]);
    assert_eq!(codes("step_in_backward true; offload optimizer"), ["E014"]);
    assert!(codes("step_in_backward true; gradient_accumulation 1").is_empty());
    assert_eq!(codes("loss_chunks 0"), ["E007"]);
}
