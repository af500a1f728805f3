//! Each optimizer's states on Llama 3.1 8B, pinned to the state tensors its reference
//! implementation creates like the parameter (`zeros_like` or a clone).

use vram_core::budget::CheckBudget;

fn check(optimizer: &str, master: &str) -> CheckBudget {
    let outcome = vram_core::evaluate(&format!(
        "workload w {{ model llama3.1-8b; runtime none; training {{ weights bf16; master {master}; gradients bf16; micro_batch 1; sequence 1024 tokens; checkpointing full; optimizer {optimizer} }} }}\ncheck w on h200-sxm"
    ));
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

fn optimizer_state(check: &CheckBudget) -> u64 {
    check.devices[0]
        .components
        .iter()
        .find(|c| c.name == "optimizer state")
        .map_or(0, |c| c.bytes.0)
}

/// Llama 3.1 8B's parameters.
const PARAMS: u64 = 8_030_261_248;

#[test]
fn each_optimizer_keeps_its_reference_states_like_the_parameter() {
    // (name, state tensors per parameter)
    let table = [
        ("sgd", 0),
        ("sgd-momentum", 1),        // momentum_buffer
        ("lion", 1),                // exp_avg
        ("rmsprop", 1),             // square_avg
        ("adagrad", 1),             // sum
        ("adamw", 2),               // exp_avg, exp_avg_sq
        ("lamb", 2),                // exp_avg, exp_avg_sq
        ("sophia", 2),              // exp_avg, hessian
        ("adamw-schedule-free", 2), // z, exp_avg_sq
        ("adan", 4),                // exp_avg, exp_avg_sq, exp_avg_diff, pre_grad
        ("prodigy", 4),             // exp_avg, exp_avg_sq, s, p0
    ];
    for (name, states) in table {
        // Pure bf16: the states take the parameters' bf16; with an fp32 master, fp32.
        assert_eq!(optimizer_state(&check(name, "none")), PARAMS * states * 2, "{name}");
        assert_eq!(optimizer_state(&check(name, "fp32")), PARAMS * states * 4, "{name}");
    }
}

#[test]
fn an_unknown_optimizer_is_a_diagnostic_that_names_the_known_ones() {
    let outcome = vram_core::evaluate(
        "workload w { model llama3.1-8b; training { weights bf16; sequence 1024 tokens; optimizer adamax } }\ncheck w on h200-sxm",
    );
    let error = outcome.diagnostics.iter().find(|d| d.is_error()).expect("an error");
    assert!(error.message.contains("adamax"), "{}", error.message);
}

#[test]
fn bitsandbytes_one_state_optimizers_keep_one_byte_and_a_block_scale_whatever_the_master() {
    // One uint8 state per parameter and an fp32 absmax per 256 values (bitsandbytes
    // Optimizer1State): 8,030,261,248 × (1 + 4/256) B; Llama 3.1 8B's tensors all divide by 256.
    let expected = PARAMS + PARAMS / 256 * 4;
    for name in ["lion-8bit", "rmsprop-8bit", "adagrad-8bit", "sgd-momentum-8bit"] {
        assert_eq!(optimizer_state(&check(name, "none")), expected, "{name}");
        assert_eq!(optimizer_state(&check(name, "fp32")), expected, "{name}");
    }
    // Two states for 8-bit AdamW, the same format.
    assert_eq!(optimizer_state(&check("adamw-8bit", "fp32")), 2 * expected);
}
