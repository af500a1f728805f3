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
