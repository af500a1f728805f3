//! Error figures per workload kind: points evaluated, median and p90 of |error|, verdicts.
//!
//! Percentiles use the nearest-rank method on the sorted absolute errors: p90 of n values is the
//! value at rank ceil(0.9 n). The band column is the share of compared peaks that fall inside
//! the core's band for the compared device(s) (components have no band of their own and are not
//! counted in it).

use std::collections::BTreeMap;

use crate::Run;
use crate::evaluate::Outcome;

/// One row of the summary table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// A workload kind, or `overall`.
    pub kind: String,
    /// Points of this kind in the data set.
    pub points: usize,
    /// Points compared as numbers.
    pub compared: usize,
    pub median: Option<f64>,
    pub p90: Option<f64>,
    /// Share of compared peaks inside the estimate's band, in percent.
    pub in_band: Option<f64>,
    /// Compared peaks inside their band, and compared peaks (points that have a band).
    pub banded: (usize, usize),
    /// Verdict checks that agree, and all verdict checks.
    pub verdicts: (usize, usize),
    pub unexpressed: usize,
}

/// The summary: one row per workload kind present, in name order, then the overall row.
pub fn summary(run: &Run) -> (Vec<Row>, Row) {
    let mut kinds: BTreeMap<&str, Vec<&Outcome>> = BTreeMap::new();
    for result in &run.results {
        kinds.entry(result.workload.as_str()).or_default().push(&result.outcome);
    }
    let rows = kinds.iter().map(|(kind, outcomes)| row(kind, outcomes)).collect();
    let all: Vec<&Outcome> = run.results.iter().map(|r| &r.outcome).collect();
    (rows, row("overall", &all))
}

fn row(kind: &str, outcomes: &[&Outcome]) -> Row {
    let mut errors: Vec<f64> = Vec::new();
    let mut verdicts = (0, 0);
    let mut unexpressed = 0;
    let mut banded = (0, 0);
    for outcome in outcomes {
        match outcome {
            Outcome::Compared(c) => {
                errors.push(c.error_percent.abs());
                if let Some(inside) = c.in_band() {
                    banded.1 += 1;
                    banded.0 += usize::from(inside);
                }
            }
            Outcome::Verdict(v) => {
                verdicts.1 += 1;
                verdicts.0 += usize::from(v.agrees());
            }
            Outcome::Unexpressed(_) | Outcome::HarnessError { .. } => unexpressed += 1,
        }
    }
    errors.sort_by(f64::total_cmp);
    Row {
        kind: kind.to_string(),
        points: outcomes.len(),
        compared: errors.len(),
        median: percentile(&errors, 50),
        p90: percentile(&errors, 90),
        in_band: share(banded),
        banded,
        verdicts,
        unexpressed,
    }
}

/// `part / whole` in percent, or `None` of nothing.
#[allow(clippy::cast_precision_loss, reason = "counts of points are small")]
fn share((part, whole): (usize, usize)) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64 * 100.0)
}

/// The nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], percent: usize) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// The overall median |error| if every `GB` of unstated base were read as 10^9 B instead of GiB:
/// how much the unit rule (see [`crate::units`]) matters.
pub fn median_with_decimal_gb(run: &Run, points: &[crate::data::Point]) -> Option<f64> {
    let mut errors: Vec<f64> = run
        .results
        .iter()
        .zip(points)
        .filter_map(|(result, point)| {
            let Outcome::Compared(c) = &result.outcome else { return None };
            let measured = point
                .value
                .and_then(|v| crate::units::decimal_reading(v, &point.unit))
                .unwrap_or(c.measured);
            Some(((c.estimate - measured) / measured * 100.0).abs())
        })
        .collect();
    errors.sort_by(f64::total_cmp);
    percentile(&errors, 50)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let values: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&values, 50), Some(5.0));
        assert_eq!(percentile(&values, 90), Some(9.0));
        assert_eq!(percentile(&[3.0], 90), Some(3.0));
        assert_eq!(percentile(&[], 50), None);
    }
}
