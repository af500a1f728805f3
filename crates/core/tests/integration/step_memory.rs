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

/// The trained head (full fine-tuning) run in chunks: one chunk's weight-gradient contribution
/// in the gradients' type (fp32 beside an fp32 master copy, the default), 128,256 × 4,096 × 4 B,
/// beside the loss.
const HEAD: u64 = 128_256 * 4096 * 4;

#[test]
fn a_chunked_loss_keeps_the_log_softmax_and_one_chunks_upcast() {
    // Forward: bf16 chunks (2 B) + fp32 log-softmax kept (4 B) + one of 8 chunks' fp32 upcast
    // (4/8 B) = 6.5 B; backward: 4 + (2·4 + 2)/8 = 5.25 B. The forward pass is the peak.
    assert_eq!(bytes(&check("loss_chunks 8"), "logits and loss"), LOGITS * 13 / 2 + HEAD);
    // One chunk is the whole sequence at once: 3 × 4 B.
    assert_eq!(bytes(&check("loss_chunks 1"), "logits and loss"), LOGITS * 12);
    // Two chunks: forward 2 + 4 + 2 = 8 B, backward 4 + 10/2 = 9 B: the backward pass peaks.
    assert_eq!(bytes(&check("loss_chunks 2"), "logits and loss"), LOGITS * 9 + HEAD);
}

#[test]
fn a_compiled_loss_keeps_its_16_bit_input() {
    // The 16-bit logits (2 B) and one chunk's 16-bit gradient (2/8 B).
    assert_eq!(
        bytes(&check("compile true; loss_chunks 8"), "logits and loss"),
        LOGITS * 9 / 4 + HEAD
    );
    // Unchunked, the model upcasts the logits (torchtune's `.float()`): the compiled loss keeps
    // the fp32 logits and their fp32 gradient.
    assert_eq!(bytes(&check("compile true"), "logits and loss"), LOGITS * 8);
    assert_eq!(bytes(&check("compile true; loss bf16"), "logits and loss"), LOGITS * 4);
}

#[test]
fn a_fused_loss_keeps_the_16_bit_logits_and_overwrites_them() {
    // Unsloth's kernel: the bf16 logits (2 B), their gradient written over them.
    assert_eq!(bytes(&check("fused_loss logits"), "logits and loss"), LOGITS * 2);
    // Whatever precision the unfused loss would run in.
    assert_eq!(bytes(&check("fused_loss logits; loss fp32"), "logits and loss"), LOGITS * 2);
    // The head fused with the loss: one chunk of about 2 × 1,024 tokens × 4,096 values, bf16
    // and its fp32 upcast; the whole logits never exist.
    let linear = check("fused_loss linear");
    assert_eq!(bytes(&linear, "logits and loss (one fused chunk)"), 2 * 1024 * 4096 * 6);
    assert_eq!(component(&linear, "logits and loss"), None);
    // Both run their own kernels over the sequence: chunks contradict them.
    assert_eq!(codes("fused_loss logits; loss_chunks 8"), ["E014"]);
    assert_eq!(codes("fused_loss linear; loss_chunks 8"), ["E014"]);
}

#[test]
fn a_step_in_the_backward_pass_holds_one_gradient() {
    let after = check("checkpointing full; zero_grad zeros");
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
    // Per token: the layer's elements, softmax statistics and the two eager RMSNorms' fp32
    // input copies and normalized tensors (4·4096; formulas.rs pins each).
    let per_layer = 1024 * 2 * (4 * 4096 + 80 * 128 + 4 * 14_336 + 64 + 4 * 4096) * 2;
    let layer_input = 1024 * 2 * 4096 * 2;
    // Checkpointed: two layers' inputs (one in use, one in transfer) and the recomputed layer,
    // with what its forward pass holds beside (residual, output projection's output, the
    // gradient arriving: 3h).
    let full = check("checkpointing full; offload_activations true");
    let transient = 3 * layer_input;
    assert_eq!(bytes(&full, "activations"), 2 * layer_input + per_layer + transient);
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

/// Llama 3.1 8B's parameters (catalog, published count).
const PARAMS: u64 = 8_030_261_248;

/// What the forward and backward passes hold: the intermediates but the step's own.
fn intermediates(check: &CheckBudget) -> u64 {
    check.devices[0]
        .components
        .iter()
        .filter(|c| c.category == vram_core::budget::Category::Intermediate)
        .filter(|c| !c.name.ends_with("optimizer step") && c.name != "gradients (freed each step)")
        .map(|c| c.bytes.0)
        .sum()
}

#[test]
fn gradients_freed_after_each_step_share_memory_with_the_activations() {
    // bf16 weights under AMP keep fp32 gradients: 4 B per parameter. A per-tensor optimizer
    // loop (`foreach false`) adds no temporaries over the whole model.
    let gradients = PARAMS * 4;
    let freed = check("foreach false");
    let activations = intermediates(&freed);
    assert!(activations < gradients);
    // The backward pass frees activations as it makes gradients: the step's phase holds the
    // gradients, beyond what the forward and backward passes held.
    assert_eq!(bytes(&freed, "gradients (freed each step)"), gradients - activations);
    assert_eq!(component(&freed, "gradients"), None);
    // Zeroed in place, they are held through the forward pass too: the two add up.
    let zeroed = check("foreach false; zero_grad zeros");
    assert_eq!(bytes(&zeroed, "gradients"), gradients);
    assert_eq!(intermediates(&zeroed), activations);
    let allocated = |c: &CheckBudget| c.devices[0].views.allocated.0;
    assert_eq!(allocated(&zeroed) - allocated(&freed), activations);
    // With foreach AdamW's fp32 square root of the second moment (4 B per parameter) in the
    // step's phase too.
    let foreach = check("");
    let name = "gradients and optimizer step";
    assert_eq!(bytes(&foreach, name), gradients + PARAMS * 4 - activations);
    assert_eq!(component(&foreach, "optimizer step"), None);
}

#[test]
fn the_pytorch_release_sets_the_foreach_steps_intermediates() {
    let gradients = PARAMS * 4;
    let activations = intermediates(&check("foreach false"));
    let step = |training: &str| bytes(&check(training), "gradients and optimizer step");
    // PyTorch 2.0's foreach AdamW holds the fp32 square root and the denominator built from it
    // (pytorch/pytorch#97712): 8 B per parameter; 2.1 adds eps in place: 4 B.
    assert_eq!(step("torch \"2.0\""), gradients + PARAMS * 8 - activations);
    assert_eq!(step("torch \"2.1.2\""), gradients + PARAMS * 4 - activations);
    assert_eq!(step("torch \"2.10\""), gradients + PARAMS * 4 - activations);
    // 1.x looped over the tensors (no step intermediates) and zeroed the gradients in place,
    // so they are held through the forward pass, as with `foreach false; zero_grad zeros`.
    let old = check("torch \"1.13.1\"; attention fused");
    assert_eq!(bytes(&old, "gradients"), gradients);
    assert_eq!(component(&old, "gradients and optimizer step"), None);
    let allocated = |c: &CheckBudget| c.devices[0].views.allocated.0;
    assert_eq!(allocated(&old), allocated(&check("foreach false; zero_grad zeros")));
    // A `zero_grad` line wins over the release's default.
    let freed = check("torch \"1.13\"; zero_grad set_to_none; attention fused");
    assert_eq!(bytes(&freed, "gradients (freed each step)"), gradients - activations);
    // `foreach` as written wins over the release's default.
    assert_eq!(
        step("torch \"1.13\"; foreach true; zero_grad set_to_none; attention fused"),
        gradients + PARAMS * 8 - activations
    );
}

#[test]
fn before_pytorch_2_0_attention_materializes_its_scores() {
    // PyTorch 1.x has no scaled_dot_product_attention: the recomputed layer stores its scores
    // unless the workload says a fused kernel runs.
    let scores = |c: &CheckBudget| {
        c.devices[0].components.iter().any(|c| c.name.starts_with("attention scores"))
    };
    let old = check("torch \"1.13\"");
    assert!(scores(&old), "{:#?}", old.devices[0].components);
    assert!(!scores(&check("torch \"1.13\"; attention fused")));
    assert!(!scores(&check("torch \"2.0\"")));
    assert_eq!(
        intermediates(&check("torch \"1.13\"; zero_grad set_to_none")),
        intermediates(&check("attention eager"))
    );
}

#[test]
fn a_pytorch_release_that_cannot_be_read_is_an_error_at_its_value() {
    let outcome = outcome("torch 2.0");
    let error = outcome.diagnostics.iter().find(|d| d.is_error()).expect("an error");
    assert_eq!(error.code.to_string(), "E013");
    assert!(error.message.contains("in quotes"), "{}", error.message);
    assert_eq!(codes("torch \"latest\""), ["E013"]);
    assert_eq!(codes("torch \"2\""), ["E013"]);
}

#[test]
fn gradients_within_the_activations_add_nothing_but_stay_in_the_breakdown() {
    // 16 sequences of 4,096 tokens without checkpointing store far more than the 64 GB of
    // gradients and square roots, so the step's phase fits inside the backward pass's.
    let big = vram_core::evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights bf16; micro_batch 16; sequence 4096 tokens } }\ncheck w on 8 x h200-sxm split pipeline 8",
    );
    assert!(big.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", big.diagnostics);
    let first = &big.budget.checks[0].devices[0];
    let step = first
        .components
        .iter()
        .find(|c| c.name == "gradients and optimizer step")
        .expect("the gradients are still named");
    assert_eq!(step.bytes.0, 0);
    assert!(step.formula.contains("nothing beyond them"), "{}", step.formula);
}

#[test]
fn accumulated_sharded_or_host_gradients_are_held() {
    let gradients = PARAMS * 4;
    assert_eq!(bytes(&check("gradient_accumulation 4"), "gradients"), gradients);
    // DeepSpeed ZeRO-3 reduces into one flat 16-bit buffer it allocates once.
    assert_eq!(bytes(&check("sharding zero3"), "gradients"), PARAMS * 2);
    // A step in the backward pass holds one tensor's gradient at a time already.
    assert_eq!(bytes(&check("step_in_backward true"), "gradients"), 128_256 * 4096 * 4);
}

#[test]
fn set_to_none_without_effect_is_a_warning() {
    let warnings = |training: &str| -> Vec<String> {
        outcome(training)
            .diagnostics
            .iter()
            .filter(|d| !d.is_error())
            .map(|d| format!("{} {}", d.code, d.message))
            .collect()
    };
    assert_eq!(
        warnings("zero_grad set_to_none; gradient_accumulation 4"),
        ["W005 `zero_grad set_to_none` has no effect: gradients accumulate over micro-batches"]
    );
    assert_eq!(warnings("zero_grad set_to_none; step_in_backward true").len(), 1);
    assert!(warnings("zero_grad set_to_none").is_empty());
    assert!(warnings("zero_grad zeros; gradient_accumulation 4").is_empty());
    assert_eq!(codes("zero_grad none"), ["E015"]);
}
