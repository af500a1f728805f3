//! DeepSpeed ZeRO-3 on one data rank, for the allocator replay of a step trained in full
//! (`reserve.rs`, `reserve/params.rs`): the engine's own buffers, made once before training,
//! and its optimizer step. Read in DeepSpeed 0.12.3, `runtime/zero/stage3.py`.
//!
//! With one rank a gathered parameter is its partition (`_no_gather_coalesced`), so the forward
//! and backward passes allocate what an unsharded step does; what differs is held beside them:
//! - `_create_fp16_partitions_with_defragmentation` moves every partition to the host, empties
//!   the cache and brings them back as one flat 16-bit buffer;
//! - `_create_fp32_partitions`: each sub-group's fp32 master, cast from a 16-bit clone
//!   (`.clone().float()`), the clone freed;
//! - `initialize_optimizer_states`: an fp32 gradient buffer the size of the largest sub-group,
//!   attached to each sub-group while its first (empty) step makes Adam's two moments
//!   (`zeros_like` of the fp32 partition), freed when it returns;
//! - the reduce bucket (`reduce_bucket_size` 16-bit elements) and the flat 16-bit gradient
//!   partition (`grad_partitions_flat_buffer`), into which every gradient is copied and then
//!   freed; a gradient larger than the bucket waits for the next one's hook;
//! - the step: each gradient's norm taken from an fp64 copy (`get_grad_norm_direct`, one at a
//!   time), then per sub-group a flat 16-bit copy of its gradients and that copy cast to fp32,
//!   held while the fused Adam updates the master (`_prepare_fp32_grad_for_sub_group`), freed
//!   by `_release_sub_group`.
//!
//! Sub-groups follow the parameters' order and close at the parameter that brings them to
//! `sub_group_size` elements (`_create_fp16_sub_groups`), so the first can be a parameter over.

use crate::bytes::Bytes;
use crate::eval::allocator::{CachingAllocator, Tensor};
use crate::eval::calc::Overflow;

/// The engine's settings, in bytes of the 16-bit parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ZeroThree {
    /// `sub_group_size`, in bytes of 16-bit parameters.
    pub(super) sub_group: u64,
    /// The reduce bucket, in bytes; 0 when the configuration states none.
    pub(super) bucket: u64,
}

/// The engine's live buffers and the gradient waiting for its reduction.
#[derive(Default)]
pub(super) struct Engine {
    #[allow(dead_code, reason = "held, never read: the buffers live as long as the run")]
    resident: Vec<Tensor>,
    pending: Option<Tensor>,
}

impl ZeroThree {
    /// The sub-groups' bytes for parameters of `sizes` bytes, in the model's order.
    pub(super) fn sub_groups(&self, sizes: &[u64]) -> Vec<u64> {
        let mut groups = Vec::new();
        let mut open = 0u64;
        for &bytes in sizes {
            open = open.saturating_add(bytes);
            if open >= self.sub_group {
                groups.push(open);
                open = 0;
            }
        }
        if open > 0 {
            groups.push(open);
        }
        groups
    }

    /// The buffers the engine makes before training, in its order, from an empty cache.
    pub(super) fn setup(
        &self,
        sizes: &[u64],
        alloc: &mut CachingAllocator,
    ) -> Result<Engine, Overflow> {
        let total = sizes.iter().try_fold(0u64, |sum, &b| sum.checked_add(b)).ok_or(Overflow)?;
        let groups = self.sub_groups(sizes);
        let mut resident = vec![alloc.alloc(Bytes(total))?];
        for &group in &groups {
            let clone = alloc.alloc(Bytes(group))?;
            resident.push(alloc.alloc(Bytes(fp32(group)?))?);
            alloc.free(clone);
        }
        let largest = groups.iter().copied().max().unwrap_or(0);
        let gradient_buffer = alloc.alloc(Bytes(fp32(largest)?))?;
        for &group in &groups {
            for _ in 0..2 {
                resident.push(alloc.alloc(Bytes(fp32(group)?))?);
            }
        }
        alloc.free(gradient_buffer);
        if self.bucket > 0 {
            resident.push(alloc.alloc(Bytes(self.bucket))?);
        }
        resident.push(alloc.alloc(Bytes(total))?);
        Ok(Engine { resident, pending: None })
    }

    /// A gradient of `bytes` made by the backward pass: copied into the bucket and freed when
    /// it fits, else reduced on its own at the next gradient's hook.
    pub(super) fn gradient(
        &self,
        engine: &mut Engine,
        alloc: &mut CachingAllocator,
        bytes: u64,
    ) -> Result<(), Overflow> {
        let made = alloc.alloc(Bytes(bytes))?;
        if let Some(waiting) = engine.pending.take() {
            alloc.free(waiting);
        }
        if bytes <= self.bucket {
            alloc.free(made);
        } else {
            engine.pending = Some(made);
        }
        Ok(())
    }

    /// The optimizer step over parameters of `sizes` bytes: the backward pass's last gradient
    /// reduced, each gradient's norm from an fp64 copy, then each sub-group's fp32 gradient.
    pub(super) fn step(
        &self,
        engine: &mut Engine,
        sizes: &[u64],
        alloc: &mut CachingAllocator,
    ) -> Result<(), Overflow> {
        if let Some(waiting) = engine.pending.take() {
            alloc.free(waiting);
        }
        for &bytes in sizes {
            let double = alloc.alloc(Bytes(bytes.checked_mul(4).ok_or(Overflow)?))?;
            alloc.free(double);
        }
        for group in self.sub_groups(sizes) {
            let flat = alloc.alloc(Bytes(group))?;
            let gradient = alloc.alloc(Bytes(fp32(group)?))?;
            alloc.free(flat);
            alloc.free(gradient);
        }
        Ok(())
    }
}

/// The fp32 bytes of 16-bit `bytes`.
fn fp32(bytes: u64) -> Result<u64, Overflow> {
    bytes.checked_mul(2).ok_or(Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::MIB;

    const ENGINE: ZeroThree = ZeroThree { sub_group: 100 * MIB, bucket: 8 * MIB };
    /// Two sub-groups of 110 and 70 MiB of 16-bit parameters (180 MiB): every size a multiple
    /// of 2 MiB and over 10 MiB, so each block is its request's size.
    const SIZES: [u64; 4] = [60 * MIB, 50 * MIB, 40 * MIB, 30 * MIB];
    /// What setup leaves held: 2 (parameters) + 4 (master) + 8 (moments) + 2 (gradients) bytes
    /// a parameter, 8 times its 16-bit bytes, and the bucket.
    const HELD: u64 = 8 * 180 * MIB + 8 * MIB;

    #[test]
    fn a_sub_group_closes_at_the_parameter_that_fills_it() {
        assert_eq!(ENGINE.sub_groups(&SIZES), vec![110 * MIB, 70 * MIB]);
        assert_eq!(ENGINE.sub_groups(&[40 * MIB]), vec![40 * MIB]);
    }

    #[test]
    fn setup_holds_sixteen_bytes_a_parameter_and_caches_its_transients() {
        let mut alloc = CachingAllocator::new();
        let mut engine = ENGINE.setup(&SIZES, &mut alloc).unwrap();
        assert_eq!(alloc.allocated().0, HELD);
        // The parameters, masters and moments with the largest sub-group's fp32 gradient
        // buffer, before the bucket and the flat gradients.
        assert_eq!(alloc.peak_allocated().0, 7 * 180 * MIB + 220 * MIB);
        // Cached: the first clone's block (the bucket cut from it) and the gradient buffer's
        // remainder once the flat gradients took it.
        assert_eq!(alloc.peak_reserved().0, HELD + (110 - 8) * MIB + (220 - 180) * MIB);
        // A gradient over the bucket waits for the next; the step frees the last.
        ENGINE.gradient(&mut engine, &mut alloc, 60 * MIB).unwrap();
        ENGINE.gradient(&mut engine, &mut alloc, 4 * MIB).unwrap();
        assert_eq!(alloc.allocated().0, HELD);
        ENGINE.gradient(&mut engine, &mut alloc, 30 * MIB).unwrap();
        assert_eq!(alloc.allocated().0, HELD + 30 * MIB);
        ENGINE.step(&mut engine, &SIZES, &mut alloc).unwrap();
        assert_eq!(alloc.allocated().0, HELD);
    }

    #[test]
    fn the_step_holds_a_sub_groups_flat_copy_and_its_fp32_cast() {
        let mut alloc = CachingAllocator::new();
        let mut engine = ENGINE.setup(&SIZES, &mut alloc).unwrap();
        let setup_peak = alloc.peak_allocated().0;
        ENGINE.step(&mut engine, &SIZES, &mut alloc).unwrap();
        // The first sub-group's 110 MiB flat copy and 220 MiB fp32 cast, above the largest
        // parameter's fp64 copy (240 MiB).
        assert_eq!(alloc.peak_allocated().0, setup_peak.max(HELD + 3 * 110 * MIB));
        assert_eq!(alloc.allocated().0, HELD);
    }
}
