//! JSON with byte spans, for the importers: an object is read entry by entry, and every value
//! keeps the byte range it has in the file, so a diagnostic can point at it.
//!
//! `serde_json` parses; values stay borrowed [`RawValue`]s until a caller asks for one, and the
//! span of a raw value is where its text lies inside the document. Duplicate keys are kept (in
//! file order), so a caller can report them.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::diagnostic::Diagnostic;
use crate::span::Span;

/// A JSON text and where it starts in the bytes the caller passed (a safetensors header starts
/// after its 8-byte length, so spans are shifted by 8).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Doc<'a> {
    pub(crate) text: &'a str,
    pub(crate) base: usize,
}

/// One JSON object: its entries in file order, and its own span.
#[derive(Debug)]
pub(crate) struct Object<'a> {
    pub(crate) entries: Vec<(String, &'a RawValue)>,
    pub(crate) span: Span,
}

/// The entries of an object, borrowed from the text.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor)
    }
}

impl<'a> Doc<'a> {
    /// The document's span: all of its text.
    pub(crate) fn span(&self) -> Span {
        Span::new(self.base, self.base.saturating_add(self.text.len()))
    }

    /// Where `raw` (a value borrowed from this document) lies.
    pub(crate) fn span_of(&self, raw: &RawValue) -> Span {
        let start = raw.get().as_ptr().addr().saturating_sub(self.text.as_ptr().addr());
        let start = self.base.saturating_add(start.min(self.text.len()));
        Span::new(start, start.saturating_add(raw.get().len()))
    }

    /// The top-level object. `what` names the file in messages (`config.json`).
    pub(crate) fn root(&self, what: &str) -> Result<Object<'a>, Diagnostic> {
        // Values stay raw until asked for, and `serde_json` skips raw values without its
        // recursion limit; check the nesting first, so a later parse cannot fail.
        if let Some(at) = too_deep(self.text) {
            let at = self.base.saturating_add(at);
            return Err(Diagnostic::error(
                "I103",
                Span::new(at, at.saturating_add(1)),
                format!("{what} nests arrays and objects more than {MAX_DEPTH} deep"),
            ));
        }
        match serde_json::from_str::<Entries<'a>>(self.text) {
            Ok(Entries(entries)) => Ok(Object { entries, span: self.span() }),
            Err(error) => Err(self.error(&error, what)),
        }
    }

    /// The object that `raw` holds, or an `I111` diagnostic naming `what` it should be.
    pub(crate) fn object(&self, raw: &'a RawValue, what: &str) -> Result<Object<'a>, Diagnostic> {
        match serde_json::from_str::<Entries<'a>>(raw.get()) {
            Ok(Entries(entries)) => Ok(Object { entries, span: self.span_of(raw) }),
            Err(_) => Err(Diagnostic::error(
                "I111",
                self.span_of(raw),
                format!("{what} must be a JSON object, found {}", kind(raw)),
            )),
        }
    }

    /// A diagnostic for a `serde_json` error in this document: `I103` for bad syntax, `I111`
    /// when the text is JSON of the wrong shape.
    fn error(&self, error: &serde_json::Error, what: &str) -> Diagnostic {
        let offset = offset_of(self.text, error.line(), error.column());
        let at = self.base.saturating_add(offset);
        let span = Span::new(at, at.saturating_add(1).min(self.base + self.text.len()));
        match error.classify() {
            serde_json::error::Category::Data => Diagnostic::error(
                "I111",
                span,
                format!("{what} must be a JSON object: {}", strip_position(error)),
            ),
            _ => Diagnostic::error(
                "I103",
                span,
                format!("{what} is not valid JSON: {}", strip_position(error)),
            ),
        }
    }
}

impl<'a> Object<'a> {
    /// The value of `key` (its last occurrence, as JSON readers keep it).
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The value of `key`, parsed; `None` when the key is absent or its value is `null`.
    pub(crate) fn value(&self, key: &str) -> Option<(Value, &'a RawValue)> {
        let raw = self.get(key)?;
        let value = serde_json::from_str::<Value>(raw.get()).ok()?;
        if value.is_null() { None } else { Some((value, raw)) }
    }
}

/// The deepest nesting of arrays and objects accepted (`serde_json`'s own limit is 128).
const MAX_DEPTH: usize = 100;

/// Where `text` first nests arrays and objects deeper than [`MAX_DEPTH`], if it does.
fn too_deep(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, byte) in text.bytes().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(offset);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// What kind of JSON value `raw` is, for messages.
pub(crate) fn kind(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// What kind of JSON value `value` is, for messages.
pub(crate) fn value_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() => "a whole number",
        Value::Number(n) if n.is_i64() => "a negative number",
        Value::Number(_) => "a fractional number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The byte offset of a 1-based line and column (`serde_json` counts columns in bytes).
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0usize;
    for (index, content) in text.split_inclusive('\n').enumerate() {
        if index + 1 == line {
            return offset.saturating_add(column.saturating_sub(1)).min(text.len());
        }
        offset += content.len();
    }
    text.len()
}

/// `serde_json`'s message without its ` at line 1 column 5` suffix (the span says where).
fn strip_position(error: &serde_json::Error) -> String {
    let message = error.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_point_at_values_and_errors() {
        let text = "{\"a\": 1,\n \"b\": [2, 3], \"a\": \"x\"}";
        let doc = Doc { text, base: 8 };
        let root = doc.root("test").unwrap();
        assert_eq!(root.entries.len(), 3);
        let b = root.get("b").unwrap();
        let span = doc.span_of(b);
        assert_eq!(&text[span.start as usize - 8..span.end as usize - 8], "[2, 3]");
        assert_eq!(root.value("a").unwrap().0, Value::String("x".into()));

        let bad = Doc { text: "{\"a\": 1,\n \"b\" 2}", base: 0 };
        let error = bad.root("test").unwrap_err();
        assert_eq!(error.code, "I103");
        assert_eq!(error.primary.start, 14);
        assert!(!error.message.contains("line"), "{}", error.message);

        let array = Doc { text: "[1, 2]", base: 0 };
        assert_eq!(array.root("test").unwrap_err().code, "I111");
    }

    #[test]
    fn deep_nesting_is_a_diagnostic_not_a_stack_overflow() {
        let deep = format!("{{\"a\": {}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let doc = Doc { text: &deep, base: 0 };
        let error = doc.root("test").unwrap_err();
        assert_eq!(error.code, "I103", "{}", error.message);
        assert_eq!(error.primary.start, 105);
        // Brackets inside strings do not count.
        let quoted = format!("{{\"a\": \"{}\\\"[\"}}", "[".repeat(1000));
        assert!(Doc { text: &quoted, base: 0 }.root("test").is_ok());
    }
}
