//! Checking block swapping (`blocks_to_swap`, `single_blocks_to_swap` in a `diffusion`
//! section): a transformer denoiser, trained or sampled, keeps some blocks' weights on the host.
//!
//! kohya's sd-scripts and musubi-tuner (`custom_offloading_utils.ModelOffloader`) swap blocks of
//! one kind with each other, so a model with single-stream blocks (FLUX.1, HunyuanVideo) has a
//! count of each kind; the tools print both ("double blocks: 9, single blocks: 18"). A swap needs
//! one block of its kind left on the device to swap into, and the sizes of the blocks, which the
//! model's `largest_block` and `outside_blocks` give.

use super::Scope;
use super::fields::Fields;
use super::quantity::Dim;
use crate::diagnostic::Diagnostic;
use crate::hir::{BlockLayout, BlockSwap};

/// The section's swap keys.
const KEYS: [&str; 2] = ["blocks_to_swap", "single_blocks_to_swap"];

/// What the rest of the section says that a swap depends on.
pub(super) struct Context<'s> {
    /// The denoiser's architecture, when readable (`Some(true)`: a UNet).
    pub(super) unet: Option<bool>,
    /// Its blocks as checked; `None` when they did not check.
    pub(super) layout: Option<&'s BlockLayout>,
    /// Its model's name.
    pub(super) model: Option<&'s String>,
    /// The section's `offload` word, if any other than `none`.
    pub(super) offload: Option<&'s str>,
    /// Copies of the denoiser taking turns (`denoiser_experts`).
    pub(super) experts: u64,
    /// The pipeline is trained, where `offload` and `denoiser_experts` are refused already.
    pub(super) trained: bool,
}

/// Whether the section writes a swap, which makes the denoiser's blocks needed.
pub(super) fn written(fields: &Fields<'_>) -> bool {
    KEYS.into_iter().any(|key| fields.first(key).is_some())
}

/// The swapped blocks the section declares.
pub(super) fn block_swap(fields: &Fields<'_>, scope: &Scope<'_>, at: &Context<'_>) -> BlockSwap {
    let Some(first) = KEYS.into_iter().find_map(|key| fields.first(key)) else {
        return BlockSwap::default();
    };
    let conflict = match (at.trained, at.offload, at.experts) {
        (true, ..) | (false, None, 0..=1) => None,
        (false, Some(word), _) => Some(format!("`offload {word}`")),
        (false, None, _) => Some("`denoiser_experts`".to_string()),
    };
    if let Some(other) = conflict {
        fields.push(
            Diagnostic::error(
                "E014",
                first.key.span,
                format!("`{}` is not modelled beside {other}", first.key.name),
            )
            .with_help("swap blocks, or keep the other setting, not both"),
        );
        return BlockSwap::default();
    }
    if at.unet == Some(true) {
        fields.push(
            Diagnostic::error(
                "E013",
                first.key.span,
                format!("`{}` swaps a transformer denoiser's blocks", first.key.name),
            )
            .with_help("block swapping is modelled for `architecture dit`"),
        );
        return BlockSwap::default();
    }
    // Blocks that did not check are reported where they are written.
    let Some(&BlockLayout::Transformer { layers, single_layers, .. }) = at.layout else {
        return BlockSwap::default();
    };
    if let Some(model) = at.model.filter(|m| scope.program_models_without_blocks.contains(m)) {
        fields.push(
            Diagnostic::error(
                "E011",
                first.key.span,
                format!("model `{model}` declares no blocks; swapping needs their size"),
            )
            .with_help(format!(
                "give `{model}` its `largest_block` and `outside_blocks` (its top-level block \
                 lists' largest entry and what lies outside them)"
            )),
        );
    }
    let kinds = KEYS.into_iter().zip([layers - single_layers, single_layers]);
    let mut counts = [0; 2];
    for ((key, of_kind), count) in kinds.zip(&mut counts) {
        let Some(field) = fields.get(key) else { continue };
        let kind = match (key, single_layers) {
            ("single_blocks_to_swap", _) => "single-stream blocks",
            (_, 0) => "blocks",
            _ => "double-stream blocks",
        };
        if of_kind == 0 {
            fields.push(
                Diagnostic::error(
                    "E014",
                    field.key.span,
                    format!("`{key}`: the denoiser has no {kind}"),
                )
                .with_help("`single_layers` says how many of the `layers` are single-stream"),
            );
            continue;
        }
        let Some((value, span)) = fields.quantity(field, Dim::Count, "18") else { continue };
        let Some(n) = fields.check_whole(key, value, span, 0, 1 << 16) else { continue };
        if n >= of_kind {
            fields.push(
                Diagnostic::error(
                    "E007",
                    span,
                    format!("`{key}` is {n}; the denoiser has {of_kind} {kind}"),
                )
                .with_help(format!(
                    "at most {}: one block stays on the device for the others to be swapped into",
                    of_kind - 1
                )),
            );
            continue;
        }
        *count = n;
    }
    BlockSwap { blocks: counts[0], single_blocks: counts[1] }
}
