//! House rules checked by tests: every module opens with `//!`, every diagnostic code is
//! documented, and the committed JSON Schema matches the types.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            if !path.ends_with("target") && !path.ends_with("tests") && !path.ends_with("examples")
            {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_starts_with_a_doc_comment() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    rust_files(&crates, &mut files);
    assert!(files.len() > 20);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        assert!(
            text.starts_with("//!"),
            "{} does not start with a `//!` module doc",
            file.display()
        );
    }
}

#[test]
fn every_diagnostic_code_is_documented() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/diagnostics.md"))
            .expect("docs/diagnostics.md");
    for (code, summary) in vram_core::diagnostic::CODES {
        assert!(
            doc.contains(&format!("`{code}`")),
            "{code} ({summary}) is not in docs/diagnostics.md"
        );
    }
}

#[test]
fn committed_schema_matches_the_budget_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schema/budget.schema.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    let generated =
        serde_json::to_string_pretty(&vram_core::budget::schema()).expect("serializes") + "\n";
    assert!(
        committed == generated,
        "schema/budget.schema.json is stale: run `cargo run -p vram -- schema > schema/budget.schema.json` and commit"
    );
}
