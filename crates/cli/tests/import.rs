//! `vram import` run as users run it: on a checkpoint folder, single files and malformed
//! headers, with exit codes, the bytes it read, and snapshots (`snapshots/cli/`).

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const FIXTURES: &str = "crates/core/tests/fixtures/import";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn vram(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .current_dir(ROOT)
        .env("NO_COLOR", "1")
        .output()
        .expect("vram runs");
    Run {
        code: output.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(output.stdout).expect("utf-8"),
        stderr: String::from_utf8(output.stderr).expect("utf-8"),
    }
}

fn fixture(relative: &str) -> String {
    format!("{FIXTURES}/{relative}")
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

fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout).expect("valid JSON")
}

/// A fresh folder under the system's temporary directory.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vram-import-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn a_sharded_folder_gives_a_model_block_with_the_exact_bytes() {
    let run = vram(&["import", &fixture("sharded")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("weights_bytes  180_864 B"));
    assert!(run.stdout.contains("tied_embeddings true"));
    assert_eq!(vram_core::format::format(&run.stdout).as_deref(), Ok(run.stdout.as_str()));
    snapshot!("import-folder", run);

    // The index itself imports the same checkpoint, with its sibling config.json.
    let index = vram(&["import", &fixture("sharded/model.safetensors.index.json")]);
    assert_eq!(index.stdout, run.stdout);
}

#[test]
fn json_reports_the_bytes_read_which_are_the_headers_only() {
    let run = vram(&["import", "--format", "json", &fixture("sharded")]);
    assert_eq!(run.code, 0);
    let report = json(&run);
    let files = report["read"]["files"].as_array().expect("files");
    assert_eq!(files.len(), 4, "config, index and two shards");
    // Each shard: the 8-byte length and the header (expected.json `observed.data_start`).
    let read: Vec<u64> = files.iter().map(|f| f["bytes_read"].as_u64().expect("count")).collect();
    assert_eq!(read[2..], [736, 1328]);
    assert_eq!(report["model"]["weights"]["bytes"], 180_864);
    assert_eq!(report["model"]["params"], 90_432);
    assert!(report["vram"].as_str().is_some_and(|t| t.starts_with("# Imported from config.json")));

    let single = json(&vram(&["import", "-f", "json", &fixture("tiny-llama.safetensors")]));
    assert_eq!(single["read"]["bytes_read"], 2128);
    assert_eq!(single["read"]["file_size"], 216_400);
    assert_eq!(single["model"]["weights"]["format"], "bf16");

    let gguf = json(&vram(&["import", "-f", "json", &fixture("tiny-llama-q.gguf")]));
    let bytes_read = gguf["read"]["bytes_read"].as_u64().expect("count");
    assert!((4992..=16 << 10).contains(&bytes_read), "{bytes_read}");
    assert_eq!(gguf["model"]["weights"]["format"], "q4_k_m");
    assert_eq!(gguf["model"]["weights"]["bytes"], 219_456);
}

#[test]
fn single_files_config_json_and_split_gguf() {
    let run = vram(&["import", &fixture("configs/deepseek-ai-DeepSeek-V3.json"), "--name", "dsv3"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("model dsv3 \"deepseek-ai-DeepSeek-V3\" {"));
    assert!(run.stdout.contains("kv_lora_rank 512"));
    snapshot!("import-config", run);

    let split = vram(&["import", &fixture("split/tiny-llama-split-00002-of-00002.gguf")]);
    assert_eq!(split.code, 0, "{}", split.stderr);
    assert!(split.stdout.starts_with("# Imported from GGUF v3 (2 split shards).\n"));
    assert!(split.stdout.contains("model tiny-llama-split \"tiny-llama-split\" {"));
    snapshot!("import-gguf-split", split);
}

#[test]
fn malformed_headers_exit_2_with_their_code() {
    let dir = temp_dir("malformed");
    let mut truncated =
        std::fs::read(Path::new(ROOT).join(fixture("tiny-moe.gguf"))).expect("fixture");
    truncated.truncate(2000);
    std::fs::write(dir.join("cut.gguf"), &truncated).expect("writes");
    let header = br#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,64]}}"#;
    let mut lying = (header.len() as u64).to_le_bytes().to_vec();
    lying.extend(header);
    lying.extend([0u8; 16]);
    std::fs::write(dir.join("lying.safetensors"), &lying).expect("writes");
    std::fs::write(dir.join("broken.json"), "{\"num_hidden_layers\": 32,}\n").expect("writes");

    let shown = |run: &Run| transcript(run).replace(dir.to_str().expect("utf-8"), "[tmp]");
    let cut = vram(&["import", dir.join("cut.gguf").to_str().expect("utf-8")]);
    assert_eq!(cut.code, 2);
    assert!(cut.stderr.contains("error[I101]"));
    assert!(cut.stdout.is_empty());
    let bad_size = vram(&["import", dir.join("lying.safetensors").to_str().expect("utf-8")]);
    assert_eq!(bad_size.code, 2);
    let config = vram(&["import", dir.join("broken.json").to_str().expect("utf-8")]);
    assert!(config.stderr.contains("error[I103]") && config.stderr.contains("broken.json:1:26"));
    insta::with_settings!({ snapshot_path => "../../../snapshots/cli", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("import-errors", [shown(&cut), shown(&bad_size), shown(&config)].join("\n"));
    });

    let report =
        json(&vram(&["import", "-f", "json", dir.join("cut.gguf").to_str().expect("utf-8")]));
    assert_eq!(report["diagnostics"][0]["code"], "I101");
    assert!(report["model"].is_null());
    std::fs::remove_dir_all(&dir).expect("cleans up");
}

#[test]
fn a_missing_path_or_an_empty_folder_exits_2() {
    let run = vram(&["import", "no-such-checkpoint"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("cannot read no-such-checkpoint"));
    let dir = temp_dir("empty");
    let empty = vram(&["import", dir.to_str().expect("utf-8")]);
    assert_eq!(empty.code, 2);
    assert!(empty.stderr.contains("has no config.json, safetensors or GGUF file"));
    std::fs::remove_dir_all(&dir).expect("cleans up");
}
