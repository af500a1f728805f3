//! Resource limits on user input. Each limit, when hit, is a diagnostic that names it.

/// The largest source text the core accepts (1 MiB). Real workload files are a few KiB.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

/// The deepest nesting of blocks and parentheses. Bounded so recursive rules cannot exhaust the
/// stack on hostile input such as ten thousand `(`.
pub const MAX_NESTING: usize = 64;

/// The most significant digits a number literal may have.
pub const MAX_DIGITS: usize = 30;

/// The most terms (numbers, operators, units and parentheses) in one expression. Real
/// expressions have a dozen; the bound keeps the syntax tree shallow, because a chain such as
/// `1 + 1 + ...` or `- - - 7` nests one level per operator, and the tree is walked recursively.
pub const MAX_EXPRESSION_TERMS: usize = 256;
