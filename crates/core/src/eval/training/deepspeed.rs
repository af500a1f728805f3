//! DeepSpeed ZeRO-1/2's own gradient buffers beside the model states: the reduce buckets and,
//! while gradients accumulate, the next micro-batch's gradient partition.
//! Source: DeepSpeed `runtime/zero/stage_1_and_2.py` (`backward`, `copy_grads_in_partition`,
//! `independent_gradient_partition_epilogue`).

use super::states::{intermediate, state};
use crate::budget::{Category, Component};
use crate::eval::calc::{Overflow, Product};
use crate::hir::{Sharding, Training};

/// Gradients reduce through a bucket of `reduce_bucket_size` elements, double-buffered to
/// overlap with the backward pass (`overlap_comm`): two buckets of 16-bit gradients, allocated
/// at every backward pass.
pub(in crate::eval) fn buckets(
    training: &Training,
    data: u64,
) -> Result<Option<Component>, Overflow> {
    let Some(elements) =
        training.bucket_elements.filter(|_| data > 1 || training.sharding != Sharding::None)
    else {
        return Ok(None);
    };
    let a = training.activations;
    let product = Product::new()
        .times(2, "buckets")?
        .times(elements, "elements (reduce_bucket_size)")?
        .bytes_each(a.bytes_per_element(), a.name())?;
    Ok(Some(Component {
        category: Category::Workspace,
        ..state(
            "ZeRO gradient buckets (DeepSpeed)",
            product.finish()?,
            "DeepSpeed zero_optimization: reduce_bucket_size (default 5e8) with overlap_comm",
        )
    }))
}

/// While gradients accumulate, each backward pass after the first reduces into a fresh
/// 16-bit partition: the epilogue keeps the accumulated gradients as views of the previous
/// buffer (`averaged_gradients`), releases the buffer's reference (`_release_ipg_buffers`), and
/// the next backward pass's `copy_grads_in_partition` allocates a new one, added into the
/// accumulated gradients at its own epilogue. So through that backward pass this rank holds a
/// second copy of its partition of `trained` parameters' gradients. ZeRO-3 accumulates in place
/// into one flat buffer; offloaded gradients go to the host.
pub(in crate::eval) fn accumulating_partition(
    trained: u64,
    training: &Training,
    data: u64,
) -> Result<Option<Component>, Overflow> {
    let zero12 = matches!(training.sharding, Sharding::Zero1 | Sharding::Zero2);
    if !training.deepspeed || !zero12 || training.accumulation <= 1 || training.gradients_on_host()
    {
        return Ok(None);
    }
    let g = training.gradients;
    let mut product = Product::new()
        .times(trained, "trained params")?
        .bytes_each(g.bytes_per_element(), g.name())?;
    if data > 1 {
        product = product.divided(data, "data ranks")?;
    }
    Ok(Some(intermediate(
        "ZeRO gradient partition of the next micro-batch (DeepSpeed)",
        product.finish()?,
        "DeepSpeed stage_1_and_2.py: averaged_gradients keeps the accumulated partition while copy_grads_in_partition allocates the next micro-batch's",
    )))
}
