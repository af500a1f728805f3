//! Reading the fields of one block: typed accessors that report every mistake, and a final
//! sweep that reports unknown and duplicate keys with a suggestion.

use std::cell::{Cell, RefCell};

use super::quantity::{self, Dim};
use crate::ast::{Block, Field, Ident, Value};
use crate::bytes::Bytes;
use crate::diagnostic::Diagnostic;
use crate::precision::Precision;
use crate::ratio::Ratio;
use crate::span::Span;

/// The fields of one block, for one kind of block (`what`, e.g. "a model").
pub(crate) struct Fields<'a> {
    what: &'a str,
    block: &'a Block,
    /// The keys this kind of block accepts, and whether each may repeat.
    known: &'a [(&'a str, Repeat)],
    used: Vec<Cell<bool>>,
    diagnostics: RefCell<Vec<Diagnostic>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    Once,
    Many,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(what: &'a str, block: &'a Block, known: &'a [(&'a str, Repeat)]) -> Self {
        let fields = Fields {
            what,
            block,
            known,
            used: block.fields.iter().map(|_| Cell::new(false)).collect(),
            diagnostics: RefCell::new(Vec::new()),
        };
        fields.report_duplicates();
        fields
    }

    fn report_duplicates(&self) {
        for (i, field) in self.block.fields.iter().enumerate() {
            let repeats =
                self.known.iter().any(|(k, r)| *k == field.key.name && *r == Repeat::Many);
            if repeats {
                continue;
            }
            if let Some(first) =
                self.block.fields[..i].iter().find(|f| f.key.name == field.key.name)
            {
                self.used[i].set(true);
                self.push(
                    Diagnostic::error(
                        "E012",
                        field.key.span,
                        format!("`{}` is given twice in {}", field.key.name, self.what),
                    )
                    .with_label(first.key.span, "first given here")
                    .with_help("keep one of them"),
                );
            }
        }
    }

    pub(crate) fn push(&self, diagnostic: Diagnostic) {
        self.diagnostics.borrow_mut().push(diagnostic);
    }

    /// Reports unknown keys and returns every diagnostic found in this block.
    pub(crate) fn finish(self) -> Vec<Diagnostic> {
        let mut diagnostics = self.diagnostics.into_inner();
        for (field, used) in self.block.fields.iter().zip(&self.used) {
            if used.get() || self.known.iter().any(|(k, _)| *k == field.key.name) {
                continue;
            }
            let mut diagnostic = Diagnostic::error(
                "E010",
                field.key.span,
                format!("{} has no field `{}`", self.what, field.key.name),
            );
            let names: Vec<&str> = self.known.iter().map(|(k, _)| *k).collect();
            diagnostic = match suggest(&field.key.name, &names) {
                Some(near) => diagnostic.with_help(format!("did you mean `{near}`?")),
                None => diagnostic.with_help(format!(
                    "the fields of {} are: {}",
                    self.what,
                    names.join(", ")
                )),
            };
            diagnostics.push(diagnostic);
        }
        diagnostics
    }

    /// Whether the block has a field with this key (used or not).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.block.fields.iter().any(|f| f.key.name == key)
    }

    /// The first field with this key, marked as used.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Field> {
        self.all(key).into_iter().next()
    }

    /// The first field with this key, whether or not it was read already (to point at a field
    /// another rule read, without marking anything).
    pub(crate) fn first(&self, key: &str) -> Option<&'a Field> {
        self.block.fields.iter().find(|f| f.key.name == key)
    }

    /// Every field with this key, marked as used.
    pub(crate) fn all(&self, key: &str) -> Vec<&'a Field> {
        let mut found = Vec::new();
        for (field, used) in self.block.fields.iter().zip(&self.used) {
            if field.key.name == key && !used.get() {
                used.set(true);
                found.push(field);
            }
        }
        found
    }

    /// Reports that a required field is missing, unless a misspelt key already stands for it
    /// (that one is reported as unknown, with this key as the suggestion).
    pub(crate) fn missing(&self, key: &str, example: &str) {
        let misspelt = self.block.fields.iter().any(|f| {
            f.key.name != key
                && !self.known.iter().any(|(k, _)| *k == f.key.name)
                && suggest(&f.key.name, &[key]).is_some()
        });
        // `layers 32 hidden 4096` on one line: the extra values are reported already.
        let run_together = self
            .block
            .fields
            .iter()
            .any(|f| f.values.iter().any(|v| matches!(v, Value::Word(w) if w.name == key)));
        if misspelt || run_together || self.has(key) {
            return;
        }
        // Point at the opening brace: the block is where the line belongs.
        let brace = Span { start: self.block.span.start, end: self.block.span.start + 1 };
        self.push(
            Diagnostic::error("E011", brace, format!("{} needs `{key}`", self.what))
                .with_help(format!("add a line such as `{example}`")),
        );
    }

    /// The single value of `field`, or a diagnostic.
    fn single<'f>(&self, field: &'f Field) -> Option<&'f Value> {
        if field.block.is_some() {
            self.push(Diagnostic::error(
                "E013",
                field.span,
                format!("`{}` does not take a block", field.key.name),
            ));
        }
        match field.values.as_slice() {
            [value] => Some(value),
            [] => {
                self.push(
                    Diagnostic::error(
                        "E013",
                        field.key.span,
                        format!("`{}` needs a value", field.key.name),
                    )
                    .with_help(format!("write `{} VALUE` on one line", field.key.name)),
                );
                None
            }
            [_, extra @ ..] => {
                let span = extra[0].span().to(extra[extra.len() - 1].span());
                let mut diagnostic = Diagnostic::error(
                    "E013",
                    span,
                    format!("`{}` takes one value; this is more", field.key.name),
                );
                diagnostic = match &extra[0] {
                    Value::Word(word) if unit_lookalike(&word.name).is_some() => diagnostic
                        .with_help(format!(
                            "`{}` is not a unit; did you mean `{}`?",
                            word.name,
                            unit_lookalike(&word.name).unwrap_or_default()
                        )),
                    _ => diagnostic
                        .with_help("put each field on its own line, or separate them with `;`"),
                };
                self.push(diagnostic);
                None
            }
        }
    }

    /// A quantity of dimension `dim` (a plain count is also accepted where tokens are wanted).
    pub(crate) fn quantity(&self, field: &Field, dim: Dim, example: &str) -> Option<(Ratio, Span)> {
        let value = self.single(field)?;
        let Value::Expr(expr) = value else {
            self.push(Diagnostic::error(
                "E013",
                value.span(),
                format!("`{}` needs {dim}, such as `{example}`", field.key.name),
            ));
            return None;
        };
        match quantity::evaluate(expr) {
            Ok(q) if q.dim == dim || (dim == Dim::Tokens && q.dim == Dim::Count) => {
                Some((q.value, expr.span()))
            }
            Ok(q) => {
                let mut diagnostic = Diagnostic::error(
                    "E005",
                    expr.span(),
                    format!("`{}` needs {dim}, but this is {}", field.key.name, q.dim),
                )
                .with_help(format!("for example `{} {example}`", field.key.name));
                if dim == Dim::Count && q.dim == Dim::Bytes && expr_text_ends_with_b(expr) {
                    diagnostic = diagnostic
                        .with_help("`B` means bytes; write a count of billions as `7 billion`");
                }
                self.push(diagnostic);
                None
            }
            Err(diagnostic) => {
                self.push(diagnostic);
                None
            }
        }
    }

    /// A whole number in `min..=max`.
    pub(crate) fn whole(
        &self,
        key: &str,
        dim: Dim,
        min: u64,
        max: u64,
        example: &str,
    ) -> Option<u64> {
        let field = self.get(key)?;
        let (value, span) = self.quantity(field, dim, example)?;
        self.check_whole(key, value, span, min, max)
    }

    pub(crate) fn check_whole(
        &self,
        key: &str,
        value: Ratio,
        span: Span,
        min: u64,
        max: u64,
    ) -> Option<u64> {
        if !value.is_integer() {
            self.push(Diagnostic::error(
                "E006",
                span,
                format!("`{key}` must be a whole number, but this is {value}"),
            ));
            return None;
        }
        match u64::try_from(value.numer()) {
            Ok(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.push(
                    Diagnostic::error(
                        "E007",
                        span,
                        format!("`{key}` is {value}; it must be between {min} and {max}"),
                    )
                    .with_help(range_help(key)),
                );
                None
            }
        }
    }

    /// A byte count, rounded up to a whole byte, in `min..=max`.
    pub(crate) fn bytes(&self, key: &str, min: u64, max: u64, example: &str) -> Option<Bytes> {
        let field = self.get(key)?;
        self.bytes_of(field, min, max, example)
    }

    pub(crate) fn bytes_of(
        &self,
        field: &Field,
        min: u64,
        max: u64,
        example: &str,
    ) -> Option<Bytes> {
        let (value, span) = self.quantity(field, Dim::Bytes, example)?;
        self.check_bytes(&field.key.name, value, span, min, max)
    }

    pub(crate) fn check_bytes(
        &self,
        key: &str,
        value: Ratio,
        span: Span,
        min: u64,
        max: u64,
    ) -> Option<Bytes> {
        match Bytes::from_ratio_ceil(value) {
            Some(bytes) if (min..=max).contains(&bytes.0) => Some(bytes),
            _ => {
                self.push(Diagnostic::error(
                    "E007",
                    span,
                    format!(
                        "`{key}` is {value} bytes; it must be between {} and {}",
                        Bytes(min).human(),
                        Bytes(max).human()
                    ),
                ));
                None
            }
        }
    }

    /// A word from a fixed list.
    pub(crate) fn choice(&self, key: &str, choices: &[&str]) -> Option<(&'a str, Span)> {
        let field = self.get(key)?;
        self.choice_of(field, choices)
    }

    pub(crate) fn choice_of(&self, field: &'a Field, choices: &[&str]) -> Option<(&'a str, Span)> {
        let value = self.single(field)?;
        let Value::Word(word) = value else {
            self.push(Diagnostic::error(
                "E013",
                value.span(),
                format!("`{}` takes a word: {}", field.key.name, choices.join(", ")),
            ));
            return None;
        };
        self.word_in(field, word, choices).map(|w| (w, word.span))
    }

    pub(crate) fn word_in(
        &self,
        field: &Field,
        word: &'a Ident,
        choices: &[&str],
    ) -> Option<&'a str> {
        if choices.contains(&word.name.as_str()) {
            return Some(&word.name);
        }
        let mut diagnostic = Diagnostic::error(
            "E015",
            word.span,
            format!("`{}` is not a choice for `{}`", word.name, field.key.name),
        );
        diagnostic = match suggest(&word.name, choices) {
            Some(near) => diagnostic.with_help(format!("did you mean `{near}`?")),
            None => diagnostic.with_help(format!("choose one of: {}", choices.join(", "))),
        };
        self.push(diagnostic);
        None
    }

    pub(crate) fn precision(&self, key: &str) -> Option<Precision> {
        let names: Vec<&str> = Precision::NAMES.to_vec();
        let field = self.get(key)?;
        let value = self.single(field)?;
        let Value::Word(word) = value else {
            self.push(Diagnostic::error(
                "E013",
                value.span(),
                format!("`{key}` takes a precision: {}", names.join(", ")),
            ));
            return None;
        };
        if let Some(precision) = Precision::from_name(&word.name) {
            return Some(precision);
        }
        self.word_in(field, word, &names);
        None
    }

    /// A weight format: a precision, or a llama.cpp preset such as `q4_k_m`.
    pub(crate) fn weight_format(&self, key: &str) -> Option<crate::quant::WeightFormat> {
        let field = self.get(key)?;
        let value = self.single(field)?;
        let Value::Word(word) = value else {
            self.push(Diagnostic::error(
                "E013",
                value.span(),
                format!("`{key}` takes a precision such as `bf16`"),
            ));
            return None;
        };
        if let Some(format) = crate::quant::WeightFormat::from_name(&word.name) {
            return Some(format);
        }
        let mut names: Vec<&str> = Precision::NAMES.to_vec();
        names.extend(crate::quant::Preset::ALL.iter().map(|p| p.name()));
        self.word_in(field, word, &names);
        None
    }

    pub(crate) fn boolean(&self, key: &str) -> Option<bool> {
        self.choice(key, &["true", "false"]).map(|(word, _)| word == "true")
    }

    /// A single quoted text that `parse` reads (a library release such as `"2.1"`): `E013` with
    /// `message` and `help` when it is not one.
    pub(crate) fn quoted<T>(
        &self,
        key: &str,
        parse: impl Fn(&str) -> Option<T>,
        message: &str,
        help: &str,
    ) -> Option<T> {
        let field = self.get(key)?;
        let bad = |span| Diagnostic::error("E013", span, message).with_help(help);
        match field.values.as_slice() {
            [Value::Text(text)] => {
                let parsed = parse(&text.value);
                if parsed.is_none() {
                    self.push(bad(text.span));
                }
                parsed
            }
            [value, ..] => {
                self.push(bad(value.span()));
                None
            }
            [] => {
                self.push(bad(field.key.span));
                None
            }
        }
    }

    /// A single word naming another declaration.
    pub(crate) fn name(&self, key: &str) -> Option<&'a Ident> {
        let field = self.get(key)?;
        match self.single(field)? {
            Value::Word(word) => Some(word),
            other => {
                self.push(Diagnostic::error("E013", other.span(), format!("`{key}` takes a name")));
                None
            }
        }
    }

    /// Pixel dimensions: `2048` (square) or `3840 x 2160`, each side in `min..=max`.
    pub(crate) fn dimensions(
        &self,
        field: &Field,
        min: u64,
        max: u64,
        example: &str,
    ) -> Option<(u64, u64)> {
        let key = field.key.name.as_str();
        let side = |value: &Value| -> Option<u64> {
            let Value::Expr(expr) = value else { return None };
            match super::quantity::evaluate(expr) {
                Ok(q) if q.dim == Dim::Count => {
                    self.check_whole(key, q.value, expr.span(), min, max)
                }
                Ok(q) => {
                    self.push(Diagnostic::error(
                        "E005",
                        expr.span(),
                        format!("`{key}` is in pixels (a plain number), not {}", q.dim),
                    ));
                    None
                }
                Err(diagnostic) => {
                    self.push(diagnostic);
                    None
                }
            }
        };
        match field.values.as_slice() {
            [one] => side(one).map(|s| (s, s)),
            [w, Value::Word(x), h] if x.name == "x" || x.name == "×" => Some((side(w)?, side(h)?)),
            _ => {
                self.push(Diagnostic::error(
                    "E013",
                    field.span,
                    format!("write `{key} {example}`"),
                ));
                None
            }
        }
    }

    /// Words only, any number of them.
    pub(crate) fn words(&self, field: &'a Field) -> Vec<&'a Ident> {
        let mut words = Vec::new();
        for value in &field.values {
            match value {
                Value::Word(word) => words.push(word),
                other => self.push(Diagnostic::error(
                    "E013",
                    other.span(),
                    format!("`{}` takes words only", field.key.name),
                )),
            }
        }
        words
    }
}

fn range_help(key: &str) -> String {
    format!("`{key}` is checked against a plausible range so that a slip of the units is caught")
}

fn expr_text_ends_with_b(expr: &crate::ast::Expr) -> bool {
    matches!(expr, crate::ast::Expr::Unit { unit: crate::ast::Unit::Bytes(1, "B"), .. })
}

/// A word that looks like a unit typed in the wrong case.
fn unit_lookalike(word: &str) -> Option<&'static str> {
    const UNITS: [&str; 12] =
        ["KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB", "B", "tokens", "billion", "million"];
    UNITS
        .into_iter()
        .find(|unit| unit.eq_ignore_ascii_case(word) || (word.len() > 3 && unit.starts_with(word)))
}

/// The closest of `candidates` to `word`, if it is close enough to be a likely typo. Between
/// candidates as close, the one sharing the longest start and end with `word` (`llama4-8b` is
/// as far from `llama3.1-8b` as from `llama2-13b`, but shares its `-8b`), then the first in
/// alphabetical order.
pub fn suggest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|candidate| {
            let shared = std::cmp::Reverse(shared_ends(word, candidate));
            (edit_distance(word, candidate), shared, *candidate)
        })
        .filter(|(distance, _, _)| *distance <= limit)
        .min()
        .map(|(_, _, candidate)| candidate)
}

/// Characters `a` and `b` share at their start plus those they share at their end (case-folded).
fn shared_ends(a: &str, b: &str) -> usize {
    let (a, b) = (case_folded(a), case_folded(b));
    let start = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let end = a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count();
    start + end
}

/// Edit distance counting an adjacent swap as one edit (`modle` is one from `model`),
/// case-insensitive (so `gib` suggests `GiB`). The candidates are names and keywords, which
/// are ASCII, so against them it equals the distance between the `str::to_lowercase` forms
/// (tested), without Unicode's case tables (about 16 KB of the web page's module).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (case_folded(a), case_folded(b));
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

/// `text`'s characters with ASCII letters in lowercase. Outside ASCII, only the Kelvin sign and
/// `İ` have a lowercase form with ASCII in it (`k`, and `i` with a combining dot); any other
/// character is kept as it is, since no case of it can equal an ASCII character.
fn case_folded(text: &str) -> Vec<char> {
    let mut folded = Vec::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{212A}' => folded.push('k'),
            '\u{130}' => folded.extend(['i', '\u{307}']),
            c => folded.push(c.to_ascii_lowercase()),
        }
    }
    folded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_only() {
        assert_eq!(suggest("hiden", &["hidden", "heads"]), Some("hidden"));
        assert_eq!(suggest("kv_head", &["kv_heads", "heads"]), Some("kv_heads"));
        assert_eq!(suggest("banana", &["hidden", "heads"]), None);
        // As close either way: the size the word ends with decides.
        assert_eq!(suggest("llama4-8b", &["llama2-13b", "llama3.1-8b"]), Some("llama3.1-8b"));
        assert_eq!(edit_distance("gib", "GiB"), 0);
        assert_eq!(edit_distance("modle", "model"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn case_folding_agrees_with_unicode_lowercase_against_ascii_names() {
        let words = [
            "GiB",
            "Model",
            "\u{212A}iB",
            "\u{130}nference",
            "İİ",
            "ΜODEL",
            "Σσς",
            "straße",
            "ﬁeld",
            "modèle",
            "MODLE",
            "",
            "😀k",
            "DEVİCE",
            "weıghts",
        ];
        let names = ["gib", "model", "kib", "inference", "device", "weights", "field", "i"];
        for word in words {
            for name in names {
                assert_eq!(
                    edit_distance(word, name),
                    edit_distance(&word.to_lowercase(), &name.to_lowercase()),
                    "{word} / {name}"
                );
                let lowered: Vec<char> = word.to_lowercase().chars().collect();
                assert_eq!(case_folded(&word.to_lowercase()), lowered, "{word}");
            }
        }
        assert_eq!(edit_distance("\u{212A}iB", "kib"), 0);
        assert_eq!(edit_distance("\u{130}", "i"), 1);
    }
}
