//! The `vram` binary, run as users run it: output snapshots (`snapshots/cli/`) with exit codes.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn vram(args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .current_dir(ROOT)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vram starts");
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("writes");
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().expect("vram finishes");
    Run {
        code: output.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(output.stdout).expect("utf-8"),
        stderr: String::from_utf8(output.stderr).expect("utf-8"),
    }
}

fn transcript(run: &Run) -> String {
    format!("exit code: {}\n--- stdout\n{}--- stderr\n{}", run.code, run.stdout, run.stderr)
}

macro_rules! snapshot {
    ($name:expr, $run:expr) => {
        insta::with_settings!({ snapshot_path => "../../../snapshots/cli", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!($name, transcript(&$run));
        })
    };
}

#[test]
fn check_prints_per_device_budgets_and_exits_0_when_everything_fits() {
    let run = vram(&["check", "examples/llama3.1-70b-fp8-tp2.vram"], None);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("GPUs 0-1 (each)"));
    snapshot!("check-fits", run);
}

#[test]
fn check_exits_1_when_a_check_does_not_fit() {
    let run = vram(&["check", "examples/full-finetune-7b-24gb.vram"], None);
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("DOES NOT FIT"));
    snapshot!("check-does-not-fit", run);
}

#[test]
fn check_exits_2_with_code_line_and_column_on_bad_input() {
    let run = vram(&["check", "tests/errors/unknown-field.vram"], None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("error[E010]"));
    assert!(run.stderr.contains("unknown-field.vram:9:3"));
    snapshot!("check-errors", run);
}

#[test]
fn every_example_exits_as_its_header_says() {
    for entry in std::fs::read_dir(Path::new(ROOT).join("examples")).expect("examples/") {
        let path = entry.expect("entry").path();
        let source = std::fs::read_to_string(&path).expect("readable");
        let expected = if source.contains("# expect = \"fits\"") {
            0
        } else if source.contains("# expect = \"does-not-fit\"") {
            1
        } else {
            2
        };
        let run = vram(&["check", path.to_str().expect("utf-8 path")], None);
        assert_eq!(run.code, expected, "{}: {}", path.display(), run.stderr);
    }
}

#[test]
fn json_gives_components_with_category_provenance_and_formula() {
    let run = vram(&["check", "--format", "json", "examples/llama3.1-8b-chat.vram"], None);
    assert_eq!(run.code, 0);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
    let device = &json["files"][0]["budget"]["checks"][0]["devices"][0];
    assert_eq!(device["device"], "l4");
    let components = device["components"].as_array().expect("components");
    assert!(components.len() > 5);
    for component in components {
        assert!(component["category"].is_string() && component["provenance"].is_string());
        assert!(component["formula"].as_str().is_some_and(|f| f.contains('=')));
        assert!(component["bytes"].as_u64().is_some());
    }
    // vLLM: the cache is the pool it allocates; the sessions need 3 × 8192 tokens of it.
    assert!(components.iter().any(|c| c["name"] == "KV cache pool (vLLM)"));
    assert_eq!(device["kv_pool"]["needed_tokens"], 8192 * 3);
    assert_eq!(device["kv_pool"]["needed"], 131_072u64 * 8192 * 3);
}

#[test]
fn json_reports_diagnostics_with_positions() {
    let run = vram(&["check", "--format", "json", "-"], Some("model m {\n  layers = 32\n}\n"));
    assert_eq!(run.code, 2);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
    let diagnostic = &json["files"][0]["diagnostics"][0];
    assert_eq!(diagnostic["code"], "E001");
    assert_eq!(diagnostic["start"]["line"], 2);
    assert_eq!(diagnostic["start"]["column"], 10);
}

#[test]
fn markdown_has_a_table_per_device() {
    let run = vram(&["check", "--format", "markdown", "examples/render-scene.vram"], None);
    assert_eq!(run.code, 0);
    snapshot!("check-markdown", run);
}

#[test]
fn explain_shows_the_arithmetic_of_one_check() {
    let run =
        vram(&["explain", "examples/mistral-7b-fleet.vram", "--check", "serve-bf16 on l40s"], None);
    assert_eq!(run.code, 1, "the file as a whole does not fit");
    assert!(run.stdout.contains("KV cache pool (vLLM) [cache, formula]"));
    assert!(run.stdout.contains("KV pool (90 % of the device):"));
    snapshot!("explain-one-check", run);
}

#[test]
fn explain_names_the_checks_when_the_selector_matches_none() {
    let run = vram(&["explain", "examples/llama3.1-8b-chat.vram", "--check", "nope"], None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("`chat-l4 on l4`"));
}

#[test]
fn fmt_check_accepts_the_examples_and_rejects_unformatted_text() {
    let examples: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path().to_string_lossy().into_owned())
        .collect();
    let mut args = vec!["fmt", "--check"];
    args.extend(examples.iter().map(String::as_str));
    assert_eq!(vram(&args, None).code, 0);

    let run = vram(&["fmt", "-"], Some("model m { layers 32;hidden 4096 }\n"));
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, "model m {\n  layers 32\n  hidden 4096\n}\n");

    let dir = std::env::temp_dir().join(format!("vram-fmt-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("messy.vram");
    std::fs::write(&file, "model m {layers 32}\n").expect("writes");
    let path = file.to_str().expect("utf-8");
    assert_eq!(vram(&["fmt", "--check", path], None).code, 1);
    assert_eq!(vram(&["fmt", path], None).code, 0);
    assert_eq!(std::fs::read_to_string(&file).expect("reads"), "model m {\n  layers 32\n}\n");
    assert_eq!(vram(&["fmt", "--check", path], None).code, 0);
    std::fs::remove_dir_all(&dir).expect("cleans up");
}

#[test]
fn missing_files_and_bad_flags_exit_2() {
    let run = vram(&["check", "no-such-file.vram"], None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("cannot read no-such-file.vram"));
    assert_eq!(vram(&["check", "--format", "yaml", "examples/render-scene.vram"], None).code, 2);
}

#[test]
fn catalog_lists_devices_with_exact_bytes() {
    let run = vram(&["catalog", "--format", "json"], None);
    assert_eq!(run.code, 0);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
    let devices = json["devices"].as_array().expect("devices");
    assert!(devices.len() >= 30);
    let h100 = devices.iter().find(|d| d["name"] == "h100-sxm-80gb").expect("H100 in the catalog");
    assert_eq!(h100["memory"], 81_559u64 << 20);
    snapshot!("catalog", vram(&["catalog"], None));
}

#[test]
fn help_is_stable() {
    snapshot!("help", vram(&["--help"], None));
}

#[test]
fn schema_command_prints_the_committed_schema() {
    let run = vram(&["schema"], None);
    let committed = std::fs::read_to_string(Path::new(ROOT).join("schema/budget.schema.json"))
        .expect("committed schema");
    assert_eq!(run.stdout, committed);
}

#[test]
fn models_can_come_from_checkpoint_files() {
    let dir = std::env::temp_dir().join(format!("vram-from-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let fixture = Path::new(ROOT).join("crates/core/tests/fixtures/import/sharded");
    let source = format!(
        "model tiny {{\n  from \"{}\"\n}}\n\nworkload w {{\n  model tiny\n  runtime none\n  inference {{\n    weights fp16\n    context 64 tokens\n  }}\n}}\n\ncheck w on l4\n",
        fixture.display()
    );
    let file = dir.join("tiny.vram");
    std::fs::write(&file, source).expect("writes");
    let run = vram(&["check", "--format", "json", file.to_str().expect("utf-8")], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
    let weights = &json["files"][0]["budget"]["checks"][0]["devices"][0]["components"][0];
    // The shards' headers say 180,864 bytes of fp16 tensors (the index's total_size).
    assert_eq!(weights["bytes"], 180_864);
    assert_eq!(weights["provenance"], "exact");

    std::fs::write(&file, "model tiny {\n  from \"missing/config.json\"\n}\n").expect("writes");
    let run = vram(&["check", file.to_str().expect("utf-8")], None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("error[E023]"), "{}", run.stderr);
    std::fs::remove_dir_all(&dir).expect("cleans up");
}

#[test]
fn calibrate_turns_probe_reports_into_a_headroom_rule_the_language_accepts() {
    let reports = [
        "tests/probe-reports/h100-run1.json",
        "tests/probe-reports/h100-run2.json",
        "tests/probe-reports/a100-run1.json",
    ];
    let mut args = vec!["calibrate"];
    args.extend(reports);
    let run = vram(&args, None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Hopper: peaks of 8.5 and 8.25 GiB against an 8 GiB estimate: 512 MiB of excess plus
    // 256 MiB of spread between the two runs. Ampere: within the estimate.
    assert!(
        run.stdout.contains("hopper: 2 observation(s), peak/estimate 1.031-1.062"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("  arch hopper {\n    keep     1 %\n    at_least 768 MiB\n  }"));
    assert!(run.stdout.contains("  arch ampere {\n    keep     1 %\n    at_least 256 MiB\n  }"));
    assert!(run.stdout.contains("runtime custom { context 512 MiB }"));

    // The emitted block is valid .vram, and a check can use it.
    let source = format!(
        "{}\nworkload job {{\n  components {{\n    weights 6 GiB persistent\n  }}\n}}\n\
         check job on h100-sxm-80gb headroom calibrated\n",
        run.stdout
    );
    let outcome = vram_core::evaluate(&source);
    assert!(
        !outcome.diagnostics.iter().any(vram_core::diagnostic::Diagnostic::is_error),
        "{:?}",
        outcome.diagnostics
    );
    let device = &outcome.budget.checks[0].devices[0];
    // The larger of 1 % of 79.65 GiB and 768 MiB.
    assert_eq!(device.headroom.bytes.0, 855_208_100);
    assert!(device.headroom.rule.contains("calibrated"), "{}", device.headroom.rule);

    let bad = vram(&["calibrate", "tests/probe-reports/plan.vram"], None);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("not a probe report"), "{}", bad.stderr);
}

#[test]
fn a_user_catalog_replaces_the_built_in_machines() {
    let dir = std::env::temp_dir().join(format!("vram-catalog-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let catalog = dir.join("ours.vram");
    std::fs::write(
        &catalog,
        "machine rack-a {\n  gpus     2 x l40s\n  host_ram 256 GiB\n}\n\nmachine box-b {\n  gpus     1 x l4\n  host_ram 32 GiB\n}\n",
    )
    .expect("writes");
    let workload = "workload chat { model llama3.1-8b; runtime vllm; inference { weights bf16; context 8192 tokens; sessions 8 } }\nfind machines in catalog for chat\n";
    let run = vram(
        &["check", "--format", "json", "--catalog", catalog.to_str().expect("utf-8"), "-"],
        Some(workload),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
    let machines = &json["files"][0]["budget"]["queries"][0]["machines"];
    let names: Vec<&str> =
        machines.as_array().expect("a list").iter().filter_map(|m| m["machine"].as_str()).collect();
    assert_eq!(names, ["rack-a"], "only the user's machines, and only those that fit");

    std::fs::write(&catalog, "machine broken {\n  gpus 2 x no-such-gpu\n}\n").expect("writes");
    let run = vram(&["check", "--catalog", catalog.to_str().expect("utf-8"), "-"], Some(workload));
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("error[E020]"), "{}", run.stderr);
    std::fs::remove_dir_all(&dir).expect("cleans up");
}

/// A reader that stops early (`vram check ... | head`) closes the pipe: the command ends quietly
/// instead of panicking on the broken pipe. The output is far beyond a pipe's buffer, so the
/// writes after the close really fail.
#[test]
fn a_closed_standard_output_is_not_a_panic() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(["check", "--format", "json"])
        .args(
            std::fs::read_dir(Path::new(ROOT).join("examples"))
                .expect("examples")
                .map(|entry| entry.expect("entry").path()),
        )
        .current_dir(ROOT)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vram starts");
    let mut head = [0u8; 16];
    child.stdout.take().expect("stdout").read_exact(&mut head).expect("reads the start");
    let output = child.wait_with_output().expect("vram finishes");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(output.status.code(), Some(101), "{stderr}");
}

#[test]
fn map_draws_where_a_check_fits_over_context_and_sessions() {
    let run = vram(&["map", "examples/llama3.1-8b-chat.vram", "--check", "chat-l4 on l4"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The written point (8192 tokens, 3 sessions) fits, as `vram check` says, and so do 2; 4
    // sessions at that context do not (the pool holds 26,640 tokens).
    assert!(run.stdout.contains("8192 tok │   █   █   ·   ·"), "{}", run.stdout);
    snapshot!("map", run);

    let several = vram(&["map", "examples/llama3.1-8b-chat.vram"], None);
    assert_eq!(several.code, 2);
    assert!(several.stderr.contains("choose a check with --check"), "{}", several.stderr);
    let unordered = vram(
        &["map", "examples/llama3.1-8b-chat.vram", "--check", "chat-l4 on l4", "--sessions", "8,2"],
        None,
    );
    assert_eq!(unordered.code, 2);
    assert!(unordered.stderr.contains("sessions"), "{}", unordered.stderr);
}
