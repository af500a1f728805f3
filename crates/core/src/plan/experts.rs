//! A mixture of experts under llama.cpp, as a suggestion: the fewest layers whose routed experts
//! stay in host memory (`cpu_moe_layers`, llama.cpp's `--n-cpu-moe`) for the check to fit. The
//! devices hold less as more layers' experts leave them, so the first count that fits is found
//! by bisection over the counts above the declared one, and stated with the count just below it,
//! which does not fit. Moving experts costs less speed than moving whole layers (`gpu_layers`):
//! only the experts a token routes to are read from host memory.

use super::search;
use super::{Planner, Stop};
use crate::budget::Verdict;
use crate::hir::Runtime;

/// The fewest layers whose experts must stay in host memory, with the verdicts that prove it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpertsAnswer {
    pub layers: u64,
    pub at: Verdict,
    /// The verdict one layer fewer (the declared count's when that is the one below).
    pub below: Verdict,
}

impl Planner<'_> {
    /// The fewest `cpu_moe_layers` above the declared that make the check fit; `None` unless
    /// the workload runs a mixture of experts under llama.cpp, or when even every layer's
    /// experts in host memory is not enough.
    pub fn find_cpu_moe(&mut self) -> Result<Option<ExpertsAnswer>, Stop> {
        let Some(layers) = self.shape().filter(|s| s.moe.is_some()).map(|s| s.layers) else {
            return Ok(None);
        };
        let llama_cpp = self.original.runtime == Runtime::LlamaCpp;
        let Some(declared) = self.original.inference.clone().filter(|_| llama_cpp) else {
            return Ok(None);
        };
        let start = declared.cpu_moe_layers.min(layers);
        let counts: Vec<u64> = (start + 1..=layers).collect();
        let spec = self.spec.clone();
        let mut seen: Vec<(u64, Verdict)> = Vec::new();
        let probe = |planner: &mut Self, count: u64| -> Result<Verdict, Stop> {
            let mut inference = declared.clone();
            inference.cpu_moe_layers = count;
            planner.workload_mut().inference = Some(inference);
            let verdict = planner.verdict();
            planner.reset(&spec);
            verdict
        };
        let found = search::first_fitting(counts.len(), |i| {
            let verdict = probe(self, counts[i])?;
            let fits = verdict.fits();
            seen.push((counts[i], verdict));
            Ok::<_, Stop>(fits)
        })?;
        let Some(index) = found else { return Ok(None) };
        let count = counts[index];
        let verdict_of = |n: u64| seen.iter().find(|(c, _)| *c == n).map(|(_, v)| v.clone());
        let at = verdict_of(count).ok_or(Stop::Unsupported)?;
        let below = match verdict_of(count - 1) {
            Some(verdict) => verdict,
            None => probe(self, count - 1)?,
        };
        Ok(Some(ExpertsAnswer { layers: count, at, below }))
    }
}
