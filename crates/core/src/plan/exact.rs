//! The planner's probes (and the fit map's cells) use the bytes-only evaluation
//! ([`eval::evaluate_fit`]), which writes no formula and reuses weights, runtime and headroom
//! from earlier probes. These tests hold it to the full evaluation bit for bit: for every example
//! file and generated workloads, over many values of each knob, weight formats and splits, every
//! device's used and required bytes, KV pool and verdict, and the check's verdict, are equal.
//! One planner (so one cache) serves every change of a check, in an order that mixes them, so
//! that a cache entry reused under the wrong key would show.

use super::{Knob, Planner};
use crate::budget::CheckBudget;
use crate::eval::{self, CheckFit, Overflow};
use crate::hir::{Layered, Split};

/// Values of sessions and batches: small, block edges (vLLM pages 16 tokens), large.
const COUNTS: [u64; 14] = [1, 2, 3, 5, 8, 15, 16, 17, 64, 255, 1000, 4096, 65_536, 1_000_000];
/// Context and sequence lengths, up to the checker's limit.
const LENGTHS: [u64; 13] =
    [1, 15, 16, 17, 100, 512, 4095, 4096, 8192, 32_768, 131_072, 1_000_000, 100_000_000];

fn checked(source: &str) -> Layered<'static> {
    let (file, _) = crate::syntax::parse(source);
    let (program, _) = crate::check::check(&file, crate::catalog::builtin(), false);
    program
}

/// Asserts that the bytes-only evaluation agrees with the full one, whatever each gives.
fn assert_same(
    full: Result<Option<CheckBudget>, Overflow>,
    fast: Result<Option<CheckFit>, Overflow>,
    case: &str,
) {
    let (full, fast) = match (full, fast) {
        (Ok(Some(full)), Ok(Some(fast))) => (full, fast),
        (Ok(None), Ok(None)) | (Err(Overflow), Err(Overflow)) => return,
        (full, fast) => panic!("{case}: full {:?}, bytes-only {fast:?}", full.map(|b| b.is_some())),
    };
    assert_eq!(full.verdict, fast.verdict, "{case}: check verdict");
    assert_eq!(full.devices.len(), fast.devices.len(), "{case}: devices");
    for (i, (full, fast)) in full.devices.iter().zip(&fast.devices).enumerate() {
        assert_eq!(full.used, fast.used, "{case}: device {i} used");
        assert_eq!(full.required, fast.required, "{case}: device {i} required");
        assert_eq!(full.verdict, fast.verdict, "{case}: device {i} verdict");
        let pool = |p: &crate::budget::KvPool| (p.bytes, p.tokens, p.needed_tokens, p.needed);
        assert_eq!(
            full.kv_pool.as_ref().map(pool),
            fast.kv_pool.as_ref().map(pool),
            "{case}: device {i} KV pool"
        );
    }
}

/// Compares both evaluations of the planner's check as it stands now.
fn compare(planner: &mut Planner<'_>, case: &str) -> u32 {
    let full = eval::evaluate_check(&planner.work, &planner.spec, &mut Vec::new());
    let fast = planner.evaluate();
    assert_same(full, fast, case);
    1
}

/// Every knob of the workload over `values`-many of its values, with everything else as the
/// planner has it now.
fn sweep_knobs(planner: &mut Planner<'_>, name: &str, every: usize) -> u32 {
    let mut compared = 0;
    for knob in [Knob::Sessions, Knob::Context, Knob::Batch, Knob::GpuLayers] {
        if planner.declared(knob).is_none() {
            continue;
        }
        let values: &[u64] = if knob == Knob::Context { &LENGTHS } else { &COUNTS };
        for &value in values.iter().step_by(every) {
            let value = value.min(knob.limit(&planner.original, planner.shape()));
            planner.set(knob, value);
            compared += compare(planner, &format!("{name}: {} {value}", knob.name()));
        }
        let declared = planner.declared(knob).unwrap_or(1);
        planner.set(knob, declared);
    }
    compared
}

/// Every change the planner makes to one check: the knobs, then weight formats (with an FP8
/// KV cache too), then device counts and splits, then the knobs again under the last split.
fn compare_check(program: &Layered<'_>, spec: &crate::hir::CheckSpec, name: &str) -> u32 {
    let Some(mut planner) = Planner::new(program, spec) else { return 0 };
    let mut compared = compare(&mut planner, &format!("{name}: as declared"));
    compared += sweep_knobs(&mut planner, name, 1);
    for format in planner.precision_candidates() {
        for kv in [None, Some(crate::precision::Precision::Fp8)] {
            if let Some(inference) = planner.workload_mut().inference.as_mut() {
                inference.weights = format;
                if let Some(kv) = kv {
                    inference.kv_cache = kv;
                }
            }
            let case = format!("{name}: weights {} kv {kv:?}", format.name());
            compared += compare(&mut planner, &case);
            compared += sweep_knobs(&mut planner, &case, 4);
        }
        planner.reset(spec);
    }
    let device = spec.devices.first().cloned().unwrap_or_default();
    let splits: Vec<Split> = planner.device_splits().into_iter().take(6).collect();
    for split in splits {
        planner.spec.split = split;
        planner.spec.stage_layers = None;
        planner.spec.devices = vec![device.clone(); usize::try_from(split.devices()).unwrap_or(1)];
        let case = format!("{name}: {device} split {split:?}");
        compared += compare(&mut planner, &case);
        compared += sweep_knobs(&mut planner, &case, 3);
    }
    planner.reset(spec);
    compared + compare(&mut planner, &format!("{name}: as declared again"))
}

#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "the test reads the repository's examples, so that a new one is covered too; the library stays IO-free"
)]
fn bytes_only_evaluation_equals_the_full_one_on_every_example() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "vram"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "found only {} examples", files.len());
    let mut compared = 0;
    for path in &files {
        let source = std::fs::read_to_string(path).expect("example");
        let program = checked(&source);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let checks = program.checks().to_vec();
        assert!(!checks.is_empty() || source.contains("find "), "{name}: no checks");
        for spec in program.checks().iter().chain(program.queries().iter().map(|q| &q.check)) {
            if spec.devices.is_empty() {
                continue;
            }
            compared += compare_check(&program, spec, &format!("{name} `{}`", spec.id));
        }
    }
    assert!(compared > 1000, "only {compared} comparisons");
}

#[test]
fn bytes_only_evaluation_equals_the_full_one_on_generated_workloads() {
    let mut compared = 0;
    for (runtime, weights, layout) in [
        ("vllm", "bf16", ""),
        ("vllm", "awq-int4", ""),
        ("pytorch", "fp16", ""),
        ("pytorch", "int8", "    cache_layout tuple\n"),
        ("pytorch", "bf16", "    kv_cache quanto-int4\n    residual_window 256 tokens\n"),
        ("llama.cpp", "q4_k_m", ""),
        ("llama.cpp", "q8_0", "    kv_cache int8-token\n"),
    ] {
        for (model, device) in [("llama3.1-8b", "l4"), ("gemma2-9b", "a100-40gb")] {
            let source = format!(
                "workload w {{\n  model {model}\n  runtime {runtime}\n  inference {{\n    weights {weights}\n    context 4096 tokens\n    sessions 4\n{layout}  }}\n}}\ncheck w on 2 x {device} split tensor 2\n"
            );
            let program = checked(&source);
            assert_eq!(program.checks().len(), 1, "{source}");
            for spec in program.checks() {
                compared += compare_check(&program, spec, &source);
            }
        }
    }
    assert!(compared > 500, "only {compared} comparisons");
}
