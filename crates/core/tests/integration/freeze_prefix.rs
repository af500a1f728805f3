//! Freeze tuning, prefix tuning and prompt tuning on Llama 3.1 8B, pinned against hand
//! computations.

use vram_core::budget::CheckBudget;

/// A training section with `training`'s fields, and `weights bf16` unless it gives its own.
fn outcome(training: &str) -> vram_core::Outcome {
    let weights = if training.contains("weights") { "" } else { "weights bf16;" };
    vram_core::evaluate(&format!(
        "workload w {{ model llama3.1-8b; runtime none; training {{ {weights} micro_batch 4; sequence 1024 tokens; {training} }} }}\ncheck w on h200-sxm"
    ))
}

fn check(training: &str) -> CheckBudget {
    let outcome = outcome(training);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

fn bytes(check: &CheckBudget, name: &str) -> u64 {
    let found = check.devices[0].components.iter().find(|c| c.name == name);
    found.unwrap_or_else(|| panic!("no {name:?} component")).bytes.0
}

fn errors(training: &str) -> Vec<String> {
    let outcome = outcome(training);
    outcome.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.code.to_string()).collect()
}

/// One Llama 3.1 8B layer: q and o 4,096², k and v 4,096 × 1,024, gate, up and down
/// 4,096 × 14,336, and two RMSNorm weights of 4,096.
const LAYER: u64 = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14_336 + 2 * 4096;
/// The output head, 128,256 × 4,096.
const HEAD: u64 = 128_256 * 4096;

#[test]
fn freeze_trains_the_last_layers_in_mixed_precision() {
    let freeze = check("method freeze { layers 2 }");
    // Trained layers get an fp32 master copy and two fp32 AdamW moments; nothing else does.
    assert_eq!(bytes(&freeze, "trained layers (2 of 32): master weights"), 2 * LAYER * 4);
    assert_eq!(bytes(&freeze, "trained layers (2 of 32): optimizer state"), 2 * LAYER * 2 * 4);
    let with_head = check("method freeze { layers 3; extra_modules head }");
    assert_eq!(
        bytes(&with_head, "trained layers (3 of 32): master weights"),
        (3 * LAYER + HEAD) * 4
    );
    // The weights themselves are all there, in bf16, as for full training.
    let full = check("method full");
    assert_eq!(bytes(&freeze, "weights: layer matrices"), bytes(&full, "weights: layer matrices"));
}

#[test]
fn frozen_layers_store_no_activations_unless_checkpointing_puts_them_in_the_graph() {
    // Autograd records from the first trained layer: 2 of 32 layers keep their activations.
    let freeze = check("method freeze { layers 2 }");
    let full = check("method full");
    assert_eq!(bytes(&freeze, "activations") * 16, bytes(&full, "activations"));
    // Full (reentrant) checkpointing makes the input require a gradient: every layer keeps its
    // checkpoint and one is recomputed, as in full training. So does a trained embedding.
    let freeze_ckpt = check("method freeze { layers 2 }; checkpointing full");
    let full_ckpt = check("method full; checkpointing full");
    assert_eq!(bytes(&freeze_ckpt, "activations"), bytes(&full_ckpt, "activations"));
    let embeddings = check("method freeze { layers 2; extra_modules embeddings }");
    assert_eq!(bytes(&embeddings, "activations"), bytes(&full, "activations"));
}

#[test]
fn prefix_tuning_trains_per_layer_keys_and_values() {
    // 20 virtual tokens × 32 layers × 2 (keys, values) × 1,024 (8 key-value heads of 128), fp32.
    let prefix = check("method prefix { tokens 20 }");
    assert_eq!(bytes(&prefix, "prefix encoder"), 20 * 32 * 2 * 1024 * 4);
    assert_eq!(bytes(&prefix, "adapter optimizer state"), 20 * 32 * 2 * 1024 * 2 * 4);
    // Each layer's attention keeps the prefix's bf16 keys and values for every sample.
    assert_eq!(
        bytes(&prefix, "prefix keys and values (saved for backward)"),
        4 * 20 * 32 * 2 * 1024 * 2
    );
    // With the reparametrization: a 128 × 1,024 embedding, Linear(1,024, 512) and
    // Linear(512, 65,536) with their biases.
    let projected = check("method prefix { tokens 128; projection 512 }");
    let params = 128 * 1024 + 1024 * 512 + 512 + 512 * 65_536 + 65_536;
    assert_eq!(bytes(&projected, "prefix encoder"), params * 4);
    // The frozen model stores what it stores under LoRA: every layer is in the graph.
    let lora = check("method lora { rank 16 }");
    assert_eq!(bytes(&prefix, "activations"), bytes(&lora, "activations"));
}

#[test]
fn prompt_tuning_trains_input_embeddings_and_lengthens_every_sample() {
    // 20 virtual tokens × 4,096 hidden, fp32; P-tuning's MLP adds Linear(4,096, 4,096) three
    // times with two 4,096 biases and the output's.
    let prompt = check("method prompt { tokens 20 }");
    assert_eq!(bytes(&prompt, "prompt encoder"), 20 * 4096 * 4);
    let p_tuning = check("method prompt { tokens 20; encoder 4096 }");
    assert_eq!(bytes(&p_tuning, "prompt encoder"), (20 * 4096 + 3 * 4096 * 4096 + 3 * 4096) * 4);
    // The frozen model runs over 1,024 + 20 positions: what LoRA keeps at 1,044 tokens.
    let lora = vram_core::evaluate(
        "workload w { model llama3.1-8b; runtime none; training { weights bf16; micro_batch 4; sequence 1044 tokens; method lora { rank 16 } } }\ncheck w on h200-sxm",
    );
    let lora = &lora.budget.checks[0];
    assert_eq!(bytes(&prompt, "activations"), bytes(lora, "activations"));
    assert_eq!(bytes(&prompt, "logits and loss"), bytes(lora, "logits and loss"));
}

#[test]
fn quantized_weights_cannot_be_trained_and_prefixes_need_a_length() {
    assert_eq!(errors("method freeze { layers 2 }; weights nf4"), ["E013"]);
    assert_eq!(errors("method full; weights int4"), ["E013"]);
    assert!(errors("method lora { rank 16 }; weights nf4").is_empty());
    assert_eq!(errors("method prefix { projection 512 }"), ["E011"]);
    assert_eq!(errors("method prompt { encoder 512 }"), ["E011"]);
    assert_eq!(errors("method freeze { layers 0 }"), ["E007"]);
}

#[test]
fn the_planner_does_not_checkpoint_a_freeze_tuned_model() {
    // On a 24 GB card fp32 moments leave freeze tuning over; 8-bit moments are enough, and
    // checkpointing, which would put the frozen layers in the graph, is not offered with them.
    let source = "workload w { model llama3.1-8b; runtime pytorch; training { method freeze { layers 2 }; weights bf16; micro_batch 1; sequence 2048 tokens } }\ncheck w on rtx-4090";
    let outcome = vram_core::evaluate(source);
    let over = &outcome.budget.checks[0];
    assert!(!over.verdict.fits());
    let training = over
        .suggestions
        .iter()
        .find(|s| s.kind == vram_core::budget::SuggestionKind::Training)
        .expect("a training option");
    assert_eq!(training.change, "optimizer adamw-8bit");
    let checkpointed = check("method freeze { layers 2 }; checkpointing full");
    let plain = check("method freeze { layers 2 }");
    assert!(bytes(&checkpointed, "activations") > bytes(&plain, "activations"));
}
