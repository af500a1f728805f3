//! A serving engine's share of the device as a suggestion: the largest `memory_fraction` that
//! fits. A larger share holds more KV but leaves less for what comes on top of it (CUDA
//! graphs, the request table) and for the headroom, so neither end of the range is always
//! the answer: every whole percent from 99 % down is tried, each by a full evaluation, and the
//! first that fits, the largest pool, is suggested.

use super::{Planner, Stop};
use crate::budget::Verdict;
use crate::ratio::Ratio;

/// A share that makes the check fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolAnswer {
    /// `memory_fraction 85 %`.
    pub change: String,
    pub at: Verdict,
}

/// The shares tried, in whole percents: a pool server below half the device is not what its
/// user asked for.
const SHARES: std::ops::RangeInclusive<i128> = 50..=99;

impl Planner<'_> {
    /// The largest whole-percent share that makes the check fit; `None` for a workload whose
    /// runtime does not pool, or when no share fits.
    pub fn find_pool_option(&mut self) -> Result<Option<PoolAnswer>, Stop> {
        let pools = self.original.runtime.sizes_a_pool();
        let Some(declared) = self.original.inference.clone().filter(|_| pools) else {
            return Ok(None);
        };
        let spec = self.spec.clone();
        for percent in SHARES.rev() {
            let share = Ratio::new(percent, 100).ok_or(Stop::Unsupported)?;
            if declared.memory_fraction == Some(share) {
                continue;
            }
            let mut inference = declared.clone();
            inference.memory_fraction = Some(share);
            self.workload_mut().inference = Some(inference);
            let verdict = self.verdict();
            self.reset(&spec);
            let verdict = verdict?;
            if verdict.fits() {
                return Ok(Some(PoolAnswer {
                    change: format!("memory_fraction {percent} %"),
                    at: verdict,
                }));
            }
        }
        Ok(None)
    }
}
