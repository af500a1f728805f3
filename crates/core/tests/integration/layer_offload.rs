//! llama.cpp's partial offload (`gpu_layers`, `-ngl`), pinned by hand on Mistral 7B in Q8_0
//! (34 B per block of 32 weights): 32 layers of 218,103,808 matrix weights (q and o 4096 ×
//! 4096, k and v 4096 × 1024, gate, up and down 4096 × 14,336), 8 KV heads of 128, a vocabulary
//! of 32,768 (v0.3).

use vram_core::budget::{CheckBudget, SuggestionKind, Verdict};

const LAYER: u64 = 218_103_808;
const GATE: u64 = 4096 * 14_336;
const HEAD: u64 = 32_768 * 4096;

/// Bytes of `weights` Q8_0 values.
fn q8_0(weights: u64) -> u64 {
    weights / 32 * 34
}

fn evaluate(source: &str) -> Vec<CheckBudget> {
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks
}

fn source(inference: &str, target: &str) -> String {
    format!(
        "machine desk {{ gpus 1 x rtx-4090; host_ram 64 GiB; disk 1 TB }}\n\
         workload w {{ model mistral-7b; runtime llama.cpp; inference {{ weights q8_0; \
         activations fp32; context 4096 tokens{inference} }} }}\ncheck w on {target}"
    )
}

fn find(components: &[vram_core::budget::Component], name: &str) -> Option<u64> {
    components.iter().find(|c| c.name == name).map(|c| c.bytes.0)
}

fn device(check: &CheckBudget, index: usize, name: &str) -> Option<u64> {
    find(&check.devices[index].components, name)
}

const PEAK: &str = "forward-step peak (one layer or logits)";

fn peak_formula(check: &CheckBudget) -> &str {
    let peak = check.devices[0].components.iter().find(|c| c.name == PEAK).expect("a step");
    &peak.formula
}

#[test]
fn the_last_layers_go_to_the_device_and_the_rest_stays_in_host_memory() {
    let checks = evaluate(&source("; gpu_layers 20", "desk"));
    let check = &checks[0];
    assert_eq!(device(check, 0, "weights: layer matrices"), Some(q8_0(20 * LAYER)));
    // The output layer stays in host memory with the first 12 layers.
    assert_eq!(device(check, 0, "weights: output head"), None);
    assert_eq!(device(check, 0, "weights: final norm"), None);
    let kv_per_layer = 2 * 8 * 128 * 4096 * 2;
    assert_eq!(device(check, 0, "KV cache"), Some(20 * kv_per_layer));
    let host = check.host.as_ref().expect("a machine");
    let ram = &host.ram.components;
    let held = "w: weights in host memory (llama.cpp)";
    assert_eq!(find(ram, &format!("{held}: layer matrices")), Some(q8_0(12 * LAYER)));
    assert_eq!(find(ram, &format!("{held}: embedding")), Some(q8_0(HEAD)));
    assert_eq!(find(ram, &format!("{held}: output head")), Some(q8_0(HEAD)));
    assert_eq!(find(ram, "w: KV cache of the layers in host memory"), Some(12 * kv_per_layer));
}

#[test]
fn host_held_products_run_on_the_device_on_a_copy_of_their_weight() {
    // A batch of 512 tokens: the largest host-held matrix (a gate projection) is copied beside
    // its layer's MLP, the head beside every token's F32 logits, which outweigh it here.
    let checks = evaluate(&source("; gpu_layers 20", "rtx-4090"));
    let mask = 4096 * 512 * 2;
    let mlp = 3 * 512 * 14_336 * 4 + q8_0(GATE) + mask;
    let logits = 512 * 32_768 * 4 + q8_0(HEAD);
    assert!(logits > mlp);
    assert_eq!(device(&checks[0], 0, PEAK), Some(logits));
    let formula = peak_formula(&checks[0]);
    assert!(formula.contains("host weight copied") && formula.contains("host head copied"));
    // Below 32 tokens the CUDA backend takes no host-held product: no copy, and the logits are
    // computed in host memory.
    let small = evaluate(&source("; gpu_layers 20; prefill_chunk 16 tokens", "rtx-4090"));
    let mask = 4096 * 32 * 2;
    assert_eq!(device(&small[0], 0, PEAK), Some(3 * 16 * 14_336 * 4 + mask));
}

#[test]
fn gpu_layers_counts_the_output_layer_after_the_repeating_ones() {
    let full = evaluate(&source("", "rtx-4090"));
    // One more than the layers puts the output on the device too: the default; any more
    // changes nothing (`-ngl 99`).
    for written in ["; gpu_layers 33", "; gpu_layers 99"] {
        assert_eq!(evaluate(&source(written, "rtx-4090"))[0].devices, full[0].devices, "{written}");
    }
    // As many as the layers keeps only the output layer in host memory: its head is copied for
    // the logits, no layer matrix is.
    let all_but_output = evaluate(&source("; gpu_layers 32", "rtx-4090"));
    let check = &all_but_output[0];
    assert_eq!(device(check, 0, "weights: layer matrices"), Some(q8_0(32 * LAYER)));
    assert_eq!(device(check, 0, "weights: output head"), None);
    assert_eq!(device(check, 0, PEAK), Some(512 * 32_768 * 4 + q8_0(HEAD)));
    assert!(!peak_formula(check).contains("host weight copied"));
    // None on the device: the device holds the compute buffer alone, for the products it takes.
    let none = evaluate(&source("; gpu_layers 0", "rtx-4090"));
    assert_eq!(device(&none[0], 0, "weights: layer matrices"), None);
    assert_eq!(device(&none[0], 0, "KV cache"), Some(0));
}

#[test]
fn pipeline_stages_divide_the_offloaded_layers_and_the_first_device_runs_the_host_products() {
    let checks = evaluate(&source("; gpu_layers 20", "2 x rtx-4090 split pipeline 2"));
    let check = &checks[0];
    for index in 0..2 {
        assert_eq!(device(check, index, "weights: layer matrices"), Some(q8_0(10 * LAYER)));
        assert_eq!(device(check, index, "weights: output head"), None);
    }
    let peak = |index| device(check, index, PEAK).unwrap();
    assert_eq!(peak(0), 512 * 32_768 * 4 + q8_0(HEAD));
    assert_eq!(peak(1), 3 * 512 * 14_336 * 4 + 4096 * 512 * 2);
    // Declared stage layers add up to the layers on the devices.
    let declared =
        evaluate(&source("; gpu_layers 20", "2 x rtx-4090 split pipeline 2 layers 8 12"));
    assert_eq!(device(&declared[0], 1, "weights: layer matrices"), Some(q8_0(12 * LAYER)));
    let outcome = vram_core::evaluate(&source(
        "; gpu_layers 20",
        "2 x rtx-4090 split pipeline 2 layers 16 16",
    ));
    let error = outcome.diagnostics.iter().find(|d| d.code == "E031").expect("E031");
    assert!(
        error.message.contains("`gpu_layers` puts 20 layers on the devices"),
        "{}",
        error.message
    );
}

#[test]
fn gpu_layers_belongs_to_llama_cpp() {
    let source = "workload w { model mistral-7b; runtime vllm; inference { weights bf16; context 4096 tokens; gpu_layers 20 } }\ncheck w on rtx-4090";
    let outcome = vram_core::evaluate(source);
    let error = outcome.diagnostics.iter().find(|d| d.code == "E013").expect("E013");
    assert!(error.message.contains("llama.cpp"), "{}", error.message);
    let at = vram_core::span::LineCol::of(source, error.primary.start);
    let column = u32::try_from(source.find("gpu_layers").unwrap()).unwrap() + 1;
    assert_eq!((at.line, at.column), (1, column));
}

#[test]
fn an_over_budget_llama_cpp_check_is_told_how_many_layers_fit() {
    let source = "workload w { model llama3.1-70b; runtime llama.cpp; inference { weights q4_k_m; context 8192 tokens } }\ncheck w on rtx-4090";
    let outcome = vram_core::evaluate(source);
    let check = &outcome.budget.checks[0];
    let suggestion = check
        .suggestions
        .iter()
        .find(|s| s.kind == SuggestionKind::GpuLayers)
        .expect("a gpu_layers suggestion");
    let layers = suggestion.value.expect("a count");
    assert_eq!(suggestion.change, format!("gpu_layers {layers}"));
    // Its evidence: that many fit, one more does not.
    let at = |n: u64| {
        let written = source.replace("8192 tokens", &format!("8192 tokens; gpu_layers {n}"));
        evaluate(&written)[0].verdict.clone()
    };
    assert!(matches!(at(layers), Verdict::Fits { .. }));
    assert!(matches!(at(layers + 1), Verdict::Over { .. }));
    assert!((30..80).contains(&layers), "{layers}");
}

/// Qwen3 30B-A3B in Q8_0: 48 layers, each with 18,874,368 attention weights (q and o 2048 ×
/// 4096, k and v 2048 × 512), a router of 2048 × 128 (kept in F32 by llama.cpp) and three
/// routed-expert tensors of 128 × 768 × 2048; 4 KV heads of 128.
const ATTENTION: u64 = 18_874_368;
const ROUTER: u64 = 2048 * 128 * 4;
const EXPERT_TENSOR: u64 = 128 * 768 * 2048;

fn moe(inference: &str) -> String {
    format!(
        "machine desk {{ gpus 1 x rtx-4090; host_ram 128 GiB; disk 2 TB }}\n\
         workload w {{ model qwen3-30b-a3b; runtime llama.cpp; inference {{ weights q8_0; \
         activations fp32; context 4096 tokens; prefill_chunk 256 tokens{inference} }} }}\n\
         check w on desk"
    )
}

#[test]
fn cpu_moe_layers_keeps_the_first_layers_routed_experts_in_host_memory() {
    let checks = evaluate(&moe("; cpu_moe_layers 20"));
    let check = &checks[0];
    let experts = q8_0(3 * EXPERT_TENSOR);
    let layer = q8_0(ATTENTION) + ROUTER;
    assert_eq!(device(check, 0, "weights: layer matrices"), Some(48 * layer + 28 * experts));
    // Every layer's cache stays on the device, and so does the output layer.
    assert_eq!(device(check, 0, "KV cache"), Some(48 * 2 * 4 * 128 * 4096 * 2));
    assert_eq!(device(check, 0, "weights: output head"), Some(q8_0(151_936 * 2048)));
    let ram = &check.host.as_ref().expect("a machine").ram.components;
    let host = "w: routed experts of layers 0-19 in host memory (llama.cpp --n-cpu-moe)";
    assert_eq!(find(ram, host), Some(20 * experts));
    // A prompt's batch multiplies each host-held expert tensor on a copy: the largest one sits
    // beside the MLP of the 8 active experts (256 tokens × 6,144 in F32) and the KQ mask.
    let mlp = 3 * 256 * 6144 * 4 + q8_0(EXPERT_TENSOR) + 4096 * 256 * 2;
    assert!(mlp > 256 * 151_936 * 4);
    assert_eq!(device(check, 0, PEAK), Some(mlp));
    // `--cpu-moe`: every layer's, and more layers than the model has change nothing.
    let all = evaluate(&moe("; cpu_moe_layers 48"));
    assert_eq!(device(&all[0], 0, "weights: layer matrices"), Some(48 * layer));
    assert_eq!(evaluate(&moe("; cpu_moe_layers 999"))[0].devices, all[0].devices);
}

#[test]
fn cpu_moe_layers_beside_gpu_layers_moves_only_the_device_layers_experts() {
    let checks = evaluate(&moe("; gpu_layers 40; cpu_moe_layers 20"));
    let check = &checks[0];
    let experts = q8_0(3 * EXPERT_TENSOR);
    let layer = q8_0(ATTENTION) + ROUTER;
    // Layers 8-47 on the device, the experts of 8-19 among them in host memory.
    assert_eq!(device(check, 0, "weights: layer matrices"), Some(40 * layer + 28 * experts));
    let ram = &check.host.as_ref().expect("a machine").ram.components;
    let held = "w: weights in host memory (llama.cpp): layer matrices";
    assert_eq!(find(ram, held), Some(8 * (layer + experts)));
    let host = "w: routed experts of layers 8-19 in host memory (llama.cpp --n-cpu-moe)";
    assert_eq!(find(ram, host), Some(12 * experts));
}

#[test]
fn cpu_moe_layers_on_a_dense_model_is_said_to_do_nothing() {
    let source = "workload w { model mistral-7b; runtime llama.cpp; inference { weights q8_0; context 4096 tokens; cpu_moe_layers 8 } }\ncheck w on rtx-4090";
    let outcome = vram_core::evaluate(source);
    let warning = outcome.diagnostics.iter().find(|d| d.code == "W005").expect("W005");
    assert!(warning.message.contains("no experts"), "{}", warning.message);
    let plain = source.replace("; cpu_moe_layers 8", "");
    assert_eq!(outcome.budget.checks[0].devices, evaluate(&plain)[0].devices);
    let elsewhere = vram_core::evaluate(&source.replace("llama.cpp", "vllm"));
    assert!(elsewhere.diagnostics.iter().any(|d| d.code == "E013"));
}

#[test]
fn an_over_budget_mixture_of_experts_is_told_how_many_layers_experts_to_keep_on_the_host() {
    let source = "workload w { model qwen3-30b-a3b; runtime llama.cpp; inference { weights q8_0; context 32768 tokens } }\ncheck w on rtx-4090";
    let outcome = vram_core::evaluate(source);
    let suggestions = &outcome.budget.checks[0].suggestions;
    let experts = suggestions
        .iter()
        .position(|s| s.kind == SuggestionKind::Experts)
        .expect("a cpu_moe_layers suggestion");
    // Before whole layers leave the device.
    let layers = suggestions.iter().position(|s| s.kind == SuggestionKind::GpuLayers);
    assert!(layers.is_none_or(|at| experts < at), "{suggestions:#?}");
    let count = suggestions[experts].value.expect("a count");
    assert_eq!(suggestions[experts].change, format!("cpu_moe_layers {count}"));
    // Its evidence: that many fit, one fewer does not.
    let at = |n: u64| {
        let written = source.replace("32768 tokens", &format!("32768 tokens; cpu_moe_layers {n}"));
        evaluate(&written)[0].verdict.clone()
    };
    assert!(matches!(at(count), Verdict::Fits { .. }));
    assert!(matches!(at(count - 1), Verdict::Over { .. }));
    assert!((1..=48).contains(&count), "{count}");
}
