//! A replay of PyTorch's CUDA caching allocator over a known sequence of tensors: what a phase
//! whose tensors change size leaves reserved (the VAE decoder's resolution stages).
//!
//! The rules replayed (`c10/cuda/CUDACachingAllocator.cpp`, constants in
//! `c10/core/CachingAllocator.h`, PyTorch 2.x, default `PYTORCH_CUDA_ALLOC_CONF`):
//! - every request rounds up to a multiple of 512 B (`kMinBlockSize`);
//! - a request of at most 1 MiB (`kSmallSize`) comes from the small pool, whose segments are
//!   2 MiB (`kSmallBuffer`); a larger one from the large pool, whose new segments are 20 MiB
//!   (`kLargeBuffer`) below 10 MiB (`kMinLargeAlloc`) and the request rounded up to 2 MiB
//!   (`kRoundLarge`) otherwise;
//! - a request takes the smallest free cached block of its pool that holds it (best fit; with
//!   `max_split_size` unset any larger block may serve), and the block is split when what
//!   remains exceeds 1 MiB (large pool) or is at least 512 B (small pool);
//! - a freed block merges with free neighbours of its own segment, never across segments, and
//!   segments are never returned on a device with room (no `empty_cache`);
//! - on a device without room a failed `cudaMalloc` makes the allocator return every cached
//!   segment no live tensor uses (`release_cached_blocks`) and try again. The
//!   [`CachingAllocator::pressed`] replay does that before every new segment, as on a device
//!   with no memory to spare: its reserved peak is the least the sequence needs, and what a
//!   device with room shows beyond it is cache a tight device gets back.
//!
//! One stream: the pipelines replayed here run on the default stream.

use super::calc::{Overflow, formula};
use crate::budget::{Component, HeldBy};
use crate::bytes::{Bytes, MIB};
use std::collections::BTreeSet;

const MIN_BLOCK: u64 = 512;
const SMALL_SIZE: u64 = MIB;
const SMALL_BUFFER: u64 = 2 * MIB;
const LARGE_BUFFER: u64 = 20 * MIB;
const MIN_LARGE_ALLOC: u64 = 10 * MIB;
const ROUND_LARGE: u64 = 2 * MIB;

/// A live tensor's block, and the segment that holds it; given back to
/// [`CachingAllocator::free`] exactly once.
#[must_use]
pub(crate) struct Tensor {
    /// Where its block starts in its segment: a live block never moves or merges.
    offset: u64,
    segment: u64,
    /// The bytes asked for, before any rounding.
    requested: u64,
}

struct Block {
    /// Where the block starts in its segment: the address order within it.
    offset: u64,
    size: u64,
    live: bool,
}

struct Segment {
    /// Ids increase with creation, so the segments, kept in creation order, are sorted by id.
    id: u64,
    small: bool,
    blocks: Vec<Block>,
}

/// A free block as the best-fit search orders them: its pool (small first), its size, then
/// its address, for which the segment's creation order and the offset in it stand in.
type FreeKey = (bool, u64, u64, u64);

#[derive(Default)]
pub(crate) struct CachingAllocator {
    /// Return the unused cached segments before growing (a device without room).
    pressed: bool,
    segments: Vec<Segment>,
    /// Every free block, in best-fit order: a request takes the first that holds it.
    free_blocks: BTreeSet<FreeKey>,
    next_id: u64,
    allocated: u64,
    reserved: u64,
    peak_allocated: u64,
    peak_reserved: u64,
    /// The sum of live tensors' requested bytes (`requested_bytes`), and its peak.
    requested: u64,
    peak_requested: u64,
}

fn round_up(size: u64, to: u64) -> Result<u64, Overflow> {
    size.div_ceil(to).checked_mul(to).ok_or(Overflow)
}

/// The size of the segment `cudaMalloc`ed for a request no cached block holds.
fn segment_size(size: u64) -> Result<u64, Overflow> {
    if size <= SMALL_SIZE {
        Ok(SMALL_BUFFER)
    } else if size < MIN_LARGE_ALLOC {
        Ok(LARGE_BUFFER)
    } else {
        round_up(size, ROUND_LARGE)
    }
}

impl CachingAllocator {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// An allocator on a device without room: every request no cached block holds first
    /// returns the cached segments no live tensor uses (the module's documentation).
    pub(crate) fn pressed() -> Self {
        Self { pressed: true, ..Self::default() }
    }

    /// The sum of live blocks now (`memory_allocated`).
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> Bytes {
        Bytes(self.allocated)
    }

    /// The highest sum of live blocks (`max_memory_allocated`, which counts blocks, so rounded).
    pub(crate) fn peak_allocated(&self) -> Bytes {
        Bytes(self.peak_allocated)
    }

    /// The highest sum of live tensors' requested bytes (`requested_bytes.all.peak` in
    /// `torch.cuda.memory_stats`): what the tensors themselves need, without the allocator's
    /// rounding and unsplit remainders.
    #[cfg(test)]
    pub(crate) fn peak_requested(&self) -> Bytes {
        Bytes(self.peak_requested)
    }

    /// The highest sum of segments (`max_memory_reserved`).
    pub(crate) fn peak_reserved(&self) -> Bytes {
        Bytes(self.peak_reserved)
    }

    pub(crate) fn alloc(&mut self, bytes: Bytes) -> Result<Tensor, Overflow> {
        let size = round_up(bytes.0.max(1), MIN_BLOCK)?;
        let small = size <= SMALL_SIZE;
        let (segment, index) = if let Some(found) = self.best_fit(small, size) {
            found
        } else {
            if self.pressed {
                self.release_unused_segments();
            }
            let grown = segment_size(size)?;
            self.reserved = self.reserved.checked_add(grown).ok_or(Overflow)?;
            self.peak_reserved = self.peak_reserved.max(self.reserved);
            let segment = self.fresh_id();
            self.segments.push(Segment {
                id: segment,
                small,
                blocks: vec![Block { offset: 0, size: grown, live: false }],
            });
            self.free_blocks.insert((small, grown, segment, 0));
            (self.segments.len() - 1, 0)
        };
        let held_by = self.segments[segment].id;
        let found = &self.segments[segment].blocks[index];
        self.free_blocks.remove(&(small, found.size, held_by, found.offset));
        let remaining = found.size - size;
        let split = if small { remaining >= MIN_BLOCK } else { remaining > SMALL_SIZE };
        if split {
            let blocks = &mut self.segments[segment].blocks;
            blocks[index].size = size;
            let offset = blocks[index].offset + size;
            blocks.insert(index + 1, Block { offset, size: remaining, live: false });
            self.free_blocks.insert((small, remaining, held_by, offset));
        }
        let block = &mut self.segments[segment].blocks[index];
        block.live = true;
        let (offset, size) = (block.offset, block.size);
        self.allocated = self.allocated.checked_add(size).ok_or(Overflow)?;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        self.requested = self.requested.checked_add(bytes.0).ok_or(Overflow)?;
        self.peak_requested = self.peak_requested.max(self.requested);
        Ok(Tensor { offset, segment: held_by, requested: bytes.0 })
    }

    #[allow(clippy::needless_pass_by_value, reason = "taking the handle ends it: no double free")]
    pub(crate) fn free(&mut self, tensor: Tensor) {
        let Tensor { offset, segment, requested } = tensor;
        self.requested -= requested;
        // A live block's segment is never released, so it is still there.
        if let Ok(at) = self.segments.binary_search_by_key(&segment, |s| s.id) {
            let segment = &mut self.segments[at];
            let (small, held_by) = (segment.small, segment.id);
            let Ok(mut index) = segment.blocks.binary_search_by_key(&offset, |b| b.offset) else {
                return;
            };
            segment.blocks[index].live = false;
            self.allocated -= segment.blocks[index].size;
            let blocks = &mut segment.blocks;
            if blocks.get(index + 1).is_some_and(|b| !b.live) {
                let next = blocks.remove(index + 1);
                self.free_blocks.remove(&(small, next.size, held_by, next.offset));
                blocks[index].size += next.size;
            }
            if index > 0 && !blocks[index - 1].live {
                let this = blocks.remove(index);
                index -= 1;
                let before = &mut blocks[index];
                self.free_blocks.remove(&(small, before.size, held_by, before.offset));
                before.size += this.size;
            }
            let merged = &blocks[index];
            self.free_blocks.insert((small, merged.size, held_by, merged.offset));
        }
    }

    /// `release_cached_blocks`: every segment whose blocks are all free goes back to the driver.
    fn release_unused_segments(&mut self) {
        let mut released = 0;
        let free_blocks = &mut self.free_blocks;
        self.segments.retain(|segment| {
            let unused = segment.blocks.iter().all(|b| !b.live);
            if unused {
                for block in &segment.blocks {
                    released += block.size;
                    free_blocks.remove(&(segment.small, block.size, segment.id, block.offset));
                }
            }
            !unused
        });
        self.reserved -= released;
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The smallest free block of the pool that holds `size`; the first such in segment order
    /// (the allocator's tie-break is the address, which creation order stands in for): its
    /// segment's index and its own in that segment.
    fn best_fit(&self, small: bool, size: u64) -> Option<(usize, usize)> {
        let &(pool, _, segment, offset) = self.free_blocks.range((small, size, 0, 0)..).next()?;
        if pool != small {
            return None;
        }
        let s = self.segments.binary_search_by_key(&segment, |s| s.id).ok()?;
        let b = self.segments[s].blocks.binary_search_by_key(&offset, |b| b.offset).ok()?;
        Some((s, b))
    }
}

/// A replay's cache said as two components: what a device without room still holds, and the
/// `releasable` segments it gets back ([`HeldBy::ReleasableCache`]), at most the whole cache.
/// Used by the VAE decode's replays and the adapter-training step's.
pub(in crate::eval) fn split_releasable((cache, releasable): (Component, Bytes)) -> Vec<Component> {
    let released = releasable.min(cache.bytes);
    let kept = Bytes(cache.bytes.0 - released.0);
    let mut out = Vec::new();
    if kept > Bytes::ZERO {
        let formula = if released > Bytes::ZERO {
            formula!("{}, less the {released} releasable (below) = {kept}", cache.formula)
        } else {
            cache.formula.clone()
        };
        out.push(Component { bytes: kept, formula, ..cache.clone() });
    }
    if released > Bytes::ZERO {
        out.push(Component {
            held_by: HeldBy::ReleasableCache,
            name: cache.name.replacen("allocator cache", "releasable cache", 1).into(),
            bytes: released,
            formula: formula!(
                "of the {} cached, the {released} a pressed replay (unused segments returned \
                 before each new one, as PyTorch does before it reports out of memory) does not \
                 reserve",
                cache.bytes
            ),
            source: Some(
                "PyTorch CUDACachingAllocator: a failed cudaMalloc calls release_cached_blocks \
                 and retries (allocator.rs)"
                    .into(),
            ),
            ..cache
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mib(n: u64) -> Bytes {
        Bytes(n * MIB)
    }

    #[test]
    fn segments_are_rounded_by_request_size() {
        let mut cache = CachingAllocator::new();
        let tensor = cache.alloc(Bytes(100)).unwrap();
        // 100 B rounds to 512 B, from a 2 MiB small-pool segment.
        assert_eq!((cache.peak_allocated(), cache.peak_reserved()), (Bytes(512), mib(2)));
        cache.free(tensor);
        let tensor = cache.alloc(mib(3)).unwrap();
        // 3 MiB: a 20 MiB large segment; what remains (17 MiB) stays cached beside it.
        assert_eq!(cache.peak_reserved(), mib(22));
        cache.free(tensor);
        let _t = cache.alloc(Bytes(27 * MIB + 1)).unwrap();
        // Above 10 MiB: rounded up to 2 MiB, 28 MiB; the 20 MiB block cannot hold it.
        assert_eq!(cache.peak_reserved(), mib(50));
    }

    #[test]
    fn freed_blocks_serve_smaller_requests_but_never_merge_across_segments() {
        let mut cache = CachingAllocator::new();
        let first = cache.alloc(mib(256)).unwrap();
        let second = cache.alloc(mib(256)).unwrap();
        cache.free(first);
        cache.free(second);
        // Two free 256 MiB segments hold 512 MiB together but no 512 MiB block.
        let whole = cache.alloc(mib(512)).unwrap();
        assert_eq!(cache.peak_reserved(), mib(1024));
        // A 100 MiB request splits a cached 256 MiB block instead of growing the cache.
        let part = cache.alloc(mib(100)).unwrap();
        assert_eq!(cache.peak_reserved(), mib(1024));
        assert_eq!(cache.peak_allocated(), mib(612));
        cache.free(part);
        cache.free(whole);
        // The split halves merged again: a 256 MiB request fits without a new segment.
        let _again = cache.alloc(mib(256)).unwrap();
        let _and_again = cache.alloc(mib(256)).unwrap();
        assert_eq!(cache.peak_reserved(), mib(1024));
    }

    #[test]
    fn best_fit_takes_the_smallest_block_that_holds_the_request() {
        let mut cache = CachingAllocator::new();
        let large = cache.alloc(mib(64)).unwrap();
        let little = cache.alloc(mib(16)).unwrap();
        cache.free(large);
        cache.free(little);
        // 12 MiB goes into the 16 MiB block, leaving the 64 MiB block whole for a 60 MiB one.
        let _twelve = cache.alloc(mib(12)).unwrap();
        let _sixty = cache.alloc(mib(60)).unwrap();
        assert_eq!(cache.peak_reserved(), mib(80));
    }

    #[test]
    fn a_pressed_allocator_returns_unused_segments_before_growing() {
        // A 256 MiB tensor, freed, then a 512 MiB one: with room the 256 MiB segment stays
        // cached beside the new one (768 MiB reserved); pressed, it goes back first (512 MiB).
        // A segment with a live block stays either way.
        for (mut cache, reserved) in
            [(CachingAllocator::new(), 768 + 64), (CachingAllocator::pressed(), 512 + 64)]
        {
            let kept = cache.alloc(mib(64)).unwrap();
            let first = cache.alloc(mib(256)).unwrap();
            cache.free(first);
            let _second = cache.alloc(mib(512)).unwrap();
            assert_eq!(cache.peak_reserved(), mib(reserved));
            assert_eq!(cache.peak_allocated(), mib(512 + 64));
            cache.free(kept);
        }
        // Cached blocks still serve what they hold: nothing is returned when no segment grows.
        let mut cache = CachingAllocator::pressed();
        let first = cache.alloc(mib(256)).unwrap();
        cache.free(first);
        let _smaller = cache.alloc(mib(200)).unwrap();
        assert_eq!(cache.peak_reserved(), mib(256));
    }

    #[test]
    fn overflow_is_an_error() {
        let mut cache = CachingAllocator::new();
        assert!(cache.alloc(Bytes(u64::MAX)).is_err());
    }
}
