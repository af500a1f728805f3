//! What the probe's integration tests share: the simulator's library, scenarios, and running
//! `vram-probe` against them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

/// The simulator's shared library. Cargo builds it as a dev-dependency of this crate, into the
/// same `deps` folder as this test's executable.
pub(crate) fn sim_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the deps folder");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let candidate = dir.join("libnvml_sim.so");
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("libnvml_sim.so is not next to {}: run `cargo build -p nvml-sim`", exe.display());
}

pub(crate) fn tmp(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("probe-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Writes a scenario for the test `name`.
pub(crate) fn scenario(name: &str, value: &Value) -> PathBuf {
    let path = tmp(&format!("{name}.scenario.json"));
    std::fs::write(&path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    path
}

pub(crate) fn probe(scenario: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vram-probe"));
    command
        .env("VRAM_NVML_SIM_SCENARIO", scenario)
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .arg("--nvml-lib")
        .arg(sim_lib());
    command
}

pub(crate) fn h100(used: &Value, processes: &Value) -> Value {
    json!({
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-11111111-2222-3333-4444-555555555555",
        "pci_bus_id": "00000000:18:00.0",
        "total": 85_520_809_984_u64,
        "reserved": 555_745_280,
        "architecture": "hopper",
        "compute_capability": [9, 0],
        "mig": false,
        "ecc": true,
        "used": used,
        "processes": processes
    })
}

pub(crate) const GIB: u64 = 1 << 30;

/// One probe at a time: the tests measure millisecond timelines, and the machine has few cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `vram-probe run` on `command` and returns the exit code, the report and the output.
/// Time 0 of the scenario is the sampler's first tick.
pub(crate) fn run(
    name: &str,
    scenario: &Value,
    extra: &[&str],
    command: &[&str],
) -> (i32, Value, Output) {
    let _serial = serial();
    let mut scenario = scenario.clone();
    scenario["clock"] = json!("first_process_list");
    let path = self::scenario(name, &scenario);
    let out = tmp(&format!("{name}.report.json"));
    let _ = std::fs::remove_file(&out);
    let output = probe(&path)
        .arg("run")
        .arg("--out")
        .arg(&out)
        .args(extra)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    let report = read_report(&out, &output);
    (output.status.code().unwrap_or(-1), report, output)
}

pub(crate) fn read_report(path: &Path, output: &Output) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "no report at {}: {e}\nstderr: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    serde_json::from_str(&text).unwrap()
}
