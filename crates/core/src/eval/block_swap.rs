//! Block swapping of a transformer denoiser, trained or sampled (kohya's sd-scripts and
//! musubi-tuner, `--blocks_to_swap`; diffusion-pipe's `blocks_to_swap`, from the same code):
//! the weights of the swapped blocks live in host memory, and the device holds the rest.
//!
//! `custom_offloading_utils.ModelOffloader` (kohya-ss/sd-scripts at 48d368f) starts each step
//! with the first blocks of a kind on the device and the last `blocks_to_swap` on the host. When
//! block `i` has run, its weights go to the host and a waiting block's are copied into the same
//! device tensors (`swap_weight_devices_cuda`: `cuda_data_view.copy_(...)`), and the backward
//! pass swaps them back in reverse (musubi-tuner's generation scripts run the same offloader
//! forward only, `supports_backward=False`); so the device never holds more than the unswapped
//! blocks' weights, whichever blocks they are. Only `weight` tensors move: biases and norm scales stay,
//! a share of a block below 0.1 % that is counted as swapped. LoRA modules are the network's
//! own (kohya's `LoRANetwork`), not the blocks', and stay on the device, with their states.
//!
//! Blocks of one kind are taken to be equal: a model with single-stream blocks has the declared
//! `largest_block` for each of its others (FLUX.1's and HunyuanVideo's double blocks are
//! equal) and what remains of its parameters, shared out, for each single-stream one; a model
//! without them, its parameters outside the blocks shared out over its `layers`.

use super::calc::{Overflow, formula};
use crate::bytes::{Bytes, group_thousands};
use crate::hir::{BlockLayout, Diffusion, Layered};

/// The swapped blocks' parameters, and how they were counted.
pub(super) struct Swapped {
    pub(super) params: u64,
    /// `9 double-stream blocks × 339,831,296 params + …`.
    pub(super) terms: String,
}

/// The parameters of the blocks a denoiser swaps, or `None` when it swaps none (or its
/// model declares no blocks, which the checker refuses beside a swap).
pub(super) fn swapped(
    program: &Layered<'_>,
    diffusion: &Diffusion,
) -> Result<Option<Swapped>, Overflow> {
    let denoiser = &diffusion.denoiser;
    let swap = denoiser.swap;
    let layout = denoiser.blocks.as_ref().map(|b| &b.layout);
    let (Some(&BlockLayout::Transformer { layers, single_layers, .. }), true) =
        (layout, swap.any())
    else {
        return Ok(None);
    };
    let Some(found) = program.model(&denoiser.model) else { return Ok(None) };
    let (Some(params), Some(blocks)) =
        (super::diffusion::parameter_count(program, &denoiser.model), found.blocks)
    else {
        return Ok(None);
    };
    let in_blocks = params.saturating_sub(blocks.outside);
    let others = layers - single_layers;
    let in_others = others.checked_mul(blocks.largest).ok_or(Overflow)?;
    let (per_block, per_single) =
        match in_blocks.saturating_sub(in_others).checked_div(single_layers) {
            Some(per_single) => (blocks.largest, per_single),
            None => (in_blocks / layers.max(1), 0),
        };
    let swapped = swap
        .blocks
        .checked_mul(per_block)
        .zip(swap.single_blocks.checked_mul(per_single))
        .and_then(|(a, b)| a.checked_add(b))
        .ok_or(Overflow)?;
    let kind = if single_layers == 0 { "blocks" } else { "double-stream blocks" };
    let mut parts = Vec::new();
    if swap.blocks > 0 {
        parts.push(formula!("{} {kind} × {} params", swap.blocks, group_thousands(per_block)));
    }
    if swap.single_blocks > 0 {
        parts.push(formula!(
            "{} single-stream blocks × {} params",
            swap.single_blocks,
            group_thousands(per_single)
        ));
    }
    Ok(Some(Swapped { params: swapped, terms: parts.join(" + ") }))
}

/// The swapped blocks' weights in host memory, their parameters in the denoiser's format, and
/// the arithmetic.
pub(super) fn host_bytes(
    swapped: &Swapped,
    diffusion: &Diffusion,
) -> Result<(Bytes, String), Overflow> {
    let precision = diffusion.denoiser.weights.matrix(crate::quant::Matrix::Up, 0, 1, 1);
    let per = precision.bytes_per_element();
    let bytes = Bytes::for_elements(swapped.params, per).ok_or(Overflow)?;
    let arithmetic = formula!(
        "{} = {} params × {per} B ({}) = {bytes}",
        swapped.terms,
        group_thousands(swapped.params),
        precision.name()
    );
    Ok((bytes, arithmetic))
}
