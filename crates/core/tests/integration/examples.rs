//! Every file in `examples/` is evaluated, checked against its header, and its budget
//! snapshotted (`snapshots/examples/`).

use super::header;

#[test]
fn every_example_matches_its_header_and_snapshot() {
    let mut count = 0;
    insta::with_settings!({
        snapshot_path => "../../../../snapshots/examples",
        prepend_module_to_snapshot => false,
    }, {
        insta::glob!("../../../../examples", "*.vram", |path| {
            let source = std::fs::read_to_string(path).expect("example is readable");
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let outcome = vram_core::evaluate(&source);
            header::assert_matches(&outcome, &header::read(&source, name), name);
            assert!(!outcome.budget.checks.is_empty(), "{name}: an example must evaluate at least one check");
            insta::assert_yaml_snapshot!("budget", outcome.budget);
            count += 1;
        });
    });
    assert!(count >= 6, "expected at least 6 examples, found {count}");
}

#[test]
fn evaluation_is_deterministic() {
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"))
        .expect("examples/")
    {
        let source = std::fs::read_to_string(entry.expect("entry").path()).expect("readable");
        let a = serde_json::to_string(&vram_core::evaluate(&source).budget).expect("serializes");
        let b = serde_json::to_string(&vram_core::evaluate(&source).budget).expect("serializes");
        assert_eq!(a, b);
    }
}

/// Keys only an importer writes (`vram import`, or `from "..."`, which the front end reads):
/// the import snapshots (`snapshots/cli/import-*.snap`) show them.
const WRITTEN_BY_IMPORTERS: &[&str] = &["from", "weights_bytes"];

/// Every key a block accepts, as the checker lists them: `("key", Repeat::...)` in
/// `src/check/`.
fn accepted_keys() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/check");
    let mut keys = Vec::new();
    for entry in std::fs::read_dir(dir).expect("src/check/") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("readable");
        for (at, _) in text.match_indices("\", Repeat::") {
            let key = text[..at].rsplit("(\"").next().unwrap_or_default();
            if !key.is_empty()
                && key.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
            {
                keys.push(key.to_string());
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// The keys written in `text`: the first word of every line and of every `;`-separated field.
fn written_keys(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .flat_map(|line| line.split(['{', ';']))
        .filter_map(|field| field.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_key_the_language_accepts_is_shown_by_an_example_or_the_catalog() {
    let mut written = std::collections::BTreeSet::new();
    for dir in ["/../../examples", "/src/catalog"] {
        let dir = format!("{}{dir}", env!("CARGO_MANIFEST_DIR"));
        for entry in std::fs::read_dir(&dir).expect("a directory of .vram files") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "vram") {
                written.extend(written_keys(&std::fs::read_to_string(&path).expect("readable")));
            }
        }
    }
    let keys = accepted_keys();
    assert!(
        keys.len() > 100,
        "the scan found {} keys: has the checker's layout changed?",
        keys.len()
    );
    for key in ["cross_attention_dim", "bitsandbytes", "memory", "samples"] {
        assert!(keys.iter().any(|k| k == key), "the scan missed `{key}`");
    }
    let missing: Vec<&String> = keys
        .iter()
        .filter(|key| !written.contains(*key) && !WRITTEN_BY_IMPORTERS.contains(&key.as_str()))
        .collect();
    assert!(missing.is_empty(), "no example (examples/) or catalog entry writes {missing:?}");
}
