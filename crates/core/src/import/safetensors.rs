//! safetensors headers: an 8-byte little-endian length N, then N bytes of JSON naming every
//! tensor's dtype, shape and byte range in the data section that follows. Only the header is
//! read, never a tensor.
//!
//! The checks follow the reference reader (`huggingface/safetensors`, `Metadata::validate`):
//! the header is at most 100 MB, tensors tile the data section in offset order with no gap or
//! overlap, each range is exactly `elements × dtype size`, and, when the file's length is known,
//! the last tensor ends where the file does. A sharded checkpoint adds
//! `model.safetensors.index.json`, whose `weight_map` must agree with the shards' headers.
//!
//! Spans are byte ranges from the start of the file (the JSON starts at byte 8).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::json::{Doc, Object, kind, value_kind};
use super::model::{DtypeTotals, Quantization, Quantized, Weights};
use super::{MAX_DIAGNOSTICS, Parsed, cap_diagnostics};
use crate::diagnostic::Diagnostic;
use crate::span::Span;

/// The largest header accepted: the reference reader's `MAX_HEADER_SIZE` (100 MB).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Element types, with their size in bits (`F4` packs two elements per byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[allow(non_camel_case_types, reason = "the names are the format's own dtype strings")]
pub enum Dtype {
    BOOL,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    F4,
    F6_E2M3,
    F6_E3M2,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl Dtype {
    const ALL: [Dtype; 22] = [
        Dtype::BOOL,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3,
        Dtype::F8_E8M0,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::F4,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
    ];

    /// The dtype string of the header (`BF16`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            Dtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            Dtype::F4 => "F4",
            Dtype::F6_E2M3 => "F6_E2M3",
            Dtype::F6_E3M2 => "F6_E3M2",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bits per element.
    pub fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => 6,
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// The precision a model stored mostly in this dtype is in, in the language's words.
    fn precision(self) -> String {
        match self {
            Dtype::BF16 => "bf16".to_string(),
            Dtype::F16 => "fp16".to_string(),
            Dtype::F32 => "fp32".to_string(),
            Dtype::F8_E4M3 | Dtype::F8_E5M2 | Dtype::F8_E4M3FNUZ | Dtype::F8_E5M2FNUZ => {
                "fp8".to_string()
            }
            Dtype::I8 => "int8".to_string(),
            other => other.name().to_ascii_lowercase(),
        }
    }
}

/// One tensor of a header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub elements: u64,
    pub bytes: u64,
    /// `[start, end)` in the data section (which starts at byte `8 + header_len`).
    pub offsets: [u64; 2],
    /// Where the tensor's entry is in the header.
    #[serde(skip)]
    pub span: Span,
}

/// A parsed safetensors header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Header {
    /// N, the JSON's length (including its trailing space padding).
    pub header_len: u64,
    /// `__metadata__`: string values only.
    pub metadata: BTreeMap<String, String>,
    /// In data order.
    pub tensors: Vec<Tensor>,
    /// The data section's length: where the last tensor ends.
    pub data_len: u64,
}

impl Header {
    /// Bytes from the start of the file that the header occupies (`8 + N`).
    pub fn prefix_len(&self) -> u64 {
        self.header_len.saturating_add(8)
    }
}

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

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Index {
    /// `metadata.total_size`: the sum of the tensors' bytes, by the writer's count.
    pub total_size: Option<u64>,
    /// Tensor name → shard file name.
    pub weight_map: BTreeMap<String, String>,
    /// Where each `weight_map` entry is in the index.
    #[serde(skip)]
    pub spans: BTreeMap<String, Span>,
}

impl Index {
    /// The shard file names, in order.
    pub fn shards(&self) -> Vec<&str> {
        let set: BTreeSet<&str> = self.weight_map.values().map(String::as_str).collect();
        set.into_iter().collect()
    }
}

/// Reads `model.safetensors.index.json`.
pub fn parse_index(bytes: &[u8]) -> Result<Index, Vec<Diagnostic>> {
    let text = super::json_text(bytes, "the index")?;
    let doc = Doc { text, base: 0 };
    let root = doc.root("the index").map_err(|d| vec![d])?;
    let mut index = Index::default();
    if let Some(raw) = root.get("metadata") {
        let metadata = doc.object(raw, "`metadata`").map_err(|d| vec![d])?;
        if let Some((value, raw)) = metadata.value("total_size") {
            match value.as_u64() {
                Some(n) => index.total_size = Some(n),
                None => {
                    return Err(vec![Diagnostic::error(
                        "I111",
                        doc.span_of(raw),
                        format!("`total_size` must be a byte count, found {}", value_kind(&value)),
                    )]);
                }
            }
        }
    }
    let Some(raw) = root.get("weight_map") else {
        return Err(vec![
            Diagnostic::error("I111", Span::new(0, 1), "the index has no `weight_map`").with_help(
                "`model.safetensors.index.json` maps each tensor name to its shard file",
            ),
        ]);
    };
    let map: Object<'_> = doc.object(raw, "`weight_map`").map_err(|d| vec![d])?;
    let mut diagnostics = Vec::new();
    for (name, raw) in &map.entries {
        let span = doc.span_of(raw);
        match serde_json::from_str::<Value>(raw.get()) {
            Ok(Value::String(file)) => {
                if let Some(first) = index.spans.insert(name.clone(), span) {
                    diagnostics.push(
                        Diagnostic::error("I114", span, format!("`{name}` is mapped twice"))
                            .with_label(first, "first here"),
                    );
                }
                index.weight_map.insert(name.clone(), file);
            }
            _ => diagnostics.push(Diagnostic::error(
                "I111",
                span,
                format!("the shard of `{name}` must be a file name, found {}", kind(raw)),
            )),
        }
    }
    if diagnostics.is_empty() { Ok(index) } else { Err(cap_diagnostics(diagnostics)) }
}

/// The tensors of a sharded checkpoint, checked against its index: every tensor the index maps
/// is in the shard it names, every shard tensor is mapped, no tensor is in two shards.
/// `shards` are `(file name, header)`; diagnostics point into the index.
pub fn combine(index: &Index, shards: &[(String, Header)]) -> Result<Vec<Tensor>, Vec<Diagnostic>> {
    let mut diagnostics = Vec::new();
    let files: BTreeSet<&str> = shards.iter().map(|(name, _)| name.as_str()).collect();
    let mut found: BTreeMap<&str, &str> = BTreeMap::new();
    let mut tensors = Vec::new();
    for (file, header) in shards {
        for tensor in &header.tensors {
            if let Some(other) = found.insert(&tensor.name, file) {
                diagnostics.push(Diagnostic::error(
                    "I114",
                    Span::new(0, 0),
                    format!("`{}` is in both {other} and {file}", tensor.name),
                ));
                continue;
            }
            match index.weight_map.get(&tensor.name) {
                Some(mapped) if mapped == file => tensors.push(tensor.clone()),
                Some(mapped) => diagnostics.push(Diagnostic::error(
                    "I115",
                    index.spans.get(&tensor.name).copied().unwrap_or_default(),
                    format!("the index puts `{}` in {mapped}, but it is in {file}", tensor.name),
                )),
                None => diagnostics.push(
                    Diagnostic::error(
                        "I115",
                        Span::new(0, 1),
                        format!("`{}` is in {file} but not in the index", tensor.name),
                    )
                    .with_help("the index and the shards come from different checkpoints"),
                ),
            }
        }
    }
    for (name, file) in &index.weight_map {
        let span = index.spans.get(name).copied().unwrap_or_default();
        if !files.contains(file.as_str()) {
            diagnostics.push(Diagnostic::error(
                "I115",
                span,
                format!("the index puts `{name}` in {file}, which was not read"),
            ));
        } else if !found.contains_key(name.as_str()) {
            diagnostics.push(Diagnostic::error(
                "I115",
                span,
                format!("the index puts `{name}` in {file}, but that shard has no such tensor"),
            ));
        }
    }
    if diagnostics.is_empty() { Ok(tensors) } else { Err(cap_diagnostics(diagnostics)) }
}

/// How one tensor counts: a plain parameter tensor, packed quantized weights, or a
/// quantization's scales and zero points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Plain,
    /// Packed weights; the number of weights one stored element holds is `per_element`.
    Packed {
        method: &'static str,
        weights_per_element: u64,
        per_bits: u64,
    },
    Overhead {
        method: &'static str,
    },
}

/// Totals, parameter count and format of a checkpoint's tensors. `declared` is config.json's
/// `quantization_config`, which decides GPTQ/AWQ bit widths when given. Returns the weights and
/// notes on what was inferred.
pub fn weights(
    tensors: &[Tensor],
    declared: Option<&Quantization>,
) -> Result<(Weights, Vec<String>), Diagnostic> {
    let names: BTreeMap<&str, &Tensor> = tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut notes = Vec::new();
    let mut weights = Weights::default();
    let mut quantized: Option<Quantized> = None;
    let mut first_packed: Option<&Tensor> = None;
    let overflow =
        || Diagnostic::error("I110", Span::new(0, 0), "the checkpoint's totals overflow 64 bits");
    for tensor in tensors {
        let role = role(tensor, &names, declared);
        let params = match role {
            Role::Plain => tensor.elements,
            Role::Packed { weights_per_element, per_bits, .. } => {
                tensor.elements.checked_mul(weights_per_element).ok_or_else(overflow)? / per_bits
            }
            Role::Overhead { .. } => 0,
        };
        weights.params = weights.params.checked_add(params).ok_or_else(overflow)?;
        weights.bytes = weights.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
        weights.tensors += 1;
        let totals = weights
            .by_dtype
            .entry(tensor.dtype.name().to_string())
            .or_insert_with(DtypeTotals::default);
        totals.tensors += 1;
        totals.elements = totals.elements.checked_add(tensor.elements).ok_or_else(overflow)?;
        totals.bytes = totals.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
        if let Role::Packed { method, .. } | Role::Overhead { method } = role {
            let q = quantized.get_or_insert_with(|| Quantized {
                method: method.to_string(),
                ..Quantized::default()
            });
            if matches!(role, Role::Packed { .. }) {
                q.weight_tensors += 1;
                first_packed.get_or_insert(tensor);
            } else {
                q.overhead_tensors += 1;
            }
            q.bytes = q.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
        }
    }
    weights.format = if let (Some(q), Some(first)) = (&quantized, first_packed) {
        packed_format(&q.method, first, &names, declared, &mut notes)
    } else {
        if let Some(declared) = declared {
            notes.push(format!(
                "config.json declares {} quantization, but no tensor is stored that way",
                declared.format_name()
            ));
        }
        dominant_dtype(tensors)
    };
    weights.quantized = quantized;
    Ok((weights, notes))
}

fn sibling<'a>(
    name: &str,
    suffix: &str,
    with: &str,
    names: &BTreeMap<&str, &'a Tensor>,
) -> Option<&'a Tensor> {
    let stem = name.strip_suffix(suffix)?;
    names.get(format!("{stem}{with}").as_str()).copied()
}

fn role(tensor: &Tensor, names: &BTreeMap<&str, &Tensor>, declared: Option<&Quantization>) -> Role {
    let name = tensor.name.as_str();
    // GPTQ and AWQ: int32 words of packed weights, with fp16 scales and packed zero points.
    if name.ends_with(".qweight") {
        let gptq = sibling(name, ".qweight", ".g_idx", names).is_some()
            || matches!(declared, Some(Quantization::Gptq { .. }));
        let bits = packed_bits(tensor, names, declared).unwrap_or(4);
        let word = tensor.dtype.bits();
        return Role::Packed {
            method: if gptq { "gptq" } else { "awq" },
            weights_per_element: word,
            per_bits: bits.max(1),
        };
    }
    for suffix in [".qzeros", ".scales", ".g_idx"] {
        if sibling(name, suffix, ".qweight", names).is_some() {
            let gptq = sibling(name, suffix, ".g_idx", names).is_some()
                || matches!(declared, Some(Quantization::Gptq { .. }));
            return Role::Overhead { method: if gptq { "gptq" } else { "awq" } };
        }
    }
    // gpt-oss MXFP4: bytes of two E2M1 values, with one E8M0 scale byte per 32.
    if name.ends_with("_blocks") && sibling(name, "_blocks", "_scales", names).is_some() {
        return Role::Packed { method: "mxfp4", weights_per_element: 2, per_bits: 1 };
    }
    if name.ends_with("_scales") && sibling(name, "_scales", "_blocks", names).is_some() {
        return Role::Overhead { method: "mxfp4" };
    }
    // FP8: one-byte weights with a scale per tensor or per block.
    for suffix in [".weight_scale_inv", ".weight_scale", ".input_scale"] {
        if sibling(name, suffix, ".weight", names).is_some() {
            return Role::Overhead { method: "fp8" };
        }
    }
    if tensor.dtype.bits() == 8
        && tensor.dtype != Dtype::U8
        && tensor.dtype != Dtype::I8
        && (sibling(name, ".weight", ".weight_scale_inv", names).is_some()
            || sibling(name, ".weight", ".weight_scale", names).is_some())
    {
        return Role::Packed { method: "fp8", weights_per_element: 1, per_bits: 1 };
    }
    // bitsandbytes: 4-bit weights packed two per byte, with absmax and quant-state tensors.
    let bnb_state = |stem_suffix: &str| {
        ["nf4", "fp4"].iter().any(|kind| {
            sibling(name, stem_suffix, &format!(".weight.quant_state.bitsandbytes__{kind}"), names)
                .is_some()
        })
    };
    if name.ends_with(".weight") && tensor.dtype == Dtype::U8 && bnb_state(".weight") {
        return Role::Packed { method: "bitsandbytes", weights_per_element: 2, per_bits: 1 };
    }
    let bnb_overhead = [".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"];
    let of_weight = |suffix: &str| {
        name.strip_suffix(suffix)
            .is_some_and(|stem| stem.ends_with(".weight") && names.contains_key(stem))
    };
    if name.contains(".weight.quant_state.bitsandbytes__")
        || bnb_overhead.iter().any(|suffix| of_weight(suffix))
        || sibling(name, ".SCB", ".weight", names).is_some()
        || sibling(name, ".weight_format", ".weight", names).is_some()
    {
        return Role::Overhead { method: "bitsandbytes" };
    }
    Role::Plain
}

/// The bit width of a `qweight`: config.json's, else inferred from the shapes (GPTQ: `g_idx`
/// has one entry per input row; AWQ: `scales` has one column per output).
fn packed_bits(
    qweight: &Tensor,
    names: &BTreeMap<&str, &Tensor>,
    declared: Option<&Quantization>,
) -> Option<u64> {
    if let Some(Quantization::Gptq { bits, .. } | Quantization::Awq { bits, .. }) = declared {
        return Some(*bits);
    }
    let word = qweight.dtype.bits();
    let rows = qweight.shape.first()?.checked_mul(word)?;
    let columns = qweight.shape.get(1)?.checked_mul(word)?;
    if let Some(g_idx) = sibling(&qweight.name, ".qweight", ".g_idx", names) {
        let inputs = g_idx.elements;
        return (inputs > 0 && rows.is_multiple_of(inputs)).then(|| rows / inputs);
    }
    let scales = sibling(&qweight.name, ".qweight", ".scales", names)?;
    let outputs = *scales.shape.get(1)?;
    (outputs > 0 && columns.is_multiple_of(outputs)).then(|| columns / outputs)
}

/// The group size of a GPTQ or AWQ layer: inputs per row of `scales`.
fn packed_group(qweight: &Tensor, bits: u64, names: &BTreeMap<&str, &Tensor>) -> Option<u64> {
    let scales = sibling(&qweight.name, ".qweight", ".scales", names)?;
    let groups = *scales.shape.first()?;
    let inputs = match sibling(&qweight.name, ".qweight", ".g_idx", names) {
        Some(g_idx) => g_idx.elements,
        None if bits == 0 => return None,
        // AWQ: qweight is [inputs, outputs × bits / 32].
        None => *qweight.shape.first()?,
    };
    (groups > 0 && inputs % groups == 0).then(|| inputs / groups)
}

fn packed_format(
    method: &str,
    first: &Tensor,
    names: &BTreeMap<&str, &Tensor>,
    declared: Option<&Quantization>,
    notes: &mut Vec<String>,
) -> String {
    let found = match method {
        "gptq" | "awq" => {
            let bits = packed_bits(first, names, declared).unwrap_or(4);
            let inferred_group = packed_group(first, bits, names);
            let group = match declared {
                Some(Quantization::Gptq { group, .. } | Quantization::Awq { group, .. }) => *group,
                _ => inferred_group,
            };
            if method == "gptq" {
                Quantization::Gptq { bits, group, desc_act: false }
            } else {
                Quantization::Awq { bits, group }
            }
        }
        "mxfp4" => Quantization::Mxfp4,
        "fp8" => {
            let block = match declared {
                Some(Quantization::Fp8 { block }) => *block,
                _ if sibling(&first.name, ".weight", ".weight_scale_inv", names).is_some() => {
                    Some([128, 128])
                }
                _ => None,
            };
            Quantization::Fp8 { block }
        }
        _ => {
            let kind =
                if names.keys().any(|n| n.ends_with("bitsandbytes__nf4")) { "nf4" } else { "fp4" };
            let double_quant = names.keys().any(|n| n.ends_with(".nested_absmax"));
            if names.keys().any(|n| n.rsplit('.').next() == Some("SCB"))
                && !names.keys().any(|n| n.contains("bitsandbytes__"))
            {
                Quantization::Bnb8
            } else {
                Quantization::Bnb4 { kind: kind.to_string(), double_quant }
            }
        }
    };
    if let Some(declared) = declared
        && declared.format_name() != found.format_name()
    {
        notes.push(format!(
            "config.json declares {} quantization; the tensors are stored as {}",
            declared.format_name(),
            found.format_name()
        ));
    }
    found.format_name()
}

/// The precision of the dtype holding the most bytes of weight matrices (tensors of two or
/// more dimensions), or of all tensors when there are none.
fn dominant_dtype(tensors: &[Tensor]) -> String {
    let mut by_dtype: BTreeMap<Dtype, u64> = BTreeMap::new();
    let matrices: Vec<&Tensor> = tensors.iter().filter(|t| t.shape.len() >= 2).collect();
    let pool: Vec<&Tensor> = if matrices.is_empty() { tensors.iter().collect() } else { matrices };
    for tensor in pool {
        let total = by_dtype.entry(tensor.dtype).or_insert(0);
        *total = total.saturating_add(tensor.bytes);
    }
    by_dtype
        .into_iter()
        .max_by_key(|(dtype, bytes)| (*bytes, std::cmp::Reverse(*dtype)))
        .map_or_else(|| "bf16".to_string(), |(dtype, _)| dtype.precision())
}
