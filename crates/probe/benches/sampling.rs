//! The sampling loop against the simulated NVML: achieved rate and CPU cost at 1 kHz.
//!
//! `cargo bench -p vram-probe` runs the real sampler (`vram_probe::sampler::run`) through
//! nvml-wrapper and `libnvml_sim.so` for a few seconds per machine size and prints the achieved
//! rate, the ticks that were made up after a late wake-up and those skipped, the worst lateness,
//! the longest tick and the sampling thread's CPU time as a share of one core. Target: at least
//! 1 kHz for at most 2 % of a core.
//!
//! What the CPU figure counts: the sampling thread's user and system time (getrusage
//! RUSAGE_THREAD), all of it: its wake-ups, the probe's work on each sample, nvml-wrapper, and
//! the simulator's answers, which run in that thread inside the NVML calls as a real driver's
//! library would. The simulator answers from memory; a real driver's ioctls cost more, and are
//! not measured here. The case with 0 GPUs is the loop alone, waking 1,000 times a second:
//! the platform's floor. Set `VRAM_PROBE_BENCH_SECONDS` to change the duration (default 3) and
//! `VRAM_PROBE_BENCH_ROUNDS` to repeat the cases (default 1).
//! Figures are in docs/probe.md.

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use vram_probe::sampler::{self, Shared};

fn sim_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let deps = exe.parent().expect("the deps folder");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let candidate = dir.join("libnvml_sim.so");
        if candidate.exists() {
            return candidate;
        }
    }
    panic!(
        "libnvml_sim.so is not next to {}: run `cargo build --release -p nvml-sim`",
        exe.display()
    );
}

/// A scenario of `gpus` H100s, each with this process and two others on it.
fn scenario(gpus: usize) -> PathBuf {
    let me = std::process::id();
    let devices: Vec<String> = (0..gpus)
        .map(|i| {
            format!(
                r#"{{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-bench-{i}",
                   "pci_bus_id": "00000000:{i:02X}:00.0", "total": 85520809984,
                   "reserved": 555745280, "architecture": "hopper", "compute_capability": [9, 0],
                   "used": [[0, 1073741824], [500, 9663676416], [505, 2147483648]],
                   "processes": [
                     {{"pid": {me}, "used": [[0, 1073741824], [500, 8589934592]]}},
                     {{"pid": 1, "used": [[0, 536870912]]}},
                     {{"pid": 2, "used": [[0, 268435456]]}}
                   ]}}"#
            )
        })
        .collect();
    let path = std::env::temp_dir().join(format!("vram-probe-bench-{me}-{gpus}.json"));
    std::fs::write(&path, format!(r#"{{"devices": [{}]}}"#, devices.join(","))).expect("writes");
    path
}

/// Set in the child process that measures one case: the number of GPUs.
const CASE_ENV: &str = "VRAM_PROBE_BENCH_CASE";

fn main() {
    let seconds: f64 =
        std::env::var("VRAM_PROBE_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    if let Some(gpus) = std::env::var(CASE_ENV).ok().and_then(|s| s.parse().ok()) {
        measure(gpus, seconds);
        return;
    }
    println!("sampling loop at 1 kHz against nvml-sim, {seconds} s per case");
    println!(
        "{:>5} {:>12} {:>6} {:>8} {:>10} {:>9} {:>13} {:>14}",
        "GPUs",
        "achieved Hz",
        "late",
        "skipped",
        "max late",
        "max tick",
        "CPU % of core",
        "CPU µs / tick"
    );
    // Each case runs in a fresh process: the simulator reads its scenario from the environment
    // at nvmlInit, and a child's environment is set without touching this process's.
    // 0 GPUs: the loop alone, sleeping and waking 1000 times a second: the platform's floor.
    // Several rounds interleave the cases, so that a burst of load on a shared machine shows as
    // one odd row rather than biasing one case.
    let rounds: usize =
        std::env::var("VRAM_PROBE_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for gpus in (0..rounds).flat_map(|_| [0, 1, 2, 8]) {
        let path = scenario(gpus);
        let status = std::process::Command::new(std::env::current_exe().expect("own path"))
            .env(CASE_ENV, gpus.to_string())
            .env("VRAM_NVML_SIM_SCENARIO", &path)
            .status()
            .expect("the case runs");
        assert!(status.success(), "the case with {gpus} GPUs failed");
        let _ = std::fs::remove_file(path);
    }
}

/// Samples `gpus` simulated GPUs at 1 kHz for `seconds` and prints one line.
fn measure(gpus: usize, seconds: f64) {
    let handle = vram_probe::nvml::open(Some(sim_lib())).expect("the simulator loads");
    let count = handle.nvml.device_count().expect("devices");
    assert_eq!(count as usize, gpus);
    let devices: Vec<(u32, nvml_wrapper::Device<'_>)> =
        (0..count).map(|i| (i, handle.nvml.device_by_index(i).expect("a device"))).collect();
    let shared = Shared::new(devices.len(), 1);
    shared.started(0, std::process::id());
    let t0 = Instant::now();
    let stats = std::thread::scope(|scope| {
        let sampler =
            scope.spawn(|| sampler::run(&devices, 1, Duration::from_millis(1), &shared, t0));
        std::thread::sleep(Duration::from_secs_f64(seconds));
        shared.stop();
        sampler.join().expect("the sampler finishes").stats
    });
    let cpu = stats.cpu_seconds.unwrap_or(f64::NAN);
    #[expect(clippy::cast_precision_loss, reason = "figures for people")]
    let per_tick = cpu / stats.ticks as f64 * 1e6;
    println!(
        "{gpus:>5} {:>12.1} {:>6} {:>8} {:>7} µs {:>6} µs {:>13.2} {:>14.1}",
        stats.achieved_hz,
        stats.late_ticks,
        stats.skipped_ticks,
        stats.max_late_us,
        stats.max_tick_us,
        stats.cpu_percent_of_one_core.unwrap_or(f64::NAN),
        per_tick
    );
}
