//! Points to `.vram` source text.
//!
//! Each point's conditions are read by keyword rules on the data set's own wording (one function
//! per condition, in `conditions`, `inference` and `training`). A condition the language
//! cannot state, or that the source does not give, becomes a [`Gap`]; all gaps of a point are
//! collected, so the report lists every reason, not only the first. Where a rule has to choose
//! (a runtime default, a stand-in for a condition the compared component does not depend on), it
//! records an [`Assumption`] and says so in the generated source.

mod conditions;
mod diffusion;
mod diffusion_training;
mod guidance;
mod inference;
mod lora;
mod ollama;
mod pipelines;
mod preference;
mod training;

use std::fmt::Write as _;

use crate::data::Point;
use crate::gaps::{Assumption, Gap, data};
use crate::target::Target;
use crate::units::UnitRule;

/// A point written as a `.vram` file, with what to compare its estimate to.
#[derive(Clone, Debug)]
pub struct Expressed {
    pub source: String,
    pub target: Target,
    /// The measurement in bytes, for peaks and components.
    pub measured: Option<f64>,
    pub unit_rule: Option<UnitRule>,
    pub assumptions: Vec<Assumption>,
    /// The conditions the source leaves out that were given their smallest value, as the gaps
    /// they would otherwise be: the estimate is then a lower bound, which decides an
    /// out-of-memory report only when even it does not fit.
    pub lower_bound: Vec<Gap>,
    /// The source gives an Ollama run the four parallel contexts its scheduler tried first.
    pub ollama_four: bool,
}

/// A point's expression, or every reason it has none.
pub type Expression = Result<Expressed, Vec<Gap>>;

/// The name of the workload in every generated source.
const WORKLOAD: &str = "point";

/// Collects a point's gaps and assumptions while its conditions are read.
pub(crate) struct Cx<'a> {
    pub(crate) point: &'a Point,
    gaps: Vec<Gap>,
    assumptions: Vec<Assumption>,
    /// The point reports an out-of-memory failure.
    out_of_memory: bool,
    /// The point reports whether the run fitted (an out-of-memory failure or a run that fitted),
    /// not a number.
    verdict: bool,
    /// Missing lengths or batches given their smallest value (see [`Cx::smallest_or_gap`]).
    lower_bound: Vec<Gap>,
    /// Ollama's automatic parallel contexts: four were tried ([`ollama::default_parallel`]),
    /// or the one it falls back to when four do not fit.
    ollama: ollama::Parallel,
}

impl<'a> Cx<'a> {
    fn new(point: &'a Point) -> Cx<'a> {
        Cx {
            point,
            gaps: Vec::new(),
            assumptions: Vec::new(),
            out_of_memory: false,
            verdict: false,
            lower_bound: Vec::new(),
            ollama: ollama::Parallel::Untried,
        }
    }

    /// A count the source leaves out that memory only grows with (a length, a batch): for an
    /// out-of-memory report it takes its smallest value, 1, as the estimate is then a lower
    /// bound and a failure it does not explain is left undecided (see `evaluate`); for any
    /// other point it is the gap it is.
    pub(crate) fn smallest_or_gap(&mut self, gap: Gap) -> Option<u64> {
        if !self.out_of_memory {
            self.gap(gap);
            return None;
        }
        self.assume(crate::gaps::assume::LOWER_BOUND, format!("{}: 1", gap.detail));
        self.lower_bound.push(gap);
        Some(1)
    }

    pub(crate) fn gap(&mut self, gap: Gap) {
        if !self.gaps.contains(&gap) {
            self.gaps.push(gap);
        }
    }

    pub(crate) fn assume(&mut self, label: &'static str, detail: impl Into<String>) {
        self.assumptions.push(Assumption::new(label, detail));
    }

    /// A wording the rules do not recognise: a new source uses words the harness must learn.
    pub(crate) fn unreadable(&mut self, field: &str, value: &str) {
        self.gap(Gap::data(data::UNREADABLE, format!("{field} = {value:?}")));
    }
}

/// Expresses one point.
pub fn express(point: &Point) -> Expression {
    let expressed = express_with(point, ollama::Parallel::Untried)?;
    // Ollama 0.2 to 0.9 loaded four contexts when its estimate of four fitted the GPU, and one
    // otherwise: the four are kept only if they fit in the core's estimate.
    if expressed.ollama_four && !ollama::fits(&expressed.source) {
        return express_with(point, ollama::Parallel::FourDidNotFit);
    }
    Ok(expressed)
}

fn express_with(point: &Point, ollama: ollama::Parallel) -> Expression {
    let mut cx = Cx::new(point);
    cx.ollama = ollama;
    let target = cx.target();
    cx.out_of_memory = matches!(target, Some(Target::Verdict { expect_fits: false }));
    cx.verdict = matches!(target, Some(Target::Verdict { .. }));
    let measured = target.as_ref().and_then(|t| cx.measured(t));
    let gpu = target.as_ref().and_then(|t| cx.gpu(t));
    let split = cx.split();
    let kind = point.workload.as_str();
    // A diffusion pipeline's offload is its own (`offload model`), read by its section.
    let distribution = (kind != "diffusion_inference").then(|| cx.distribution());
    let runtime = cx.runtime();
    let selector = match &target {
        Some(Target::Component { selector, .. }) => Some(*selector),
        _ => None,
    };

    let mut model = None;
    let body = match kind {
        "diffusion_inference" => diffusion::body(&mut cx),
        "diffusion_training" => {
            let distribution = distribution.unwrap_or_else(|| cx.distribution());
            diffusion_training::body(&mut cx, &distribution)
        }
        "runtime_overhead" => Some(runtime_only_body()),
        "llm_inference" | "llm_weights_load" => {
            model = cx.model();
            let family = model.as_ref().map(|m| m.family);
            runtime.and_then(|r| inference::body(&mut cx, r, selector, family))
        }
        "training_full" | "training_lora" | "training_qlora" => {
            model = cx.model();
            // Read the training conditions even without a model, so that their gaps are listed.
            let family = model.as_ref().map(|m| m.family);
            let distribution = distribution.unwrap_or_else(|| cx.distribution());
            training::body(&mut cx, family, &distribution)
        }
        other => {
            cx.unreadable("workload", other);
            None
        }
    };

    if !cx.gaps.is_empty() {
        return Err(cx.gaps);
    }
    let (Some(target), Some(gpu), Some(split), Some(runtime), Some(body)) =
        (target, gpu, split, runtime, body)
    else {
        // Every `None` above pushed a gap, so this is unreachable with the rules as written;
        // a rule that forgets to explain itself still produces a reason rather than a panic.
        return Err(vec![Gap::data(data::UNREADABLE, "a condition the rules did not explain")]);
    };
    let mut source = String::new();
    let _ = writeln!(
        source,
        "# {}: {} · {} · {} {} {} · measured by {}",
        point.id,
        point.model,
        point.workload,
        point.measured_kind,
        point.value.map_or_else(|| "-".to_string(), |v| v.to_string()),
        point.unit,
        point.measurement_method
    );
    source.push_str(crate::MODELS_VRAM);
    source.push('\n');
    if let Some(declaration) = model.as_ref().and_then(|m| m.declaration.as_ref()) {
        source.push_str(declaration);
        source.push('\n');
    }
    if let Some(declaration) = &gpu.declaration {
        source.push_str(declaration);
        source.push('\n');
    }
    // Verdicts and capacities are compared without headroom: the question is whether the run
    // fitted in the memory, not whether it left the recommended margin.
    source.push_str("headroom default {\n  at_least 0 B\n}\n\n");
    let _ = writeln!(source, "workload {WORKLOAD} \"{}\" {{", point.id);
    if let Some(model) = &model {
        let _ = writeln!(source, "  model   {}", model.name);
    }
    let _ = writeln!(source, "  runtime {}", runtime.word());
    if cx.eager_modules() {
        source.push_str("  cuda_module_loading eager  # CUDA before 11.7 has no lazy loading\n");
    }
    source.push_str(&body);
    source.push_str("}\n\n");
    let _ = writeln!(source, "check {WORKLOAD} on {}", split.target(&gpu.device));
    let unit_rule = measured.map(|(_, rule)| rule);
    Ok(Expressed {
        source,
        target,
        measured: measured.map(|(bytes, _)| bytes),
        unit_rule,
        assumptions: cx.assumptions,
        lower_bound: cx.lower_bound,
        ollama_four: cx.ollama == ollama::Parallel::TriedFour,
    })
}

/// A workload with no model: only the runtime's own memory (a CUDA context measured alone).
fn runtime_only_body() -> String {
    "  components {\n    no_model 0 B workspace  # the measurement loads no model\n  }\n"
        .to_string()
}

/// A test point: `defaults` (a JSON object) with the fields of `changes` (a JSON object)
/// replacing or adding to them.
#[cfg(test)]
pub(crate) fn test_point(defaults: serde_json::Value, changes: &str) -> Point {
    let mut point = defaults;
    let changes: serde_json::Value = serde_json::from_str(changes).expect("changes parse");
    if let (Some(point), Some(changes)) = (point.as_object_mut(), changes.as_object()) {
        point.extend(changes.clone());
    }
    serde_json::from_value(point).expect("test point parses")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gaps::assume;

    /// A Qwen finetune.py point on one A100, with the fields of `changes` (a JSON object)
    /// replacing or adding to the defaults.
    fn qwen_point(changes: &str) -> Point {
        let defaults = serde_json::json!({
            "id": "T-001", "source_id": "T", "workload": "training_lora",
            "model": "Qwen/Qwen-7B (base)",
            "framework": "transformers Trainer + PEFT (<0.8) + DeepSpeed (Qwen finetune.py)",
            "weight_precision": "bf16", "quantization": "none", "compute_dtype": "bf16",
            "optimizer": "adamw_torch", "batch_size": 1, "seq_len": 256, "num_gpus": 1,
            "gpu_type": "A100-SXM4-80G", "parallelism": "none",
            "activation_checkpointing": true, "measurement_method": "not stated",
            "measured_kind": "peak", "value": 33.7, "unit": "GB", "quality": "B"
        });
        test_point(defaults, changes)
    }

    fn labels(expression: &Expression) -> Vec<&'static str> {
        match expression {
            Ok(expressed) => expressed.assumptions.iter().map(|a| a.label).collect(),
            Err(gaps) => gaps.iter().map(|g| g.label).collect(),
        }
    }

    /// LMDeploy (TurboMind) serving a model: its runtime, its KV share and its prefill step.
    #[test]
    fn an_lmdeploy_point_is_expressed_with_its_pool() {
        let point = qwen_point(
            r#"{"workload": "llm_inference", "model": "meta-llama/Llama-3.1-8B-Instruct",
                "framework": "LMDeploy 0.6.2 (TurboMind)", "weight_precision": "bf16",
                "quantization": null, "gpu_type": "A100 80GB", "input_tokens": "1024",
                "output_tokens": 512, "optimizer": null, "seq_len": null,
                "activation_checkpointing": null, "measurement_method": "nvidia-smi",
                "other_settings": "cache_max_entry_count=0.5, max_prefill_token_num 4096"}"#,
        );
        let expressed = express(&point).expect("expressible");
        let source = &expressed.source;
        assert!(source.contains("runtime lmdeploy"), "{source}");
        assert!(source.contains("memory_fraction 50 %"), "{source}");
        assert!(source.contains("prefill_chunk 4096 tokens"), "{source}");
        let outcome = vram_core::evaluate(source);
        assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:?}", outcome.diagnostics);
        let pool = outcome.budget.checks[0].devices[0].kv_pool.clone().expect("a pool");
        assert_eq!(pool.fraction, "50 % of the memory the weights leave");
    }

    /// LMDeploy's quantized cache in the wordings a table uses: `quant_policy` in the settings,
    /// or an int8 / int4 KV type under LMDeploy.
    #[test]
    fn lmdeploy_quant_policy_reads_as_its_quantized_cache() {
        let expressed = |kv: &str, settings: &str| {
            let point = qwen_point(&format!(
                r#"{{"workload": "llm_inference", "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "framework": "LMDeploy 0.6.2 (TurboMind)", "weight_precision": "bf16",
                    "quantization": null, "gpu_type": "A100 80GB", "input_tokens": "1024",
                    "output_tokens": 512, "optimizer": null, "seq_len": null,
                    "activation_checkpointing": null, "measurement_method": "nvidia-smi",
                    "kv_cache_dtype": {kv}, "other_settings": "{settings}"}}"#
            ));
            express(&point).expect("expressible").source
        };
        let kv_line = |source: String| {
            source.lines().find(|l| l.trim_start().starts_with("kv_cache")).map(str::to_string)
        };
        let int8 = kv_line(expressed("null", "--quant-policy 8"));
        assert!(int8.as_deref().is_some_and(|l| l.contains("lmdeploy-int8")), "{int8:?}");
        let int4 = kv_line(expressed(r#""int4 (quant_policy=4)""#, ""));
        assert!(int4.as_deref().is_some_and(|l| l.contains("lmdeploy-int4")), "{int4:?}");
        let plain = kv_line(expressed(r#""int8""#, ""));
        assert!(plain.as_deref().is_some_and(|l| l.contains("lmdeploy-int8")), "{plain:?}");
        // Unquantized, the model's type as before.
        let fp16 = kv_line(expressed(r#""fp16""#, ""));
        assert!(fp16.as_deref().is_some_and(|l| l.contains("fp16")), "{fp16:?}");
    }

    /// A data set the harness has not seen words things its own way; the rules read the words,
    /// not the wordings of `measured-peaks.json`.
    #[test]
    fn a_point_in_new_words_is_expressed() {
        let point = qwen_point(
            r#"{"workload": "llm_inference", "model": "meta-llama/Llama-3.1-8B-Instruct",
                "framework": "Hugging Face transformers 4.44 (PyTorch 2.4)",
                "weight_precision": "bfloat16", "quantization": null,
                "gpu_type": "NVIDIA L40S 48GB", "input_tokens": "512", "output_tokens": 256,
                "kv_cache_dtype": "bf16", "optimizer": null, "seq_len": null,
                "activation_checkpointing": null,
                "measurement_method": "torch.cuda.max_memory_allocated()"}"#,
        );
        let expressed = express(&point).expect("expressible");
        assert!(expressed.source.contains("model   llama3.1-8b"), "{}", expressed.source);
        assert!(expressed.source.contains("on l40s"), "{}", expressed.source);
        let awq = qwen_point(
            r#"{"workload": "llm_inference", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ",
                "framework": "transformers", "weight_precision": "int4",
                "quantization": "AWQ 4-bit", "gpu_type": "RTX 4070 Ti 12GB",
                "input_tokens": "128", "output_tokens": 128, "kv_cache_dtype": "fp16",
                "seq_len": null, "activation_checkpointing": null, "optimizer": null}"#,
        );
        let expressed = express(&awq).expect("expressible");
        assert!(expressed.source.contains("awq-int4"), "{}", expressed.source);
        assert!(expressed.source.contains("memory     12 GiB marketed"), "{}", expressed.source);
        assert!(labels(&Ok(expressed)).contains(&assume::RUNTIME_DEFAULT));
        // A prompt not stated, with the compiler's estimate beside it.
        let estimated = qwen_point(
            r#"{"workload": "llm_inference", "model": "meta-llama/Llama-3.1-8B-Instruct",
                "framework": "transformers", "weight_precision": "bf16", "quantization": null,
                "gpu_type": "A100 80GB", "input_tokens": "not stated (~20: a chat-templated question)",
                "output_tokens": 100, "kv_cache_dtype": "bf16", "seq_len": null,
                "activation_checkpointing": null, "optimizer": null}"#,
        );
        let expressed = express(&estimated).expect("expressible");
        assert!(expressed.source.contains("context  120 tokens"), "{}", expressed.source);
        assert!(labels(&Ok(expressed)).contains(&assume::PROMPT_APPROXIMATE));
    }

    /// transformers before 4.36 grew its caches as tuples (the whole previous cache alive at a
    /// step's end); a run that generates one token never has a previous cache.
    #[test]
    fn transformers_before_4_36_keeps_tuple_caches() {
        let point = |version: &str, output: u64| {
            qwen_point(&format!(
                r#"{{"workload": "llm_inference", "model": "meta-llama/Llama-2-13b-hf",
                    "framework": "transformers {version}", "weight_precision": "fp16",
                    "quantization": null, "gpu_type": "A100 80GB", "input_tokens": "512",
                    "output_tokens": {output}, "kv_cache_dtype": "fp16", "seq_len": null,
                    "activation_checkpointing": null, "optimizer": null}}"#
            ))
        };
        let source = |version: &str, output: u64| {
            express(&point(version, output)).expect("expressible").source
        };
        assert!(source("4.33.0", 512).contains("cache_layout tuple"));
        assert!(!source("4.33.0", 1).contains("cache_layout"));
        assert!(!source("4.40.0", 512).contains("cache_layout"));
    }

    /// A vLLM V0 log (vLLM issue #13882): the profile step covers max(max_model_len, 2048)
    /// tokens, `enforce_eager` is about CUDA graphs rather than attention, and a double-quantized
    /// NF4 checkpoint is `nf4-dq`.
    #[test]
    fn vllm_v0_logs_read_their_engine_settings() {
        let point = qwen_point(
            r#"{"workload": "llm_inference", "model": "Qwen2.5-7B-Instruct-bnb-4bit",
                "framework": "vLLM (V0 engine)", "framework_version": "v0.7.3",
                "weight_precision": "bitsandbytes 4-bit",
                "quantization": "bitsandbytes nf4, double quant", "seq_len": 4096,
                "batch_size": null, "optimizer": null, "activation_checkpointing": null,
                "other_settings": "max_model_len 4096, enforce_eager False",
                "measured_kind": "component", "components_included": "activation peak",
                "gpu_type": "RTX 4060 8GB", "value": 1.42, "unit": "GiB"}"#,
        );
        let expressed = express(&point).unwrap_or_else(|gaps| panic!("{gaps:?}"));
        assert!(expressed.source.contains("weights  nf4-dq"), "{}", expressed.source);
        assert!(expressed.source.contains("prefill_chunk 4096 tokens"), "{}", expressed.source);
        assert!(!expressed.source.contains("attention eager"), "{}", expressed.source);
        let short = qwen_point(
            r#"{"workload": "llm_inference", "model": "Qwen2.5-7B-Instruct",
                "framework": "vLLM", "framework_version": "v0.6.3", "weight_precision": "bf16",
                "quantization": null, "seq_len": 1024, "batch_size": 1, "optimizer": null,
                "activation_checkpointing": null}"#,
        );
        let expressed = express(&short).unwrap_or_else(|gaps| panic!("{gaps:?}"));
        assert!(expressed.source.contains("prefill_chunk 2048 tokens"), "{}", expressed.source);
    }

    /// T5 fine-tuning and generation state the encoder's source beside the decoder's tokens,
    /// and the generated files check; without the target length the point stays a gap.
    #[test]
    fn encoder_decoder_points_give_both_lengths() {
        let tune = qwen_point(
            r#"{"workload": "training_lora", "model": "google/flan-t5-xl",
                "framework": "transformers Trainer + PEFT", "weight_precision": "fp32",
                "quantization": null, "compute_dtype": null, "optimizer": "adamw_torch",
                "finetune_method": "LoRA r=16 on q, v", "batch_size": 8,
                "input_tokens": "512", "output_tokens": 128, "seq_len": null,
                "activation_checkpointing": false}"#,
        );
        let expressed = express(&tune).unwrap_or_else(|gaps| panic!("{gaps:?}"));
        assert!(expressed.source.contains("source        512 tokens"), "{}", expressed.source);
        assert!(expressed.source.contains("sequence      128 tokens"), "{}", expressed.source);
        assert!(expressed.source.contains("targets q v"), "{}", expressed.source);
        let generate = qwen_point(
            r#"{"workload": "llm_inference", "model": "t5-3b", "framework": "transformers",
                "weight_precision": "fp16", "quantization": null, "batch_size": 4,
                "input_tokens": "256", "output_tokens": 64, "kv_cache_dtype": "fp16",
                "optimizer": null, "seq_len": null, "activation_checkpointing": null}"#,
        );
        let generated = express(&generate).unwrap_or_else(|gaps| panic!("{gaps:?}"));
        assert!(generated.source.contains("source   256 tokens"), "{}", generated.source);
        assert!(generated.source.contains("context  64 tokens"), "{}", generated.source);
        for source in [&expressed.source, &generated.source] {
            let outcome = vram_core::evaluate(source);
            let errors: Vec<_> = outcome.diagnostics.iter().filter(|d| d.is_error()).collect();
            assert!(errors.is_empty(), "{errors:?}\n{source}");
        }
        let untargeted = qwen_point(
            r#"{"workload": "training_full", "model": "t5-3b", "finetune_method": null,
                "seq_len": 128, "output_tokens": null}"#,
        );
        assert!(labels(&express(&untargeted)).contains(&crate::gaps::data::SEQUENCE));
    }

    #[test]
    fn an_out_of_memory_report_without_lengths_is_judged_at_the_smallest() {
        use crate::evaluate::{Outcome, evaluate};
        // t5-3b fully fine-tuned with AdamW in fp32 needs about 45 GiB of states before any
        // activation: out of memory on 24 GiB at any length, so the report is decided.
        let report = |gpu: &str| {
            qwen_point(&format!(
                r#"{{"workload": "training_full", "model": "t5-3b", "finetune_method": null,
                    "framework": "transformers Trainer", "weight_precision": "fp32",
                    "compute_dtype": "fp16", "seq_len": null, "output_tokens": null,
                    "activation_checkpointing": false, "gpu_type": "{gpu}",
                    "measured_kind": "oom", "value": null}}"#
            ))
        };
        let small = report("RTX 3090 24GB");
        let expressed = express(&small).unwrap_or_else(|gaps| panic!("{gaps:?}"));
        assert!(expressed.source.contains("sequence      1 tokens"), "{}", expressed.source);
        assert!(labels(&Ok(expressed.clone())).contains(&crate::gaps::assume::LOWER_BOUND));
        let Outcome::Verdict(verdict) = evaluate(&small, Ok(expressed)).outcome else {
            panic!("an out-of-memory report that even the smallest lengths explain is decided")
        };
        assert!(verdict.agrees(), "{verdict:?}");
        // On one H200 (141 GB) the smallest lengths fit: undecided, not a
        // disagreement, and listed under the lengths it lacks.
        let large = report("H200 141GB");
        let outcome = evaluate(&large, express(&large)).outcome;
        let Outcome::Unexpressed(gaps) = outcome else { panic!("undecided: {outcome:?}") };
        assert!(gaps.iter().all(|g| g.label == crate::gaps::data::SEQUENCE), "{gaps:?}");
        // A measured peak without its length stays a gap: a lower bound compares with nothing.
        let peak = qwen_point(r#"{"seq_len": null}"#);
        assert!(labels(&express(&peak)).contains(&crate::gaps::data::SEQUENCE));
    }

    /// Diffusion pipelines named in their usual spellings; each generated file must check.
    #[test]
    fn common_diffusion_pipelines_are_expressed() {
        let cases = [
            (
                "stabilityai/stable-diffusion-xl-base-1.0",
                "fp16",
                "1024x1024, 30 steps",
                "sdxl-unet",
            ),
            ("runwayml/stable-diffusion-v1-5", "float32", "512x512", "sd14-unet"),
            (
                "black-forest-labs/FLUX.1-schnell",
                "bf16",
                "1024x1024, 4 steps",
                "flux1-dev-transformer",
            ),
            ("Flux-dev", "bf16", "1024x1024, 28 steps", "flux1-dev-transformer"),
            ("flux schnell", "bf16", "1024x1024, 4 steps", "flux1-dev-transformer"),
        ];
        for (model, dtype, image, denoiser) in cases {
            let point = qwen_point(&format!(
                r#"{{"workload": "diffusion_inference", "model": "{model}",
                    "framework": "diffusers 0.30", "weight_precision": "{dtype}",
                    "quantization": null, "compute_dtype": "{dtype}", "image_or_video": "{image}",
                    "gpu_type": "NVIDIA A10G", "finetune_method": null, "optimizer": null,
                    "seq_len": null, "activation_checkpointing": null,
                    "measurement_method": "torch.cuda.max_memory_allocated()"}}"#
            ));
            let expressed = express(&point).unwrap_or_else(|gaps| panic!("{model}: {gaps:?}"));
            assert!(expressed.source.contains(&format!("denoiser      {denoiser}")), "{model}");
            let outcome = vram_core::evaluate(&expressed.source);
            let errors: Vec<_> = outcome.diagnostics.iter().filter(|d| d.is_error()).collect();
            assert!(errors.is_empty(), "{model}: {errors:?}");
            if denoiser == "sdxl-unet" {
                // SDXL's pipeline upcasts its fp16 VAE for the decode (force_upcast).
                assert!(expressed.source.contains("vae_upcast    true"));
                assert!(expressed.source.contains("transformer_layers 0 2 10"));
            }
        }
    }

    #[test]
    fn a_model_without_a_config_is_declared_from_the_points_fields() {
        let point = qwen_point(
            r#"{"workload": "training_full", "model": "internlm/internlm2-7b",
                "finetune_method": "full fine-tune", "param_count": "7.7B", "layers": 32,
                "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8,
                "vocab_size": 92544}"#,
        );
        let expressed = express(&point).expect("expressible");
        assert!(expressed.source.contains("model data-internlm27b {"), "{}", expressed.source);
        assert!(expressed.source.contains("model   data-internlm27b"));
        assert!(labels(&Ok(expressed)).contains(&assume::SHAPE_FROM_DATA));
        // A mixture of experts written as a dense count would misplace its experts.
        let moe = qwen_point(
            r#"{"workload": "training_full", "model": "some/moe-16b", "param_count": "16B",
                "layers": 28, "hidden_size": 2048, "attention_heads": 16, "vocab_size": 102400,
                "arch_notes": "MoE, 64 experts"}"#,
        );
        assert!(labels(&express(&moe)).contains(&crate::gaps::data::MODEL_CONFIG));
    }

    #[test]
    fn saved_modules_under_deepspeed_keep_an_fp32_master() {
        let point = qwen_point(
            r#"{"finetune_method": "LoRA r=64 + trainable wte and lm_head = 'LoRA (emb)'",
                "zero_stage": 2}"#,
        );
        let expressed = express(&point).expect("expressible");
        assert!(expressed.source.contains("modules_to_save embeddings head"));
        assert!(expressed.source.contains("sharding      zero2"));
        assert!(expressed.source.contains("master        fp32"));
        assert!(expressed.source.contains("bucket_elements 200_000_000"));
        let found = labels(&Ok(expressed));
        assert!(found.contains(&assume::DEEPSPEED_STATES));
        assert!(found.contains(&assume::DEEPSPEED_ADAPTERS));
    }

    #[test]
    fn saved_modules_without_deepspeed_train_in_pure_bf16() {
        let point = qwen_point(
            r#"{"finetune_method": "LoRA r=64 + trainable wte and lm_head = 'LoRA (emb)'"}"#,
        );
        let expressed = express(&point).expect("expressible");
        assert!(expressed.source.contains("modules_to_save embeddings head"));
        assert!(expressed.source.contains("master        none"));
        assert!(!expressed.source.contains("sharding"));
        assert!(labels(&Ok(expressed)).contains(&assume::SCRIPT_SETTING));
    }

    #[test]
    fn pure_bf16_in_the_precision_keeps_no_master_copy() {
        let point = qwen_point(
            r#"{"workload": "training_full", "finetune_method": "full fine-tune",
                "framework": "custom PyTorch loop", "optimizer": "AdamW",
                "weight_precision": "bf16 (pure bf16 training, no fp32 master weights)"}"#,
        );
        let expressed = express(&point).expect("expressible");
        assert!(expressed.source.contains("master        none"), "{}", expressed.source);
    }

    #[test]
    fn qlora_on_gptq_with_zero2() {
        let point = qwen_point(
            r#"{"finetune_method": "Q-LoRA r=64 on GPTQ-Int4 base, fp16, DeepSpeed ZeRO-2",
                "zero_stage": 2, "workload": "training_qlora", "compute_dtype": "fp16",
                "weight_precision": "int4 (GPTQ)", "quantization": "GPTQ 4-bit (not NF4)"}"#,
        );
        let expressed = express(&point).expect("expressible");
        assert!(expressed.source.contains("weights       gptq-int4"));
        assert!(!expressed.source.contains("modules_to_save"));
        assert!(labels(&Ok(expressed)).contains(&assume::SCRIPT_SETTING));
    }

    #[test]
    fn full_training_with_offloaded_optimizer_offloads() {
        let point = qwen_point(
            r#"{"workload": "training_full", "finetune_method": "full fine-tune",
                "zero_stage": 2, "offload": "ZeRO-Offload (optimizer to CPU)"}"#,
        );
        let expressed = express(&point).expect("expressible");
        assert!(expressed.source.contains("sharding      zero2"));
        assert!(expressed.source.contains("offload       optimizer"));
    }

    #[test]
    fn qwen_int8_cache() {
        let point = qwen_point(
            r#"{"workload": "llm_inference", "model": "Qwen/Qwen-7B-Chat",
                "framework": "Hugging Face transformers", "seq_len": null,
                "output_tokens": 1024, "input_tokens": "not stated (short)",
                "kv_cache_dtype": "int8 KV cache (use_cache_quantization=True)"}"#,
        );
        let expressed = express(&point).expect("expressible");
        assert!(expressed.source.contains("kv_cache int8-token"));
        assert!(expressed.source.contains("cache_layout tuple"));
        assert!(labels(&Ok(expressed)).contains(&assume::TUPLE_CACHE));
    }

    /// A Llama 2 7B point of another source, with `changes` applied.
    fn llama_point(changes: &str) -> Point {
        let defaults = serde_json::json!({
            "id": "U-001", "source_id": "U", "workload": "llm_inference",
            "model": "meta-llama/Llama-2-7b-hf", "framework": "transformers",
            "weight_precision": "fp16", "quantization": "none", "batch_size": 1, "num_gpus": 1,
            "gpu_type": "A100 80GB", "measurement_method": "torch.cuda.max_memory_allocated",
            "measured_kind": "peak", "value": 14.0, "unit": "GB", "quality": "B"
        });
        test_point(defaults, changes)
    }

    #[test]
    fn a_prompt_without_generated_tokens_is_the_context() {
        let expressed = express(&llama_point(r#"{"input_tokens": "512"}"#)).expect("expressible");
        assert!(expressed.source.contains("context  512 tokens"), "{}", expressed.source);
        assert!(labels(&Ok(expressed)).contains(&assume::PROMPT_ONLY));
        // llama.cpp allocates its cache for the window it is given, whatever the prompt.
        let ggml = llama_point(
            r#"{"framework": "llama.cpp", "weight_precision": "Q4_K_M", "input_tokens": "512",
                "quantization": "GGUF Q4_K_M", "other_settings": "-c 4096, -ngl 99"}"#,
        );
        let expressed = express(&ggml).expect("expressible");
        assert!(expressed.source.contains("context  4096 tokens"), "{}", expressed.source);
    }

    #[test]
    fn a_rank_without_targets_takes_the_tools_defaults() {
        let point = |framework: &str| {
            llama_point(&format!(
                r#"{{"workload": "training_lora", "framework": "{framework}",
                    "finetune_method": "LoRA r=16", "optimizer": "adamw_torch",
                    "seq_len": 512, "activation_checkpointing": true}}"#
            ))
        };
        let peft = express(&point("TRL SFTTrainer + PEFT")).expect("expressible");
        assert!(peft.source.contains("targets q v\n"), "{}", peft.source);
        let unsloth = express(&point("Unsloth")).expect("expressible");
        assert!(unsloth.source.contains("targets all\n"), "{}", unsloth.source);
        assert!(labels(&Ok(unsloth)).contains(&assume::RUNTIME_DEFAULT));
    }

    #[test]
    fn stable_diffusion_3_without_t5_loads_two_encoders() {
        let point = |settings: &str| {
            llama_point(&format!(
                r#"{{"workload": "diffusion_inference",
                    "model": "stabilityai/stable-diffusion-3-medium-diffusers",
                    "framework": "diffusers", "image_or_video": "1024x1024",
                    "other_settings": "{settings}"}}"#
            ))
        };
        let without =
            express(&point("text_encoder_3=None, tokenizer_3=None")).expect("expressible");
        assert!(
            without.source.contains("text_encoders clip-l-text clip-g-text\n"),
            "{}",
            without.source
        );
        let with = express(&point("28 steps")).expect("expressible");
        assert!(with.source.contains("t5-xxl-encoder"), "{}", with.source);
    }
}
