//! The harness on the real data set: every point is accounted for, every generated source checks,
//! and the report covers every workload kind. Accuracy figures are not asserted: they are what
//! the benchmark measures, not what it must be.

use std::collections::BTreeSet;
use std::path::Path;

use vram_accuracy::data::{self, Point};
use vram_accuracy::evaluate::Outcome;
use vram_accuracy::gaps::GapKind;
use vram_accuracy::report::{self, counts};
use vram_accuracy::{Run, run};

/// The data set beside the workspace, as CI has it.
fn points() -> Vec<Point> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/measured-peaks.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} must exist beside the workspace: {e}", path.display()));
    data::parse(&text).expect("measured-peaks.json parses")
}

fn harness() -> (Vec<Point>, Run) {
    let points = points();
    let run = run(&points);
    (points, run)
}

#[test]
fn every_point_is_evaluated_or_has_a_reason() {
    let (points, run) = harness();
    every_point_is_accounted_for(&points, &run);
}

/// The runtime logs posted in GitHub issues (`data/published-logs.json`), a second data set
/// written in the same schema: every point is compared or says why not, and every generated
/// source checks. Its errors are what `vram-accuracy data/published-logs.json` measures, not
/// asserted here.
#[test]
fn published_logs_are_evaluated_or_have_a_reason() {
    let points = data::parse(include_str!("../data/published-logs.json")).expect("the file parses");
    assert!(points.len() >= 5, "the logs data set has {} points", points.len());
    let run = run(&points);
    every_point_is_accounted_for(&points, &run);
    assert_eq!(counts(&run).harness_errors, 0, "generated sources that do not check");
    for point in &points {
        assert!(!point.id.is_empty() && !point.source_id.is_empty(), "a point without ids");
    }
}

/// Framework and model documentation tables (`data/published-tables.json`: torchtune's memory
/// levers on Llama 3.2 3B, the Qwen2, Qwen2.5 and Qwen3 speed benchmarks' transformers rows), a third data set in
/// the same schema: every point is compared or says why not, and every generated source checks.
#[test]
fn published_tables_are_evaluated_or_have_a_reason() {
    let points =
        data::parse(include_str!("../data/published-tables.json")).expect("the file parses");
    assert!(points.len() >= 281, "the tables data set has {} points", points.len());
    let run = run(&points);
    every_point_is_accounted_for(&points, &run);
    let c = counts(&run);
    assert_eq!(c.harness_errors, 0, "generated sources that do not check");
    assert!(c.compared >= 273, "only {} of the tables' rows compared", c.compared);
    // Every speed-benchmark row is compared, those of 72B that span two or three GPUs as the
    // sum of their peaks that the script adds up.
    let speed = run
        .results
        .iter()
        .filter(|r| r.id.starts_with("T02-") && matches!(r.outcome, Outcome::Compared(_)))
        .count();
    assert_eq!(speed, 112, "every speed-benchmark row compared");
    // Unsloth's longest contexts that fit under Hugging Face + FA2 QLoRA: each must fit.
    let boundaries: Vec<_> = run.results.iter().filter(|r| r.id.starts_with("T05-")).collect();
    assert_eq!(boundaries.len(), 7);
    for result in boundaries {
        let Outcome::Verdict(verdict) = &result.outcome else {
            panic!("{} is not a verdict: {:?}", result.id, result.outcome)
        };
        assert!(verdict.estimate_fits, "{}: {verdict:?}", result.id);
    }
}

/// Every point is compared, checked as a verdict, or unexpressed with reasons that say why,
/// and the rules read every wording of the data set (a new wording is a rule to add).
fn every_point_is_accounted_for(points: &[Point], run: &Run) {
    assert_eq!(run.results.len(), points.len());
    for (point, result) in points.iter().zip(&run.results) {
        assert_eq!(point.id, result.id, "results keep the file's order");
        if let Outcome::Unexpressed(gaps) = &result.outcome {
            assert!(!gaps.is_empty(), "{}: unexpressed without a reason", point.id);
            for gap in gaps {
                assert!(!gap.detail.trim().is_empty(), "{}: a reason without detail", point.id);
            }
        }
    }
    let c = counts(run);
    assert_eq!(c.compared + c.verdicts + c.unexpressed + c.harness_errors, c.points);
    let unreadable: Vec<String> = run
        .results
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Unexpressed(gaps) => Some(
                gaps.iter()
                    .filter(|g| g.label == vram_accuracy::gaps::data::UNREADABLE)
                    .map(|g| format!("{}: {}", r.id, g.detail))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(unreadable.is_empty(), "wordings the rules do not read: {unreadable:#?}");
}

#[test]
fn no_generated_source_has_input_errors() {
    let (_, run) = harness();
    let errors: Vec<String> = run
        .results
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::HarnessError { diagnostics, source } => {
                Some(format!("{}: {}\n{source}", r.id, diagnostics.join("; ")))
            }
            _ => None,
        })
        .collect();
    assert!(errors.is_empty(), "generated sources that do not check:\n{}", errors.join("\n"));
    // Warnings would mean the harness writes something the language frowns on.
    for result in &run.results {
        let source = match &result.outcome {
            Outcome::Compared(c) => &c.source,
            Outcome::Verdict(v) => &v.source,
            Outcome::Unexpressed(_) | Outcome::HarnessError { .. } => continue,
        };
        let outcome = vram_core::evaluate(source);
        let warnings: Vec<_> = outcome.diagnostics.iter().map(|d| &d.message).collect();
        assert!(warnings.is_empty(), "{}: {warnings:?}", result.id);
        // The source is in the language's canonical layout's reach: it formats without errors.
        assert!(vram_core::format::format(source).is_ok(), "{} does not format", result.id);
    }
}

#[test]
fn the_data_set_has_points_of_each_outcome() {
    let (_, run) = harness();
    let c = counts(&run);
    // Smoke checks that the harness is wired up: some points compare, some are verdicts, some
    // are listed with the data they lack. No point of this data set lacks a language feature
    // any more (video diffusion was the last).
    assert!(c.compared > 0 && c.verdicts > 0 && c.unexpressed > 0);
    let kinds: BTreeSet<GapKind> = report::gap_groups(&run).iter().map(|g| g.kind).collect();
    assert!(kinds.contains(&GapKind::Data));
    assert!(!kinds.contains(&GapKind::Feature), "a point lacks a feature: {kinds:?}");
}

#[test]
fn the_report_has_a_row_per_workload_kind() {
    let (points, run) = harness();
    let kinds: BTreeSet<&str> = points.iter().map(|p| p.workload.as_str()).collect();
    let (rows, overall) = vram_accuracy::stats::summary(&run);
    let row_kinds: BTreeSet<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(row_kinds, kinds);
    assert_eq!(overall.points, points.len());
    assert_eq!(rows.iter().map(|r| r.points).sum::<usize>(), points.len());

    let text = report::text::render(&run, "data");
    let page = report::markdown::render(&run, &run, &points, "data");
    for kind in &kinds {
        assert!(text.lines().any(|l| l.starts_with(kind)), "text report lacks a row for {kind}");
        assert!(page.contains(&format!("| {kind} |")), "docs lack a row for {kind}");
    }
    assert!(page.contains(vram_accuracy::REGENERATE), "docs say how to regenerate them");
    // Every unexpressed point is listed on the page with its reasons.
    for result in &run.results {
        if matches!(result.outcome, Outcome::Unexpressed(_)) {
            assert!(
                page.contains(&format!("| {} |", result.id)),
                "{} missing from docs",
                result.id
            );
        }
    }
}

#[test]
fn evaluation_is_deterministic() {
    let (points, first) = harness();
    let second = run(&points);
    assert_eq!(
        report::markdown::render(&first, &first, &points, "data"),
        report::markdown::render(&second, &second, &points, "data")
    );
}

#[test]
fn peaks_are_compared_with_a_band_around_their_estimate() {
    let (_, run) = harness();
    for result in &run.results {
        let Outcome::Compared(c) = &result.outcome else { continue };
        let peak = matches!(c.target, vram_accuracy::target::Target::Peak { .. });
        assert_eq!(c.band.is_some(), peak, "{}: peaks have a band, components none", result.id);
        if let Some([low, high]) = c.band {
            assert!(
                low <= c.estimate && c.estimate <= high,
                "{}: band excludes estimate",
                result.id
            );
        }
    }
}

/// The core's measured band margins are the current fit over the dev set and the project's
/// checks, rounded up to the next 10 ‰: a change to the model that moves the errors must refit
/// them (`vram-accuracy --fit-bands`).
#[test]
fn band_margins_in_the_core_are_the_current_fit() {
    let all = vram_accuracy::bands::all_points(points()).expect("the checks parse");
    assert!(all.len() > points().len() + 200, "the checks are in the fit");
    let run = run(&all);
    for fit in vram_accuracy::bands::fit(&run) {
        assert!(fit.peaks >= 20, "{:?}: a fit needs many points, has {}", fit.basis, fit.peaks);
        let rounded = |v: u64| v.div_ceil(10) * 10;
        assert_eq!(
            fit.core,
            (rounded(fit.below), rounded(fit.above)),
            "{:?}: refit the band margins in crates/core/src/eval/band.rs",
            fit.basis
        );
    }
}

/// Points worded as other data sets word them (`tests/unseen-wordings.json`: real models, GPUs,
/// frameworks and settings, spelled as this data set never spells them; the measured values are
/// illustrative and not compared with anything): every one is expressed and its source checks.
/// The rules read words, not the sentences of `measured-peaks.json`.
#[test]
fn points_in_other_wordings_are_expressed() {
    let points = data::parse(include_str!("unseen-wordings.json")).expect("the file parses");
    let run = run(&points);
    assert_eq!(run.results.len(), 78);
    // A transformers named in the framework itself, at 4.45, keeps only the last position's
    // logits; Axolotl's `lora_target_linear` and Unsloth's short names adapt every projection.
    let source = |id: &str| {
        let point = points.iter().find(|p| p.id == id).expect("the point is in the file");
        vram_accuracy::express::express(point).expect("expressed").source
    };
    assert!(!source("U-015").contains("    logits   all"), "{}", source("U-015"));
    assert!(source("U-016").contains("targets all"), "{}", source("U-016"));
    assert!(source("U-017").contains("targets all"), "{}", source("U-017"));
    assert!(source("U-018").contains("resolution    1024 x 1024"), "{}", source("U-018"));
    // The serving engines, with the share the command line gives.
    assert!(source("U-019").contains("runtime sglang"), "{}", source("U-019"));
    assert!(source("U-019").contains("memory_fraction 85 %"), "{}", source("U-019"));
    assert!(source("U-020").contains("runtime tgi"), "{}", source("U-020"));
    // llama.cpp's window from its command line (`-c`), not the prompt it was given.
    assert!(source("U-021").contains("context  8192 tokens"), "{}", source("U-021"));
    // A rank without modules: PEFT's own defaults; LLaMA-Factory's `all` after the rank.
    assert!(source("U-022").contains("targets q v\n"), "{}", source("U-022"));
    assert!(source("U-022").contains("objective     dpo"), "{}", source("U-022"));
    assert!(source("U-026").contains("targets all"), "{}", source("U-026"));
    // Stable Diffusion 3 loaded with `text_encoder_3=None`.
    assert!(
        source("U-023").contains("text_encoders clip-l-text clip-g-text\n"),
        "{}",
        source("U-023")
    );
    // FSDP-QLoRA's tool is PyTorch; the parameters go to the CPU with FSDP's offload.
    assert!(source("U-025").contains("runtime pytorch"), "{}", source("U-025"));
    // A pooling server's "KV cache" is its pool.
    let pooled = run.results.iter().find(|r| r.id == "U-024").expect("U-024 was run");
    let Outcome::Compared(pooled) = &pooled.outcome else { panic!("U-024: {:?}", pooled.outcome) };
    assert!(pooled.estimate < 80.0 * 1024f64.powi(3), "the pool fits the GPU: {}", pooled.estimate);
    // nvidia-smi beside vLLM reads the share of the GPU it took (95 % of an RTX 4090's 23.99
    // GiB), not the 256 default sessions' full-length caches.
    let whole = run.results.iter().find(|r| r.id == "U-027").expect("U-027 was run");
    let Outcome::Compared(whole) = &whole.outcome else { panic!("U-027: {:?}", whole.outcome) };
    let share = 0.95 * 23.99 * 1024f64.powi(3);
    assert!((whole.estimate - share).abs() < 0.05 * share, "{} vs {share}", whole.estimate);
    let [low, high] = whole.band.expect("a peak has a band");
    assert!(low < whole.estimate && whole.estimate < high && high < 1.5 * share, "{low}..{high}");
    // A GeForce card named without its memory; pre-training as a full fine-tune; the diffusers
    // scripts' `--use_8bit_adam`.
    assert!(source("U-028").contains("check point on gpu-12gb"), "{}", source("U-028"));
    assert!(source("U-029").contains("method        full"), "{}", source("U-029"));
    // fp32 weights computing in bf16 ("bf16 autocast", no word "mixed") run under autocast.
    assert!(source("U-029").contains("activations   bf16"), "{}", source("U-029"));
    assert!(source("U-030").contains("optimizer     adamw-8bit"), "{}", source("U-030"));
    // llama.cpp's log lines by their own names; before FlashAttention became its default the
    // graph holds every head's scores over the 8,192-cell cache (512 MiB of the 560).
    let compared = |id: &str| {
        let result = run.results.iter().find(|r| r.id == id).expect("the point was run");
        match &result.outcome {
            Outcome::Compared(c) => c.clone(),
            other => panic!("{id}: {other:?}"),
        }
    };
    assert_eq!(compared("U-031").target.label(), "component: KV cache");
    assert!(source("U-032").contains("attention eager"), "{}", source("U-032"));
    assert!(compared("U-032").estimate > 512.0 * 1024.0 * 1024.0);
    // Pools logged in blocks and tokens are compared in tokens: 27,000 blocks of 16.
    let blocks = compared("U-033");
    assert_eq!(
        (blocks.target.label().as_str(), blocks.measured),
        ("component: KV pool tokens", 432_000.0)
    );
    assert_eq!(compared("U-034").target.label(), "component: CUDA graphs");
    assert_eq!(compared("U-035").target.label(), "component: KV pool tokens");
    // A pooling server's peak without a stated context; an 8k prompt.
    assert!(matches!(compared("U-036").target, vram_accuracy::target::Target::Peak { .. }));
    assert!(source("U-037").contains("context  8192 tokens"), "{}", source("U-037"));
    // Megatron's degrees together; a 16-bit model the Trainer trains as it is (no fp32 copy),
    // GaLore's layerwise 8-bit step included; an H800 as the H100 it is.
    assert!(source("U-038").contains("split tensor 8 pipeline 2"), "{}", source("U-038"));
    for id in ["U-039", "U-040"] {
        assert!(source(id).contains("master        none"), "{}", source(id));
    }
    assert!(source("U-041").contains("h100-sxm-80gb"), "{}", source("U-041"));
    // torchao's FP8 weight-only on an A100 (no FP8 compute) stores FP8 and casts per layer; a
    // GGUF denoiser with no compute type beside it takes the pipeline's documented bf16.
    assert!(source("U-042").contains("denoiser_weights fp8-layerwise"), "{}", source("U-042"));
    assert!(source("U-043").contains("weights       bf16"), "{}", source("U-043"));
    // Cache types and parallel slots from command lines and environments: llama.cpp's `-c
    // 16384 -np 4 --cache-type-k q8_0` is four slots of 4,096 cells; Ollama's
    // `OLLAMA_NUM_PARALLEL=4` gives each of four requests its `num_ctx`.
    for (id, context) in [("U-044", 4096), ("U-045", 8192)] {
        let written = source(id);
        assert!(written.contains("kv_cache q8_0"), "{written}");
        assert!(written.contains(&format!("context  {context} tokens")), "{written}");
        assert!(written.contains("sessions 4"), "{written}");
    }
    assert_eq!(compared("U-046").target.label(), "component: KV pool tokens");
    // Four beams are four sequences; EETQ's int8; transformers' HQQ-backed quantized cache; the
    // allocator's count read after generation is what stays allocated.
    assert!(source("U-047").contains("sessions 4"), "{}", source("U-047"));
    assert!(source("U-048").contains("weights  int8"), "{}", source("U-048"));
    assert!(source("U-049").contains("kv_cache quanto-int4"), "{}", source("U-049"));
    assert_eq!(compared("U-050").target.label(), "at rest");
    // FLUX.1 Kontext's reference image joins the sequence; FLUX.1 Fill is FLUX.1-dev's shape.
    assert!(source("U-051").contains("text_tokens   4608 tokens"), "{}", source("U-051"));
    assert!(source("U-052").contains("denoiser      flux1-dev-transformer"), "{}", source("U-052"));
    // llama.cpp's layers on the GPU, from its command line (`-ngl`, `--n-gpu-layers`) or
    // Ollama's load log (`offloaded 28/33 layers`); the rest in host memory, out of the peak.
    // Its window sizes the cache whatever the prompt and output were.
    for (id, layers, window) in [("U-053", 40, 8192), ("U-054", 28, 4096), ("U-055", 24, 4096)] {
        let written = source(id);
        assert!(written.contains(&format!("gpu_layers {layers} ")), "{written}");
        assert!(written.contains(&format!("context  {window} tokens")), "{written}");
    }
    let all = |id: &str| source(id).replace("gpu_layers", "# gpu_layers");
    // A mixture of experts' routed experts in host memory: `--n-cpu-moe 24`, and every layer's
    // by `-ot ".ffn_.*_exps.=CPU"` or `--cpu-moe`.
    assert!(source("U-056").contains("cpu_moe_layers 24 "), "{}", source("U-056"));
    // gpt-oss's MXFP4 is its experts' format alone.
    assert!(source("U-056").contains("quantized_matrices mlp"), "{}", source("U-056"));
    for id in ["U-057", "U-058"] {
        assert!(source(id).contains("cpu_moe_layers 999 "), "{}", source(id));
    }
    let used = |source: &str| vram_core::evaluate(source).budget.checks[0].devices[0].used.0;
    let (partial, whole) = (used(&source("U-053")), used(&all("U-053")));
    assert!(partial * 10 < whole * 6, "{partial} B with 40 of 80 layers, {whole} B with all");
    for (point, result) in points.iter().zip(&run.results) {
        assert!(
            matches!(result.outcome, Outcome::Compared(_)),
            "{} is not compared: {:?}",
            point.id,
            result.outcome
        );
    }
    // HunyuanVideo's own script in its README's spelling, with sequential offload; Wan 2.2's
    // two experts one at a time; Qwen-Image's single frame through Wan 2.1's decoder.
    let hunyuan = source("U-059");
    assert!(hunyuan.contains("resolution    960 x 544"), "{hunyuan}");
    assert!(hunyuan.contains("offload       sequential"), "{hunyuan}");
    assert!(source("U-060").contains("denoiser_experts 2"), "{}", source("U-060"));
    assert!(source("U-060").contains("resolution    1280 x 720"), "{}", source("U-060"));
    assert!(source("U-061").contains("video_frames  1"), "{}", source("U-061"));
    // Front ends over llama.cpp name the window their own way.
    assert!(source("U-062").contains("runtime llama.cpp"), "{}", source("U-062"));
    assert!(source("U-062").contains("context  8192 tokens"), "{}", source("U-062"));
    assert!(source("U-063").contains("context  4096 tokens"), "{}", source("U-063"));
    // Training tools on PyTorch's FSDP and ZeRO-3.
    assert!(source("U-064").contains("runtime pytorch"), "{}", source("U-064"));
    assert!(source("U-064").contains("split data 8"), "{}", source("U-064"));
    assert!(source("U-065").contains("runtime pytorch"), "{}", source("U-065"));
    // An offload call among the other settings, not in the `offload` field.
    assert!(source("U-066").contains("offload       model"), "{}", source("U-066"));
    assert!(source("U-066").contains("vae_tiling    true"), "{}", source("U-066"));
    // bitsandbytes named in the precision alone; sampled sequences expand the batch.
    assert!(source("U-067").contains("weights  int8"), "{}", source("U-067"));
    assert!(source("U-067").contains("sessions 8"), "{}", source("U-067"));
    // A server's parallelism flags among the other settings.
    assert!(source("U-068").contains("split tensor 2 data 2"), "{}", source("U-068"));
    // vLLM's --enforce-eager turns CUDA graphs off, not its attention kernels.
    assert!(!source("U-069").contains("attention eager"), "{}", source("U-069"));
    assert!(source("U-069").contains("max_sequences 64"), "{}", source("U-069"));
    // Ollama sizes its cache for its default window, not for the prompt and output; its tags
    // name the model by a colon, and its `deepseek-r1` sizes are the distills.
    assert!(source("U-070").contains("model   llama3.1-8b"), "{}", source("U-070"));
    assert!(source("U-070").contains("context  2048 tokens"), "{}", source("U-070"));
    // Ollama 0.3 loads four contexts where four fit, as an 8B Q4_K_M at 2,048 tokens does on a
    // 12 GB card.
    assert!(source("U-070").contains("sessions 4"), "{}", source("U-070"));
    assert!(source("U-071").contains("model   qwen2.5-14b"), "{}", source("U-071"));
    assert!(source("U-071").contains("context  32768 tokens"), "{}", source("U-071"));
    // A training config's keys among the settings (axolotl's, LLaMA-Factory's).
    for expected in ["rank    32", "targets all", "micro_batch   2", "sequence      4096 tokens"] {
        assert!(source("U-072").contains(expected), "{expected}: {}", source("U-072"));
    }
    assert!(source("U-072").contains("checkpointing full"), "{}", source("U-072"));
    for expected in ["rank    8", "targets all", "sequence      2048 tokens", "checkpointing none"]
    {
        assert!(source("U-073").contains(expected), "{expected}: {}", source("U-073"));
    }
    // vLLM's stated step with chunked prefill, and transformers' static cache allocated whole.
    assert!(source("U-074").contains("prefill_chunk 2048 tokens"), "{}", source("U-074"));
    assert!(source("U-075").contains("context  4096 tokens"), "{}", source("U-075"));
    // Megatron's distributed optimizer (ZeRO-1's split, no DeepSpeed buckets) and its sequence
    // parallelism.
    for expected in ["sharding      zero1", "bucket_elements 1", "sequence_parallel true"] {
        assert!(source("U-076").contains(expected), "{expected}: {}", source("U-076"));
    }
    // A format named only by the model: a GGUF file's type, a GPTQ upload.
    assert!(source("U-077").contains("weights  q4_k_m"), "{}", source("U-077"));
    assert!(source("U-078").contains("weights  gptq-int4"), "{}", source("U-078"));
}

/// A point that ran a precision its device cannot run as the language models it (FP8 weights
/// under transformers on an A100, whose FP8 fallback the language does not model) is
/// unexpressed for that feature, never a harness error.
#[test]
fn a_precision_the_device_cannot_run_is_a_feature_gap() {
    let text = r#"[{"id": "C-1", "workload": "llm_inference", "model": "meta-llama/Llama-3.1-8B",
        "framework": "transformers", "weight_precision": "fp8", "gpu_type": "A100 80GB",
        "input_tokens": "512", "output_tokens": 128, "batch_size": 1,
        "measured_kind": "peak", "value": 10, "unit": "GB", "measurement_method": "nvidia-smi"}]"#;
    let points = data::parse(text).expect("the file parses");
    let run = run(&points);
    let Outcome::Unexpressed(gaps) = &run.results[0].outcome else {
        panic!("{:?}", run.results[0].outcome)
    };
    assert_eq!(gaps[0].kind, GapKind::Feature, "{gaps:?}");
    assert!(gaps[0].detail.contains("cannot run fp8"), "{gaps:?}");
}

/// Malformed data (a shape past any model's, a batch of a hundred trillion, zero counts, a value
/// that is not a number, entries that are not points) is reported point by point: no panic,
/// no harness error, every point accounted for.
#[test]
fn malformed_points_are_reported_not_fatal() {
    let text = r#"{"points": [
        {"id": "W-1", "workload": "llm_inference", "model": "x/unknown-1b", "param_count": "1B",
         "layers": 99999999999, "hidden_size": 4096, "attention_heads": 32, "vocab_size": 32000,
         "framework": "transformers", "weight_precision": "bf16", "gpu_type": "A100 80GB",
         "measured_kind": "peak", "value": 1, "unit": "GB", "measurement_method": "nvidia-smi"},
        {"id": "W-2", "workload": "llm_inference", "model": "meta-llama/Llama-3.1-8B",
         "framework": "transformers", "weight_precision": "bf16", "gpu_type": "A100 80GB",
         "measured_kind": "peak", "value": 20, "unit": "GB", "measurement_method": "nvidia-smi",
         "batch_size": 99999999999999, "input_tokens": "99999999999999",
         "output_tokens": 18446744073709551615},
        {"id": "W-3", "workload": "training_full", "model": "meta-llama/Llama-3.1-8B",
         "framework": "Trainer", "weight_precision": "bf16", "gpu_type": "A100 80GB",
         "measured_kind": "peak", "value": "abc", "unit": "GB", "measurement_method": "nvidia-smi",
         "batch_size": 0, "seq_len": 0, "num_gpus": 0},
        5, "text", null]}"#;
    let points = data::parse(text).expect("the file parses");
    assert_eq!(points.len(), 3, "entries that are not objects are not points");
    let run = run(&points);
    for result in &run.results {
        assert!(
            matches!(result.outcome, Outcome::Unexpressed(_)),
            "{}: {:?}",
            result.id,
            result.outcome
        );
    }
}
