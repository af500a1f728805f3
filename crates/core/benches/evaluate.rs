//! Benchmark: parse, check and evaluate every example, and print the time per example.
//!
//! Run with `cargo bench -p vram-core`. Target (issue 2): at most 50 µs per example. The
//! catalog is built once before timing, as every front end does.

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]

use std::time::{Duration, Instant};

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut examples: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("examples/")
        .map(|entry| {
            let path = entry.expect("entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            (name, std::fs::read_to_string(&path).expect("readable"))
        })
        .collect();
    examples.sort();
    // `cargo bench -p vram-core --bench evaluate -- NAME` times only the examples whose file
    // name contains NAME.
    if let Some(filter) = std::env::args().skip(1).find(|a| !a.starts_with('-')) {
        examples.retain(|(name, _)| name.contains(&filter));
    }
    // The first evaluation builds the catalog (parse and check of its files): in the browser,
    // on every page load, before the first result.
    for (what, sources) in [
        ("catalog build, as parsed (no comments)", vram_core::catalog::PARSED),
        ("catalog build, with its comments", vram_core::catalog::SOURCES),
    ] {
        let (mean, best, runs) = time(|| {
            std::hint::black_box(vram_core::catalog::build_from(std::hint::black_box(&sources)));
        });
        println!(
            "{what:<40} mean {:>8.1} µs, min {:>8.1} µs, {runs} runs",
            micros(mean),
            micros(best)
        );
    }
    let _ = vram_core::catalog::builtin();
    println!("{:<36} {:>12} {:>12} {:>10}", "example", "mean µs", "min µs", "runs");
    let mut total = Duration::ZERO;
    for (name, source) in &examples {
        // Warm up, then time batches until a quarter second has passed.
        for _ in 0..50 {
            std::hint::black_box(vram_core::evaluate(source));
        }
        let mut runs = 0u32;
        let mut best = Duration::MAX;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(250) {
            let t = Instant::now();
            std::hint::black_box(vram_core::evaluate(std::hint::black_box(source)));
            best = best.min(t.elapsed());
            runs += 1;
        }
        let mean = start.elapsed() / runs;
        total += mean;
        println!("{name:<36} {:>12.1} {:>12.1} {runs:>10}", micros(mean), micros(best));
    }
    let count = u32::try_from(examples.len()).unwrap_or(1).max(1);
    println!("{:<36} {:>12.1}", "mean over examples", micros(total / count));
}

/// Runs `work` for a quarter second after a warm-up: the mean, the fastest run and the count.
fn time(mut work: impl FnMut()) -> (Duration, Duration, u32) {
    for _ in 0..5 {
        work();
    }
    let (mut runs, mut best) = (0u32, Duration::MAX);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(250) {
        let t = Instant::now();
        work();
        best = best.min(t.elapsed());
        runs += 1;
    }
    (start.elapsed() / runs.max(1), best, runs)
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
