//! The expectation header of a fixture: `# expect = "fits"` and `# codes = ["E012"]`.

use vram_core::Status;

#[derive(Debug)]
pub(crate) struct Header {
    pub expect: Status,
    pub codes: Vec<String>,
}

/// Reads the header, failing the test when it is missing or unknown: a fixture without an
/// expectation would pass by omission.
pub(crate) fn read(source: &str, name: &str) -> Header {
    let mut expect = None;
    let mut codes = Vec::new();
    for line in source.lines().take_while(|l| l.starts_with('#')) {
        let line = line.trim_start_matches('#').trim();
        if let Some(value) = line.strip_prefix("expect = ") {
            expect = Some(match value.trim_matches('"') {
                "fits" => Status::Fits,
                "does-not-fit" => Status::DoesNotFit,
                "errors" => Status::InputErrors,
                other => panic!("{name}: unknown expectation {other:?}"),
            });
        }
        if let Some(value) = line.strip_prefix("codes = ") {
            codes = value
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(|c| c.trim().trim_matches('"').to_string())
                .filter(|c| !c.is_empty())
                .collect();
        }
    }
    Header { expect: expect.unwrap_or_else(|| panic!("{name}: no `# expect = ...` header")), codes }
}

/// Checks an outcome against its header: the status, and exactly the set of codes listed.
pub(crate) fn assert_matches(outcome: &vram_core::Outcome, header: &Header, name: &str) {
    assert_eq!(
        outcome.status(),
        header.expect,
        "{name}: status; diagnostics: {:#?}",
        outcome.diagnostics
    );
    let mut found: Vec<&str> = outcome.diagnostics.iter().map(|d| d.code).collect();
    found.sort_unstable();
    found.dedup();
    let mut wanted: Vec<&str> = header.codes.iter().map(String::as_str).collect();
    wanted.sort_unstable();
    assert_eq!(found, wanted, "{name}: diagnostic codes");
}
