//! transformers' QuantizedCache (`cache_layout quantized`, implied by a `quanto-` KV cache): the
//! quantized cache, its 16-bit window and one layer's update, pinned to hand computations on
//! Llama 2 7B (32 layers, 32 KV heads of 128), and the checker's diagnostics.

use vram_core::budget::{Category, CheckBudget, Verdict};

const LLAMA2_7B: &str =
    "model llama2-7b { layers 32; hidden 4096; ffn 11008; heads 32; kv_heads 32; vocab 32000 }\n";

/// Keys and values of one token over the 32 layers: 2 × 32 × 32 × 128 elements.
const ELEMENTS_PER_TOKEN: u64 = 2 * 32 * 32 * 128;

/// One layer's keys (or values) of one token in fp16: 32 × 128 × 2 B.
const LAYER_TENSOR_BYTES: u64 = 32 * 128 * 2;

fn source(inference: &str, target: &str) -> String {
    format!(
        "{LLAMA2_7B}workload w {{ model llama2-7b; runtime pytorch; inference {{ weights fp16; {inference} }} }}\ncheck w on {target}\n"
    )
}

fn evaluate(source: &str) -> Vec<CheckBudget> {
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks
}

/// The bytes of the component named exactly `name` on device `device`, if there is one.
fn component(check: &CheckBudget, device: usize, name: &str) -> Option<u64> {
    check.devices[device].components.iter().find(|c| c.name == name).map(|c| c.bytes.0)
}

#[test]
fn quanto_int4_at_128k_tokens_on_an_a100() {
    let checks = evaluate(&source(
        "kv_cache quanto-int4; context 128000 tokens; attention fused",
        "a100-sxm4-80gb",
    ));
    let check = &checks[0];
    // The window holds residual_length − 1 = 127 tokens in fp16; the other 127,873 are int4
    // with an fp16 scale and an int8 zero point per 64: 35/64 B per element.
    assert_eq!(component(check, 0, "KV cache"), Some(ELEMENTS_PER_TOKEN * 127_873 * 35 / 64));
    assert_eq!(component(check, 0, "KV cache"), Some(18_331_873_280));
    assert_eq!(
        component(check, 0, "KV cache: residual window"),
        Some(ELEMENTS_PER_TOKEN * 127 * 2)
    );
    // At a step that re-quantizes, one layer holds its dequantized keys and values (128,000 −
    // 128 tokens), their concatenations with the window and the new token (128,000), and two
    // fp16 temporaries of the keys while they are quantized.
    let update = 2 * LAYER_TENSOR_BYTES * 127_872
        + 2 * LAYER_TENSOR_BYTES * 128_000
        + 2 * LAYER_TENSOR_BYTES * 128_000;
    assert_eq!(update, 6_289_358_848);
    let name = "KV cache: one layer dequantized";
    assert_eq!(component(check, 0, name), Some(update));
    let transient = check.devices[0].components.iter().find(|c| c.name == name).unwrap();
    assert_eq!(transient.category, Category::Intermediate);
    // DynamicCache's copy while growing is not this layout's.
    assert_eq!(component(check, 0, "KV cache: previous copy while growing"), None);
    assert!(
        matches!(check.devices[0].verdict, Verdict::Fits { .. }),
        "{:?}",
        check.devices[0].verdict
    );
}

#[test]
fn the_window_follows_residual_window() {
    let with = |residual: &str| {
        evaluate(&source(
            &format!("kv_cache quanto-int4; context 4096 tokens; sessions 2; {residual}"),
            "a100-sxm4-80gb",
        ))
    };
    // residual_length 1024: 1023 tokens in fp16, for both sessions.
    let wide = with("residual_window 1024 tokens");
    assert_eq!(
        component(&wide[0], 0, "KV cache"),
        Some(ELEMENTS_PER_TOKEN * (4096 - 1023) * 2 * 35 / 64)
    );
    assert_eq!(
        component(&wide[0], 0, "KV cache: residual window"),
        Some(ELEMENTS_PER_TOKEN * 1023 * 2 * 2)
    );
    // residual_length 0 re-quantizes at every step: no window, and the dequantized part is
    // everything but the new token.
    let none = with("residual_window 0 tokens");
    assert_eq!(component(&none[0], 0, "KV cache"), Some(ELEMENTS_PER_TOKEN * 4096 * 2 * 35 / 64));
    assert_eq!(component(&none[0], 0, "KV cache: residual window"), None);
    assert_eq!(
        component(&none[0], 0, "KV cache: one layer dequantized"),
        Some(2 * 2 * LAYER_TENSOR_BYTES * (4095 + 4096 + 4096))
    );
}

#[test]
fn the_layout_takes_other_grouped_formats_and_splits_kv_heads() {
    // optimum-quanto 0.2.3 on: a 16-bit shift instead of the int8 zero point, 4.5 bits.
    let checks = evaluate(&source(
        "kv_cache int4-g64; cache_layout quantized; context 1128 tokens",
        "2 x a100-sxm4-80gb split tensor 2",
    ));
    for device in 0..2 {
        assert_eq!(
            component(&checks[0], device, "KV cache"),
            Some(ELEMENTS_PER_TOKEN / 2 * 1001 * 9 / 16)
        );
        assert_eq!(
            component(&checks[0], device, "KV cache: one layer dequantized"),
            Some(LAYER_TENSOR_BYTES / 2 * (2 * 1000 + 2 * 1128 + 2 * 1128))
        );
    }
}

#[test]
fn a_quantized_layout_needs_a_quantized_cache_under_transformers() {
    let codes = |inference: &str, runtime: &str| {
        let text = source(inference, "a100-sxm4-80gb").replace("runtime pytorch", runtime);
        let outcome = vram_core::evaluate(&text);
        outcome.diagnostics.iter().map(|d| d.code).collect::<Vec<_>>()
    };
    let pytorch = "runtime pytorch";
    assert_eq!(codes("cache_layout quantized; context 4096 tokens", pytorch), ["E014"]);
    assert_eq!(
        codes("kv_cache bf16; cache_layout quantized; context 4096 tokens", pytorch),
        ["E014"]
    );
    assert_eq!(
        codes("kv_cache quanto-int4; cache_layout concatenated; context 4096 tokens", pytorch),
        ["E014"]
    );
    assert_eq!(codes("kv_cache quanto-int4; context 4096 tokens", "runtime vllm"), ["E014"]);
    assert_eq!(
        codes("kv_cache quanto-int2-g32; cache_layout quantized; context 4096 tokens", pytorch),
        Vec::<&str>::new()
    );
}

#[test]
fn residual_window_alone_warns_and_changes_nothing() {
    let plain = vram_core::evaluate(&source("context 4096 tokens", "a100-sxm4-80gb"));
    let alone = vram_core::evaluate(&source(
        "context 4096 tokens; residual_window 64 tokens",
        "a100-sxm4-80gb",
    ));
    let codes: Vec<_> = alone.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["W005"]);
    assert_eq!(alone.budget.checks, plain.budget.checks);
}

#[test]
fn the_budget_grows_with_the_context_across_the_window() {
    // Below, at and above residual_length the split between window and quantized tokens moves;
    // the planner's searches need the total to grow all the same.
    let mut previous = 0;
    for context in [1, 2, 64, 126, 127, 128, 129, 130, 255, 256, 257, 4096] {
        let checks = evaluate(&source(
            &format!("kv_cache quanto-int4; context {context} tokens; prefill_chunk 16 tokens"),
            "a100-sxm4-80gb",
        ));
        let used = checks[0].devices[0].used.0;
        assert!(used >= previous, "{context} tokens: {used} B after {previous} B");
        previous = used;
    }
}
