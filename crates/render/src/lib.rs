//! Diagnostics to text: the one renderer shared by the CLI (coloured on a terminal) and the web
//! page (plain), so both say the same words.
//!
//! `vram-core` keeps diagnostics as data; this crate is the only place that knows
//! `codespan-reporting`. Output lists the code, the message, the file, line and column, the
//! source line with the span underlined, the labels and the help.

use codespan_reporting::diagnostic::{
    Diagnostic as Report, Label as ReportLabel, Severity as ReportSeverity,
};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::termcolor::Ansi;
use codespan_reporting::term::{self, Config, Styles, StylesWriter};
use vram_core::diagnostic::{Diagnostic, Severity};
use vram_core::span::LineCol;

/// Whether to colour the output with ANSI escapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    Never,
    Ansi,
}

/// Renders `diagnostics` about `source` (shown as `name`) as text, one after another.
pub fn render(diagnostics: &[Diagnostic], name: &str, source: &str, color: Color) -> String {
    let file = SimpleFile::new(name, source);
    let config = Config::default();
    let mut out = String::new();
    for diagnostic in diagnostics {
        let report = to_report(diagnostic, source);
        let text = match color {
            Color::Never => term::emit_into_string(&config, &file, &report).ok(),
            Color::Ansi => {
                let styles = Styles::default();
                let mut ansi = Ansi::new(Vec::new());
                let mut writer = StylesWriter::new(&mut ansi, &styles);
                let rendered = term::emit_to_write_style(&mut writer, &config, &file, &report);
                rendered.ok().map(|()| String::from_utf8_lossy(&ansi.into_inner()).into_owned())
            }
        };
        // Rendering only fails when a span lies outside the text; fall back to one line.
        out.push_str(&text.unwrap_or_else(|| short(diagnostic, name, source) + "\n"));
    }
    out
}

/// One line per diagnostic: `file:line:column: error[E012]: message`.
pub fn short(diagnostic: &Diagnostic, name: &str, source: &str) -> String {
    let at = LineCol::of(source, diagnostic.primary.start);
    let severity = match diagnostic.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    format!(
        "{name}:{}:{}: {severity}[{}]: {}",
        at.line, at.column, diagnostic.code, diagnostic.message
    )
}

fn to_report(diagnostic: &Diagnostic, source: &str) -> Report<()> {
    let severity = match diagnostic.severity {
        Severity::Error => ReportSeverity::Error,
        Severity::Warning => ReportSeverity::Warning,
    };
    let clamp =
        |range: std::ops::Range<usize>| range.start.min(source.len())..range.end.min(source.len());
    let mut labels = vec![ReportLabel::primary((), clamp(diagnostic.primary.range()))];
    labels.extend(diagnostic.labels.iter().map(|label| {
        ReportLabel::secondary((), clamp(label.span.range())).with_message(&label.message)
    }));
    Report::new(severity)
        .with_code(diagnostic.code)
        .with_message(&diagnostic.message)
        .with_labels(labels)
        .with_notes(diagnostic.help.iter().map(|help| format!("help: {help}")).collect())
}
