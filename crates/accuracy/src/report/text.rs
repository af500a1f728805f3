//! The report as plain text, for the terminal and CI logs.

use std::fmt::Write as _;

use super::{amount, band_share, counts, fits_word, gap_groups, gib, percent, signed_percent};
use crate::Run;
use crate::evaluate::Outcome;
use crate::stats::{self, Row};

/// The whole report.
pub fn render(run: &Run, data_path: &str) -> String {
    let mut out = String::new();
    let c = counts(run);
    let _ = writeln!(out, "vram-accuracy: {} points from {data_path}", c.points);
    let _ = writeln!(
        out,
        "compared {} · verdict checks {} · unexpressed {} · harness errors {}\n",
        c.compared, c.verdicts, c.unexpressed, c.harness_errors
    );
    summary(&mut out, run);
    compared(&mut out, run);
    verdicts(&mut out, run);
    unexpressed(&mut out, run);
    harness_errors(&mut out, run);
    out
}

/// The fitted band margins beside the core's (`--fit-bands`).
pub fn bands(run: &Run) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12}{:>7}{:>16}{:>16}{:>16}",
        "basis", "peaks", "fitted below", "fitted above", "core uses"
    );
    for fit in crate::bands::fit(run) {
        let _ = writeln!(
            out,
            "{:<12}{:>7}{:>14} ‰{:>14} ‰{:>10} / {} ‰",
            format!("{:?}", fit.basis).to_lowercase(),
            fit.peaks,
            fit.below,
            fit.above,
            fit.core.0,
            fit.core.1
        );
    }
    out
}

/// The summary table alone.
pub fn summary(out: &mut String, run: &Run) {
    let (rows, overall) = stats::summary(run);
    let _ = writeln!(
        out,
        "{:<22}{:>7}{:>10}{:>14}{:>11}{:>18}{:>10}{:>13}",
        "kind",
        "points",
        "compared",
        "median |err|",
        "p90 |err|",
        "in band",
        "verdicts",
        "unexpressed"
    );
    for row in rows.iter().chain([&overall]) {
        let _ = writeln!(out, "{}", line(row));
    }
    out.push('\n');
}

fn line(row: &Row) -> String {
    format!(
        "{:<22}{:>7}{:>10}{:>14}{:>11}{:>18}{:>10}{:>13}",
        row.kind,
        row.points,
        row.compared,
        percent(row.median),
        percent(row.p90),
        band_share(row),
        format!("{}/{}", row.verdicts.0, row.verdicts.1),
        row.unexpressed
    )
}

fn compared(out: &mut String, run: &Run) {
    let _ = writeln!(out, "Compared points (error = (estimate - measured) / measured)");
    let _ = writeln!(
        out,
        "  {:<9}{:<18}{:<28}{:<34}{:>12}{:>12}{:>10}",
        "id", "kind", "model", "compared in", "measured", "estimate", "error"
    );
    for result in &run.results {
        let Outcome::Compared(c) = &result.outcome else { continue };
        let marks = match c.in_band() {
            Some(false) => " (out of band)",
            _ => "",
        };
        let marks = format!("{marks}{}", if c.assumptions.is_empty() { "" } else { " *" });
        let _ = writeln!(
            out,
            "  {:<9}{:<18}{:<28}{:<34}{:>12}{:>12}{:>10}{marks}",
            result.id,
            result.workload,
            clip(&result.model, 27),
            c.target.label(),
            amount(&c.target, c.measured),
            amount(&c.target, c.estimate),
            signed_percent(c.error_percent)
        );
    }
    let _ = writeln!(out, "  * carries assumptions (see docs/accuracy.md or --show ID)\n");
}

fn verdicts(out: &mut String, run: &Run) {
    let _ = writeln!(out, "Verdict checks (out-of-memory reports and largest runs that fitted)");
    for result in &run.results {
        let Outcome::Verdict(v) = &result.outcome else { continue };
        let _ = writeln!(
            out,
            "  {:<9}{:<28} measured: {:<13} estimate: {:<13} ({} peak of {} usable) {}",
            result.id,
            clip(&result.model, 27),
            fits_word(v.expect_fits),
            fits_word(v.estimate_fits),
            gib(v.device_peak),
            gib(v.capacity),
            if v.agrees() { "agrees" } else { "DISAGREES" }
        );
    }
    out.push('\n');
}

fn unexpressed(out: &mut String, run: &Run) {
    let _ = writeln!(
        out,
        "Unexpressed points by reason (a point with several reasons is under each; \"alone\": \
         points this reason alone stops)"
    );
    for group in gap_groups(run) {
        let ids: Vec<&str> = group.points.iter().map(|(id, _)| id.as_str()).collect();
        let _ = writeln!(
            out,
            "  [{}] {}: {} points, {} alone\n      {}",
            group.kind.name(),
            group.label,
            group.points.len(),
            group.alone,
            ids.join(" ")
        );
    }
    out.push('\n');
    let _ = writeln!(out, "Every unexpressed point");
    for result in &run.results {
        let Outcome::Unexpressed(gaps) = &result.outcome else { continue };
        let _ = writeln!(out, "  {} {} ({})", result.id, result.model, result.workload);
        for gap in gaps {
            let _ = writeln!(out, "      {gap}");
        }
    }
    out.push('\n');
}

fn harness_errors(out: &mut String, run: &Run) {
    for result in &run.results {
        let Outcome::HarnessError { diagnostics, .. } = &result.outcome else { continue };
        let _ = writeln!(out, "HARNESS ERROR {}: {}", result.id, diagnostics.join("; "));
    }
}

/// At most `width` characters, with `…` when cut.
fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let cut: String = text.chars().take(width - 1).collect();
        format!("{cut}…")
    }
}
