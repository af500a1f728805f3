//! Benchmark: one `find max` search (sessions, then context) on a checked program, as the
//! planner runs it for a query or a suggestion. Parsing and checking happen once, outside the
//! timing: a search re-evaluates the checked program only.
//!
//! Each search is timed twice: on one planner that has answered before (its probes reuse the
//! weights, runtime and headroom the earlier ones computed), and on a planner built for that one
//! query, as `vram` builds one per query or suggestion (the first probe computes them).
//!
//! Run with `cargo bench -p vram-core --bench plan`. Target (issue 7): at most 20 µs per query.

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]

use std::time::{Duration, Instant};

use vram_core::plan::{Knob, Planner};

const CASES: [(&str, &str); 3] = [
    (
        "llama3.1-8b vllm on l4",
        "workload w {\n model llama3.1-8b\n runtime vllm\n inference {\n weights bf16\n context 8192 tokens\n sessions 4\n }\n}\ncheck w on l4\n",
    ),
    (
        "llama3.1-8b pytorch on a10",
        "workload w {\n model llama3.1-8b\n runtime pytorch\n inference {\n weights bf16\n context 4096 tokens\n sessions 2\n }\n}\ncheck w on a10\n",
    ),
    (
        "llama3.1-70b fp8 on 2 x h100",
        "workload w {\n model llama3.1-70b\n runtime vllm\n inference {\n weights fp8\n context 8192 tokens\n sessions 16\n }\n}\ncheck w on 2 x h100-sxm-80gb split tensor 2\n",
    ),
];

fn main() {
    let catalog = vram_core::catalog::builtin();
    println!(
        "{:<32} {:<9} {:>10} {:>10} {:>12} {:>12} {:>9} {:>8}",
        "case", "knob", "mean µs", "min µs", "fresh mean", "fresh min", "answer", "runs"
    );
    for (name, source) in CASES {
        let (file, _) = vram_core::syntax::parse(source);
        let (program, _) = vram_core::check::check(&file, catalog, false);
        let spec = program.checks()[0].clone();
        let mut planner = Planner::new(&program, &spec).expect("the workload exists");
        for knob in [Knob::Sessions, Knob::Context] {
            let answer = planner.find_max(knob).expect("no overflow").expect("an inference knob");
            for _ in 0..20 {
                std::hint::black_box(planner.find_max(knob).ok());
            }
            let mut runs = 0u32;
            let mut best = Duration::MAX;
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                let t = Instant::now();
                std::hint::black_box(planner.find_max(std::hint::black_box(knob)).ok());
                best = best.min(t.elapsed());
                runs += 1;
            }
            let mean = start.elapsed() / runs;
            // A planner built for this one query: its first probe computes what later ones reuse.
            let mut fresh_runs = 0u32;
            let mut fresh_best = Duration::MAX;
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                let t = Instant::now();
                let mut fresh = Planner::new(&program, &spec).expect("the workload exists");
                std::hint::black_box(fresh.find_max(std::hint::black_box(knob)).ok());
                fresh_best = fresh_best.min(t.elapsed());
                fresh_runs += 1;
            }
            let fresh_mean = start.elapsed() / fresh_runs;
            println!(
                "{name:<32} {:<9} {:>10.1} {:>10.1} {:>12.1} {:>12.1} {:>9} {runs:>8}",
                knob.name(),
                micros(mean),
                micros(best),
                micros(fresh_mean),
                micros(fresh_best),
                format!("{:?}", answer.boundary).replace("Largest", ""),
            );
        }
    }
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
