//! The parameters' side of a step trained in full, for the allocator replay (`reserve.rs`): the
//! gradients its backward pass makes, the optimizer's states and its step's intermediates.
//!
//! Why they shape the reserve: every gradient is the size of its parameter and is made between
//! the backward pass's activation gradients, so it is cut out of the segments the forward pass
//! cached or takes a segment of its own; AdamW makes its two moments at its first step
//! (`torch.optim.AdamW`, `_init_group`: `zeros_like` per parameter, in the parameters' order)
//! from whatever the activations left cached, and its multi-tensor step (`_multi_tensor_adamw`,
//! PyTorch's default since 2.0) makes the square root of every second moment at once (and, in
//! 2.0, the denominators beside them), freed when the step returns. `zero_grad(set_to_none=True)`
//! then frees the gradients, and the next step's activations, logits and loss are cut out of the
//! parameter-sized blocks those leave. Accumulated micro-batches add each new gradient into the
//! one already held: the new one is made, added and freed.
//!
//! Covered: every matrix, the embedding and the output head trained in their own type, with no
//! master copy (pure 16-bit or fp32 training: gradients and states in that type), or in fp32
//! under a 16-bit autocast (each matrix's 16-bit copy made as the forward pass reaches it,
//! freed when the autocast region ends or, recorded, when its backward pass has used it),
//! unsharded on one device, by AdamW; or in DeepSpeed's mixed precision under ZeRO-3 on one data
//! rank, whose engine holds and steps them (`reserve/zero3.rs`). The norms' weights and the biases are left out: under a MiB
//! a tensor at the widths people train, they come from the small pool, apart from these segments.

use super::super::states::SUB_GROUP_SIZE;
use super::zero3::{Engine, ZeroThree};
use crate::bytes::Bytes;
use crate::eval::Placement;
use crate::eval::allocator::{CachingAllocator, Tensor};
use crate::eval::calc::Overflow;
use crate::hir::{
    Method, Mlp, Offload, Optimizer, Output, Shape, Sharding, StatesMemory, Training, ZeroGrad,
};
use crate::precision::Precision;

/// A decoder layer's matrices, in the order the backward pass makes their gradients.
#[derive(Clone, Copy)]
pub(super) enum Matrix {
    Down = 0,
    Up = 1,
    Gate = 2,
    Output = 3,
    Query = 4,
    Key = 5,
    Value = 6,
}

const MATRICES: u64 = 7;

/// The sizes of a fully trained step's parameter-sized tensors, and how its loop treats them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Params {
    /// Each layer's matrices' bytes, indexed by [`Matrix`]; 0 for a gate an ungated MLP lacks.
    layer: [u64; 7],
    layers: u64,
    embedding: u64,
    /// The output head's own bytes; `None` when it is the embedding (`tied`) or a few small
    /// tensors (an encoder's classifier, left out with the norms).
    head: Option<u64>,
    tied: bool,
    /// The optimizer's states per parameter, each the parameter's size.
    states: u64,
    /// State-sized intermediates of the multi-tensor step, every parameter's at once; 0: a loop
    /// over the parameters, one temporary at a time.
    intermediates: u64,
    set_to_none: bool,
    /// Autocast over fp32 parameters: each matrix's 16-bit copy, made as the forward pass first
    /// multiplies by it, cached until the autocast region ends and kept by autograd for the
    /// backward pass where the pass is recorded.
    autocast: bool,
    /// DeepSpeed ZeRO-3 on one data rank holds and steps the parameters (`reserve/zero3.rs`)
    /// in place of PyTorch's optimizer (`states`, `intermediates` and `set_to_none` unused).
    zero3: Option<ZeroThree>,
}

/// A replay's live parameter-sized tensors: those made so far, and those alive between steps.
pub(super) struct ParamTensors {
    sizes: Params,
    /// Indexed by [`ParamTensors::slot`]: the embedding, each layer's matrices, the head.
    grads: Vec<Option<Tensor>>,
    moments: Vec<Tensor>,
    /// Under autocast, each layer's live 16-bit copies, and the head's.
    casts: Vec<Vec<Tensor>>,
    head_cast: Option<Tensor>,
    /// Under ZeRO-3, the engine's buffers, made by [`ParamTensors::start`].
    engine: Engine,
}

impl Params {
    /// The parameters of a step the replay covers (the module's documentation); `None` else.
    /// `data`: the data-parallel ranks.
    pub(super) fn of(
        shape: &Shape,
        placement: &Placement,
        training: &Training,
        data: u64,
    ) -> Result<Option<Params>, Overflow> {
        let element = match training.weights {
            Precision::Bf16 | Precision::Fp16 => 2,
            Precision::Fp32 => 4,
            _ => return Ok(None),
        };
        let autocast = training.weights == Precision::Fp32
            && matches!(training.activations, Precision::Bf16 | Precision::Fp16);
        let pure = training.master.is_none()
            && (training.activations == training.weights || autocast)
            && training.gradients == training.weights;
        // DeepSpeed's mixed precision: 16-bit parameters and gradients, an fp32 master.
        let zero3 = training.deepspeed
            && training.sharding == Sharding::Zero3
            && data == 1
            && element == 2
            && training.master == Some(Precision::Fp32)
            && training.activations == training.weights
            && training.gradients == training.weights;
        let covered = matches!(training.method, Method::Full)
            && (zero3 || (pure && !training.deepspeed && training.sharding == Sharding::None))
            && training.optimizer == Optimizer::AdamW
            && training.offload == Offload::None
            && training.galore_rank.is_none()
            && training.states_memory == StatesMemory::Allocator;
        if !covered {
            return Ok(None);
        }
        let bytes = |rows: u64, cols: u64| {
            rows.checked_mul(cols).and_then(|v| v.checked_mul(element)).ok_or(Overflow)
        };
        let h = shape.hidden;
        let q = shape.heads.checked_mul(shape.head_dim).ok_or(Overflow)?;
        let kv = shape.kv_heads.checked_mul(shape.head_dim).ok_or(Overflow)?;
        let gate = if shape.mlp == Mlp::Plain { 0 } else { bytes(h, shape.ffn)? };
        let layer = [
            bytes(shape.ffn, h)?,
            bytes(h, shape.ffn)?,
            gate,
            bytes(q, h)?,
            bytes(h, q)?,
            bytes(h, kv)?,
            bytes(h, kv)?,
        ];
        let embedding = bytes(shape.vocab, h)?;
        let lm = shape.output == Output::Lm;
        let tied = lm && shape.tied_embeddings;
        let head = (lm && !tied).then_some(embedding);
        Ok(Some(Params {
            layer,
            layers: placement.layers,
            embedding,
            head,
            tied,
            states: 2,
            intermediates: training.foreach_intermediates,
            set_to_none: training.zero_grad == ZeroGrad::SetToNone,
            autocast,
            zero3: if zero3 {
                let bucket = training.bucket_elements.unwrap_or(0);
                Some(ZeroThree {
                    sub_group: SUB_GROUP_SIZE.checked_mul(element).ok_or(Overflow)?,
                    bucket: bucket.checked_mul(element).ok_or(Overflow)?,
                })
            } else {
                None
            },
        }))
    }

    /// A layer's matrices' bytes in the model's order: attention (q, k, v, o), then the MLP
    /// (gate, up, down); an ungated MLP's missing gate left out.
    fn layer_in_model_order(&self) -> impl Iterator<Item = u64> + '_ {
        [
            Matrix::Query,
            Matrix::Key,
            Matrix::Value,
            Matrix::Output,
            Matrix::Gate,
            Matrix::Up,
            Matrix::Down,
        ]
        .into_iter()
        .map(|m| self.layer[m as usize])
        .filter(|&b| b > 0)
    }

    /// Every parameter's bytes, in the model's order (`parameters()`): the embedding, each
    /// layer's attention (q, k, v, o) and MLP (gate, up, down), the head.
    fn in_model_order(&self) -> Vec<u64> {
        let mut sizes = vec![self.embedding];
        for _ in 0..self.layers {
            sizes.extend(self.layer_in_model_order());
        }
        sizes.extend(self.head);
        sizes
    }
}

impl ParamTensors {
    /// `sizes` with no gradient, state or copy made yet: a replay's start.
    pub(super) fn new(sizes: Params) -> Result<ParamTensors, Overflow> {
        let slots = sizes.layers.checked_mul(MATRICES).and_then(|v| v.checked_add(2));
        let slots = slots.and_then(|v| usize::try_from(v).ok()).ok_or(Overflow)?;
        Ok(ParamTensors {
            sizes,
            grads: (0..slots).map(|_| None).collect(),
            moments: Vec::new(),
            casts: (0..sizes.layers).map(|_| Vec::new()).collect(),
            head_cast: None,
            engine: Engine::default(),
        })
    }

    /// What exists before the first step: under ZeRO-3, the engine's buffers.
    pub(super) fn start(&mut self, alloc: &mut CachingAllocator) -> Result<(), Overflow> {
        if let Some(zero3) = self.sizes.zero3 {
            self.engine = zero3.setup(&self.sizes.in_model_order(), alloc)?;
        }
        Ok(())
    }

    /// Where `layer`'s `matrix` keeps its gradient: below `grads.len()`, which `new` checked
    /// fits a usize, for every layer of the replay.
    fn slot(layer: u64, matrix: Matrix) -> usize {
        usize::try_from(1 + layer * MATRICES + matrix as u64).unwrap_or(usize::MAX)
    }

    fn head_slot(&self) -> usize {
        self.grads.len() - 1
    }

    /// The gradient of the parameter in `slot`, as autograd's `AccumulateGrad` leaves it: kept
    /// as the parameter's gradient when it has none, else added into it and freed.
    fn gradient(
        &mut self,
        alloc: &mut CachingAllocator,
        slot: usize,
        bytes: u64,
    ) -> Result<(), Overflow> {
        if bytes == 0 {
            return Ok(());
        }
        if let Some(zero3) = self.sizes.zero3 {
            return zero3.gradient(&mut self.engine, alloc, bytes);
        }
        let Some(held) = self.grads.get_mut(slot) else {
            return Ok(());
        };
        let made = alloc.alloc(Bytes(bytes))?;
        if held.is_some() {
            alloc.free(made);
        } else {
            *held = Some(made);
        }
        Ok(())
    }

    /// The gradients of `layer`'s matrices, made as its backward pass reaches them.
    pub(super) fn layer_gradients(
        &mut self,
        alloc: &mut CachingAllocator,
        layer: u64,
        matrices: &[Matrix],
    ) -> Result<(), Overflow> {
        for &matrix in matrices {
            let slot = ParamTensors::slot(layer, matrix);
            self.gradient(alloc, slot, self.sizes.layer[matrix as usize])?;
        }
        Ok(())
    }

    /// The output head's gradient, made with the gradient of the final norm's output; a tied
    /// head's is the embedding's, a classifier's is left out.
    pub(super) fn head_gradient(&mut self, alloc: &mut CachingAllocator) -> Result<(), Overflow> {
        match self.sizes.head {
            Some(bytes) => {
                let slot = self.head_slot();
                self.gradient(alloc, slot, bytes)
            }
            None if self.sizes.tied => self.gradient(alloc, 0, self.sizes.embedding),
            None => Ok(()),
        }
    }

    /// The embedding's gradient, the backward pass's last: a dense tensor of the whole table.
    pub(super) fn embedding_gradient(
        &mut self,
        alloc: &mut CachingAllocator,
    ) -> Result<(), Overflow> {
        self.gradient(alloc, 0, self.sizes.embedding)
    }

    /// Under autocast, `layer`'s 16-bit copies of its matrices, made as its forward pass runs.
    pub(super) fn cast_layer(
        &mut self,
        alloc: &mut CachingAllocator,
        layer: u64,
    ) -> Result<(), Overflow> {
        if !self.sizes.autocast {
            return Ok(());
        }
        let sizes: Vec<u64> = self.sizes.layer_in_model_order().collect();
        let Some(held) = usize::try_from(layer).ok().and_then(|l| self.casts.get_mut(l)) else {
            return Ok(());
        };
        for bytes in sizes {
            held.push(alloc.alloc(Bytes(bytes / 2))?);
        }
        Ok(())
    }

    /// `layer`'s copies freed: the autocast region ended with nothing recording them, or its
    /// backward pass has used them.
    pub(super) fn drop_layer_casts(&mut self, alloc: &mut CachingAllocator, layer: u64) {
        if let Some(held) = usize::try_from(layer).ok().and_then(|l| self.casts.get_mut(l)) {
            for tensor in held.drain(..) {
                alloc.free(tensor);
            }
        }
    }

    /// Under autocast, the output head's 16-bit copy (a tied head's is the embedding's), kept
    /// until the head's backward pass.
    pub(super) fn cast_head(&mut self, alloc: &mut CachingAllocator) -> Result<(), Overflow> {
        let Params { head, tied, embedding, autocast, .. } = self.sizes;
        if let (true, Some(bytes)) = (autocast, head.or(tied.then_some(embedding))) {
            self.head_cast = Some(alloc.alloc(Bytes(bytes / 2))?);
        }
        Ok(())
    }

    pub(super) fn drop_head_cast(&mut self, alloc: &mut CachingAllocator) {
        if let Some(tensor) = self.head_cast.take() {
            alloc.free(tensor);
        }
    }

    /// The optimizer step: the states made at the first, the intermediates over every
    /// parameter, then the gradients freed when `zero_grad` sets them to `None`.
    pub(super) fn optimizer_step(&mut self, alloc: &mut CachingAllocator) -> Result<(), Overflow> {
        let sizes = self.sizes.in_model_order();
        if let Some(zero3) = self.sizes.zero3 {
            return zero3.step(&mut self.engine, &sizes, alloc);
        }
        if self.moments.is_empty() {
            for &bytes in &sizes {
                for _ in 0..self.sizes.states {
                    self.moments.push(alloc.alloc(Bytes(bytes))?);
                }
            }
        }
        if self.sizes.intermediates == 0 {
            for &bytes in &sizes {
                let temporary = alloc.alloc(Bytes(bytes))?;
                alloc.free(temporary);
            }
        } else {
            let mut held = Vec::new();
            for _ in 0..self.sizes.intermediates {
                for &bytes in &sizes {
                    held.push(alloc.alloc(Bytes(bytes))?);
                }
            }
            for tensor in held {
                alloc.free(tensor);
            }
        }
        if self.sizes.set_to_none {
            for grad in &mut self.grads {
                if let Some(tensor) = grad.take() {
                    alloc.free(tensor);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::MIB;

    /// One layer of 16 MiB matrices (an ungated MLP's gate 0), a 64 MiB embedding, a 32 MiB
    /// head: every size a multiple of 2 MiB and over 10 MiB, so each block is its own request's
    /// size and the sums below are exact.
    fn params(head: Option<u64>, intermediates: u64, set_to_none: bool) -> ParamTensors {
        ParamTensors::new(Params {
            tied: head.is_none(),
            layer: [16 * MIB, 16 * MIB, 0, 16 * MIB, 16 * MIB, 16 * MIB, 16 * MIB],
            layers: 1,
            embedding: 64 * MIB,
            head,
            states: 2,
            intermediates,
            set_to_none,
            autocast: false,
            zero3: None,
        })
        .unwrap()
    }

    const ALL: [Matrix; 7] = [
        Matrix::Down,
        Matrix::Up,
        Matrix::Gate,
        Matrix::Output,
        Matrix::Query,
        Matrix::Key,
        Matrix::Value,
    ];

    /// A whole backward pass's gradients: the head's, the layer's, the embedding's.
    fn backward(p: &mut ParamTensors, alloc: &mut CachingAllocator) {
        p.head_gradient(alloc).unwrap();
        p.layer_gradients(alloc, 0, &ALL).unwrap();
        p.embedding_gradient(alloc).unwrap();
    }

    #[test]
    fn accumulated_gradients_are_made_added_and_freed() {
        let (mut p, mut alloc) = (params(Some(32 * MIB), 1, true), CachingAllocator::new());
        backward(&mut p, &mut alloc);
        // Six 16 MiB matrices (no gate), the embedding and the head.
        let grads = 6 * 16 * MIB + 64 * MIB + 32 * MIB;
        assert_eq!(alloc.allocated().0, grads);
        backward(&mut p, &mut alloc);
        assert_eq!(alloc.allocated().0, grads);
        // The second pass's gradients were made beside the first's before each was freed.
        assert_eq!(alloc.peak_allocated().0, grads + 64 * MIB);
    }

    #[test]
    fn a_tied_head_accumulates_into_the_embedding() {
        let (mut p, mut alloc) = (params(None, 1, true), CachingAllocator::new());
        backward(&mut p, &mut alloc);
        assert_eq!(alloc.allocated().0, 6 * 16 * MIB + 64 * MIB);
    }

    #[test]
    fn the_first_step_makes_the_states_and_every_step_its_intermediates() {
        let (mut p, mut alloc) = (params(Some(32 * MIB), 1, true), CachingAllocator::new());
        let total = 6 * 16 * MIB + 64 * MIB + 32 * MIB;
        backward(&mut p, &mut alloc);
        p.optimizer_step(&mut alloc).unwrap();
        // Two moments of every parameter stay; the gradients went with `zero_grad`.
        assert_eq!(alloc.allocated().0, 2 * total);
        // At the step: the gradients, the moments and one square root of every second moment.
        assert_eq!(alloc.peak_allocated().0, 4 * total);
        backward(&mut p, &mut alloc);
        p.optimizer_step(&mut alloc).unwrap();
        assert_eq!(alloc.allocated().0, 2 * total);
        assert_eq!(alloc.peak_allocated().0, 4 * total);
        // PyTorch 2.0's step holds the denominators beside the square roots.
        let (mut p, mut alloc) = (params(Some(32 * MIB), 2, true), CachingAllocator::new());
        backward(&mut p, &mut alloc);
        p.optimizer_step(&mut alloc).unwrap();
        assert_eq!(alloc.peak_allocated().0, 5 * total);
    }

    #[test]
    fn autocast_copies_are_half_the_fp32_matrices_and_go_when_dropped() {
        let mut p = params(None, 1, true);
        p.sizes.autocast = true;
        let mut alloc = CachingAllocator::new();
        p.cast_layer(&mut alloc, 0).unwrap();
        // Six 16 MiB fp32 matrices (no gate), each copied at 8 MiB.
        assert_eq!(alloc.allocated().0, 6 * 8 * MIB);
        // A tied head's copy is the embedding's.
        p.cast_head(&mut alloc).unwrap();
        assert_eq!(alloc.allocated().0, 6 * 8 * MIB + 32 * MIB);
        p.drop_layer_casts(&mut alloc, 0);
        p.drop_head_cast(&mut alloc);
        assert_eq!(alloc.allocated().0, 0);
        // Parameters already in the compute type make no copies.
        let mut pure = params(None, 1, true);
        pure.cast_layer(&mut alloc, 0).unwrap();
        pure.cast_head(&mut alloc).unwrap();
        assert_eq!(alloc.peak_allocated().0, 6 * 8 * MIB + 32 * MIB);
        assert_eq!(alloc.allocated().0, 0);
    }

    #[test]
    fn zeroed_gradients_stay_and_a_loop_holds_one_temporary() {
        let (mut p, mut alloc) = (params(Some(32 * MIB), 0, false), CachingAllocator::new());
        let total = 6 * 16 * MIB + 64 * MIB + 32 * MIB;
        backward(&mut p, &mut alloc);
        p.optimizer_step(&mut alloc).unwrap();
        assert_eq!(alloc.allocated().0, 3 * total);
        // The largest parameter's temporary, one at a time.
        assert_eq!(alloc.peak_allocated().0, 3 * total + 64 * MIB);
    }
}
