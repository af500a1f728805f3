//! One safetensors file's header: its length, its JSON, and the layout it declares.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Dtype, Header, MAX_HEADER_BYTES, Tensor};
use crate::diagnostic::Diagnostic;
use crate::import::json::{Doc, kind, value_kind};
use crate::import::{MAX_DIAGNOSTICS, Parsed, cap_diagnostics};
use crate::span::Span;

/// Reads a safetensors header from `bytes`, the start of a file of `file_len` bytes (`None`:
/// `bytes` is the whole input). Asks for more bytes when the header continues past them: the
/// first call needs 8 bytes, the second exactly `8 + N`.
pub fn parse_header(bytes: &[u8], file_len: Option<u64>) -> Parsed<Header> {
    let available = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    let complete = file_len.is_none_or(|len| available >= len);
    let Some(length) = bytes.first_chunk::<8>() else {
        if !complete {
            return Parsed::NeedMore(8);
        }
        return Parsed::failed(
            Diagnostic::error(
                "I101",
                Span::new(0, bytes.len()),
                format!(
                    "the file has {} bytes; a safetensors file starts with an 8-byte header length",
                    bytes.len()
                ),
            )
            .with_help("the file is truncated, or is not a safetensors file"),
        );
    };
    let header_len = u64::from_le_bytes(*length);
    let length_span = Span::new(0, 8);
    if header_len > MAX_HEADER_BYTES {
        return Parsed::failed(
            Diagnostic::error(
                "I102",
                length_span,
                format!(
                    "the header length is {header_len} bytes, over the limit of {MAX_HEADER_BYTES}"
                ),
            )
            .with_help("real headers are a few MB at most; the file is corrupt or not safetensors"),
        );
    }
    let end = header_len + 8;
    if let Some(len) = file_len
        && end > len
    {
        return Parsed::failed(truncated_header(header_len, len));
    }
    if available < end {
        if complete {
            return Parsed::failed(truncated_header(header_len, available));
        }
        return Parsed::NeedMore(end);
    }
    let json = &bytes[8..bytes.len().min(usize::try_from(end).unwrap_or(usize::MAX))];
    let text = match std::str::from_utf8(json) {
        Ok(text) => text,
        Err(error) => {
            let at = 8 + error.valid_up_to();
            return Parsed::failed(Diagnostic::error(
                "I103",
                Span::new(at, at + 1),
                "the header is not UTF-8 text",
            ));
        }
    };
    let doc = Doc { text, base: 8 };
    match read_entries(doc, header_len, file_len) {
        Ok(header) => Parsed::Done(header),
        Err(diagnostics) => Parsed::Failed(cap_diagnostics(diagnostics)),
    }
}

fn truncated_header(header_len: u64, file_len: u64) -> Diagnostic {
    Diagnostic::error(
        "I101",
        Span::new(0, 8),
        format!(
            "the header length says {header_len} bytes of JSON follow, but the file has only {} \
             after the length",
            file_len.saturating_sub(8)
        ),
    )
    .with_help("the file is truncated, or its first 8 bytes are not a safetensors header length")
}

fn read_entries(
    doc: Doc<'_>,
    header_len: u64,
    file_len: Option<u64>,
) -> Result<Header, Vec<Diagnostic>> {
    let root = doc.root("the safetensors header").map_err(|d| vec![d])?;
    let mut diagnostics = Vec::new();
    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::new();
    let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
    for (name, raw) in &root.entries {
        let span = doc.span_of(raw);
        if let Some(first) = seen.insert(name, span) {
            diagnostics.push(
                Diagnostic::error("I114", span, format!("`{name}` appears twice in the header"))
                    .with_label(first, "first here"),
            );
            continue;
        }
        if name == "__metadata__" {
            match read_metadata(doc, raw) {
                Ok(found) => metadata = found,
                Err(error) => diagnostics.push(error),
            }
            continue;
        }
        match read_tensor(doc, name, raw) {
            Ok(tensor) => tensors.push(tensor),
            Err(error) => diagnostics.push(error),
        }
        if diagnostics.len() > MAX_DIAGNOSTICS {
            break;
        }
    }
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    tensors.sort_by(|a, b| a.offsets.cmp(&b.offsets).then_with(|| a.name.cmp(&b.name)));
    let data_len = check_layout(&tensors)?;
    if let Some(len) = file_len {
        let data_start = header_len + 8;
        let file_data = len.saturating_sub(data_start);
        if data_len != file_data {
            let last = tensors.last().map_or(root.span, |t| t.span);
            let message = if data_len > file_data {
                format!(
                    "the tensors need {data_len} bytes of data, but the file has {file_data} after \
                     its header"
                )
            } else {
                format!(
                    "the tensors end at byte {data_len} of the data section, but the file has \
                     {file_data} bytes after its header"
                )
            };
            return Err(vec![
                Diagnostic::error("I104", last, message)
                    .with_help("the file is truncated, or the header does not describe it"),
            ]);
        }
    }
    Ok(Header { header_len, metadata, tensors, data_len })
}

fn read_metadata(
    doc: Doc<'_>,
    raw: &serde_json::value::RawValue,
) -> Result<BTreeMap<String, String>, Diagnostic> {
    let object = doc.object(raw, "`__metadata__`")?;
    let mut metadata = BTreeMap::new();
    for (key, value) in &object.entries {
        match serde_json::from_str::<Value>(value.get()) {
            Ok(Value::String(text)) => {
                metadata.insert(key.clone(), text);
            }
            _ => {
                return Err(Diagnostic::error(
                    "I111",
                    doc.span_of(value),
                    format!("`__metadata__` values must be strings; `{key}` is {}", kind(value)),
                ));
            }
        }
    }
    Ok(metadata)
}

fn read_tensor(
    doc: Doc<'_>,
    name: &str,
    raw: &serde_json::value::RawValue,
) -> Result<Tensor, Diagnostic> {
    let span = doc.span_of(raw);
    let entry = doc.object(raw, &format!("tensor `{name}`"))?;
    let field = |key: &str| {
        entry.value(key).ok_or_else(|| {
            Diagnostic::error("I111", span, format!("tensor `{name}` has no `{key}`"))
                .with_help("each tensor needs `dtype`, `shape` and `data_offsets`")
        })
    };
    let (dtype_value, dtype_raw) = field("dtype")?;
    let dtype = match &dtype_value {
        Value::String(text) => Dtype::from_name(text).ok_or_else(|| {
            Diagnostic::error(
                "I105",
                doc.span_of(dtype_raw),
                format!("tensor `{name}` has the unknown dtype `{text}`"),
            )
            .with_help(format!(
                "known dtypes: {}",
                Dtype::ALL.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
            ))
        })?,
        other => {
            return Err(Diagnostic::error(
                "I111",
                doc.span_of(dtype_raw),
                format!("the dtype of `{name}` must be a string, found {}", value_kind(other)),
            ));
        }
    };
    let (shape_value, shape_raw) = field("shape")?;
    let shape_span = doc.span_of(shape_raw);
    let Value::Array(dims) = &shape_value else {
        return Err(Diagnostic::error(
            "I111",
            shape_span,
            format!("the shape of `{name}` must be an array, found {}", value_kind(&shape_value)),
        ));
    };
    let mut shape = Vec::with_capacity(dims.len());
    for dim in dims {
        let Some(n) = dim.as_u64() else {
            let (code, problem) = match dim.as_f64() {
                Some(f) if dim.is_f64() && f >= 1.8e19 => ("I110", "more than 64 bits"),
                _ => ("I111", "not a non-negative whole number"),
            };
            return Err(Diagnostic::error(
                code,
                shape_span,
                format!("the shape of `{name}` has `{dim}`: {problem}"),
            ));
        };
        shape.push(n);
    }
    let overflow = || {
        Diagnostic::error(
            "I110",
            shape_span,
            format!("the shape of `{name}` overflows 64-bit element or byte counts"),
        )
    };
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or_else(overflow)?;
    let bits = elements.checked_mul(dtype.bits()).ok_or_else(overflow)?;
    if bits % 8 != 0 {
        return Err(Diagnostic::error(
            "I113",
            shape_span,
            format!(
                "`{name}` has {elements} {} elements, which do not fill whole bytes",
                dtype.name()
            ),
        ));
    }
    let bytes = bits / 8;
    let (offsets_value, offsets_raw) = field("data_offsets")?;
    let offsets_span = doc.span_of(offsets_raw);
    let offsets = match &offsets_value {
        Value::Array(pair) if pair.len() == 2 => {
            let mut out = [0u64; 2];
            for (slot, value) in out.iter_mut().zip(pair) {
                *slot = match value.as_u64() {
                    Some(n) => n,
                    None if value.as_i64().is_some() => {
                        return Err(Diagnostic::error(
                            "I104",
                            offsets_span,
                            format!("`{name}` has a negative data offset ({value})"),
                        ));
                    }
                    None => {
                        return Err(Diagnostic::error(
                            "I104",
                            offsets_span,
                            format!(
                                "`{name}` has a data offset that is not a 64-bit byte position ({value})"
                            ),
                        ));
                    }
                };
            }
            out
        }
        other => {
            return Err(Diagnostic::error(
                "I111",
                offsets_span,
                format!(
                    "`data_offsets` of `{name}` must be two byte positions `[start, end]`, found {}",
                    value_kind(other)
                ),
            ));
        }
    };
    if offsets[1] < offsets[0] {
        return Err(Diagnostic::error(
            "I104",
            offsets_span,
            format!("`{name}` ends (byte {}) before it starts (byte {})", offsets[1], offsets[0]),
        ));
    }
    if offsets[1] - offsets[0] != bytes {
        return Err(Diagnostic::error(
            "I113",
            offsets_span,
            format!(
                "`{name}` spans {} bytes, but {elements} {} elements take {bytes}",
                offsets[1] - offsets[0],
                dtype.name()
            ),
        )
        .with_help("the dtype, the shape or the offsets are wrong"));
    }
    Ok(Tensor { name: name.to_string(), dtype, shape, elements, bytes, offsets, span })
}

/// Checks that the tensors (sorted by offset) tile the data section from 0, and returns its
/// length.
fn check_layout(tensors: &[Tensor]) -> Result<u64, Vec<Diagnostic>> {
    let mut end = 0u64;
    let mut previous: Option<&Tensor> = None;
    for tensor in tensors {
        let [start, stop] = tensor.offsets;
        if start != end {
            let (message, help) = match previous {
                Some(previous) if start < end => (
                    format!(
                        "`{}` starts at byte {start} of the data section, before `{}` ends (at \
                         {end}): they overlap",
                        tensor.name, previous.name
                    ),
                    "two tensors cannot share bytes",
                ),
                Some(previous) => (
                    format!(
                        "`{}` starts at byte {start} of the data section, {} bytes after `{}` ends",
                        tensor.name,
                        start - end,
                        previous.name
                    ),
                    "tensors must follow each other with no gap",
                ),
                None => (
                    format!(
                        "the data section starts with a gap: the first tensor, `{}`, starts at \
                         byte {start}",
                        tensor.name
                    ),
                    "tensors must follow each other with no gap, from byte 0",
                ),
            };
            let mut diagnostic = Diagnostic::error("I112", tensor.span, message).with_help(help);
            if let Some(previous) = previous {
                diagnostic = diagnostic
                    .with_label(previous.span, format!("`{}` ends at {end}", previous.name));
            }
            return Err(vec![diagnostic]);
        }
        end = stop;
        previous = Some(tensor);
    }
    Ok(end)
}
