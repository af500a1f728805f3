//! Checked integer arithmetic that writes down what it computes.
//!
//! Every component is a product of a few factors. [`Product`] multiplies them, checked, and
//! keeps the factors' labels so the component's formula shows the numbers:
//! `2 × 32 layers × 8 kv_heads × 128 head_dim × 8,192 tokens × 2 B (bf16) = 1,073,741,824 B`.
//! Whole factors are kept in a `u128`; the one fractional factor a formula may have (bytes per
//! element of a packed format) is applied once at the end, exactly, as a rational.
//!
//! The planner's probes and the fit map's cells need the bytes and nothing else, thousands of
//! times, and writing the formulas was most of an evaluation's cost. While a [`BytesOnly`]
//! guard is alive on a thread, evaluations there compute the same bytes but write no text:
//! [`Product`] keeps no terms and returns empty formulas, and [`formula!`] produces an empty
//! string without formatting its arguments. The mode is scoped to the thread rather than passed
//! to every formula, so the memory formulas read the same in both modes.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt::Write as _;

use crate::bytes::{Bytes, write_thousands};
use crate::ratio::Ratio;

thread_local! {
    static WRITING: Cell<bool> = const { Cell::new(true) };
}

/// Whether evaluations on this thread write formula text (the default) or only bytes.
pub(crate) fn writing() -> bool {
    WRITING.with(Cell::get)
}

/// While alive, evaluations on this thread compute bytes only; dropping it restores the mode
/// it found.
pub(crate) struct BytesOnly {
    previous: bool,
}

impl BytesOnly {
    pub(crate) fn enter() -> BytesOnly {
        BytesOnly { previous: WRITING.with(|w| w.replace(false)) }
    }
}

impl Drop for BytesOnly {
    fn drop(&mut self) {
        WRITING.with(|w| w.set(self.previous));
    }
}

/// `format!` for text that only explains bytes (formulas, provenance): an empty string, with
/// the arguments not even evaluated, while a [`BytesOnly`] guard is alive. So the arguments
/// must compute nothing the bytes depend on and nothing that can fail (no `?`): both modes must
/// give the same bytes and the same overflows (`crates/core/src/plan/exact.rs` checks it).
macro_rules! formula {
    ($($arg:tt)*) => {
        if $crate::eval::calc::writing() { format!($($arg)*) } else { String::new() }
    };
}
pub(crate) use formula;

/// Overflow while computing a budget; the caller reports it as E032.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

#[derive(Clone, Debug)]
enum Term {
    Count(u64, Cow<'static, str>),
    PerElement(Ratio, Cow<'static, str>),
    Divide(u64, Cow<'static, str>),
}

#[derive(Clone, Debug)]
pub(crate) struct Product {
    whole: u128,
    fraction: Ratio,
    /// `None` when computing bytes only.
    terms: Option<Vec<Term>>,
}

impl Product {
    pub(crate) fn new() -> Product {
        let terms = writing().then(|| Vec::with_capacity(8));
        Product { whole: 1, fraction: Ratio::ONE, terms }
    }

    fn push(&mut self, term: impl FnOnce() -> Term) {
        if let Some(terms) = self.terms.as_mut() {
            terms.push(term());
        }
    }

    /// Multiplies by a count, shown as `1,234 label` (or just the number when `label` is empty).
    pub(crate) fn times(
        mut self,
        value: u64,
        label: impl Into<Cow<'static, str>>,
    ) -> Result<Product, Overflow> {
        self.whole = self.whole.checked_mul(u128::from(value)).ok_or(Overflow)?;
        self.push(|| Term::Count(value, label.into()));
        Ok(self)
    }

    /// [`Product::times`] with the count and its label as one pair.
    pub(crate) fn times_count(
        self,
        (value, label): (u64, &'static str),
    ) -> Result<Product, Overflow> {
        self.times(value, label)
    }

    /// Multiplies by bytes per element, shown as `2 B (bf16)` or `0.5625 B (nf4)`.
    pub(crate) fn bytes_each(
        mut self,
        per_element: Ratio,
        label: impl Into<Cow<'static, str>>,
    ) -> Result<Product, Overflow> {
        self.fraction = self.fraction.checked_mul(per_element).ok_or(Overflow)?;
        self.push(|| Term::PerElement(per_element, label.into()));
        Ok(self)
    }

    /// Divides by `by` (at least 1), shown as `÷ 8 data ranks`: a share of something divided
    /// over devices, rounded up at the end.
    pub(crate) fn divided(
        mut self,
        by: u64,
        label: impl Into<Cow<'static, str>>,
    ) -> Result<Product, Overflow> {
        let by = Ratio::new(1, i128::from(by.max(1))).ok_or(Overflow)?;
        self.fraction = self.fraction.checked_mul(by).ok_or(Overflow)?;
        let shown = by.denom().unsigned_abs().try_into().map_err(|_| Overflow)?;
        self.push(|| Term::Divide(shown, label.into()));
        Ok(self)
    }

    /// The exact value, rounded up to whole bytes.
    pub(crate) fn value(&self) -> Result<Bytes, Overflow> {
        let whole = i128::try_from(self.whole).map_err(|_| Overflow)?;
        let exact = Ratio::int(whole).checked_mul(self.fraction).ok_or(Overflow)?;
        Bytes::from_ratio_ceil(exact).ok_or(Overflow)
    }

    /// The result and the formula that gives it (empty when computing bytes only).
    pub(crate) fn finish(self) -> Result<(Bytes, String), Overflow> {
        let bytes = self.value()?;
        if self.terms.is_none() {
            return Ok((bytes, String::new()));
        }
        let mut formula = self.terms();
        formula.push_str(" = ");
        write_thousands(&mut formula, bytes.0);
        formula.push_str(" B");
        Ok((bytes, formula))
    }

    /// The formula without the result, for composing larger formulas (empty when computing
    /// bytes only).
    pub(crate) fn terms(&self) -> String {
        let Some(terms) = &self.terms else { return String::new() };
        let mut out = String::with_capacity(16 * terms.len() + 24);
        for (i, term) in terms.iter().enumerate() {
            if i > 0 {
                out.push_str(if matches!(term, Term::Divide(..)) { " ÷ " } else { " × " });
            }
            match term {
                Term::Divide(value, label) => {
                    write_thousands(&mut out, *value);
                    out.push(' ');
                    out.push_str(label);
                }
                Term::Count(value, label) => {
                    write_thousands(&mut out, *value);
                    if !label.is_empty() {
                        out.push(' ');
                        out.push_str(label);
                    }
                }
                Term::PerElement(ratio, label) => {
                    let _ = write!(out, "{ratio} B ({label})");
                }
            }
        }
        out
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
