//! Every malformed input in `tests/errors/` is reported with the code its header names, at a
//! line and column, and its rendering is snapshotted (`snapshots/diagnostics/`). No input
//! panics, and every error file exits as "input errors".

use vram_core::Status;
use vram_render::{Color, render, short};

/// The codes listed in a fixture's `# codes = [...]` header; a fixture without one fails.
fn header_codes(source: &str, name: &str) -> Vec<String> {
    let line = source
        .lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.trim_start_matches('#').trim().strip_prefix("codes = ").map(str::to_string))
        .unwrap_or_else(|| panic!("{name}: no `# codes = [...]` header"));
    line.trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|c| c.trim().trim_matches('"').to_string())
        .collect()
}

#[test]
fn every_malformed_input_gets_its_code_and_a_snapshot() {
    let mut count = 0;
    insta::with_settings!({
        snapshot_path => "../../../snapshots/diagnostics",
        prepend_module_to_snapshot => false,
    }, {
        insta::glob!("../../../tests/errors", "*.vram", |path| {
            let source = std::fs::read_to_string(path).expect("readable");
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            let outcome = vram_core::evaluate(&source);
            assert_eq!(outcome.status(), Status::InputErrors, "{name}");
            let mut codes: Vec<&str> = outcome.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.code).collect();
            codes.sort_unstable();
            codes.dedup();
            assert_eq!(codes, header_codes(&source, &name), "{name}");
            for diagnostic in &outcome.diagnostics {
                assert!(diagnostic.primary.end as usize <= source.len(), "{name}: span outside the text");
                assert!(vram_core::diagnostic::describe(diagnostic.code).is_some(), "{name}: undocumented {}", diagnostic.code);
            }
            let text = render(&outcome.diagnostics, &name, &source, Color::Never);
            insta::assert_snapshot!("rendered", text);
            count += 1;
        });
    });
    assert!(count >= 100, "only {count} malformed inputs; the corpus has at least 100");
}

#[test]
fn short_form_names_file_line_and_column() {
    let source = "model m {\n  layers = 32\n}\n";
    let outcome = vram_core::evaluate(source);
    assert_eq!(
        short(&outcome.diagnostics[0], "m.vram", source),
        "m.vram:2:10: error[E001]: expected a value, a block, or the end of the line, found `=`"
    );
}

#[test]
fn colour_is_ansi_only_when_asked() {
    let source = "check w on l4\n";
    let outcome = vram_core::evaluate(source);
    assert!(!render(&outcome.diagnostics, "x.vram", source, Color::Never).contains('\u{1b}'));
    assert!(render(&outcome.diagnostics, "x.vram", source, Color::Ansi).contains('\u{1b}'));
}
