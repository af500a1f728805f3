//! Helpers the pipeline tests share: evaluate a source whose one check must evaluate without
//! errors, read a component's bytes, list the diagnostics' codes.

use vram_core::budget::CheckBudget;

/// The first check of `source`, which must evaluate without errors.
pub(crate) fn check(source: &str) -> CheckBudget {
    let outcome = vram_core::evaluate(source);
    assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:#?}", outcome.diagnostics);
    outcome.budget.checks.into_iter().next().expect("one check")
}

/// The bytes of the first device's component `name`, if it is there.
pub(crate) fn component(check: &CheckBudget, name: &str) -> Option<u64> {
    check.devices[0].components.iter().find(|c| c.name == name).map(|c| c.bytes.0)
}

/// Every diagnostic's code, warnings included.
pub(crate) fn codes(source: &str) -> Vec<String> {
    vram_core::evaluate(source).diagnostics.iter().map(|d| d.code.to_string()).collect()
}
