//! vram-core: the `.vram` language and the GPU memory budget evaluator.
//!
//! The pipeline, one module per stage:
//!
//! 1. [`syntax`] parses text with the grammar in `grammar/vram.pest` (compiled into a table at
//!    build time, run by a small interpreter with pest's semantics) and lowers it into the
//!    spanned [`ast`];
//! 2. [`check`] resolves names against the file and the built-in [`catalog`], checks units,
//!    fields and ranges, and produces [`hir::Program`], collecting every error;
//! 3. [`eval`] turns each check into per-device budgets, with each component's arithmetic and
//!    provenance;
//! 4. [`plan`] adds what would fit to every over-budget check, by searches over the evaluator;
//! 5. the result is a [`budget::Budget`] plus [`diagnostic::Diagnostic`]s, as data.
//!
//! The crate does no IO, reads no clock and starts no thread (enforced by clippy's
//! `disallowed-methods`, see `clippy.toml`), so it runs unchanged in WebAssembly and gives the
//! same bytes there as natively. Byte counts are integers; fractional inputs such as `1.5 GiB`
//! are exact rationals ([`ratio::Ratio`]) until they are rounded up to whole bytes.

#![warn(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::unwrap_used,
    reason = "core is IO-free and deterministic; see ARCHITECTURE.md"
)]

pub mod ast;
pub mod budget;
pub mod bytes;
pub mod catalog;
pub mod check;
pub mod diagnostic;
pub mod eval;
pub mod format;
pub mod hir;
pub mod import;
pub mod limits;
pub mod plan;
pub mod precision;
pub mod quant;
pub mod ratio;
pub mod span;
pub mod syntax;
pub mod table;

use budget::{Budget, SCHEMA_VERSION};
use diagnostic::Diagnostic;

/// The version of this crate, reported in JSON output.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The result of evaluating a file: budgets for the checks that could be evaluated, and every
/// diagnostic (errors and warnings) in source order.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub budget: Budget,
    pub diagnostics: Vec<Diagnostic>,
}

/// What an outcome means for a caller that must answer yes or no (the CLI's exit code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Every check fits on every device.
    Fits,
    /// The input is valid, but some check does not fit or its device cannot run it.
    DoesNotFit,
    /// The input has errors.
    InputErrors,
}

impl Outcome {
    pub fn status(&self) -> Status {
        let input_error = self.diagnostics.iter().any(|d| d.is_error() && d.code != "E040");
        if input_error {
            Status::InputErrors
        } else if self.budget.checks.iter().all(|c| c.verdict.fits()) {
            Status::Fits
        } else {
            Status::DoesNotFit
        }
    }
}

/// Parses, checks and evaluates `source` against the built-in catalog.
pub fn evaluate(source: &str) -> Outcome {
    evaluate_with(source, catalog::builtin())
}

/// Parses, checks and evaluates `source` against `base`, a program of devices, machines and
/// models that the source can refer to (normally [`catalog::builtin`]).
pub fn evaluate_with(source: &str, base: &hir::Program) -> Outcome {
    evaluate_with_imports(source, base, &import::Imports::new())
}

/// The model files a source names with `from "path"`, in order, for a front end to read and
/// pass to [`evaluate_with_imports`].
pub fn import_paths(source: &str) -> Vec<String> {
    let (file, _) = syntax::parse(source);
    let mut paths: Vec<String> = file
        .declarations
        .iter()
        .filter_map(|d| match d {
            ast::Declaration::Block(block) if block.kind == ast::DeclarationKind::Model => {
                Some(block)
            }
            _ => None,
        })
        .flat_map(|block| block.body.fields.iter())
        .filter(|field| field.key.name == "from")
        .filter_map(|field| match field.values.as_slice() {
            [ast::Value::Text(text)] => Some(text.value.clone()),
            _ => None,
        })
        .collect();
    paths.dedup();
    paths
}

/// [`evaluate_with`], with the models a front end imported for the source's `from "path"`s.
pub fn evaluate_with_imports(
    source: &str,
    base: &hir::Program,
    imports: &import::Imports,
) -> Outcome {
    let (file, mut diagnostics) = syntax::parse(source);
    let (program, found) = check::check_with_imports(&file, base, false, imports);
    diagnostics.extend(found);
    let (mut budget, found) = eval::evaluate(&program);
    diagnostics.extend(found);
    plan::annotate(&program, &mut budget);
    budget.queries = plan::query::answer_all(&program, &mut diagnostics);
    Diagnostic::sort_by_position(&mut diagnostics);
    // A mistake found by two passes (an unrepresentable number, say) is reported once.
    diagnostics.dedup();
    Outcome { budget, diagnostics }
}

/// An empty budget, for front ends that need one before any evaluation.
pub fn empty_budget() -> Budget {
    Budget { schema_version: SCHEMA_VERSION, checks: Vec::new(), queries: Vec::new() }
}
