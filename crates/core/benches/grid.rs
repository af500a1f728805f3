//! Benchmark: a fit map of 30 catalog GPUs × 60 contexts × 56 session counts (100,800 cells)
//! for a Llama 3.1 8B chat server, natively. Run with `cargo bench -p vram-core --bench grid`;
//! the same map in the browser is measured by `web/bench.mjs` (figures in `docs/web.md`).

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "the axis values are small positive numbers"
)]

use std::time::{Duration, Instant};

use vram_core::eval::grid::{Grid, program};

const SOURCE: &str = "workload calc {\n  model llama3.1-8b\n  runtime vllm\n  inference {\n    weights bf16\n    context 8192 tokens\n    sessions 16\n  }\n}\ncheck calc on h100-sxm-80gb\n";

fn main() {
    let contexts: Vec<u64> = (0..60u32)
        .map(|i| {
            // 512 to 131,072 tokens, geometric, rounded to 64 (as the page does).
            let x = 512.0 * 256f64.powf(f64::from(i) / 59.0);
            (x / 64.0).round() as u64 * 64
        })
        .collect();
    let sessions: Vec<u64> = (1..=56).collect();
    let (program, _) = program(SOURCE);
    let devices: Vec<String> =
        vram_core::catalog::builtin().devices.keys().take(30).cloned().collect();
    let mut best = Duration::MAX;
    let mut total = Duration::ZERO;
    let mut evaluations = 0;
    let runs = 20;
    for _ in 0..runs {
        let start = Instant::now();
        let grid = Grid::new(&program, "calc").expect("check");
        evaluations = 0;
        for device in &devices {
            let map = grid.fit_map(device, &contexts, &sessions).expect("map");
            evaluations += map.evaluations;
            std::hint::black_box(map);
        }
        let elapsed = start.elapsed();
        best = best.min(elapsed);
        total += elapsed;
    }
    println!(
        "fit map, {} GPUs x {} contexts x {} sessions: mean {:.2} ms, min {:.2} ms, {evaluations} evaluations",
        devices.len(),
        contexts.len(),
        sessions.len(),
        (total / runs).as_secs_f64() * 1e3,
        best.as_secs_f64() * 1e3,
    );
}
