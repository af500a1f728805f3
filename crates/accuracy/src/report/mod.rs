//! The report: the summary table, every compared point, every verdict, and every unexpressed
//! point grouped by reason. [`text`] prints it for the terminal and CI; [`markdown`] writes
//! `docs/accuracy.md`.

pub mod markdown;
pub mod text;

use std::collections::BTreeMap;

use crate::Run;
use crate::evaluate::Outcome;
use crate::gaps::GapKind;

/// The points stopped by one reason.
#[derive(Clone, Debug)]
pub struct GapGroup {
    pub kind: GapKind,
    pub label: &'static str,
    /// `(point id, what this point needs)`.
    pub points: Vec<(String, String)>,
    /// Points this reason alone stops: fixing it would make them expressible.
    pub alone: usize,
}

/// Unexpressed points grouped by reason: missing features first, each kind by descending count.
pub fn gap_groups(run: &Run) -> Vec<GapGroup> {
    let mut groups: BTreeMap<(GapKind, &'static str), GapGroup> = BTreeMap::new();
    for result in &run.results {
        let Outcome::Unexpressed(gaps) = &result.outcome else { continue };
        let labels: Vec<&str> = gaps.iter().map(|g| g.label).collect();
        let alone = labels.iter().all(|l| *l == labels[0]);
        for gap in gaps {
            let group = groups.entry((gap.kind, gap.label)).or_insert_with(|| GapGroup {
                kind: gap.kind,
                label: gap.label,
                points: Vec::new(),
                alone: 0,
            });
            if group.points.iter().any(|(id, _)| *id == result.id) {
                continue;
            }
            group.points.push((result.id.clone(), gap.detail.clone()));
            group.alone += usize::from(alone);
        }
    }
    let mut groups: Vec<GapGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| a.kind.cmp(&b.kind).then(b.points.len().cmp(&a.points.len())));
    groups
}

/// Evaluated points grouped by the assumptions they carry.
pub fn assumption_groups(run: &Run) -> Vec<(&'static str, Vec<String>)> {
    let mut groups: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for result in &run.results {
        let assumptions = match &result.outcome {
            Outcome::Compared(c) => &c.assumptions,
            Outcome::Verdict(v) => &v.assumptions,
            Outcome::Unexpressed(_) | Outcome::HarnessError { .. } => continue,
        };
        for assumption in assumptions {
            let ids = groups.entry(assumption.label).or_default();
            if !ids.contains(&result.id) {
                ids.push(result.id.clone());
            }
        }
    }
    groups.into_iter().collect()
}

/// Counts of what happened to the points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub points: usize,
    pub compared: usize,
    pub verdicts: usize,
    pub unexpressed: usize,
    pub harness_errors: usize,
}

pub fn counts(run: &Run) -> Counts {
    let mut counts = Counts { points: run.results.len(), ..Counts::default() };
    for result in &run.results {
        match result.outcome {
            Outcome::Compared(_) => counts.compared += 1,
            Outcome::Verdict(_) => counts.verdicts += 1,
            Outcome::Unexpressed(_) => counts.unexpressed += 1,
            Outcome::HarnessError { .. } => counts.harness_errors += 1,
        }
    }
    counts
}

/// `12.34 GiB` from bytes.
pub fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / 1_073_741_824.0)
}

/// A compared amount as its target measures it: bytes as GiB, a pool's size in tokens.
pub fn amount(target: &crate::target::Target, value: f64) -> String {
    use crate::target::{Selector, Target};
    match target {
        Target::Component { selector: Selector::KvPoolTokens, .. } => format!("{value:.0} tok"),
        _ => gib(value),
    }
}

/// `12.3 %` or `n/a`.
pub fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{v:.1} %"))
}

/// The band column: `62.5 % (10/16)`, or `n/a` when no compared point has a band.
pub fn band_share(row: &crate::stats::Row) -> String {
    match row.in_band {
        Some(share) => format!("{share:.1} % ({}/{})", row.banded.0, row.banded.1),
        None => "n/a".to_string(),
    }
}

/// A compared point's band: `13.20-15.02 GiB, in`, or `none (component)`.
pub fn band_cell(compared: &crate::evaluate::Compared) -> String {
    match (compared.band, compared.in_band()) {
        (Some([low, high]), Some(inside)) => format!(
            "{:.2}-{:.2} GiB, {}",
            low / 1_073_741_824.0,
            high / 1_073_741_824.0,
            if inside { "in" } else { "out" }
        ),
        _ => "none (component)".to_string(),
    }
}

/// `+12.3 %` with its sign.
pub fn signed_percent(value: f64) -> String {
    format!("{value:+.1} %")
}

/// `fits` / `does not fit`.
pub fn fits_word(fits: bool) -> &'static str {
    if fits { "fits" } else { "does not fit" }
}
