//! `torch "2.0"`: the PyTorch release a training run used, and the defaults that follow from
//! it: the multi-tensor optimizer step's intermediates, `zero_grad` and the attention.
//!
//! - Before 2.0 the optimizers' `foreach=None` meant a per-tensor loop; 2.0 made the
//!   multi-tensor (`foreach`) step the default on CUDA (`_default_to_fused_or_foreach`).
//! - PyTorch 2.0's foreach AdamW holds two state-sized intermediates over every parameter at
//!   once, the square root of the second moment and the denominator built from it
//!   (`denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`); pytorch/pytorch#97712 reported the
//!   extra memory and PR #104898 (July 2023, released in 2.1) adds `eps` in place, leaving one,
//!   "a minimum budget of 1 intermediate" as the fix puts it.
//! - Before 2.0 PyTorch had no fused attention of its own (`F.scaled_dot_product_attention`
//!   arrived in 2.0): models materialized their attention scores unless a separate kernel
//!   (flash-attn, xFormers) was installed and called, which `attention fused` then says.
//! - Before 2.0 `Optimizer.zero_grad()` filled the gradients with zeros (`set_to_none=False`),
//!   so they stayed allocated through the next forward pass; 2.0 made `set_to_none=True` the
//!   default (its release notes, "Optimizer: set_to_none=True by default").

use super::fields::Fields;
use crate::hir::{Attention, ZeroGrad};

/// A PyTorch release, major and minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Release {
    major: u32,
    minor: u32,
}

impl Release {
    /// The first release whose foreach AdamW adds `eps` in place (PR #104898).
    const ONE_INTERMEDIATE: Release = Release { major: 2, minor: 1 };
    /// 2.0: the multi-tensor step and `set_to_none=True` became the defaults.
    const TWO_ZERO: Release = Release { major: 2, minor: 0 };

    /// `"2.0"`, `"2.1.2"`, `"1.13.1+cu117"`: the major and minor numbers lead.
    fn parse(text: &str) -> Option<Release> {
        let mut parts = text.trim().split(['.', '+']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Release { major, minor })
    }
}

/// The `torch` field of a training section, if written and readable.
pub(super) fn release(fields: &Fields<'_>) -> Option<Release> {
    fields.quoted(
        "torch",
        Release::parse,
        "`torch` takes a PyTorch release in quotes, such as \"2.0\"",
        "write the major and minor numbers: `torch \"2.1\"`",
    )
}

/// State-sized intermediates the multi-tensor AdamW step holds over every parameter at once:
/// none for a per-tensor loop or a fused kernel (`foreach false`), two in releases before 2.1,
/// one from 2.1. `foreach` as written wins over the release's default.
pub(super) fn foreach_intermediates(foreach: Option<bool>, release: Option<Release>) -> u64 {
    let on = foreach.unwrap_or_else(|| release.is_none_or(|r| r >= Release::TWO_ZERO));
    match (on, release) {
        (false, _) => 0,
        (true, Some(r)) if r < Release::ONE_INTERMEDIATE => 2,
        (true, _) => 1,
    }
}

/// What `zero_grad()` does when the workload does not say: zeros before 2.0, frees after.
pub(super) fn zero_grad_default(release: Option<Release>) -> ZeroGrad {
    match release {
        Some(r) if r < Release::TWO_ZERO => ZeroGrad::Zeros,
        _ => ZeroGrad::SetToNone,
    }
}

/// The attention a training step runs when the workload does not say: eager before 2.0.
pub(super) fn attention_default(release: Option<Release>) -> Attention {
    match release {
        Some(r) if r < Release::TWO_ZERO => Attention::Eager,
        _ => Attention::Fused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_read_major_and_minor() {
        assert_eq!(Release::parse("2.0"), Some(Release { major: 2, minor: 0 }));
        assert_eq!(Release::parse("2.1.2"), Some(Release { major: 2, minor: 1 }));
        assert_eq!(Release::parse("1.13.1+cu117"), Some(Release { major: 1, minor: 13 }));
        // 2.10 is not 2.1: the minor number is read as a number, not a decimal fraction.
        assert_eq!(Release::parse("2.10"), Some(Release { major: 2, minor: 10 }));
        assert_eq!(Release::parse("two"), None);
        assert_eq!(Release::parse("2"), None);
    }

    #[test]
    fn intermediates_follow_the_release() {
        let r = |t| Release::parse(t);
        // No release written: a current PyTorch, one intermediate.
        assert_eq!(foreach_intermediates(None, None), 1);
        assert_eq!(foreach_intermediates(None, r("2.0")), 2);
        assert_eq!(foreach_intermediates(None, r("2.1")), 1);
        assert_eq!(foreach_intermediates(None, r("2.10")), 1);
        // 1.x looped over the tensors unless told otherwise.
        assert_eq!(foreach_intermediates(None, r("1.13")), 0);
        assert_eq!(foreach_intermediates(Some(true), r("1.13")), 2);
        assert_eq!(foreach_intermediates(Some(false), r("2.0")), 0);
    }

    #[test]
    fn attention_is_fused_from_2_0() {
        assert_eq!(attention_default(Release::parse("1.13.1")), Attention::Eager);
        assert_eq!(attention_default(Release::parse("2.0")), Attention::Fused);
        assert_eq!(attention_default(None), Attention::Fused);
    }

    #[test]
    fn zero_grad_frees_from_2_0() {
        assert_eq!(zero_grad_default(Release::parse("1.13")), ZeroGrad::Zeros);
        assert_eq!(zero_grad_default(Release::parse("2.0")), ZeroGrad::SetToNone);
        assert_eq!(zero_grad_default(None), ZeroGrad::SetToNone);
    }
}
