//! Properties of the evaluator over generated workloads: catalog models on catalog devices with
//! random precisions, contexts, sessions, batches, tensor splits and headroom rules. Case counts
//! are modest so the suite stays fast; a failure prints the generated source.
//!
//! - more sessions, context or batch never lowers a device's `used`, less the allocator's
//!   replayed cache (fragmentation is not monotone in the tensors' sizes);
//! - tensor-parallel weights per device, times the degree, are never below one device's weights;
//! - every device's `required` is `used`, less its releasable cache, plus its headroom, and
//!   headroom is never below zero;
//! - formatting then parsing gives the same tree (modulo spans), and formatting is idempotent;
//! - evaluating twice gives identical JSON.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use vram_core::budget::Budget;

use crate::format::shape;
use vram_core::{Outcome, Status};

const CASES: u32 = 16;
const PRECISIONS: [&str; 6] = ["bf16", "fp16", "fp32", "fp8", "int8", "nf4"];
const RUNTIMES: [&str; 3] = ["pytorch", "vllm", "llama.cpp"];

fn catalog_models() -> Vec<String> {
    let catalog = vram_core::catalog::builtin();
    catalog.models.values().filter(|m| m.shape.is_some()).map(|m| m.name.clone()).collect()
}

fn catalog_devices() -> Vec<String> {
    vram_core::catalog::builtin().devices.keys().cloned().collect()
}

/// One inference workload on `degree` devices of one kind, split tensor-parallel.
#[derive(Clone, Debug)]
struct Serving {
    model: String,
    device: String,
    runtime: &'static str,
    weights: &'static str,
    context: u64,
    sessions: u64,
    degree: u64,
    keep_percent: u64,
    at_least_gib: u64,
}

impl Serving {
    fn workload(&self, name: &str, context: u64, sessions: u64) -> String {
        format!(
            "workload {name} {{\n  model {}\n  runtime {}\n  inference {{\n    weights {}\n    context {context} tokens\n    sessions {sessions}\n  }}\n}}\n",
            self.model, self.runtime, self.weights
        )
    }

    fn headroom(&self) -> String {
        format!(
            "headroom default {{\n  keep {} %\n  at_least {} GiB\n}}\n",
            self.keep_percent, self.at_least_gib
        )
    }

    fn check(&self, name: &str) -> String {
        if self.degree == 1 {
            format!("check {name} on {}\n", self.device)
        } else {
            format!(
                "check {name} on {} x {} split tensor {}\n",
                self.degree, self.device, self.degree
            )
        }
    }

    fn source(&self) -> String {
        format!(
            "{}{}{}",
            self.workload("w", self.context, self.sessions),
            self.headroom(),
            self.check("w")
        )
    }
}

fn serving() -> impl Strategy<Value = Serving> {
    (
        proptest::sample::select(catalog_models()),
        proptest::sample::select(catalog_devices()),
        proptest::sample::select(RUNTIMES.to_vec()),
        proptest::sample::select(PRECISIONS.to_vec()),
        1u64..=131_072,
        1u64..=256,
        proptest::sample::select(vec![1u64, 1, 2, 4, 8]),
        0u64..=30,
        0u64..=8,
    )
        .prop_map(
            |(
                model,
                device,
                runtime,
                weights,
                context,
                sessions,
                degree,
                keep_percent,
                at_least_gib,
            )| Serving {
                model,
                device,
                runtime,
                weights,
                context,
                sessions,
                degree,
                keep_percent,
                at_least_gib,
            },
        )
}

/// The budget of a source that has no input errors (a device that cannot run a precision, or a
/// shape that does not split, is a valid reason for the generator to have missed).
fn budget(source: &str) -> Option<Budget> {
    let outcome = vram_core::evaluate(source);
    (outcome.status() != Status::InputErrors && !outcome.budget.checks.is_empty())
        .then_some(outcome.budget)
}

/// Each device's `used`, less the caching allocator's replayed cache: what fragments a cache
/// is how the step's tensor sizes happen to fit the segments left before, which rises and falls
/// with them (in PyTorch as in the replay), so only the tensors are monotone in the batch.
fn used(budget: &Budget) -> Vec<u64> {
    use vram_core::budget::HeldBy;
    budget.checks[0]
        .devices
        .iter()
        .map(|d| {
            let cached: u64 = d
                .components
                .iter()
                .filter(|c| matches!(c.held_by, HeldBy::AllocatorCache | HeldBy::ReleasableCache))
                .map(|c| c.bytes.0)
                .sum();
            d.used.0 - cached
        })
        .collect()
}

fn weights(budget: &Budget, check: usize) -> u64 {
    budget.checks[check].devices[0]
        .components
        .iter()
        .filter(|c| c.name.starts_with("weights"))
        .map(|c| c.bytes.0)
        .sum()
}

/// Runs a property over `strategy`, asserting that at least a third of the cases were valid
/// inputs (so a generator that only makes errors cannot pass by skipping).
fn run<S: Strategy>(strategy: S, property: impl Fn(S::Value) -> Result<bool, TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let evaluated = AtomicUsize::new(0);
    let mut runner =
        TestRunner::new(Config { cases: CASES, failure_persistence: None, ..Config::default() });
    runner
        .run(&strategy, |case| {
            if property(case)? {
                evaluated.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    let evaluated = evaluated.into_inner();
    assert!(
        evaluated * 3 >= CASES as usize,
        "only {evaluated} of {CASES} generated inputs were valid"
    );
}

#[test]
fn more_sessions_or_context_never_lowers_a_budget() {
    run((serving(), 1u64..=64, 1u64..=65_536), |(s, more_sessions, more_context)| {
        let Some(base) = budget(&s.source()) else { return Ok(false) };
        for (context, sessions) in
            [(s.context, s.sessions + more_sessions), (s.context + more_context, s.sessions)]
        {
            let grown =
                format!("{}{}{}", s.workload("w", context, sessions), s.headroom(), s.check("w"));
            // A larger workload may overflow 64-bit arithmetic (E032): that is no lower budget.
            let Some(grown) = budget(&grown) else { continue };
            for (before, after) in used(&base).iter().zip(used(&grown)) {
                prop_assert!(
                    after >= *before,
                    "{}: used fell from {before} to {after}\n{grown:?}",
                    s.source()
                );
            }
        }
        Ok(true)
    });
}

#[test]
fn a_larger_batch_never_lowers_a_training_budget() {
    let training = |model: &str, weights: &str, batch: u64, sequence: u64, device: &str| {
        format!(
            "workload t {{\n  model {model}\n  training {{\n    weights {weights}\n    optimizer adamw\n    micro_batch {batch}\n    sequence {sequence} tokens\n  }}\n}}\ncheck t on {device}\n"
        )
    };
    let strategy = (
        proptest::sample::select(catalog_models()),
        proptest::sample::select(catalog_devices()),
        proptest::sample::select(vec!["bf16", "fp16", "fp32"]),
        1u64..=32,
        1u64..=32,
        1u64..=16_384,
    );
    run(strategy, |(model, device, weights, batch, more, sequence)| {
        let source = training(&model, weights, batch, sequence, &device);
        let Some(base) = budget(&source) else { return Ok(false) };
        let Some(grown) = budget(&training(&model, weights, batch + more, sequence, &device))
        else {
            return Ok(true);
        };
        for (before, after) in used(&base).iter().zip(used(&grown)) {
            prop_assert!(
                after >= *before,
                "{source}: used fell from {before} to {after} at micro_batch {}",
                batch + more
            );
        }
        Ok(true)
    });
}

#[test]
fn tensor_parallel_weights_cover_the_model() {
    let strategy = serving().prop_filter("a split", |s| s.degree > 1);
    run(strategy, |s| {
        let single = Serving { degree: 1, ..s.clone() };
        let source = format!(
            "{}{}{}",
            s.workload("w", s.context, s.sessions),
            single.check("w"),
            s.check("w")
        );
        let Some(budget) = budget(&source) else { return Ok(false) };
        let (one, per_device) = (weights(&budget, 0), weights(&budget, 1));
        prop_assert!(one > 0);
        prop_assert!(
            per_device.checked_mul(s.degree).is_some_and(|all| all >= one),
            "{source}: {per_device} B per device x {} < {one} B on one device",
            s.degree
        );
        Ok(true)
    });
}

#[test]
fn required_is_used_plus_headroom() {
    run(serving(), |s| {
        let Some(budget) = budget(&s.source()) else { return Ok(false) };
        for device in &budget.checks[0].devices {
            let held = device.used.0.checked_sub(device.releasable.0);
            prop_assert_eq!(
                held.and_then(|held| held.checked_add(device.headroom.bytes.0)),
                Some(device.required.0),
                "{}",
                s.source()
            );
            // The headroom rule asks for at least this much, and never for less than nothing.
            let capacity = device.capacity.bytes.0;
            let percent = u128::from(capacity) * u128::from(s.keep_percent) / 100;
            let floor = u128::from(s.at_least_gib << 30).max(percent);
            prop_assert!(
                u128::from(device.headroom.bytes.0) + 1 >= floor,
                "{}: headroom {} below {floor}",
                s.source(),
                device.headroom.bytes.0
            );
        }
        Ok(true)
    });
}

/// A source in a free layout: random blank space, `;` separators and comments around the same
/// declarations, so the formatter has something to do.
fn messy(s: &Serving, spaces: usize, semicolons: bool, comment: bool) -> String {
    let pad = " ".repeat(spaces);
    let mut text = String::new();
    if comment {
        text.push_str("# a generated workload\n\n");
    }
    let workload = s.workload("w", s.context, s.sessions);
    let workload =
        if semicolons { workload.replacen("\n  runtime", ";runtime", 1) } else { workload };
    for line in workload.lines().chain(s.headroom().lines()).chain(s.check("w").lines()) {
        text.push_str(&pad);
        text.push_str(line.trim());
        text.push_str(&pad);
        text.push('\n');
    }
    text
}

#[test]
fn formatting_keeps_the_tree() {
    let strategy = (serving(), 0usize..4, any::<bool>(), any::<bool>());
    run(strategy, |(s, spaces, semicolons, comment)| {
        let source = messy(&s, spaces, semicolons, comment);
        let formatted = vram_core::format::format(&source);
        prop_assert!(formatted.is_ok(), "{source}: {formatted:?}");
        let formatted = formatted.unwrap_or_default();
        prop_assert_eq!(shape(&formatted), shape(&source), "{}", source);
        prop_assert_eq!(vram_core::format::format(&formatted).ok(), Some(formatted.clone()));
        Ok(true)
    });
}

fn json(outcome: &Outcome) -> String {
    let budget = serde_json::to_string(&outcome.budget).unwrap_or_default();
    format!("{budget}\n{:?}", outcome.diagnostics)
}

#[test]
fn evaluating_twice_gives_identical_json() {
    run(serving(), |s| {
        let source = s.source();
        let (first, second) = (vram_core::evaluate(&source), vram_core::evaluate(&source));
        prop_assert_eq!(json(&first), json(&second));
        Ok(true)
    });
}
