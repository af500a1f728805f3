//! Diagnostics as plain data: a code, a severity, a message, spans and help.
//!
//! The core never renders them. The CLI and the web page turn them into text through
//! `vram-render`, so both show the same words. Every code is listed in [`CODES`] with a one-line
//! summary; `docs/diagnostics.md` is checked against that table by a test.

use serde::Serialize;

use crate::span::Span;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// A secondary span with a short note.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// A stable code such as `E012`, documented in [`CODES`].
    pub code: &'static str,
    pub message: String,
    /// Where the problem is. Rendered with a caret under it.
    pub primary: Span,
    pub labels: Vec<Label>,
    pub help: Vec<String>,
}

impl Diagnostic {
    pub fn error(code: &'static str, primary: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            primary,
            labels: Vec::new(),
            help: Vec::new(),
        }
    }

    pub fn warning(code: &'static str, primary: Span, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, primary, message) }
    }

    #[must_use]
    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label { span, message: message.into() });
        self
    }

    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    /// Puts `diagnostics` in source order (by primary span); those at one place keep the order
    /// in which they were found. One function for every pass, so that the web page's module
    /// carries one copy of the sort.
    pub fn sort_by_position(diagnostics: &mut [Diagnostic]) {
        diagnostics.sort_by_key(|d| (d.primary.start, d.primary.end));
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// Every diagnostic code, with what it means. Codes are never reused for another meaning.
pub const CODES: &[(&str, &str)] = &[
    ("E001", "syntax error: the text does not follow the grammar"),
    ("E002", "input too large or too deeply nested for the core's limits"),
    ("E003", "a number cannot be represented (too many digits, or an exponent out of range)"),
    ("E004", "arithmetic overflow, or division by zero, in an expression"),
    ("E005", "units do not match: the expression mixes dimensions or has the wrong dimension"),
    ("E006", "a value must be a whole number"),
    ("E007", "a value is out of its allowed range (negative, zero, or absurdly large)"),
    ("E010", "unknown field for this kind of block"),
    ("E011", "a required field is missing"),
    ("E012", "a field is given twice"),
    ("E013", "a field has the wrong number or kind of values"),
    ("E014", "two fields conflict with each other"),
    ("E015", "unknown word where a fixed choice is expected (precision, category, runtime...)"),
    ("E020", "a name refers to nothing declared"),
    ("E021", "a name is declared twice"),
    ("E022", "a name refers to a declaration of the wrong kind"),
    ("E023", "a model file named with `from` was not read, or could not be expressed"),
    ("E030", "the split across devices does not match the number of devices"),
    ("E031", "the model's shape does not divide across the tensor-parallel degree"),
    ("E032", "a budget overflowed 64-bit byte arithmetic"),
    ("E040", "the device's architecture cannot run a precision the workload uses"),
    ("E050", "a `find` query lacks a part it needs (`on TARGET`) or has one it cannot use"),
    ("E051", "a `find` query asks about a parameter the workload does not have"),
    ("W001", "a user declaration shadows a catalog entry of the same name"),
    ("W002", "a model field is ignored because the parameter count is given directly"),
    ("W003", "headroom rule keeps less than 5 % of capacity"),
    ("W004", "precision change: validate output quality, memory is not the only effect"),
    ("W005", "a setting has no effect without another one it depends on"),
    ("I101", "import: the file ends before its header does (truncated, or a lying length)"),
    ("I102", "import: a header or JSON file is larger than the importer's cap"),
    ("I103", "import: the header or JSON file is not valid JSON (or not UTF-8)"),
    ("I104", "import: tensor data lies outside the file, or does not reach its end"),
    ("I105", "import: unknown tensor dtype, ggml type or GGUF value type"),
    ("I106", "import: not a GGUF file (bad magic)"),
    ("I107", "import: unsupported GGUF version or byte order"),
    ("I108", "import: a GGUF string or array is longer than the importer's cap"),
    ("I109", "import: too many tensors or metadata keys"),
    ("I110", "import: invalid tensor shape: over 4 dimensions, a partial block, a 64-bit overflow"),
    ("I111", "import: a header or config value is missing or has the wrong type"),
    ("I112", "import: tensor data ranges overlap, leave gaps or are misaligned"),
    ("I113", "import: a tensor's byte range does not match its dtype and shape"),
    ("I114", "import: a tensor or metadata key is named twice"),
    ("I115", "import: the files of a checkpoint do not match its index or each other"),
];

/// The one-line summary of `code`, if it is a known code.
pub fn describe(code: &str) -> Option<&'static str> {
    CODES.iter().find(|(c, _)| *c == code).map(|(_, summary)| *summary)
}
