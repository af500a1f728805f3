//! The exports as JavaScript receives them, on wasm32 under Node (`cargo xtask test-wasm`):
//! every value crosses the boundary and is read back, so what the page sees is what is tested.

#![cfg(target_arch = "wasm32")]

use tsify::Ts;
use vram_wasm::api;
use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

const EXAMPLES: &[(&str, &str)] = &[
    ("bnb-4bit-on-a-t4.vram", include_str!("../../../examples/bnb-4bit-on-a-t4.vram")),
    ("cogvideox-video.vram", include_str!("../../../examples/cogvideox-video.vram")),
    ("dgx-405b.vram", include_str!("../../../examples/dgx-405b.vram")),
    ("diffusion-flux.vram", include_str!("../../../examples/diffusion-flux.vram")),
    ("diffusion-training.vram", include_str!("../../../examples/diffusion-training.vram")),
    (
        "flan-t5-xl-summarise-and-tune.vram",
        include_str!("../../../examples/flan-t5-xl-summarise-and-tune.vram"),
    ),
    ("full-finetune-7b-24gb.vram", include_str!("../../../examples/full-finetune-7b-24gb.vram")),
    (
        "freeze-prefix-and-prompt-tuning.vram",
        include_str!("../../../examples/freeze-prefix-and-prompt-tuning.vram"),
    ),
    (
        "torchtune-memory-levers.vram",
        include_str!("../../../examples/torchtune-memory-levers.vram"),
    ),
    ("gguf-on-a-desktop-gpu.vram", include_str!("../../../examples/gguf-on-a-desktop-gpu.vram")),
    ("hunyuan-video.vram", include_str!("../../../examples/hunyuan-video.vram")),
    ("llama3.1-405b-meta-fp8.vram", include_str!("../../../examples/llama3.1-405b-meta-fp8.vram")),
    ("llama3.1-70b-fp8-tp2.vram", include_str!("../../../examples/llama3.1-70b-fp8-tp2.vram")),
    ("llama3.1-8b-chat.vram", include_str!("../../../examples/llama3.1-8b-chat.vram")),
    (
        "long-generation-quantized-kv.vram",
        include_str!("../../../examples/long-generation-quantized-kv.vram"),
    ),
    ("mistral-7b-fleet.vram", include_str!("../../../examples/mistral-7b-fleet.vram")),
    ("mixed-gpus-and-host.vram", include_str!("../../../examples/mixed-gpus-and-host.vram")),
    (
        "moe-and-latent-attention.vram",
        include_str!("../../../examples/moe-and-latent-attention.vram"),
    ),
    (
        "one-card-three-workloads.vram",
        include_str!("../../../examples/one-card-three-workloads.vram"),
    ),
    ("partial-offload.vram", include_str!("../../../examples/partial-offload.vram")),
    ("qlora-on-24gb.vram", include_str!("../../../examples/qlora-on-24gb.vram")),
    ("qwen2.5-7b-lora.vram", include_str!("../../../examples/qwen2.5-7b-lora.vram")),
    ("qlora-then-and-now.vram", include_str!("../../../examples/qlora-then-and-now.vram")),
    ("qwen2-then-and-now.vram", include_str!("../../../examples/qwen2-then-and-now.vram")),
    ("training-across-gpus.vram", include_str!("../../../examples/training-across-gpus.vram")),
    ("render-scene.vram", include_str!("../../../examples/render-scene.vram")),
    ("sdxl-inference.vram", include_str!("../../../examples/sdxl-inference.vram")),
    ("sd15-on-a-laptop.vram", include_str!("../../../examples/sd15-on-a-laptop.vram")),
    ("serving-engines.vram", include_str!("../../../examples/serving-engines.vram")),
    ("sdxl-lora.vram", include_str!("../../../examples/sdxl-lora.vram")),
    ("sliding-window.vram", include_str!("../../../examples/sliding-window.vram")),
    ("wan-video.vram", include_str!("../../../examples/wan-video.vram")),
    ("controlnet.vram", include_str!("../../../examples/controlnet.vram")),
    ("controlnet-training.vram", include_str!("../../../examples/controlnet-training.vram")),
    ("ltx-video.vram", include_str!("../../../examples/ltx-video.vram")),
    ("sana.vram", include_str!("../../../examples/sana.vram")),
    ("mochi-video.vram", include_str!("../../../examples/mochi-video.vram")),
    (
        "video-transformer-alone.vram",
        include_str!("../../../examples/video-transformer-alone.vram"),
    ),
    ("video-training.vram", include_str!("../../../examples/video-training.vram")),
    ("what-would-fit.vram", include_str!("../../../examples/what-would-fit.vram")),
];

/// A value as JavaScript holds it, read back as JSON.
fn json(value: JsValue) -> serde_json::Value {
    serde_wasm_bindgen::from_value(value).unwrap()
}

/// A plain JavaScript object (not a `Map`), as a page would pass it.
fn object(value: &serde_json::Value) -> JsValue {
    use serde::Serialize as _;
    value.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).unwrap()
}

#[wasm_bindgen_test]
fn version_is_the_cores() {
    assert_eq!(vram_wasm::version(), vram_core::VERSION);
}

#[wasm_bindgen_test]
fn every_example_crosses_the_boundary_unchanged() {
    for (name, source) in EXAMPLES {
        let across = json(vram_wasm::evaluate(source, None).js_value());
        let native =
            serde_json::to_value(api::evaluate(source, &api::EvaluateOptions::default())).unwrap();
        assert_eq!(across, native, "{name}");
        // The budget is bit-identical to the core's own serialization (what the CLI prints).
        let core = serde_json::to_value(vram_core::evaluate(source).budget).unwrap();
        assert_eq!(across["budget"], core, "{name}");
        let expected = if source.contains("expect = \"fits\"") { "fits" } else { "" };
        if !expected.is_empty() {
            assert_eq!(across["status"], expected, "{name}");
        }
    }
}

#[wasm_bindgen_test]
fn a_mistake_comes_back_as_a_diagnostic_at_its_line() {
    let source = "workload w {\n  model llama3.1-8b\n  inference {\n    weights bf17\n    context 8192 tokens\n  }\n}\ncheck w on l4\n";
    let options: Ts<api::EvaluateOptions> =
        Ts::new_unchecked(object(&serde_json::json!({"without_catalog": false})));
    let result = json(vram_wasm::evaluate(source, Some(options)).js_value());
    assert_eq!(result["status"], "input_errors");
    let first = &result["diagnostics"][0];
    assert_eq!(first["start"]["line"], 4, "{result}");
    assert_eq!(first["severity"], "error");
    // Unknown options are a diagnostic, not an exception.
    let odd: Ts<api::EvaluateOptions> =
        Ts::new_unchecked(object(&serde_json::json!({"without_catalogue": true})));
    let complaint = json(vram_wasm::evaluate(source, Some(odd)).js_value());
    assert!(
        complaint["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["code"] == "X001"
                && d["message"].as_str().unwrap().contains("without_catalogue")),
        "{complaint}"
    );
    // The options were understood: no complaint about them.
    assert!(result["diagnostics"].as_array().unwrap().iter().all(|d| d["code"] != "X001"));
    assert!(result["diagnostics"][0]["message"].as_str().unwrap().contains("bf17"), "{result}");
}

#[wasm_bindgen_test]
fn hostile_input_never_traps() {
    let inputs = [
        String::new(),
        "{".repeat(10_000),
        "check".to_string(),
        "\u{0}\u{ffff}😀".repeat(100),
        // 9 PiB is beyond 2^53: it cannot be a JavaScript number, and must not be rounded.
        format!(
            "workload w {{ components {{ {} }} }}\ncheck w on l4\n",
            (0..9).fold(String::new(), |lines, i| lines + &format!("c{i} 1 PiB persistent\n"))
        ),
        "workload w { model llama3.1-8b inference { weights bf16 context 99999999999999999999999 tokens } }".to_string(),
    ];
    for input in &inputs {
        let result = json(vram_wasm::evaluate(input, None).js_value());
        assert!(result["status"].is_string(), "{input:.40}: {result}");
    }
    let huge = json(vram_wasm::evaluate(&inputs[4], None).js_value());
    assert_eq!(huge["status"], "input_errors", "{huge}");
    assert!(huge["diagnostics"][0]["message"].as_str().unwrap().contains("JavaScript"), "{huge}");
}

#[wasm_bindgen_test]
fn a_malformed_request_is_an_error_value() {
    let source = EXAMPLES.iter().find(|(n, _)| *n == "llama3.1-8b-chat.vram").unwrap().1;
    let fractional = serde_json::json!({
        "check": "chat-l4", "devices": ["l4"], "contexts": [1.5], "sessions": [1],
    });
    let unknown = serde_json::json!({
        "check": "chat-l4", "devices": [], "contexts": [], "sessions": [], "rows": 3,
    });
    let wrong_type = serde_json::json!({
        "check": 7, "devices": [], "contexts": [], "sessions": [],
    });
    for request in [
        JsValue::from_str("x"),
        JsValue::NULL,
        object(&serde_json::json!({"check": "chat-l4"})),
        object(&serde_json::json!([1, 2])),
        object(&fractional),
        object(&unknown),
        object(&wrong_type),
    ] {
        let result = json(vram_wasm::fit_map(source, &Ts::new_unchecked(request)).js_value());
        assert!(result["error"].is_string(), "{result}");
        assert!(result["maps"].as_array().unwrap().is_empty());
    }
    let request = serde_json::json!({
        "check": "chat-l4", "devices": ["l4", "h100-sxm-80gb"],
        "contexts": [1024, 8192, 131_072], "sessions": [1, 4, 16, 64],
    });
    let result = json(vram_wasm::fit_map(source, &Ts::new_unchecked(object(&request))).js_value());
    assert_eq!(result["error"], serde_json::Value::Null, "{result}");
    assert_eq!(result["maps"][0]["boundary"].as_array().unwrap().len(), 3);
    let l4 = &result["maps"][0]["boundary"];
    let h100 = &result["maps"][1]["boundary"];
    assert!(l4[0].as_u64() <= h100[0].as_u64(), "{result}");
}

#[wasm_bindgen_test]
fn catalog_and_verdicts() {
    let catalog = json(vram_wasm::catalog().js_value());
    let devices = catalog["devices"].as_array().unwrap();
    assert!(devices.len() >= 30);
    assert!(devices.iter().any(|d| d["name"] == "h100-sxm-80gb"));
    let source = EXAMPLES.iter().find(|(n, _)| *n == "llama3.1-8b-chat.vram").unwrap().1;
    let verdicts = json(vram_wasm::verdicts(source, "chat-h100").js_value());
    assert_eq!(verdicts["devices"].as_array().unwrap().len(), devices.len());
    let wrong = json(vram_wasm::verdicts(source, "nope").js_value());
    assert!(wrong["error"].is_string());
}

#[wasm_bindgen_test]
fn dropped_model_files_cross_the_boundary() {
    let config = include_bytes!("../../core/tests/fixtures/import/tiny-llama.config.json");
    let tensors = include_bytes!("../../core/tests/fixtures/import/tiny-llama.safetensors");
    // The file sizes JavaScript passes are numbers: these are small enough to be exact.
    let size = |bytes: &[u8]| f64::from(u32::try_from(bytes.len()).expect("a small fixture"));
    let mut importer = vram_wasm::JsImporter::new();
    let step = json(importer.read("tiny-llama.config.json", config, size(config)).js_value());
    assert_eq!(step["need"], serde_json::Value::Null, "{step}");
    assert_eq!(step["kind"], "config");
    // The safetensors file: its 8-byte length first, then exactly its header.
    let step =
        json(importer.read("tiny-llama.safetensors", &tensors[..8], size(tensors)).js_value());
    let need = usize::try_from(step["need"].as_u64().unwrap()).unwrap();
    assert!(need > 8 && need < tensors.len(), "{step}");
    let step =
        json(importer.read("tiny-llama.safetensors", &tensors[..need], size(tensors)).js_value());
    assert_eq!(step["need"], serde_json::Value::Null, "{step}");
    let model = json(importer.finish(vec!["llama3.1-8b".into()]).js_value());
    assert_eq!(model["name"], "tiny-llama", "{model}");
    assert!(model["vram"].as_str().unwrap().starts_with("# Imported from"), "{model}");
    // Hostile lengths from JavaScript: NaN, negative, infinite; garbage bytes.
    let mut hostile = vram_wasm::JsImporter::new();
    for length in [f64::NAN, -1.0, f64::INFINITY, 1e300] {
        let step = json(hostile.read("x.safetensors", &[0xff; 16], length).js_value());
        assert!(step["need"].is_null() || step["need"].as_u64().unwrap() > 16, "{step}");
    }
    let step = json(hostile.read("noise", &[7; 300], 300.0).js_value());
    assert_eq!(step["diagnostics"][0]["code"], "X002", "{step}");
    let nothing = json(hostile.finish(Vec::new()).js_value());
    assert!(nothing["vram"].is_null());
    assert!(!nothing["diagnostics"].as_array().unwrap().is_empty());
}
