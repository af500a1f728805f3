//! Band widths fitted to the measurements: how far below and above the estimate the published
//! peaks of each workload kind fall.
//!
//! The core states every device total with a band (`vram_core::eval::band`). Its measured part is
//! one pair of margins per kind of workload, in thousandths of the device total. This module
//! computes those margins from the compared peaks, so the constants in the core are a fit across
//! many points that anyone can repeat (`vram-accuracy --fit-bands`), never a figure chosen by hand.
//!
//! For each compared peak, with `total` the compared devices' total (the device view, which the
//! band surrounds):
//! - shortfall below = `(estimate - measured) / total` (the band must reach this far down);
//! - shortfall above = `(measured - estimate) / total` (and this far up).
//!
//! Each margin is the 95th nearest-rank percentile of its side, floored at zero, so the two
//! together leave out about 10 % of the points.
//!
//! The fit runs over every published measurement the project holds ([`all_points`]): the dev
//! set and the project's own checks beside it (`data/published-tables.json`,
//! `data/published-logs.json`), whose sources read memory in other ways; the band is how far
//! published peaks fall from the estimate, so it takes all of them.

use crate::Run;
use crate::evaluate::Outcome;
use crate::stats::percentile;
use vram_core::budget::BandBasis;

/// The checks' data sets, as the crate ships them.
const CHECKS: [&str; 2] =
    [include_str!("../data/published-tables.json"), include_str!("../data/published-logs.json")];

/// `dev` followed by the points of the project's own checks: what the band margins are fitted
/// over.
pub fn all_points(dev: Vec<crate::data::Point>) -> Result<Vec<crate::data::Point>, String> {
    let mut points = dev;
    for text in CHECKS {
        points.extend(crate::data::parse(text).map_err(|e| e.to_string())?);
    }
    Ok(points)
}

/// One kind's fitted margins.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    pub basis: BandBasis,
    /// Compared peaks behind the fit.
    pub peaks: usize,
    /// Fitted margins, per mille of the device total, rounded up.
    pub below: u64,
    pub above: u64,
    /// What the core uses now.
    pub core: (u64, u64),
}

/// The basis the core gives a workload kind of the data set, or `None` for kinds the core has
/// no measured basis for.
pub fn basis_of(workload: &str) -> Option<BandBasis> {
    match workload {
        "llm_inference" => Some(BandBasis::Inference),
        // A trained denoiser is a training workload in the core (its band basis follows the
        // `training` section), whatever the pipeline.
        w if w.starts_with("training") || w == "diffusion_training" => Some(BandBasis::Training),
        w if w.starts_with("diffusion") => Some(BandBasis::Diffusion),
        _ => None,
    }
}

/// The margins each basis would get from `run`'s compared peaks.
pub fn fit(run: &Run) -> Vec<Fit> {
    [BandBasis::Inference, BandBasis::Training, BandBasis::Diffusion]
        .into_iter()
        .map(|basis| {
            let mut below = Vec::new();
            let mut above = Vec::new();
            for result in &run.results {
                let Outcome::Compared(c) = &result.outcome else { continue };
                if c.band.is_none() || basis_of(&result.workload) != Some(basis) {
                    continue;
                }
                let total = c.views[2];
                below.push((c.estimate - c.measured) / total);
                above.push((c.measured - c.estimate) / total);
            }
            below.sort_by(f64::total_cmp);
            above.sort_by(f64::total_cmp);
            Fit {
                basis,
                peaks: below.len(),
                below: per_mille(percentile(&below, 95)),
                above: per_mille(percentile(&above, 95)),
                core: vram_core::eval::measured_margins(basis),
            }
        })
        .collect()
}

/// A fraction as whole thousandths, rounded up, never negative.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "clamped to 0..=1000")]
fn per_mille(fraction: Option<f64>) -> u64 {
    fraction.map_or(0, |f| (f * 1000.0).ceil().clamp(0.0, 1000.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margins_are_whole_thousandths_rounded_up_and_never_negative() {
        assert_eq!(per_mille(Some(0.1234)), 124);
        assert_eq!(per_mille(Some(-0.2)), 0);
        assert_eq!(per_mille(Some(3.0)), 1000);
        assert_eq!(per_mille(None), 0);
    }

    #[test]
    fn kinds_map_to_the_core_bases() {
        assert_eq!(basis_of("training_qlora"), Some(BandBasis::Training));
        assert_eq!(basis_of("diffusion_inference"), Some(BandBasis::Diffusion));
        assert_eq!(basis_of("runtime_overhead"), None);
    }
}
