//! The probe's fault scenarios (issue 8), through the simulated NVML: a device lost in mid-run,
//! NVML failing every call, a process list denied, a command whose fork outlives it, and a
//! command that never exits. Each must leave a complete report, written and parseable, with
//! the gap recorded and nothing unknown written as 0. docs/reliability.md lists them.

mod common;

use serde_json::{Value, json};
use vram_probe::report::RunReport;

use common::{GIB, h100, probe, run, scenario, serial, tmp};

/// The report parses as the probe's own model, and a failed run says why.
fn complete(report: &Value) -> RunReport {
    let parsed = RunReport::from_json(&report.to_string()).expect("a complete report");
    assert_eq!(parsed.kind, "vram-probe-run");
    assert_eq!(parsed.verdict == "pass", parsed.reasons.is_empty(), "{:?}", parsed.reasons);
    assert!(parsed.sampling.ticks > 0, "the sampler ran");
    parsed
}

/// `value` is `{"unavailable": reason}` and the reason contains `needle`.
fn unavailable(value: &Value, needle: &str) {
    let why = value["unavailable"].as_str().unwrap_or_else(|| panic!("not unavailable: {value}"));
    assert!(why.contains(needle), "`{why}` does not name `{needle}`");
}

#[test]
fn a_device_lost_mid_run_keeps_what_was_measured_and_records_the_rest_as_a_gap() {
    // The spike at 300 ms happens after the loss: the report must not claim to have seen it.
    let machine = json!({
        "devices": [h100(
            &json!([[0, GIB], [50, 3 * GIB], [300, 9 * GIB]]),
            &json!([{"pid": "child:0", "used": [[0, GIB], [50, 2 * GIB], [300, 8 * GIB]]}])
        )],
        "faults": [{"at_ms": 150, "call": "any", "error": "gpu_lost"}]
    });
    let (code, report, output) = run("fault-lost", &machine, &[], &["sleep", "0.5"]);
    assert_eq!(code, 1, "missing samples fail the run");
    let parsed = complete(&report);
    let d = &report["devices"][0];
    assert_eq!(d["peak_used"]["bytes"], 3 * GIB, "the peak measured before the loss");
    assert_eq!(d["command_peaks"][0]["bytes"], 2 * GIB);
    let gaps = d["gaps"].as_array().unwrap();
    let calls: Vec<&str> = gaps.iter().map(|g| g["call"].as_str().unwrap()).collect();
    assert_eq!(calls.len(), 2, "{gaps:?}");
    assert!(calls.contains(&"nvmlDeviceGetMemoryInfo_v2"));
    assert!(calls.contains(&"nvmlDeviceGetComputeRunningProcesses_v3"));
    for gap in gaps {
        assert!(gap["error"].as_str().unwrap().contains("fell off the bus"), "{gap}");
        let (from, to) = (gap["from_ms"].as_f64().unwrap(), gap["to_ms"].as_f64().unwrap());
        assert!((140.0..450.0).contains(&from), "lost from {from} ms");
        assert!(to > 400.0, "lost for good, to {to} ms");
        assert!(gap["failed_samples"].as_u64().unwrap() > 50);
    }
    assert!(parsed.reasons.iter().any(|r| r.contains("samples missing")), "{:?}", parsed.reasons);
    // After the loss the timeline holds nulls, not zeros.
    let used = report["timeline"]["devices"][0]["used_max"].as_array().unwrap();
    assert!(used.iter().rev().take(10).all(Value::is_null), "{:?}", &used[used.len() - 10..]);
    assert!(!used.iter().any(|v| v == &json!(0)));
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(summary.contains("gap ") && summary.contains("samples missing"), "{summary}");
}

#[test]
fn nvml_failing_every_call_still_leaves_a_report_of_the_command() {
    // Every call after nvmlInit fails: the system calls, the device count, every device call.
    let machine = json!({
        "devices": [h100(&json!([[0, GIB]]), &json!([]))],
        "faults": [{"call": "system", "error": "unknown"}, {"call": "any", "error": "unknown"}]
    });
    let (code, report, _) = run("fault-every-call", &machine, &[], &["sh", "-c", "exit 0"]);
    assert_eq!(code, 1);
    let parsed = complete(&report);
    unavailable(&report["software"]["system"]["driver_version"], "nvmlSystemGetDriverVersion");
    unavailable(&report["conditions"]["device_count"], "nvmlDeviceGetCount_v2");
    assert_eq!(report["devices"], json!([]), "no device invented");
    assert_eq!(report["commands"][0]["exit"]["code"], 0, "the command itself is still reported");
    assert!(parsed.reasons[0].contains("could not count the GPUs"), "{:?}", parsed.reasons);

    // The count works, but every device call fails: the device stays in the report, every
    // figure unavailable, the whole run a gap.
    let machine = json!({
        "devices": [h100(&json!([[0, GIB]]), &json!([{"pid": "child:0", "used": [[0, GIB]]}]))],
        "faults": [{"call": "any", "error": "unknown"}]
    });
    let (code, report, _) = run("fault-every-device-call", &machine, &[], &["sleep", "0.2"]);
    assert_eq!(code, 1);
    let parsed = complete(&report);
    assert_eq!(report["conditions"]["device_count"], 1);
    let d = &report["devices"][0];
    for field in ["uuid", "name", "total", "baseline_used", "peak_used", "peak_over_baseline"] {
        unavailable(&d[field], "");
    }
    for field in ["combined_peak", "others_peak"] {
        unavailable(&d[field], "");
    }
    unavailable(&d["command_peaks"][0], "nvmlDeviceGetHandleByIndex_v2");
    let gap = &d["gaps"][0];
    assert_eq!(gap["call"], "nvmlDeviceGetHandleByIndex_v2");
    assert_eq!(gap["failed_samples"], json!(parsed.sampling.ticks), "every tick is missing");
    assert!(gap["to_ms"].as_f64().unwrap() >= 190.0);
}

#[test]
fn nvml_init_failing_writes_no_report_and_starts_nothing() {
    let _serial = serial();
    let path = scenario(
        "fault-init",
        &json!({"devices": [], "faults": [{"call": "init", "error": "unknown"}]}),
    );
    let out = tmp("fault-init.report.json");
    let marker = tmp("fault-init.started");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&marker);
    let output = probe(&path)
        .args(["run", "--out"])
        .arg(&out)
        .arg("--")
        .arg("touch")
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stderr).contains("failed to initialise"));
    assert!(!out.exists(), "no report: nothing was run");
    assert!(!marker.exists(), "the command was not started");
}

#[test]
fn a_denied_process_list_leaves_the_device_view_and_no_per_process_zeros() {
    let machine = json!({
        "devices": [h100(
            &json!([[0, GIB], [100, 5 * GIB]]),
            &json!([{"pid": "child:0", "used": [[0, 2 * GIB]]}, {"pid": 1, "used": [[0, GIB]]}])
        )],
        "faults": [{"call": "processes", "error": "no_permission"}]
    });
    let (code, report, output) = run("fault-denied", &machine, &[], &["sleep", "0.3"]);
    // Some platforms never give a process list: the device view is still sampled on every tick,
    // so the run passes, with the gap recorded and a note that says what was measured instead.
    assert_eq!(code, 0, "a process list the platform never gives does not fail the run");
    complete(&report);
    let note = report["notes"][0].as_str().unwrap();
    assert!(note.contains("GPU 0") && note.contains("over the baseline"), "{note}");
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(summary.contains("note: GPU 0: NVML's process list failed"), "{summary}");
    let why = report["devices"][0]["process_list_unavailable"].as_str().unwrap();
    assert!(why.contains("ermission"), "{why}");
    let d = &report["devices"][0];
    assert_eq!(d["peak_used"]["bytes"], 5 * GIB);
    assert_eq!(d["peak_over_baseline"], 4 * GIB);
    unavailable(&d["command_peaks"][0], "ermission");
    unavailable(&d["combined_peak"], "ermission");
    unavailable(&d["sum_of_command_peaks"], "");
    unavailable(&d["others_peak"], "");
    assert_eq!(d["gaps"][0]["call"], "nvmlDeviceGetComputeRunningProcesses_v3");
    let commands_max = report["timeline"]["devices"][0]["commands_max"].as_array().unwrap();
    assert!(commands_max.iter().all(Value::is_null), "no per-process figure, not 0");
    // The measured figure falls back to the device view.
    let parsed = RunReport::from_json(&report.to_string()).unwrap();
    assert_eq!(parsed.measured(0), Some((4 * GIB, "device over baseline")));
}

#[test]
fn a_process_list_that_fails_only_at_times_fails_the_run() {
    // The list fails from 50 to 150 ms while the command's process grows: its peak may be in the
    // gap, so the per-process figure cannot be trusted as the command's peak.
    let machine = json!({
        "devices": [h100(
            &json!([[0, GIB], [100, 5 * GIB]]),
            &json!([{"pid": "child:0", "used": [[0, 2 * GIB], [100, 4 * GIB]]}])
        )],
        "faults": [{"at_ms": 50, "until_ms": 150, "call": "processes", "error": "unknown"}]
    });
    let (code, report, _) = run("fault-list-at-times", &machine, &[], &["sleep", "0.3"]);
    assert_eq!(code, 1);
    complete(&report);
    let reasons = report["reasons"].as_array().unwrap();
    assert!(
        reasons.iter().any(|r| r.as_str().unwrap().contains("process-list samples missing")),
        "{reasons:?}"
    );
    assert!(report["devices"][0].get("process_list_unavailable").is_none());
    assert!(report.get("notes").is_none(), "no note when the list was given at times");
}

/// A command whose fork keeps GPU memory after the command's own process has exited: `sh`
/// starts `sleep 0.6` in the background (its first child, `child:0.0`) and exits at 0.1 s.
fn forking_machine(until_ms: Option<f64>) -> Value {
    json!({
        "devices": [h100(
            &json!([[0, GIB], [300, 7 * GIB]]),
            &json!([{"pid": "child:0.0", "used": [[0, 2 * GIB], [300, 6 * GIB]], "until_ms": until_ms}])
        )]
    })
}

#[test]
fn a_fork_that_outlives_its_command_is_measured_until_it_lets_go() {
    let (code, report, output) = run(
        "fault-fork",
        &forking_machine(Some(650.0)),
        &[],
        &["sh", "-c", "sleep 0.6 & sleep 0.1"],
    );
    assert_eq!(code, 0, "{report:#}");
    complete(&report);
    let c = &report["commands"][0];
    assert_eq!(c["exit"]["code"], 0);
    assert!(c["duration_ms"].as_f64().unwrap() < 500.0, "sh itself ended early");
    // The fork's peak came after sh had exited, and is the command's.
    let peak = &report["devices"][0]["command_peaks"][0];
    assert_eq!(peak["bytes"], 6 * GIB, "{report:#}");
    assert!(peak["at_ms"].as_f64().unwrap() > 250.0);
    let outlived = &c["outlived"];
    assert_eq!(outlived["pids"].as_array().unwrap().len(), 1, "{outlived}");
    let until = outlived["until_ms"].as_f64().unwrap();
    assert!((500.0..1500.0).contains(&until), "the fork let go at {until} ms");
    assert!(report["duration_ms"].as_f64().unwrap() >= until);
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(summary.contains("held GPU memory after it exited"), "{summary}");
}

#[test]
fn a_command_that_never_exits_is_stopped_at_the_timeout() {
    let (code, report, output) = run(
        "fault-timeout",
        &json!({"devices": [h100(&json!([[0, GIB]]), &json!([]))]}),
        &["--timeout", "500ms"],
        &["sleep", "30"],
    );
    assert_eq!(code, 1, "{}", String::from_utf8_lossy(&output.stderr));
    let parsed = complete(&report);
    assert_eq!(report["ended_by"], "timed_out");
    assert_eq!(report["signal"], Value::Null, "no signal was caught");
    assert_eq!(report["conditions"]["timeout_ms"], 500);
    assert_eq!(report["commands"][0]["exit"]["signal"], "SIGTERM");
    let duration = report["duration_ms"].as_f64().unwrap();
    assert!((450.0..3000.0).contains(&duration), "stopped after {duration} ms");
    assert!(parsed.reasons[0].contains("timed out after 0.5 s"), "{:?}", parsed.reasons);
    assert!(String::from_utf8_lossy(&output.stderr).contains("run timed out"));

    // One that ignores SIGTERM gets SIGKILL after the grace period.
    let stubborn = ["sh", "-c", "trap '' TERM; sleep 30"];
    let machine = json!({"devices": [h100(&json!([[0, GIB]]), &json!([]))]});
    let (code, report, _) = run(
        "fault-timeout-stubborn",
        &machine,
        &["--timeout", "300ms", "--grace", "300ms"],
        &stubborn,
    );
    assert_eq!(code, 1);
    complete(&report);
    assert_eq!(report["commands"][0]["exit"]["signal"], "SIGKILL");
    assert!(report["duration_ms"].as_f64().unwrap() >= 550.0);

    // A fork that keeps its GPU memory for good, after its command exited: the timeout stops it.
    let (code, report, _) = run(
        "fault-fork-timeout",
        &forking_machine(None),
        &["--timeout", "800ms", "--grace", "300ms"],
        &["sh", "-c", "sleep 30 & sleep 0.1"],
    );
    assert_eq!(code, 1);
    complete(&report);
    assert_eq!(report["ended_by"], "timed_out");
    assert_eq!(report["commands"][0]["exit"]["code"], 0, "sh itself exited");
    assert!(report["commands"][0]["outlived"]["until_ms"].as_f64().unwrap() > 700.0);
    assert_eq!(report["devices"][0]["command_peaks"][0]["bytes"], 6 * GIB);
}
