//! The file side of evaluating a workload, shared by the native front ends (`vram` and
//! `vram-probe`): the core does no IO, so the model files a workload's `from "path"`s name are
//! read here, headers only, and handed to the core as imports. The calculator page reads
//! dropped files in the browser instead.

pub mod read;

use std::path::Path;

use vram_core::diagnostic::Diagnostic;
use vram_core::hir::Program;
use vram_core::import::{ImportedModel, Imports, Problem};
use vram_core::span::Span;

use read::LoadError;

/// Reads and imports the checkpoint at `path` for a model's `from "{name}"`.
///
/// # Errors
/// The file system's refusal (`E023`) or the malformed header's diagnostics, each naming the
/// file it is about.
pub fn load_model(path: &Path, name: &str) -> Result<ImportedModel, Vec<Problem>> {
    match read::load(path) {
        Ok(loaded) => loaded.checkpoint.import(),
        Err(LoadError::Io(message)) => Err(vec![Problem {
            file: name.to_string(),
            diagnostic: Diagnostic::error("E023", Span::default(), message),
        }]),
        Err(LoadError::Invalid { file, diagnostics }) => Err(diagnostics
            .into_iter()
            .map(|diagnostic| Problem { file: file.name.clone(), diagnostic })
            .collect()),
    }
}

/// Reads the model files `source`'s `from "path"`s name, relative to `dir` (the folder of the
/// file the source came from); a file that cannot be read is kept as its problems, for the
/// core to report at the `from`.
pub fn imports(source: &str, dir: &Path) -> Imports {
    let mut imports = Imports::new();
    for path in vram_core::import_paths(source) {
        let found = load_model(&dir.join(&path), &path);
        imports.insert(path, found);
    }
    imports
}

/// Evaluates `source` over `catalog` with the model files it imports (see [`imports`]).
pub fn evaluate(source: &str, dir: &Path, catalog: &Program) -> vram_core::Outcome {
    vram_core::evaluate_with_imports(source, catalog, &imports(source, dir))
}
