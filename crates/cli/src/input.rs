//! Reading workload files and standard input.

use std::io::Read;
use std::path::Path;

pub(crate) struct Input {
    /// How diagnostics name the input: the path as given, or `<stdin>`.
    pub(crate) name: String,
    pub(crate) text: String,
    pub(crate) is_stdin: bool,
    /// The folder `from "path"`s in the file are read relative to.
    pub(crate) dir: std::path::PathBuf,
}

/// Evaluates an input, first reading the model files its `from "path"`s name.
pub(crate) fn evaluate(input: &Input) -> vram_core::Outcome {
    evaluate_over(input, vram_core::catalog::builtin())
}

/// [`evaluate`] over another catalog (a user's `--catalog` file over the built-in one).
pub(crate) fn evaluate_over(
    input: &Input,
    catalog: &vram_core::hir::Program,
) -> vram_core::Outcome {
    vram_files::evaluate(&input.text, &input.dir, catalog)
}

/// Reads `path` (or standard input for `-`), reporting a failure on standard error.
pub(crate) fn read(path: &Path) -> Option<Input> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        return match std::io::stdin().read_to_string(&mut text) {
            Ok(_) => {
                Some(Input { name: "<stdin>".to_string(), text, is_stdin: true, dir: ".".into() })
            }
            Err(error) => {
                eprintln!("error: cannot read standard input: {error}");
                None
            }
        };
    }
    let name = path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => {
                let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
                Some(Input { name, text, is_stdin: false, dir })
            }
            Err(error) => {
                eprintln!(
                    "error: {name} is not UTF-8 text (invalid byte at offset {})",
                    error.utf8_error().valid_up_to()
                );
                None
            }
        },
        Err(error) => {
            eprintln!("error: cannot read {name}: {error}");
            None
        }
    }
}
