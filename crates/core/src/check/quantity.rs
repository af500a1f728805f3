//! Expressions to exact quantities with a dimension, checking units on the way.

use std::fmt;

use crate::ast::{BinaryOp, Expr, Unit};
use crate::diagnostic::Diagnostic;
use crate::ratio::Ratio;

/// What a quantity measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dim {
    /// A plain number: layers, sessions, a parameter count.
    Count,
    Bytes,
    Tokens,
    /// A fraction, written with `%`; the value is already divided by 100.
    Percent,
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dim::Count => "a plain number",
            Dim::Bytes => "bytes",
            Dim::Tokens => "tokens",
            Dim::Percent => "a percentage",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quantity {
    pub value: Ratio,
    pub dim: Dim,
}

/// Evaluates `expr`, or explains why it has no value.
pub(crate) fn evaluate(expr: &Expr) -> Result<Quantity, Diagnostic> {
    match expr {
        Expr::Number { value: Some(value), .. } => Ok(Quantity { value: *value, dim: Dim::Count }),
        // Reported while lowering; the same diagnostic again is removed by the final dedup.
        Expr::Number { value: None, raw, span } => {
            Err(crate::syntax::literal_diagnostic(raw, *span))
        }
        Expr::Group { inner, .. } => evaluate(inner),
        Expr::Neg { operand, span } => {
            let q = evaluate(operand)?;
            let value = q.value.checked_neg().ok_or_else(|| overflow(*span))?;
            Ok(Quantity { value, ..q })
        }
        Expr::Unit { operand, unit, span } => {
            let q = evaluate(operand)?;
            if q.dim != Dim::Count {
                return Err(Diagnostic::error(
                    "E005",
                    *span,
                    format!(
                        "`{}` applies to a plain number, but this is already {}",
                        unit.text(),
                        q.dim
                    ),
                )
                .with_help("write the unit once, after the number: `4 * 2 GiB`, not `4 GiB GiB`"));
            }
            let (factor, dim) = match unit {
                Unit::Bytes(n, _) => (Ratio::int(i128::from(*n)), Dim::Bytes),
                Unit::Scale(n, _) => (Ratio::int(i128::from(*n)), Dim::Count),
                Unit::Tokens => (Ratio::ONE, Dim::Tokens),
                Unit::Percent => (Ratio::new(1, 100).unwrap_or(Ratio::ZERO), Dim::Percent),
            };
            let value = q.value.checked_mul(factor).ok_or_else(|| overflow(*span))?;
            Ok(Quantity { value, dim })
        }
        Expr::Binary { op, lhs, rhs, span } => {
            let a = evaluate(lhs)?;
            let b = evaluate(rhs)?;
            let mismatch = || {
                Diagnostic::error(
                    "E005",
                    *span,
                    format!("cannot compute {} {} {}", a.dim, op.symbol(), b.dim),
                )
                .with_label(lhs.span(), a.dim.to_string())
                .with_label(rhs.span(), b.dim.to_string())
            };
            let dim = match op {
                BinaryOp::Add | BinaryOp::Sub if a.dim == b.dim => a.dim,
                BinaryOp::Add | BinaryOp::Sub => {
                    return Err(
                        mismatch().with_help("both sides of `+` and `-` need the same unit")
                    );
                }
                BinaryOp::Mul => match (a.dim, b.dim) {
                    (Dim::Count, other) | (other, Dim::Count) => other,
                    _ => return Err(mismatch().with_help("multiply a quantity by a plain number")),
                },
                BinaryOp::Div => match (a.dim, b.dim) {
                    (dim, Dim::Count) => dim,
                    (x, y) if x == y => Dim::Count,
                    _ => {
                        return Err(
                            mismatch().with_help("divide by a plain number or by the same unit")
                        );
                    }
                },
            };
            let value = match op {
                BinaryOp::Add => a.value.checked_add(b.value),
                BinaryOp::Sub => a.value.checked_sub(b.value),
                BinaryOp::Mul => a.value.checked_mul(b.value),
                BinaryOp::Div if b.value == Ratio::ZERO => {
                    return Err(Diagnostic::error("E004", rhs.span(), "division by zero"));
                }
                BinaryOp::Div => a.value.checked_div(b.value),
            }
            .ok_or_else(|| overflow(*span))?;
            Ok(Quantity { value, dim })
        }
    }
}

fn overflow(span: crate::span::Span) -> Diagnostic {
    Diagnostic::error("E004", span, "this arithmetic overflows")
        .with_help("the value is far beyond any real device or model; check the units")
}
