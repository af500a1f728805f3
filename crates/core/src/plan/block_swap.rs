//! Block swapping as a trained denoiser's memory option: the fewest blocks whose weights, kept
//! in host memory, make the step fit (`blocks_to_swap`, `single_blocks_to_swap`).
//!
//! Swapping only moves frozen weights off the device, so the device's need falls as more
//! blocks are swapped and the fewest can be found by the planner's ordered search. `k` blocks are shared between
//! the two kinds in proportion to their counts (FLUX.1: 19 double and 38 single blocks, so 9
//! and 18 of 27), which keeps the bytes moved per block alike; each kind leaves one block on the
//! device to swap into. Offered for adapters on a frozen transformer denoiser whose model
//! declares its blocks, when none are swapped yet.

use super::pipeline::PipelineAnswer;
use super::{Planner, Stop, search};
use crate::budget::Verdict;
use crate::hir::{BlockLayout, BlockSwap, Diffusion};

/// `k` swapped blocks of a denoiser with `layers` blocks, `single` of them single-stream.
fn shared(k: u64, layers: u64, single: u64) -> BlockSwap {
    let others = layers - single;
    let mut blocks = (k * others / layers).min(others.saturating_sub(1));
    let mut single_blocks = k - blocks;
    let most_single = single.saturating_sub(1);
    if single_blocks > most_single {
        blocks += single_blocks - most_single;
        single_blocks = most_single;
    }
    BlockSwap { blocks, single_blocks }
}

/// How the file says `swap`.
fn says(swap: BlockSwap) -> String {
    let mut parts = Vec::new();
    if swap.blocks > 0 {
        parts.push(format!("blocks_to_swap {}", swap.blocks));
    }
    if swap.single_blocks > 0 {
        parts.push(format!("single_blocks_to_swap {}", swap.single_blocks));
    }
    parts.join(", ")
}

impl Planner<'_> {
    /// The fewest swapped blocks that make a trained denoiser's step fit; `None` when the
    /// pipeline cannot swap or even the most it can swap leaves it over.
    pub(super) fn find_block_swap(
        &mut self,
        declared: &Diffusion,
    ) -> Result<Option<PipelineAnswer>, Stop> {
        let frozen = self.original.training.as_ref().is_some_and(|t| !t.method.is_full());
        let sized = self.work.model(&declared.denoiser.model).is_some_and(|m| m.blocks.is_some());
        let layout = declared.denoiser.blocks.as_ref().map(|b| &b.layout);
        let (Some(&BlockLayout::Transformer { layers, single_layers, .. }), true, true, false) =
            (layout, frozen, sized, declared.denoiser.swap.any())
        else {
            return Ok(None);
        };
        // One block of each kind stays on the device: candidate `i` swaps `i + 1` blocks.
        let most = (layers - single_layers).saturating_sub(1) + single_layers.saturating_sub(1);
        let candidates = usize::try_from(most).map_err(|_| Stop::Unsupported)?;
        let mut seen: Option<(usize, Verdict)> = None;
        let found = search::first_fitting(candidates, |i| {
            let mut changed = declared.clone();
            changed.denoiser.swap = shared(i as u64 + 1, layers, single_layers);
            let verdict = self.verdict_changed(|w| w.diffusion = Some(changed))?;
            let fits = verdict.fits();
            if fits {
                seen = Some((i, verdict));
            }
            Ok::<_, Stop>(fits)
        })?;
        let Some(index) = found else { return Ok(None) };
        // The search probes the index it returns last among those that fit.
        let at = seen.filter(|(i, _)| *i == index).map(|(_, v)| v).ok_or(Stop::Unsupported)?;
        let swapped = shared(index as u64 + 1, layers, single_layers);
        Ok(Some(PipelineAnswer { change: says(swapped), at }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_shared_between_kinds_by_their_counts() {
        // FLUX.1: 19 double and 38 single blocks; 27 blocks are 9 and 18.
        assert_eq!(shared(27, 57, 38), BlockSwap { blocks: 9, single_blocks: 18 });
        assert_eq!(shared(1, 57, 38), BlockSwap { blocks: 0, single_blocks: 1 });
        // Each kind keeps one block: the 55 most are 18 and 37.
        assert_eq!(shared(55, 57, 38), BlockSwap { blocks: 18, single_blocks: 37 });
        // Equal blocks: all of one kind.
        assert_eq!(shared(12, 40, 0), BlockSwap { blocks: 12, single_blocks: 0 });
        assert_eq!(
            says(BlockSwap { blocks: 9, single_blocks: 18 }),
            "blocks_to_swap 9, single_blocks_to_swap 18"
        );
        assert_eq!(says(BlockSwap { blocks: 12, single_blocks: 0 }), "blocks_to_swap 12");
    }
}
