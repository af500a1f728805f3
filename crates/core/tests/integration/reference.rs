//! The allocated view against transformers' own code: a small Llama generating and training on a
//! CPU under a counter of every storage an operator creates (`tools/transformers-peak.py`,
//! transformers 5.25, PyTorch's foreach AdamW). The counter leaves out the weights and inputs
//! and cannot see what a GPU adds (cuBLAS's workspace, the caching allocator's rounding), so
//! the comparison is the allocated view less the weights and the cuBLAS workspace.

use vram_core::budget::{Category, CheckBudget};

const MODEL: &str = "model tiny \"a 4-layer Llama\" {\n  layers 4\n  hidden 1024\n  ffn 2816\n  \
                     heads 16\n  kv_heads 4\n  head_dim 64\n  vocab 32000\n}\n";

/// The allocated view beside the weights: what the counter sees.
fn beside_weights(workload: &str) -> u64 {
    let source = format!(
        "{MODEL}workload w {{\n  model tiny\n  runtime pytorch\n{workload}}}\n\
                          check w on h100-sxm-80gb\n"
    );
    let outcome = vram_core::evaluate(&source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    let check: &CheckBudget = &outcome.budget.checks[0];
    let device = &check.devices[0];
    let weights: u64 = device
        .components
        .iter()
        .filter(|c| c.category == Category::Persistent)
        .map(|c| c.bytes.0)
        .sum();
    let cublas: u64 =
        device.components.iter().filter(|c| c.name == "cuBLAS workspace").map(|c| c.bytes.0).sum();
    device.views.allocated.0 - weights - cublas
}

fn within(estimate: u64, reference: u64, per_mille: u64) {
    assert!(
        estimate.abs_diff(reference) <= reference * per_mille / 1000,
        "estimate {estimate} B, reference {reference} B"
    );
}

#[test]
fn generating_after_a_prompt_holds_what_transformers_holds() {
    // `generate` of 16 tokens after 2,048 in bf16 (`transformers-peak.py generate 2048 16`:
    // 60,325,912 B): the cache of 2,064 tokens, its last growth's copy, the prefill's hidden
    // states and one layer's step; the estimate is 0.9 % under.
    let workload = "  inference {\n    weights bf16\n    context 2064 tokens\n    sessions 1\n    \
                    prefill_chunk 2048 tokens\n  }\n";
    within(beside_weights(workload), 60_325_912, 20);
}

#[test]
fn an_fp32_adamw_step_holds_what_pytorch_holds() {
    let workload = |tokens: u64| {
        format!(
            "  training {{\n    method full\n    weights fp32\n    activations fp32\n    \
             optimizer adamw\n    micro_batch 1\n    sequence {tokens} tokens\n    \
             checkpointing none\n  }}\n"
        )
    };
    // At 512 tokens the optimizer step is the peak: AdamW's two states, the gradients and the
    // foreach step's square root of the second moment, 16 B per parameter
    // (`transformers-peak.py train 512`: 1,770,143,900 B, a few scalars above 16 × 110,633,984).
    within(beside_weights(&workload(512)), 1_770_143_900, 1);
    // At 2,048 tokens the backward pass is: the states beside the activations and the loss's
    // fp32 log-softmax and gradients (2,352,627,876 B); the estimate is 1.1 % under.
    within(beside_weights(&workload(2048)), 2_352_627_876, 20);
}
