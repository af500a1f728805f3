//! The `vram-probe` binary as users run it, against the simulated NVML (`crates/nvml-sim`),
//! loaded through nvml-wrapper's library path: the real binding code runs, without a GPU.
//!
//! Each test writes a scenario (devices, memory timelines, faults), runs the binary with
//! `--nvml-lib` pointing at the simulator, and reads the exit code, the output and the report.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{GIB, h100, probe, read_report, run, scenario, serial, sim_lib, tmp};
use serde_json::{Value, json};

#[test]
fn devices_reads_every_field_through_the_binding() {
    let mut second = h100(&json!([[0, 4_587_520]]), &json!([]));
    second["mig"] = Value::Null;
    second["ecc"] = Value::Null;
    second["uuid"] = json!("GPU-second");
    let path = scenario(
        "devices",
        &json!({"devices": [h100(&json!([[0, 4_587_520]]), &json!([])), second]}),
    );
    let output = probe(&path).args(["devices", "--format", "json"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let found: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(found["schema_version"], 1);
    assert_eq!(found["device_count"], 2);
    assert_eq!(found["system"]["driver_version"], "550.54.15");
    assert_eq!(found["system"]["cuda_driver_version"], "12.4");
    let d0 = &found["devices"][0];
    assert_eq!(d0["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(d0["pci_bus_id"], "00000000:18:00.0");
    assert_eq!(d0["memory"]["total"], 85_520_809_984_u64);
    assert_eq!(d0["memory"]["reserved"], 555_745_280);
    assert_eq!(d0["memory"]["used"], 4_587_520);
    assert_eq!(d0["memory"]["free"], 85_520_809_984_u64 - 555_745_280 - 4_587_520);
    assert_eq!(d0["architecture"], "hopper");
    assert_eq!(d0["compute_capability"], "9.0");
    assert_eq!(d0["mig_enabled"], false);
    assert_eq!(d0["ecc_enabled"], true);
    // A value NVML cannot give is unavailable with the reason, never 0 or false.
    let d1 = &found["devices"][1];
    let why = d1["mig_enabled"]["unavailable"].as_str().unwrap();
    assert!(why.starts_with("nvmlDeviceGetMigMode: ") && why.contains("not available"), "{why}");
    assert!(d1["ecc_enabled"]["unavailable"].is_string());

    let table = probe(&path).arg("devices").output().unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("total         85520809984 B (79.65 GiB)"), "{text}");
    assert!(text.contains("MIG           unavailable"), "{text}");

    let prom = probe(&path).args(["devices", "--format", "prometheus"]).output().unwrap();
    let text = String::from_utf8_lossy(&prom.stdout);
    assert!(text.contains("# TYPE vram_probe_memory_total_bytes gauge"), "{text}");
    assert!(text.contains(
        "vram_probe_memory_total_bytes{gpu=\"0\",uuid=\"GPU-11111111-2222-3333-4444-555555555555\",name=\"NVIDIA H100 80GB HBM3\"} 85520809984"
    ));
    assert!(text.contains("# vram_probe_mig_enabled{gpu=\"1\",uuid=\"GPU-second\"} unavailable"));
    assert!(!text.contains("vram_probe_mig_enabled{gpu=\"1\",uuid=\"GPU-second\"} 0"));
}

#[test]
fn no_driver_is_a_message_and_exit_code_3() {
    let output = Command::new(env!("CARGO_BIN_EXE_vram-probe"))
        .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "devices"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no NVIDIA driver"), "{stderr}");
    assert!(stderr.contains("Install the driver"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // The library is there, but the driver is not running.
    let path = scenario(
        "driver-not-loaded",
        &json!({"devices": [], "faults": [{"call": "init", "error": "driver_not_loaded"}]}),
    );
    let output = probe(&path).arg("devices").output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&output.stderr).contains("driver is not loaded"));
}

#[test]
fn a_5ms_spike_is_caught() {
    let machine = json!({"devices": [h100(
        &json!([[0, 4_587_520], [150, 9 * GIB], [155, 2 * GIB]]),
        &json!([{"pid": "child:0", "used": [[0, 2 * GIB], [150, 9 * GIB - 4_587_520], [155, 2 * GIB]]}])
    )]});
    let (code, report, _) = run("spike", &machine, &[], &["sleep", "0.4"]);
    assert_eq!(code, 0, "{report:#}");
    let d = &report["devices"][0];
    assert_eq!(d["peak_used"]["bytes"], 9 * GIB);
    let at = d["peak_used"]["at_ms"].as_f64().unwrap();
    assert!((120.0..200.0).contains(&at), "peak at {at} ms");
    assert_eq!(d["baseline_used"], 4_587_520);
    assert_eq!(d["peak_over_baseline"], 9 * GIB - 4_587_520);
    assert_eq!(d["command_peaks"][0]["bytes"], 9 * GIB - 4_587_520);
    assert_eq!(report["verdict"], "pass");
    assert!(report["sampling"]["achieved_hz"].as_f64().unwrap() > 100.0);
    // The timeline keeps the spike (maximum per bucket).
    let used_max = d.get("gaps").map(|_| &report["timeline"]["devices"][0]["used_max"]).unwrap();
    assert!(used_max.as_array().unwrap().iter().any(|v| v == &json!(9 * GIB)));
    // Nothing about the command line unless asked; the device mapping always.
    assert_eq!(report["conditions"]["cuda_visible_devices"], "0,1");
    assert_eq!(report["commands"][0]["argv"], Value::Null);
    assert_eq!(report["conditions"]["environment"], Value::Null);
}

#[test]
fn an_nvml_error_mid_run_becomes_a_gap() {
    let machine = json!({
        "devices": [h100(&json!([[0, GIB]]), &json!([]))],
        "faults": [{"at_ms": 100, "until_ms": 160, "call": "memory", "error": "unknown"}]
    });
    let (code, report, _) = run("gap", &machine, &[], &["sleep", "0.3"]);
    assert_eq!(code, 1, "a run with missing samples does not pass");
    let gaps = report["devices"][0]["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(gaps[0]["call"], "nvmlDeviceGetMemoryInfo_v2");
    assert!(gaps[0]["failed_samples"].as_u64().unwrap() >= 1);
    // The simulator's clock starts at the sampler's first tick, a little after the run's time 0
    // (the sampler thread's start): the 60 ms window appears slightly later in the report.
    let from = gaps[0]["from_ms"].as_f64().unwrap();
    let to = gaps[0]["to_ms"].as_f64().unwrap();
    assert!((95.0..=200.0).contains(&from), "gap {from}–{to} ms");
    assert!((30.0..=61.0).contains(&(to - from)), "gap {from}–{to} ms");
    assert_eq!(report["devices"][0]["peak_used"]["bytes"], GIB);
    let used_max = report["timeline"]["devices"][0]["used_max"].as_array().unwrap();
    assert!(used_max.iter().any(Value::is_null), "the gap shows in the timeline");
    assert!(report["reasons"][0].as_str().unwrap().contains("samples missing"));
}

#[test]
fn a_lost_device_and_a_forbidden_process_list_are_unavailable_not_zero() {
    let two = json!({
        "devices": [
            h100(&json!([[0, GIB]]), &json!([{"pid": "child:0", "used": [[0, GIB]]}])),
            h100(&json!([[0, GIB]]), &json!([]))
        ],
        "faults": [
            {"call": "processes", "device": 0, "error": "no_permission"},
            {"at_ms": 50, "call": "any", "device": 1, "error": "gpu_lost"}
        ]
    });
    let (_, report, _) = run("lost", &two, &[], &["sleep", "0.2"]);
    let d0 = &report["devices"][0];
    assert_eq!(d0["peak_used"]["bytes"], GIB);
    let why = d0["command_peaks"][0]["unavailable"].as_str().unwrap();
    assert!(why.contains("ermission"), "{why}");
    assert!(d0["combined_peak"]["unavailable"].is_string());
    let d1 = &report["devices"][1];
    let gap = &d1["gaps"][0];
    assert!(gap["error"].as_str().unwrap().contains("fell off the bus"), "{gap}");
    assert!(gap["to_ms"].as_f64().unwrap() > 100.0, "the lost device stays lost: {gap}");
}

#[test]
fn a_crashing_command_still_gets_a_report() {
    let machine = json!({"devices": [h100(&json!([[0, GIB]]), &json!([]))]});
    let (code, report, _) = run("crash", &machine, &[], &["sh", "-c", "sleep 0.05; kill -SEGV $$"]);
    assert_eq!(code, 1);
    let exit = &report["commands"][0]["exit"];
    assert_eq!(exit["signal"], "SIGSEGV");
    assert_eq!(exit["code"], Value::Null);
    assert_eq!(report["verdict"], "fail");

    let (code, report, _) = run("exit3", &machine, &[], &["sh", "-c", "sleep 0.05; exit 3"]);
    assert_eq!(code, 1);
    assert_eq!(report["commands"][0]["exit"]["code"], 3);

    // A daemon the command leaves behind holds its output open: the report does not wait for it.
    let started = Instant::now();
    let (code, report, _) =
        run("leftover", &machine, &[], &["sh", "-c", "sleep 0.05; (sleep 5 &); exit 0"]);
    assert_eq!(code, 0, "{report:#}");
    assert!(started.elapsed() < Duration::from_secs(4));

    let (code, report, _) = run("no-such-command", &machine, &[], &["/nonexistent/command"]);
    assert_eq!(code, 1);
    assert!(report["commands"][0]["spawn_error"].as_str().unwrap().contains("cannot start"));
}

/// Starts `vram-probe run` on `command`, sends `signal` once the command runs, and returns the
/// probe's exit code and report.
fn interrupt(name: &str, signal: &str, extra: &[&str], command: &[&str]) -> (Option<i32>, Value) {
    let _serial = serial();
    let machine = json!({"devices": [h100(&json!([[0, GIB]]), &json!([]))]});
    let path = scenario(name, &machine);
    let out = tmp(&format!("{name}.report.json"));
    let _ = std::fs::remove_file(&out);
    let started = Instant::now();
    let child = probe(&path)
        .args(["run", "--out"])
        .arg(&out)
        .args(extra)
        .arg("--")
        .args(command)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the probe has started the command, then a little more.
    let children = format!("/proc/{}/task/{}/children", child.id(), child.id());
    let mut waited = 0;
    while std::fs::read_to_string(&children).unwrap_or_default().trim().is_empty() && waited < 500 {
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
    }
    std::thread::sleep(Duration::from_millis(200));
    let status = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "the command was not stopped");
    (output.status.code(), read_report(&out, &output))
}

#[test]
fn sigint_and_sigterm_are_forwarded_and_the_report_written() {
    let (code, report) = interrupt("sigint", "-INT", &[], &["sleep", "30"]);
    assert_eq!(code, Some(130));
    assert_eq!(report["ended_by"], "interrupted");
    assert_eq!(report["signal"], "SIGINT");
    assert_eq!(report["commands"][0]["exit"]["signal"], "SIGINT");
    assert!(report["duration_ms"].as_f64().unwrap() > 100.0);

    let (code, report) = interrupt("sigterm", "-TERM", &[], &["sleep", "30"]);
    assert_eq!(code, Some(143));
    assert_eq!(report["signal"], "SIGTERM");
    assert_eq!(report["commands"][0]["exit"]["signal"], "SIGTERM");

    // A command that ignores the signal is killed after the grace period.
    let stubborn = ["sh", "-c", "trap '' INT; sleep 30"];
    let (code, report) = interrupt("stubborn", "-INT", &["--grace", "300ms"], &stubborn);
    assert_eq!(code, Some(130));
    assert_eq!(report["commands"][0]["exit"]["signal"], "SIGKILL");
}

#[test]
fn out_of_memory_messages_fail_the_run() {
    let machine = json!({"devices": [h100(&json!([[0, GIB]]), &json!([]))]});
    let script = "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; echo fine";
    let (code, report, output) = run("oom", &machine, &[], &["sh", "-c", script]);
    assert_eq!(code, 1);
    let m = &report["commands"][0]["oom"][0];
    assert_eq!(m["stream"], "stderr");
    assert!(m["signature"].as_str().unwrap().starts_with("PyTorch"));
    // The command's output still reaches the terminal.
    assert!(String::from_utf8_lossy(&output.stdout).contains("fine"));
    assert!(String::from_utf8_lossy(&output.stderr).contains("Tried to allocate"));
}

#[test]
fn co_resident_commands_are_measured_together_not_summed() {
    // Command 0 peaks at 150 ms, command 1 at 300 ms: together they never hold both peaks.
    let machine = json!({"devices": [h100(
        &json!([[0, 3 * GIB]]),
        &json!([
            {"pid": "child:0", "used": [[0, GIB], [150, 5 * GIB], [200, GIB]]},
            {"pid": "child:1", "used": [[0, GIB], [300, 4 * GIB], [350, GIB]]}
        ])
    )]});
    let (code, report, _) =
        run("coresident", &machine, &[], &["sleep", "0.5", "---", "sleep", "0.5"]);
    assert_eq!(code, 0, "{report:#}");
    let d = &report["devices"][0];
    assert_eq!(d["command_peaks"][0]["bytes"], 5 * GIB);
    assert_eq!(d["command_peaks"][1]["bytes"], 4 * GIB);
    assert_eq!(d["combined_peak"]["bytes"], 6 * GIB);
    assert_eq!(d["sum_of_command_peaks"], 9 * GIB);
    assert_eq!(report["commands"].as_array().unwrap().len(), 2);
}

#[test]
fn a_commands_descendants_are_attributed_to_it() {
    let machine = json!({"devices": [h100(
        &json!([[0, 3 * GIB]]),
        &json!([
            {"pid": "child:0.0", "used": [[0, 2 * GIB]]},
            {"pid": 1, "used": [[0, 7 * GIB]]}
        ])
    )]});
    let (code, report, _) =
        run("descendants", &machine, &["--record-command"], &["sh", "-c", "sleep 0.3 & wait"]);
    assert_eq!(code, 0, "{report:#}");
    let d = &report["devices"][0];
    assert_eq!(d["command_peaks"][0]["bytes"], 2 * GIB);
    assert_eq!(d["others_peak"]["bytes"], 7 * GIB, "pid 1 is not the command's");
    assert_eq!(report["commands"][0]["argv"], json!(["sh", "-c", "sleep 0.3 & wait"]));
    assert!(report["conditions"]["environment"]["VRAM_NVML_SIM_SCENARIO"].is_string());
}

/// A plan whose estimate is exactly 8 GiB on an H100 SXM (components written by hand).
const PLAN: &str = r#"
workload job "Test job" {
  components {
    weights     6 GiB persistent
    activations 2 GiB intermediate
  }
}

headroom default {
  keep     5 %
  at_least 1 GiB
}

check job on h100-sxm-80gb
"#;

#[test]
fn check_holds_the_peak_against_the_estimate_and_headroom() {
    let plan = tmp("plan.vram");
    std::fs::write(&plan, PLAN).unwrap();
    let plan = plan.to_str().unwrap();
    let budget = vram_core::evaluate(PLAN).budget;
    let estimate = budget.checks[0].devices[0].used.0;
    assert_eq!(estimate, 8 * GIB);

    let machine = |peak: u64| {
        json!({"devices": [h100(
            &json!([[0, GIB], [50, GIB + peak]]),
            &json!([{"pid": "child:0", "used": [[0, GIB], [50, peak]]}])
        )]})
    };
    let (code, report, output) =
        run("check-within", &machine(7 * GIB), &["--check", "job", plan], &["sleep", "0.2"]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&output.stderr));
    let c = &report["check"];
    assert_eq!(c["check"], "job on h100-sxm-80gb");
    assert_eq!(c["verdict"], "pass");
    let d = &c["devices"][0];
    assert_eq!(d["estimate"], estimate);
    assert_eq!(d["measured"], 7 * GIB);
    assert_eq!(d["measured_view"], "process");
    assert_eq!(d["status"], "within_estimate");
    assert_eq!(d["capacity_measured"], 85_520_809_984_u64);
    assert!(d["headroom_rule"].as_str().unwrap().contains("keep 5 %"));
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(summary.contains("check `job on h100-sxm-80gb`"), "{summary}");

    // Above the estimate, but the headroom still holds: a note, not a failure.
    let (code, report, _) =
        run("check-over", &machine(9 * GIB), &["--check", "job", plan], &["sleep", "0.2"]);
    assert_eq!(code, 0);
    assert_eq!(report["check"]["devices"][0]["status"], "over_estimate");
    assert!(report["check"]["notes"][0].as_str().unwrap().contains("vram calibrate"));

    // The peak eats into the headroom: the acceptance test fails.
    let (code, report, _) =
        run("check-broken", &machine(78 * GIB), &["--check", "job", plan], &["sleep", "0.2"]);
    assert_eq!(code, 1);
    assert_eq!(report["check"]["devices"][0]["status"], "headroom_broken");
    assert_eq!(report["check"]["verdict"], "fail");

    // A check that does not exist is a usage error, before anything runs.
    let output = probe(&scenario("check-missing", &machine(GIB)))
        .args(["run", "--check", "nope", plan, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no check matches `nope`"));
}

/// A plan that reads its model from a config.json beside it, as a repository keeps them.
const IMPORTING_PLAN: &str = r#"
model qwen3 "Qwen3 8B" {
  from "models/qwen3-8b/config.json"
}

workload chat "Chat" {
  model qwen3
  inference {
    weights  bf16
    context  4096 tokens
    sessions 2
  }
}

check chat on h100-sxm-80gb
"#;

#[test]
fn check_and_verify_read_the_model_files_a_plan_imports() {
    let dir = tmp("importing-plan");
    let models = dir.join("models/qwen3-8b");
    std::fs::create_dir_all(&models).unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures/import/configs/Qwen-Qwen3-8B.json");
    std::fs::copy(&config, models.join("config.json")).unwrap();
    let plan = dir.join("plan.vram");
    std::fs::write(&plan, IMPORTING_PLAN).unwrap();

    // The estimate is the one `vram check` makes with the same file read.
    let expected = vram_files::evaluate(IMPORTING_PLAN, &dir, vram_core::catalog::builtin());
    assert!(expected.diagnostics.iter().all(|d| !d.is_error()), "{:?}", expected.diagnostics);
    let estimate = expected.budget.checks[0].devices[0].used.0;
    let machine = json!({"devices": [h100(
        &json!([[0, GIB], [50, 18 * GIB]]),
        &json!([{"pid": "child:0", "used": [[0, GIB], [50, 17 * GIB]]}])
    )]});
    let (code, report, output) =
        run("importing-check", &machine, &["--check", "chat", plan.to_str().unwrap()], &["true"]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(report["check"]["devices"][0]["estimate"], estimate);

    let output = probe(&scenario("importing-verify", &machine)).arg("verify").arg(&plan).output();
    let output = output.unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("check target h100-sxm-80gb"), "{text}");

    // A missing model file is the core's E023 at the `from`, not an IO error of the probe.
    std::fs::remove_file(models.join("config.json")).unwrap();
    let output = probe(&scenario("importing-missing", &machine))
        .args(["run", "--check", "chat"])
        .arg(&plan)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("E023") && stderr.contains("plan.vram:3:8"), "{stderr}");
}

fn python_helper_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python")
}

/// A workload that reports a framework view through the Python helper (without torch: it gives
/// its peaks by hand) and a quality metric.
fn python_job(allocated: u64, reserved: u64, loss: f64) -> String {
    format!(
        "import sys; sys.path.insert(0, '{dir}'); import vram_probe_report as v; \
         v.set_devices([{{'index': 0, 'allocated_peak': {allocated}, 'reserved_peak': {reserved}}}], \
         framework='pytorch', framework_version='2.5.0', cuda_version='12.4'); \
         v.set_quality('eval_loss', {loss}, higher_is_better=False)",
        dir = python_helper_dir().display()
    )
}

#[test]
fn the_framework_view_sits_beside_the_process_and_device_views() {
    let machine = json!({"devices": [h100(
        &json!([[0, GIB], [30, 7 * GIB]]),
        &json!([{"pid": "child:0", "used": [[0, 6 * GIB]]}])
    )]});
    let script = python_job(4 * GIB, 5 * GIB, 1.25);
    let (code, report, output) = run(
        "framework",
        &machine,
        &[],
        &["sh", "-c", &format!("sleep 0.2; python3 -c \"{script}\"")],
    );
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&output.stderr));
    let view = &report["commands"][0]["framework"];
    assert_eq!(view["framework"], "pytorch");
    assert_eq!(view["quality"]["metric"], "eval_loss");
    let v = &report["devices"][0]["views"][0];
    assert_eq!(v["framework_allocated"], 4 * GIB);
    assert_eq!(v["framework_reserved"], 5 * GIB);
    assert_eq!(v["process"], 6 * GIB);
    assert_eq!(v["device"], 6 * GIB);
    assert_eq!(v["allocator_cache"], GIB);
    assert_eq!(v["outside_allocator"], GIB, "context and memory outside the allocator");
    assert_eq!(v["outside_process"], 0);
}

#[test]
fn compare_sets_two_runs_side_by_side() {
    let machine = |peak: u64| {
        json!({"devices": [h100(
            &json!([[0, GIB]]),
            &json!([{"pid": "child:0", "used": [[0, peak]]}])
        )]})
    };
    let job = |loss: f64| format!("sleep 0.15; python3 -c \"{}\"", python_job(GIB, GIB, loss));
    let (_, _, _) = run("compare-a", &machine(8 * GIB), &[], &["sh", "-c", &job(1.25)]);
    let (_, _, _) = run("compare-b", &machine(6 * GIB), &[], &["sh", "-c", &job(1.26)]);
    let a = tmp("compare-a.report.json");
    let b = tmp("compare-b.report.json");
    let output = Command::new(env!("CARGO_BIN_EXE_vram-probe"))
        .args(["compare", "--format", "json"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let c: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(c["devices"][0]["a"], 8 * GIB);
    assert_eq!(c["devices"][0]["b"], 6 * GIB);
    assert_eq!(c["devices"][0]["saved"], 2 * GIB);
    assert_eq!(c["devices"][0]["saved_percent"], 25.0);
    assert_eq!(c["quality"]["metric"], "eval_loss");
    assert_eq!(c["quality"]["change"], "worse");
    let table = Command::new(env!("CARGO_BIN_EXE_vram-probe"))
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("saves 2.00 GiB (25.0 %)"), "{text}");
    assert!(text.contains("eval_loss"), "{text}");
}

#[test]
fn run_summary_in_prometheus_text() {
    let machine = json!({"devices": [h100(&json!([[0, GIB], [20, 3 * GIB]]), &json!([]))]});
    let (_, _, output) =
        run("prometheus-run", &machine, &["--format", "prometheus"], &["sleep", "0.1"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("vram_probe_run_pass 1"), "{text}");
    assert!(text.contains(&format!(
        "vram_probe_run_peak_used_bytes{{gpu=\"0\",uuid=\"GPU-11111111-2222-3333-4444-555555555555\"}} {}",
        3 * GIB
    )));
    assert!(text.contains("vram_probe_run_exit_code{command=\"0\"} 0"));
}

fn h200(i: usize) -> Value {
    let mut d = h100(&json!([[0, 0]]), &json!([]));
    d["name"] = json!("NVIDIA H200");
    d["uuid"] = json!(format!("GPU-h200-{i}"));
    d["total"] = json!(143_771_u64 << 20);
    d
}

#[test]
fn verify_checks_the_declared_machine_item_by_item() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/dgx-405b.vram");
    let good = scenario("verify-good", &json!({"devices": (0..8).map(h200).collect::<Vec<_>>()}));
    let output = probe(&good).arg("verify").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("machine hgx-h200"), "{text}");
    assert!(text.contains("PASS  machine count"), "{text}");
    assert!(text.contains("PASS  GPU 7   memory               declared 150754820096 B (exact); found 150754820096 B"), "{text}");
    assert!(text.contains("PASS  GPU 0   precision fp8"), "{text}");
    assert!(text.ends_with("verified\n"), "{text}");

    // Seven GPUs, one a MiB short, one an A100 in disguise.
    let mut devices: Vec<Value> = (0..7).map(h200).collect();
    devices[1]["total"] = json!((143_771_u64 - 1) << 20);
    devices[2]["architecture"] = json!("ampere");
    devices[2]["compute_capability"] = json!([8, 0]);
    devices[2]["name"] = json!("NVIDIA A100-SXM4-80GB");
    let bad = scenario("verify-bad", &json!({"devices": devices}));
    let output = probe(&bad).args(["verify", "--format", "json"]).arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&output.stdout).unwrap();
    let failed: Vec<String> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["pass"] == false)
        .map(|i| format!("{} {}", i["subject"].as_str().unwrap(), i["item"].as_str().unwrap()))
        .collect();
    assert_eq!(
        failed,
        [
            "machine count",
            "GPU 1 memory",
            "GPU 2 model",
            "GPU 2 architecture",
            "GPU 2 compute_capability",
            "GPU 2 precision fp8",
            "GPU 7 present"
        ]
    );
}

#[test]
fn the_sample_reports_are_reports_of_this_version() {
    // tests/probe-reports/ feeds `vram calibrate`'s tests and the docs; regenerate them with
    // tools/make-probe-reports.sh when the format changes.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/probe-reports");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let report = vram_probe::report::RunReport::from_json(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(report.schema_version, vram_probe::devices::SCHEMA_VERSION);
            assert!(report.check.is_some(), "{}", path.display());
            seen += 1;
        }
    }
    assert_eq!(seen, 3);
}

#[test]
fn the_python_helper_writes_nothing_without_a_view() {
    // No torch with CUDA and no `set_devices`: nothing to report, no file, no error.
    let target = tmp("python-empty.json");
    let _ = std::fs::remove_file(&target);
    let script = format!(
        "import sys; sys.path.insert(0, '{}'); import vram_probe_report as v; \
         assert v.view() is None; print(v.write())",
        python_helper_dir().display()
    );
    let output = Command::new("python3")
        .args(["-c", &script])
        .env("VRAM_PROBE_FRAMEWORK_FILE", &target)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "None");
    assert!(!target.exists());
}

#[test]
fn a_terminal_gets_a_live_progress_line() {
    // `script` (util-linux) gives the probe a terminal.
    let _serial = serial();
    let machine = json!({
        "clock": "first_process_list",
        // 250 ms at 3 GiB: wide enough that a stall of a busy machine does not hide it.
        "devices": [h100(&json!([[0, 2 * GIB], [50, 3 * GIB], [300, 2 * GIB]]), &json!([]))]
    });
    let path = scenario("progress", &machine);
    let out = tmp("progress.report.json");
    let line = format!(
        "{} --nvml-lib {} run --out {} -- sleep 0.8",
        env!("CARGO_BIN_EXE_vram-probe"),
        sim_lib().display(),
        out.display()
    );
    let output = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("VRAM_NVML_SIM_SCENARIO", &path)
        .output()
        .expect("script (util-linux) runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("\r\x1b[2K"), "{text:?}");
    assert!(text.contains("GPU 0 2.00 GiB (peak 3.00 GiB)"), "{text:?}");
}
