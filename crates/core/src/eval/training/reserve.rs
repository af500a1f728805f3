//! What PyTorch's caching allocator keeps reserved beyond the live tensors of a training step
//! (adapters, or every parameter in its own type): the step's tensors replayed, in the order a
//! transformer layer makes and frees them, through [`CachingAllocator`] for two optimizer steps.
//!
//! Why there is anything to keep: the forward pass of a checkpointed model frees each layer's
//! intermediates as it goes, and the allocator caches their segments (a segment per request of
//! 10 MiB or more). The layer inputs that checkpointing keeps are then cut out of those cached
//! segments (best fit), so the loss's tensors, the step's largest (tokens × vocabulary, in the
//! compute type and in fp32), find no free block that holds them and take new segments; what
//! the layer inputs leave of the old ones stays cached and too small for them. From the second
//! step on, the pattern repeats in the segments the first step left. The replay counts that
//! reserve; the tensors' own bytes are the budget's other components.
//!
//! Replayed: a decoder layer's forward (input norm, q, k, v and their rotated copies, the fused
//! attention's output and log-sum-exp, the output projection, the residual sums, the MLP's
//! projections and product; a bitsandbytes 4-bit layer's dequantized weight beside each of its
//! matrix products), the head's logits with the loss's upcast and log-softmax, and the backward
//! pass (each checkpointed layer recomputed, then its gradients made and its tensors freed).
//! A post-norm encoder (BERT's, eager attention, a classifier's head) replays its own layer
//! (`reserve/encoder.rs`) in place of a decoder's.
//! Adapters, their gradients and optimizer state are under 1 MiB a tensor at the ranks people
//! use and come from the small pool, apart from these segments. A step trained in full adds its
//! parameter-sized tensors: the gradients as the backward pass makes them, AdamW's states made
//! at the first optimizer step and the step's intermediates (`reserve/params.rs`), replayed with
//! two micro-batches a step when gradients accumulate; under DeepSpeed ZeRO-3 on one data rank
//! the engine's flat buffers and its sub-group step take the optimizer's place
//! (`reserve/zero3.rs`). Only the plain case is
//! replayed (one device's whole decoder, with standard attention and no experts; fused
//! attention; full or no checkpointing; the loss over the vocabulary on every position): for
//! other steps the budget states no reserve beyond the tensors. ZeRO-1 and ZeRO-2 are replayed
//! like an unsharded step: they partition optimizer state and gradients, which for adapters are
//! small-pool tensors, and their reduce buckets are allocated once, before the first step, in
//! segments of their own; ZeRO-3 on one rank gathers nothing (a parameter is its partition),
//! but over several ranks, like FSDP's full sharding, it gathers each layer's weights between
//! the step's tensors, and is not replayed.

mod encoder;
mod params;
mod zero3;

use super::states::intermediate;
use crate::budget::{Category, Component, HeldBy};
use crate::bytes::Bytes;
use crate::eval::Placement;
use crate::eval::allocator::{CachingAllocator, Tensor, split_releasable};
use crate::eval::calc::{Overflow, formula};
use crate::hir::{
    Attention, AttentionKind, Checkpointing, FusedLoss, Method, Mlp, Norm, Objective, Offload,
    Output, Shape, Sharding, Training,
};
use crate::precision::Precision;
use encoder::Encoder;
use params::{Matrix, ParamTensors, Params};

/// Replays already made, by the sizes of their steps' tensors: a planner's probes that change
/// the device and not the step (another card, another machine) find theirs here.
#[derive(Clone, Debug, Default)]
pub(crate) struct Replays(Vec<(Step, [Bytes; 3])>);

/// The replayed reserve of a training step, split into what a device without room still needs
/// and the releasable rest; empty when the step is not one the replay covers.
pub(in crate::eval) fn allocator_cache(
    shape: &Shape,
    placement: &Placement,
    training: &Training,
    data: u64,
    replays: &mut Replays,
) -> Result<Vec<Component>, Overflow> {
    let Some(step) = Step::of(shape, placement, training, data)? else {
        return Ok(Vec::new());
    };
    let [peak, reserved, pressed] =
        if let Some((_, found)) = replays.0.iter().find(|(made, _)| *made == step) {
            *found
        } else {
            let (peak, reserved) = replay(&step, CachingAllocator::new())?;
            let (_, pressed) = replay(&step, CachingAllocator::pressed())?;
            replays.0.push((step, [peak, reserved, pressed]));
            [peak, reserved, pressed]
        };
    let Some(extra) = reserved.0.checked_sub(peak.0).filter(|e| *e > 0) else {
        return Ok(Vec::new());
    };
    let cache = Component {
        held_by: HeldBy::AllocatorCache,
        category: Category::Workspace,
        ..intermediate(
            "allocator cache (training step)",
            (
                Bytes(extra),
                formula!(
                    "{reserved} reserved by replaying two steps' tensors through the caching \
                     allocator, less the {peak} they hold live at their peak = {}",
                    Bytes(extra)
                ),
            ),
            "PyTorch CUDACachingAllocator replayed over the step's tensors (allocator.rs, \
             training/reserve.rs)",
        )
    };
    let releasable = Bytes(reserved.0.saturating_sub(pressed.0));
    Ok(split_releasable((cache, releasable)))
}

/// The sizes, in bytes, of one step's tensors: two equal steps replay the same.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Step {
    layers: u64,
    hidden: u64,
    query: u64,
    key: u64,
    ffn: u64,
    gated: bool,
    /// The fused attention's log-sum-exp: fp32, one per token and head.
    lse: u64,
    logits: u64,
    /// The loss's tensors over the logits (fp32, or the compute type when the loss runs in it).
    loss: u64,
    upcast: bool,
    /// Each layer matrix's bytes in the compute type, for a 4-bit layer's dequantized weight.
    dequantized: Option<[u64; 7]>,
    checkpointed: bool,
    /// Micro-batches replayed per optimizer step: two show how accumulated gradients are
    /// held, more repeat the second.
    micro_steps: u64,
    /// A step trained in full: its parameters' gradients, states and step (`reserve/params.rs`).
    params: Option<Params>,
    /// A post-norm encoder's step (`reserve/encoder.rs`) in place of a decoder's.
    encoder: Option<Encoder>,
}

impl Step {
    fn of(
        shape: &Shape,
        placement: &Placement,
        training: &Training,
        data: u64,
    ) -> Result<Option<Step>, Overflow> {
        let params = Params::of(shape, placement, training, data)?;
        // A decoder with a fused attention and a head over the vocabulary, or a post-norm
        // encoder (BERT's) with eager attention and a classifier.
        let decoder = training.attention == Attention::Fused && shape.output == Output::Lm;
        let encoder = training.attention == Attention::Eager
            && shape.output == Output::None
            && shape.norm == Norm::Layer
            && shape.mlp == Mlp::Plain
            && shape.heads == shape.kv_heads;
        let plain = (matches!(training.method, Method::Lora { .. }) || params.is_some())
            && (decoder || encoder)
            && training.objective == Objective::Sft
            // ZeRO-3 on one rank gathers nothing: a parameter is its own partition.
            && (training.sharding != Sharding::Zero3 || data == 1)
            && training.offload == Offload::None
            && matches!(training.checkpointing, Checkpointing::Full | Checkpointing::None)
            && training.loss_chunks == 1
            && training.levers.fused_loss == FusedLoss::None
            && !training.levers.step_in_backward
            && !training.levers.compile
            && !training.levers.offload_activations
            && shape.encoder.is_none()
            && shape.moe.is_none()
            && shape.attention == AttentionKind::Standard
            && placement.tensor == 1
            && placement.stages == 1;
        if !plain {
            return Ok(None);
        }
        let element = match training.activations {
            Precision::Bf16 | Precision::Fp16 => 2,
            Precision::Fp32 => 4,
            _ => return Ok(None),
        };
        let loss_element = match training.loss {
            Precision::Fp32 => 4,
            Precision::Bf16 | Precision::Fp16 => 2,
            _ => return Ok(None),
        };
        let tokens = training.micro_batch.checked_mul(training.sequence).ok_or(Overflow)?;
        let per_token = |width: u64, bytes: u64| {
            tokens.checked_mul(width).and_then(|v| v.checked_mul(bytes)).ok_or(Overflow)
        };
        let (h, q, kv) = (
            shape.hidden,
            shape.heads.checked_mul(shape.head_dim).ok_or(Overflow)?,
            shape.kv_heads.checked_mul(shape.head_dim).ok_or(Overflow)?,
        );
        let matrix = |rows: u64, cols: u64| {
            rows.checked_mul(cols).and_then(|v| v.checked_mul(element)).ok_or(Overflow)
        };
        let dequantized = if training.weights.is_bitsandbytes_4bit() {
            Some([
                matrix(h, q)?,
                matrix(h, kv)?,
                matrix(h, kv)?,
                matrix(q, h)?,
                matrix(h, shape.ffn)?,
                matrix(h, shape.ffn)?,
                matrix(shape.ffn, h)?,
            ])
        } else {
            None
        };
        Ok(Some(Step {
            layers: placement.layers,
            hidden: per_token(h, element)?,
            query: per_token(q, element)?,
            key: per_token(kv, element)?,
            ffn: per_token(shape.ffn, element)?,
            gated: shape.mlp != Mlp::Plain,
            lse: per_token(shape.heads, 4)?,
            logits: per_token(shape.vocab, element)?,
            loss: per_token(shape.vocab, loss_element)?,
            upcast: loss_element != element,
            dequantized,
            checkpointed: training.checkpointing == Checkpointing::Full,
            encoder: if encoder {
                let scores = training
                    .micro_batch
                    .checked_mul(shape.heads)
                    .and_then(|v| v.checked_mul(training.sequence))
                    .and_then(|v| v.checked_mul(training.sequence))
                    .ok_or(Overflow)?;
                let dropout = u64::from(shape.dropout);
                Some(Encoder {
                    scores: scores.checked_mul(element).ok_or(Overflow)?,
                    scores_mask: scores * dropout,
                    hidden_mask: per_token(h, 1)? * dropout,
                })
            } else {
                None
            },
            micro_steps: if params.is_some() { training.accumulation.clamp(1, 2) } else { 1 },
            params,
        }))
    }
}

/// One layer's tensors that its backward pass reads; all `None` after a pass under `no_grad`,
/// which frees each intermediate once the next one exists.
#[derive(Default)]
struct Saved {
    norm: Option<Tensor>,
    query: Option<Tensor>,
    key: Option<Tensor>,
    value: Option<Tensor>,
    query_rotated: Option<Tensor>,
    key_rotated: Option<Tensor>,
    attention: Option<Tensor>,
    lse: Option<Tensor>,
    projected: Option<Tensor>,
    residual: Option<Tensor>,
    norm2: Option<Tensor>,
    gate: Option<Tensor>,
    up: Option<Tensor>,
    act: Option<Tensor>,
    product: Option<Tensor>,
    down: Option<Tensor>,
}

/// The allocator and the step's sizes.
struct Run<'s> {
    alloc: CachingAllocator,
    step: &'s Step,
    params: Option<ParamTensors>,
}

impl Run<'_> {
    fn a(&mut self, bytes: u64) -> Result<Tensor, Overflow> {
        self.alloc.alloc(Bytes(bytes))
    }

    fn f(&mut self, tensor: Option<Tensor>) {
        if let Some(tensor) = tensor {
            self.alloc.free(tensor);
        }
    }

    /// The gradients of `layer`'s `matrices`, in a step trained in full.
    fn gradients(&mut self, layer: u64, matrices: &[Matrix]) -> Result<(), Overflow> {
        match &mut self.params {
            Some(params) => params.layer_gradients(&mut self.alloc, layer, matrices),
            None => Ok(()),
        }
    }

    /// Under autocast, `layer`'s 16-bit weight copies, made as its forward pass runs.
    fn cast(&mut self, layer: u64) -> Result<(), Overflow> {
        match &mut self.params {
            Some(params) => params.cast_layer(&mut self.alloc, layer),
            None => Ok(()),
        }
    }

    /// `layer`'s weight copies freed once its backward pass has used them.
    fn uncast(&mut self, layer: u64) {
        if let Some(params) = &mut self.params {
            params.drop_layer_casts(&mut self.alloc, layer);
        }
    }

    /// The forward pass and its loss return, and autocast's cache of weight copies empties: a
    /// checkpointed pass recorded none of them, so every layer's goes.
    fn autocast_ends(&mut self) {
        if self.step.checkpointed {
            for layer in 0..self.step.layers {
                self.uncast(layer);
            }
        }
    }

    /// `tensor` when autograd records the pass (`keep`), else freed now.
    fn kept(&mut self, keep: bool, tensor: Tensor) -> Option<Tensor> {
        if keep {
            return Some(tensor);
        }
        self.alloc.free(tensor);
        None
    }

    /// A matrix product's output; a 4-bit layer first dequantizes matrix `m` (q k v o gate up
    /// down) into a transient of the compute type.
    fn product(&mut self, m: usize, bytes: u64) -> Result<Tensor, Overflow> {
        let weight = match self.step.dequantized {
            Some(sizes) => Some(self.a(sizes[m])?),
            None => None,
        };
        let out = self.a(bytes)?;
        self.f(weight);
        Ok(out)
    }

    /// One layer's forward pass over its input: its output, and the tensors its backward pass
    /// reads when autograd records it (`keep`).
    fn layer(&mut self, keep: bool) -> Result<(Tensor, Saved), Overflow> {
        let sizes = self.step;
        let norm = self.a(sizes.hidden)?;
        let query = self.product(0, sizes.query)?;
        let key = self.product(1, sizes.key)?;
        let value = self.product(2, sizes.key)?;
        let query_rotated = self.a(sizes.query)?;
        let key_rotated = self.a(sizes.key)?;
        let (query, key) = (self.kept(keep, query), self.kept(keep, key));
        let attention = self.a(sizes.query)?;
        let lse = self.a(sizes.lse)?;
        let (query_rotated, key_rotated) =
            (self.kept(keep, query_rotated), self.kept(keep, key_rotated));
        let (value, lse) = (self.kept(keep, value), self.kept(keep, lse));
        let projected = self.product(3, sizes.hidden)?;
        let attention = self.kept(keep, attention);
        let residual = self.a(sizes.hidden)?;
        let (projected, norm) = (self.kept(keep, projected), self.kept(keep, norm));
        let norm2 = self.a(sizes.hidden)?;
        let gate = if sizes.gated { Some(self.product(4, sizes.ffn)?) } else { None };
        let up = self.product(5, sizes.ffn)?;
        let act = if sizes.gated { Some(self.a(sizes.ffn)?) } else { None };
        let product = self.a(sizes.ffn)?;
        let gate = match gate {
            Some(tensor) => self.kept(keep, tensor),
            None => None,
        };
        let act = match act {
            Some(tensor) => self.kept(keep, tensor),
            None => None,
        };
        let up = self.kept(keep, up);
        let down = self.product(6, sizes.hidden)?;
        let (product, norm2) = (self.kept(keep, product), self.kept(keep, norm2));
        let out = self.a(sizes.hidden)?;
        let (down, residual) = (self.kept(keep, down), self.kept(keep, residual));
        let saved = Saved {
            norm,
            query,
            key,
            value,
            query_rotated,
            key_rotated,
            attention,
            lse,
            projected,
            residual,
            norm2,
            gate,
            up,
            act,
            product,
            down,
        };
        Ok((out, saved))
    }

    /// A layer's backward pass over its saved tensors, given the gradient of its output:
    /// returns the gradient of its input.
    fn backward(&mut self, layer: u64, saved: Saved, grad: Tensor) -> Result<Tensor, Overflow> {
        let s = self.step;
        let g_product = self.a(s.ffn)?;
        self.gradients(layer, &[Matrix::Down])?;
        self.f(saved.down);
        self.f(saved.product);
        let g_up = self.a(s.ffn)?;
        let g_gate = if s.gated { Some(self.a(s.ffn)?) } else { None };
        self.f(Some(g_product));
        self.f(saved.act);
        self.f(saved.gate);
        self.f(saved.up);
        let g_norm2 = self.a(s.hidden)?;
        self.gradients(layer, &[Matrix::Up, Matrix::Gate])?;
        self.f(Some(g_up));
        self.f(g_gate);
        self.f(saved.norm2);
        let g_residual = self.a(s.hidden)?;
        self.f(Some(g_norm2));
        self.f(saved.residual);
        let g_attention = self.a(s.query)?;
        self.gradients(layer, &[Matrix::Output])?;
        self.f(saved.projected);
        let g_query = self.a(s.query)?;
        let g_key = self.a(s.key)?;
        let g_value = self.a(s.key)?;
        self.f(Some(g_attention));
        for t in [saved.attention, saved.lse, saved.query_rotated, saved.key_rotated, saved.value] {
            self.f(t);
        }
        let g_query_rotated = self.a(s.query)?;
        let g_key_rotated = self.a(s.key)?;
        self.f(Some(g_query));
        self.f(Some(g_key));
        self.f(saved.query);
        self.f(saved.key);
        let g_normed = self.a(s.hidden)?;
        self.gradients(layer, &[Matrix::Query, Matrix::Key, Matrix::Value])?;
        for t in [Some(g_query_rotated), Some(g_key_rotated), Some(g_value), saved.norm] {
            self.f(t);
        }
        let g_input = self.a(s.hidden)?;
        self.f(Some(g_normed));
        self.f(Some(g_residual));
        self.f(Some(grad));
        Ok(g_input)
    }

    /// One training step: forward, loss, backward.
    fn step(&mut self) -> Result<(), Overflow> {
        let s = self.step;
        if let Some(encoder) = &s.encoder {
            return self.encoder_step(encoder);
        }
        let input = self.a(s.hidden)?;
        let (hidden, recorded) = self.forward_layers(&Decoder, input)?;
        // The final norm, the head's logits and the loss over them: an upcast copy when the
        // loss runs in fp32 and its log-softmax (kept for backward). The upcast copy is freed
        // when the loss returns, the 16-bit logits when the model's outputs are dropped.
        let final_norm = self.a(s.hidden)?;
        if let Some(params) = &mut self.params {
            params.cast_head(&mut self.alloc)?;
        }
        let logits = self.a(s.logits)?;
        let upcast = if s.upcast { Some(self.a(s.loss)?) } else { None };
        let log_softmax = self.a(s.loss)?;
        self.f(upcast);
        self.f(Some(logits));
        let g_log_softmax = self.a(s.loss)?;
        let g_logits = self.a(s.loss)?;
        self.f(Some(g_log_softmax));
        self.f(Some(log_softmax));
        let into_head = if s.upcast {
            let cast = self.a(s.logits)?;
            self.f(Some(g_logits));
            cast
        } else {
            g_logits
        };
        self.autocast_ends();
        let grad = self.a(s.hidden)?;
        if let Some(params) = &mut self.params {
            params.head_gradient(&mut self.alloc)?;
            params.drop_head_cast(&mut self.alloc);
        }
        for t in [into_head, final_norm, hidden] {
            self.f(Some(t));
        }
        let grad = self.backward_layers(&Decoder, recorded, grad)?;
        self.f(Some(grad));
        Ok(())
    }

    /// Every layer's forward pass from `input`, each layer's 16-bit weight copies made first
    /// under autocast: the last layer's output, and each layer's input with what it saved.
    fn forward_layers<K: LayerKind>(
        &mut self,
        kind: &K,
        input: Tensor,
    ) -> Result<(Tensor, Recorded<K>), Overflow> {
        let mut hidden = input;
        let mut recorded = Vec::new();
        for layer in 0..self.step.layers {
            self.cast(layer)?;
            let (out, kept) = kind.forward(self, !self.step.checkpointed)?;
            recorded.push((hidden, kept));
            hidden = out;
        }
        Ok((hidden, recorded))
    }

    /// The backward pass through every layer from the last, given the gradient of its output:
    /// each layer run again from its input first when checkpointed, its input and weight copies
    /// freed after, then the embedding's gradient. Returns the gradient of the first input.
    fn backward_layers<K: LayerKind>(
        &mut self,
        kind: &K,
        recorded: Recorded<K>,
        mut grad: Tensor,
    ) -> Result<Tensor, Overflow> {
        let mut layer = self.step.layers;
        for (input, kept) in recorded.into_iter().rev() {
            layer -= 1;
            let kept = if self.step.checkpointed {
                // The layer runs again from its input, recorded this time.
                self.cast(layer)?;
                let (out, kept) = kind.forward(self, true)?;
                self.f(Some(out));
                kept
            } else {
                kept
            };
            grad = kind.backward(self, layer, kept, grad)?;
            self.uncast(layer);
            self.f(Some(input));
        }
        if let Some(params) = &mut self.params {
            params.embedding_gradient(&mut self.alloc)?;
        }
        Ok(grad)
    }
}

/// Each layer's input, and what its forward pass saved for its backward pass.
type Recorded<K> = Vec<(Tensor, <K as LayerKind>::Saved)>;

/// A kind of layer the replay runs: its forward pass, and its backward pass over what the
/// forward pass saved.
trait LayerKind {
    type Saved;
    /// The layer's output, and what its backward pass reads when autograd records it (`keep`).
    fn forward(&self, run: &mut Run<'_>, keep: bool) -> Result<(Tensor, Self::Saved), Overflow>;
    /// The gradient of the layer's input, given its output's.
    fn backward(
        &self,
        run: &mut Run<'_>,
        layer: u64,
        saved: Self::Saved,
        grad: Tensor,
    ) -> Result<Tensor, Overflow>;
}

/// A pre-norm decoder layer (`Run::layer`, `Run::backward`).
struct Decoder;

impl LayerKind for Decoder {
    type Saved = Saved;

    fn forward(&self, run: &mut Run<'_>, keep: bool) -> Result<(Tensor, Saved), Overflow> {
        run.layer(keep)
    }

    fn backward(
        &self,
        run: &mut Run<'_>,
        layer: u64,
        saved: Saved,
        grad: Tensor,
    ) -> Result<Tensor, Overflow> {
        run.backward(layer, saved, grad)
    }
}

/// The replay's allocated and reserved peaks over two optimizer steps.
fn replay(step: &Step, alloc: CachingAllocator) -> Result<(Bytes, Bytes), Overflow> {
    let params = step.params.map(ParamTensors::new).transpose()?;
    let mut run = Run { alloc, step, params };
    if let Some(params) = &mut run.params {
        params.start(&mut run.alloc)?;
    }
    for _ in 0..2 {
        for _ in 0..step.micro_steps {
            run.step()?;
        }
        if let Some(params) = &mut run.params {
            params.optimizer_step(&mut run.alloc)?;
        }
    }
    Ok((run.alloc.peak_allocated(), run.alloc.peak_reserved()))
}
