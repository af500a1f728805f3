//! A growing cache (transformers' `DynamicCache`, a remote model's tuples) holds, while the
//! prompt is prefilled, only the prompt's keys and values: the tokens generated afterwards are
//! cached once the prefill's intermediates are gone. The generation's peak is the larger of the
//! prefill (the prompt's KV beside the step's intermediates) and its end (the whole KV beside
//! the copy its growth makes), not their sum, so the prefill's intermediates count only what
//! they exceed the generated tokens' KV and that copy by.

use super::calc::formula;
use crate::budget::Component;
use crate::bytes::Bytes;

/// The prefill step's components, largest first: what gives way to the generated tokens' KV.
const PREFILL: [&str; 2] = ["forward-step peak (one layer or logits)", "hidden states"];

/// Lowers the prefill step's intermediates in `components` by `generated` (the generated
/// tokens' KV and the growth's copy), none below zero; `what` says what `generated` is.
pub(crate) fn yield_to_generated(components: &mut [Component], generated: Bytes, what: &str) {
    let mut left = generated.0;
    for name in PREFILL {
        let Some(component) = components.iter_mut().find(|c| c.name == name) else {
            continue;
        };
        let taken = left.min(component.bytes.0);
        if taken == 0 {
            continue;
        }
        left -= taken;
        let rest = Bytes(component.bytes.0 - taken);
        component.formula = formula!(
            "{}, less {} of {what}, which the prefill never meets = {rest}",
            component.formula,
            Bytes(taken)
        );
        component.bytes = rest;
    }
}
