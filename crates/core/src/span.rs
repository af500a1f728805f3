//! Byte ranges into one source text, and their line/column form.

use serde::Serialize;

/// A half-open byte range `start..end` into the source text the core was given.
///
/// Offsets are `u32`: the core refuses inputs above [`crate::limits::MAX_SOURCE_BYTES`], so they
/// always fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        // Both offsets come from texts bounded by MAX_SOURCE_BYTES (well under u32::MAX).
        let clamp = |offset: usize| u32::try_from(offset).unwrap_or(u32::MAX);
        Span { start: clamp(start), end: clamp(end) }
    }

    /// The smallest span covering both.
    #[must_use]
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }

    /// The text this span covers, or `""` if it does not lie in `source`.
    pub fn text(self, source: &str) -> &str {
        source.get(self.range()).unwrap_or("")
    }
}

/// A 1-based line and column. Columns count Unicode scalar values; front ends that need
/// another encoding (UTF-16 for browser editors) convert from the byte offset themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LineCol {
    pub line: u32,
    pub column: u32,
}

impl LineCol {
    /// The line and column of byte `offset` in `source` (clamped to the text).
    pub fn of(source: &str, offset: u32) -> LineCol {
        let mut offset = (offset as usize).min(source.len());
        while !source.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &source[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        LineCol { line: to_u32(line), column: to_u32(column) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based_and_count_characters() {
        let source = "ab\nµc d\n";
        assert_eq!(LineCol::of(source, 0), LineCol { line: 1, column: 1 });
        assert_eq!(LineCol::of(source, 3), LineCol { line: 2, column: 1 });
        // `µ` is two bytes; `c` starts at byte 5 and is the second character.
        assert_eq!(LineCol::of(source, 5), LineCol { line: 2, column: 2 });
        assert_eq!(LineCol::of(source, 99), LineCol { line: 3, column: 1 });
    }
}
