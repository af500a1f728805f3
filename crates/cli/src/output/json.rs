//! JSON: the core's `Budget` per file, with diagnostics located by line and column.

use serde::Serialize;
use vram_core::budget::Budget;
use vram_core::diagnostic::{Diagnostic, Severity};
use vram_core::span::LineCol;

use crate::input::Input;

#[derive(Serialize)]
struct Document {
    vram_version: &'static str,
    files: Vec<FileReport>,
}

#[derive(Serialize)]
pub(crate) struct FileReport {
    file: String,
    budget: Budget,
    diagnostics: Vec<Located>,
}

/// A diagnostic with its position, for tools that read the JSON.
#[derive(Serialize)]
struct Located {
    code: &'static str,
    severity: Severity,
    message: String,
    start: LineCol,
    end: LineCol,
    labels: Vec<LocatedLabel>,
    help: Vec<String>,
}

#[derive(Serialize)]
struct LocatedLabel {
    start: LineCol,
    end: LineCol,
    message: String,
}

impl FileReport {
    pub(crate) fn new(input: &Input, outcome: &vram_core::Outcome) -> FileReport {
        let located = |d: &Diagnostic| Located {
            code: d.code,
            severity: d.severity,
            message: d.message.clone(),
            start: LineCol::of(&input.text, d.primary.start),
            end: LineCol::of(&input.text, d.primary.end),
            labels: d
                .labels
                .iter()
                .map(|l| LocatedLabel {
                    start: LineCol::of(&input.text, l.span.start),
                    end: LineCol::of(&input.text, l.span.end),
                    message: l.message.clone(),
                })
                .collect(),
            help: d.help.clone(),
        };
        FileReport {
            file: input.name.clone(),
            budget: outcome.budget.clone(),
            diagnostics: outcome.diagnostics.iter().map(located).collect(),
        }
    }
}

pub(crate) fn document(files: Vec<FileReport>) -> String {
    let document = Document { vram_version: vram_core::VERSION, files };
    serde_json::to_string_pretty(&document)
        .unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"))
}

/// The JSON Schema of [`Budget`], as committed in `schema/budget.schema.json`.
pub(crate) fn schema() -> String {
    let schema = vram_core::budget::schema();
    serde_json::to_string_pretty(&schema).unwrap_or_default()
}
