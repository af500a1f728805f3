//! Checked integer arithmetic that writes down what it computes.
//!
//! Every component is a product of a few factors. [`Product`] multiplies them in `u128`,
//! checked, and keeps the factors' labels so the component's formula shows the numbers:
//! `2 × 32 layers × 8 kv_heads × 128 head_dim × 8,192 tokens × 2 B (bf16) = 1,073,741,824 B`.

use crate::bytes::{Bytes, group_thousands};
use crate::ratio::Ratio;

/// Overflow while computing a budget; the caller reports it as E032.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

#[derive(Clone, Debug)]
pub(crate) struct Product {
    /// Exact value so far (a rational, because some formats pack elements below a byte).
    value: Ratio,
    terms: Vec<String>,
}

impl Product {
    pub(crate) fn new() -> Product {
        Product { value: Ratio::ONE, terms: Vec::new() }
    }

    /// Multiplies by a count, shown as `1,234 label` (or just the number when `label` is empty).
    pub(crate) fn times(mut self, value: u64, label: &str) -> Result<Product, Overflow> {
        self.value = self.value.checked_mul(Ratio::int(i128::from(value))).ok_or(Overflow)?;
        let number = group_thousands(value);
        self.terms.push(if label.is_empty() { number } else { format!("{number} {label}") });
        Ok(self)
    }

    /// Multiplies by bytes per element, shown as `2 B (bf16)` or `0.5625 B (nf4)`.
    pub(crate) fn bytes_each(
        mut self,
        per_element: Ratio,
        label: &str,
    ) -> Result<Product, Overflow> {
        self.value = self.value.checked_mul(per_element).ok_or(Overflow)?;
        self.terms.push(format!("{per_element} B ({label})"));
        Ok(self)
    }

    /// The result rounded up to whole bytes, and the formula that gives it.
    pub(crate) fn finish(self) -> Result<(Bytes, String), Overflow> {
        let bytes = Bytes::from_ratio_ceil(self.value).ok_or(Overflow)?;
        Ok((bytes, format!("{} = {bytes}", self.terms.join(" × "))))
    }

    /// The formula without the result, for composing larger formulas.
    pub(crate) fn terms(&self) -> String {
        self.terms.join(" × ")
    }

    pub(crate) fn value(&self) -> Result<Bytes, Overflow> {
        Bytes::from_ratio_ceil(self.value).ok_or(Overflow)
    }
}

pub(crate) fn add(a: Bytes, b: Bytes) -> Result<Bytes, Overflow> {
    a.checked_add(b).ok_or(Overflow)
}

pub(crate) fn sum(items: impl IntoIterator<Item = Bytes>) -> Result<Bytes, Overflow> {
    items.into_iter().try_fold(Bytes::ZERO, add)
}

/// `ceil(a / b)` for `b > 0`.
pub(crate) fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}
