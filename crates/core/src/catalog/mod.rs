//! The built-in catalog: devices and well-known models, written in the language itself and
//! embedded at build time.
//!
//! `devices.vram` is made from the project's GPU facts (exact totals as `nvidia-smi` reports
//! them, architecture, compute capability, native precisions; sources in its comments).
//! `models.vram` holds the shapes of popular open models from their `config.json`.
//! `mig.vram` holds MIG slices as devices (one GPU instance each, with the memory the driver
//! gives it), and `machines.vram` DGX systems and assumed example servers (GPUs, host RAM,
//! disk), so that `find machines in catalog` has an answer out of the box.

use std::sync::OnceLock;

mod uncommented;
use uncommented::uncommented;

use crate::diagnostic::Diagnostic;
use crate::hir::Program;

/// The catalog's text, one source per file, in the order they are checked, with the comments
/// that name the sources of its facts (`vram catalog --format vram` prints it).
pub const SOURCES: [(&str, &str); 4] = [
    ("catalog/devices.vram", include_str!("devices.vram")),
    ("catalog/mig.vram", include_str!("mig.vram")),
    ("catalog/machines.vram", include_str!("machines.vram")),
    ("catalog/models.vram", include_str!("models.vram")),
];

/// The same files without their comments, as they are parsed. Comments are close to half of the
/// catalog's text: the parser would skip them character by character on every start (in the
/// browser, on every page load), and the web page's module would carry them. Removed at compile
/// time; line breaks stay, so every declaration keeps its line.
pub const PARSED: [(&str, &str); 4] = [
    (SOURCES[0].0, uncommented!(SOURCES[0].1)),
    (SOURCES[1].0, uncommented!(SOURCES[1].1)),
    (SOURCES[2].0, uncommented!(SOURCES[2].1)),
    (SOURCES[3].0, uncommented!(SOURCES[3].1)),
];

/// The catalog, parsed and checked once.
pub fn builtin() -> &'static Program {
    static CATALOG: OnceLock<Program> = OnceLock::new();
    CATALOG.get_or_init(|| build().0)
}

/// Builds the catalog and returns any diagnostics (a test asserts there are none).
pub fn build() -> (Program, Vec<(&'static str, Diagnostic)>) {
    build_from(&PARSED)
}

/// Builds a catalog from `(name, text)` sources, checked in order (the benchmark times the
/// commented [`SOURCES`] against [`PARSED`]).
pub fn build_from(
    sources: &[(&'static str, &'static str)],
) -> (Program, Vec<(&'static str, Diagnostic)>) {
    let mut program = Program::default();
    let mut problems = Vec::new();
    for &(name, source) in sources {
        let (file, diagnostics) = crate::syntax::parse(source);
        problems.extend(diagnostics.into_iter().map(|d| (name, d)));
        let (checked, diagnostics) = crate::check::check(&file, &program, true);
        problems.extend(diagnostics.into_iter().map(|d| (name, d)));
        program = checked.merged();
    }
    (program, problems)
}

/// A catalog made of a user's catalog file over the built-in one. The file's devices and models
/// are added (replacing built-in entries of the same name); when it declares machines, they
/// replace the built-in machines, so `find machines in catalog` searches the user's products.
/// The diagnostics point into `source`.
pub fn with_user(source: &str) -> (Program, Vec<Diagnostic>) {
    let (file, mut diagnostics) = crate::syntax::parse(source);
    let mut base = builtin().clone();
    let declares_machines = file.declarations.iter().any(|d| {
        matches!(d, crate::ast::Declaration::Block(b) if b.kind == crate::ast::DeclarationKind::Machine)
    });
    if declares_machines {
        base.machines.clear();
    }
    let (checked, found) = crate::check::check(&file, &base, true);
    diagnostics.extend(found);
    // Replacing a built-in entry is what a catalog file is for: no shadowing warnings.
    diagnostics.retain(|d| d.code != "W001");
    (checked.merged(), diagnostics)
}
