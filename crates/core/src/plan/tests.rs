//! Property tests of the planner: over many generated workloads, every answer is checked by
//! evaluating an independently written file (the answer substituted into the text, parsed and
//! checked from scratch): it fits at the answer, and does not one step beyond.

use super::search::Boundary;
use super::{Knob, Planner};
use crate::hir::Layered;

/// A small deterministic generator (SplitMix64), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[usize::try_from(self.next() % items.len() as u64).unwrap_or(0)]
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

const MODELS: [&str; 6] =
    ["llama3.1-8b", "mistral-7b", "qwen2.5-7b", "llama3.2-3b", "qwen2.5-14b", "gemma2-9b"];
const DEVICES: [&str; 6] = ["l4", "a10", "l40s", "rtx-4090", "a100-40gb", "h100-sxm-80gb"];

fn inference_source(
    model: &str,
    runtime: &str,
    weights: &str,
    context: u64,
    sessions: u64,
    target: &str,
) -> String {
    format!(
        "workload w {{\n  model {model}\n  runtime {runtime}\n  inference {{\n    weights {weights}\n    context {context} tokens\n    sessions {sessions}\n  }}\n}}\ncheck w on {target}\n"
    )
}

fn training_source(model: &str, micro_batch: u64, sequence: u64, target: &str) -> String {
    format!(
        "workload w {{\n  model {model}\n  runtime pytorch\n  training {{\n    method lora {{\n      rank 16\n      targets all\n    }}\n    weights bf16\n    optimizer adamw\n    micro_batch {micro_batch}\n    sequence {sequence} tokens\n    checkpointing full\n  }}\n}}\ncheck w on {target}\n"
    )
}

fn checked(source: &str) -> Layered<'static> {
    let (file, diagnostics) = crate::syntax::parse(source);
    assert!(diagnostics.is_empty(), "{diagnostics:?}\n{source}");
    let (program, diagnostics) = crate::check::check(&file, crate::catalog::builtin(), false);
    assert!(
        !diagnostics.iter().any(crate::diagnostic::Diagnostic::is_error),
        "{diagnostics:?}\n{source}"
    );
    program
}

/// Whether the file's one check fits, evaluated from text as a user would.
fn fits(source: &str) -> bool {
    let outcome = crate::evaluate(source);
    assert!(
        !outcome.diagnostics.iter().any(|d| d.is_error() && d.code != "E040"),
        "{:?}\n{source}",
        outcome.diagnostics
    );
    outcome.budget.checks.iter().all(|c| c.verdict.fits())
}

#[test]
fn max_sessions_and_context_are_the_true_boundary() {
    let mut rng = Rng(7);
    let mut answers = 0;
    for _ in 0..24 {
        let model = *rng.pick(&MODELS);
        let device = *rng.pick(&DEVICES);
        let runtime = *rng.pick(&["vllm", "pytorch", "llama.cpp"]);
        let weights = *rng.pick(&["fp16", "int8", "q4_k_m", "awq-int4"]);
        let (context, sessions) = (rng.range(256, 32_768), rng.range(1, 64));
        let source = inference_source(model, runtime, weights, context, sessions, device);
        let program = checked(&source);
        let Some(spec) = program.checks().first() else { continue };
        let mut planner = Planner::new(&program, spec).expect("planner");
        for knob in [Knob::Sessions, Knob::Context] {
            let Ok(Some(answer)) = planner.find_max(knob) else { continue };
            let with = |v: u64| match knob {
                Knob::Sessions => inference_source(model, runtime, weights, context, v, device),
                _ => inference_source(model, runtime, weights, v, sessions, device),
            };
            match answer.boundary {
                Boundary::Largest(x) => {
                    assert!(fits(&with(x)), "{knob:?} {x} should fit:\n{source}");
                    assert!(!fits(&with(x + 1)), "{knob:?} {} should not fit:\n{source}", x + 1);
                    answers += 1;
                }
                Boundary::Limit(x) => assert!(fits(&with(x)), "{knob:?} limit {x}:\n{source}"),
                Boundary::NoneFits => {
                    assert!(!fits(&with(1)), "{knob:?} 1 should not fit:\n{source}");
                }
            }
        }
    }
    assert!(answers >= 10, "only {answers} boundaries found: the generator is too narrow");
}

#[test]
fn max_batch_and_sequence_of_training_are_the_true_boundary() {
    let mut rng = Rng(11);
    let mut answers = 0;
    for _ in 0..10 {
        let model = *rng.pick(&MODELS);
        let device = *rng.pick(&["l40s", "a100-40gb", "h100-sxm-80gb", "rtx-4090"]);
        let (batch, sequence) = (rng.range(1, 16), rng.range(512, 8192));
        let source = training_source(model, batch, sequence, device);
        let program = checked(&source);
        let spec = program.checks().first().expect("one check").clone();
        let mut planner = Planner::new(&program, &spec).expect("planner");
        for knob in [Knob::Batch, Knob::Context] {
            let Ok(Some(answer)) = planner.find_max(knob) else { continue };
            let with = |v: u64| match knob {
                Knob::Batch => training_source(model, v, sequence, device),
                _ => training_source(model, batch, v, device),
            };
            if let Boundary::Largest(x) = answer.boundary {
                assert!(fits(&with(x)), "{knob:?} {x} should fit:\n{source}");
                assert!(!fits(&with(x + 1)), "{knob:?} {} should not fit:\n{source}", x + 1);
                answers += 1;
            }
        }
    }
    assert!(answers >= 5, "only {answers} boundaries found");
}

#[test]
fn min_devices_fit_and_the_next_smaller_split_does_not() {
    let mut rng = Rng(3);
    let mut answers = 0;
    for _ in 0..12 {
        let model = *rng.pick(&["llama3.1-70b", "qwen2.5-32b", "qwen2.5-72b", "llama3.1-8b"]);
        let device = *rng.pick(&["l4", "l40s", "a100-40gb", "rtx-4090"]);
        let source = inference_source(
            model,
            "vllm",
            "fp16",
            rng.range(2048, 16384),
            rng.range(1, 32),
            device,
        );
        let program = checked(&source);
        let spec = program.checks().first().expect("one check").clone();
        let mut planner = Planner::new(&program, &spec).expect("planner");
        let splits = planner.device_splits();
        let Ok(Some(answer)) = planner.min_devices(device) else { continue };
        let line = |count: u64, split: crate::budget::SplitReport| {
            let check = super::suggest::check_line("w", count, device, split);
            let body = source.rsplit_once("check w on").map_or(source.as_str(), |(b, _)| b);
            format!("{body}{check}\n")
        };
        assert!(
            fits(&line(answer.count, answer.split)),
            "{} x {device} should fit:\n{source}",
            answer.count
        );
        let index = splits.iter().position(|s| s.devices() == answer.count).expect("a candidate");
        if index > 0 {
            let fewer = super::suggest::report(splits[index - 1]);
            assert!(
                !fits(&line(splits[index - 1].devices(), fewer)),
                "fewer should not fit:\n{source}"
            );
        }
        answers += 1;
    }
    assert!(answers >= 6, "only {answers} answers");
}

#[test]
fn the_precision_found_fits_and_the_larger_candidate_does_not() {
    let mut rng = Rng(5);
    let mut answers = 0;
    let mut kv_answers = 0;
    for _ in 0..16 {
        let model = *rng.pick(&["llama3.1-8b", "qwen2.5-14b", "mistral-7b"]);
        let device = *rng.pick(&["l4", "a10", "rtx-4090", "t4"]);
        let (context, sessions) = (rng.range(2048, 16384), rng.range(1, 32));
        let source = inference_source(model, "vllm", "fp16", context, sessions, device);
        let program = checked(&source);
        let spec = program.checks().first().expect("one check").clone();
        let mut planner = Planner::new(&program, &spec).expect("planner");
        let candidates = planner.precision_candidates();
        let Ok(Some(answer)) = planner.find_precision() else { continue };
        let with = |w: &str| inference_source(model, "vllm", w, context, sessions, device);
        if answer.kv_cache.is_some() {
            // Only with an FP8 KV cache: the smallest weights alone must not fit.
            let kv = with(&answer.weights).replace("    context", "    kv_cache fp8\n    context");
            assert!(fits(&kv), "{} with an fp8 KV cache should fit:\n{source}", answer.weights);
            if let Some(smallest) = candidates.last() {
                let alone = with(&smallest.name());
                assert!(!fits(&alone), "{} alone should not fit:\n{source}", smallest.name());
            }
            kv_answers += 1;
            continue;
        }
        assert!(fits(&with(&answer.weights)), "{} should fit:\n{source}", answer.weights);
        let index =
            candidates.iter().position(|c| c.name() == answer.weights).expect("a candidate");
        if index > 0 {
            let larger = candidates[index - 1].name();
            assert!(!fits(&with(&larger)), "{larger} should not fit:\n{source}");
        }
        answers += 1;
    }
    assert!(answers >= 4, "only {answers} answers");
    assert!(kv_answers >= 1, "no answer needed an FP8 KV cache: the generator is too narrow");
}

/// An SD 1.x pipeline (the UNet's structure from its configuration, so unfused attention can be
/// modelled) with `extra` diffusion lines, checked on a card of `mib` MiB.
fn sd_source(resolution: u64, batch: u64, extra: &str, mib: u64) -> String {
    format!(
        "model unet {{ params 860 million; largest_module 14_746_880 }}\n\
         model te {{ params 123_060_480; largest_module 37_945_344 }}\n\
         model ae {{ params 83_653_863; largest_module 2_359_808 }}\n\
         device card {{ memory {mib} MiB; arch ampere; precisions fp32 tf32 fp16 bf16 }}\n\
         workload w {{\n  runtime diffusers\n  diffusion {{\n    denoiser unet\n    text_encoders te\n    \
         vae ae\n    weights fp16\n    architecture unet\n    hidden 320\n    heads 8\n    \
         channel_mult 1 2 4 4\n    layers_per_block 2\n    cross_attention_dim 768\n    \
         resolution {resolution} x {resolution}\n    batch {batch}\n{extra}  }}\n}}\ncheck w on card\n"
    )
}

#[test]
fn pipeline_options_fit_as_written_and_none_of_them_is_spare() {
    let mut rng = Rng(29);
    let mut answers = 0;
    let mut several = 0;
    for _ in 0..40 {
        let resolution = *rng.pick(&[512, 768, 1024, 1536]);
        let batch = rng.range(1, 6);
        let attention = *rng.pick(&["", "    attention eager\n"]);
        let mib = rng.range(3_000, 24_000);
        let source = sd_source(resolution, batch, attention, mib);
        let program = checked(&source);
        let spec = program.checks().first().expect("one check").clone();
        let mut planner = Planner::new(&program, &spec).expect("planner");
        if planner.declared_verdict().is_ok_and(|v| v.fits()) {
            continue;
        }
        let Ok(Some(answer)) = planner.find_pipeline_option() else { continue };
        // The change as lines of the diffusion section: `attention sliced` replaces the eager
        // line, `attention_slice max` joins it.
        let options: Vec<&str> = answer.change.split(", ").collect();
        let with = |options: &[&str]| {
            let mut extra = attention.to_string();
            for option in options {
                if option.starts_with("attention ") {
                    extra = extra.replace("    attention eager\n", "");
                }
                extra = extra + "    " + option + "\n";
            }
            sd_source(resolution, batch, &extra, mib)
        };
        assert!(fits(&with(&options)), "`{}` should fit:\n{source}", answer.change);
        // Every option but the offload is needed: the others alone are over (`attention_slice
        // max` without `attention sliced` slices nothing).
        for (i, option) in options.iter().enumerate() {
            if option.starts_with("offload") {
                continue;
            }
            let rest: Vec<&str> =
                options.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, o)| *o).collect();
            assert!(!fits(&with(&rest)), "`{option}` is spare in `{}`:\n{source}", answer.change);
        }
        answers += 1;
        several += usize::from(options.len() > 1);
    }
    assert!(answers >= 8, "only {answers} answers");
    assert!(
        several >= 2,
        "only {several} answers with several options: the generator is too narrow"
    );
}
