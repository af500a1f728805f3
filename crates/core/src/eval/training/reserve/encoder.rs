//! A post-norm encoder's step for the allocator replay (`reserve.rs`): BERT's layer as
//! transformers' `BertLayer` runs it in training with eager attention, and a classifier's head.
//!
//! A layer's forward pass, in order: the query, key and value projections; the scores
//! (`q @ kᵀ`), scaled and masked, each a new tensor; their softmax (kept for its backward) and
//! its dropout (a mask of a byte per score and the dropped probabilities, kept for the product
//! with the values); the context, copied back to the hidden layout (`permute().contiguous()`);
//! the output projection, its dropout and the residual sum, normalized (the sum kept); the
//! feed-forward's up projection, its GELU (the input kept), the down projection, its dropout
//! and the second residual sum, normalized into the next layer's input. The backward pass frees
//! each saved tensor once its gradient is made, in reverse. The head, a classifier over the
//! first token, is a few small tensors; the gradient it sends back fills a hidden-sized tensor.

use super::params::Matrix;
use super::{LayerKind, Run, Step};
use crate::eval::allocator::Tensor;
use crate::eval::calc::Overflow;

/// The sizes, in bytes, of an encoder step's tensors beyond the hidden and feed-forward widths
/// [`Step`] holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Encoder {
    /// One head-by-query-by-key tensor of every sample: a layer's scores and probabilities.
    pub(super) scores: u64,
    /// The attention dropout's mask (a byte per score); 0 without dropout.
    pub(super) scores_mask: u64,
    /// A hidden-state dropout's mask (a byte per value); 0 without dropout.
    pub(super) hidden_mask: u64,
}

impl Encoder {
    fn dropout(&self) -> bool {
        self.hidden_mask > 0
    }
}

/// The tensors an encoder layer's backward pass reads.
#[derive(Default)]
pub(super) struct Saved {
    query: Option<Tensor>,
    key: Option<Tensor>,
    value: Option<Tensor>,
    probabilities: Option<Tensor>,
    probabilities_mask: Option<Tensor>,
    dropped: Option<Tensor>,
    context: Option<Tensor>,
    attention_mask: Option<Tensor>,
    first_sum: Option<Tensor>,
    first_norm: Option<Tensor>,
    up: Option<Tensor>,
    activated: Option<Tensor>,
    output_mask: Option<Tensor>,
    second_sum: Option<Tensor>,
}

impl LayerKind for Encoder {
    type Saved = Saved;

    fn forward(&self, run: &mut Run<'_>, keep: bool) -> Result<(Tensor, Saved), Overflow> {
        run.encoder_layer(self, keep)
    }

    fn backward(
        &self,
        run: &mut Run<'_>,
        layer: u64,
        saved: Saved,
        grad: Tensor,
    ) -> Result<Tensor, Overflow> {
        run.encoder_backward(self, layer, saved, grad)
    }
}

impl Run<'_> {
    /// A mask of `bytes` when the model drops out, kept for the backward pass.
    fn mask(&mut self, keep: bool, bytes: u64) -> Result<Option<Tensor>, Overflow> {
        if bytes == 0 {
            return Ok(None);
        }
        let mask = self.a(bytes)?;
        Ok(self.kept(keep, mask))
    }

    /// A hidden-state dropout over `input`: its mask and output (the input freed).
    fn hidden_dropout(
        &mut self,
        e: &Encoder,
        keep: bool,
        input: Tensor,
    ) -> Result<(Option<Tensor>, Tensor), Overflow> {
        if !e.dropout() {
            return Ok((None, input));
        }
        let mask = self.mask(keep, e.hidden_mask)?;
        let out = self.a(self.step.hidden)?;
        self.f(Some(input));
        Ok((mask, out))
    }

    /// One encoder layer's forward pass over its input: its output, and what its backward pass
    /// reads when autograd records it (`keep`).
    pub(super) fn encoder_layer(
        &mut self,
        e: &Encoder,
        keep: bool,
    ) -> Result<(Tensor, Saved), Overflow> {
        let s: &Step = self.step;
        let query = self.a(s.hidden)?;
        let key = self.a(s.hidden)?;
        let value = self.a(s.hidden)?;
        let raw = self.a(e.scores)?;
        let (query, key) = (self.kept(keep, query), self.kept(keep, key));
        let scaled = self.a(e.scores)?;
        self.f(Some(raw));
        let masked = self.a(e.scores)?;
        self.f(Some(scaled));
        let probabilities = self.a(e.scores)?;
        self.f(Some(masked));
        let (probabilities_mask, dropped) = if e.dropout() {
            let mask = self.mask(keep, e.scores_mask)?;
            (mask, Some(self.a(e.scores)?))
        } else {
            (None, None)
        };
        let context = self.a(s.hidden)?;
        let probabilities = self.kept(keep, probabilities);
        let dropped = match dropped {
            Some(tensor) => self.kept(keep, tensor),
            None => None,
        };
        let value = self.kept(keep, value);
        let copied = self.a(s.hidden)?;
        self.f(Some(context));
        let projected = self.a(s.hidden)?;
        let context = self.kept(keep, copied);
        let (attention_mask, projected) = self.hidden_dropout(e, keep, projected)?;
        let first_sum = self.a(s.hidden)?;
        self.f(Some(projected));
        let first_norm = self.a(s.hidden)?;
        let first_sum = self.kept(keep, first_sum);
        let up = self.a(s.ffn)?;
        let activated = self.a(s.ffn)?;
        let up = self.kept(keep, up);
        let down = self.a(s.hidden)?;
        let activated = self.kept(keep, activated);
        let (output_mask, down) = self.hidden_dropout(e, keep, down)?;
        let second_sum = self.a(s.hidden)?;
        self.f(Some(down));
        let out = self.a(s.hidden)?;
        let (first_norm, second_sum) = (self.kept(keep, first_norm), self.kept(keep, second_sum));
        let saved = Saved {
            query,
            key,
            value,
            probabilities,
            probabilities_mask,
            dropped,
            context,
            attention_mask,
            first_sum,
            first_norm,
            up,
            activated,
            output_mask,
            second_sum,
        };
        Ok((out, saved))
    }

    /// An encoder layer's backward pass over its saved tensors, given the gradient of its
    /// output: returns the gradient of its input.
    pub(super) fn encoder_backward(
        &mut self,
        e: &Encoder,
        layer: u64,
        saved: Saved,
        grad: Tensor,
    ) -> Result<Tensor, Overflow> {
        let s: &Step = self.step;
        let g_second_sum = self.a(s.hidden)?;
        self.f(saved.second_sum);
        self.f(Some(grad));
        let g_down = if e.dropout() {
            let g = self.a(s.hidden)?;
            self.f(saved.output_mask);
            Some(g)
        } else {
            None
        };
        let g_activated = self.a(s.ffn)?;
        self.gradients(layer, &[Matrix::Down])?;
        self.f(saved.activated);
        self.f(g_down);
        let g_up = self.a(s.ffn)?;
        self.f(saved.up);
        self.f(Some(g_activated));
        let g_norm_part = self.a(s.hidden)?;
        self.gradients(layer, &[Matrix::Up])?;
        self.f(saved.first_norm);
        self.f(Some(g_up));
        // The first norm's output is also the second residual's: its two gradients add up.
        let g_first_norm = self.a(s.hidden)?;
        self.f(Some(g_norm_part));
        self.f(Some(g_second_sum));
        let g_first_sum = self.a(s.hidden)?;
        self.f(saved.first_sum);
        self.f(Some(g_first_norm));
        let g_projected = if e.dropout() {
            let g = self.a(s.hidden)?;
            self.f(saved.attention_mask);
            Some(g)
        } else {
            None
        };
        let g_context = self.a(s.hidden)?;
        self.gradients(layer, &[Matrix::Output])?;
        self.f(saved.context);
        self.f(g_projected);
        let g_heads = self.a(s.hidden)?;
        self.f(Some(g_context));
        let g_dropped = self.a(e.scores)?;
        let g_value = self.a(s.hidden)?;
        self.f(saved.dropped);
        self.f(Some(g_heads));
        let g_probabilities = if e.dropout() {
            let g = self.a(e.scores)?;
            self.f(saved.probabilities_mask);
            self.f(Some(g_dropped));
            g
        } else {
            g_dropped
        };
        self.f(saved.value);
        let g_masked = self.a(e.scores)?;
        self.f(saved.probabilities);
        self.f(Some(g_probabilities));
        let g_raw = self.a(e.scores)?;
        self.f(Some(g_masked));
        let g_query = self.a(s.hidden)?;
        let g_key = self.a(s.hidden)?;
        self.f(saved.query);
        self.f(saved.key);
        self.f(Some(g_raw));
        // Each projection's input gradient, added into the input's with the residual's.
        let g_input = self.a(s.hidden)?;
        for _ in 0..2 {
            let part = self.a(s.hidden)?;
            self.f(Some(part));
        }
        self.gradients(layer, &[Matrix::Query, Matrix::Key, Matrix::Value])?;
        for t in [g_query, g_key, g_value, g_first_sum] {
            self.f(Some(t));
        }
        Ok(g_input)
    }

    /// One encoder training step: the embeddings' sum (kept by their norm) and dropout, the
    /// layers, the classifier's gradient into the last layer, the backward pass.
    pub(super) fn encoder_step(&mut self, e: &Encoder) -> Result<(), Overflow> {
        let s: &Step = self.step;
        let summed = self.a(s.hidden)?;
        let normed = self.a(s.hidden)?;
        let (mask, input) = self.hidden_dropout(e, true, normed)?;
        let (hidden, recorded) = self.forward_layers(e, input)?;
        self.autocast_ends();
        let grad = self.a(s.hidden)?;
        self.f(Some(hidden));
        let grad = self.backward_layers(e, recorded, grad)?;
        for t in [Some(grad), mask, Some(summed)] {
            self.f(t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::MIB;
    use crate::eval::allocator::CachingAllocator;

    const HIDDEN: u64 = 16 * MIB;
    const FFN: u64 = 64 * MIB;
    const SCORES: u64 = 32 * MIB;
    /// A byte a value: a quarter of the fp32 tensors' bytes.
    const SCORES_MASK: u64 = SCORES / 4;
    const HIDDEN_MASK: u64 = HIDDEN / 4;

    fn sizes(dropout: bool) -> (Step, Encoder) {
        let step = Step {
            layers: 1,
            hidden: HIDDEN,
            query: HIDDEN,
            key: HIDDEN,
            ffn: FFN,
            gated: false,
            lse: 0,
            logits: 0,
            loss: 0,
            upcast: false,
            dequantized: None,
            checkpointed: false,
            micro_steps: 1,
            params: None,
            encoder: None,
        };
        let masks = u64::from(dropout);
        let encoder = Encoder {
            scores: SCORES,
            scores_mask: SCORES_MASK * masks,
            hidden_mask: HIDDEN_MASK * masks,
        };
        (step, encoder)
    }

    #[test]
    fn a_recorded_layer_keeps_what_its_backward_pass_reads() {
        let (step, encoder) = sizes(true);
        let mut run = Run { alloc: CachingAllocator::new(), step: &step, params: None };
        let (out, saved) = run.encoder_layer(&encoder, true).unwrap();
        // q, k, v, the copied context, both residual sums, the first norm's output and the
        // layer's own output; the softmax and the dropped probabilities; the up projection and
        // its GELU; a mask for the probabilities and one for each hidden-state dropout.
        let kept = 8 * HIDDEN + 2 * SCORES + 2 * FFN + SCORES_MASK + 2 * HIDDEN_MASK;
        assert_eq!(run.alloc.allocated().0, kept);
        // Its backward pass frees all of it and returns the input's gradient.
        let grad = run.a(HIDDEN).unwrap();
        let g_input = run.encoder_backward(&encoder, 0, saved, grad).unwrap();
        run.f(Some(out));
        assert_eq!(run.alloc.allocated().0, HIDDEN);
        run.f(Some(g_input));
        assert_eq!(run.alloc.allocated().0, 0);
    }

    #[test]
    fn an_unrecorded_layer_keeps_its_output_and_no_dropout_no_masks() {
        let (step, encoder) = sizes(true);
        let mut run = Run { alloc: CachingAllocator::new(), step: &step, params: None };
        let (out, _) = run.encoder_layer(&encoder, false).unwrap();
        assert_eq!(run.alloc.allocated().0, HIDDEN);
        // Its largest moment: the scores and their softmax beside q, k and v.
        assert!(run.alloc.peak_allocated().0 >= 3 * HIDDEN + 2 * SCORES);
        run.f(Some(out));
        let (step, encoder) = sizes(false);
        let mut run = Run { alloc: CachingAllocator::new(), step: &step, params: None };
        let (_out, _saved) = run.encoder_layer(&encoder, true).unwrap();
        assert_eq!(run.alloc.allocated().0, 8 * HIDDEN + SCORES + 2 * FFN);
    }
}
