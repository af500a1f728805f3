//! A trained denoiser whose weights are not all on the device: sharded over the data ranks
//! (`sharding zero3`: DeepSpeed ZeRO-3, FSDP's full sharding) or kept on the host (`offload
//! parameters`: DeepSpeed's `offload_param`), and gathered a block at a time for its turn.
//!
//! The device keeps its shard of the weights (none under parameter offload), and while a block
//! runs it holds that block's whole weights and, training them in full, their whole gradients
//! before the reduce-scatter: DeepSpeed's `largest_layer_memory = 4 × largest_layer_params` for
//! 16-bit training (DOMAIN.md §5.2), the language model path's `gathered layer (ZeRO-3)`. The
//! parameters outside the blocks (embedders, final norm and projection) are the root unit of
//! an FSDP wrap by blocks (finetrainers, FastVideo, diffusers' examples wrap each transformer
//! block), which FSDP does not reshard after the forward pass, so they are held whole through
//! the step. A block's size is the model's `largest_block`, its rest `outside_blocks`.

use super::calc::{Overflow, Product};
use super::training::{intermediate, sharded, state};
use crate::budget::{Category, Component};
use crate::hir::{Diffusion, Layered, Offload, Sharding, Training};

/// Whether the step gathers the denoiser's blocks: its weights are sharded over more than one
/// data rank, or offloaded.
pub(super) fn gathers(training: &Training, data: u64) -> bool {
    training.offload == Offload::Parameters || (training.sharding == Sharding::Zero3 && data > 1)
}

/// The denoiser's weights as a gathering step holds them: its shard, and the gathered block
/// with its gradients when trained in full. `None` when the model declares no blocks (the
/// checker refuses that beside a gathering step).
pub(super) fn weights(
    program: &Layered<'_>,
    diffusion: &Diffusion,
    training: &Training,
    data: u64,
    role: &str,
) -> Result<Option<Vec<Component>>, Overflow> {
    let denoiser = &diffusion.denoiser;
    let model = &denoiser.model;
    let (Some(params), Some(blocks)) = (
        super::diffusion::parameter_count(program, model),
        program.model(model).and_then(|m| m.blocks),
    ) else {
        return Ok(None);
    };
    let precision = denoiser.weights.matrix(crate::quant::Matrix::Up, 0, 1, 1);
    let per = precision.bytes_per_element();
    let mut out = Vec::new();
    if training.offload != Offload::Parameters {
        let ways = if training.sharding == Sharding::Zero3 { data } else { 1 };
        out.push(Component {
            category: Category::Persistent,
            ..state(
                &format!("{role} weights (this device's shard): {model}"),
                sharded(params, "params", per, precision.name(), ways)?,
                "DOMAIN.md §5.2: ZeRO-3 / FSDP full sharding",
            )
        });
    }
    let held = blocks.largest.checked_add(blocks.outside).ok_or(Overflow)?;
    let weights = Product::new()
        .times(held, "params of the largest block and outside the blocks")?
        .bytes_each(per, precision.name())?;
    let (bytes, formula) = if training.method.is_full() {
        let gradients = Product::new()
            .times(blocks.largest, "params of the block's gradients")?
            .bytes_each(training.gradients.bytes_per_element(), training.gradients.name())?;
        let (w, w_formula) = weights.finish()?;
        let (g, g_formula) = gradients.finish()?;
        let sum = super::calc::add(w, g)?;
        (sum, super::calc::formula!("({w_formula}) + ({g_formula}) = {sum}"))
    } else {
        weights.finish()?
    };
    out.push(intermediate(
        "gathered denoiser block (ZeRO-3)",
        (bytes, formula),
        "DOMAIN.md §5.2: DeepSpeed estimate_zero3_model_states_mem_needs (a layer's weights and \
         gradients gathered); FSDP keeps the root unit's parameters unsharded after the forward",
    ));
    Ok(Some(out))
}
