//! Serving runtimes that size a KV pool at start-up: SGLang's and text-generation-inference's
//! rules, pinned against hand computations from their sources (`eval/serving.rs`).

use vram_core::budget::CheckBudget;

fn evaluate(source: &str) -> Vec<CheckBudget> {
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks
}

fn component(check: &CheckBudget, name: &str) -> u64 {
    check.devices[0]
        .components
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name:?} in {:#?}", check.devices[0].components))
        .bytes
        .0
}

fn source(runtime: &str, extra: &str, on: &str) -> String {
    format!(
        "workload w {{ model llama3.1-8b; runtime {runtime}; inference {{ weights bf16; context 8192 tokens; sessions 16{extra} }} }}\ncheck w on {on}"
    )
}

/// An H100 SXM's 85,520,809,984 B as nvidia-smi totals it, and 85,045,477,376 B as CUDA does
/// (less the driver's reserve: what the runtimes' free-memory readings start from); Llama 3.1
/// 8B's 8,030,261,248 parameters in bf16; its KV, 32 layers × 8 KV heads × 128 × (K and V) ×
/// 2 B = 131,072 B per token; PyTorch's context profile, 500 MiB.
const H100_CUDA: u64 = 85_045_477_376;
const WEIGHTS: u64 = 8_030_261_248 * 2;
const KV_PER_TOKEN: u64 = 32 * 8 * 128 * 2 * 2;
const CONTEXT: u64 = 500 * 1024 * 1024;

#[test]
fn sglang_takes_its_fraction_of_the_free_memory_less_the_weights() {
    let checks = evaluate(&source("sglang", "", "h100-sxm-80gb"));
    let pool = checks[0].devices[0].kv_pool.clone().expect("SGLang reports its pool");
    // mem_fraction_static on one GPU of 81,559 MiB (nvidia-smi's total, which SGLang reads):
    // 13,440 MiB reserved (512 + 1.5 × 8192 + 1024 ÷ 8 + 2 × 256), 68,119 ÷ 81,559 = 0.835; of
    // the free memory (CUDA's total) the context leaves; single tokens.
    let share = (H100_CUDA - CONTEXT) * 835 / 1000;
    let tokens = (share - WEIGHTS) / KV_PER_TOKEN;
    assert_eq!(pool.tokens, tokens);
    assert_eq!(pool.bytes.0, tokens * KV_PER_TOKEN);
    assert_eq!(pool.fraction, "83.5 % of the free memory");
    assert_eq!(component(&checks[0], "KV cache pool (SGLang)"), pool.bytes.0);
    // The request table, outside the share: tokens × 512 ÷ 8192 requests, held at 4096.
    assert!(tokens * 512 / 8192 > 4096);
    assert_eq!(component(&checks[0], "request-to-token table (SGLang)"), 4097 * (8192 + 4) * 4);
    assert_eq!(component(&checks[0], "FlashInfer workspace (SGLang)"), 384 * 1024 * 1024);
    assert!(checks[0].verdict.fits());
}

#[test]
fn sglang_leaves_more_to_each_gpu_of_a_tensor_parallel_group() {
    // Two GPUs: 256 MiB for them in the reserve, 13,568 MiB: 67,991 ÷ 81,559 = 0.834.
    let checks = evaluate(&source("sglang", "", "2 x h100-sxm-80gb split tensor 2"));
    assert_eq!(
        checks[0].devices[0].kv_pool.as_ref().expect("pool").fraction,
        "83.4 % of the free memory"
    );
    let stated = evaluate(&source("sglang", "; memory_fraction 80 %", "h100-sxm-80gb"));
    let pool = stated[0].devices[0].kv_pool.clone().expect("pool");
    assert_eq!(pool.tokens, ((H100_CUDA - CONTEXT) * 80 / 100 - WEIGHTS) / KV_PER_TOKEN);
}

#[test]
fn tgi_carves_everything_it_holds_out_of_95_percent_of_the_device() {
    let checks = evaluate(&source("tgi", "", "h100-sxm-80gb"));
    let device = &checks[0].devices[0];
    let pool = device.kv_pool.clone().expect("TGI reports its pool");
    let others: u64 = device
        .components
        .iter()
        .filter(|c| c.name != "KV cache pool (TGI)" && c.name != "CUDA graphs")
        .map(|c| c.bytes.0)
        .sum();
    assert_eq!(pool.tokens, (H100_CUDA * 95 / 100 - others) / KV_PER_TOKEN);
    assert_eq!(pool.fraction, "95 % of the device");
    // Its warm-up prefill: max_batch_prefill_tokens 4096 tokens, not every session's prompt.
    let hidden = component(&checks[0], "hidden states");
    assert_eq!(hidden, 4096 * 4096 * 2 * 2);
}

#[test]
fn a_pooling_server_refuses_transformers_quantized_cache() {
    for (runtime, name) in [("sglang", "SGLang"), ("tgi", "text-generation-inference")] {
        let outcome = vram_core::evaluate(&source(
            runtime,
            "; cache_layout quantized; kv_cache quanto-int4",
            "h100-sxm-80gb",
        ));
        let error = outcome.diagnostics.iter().find(|d| d.code == "E014").expect("E014");
        assert!(error.message.starts_with(name), "{}", error.message);
    }
}

#[test]
fn pool_settings_under_a_runtime_that_does_not_pool_are_said_to_do_nothing() {
    let warnings = |runtime: &str, extra: &str| -> Vec<String> {
        vram_core::evaluate(&source(runtime, extra, "h100-sxm-80gb"))
            .diagnostics
            .iter()
            .filter(|d| d.code == "W005")
            .map(|d| d.message.clone())
            .collect()
    };
    assert_eq!(
        warnings("pytorch", "; memory_fraction 80 %"),
        [
            "`memory_fraction` has no effect without a pooling runtime (`vllm`, `sglang`, `tgi`, `tensorrt-llm`, `lmdeploy`)"
        ]
    );
    assert!(warnings("sglang", "; memory_fraction 80 %").is_empty());
    assert_eq!(
        warnings("sglang", "; max_sequences 64"),
        ["`max_sequences` has no effect without `runtime vllm`"]
    );
    assert!(warnings("vllm", "; memory_fraction 80 %; max_sequences 64").is_empty());
}

#[test]
fn tensorrt_llm_takes_90_percent_of_what_the_loaded_engine_leaves() {
    let checks = evaluate(&source("tensorrt-llm", "", "h100-sxm-80gb"));
    let device = &checks[0].devices[0];
    let pool = device.kv_pool.clone().expect("TensorRT-LLM reports its pool");
    // Everything it holds once the engine is loaded; its CUDA graphs come afterwards.
    let loaded: u64 = device
        .components
        .iter()
        .filter(|c| c.name != "KV cache pool (TensorRT-LLM)" && c.name != "CUDA graphs")
        .map(|c| c.bytes.0)
        .sum();
    // free_gpu_memory_fraction 0.9 of the rest, in blocks of 32 tokens.
    let blocks = (H100_CUDA - loaded) * 9 / 10 / (32 * KV_PER_TOKEN);
    assert_eq!(pool.tokens, blocks * 32);
    assert_eq!(pool.fraction, "90 % of the memory left after loading");
    // Its engine's activations are sized for max_num_tokens (8192), not every session's prompt.
    assert_eq!(component(&checks[0], "hidden states"), 8192 * 4096 * 2 * 2);
}

#[test]
fn lmdeploy_takes_80_percent_of_what_the_weights_leave_in_blocks_of_64_tokens() {
    let checks = evaluate(&source("lmdeploy", "", "h100-sxm-80gb"));
    let device = &checks[0].devices[0];
    let pool = device.kv_pool.clone().expect("LMDeploy reports its pool");
    // cache_max_entry_count 0.8 of the memory free once the context and the weights are on the
    // device (the engine's own buffers come later, from the rest), in blocks of 64 tokens.
    let free = H100_CUDA - CONTEXT - WEIGHTS;
    let blocks = free * 8 / 10 / (64 * KV_PER_TOKEN);
    assert_eq!(pool.tokens, blocks * 64);
    assert_eq!(pool.fraction, "80 % of the memory the weights leave");
    // Its prefill step is max_prefill_token_num (8192) tokens.
    assert_eq!(component(&checks[0], "hidden states"), 8192 * 4096 * 2 * 2);
    // A stated cache_max_entry_count is the workload's `memory_fraction`.
    let half = evaluate(&source("lmdeploy", "; memory_fraction 50 %", "h100-sxm-80gb"));
    let pool = half[0].devices[0].kv_pool.clone().expect("a pool");
    assert_eq!(pool.tokens, free / 2 / (64 * KV_PER_TOKEN) * 64);
}

#[test]
fn lmdeploy_quantizes_its_cache_with_a_16_bit_scale_and_zero_per_token_and_head() {
    // TurboMind's block (kernels/attention/block.h): per layer, KV head and token, K and V each
    // hold head_dim × bits / 8 bytes and a 16-bit scale and zero (4 B). Llama 3.1 8B: 32 layers
    // × 8 KV heads × 2 × (128 + 4) B at int8, × 2 × (64 + 4) B at int4.
    for (kv, per_token) in [("int8", 32 * 8 * 2 * 132), ("int4", 32 * 8 * 2 * 68)] {
        let checks = evaluate(&source("lmdeploy", &format!("; kv_cache {kv}"), "h100-sxm-80gb"));
        let pool = checks[0].devices[0].kv_pool.clone().expect("a pool");
        assert_eq!(pool.bytes.0, pool.tokens * per_token, "{kv}");
        // Its own name says the same.
        let named =
            evaluate(&source("lmdeploy", &format!("; kv_cache lmdeploy-{kv}"), "h100-sxm-80gb"));
        assert_eq!(named[0].devices[0].kv_pool.clone().expect("a pool"), pool, "{kv}");
    }
    // Outside LMDeploy, `int8` is the plain type: no scales beside it.
    let plain = evaluate(&source("pytorch", "; kv_cache int8", "h100-sxm-80gb"));
    assert_eq!(component(&plain[0], "KV cache"), 32 * 8 * 2 * 128 * 8192 * 16);
}
