//! GGUF headers (versions 2 and 3, little-endian): metadata key/values and tensor infos, read
//! from the start of the file; tensor data is never read.
//!
//! Layout (llama.cpp `gguf.cpp`, gguf-py `gguf_reader.py`): `GGUF`, a `u32` version, `u64`
//! tensor and key/value counts, the key/values (a string key, a `u32` value type, the value),
//! then per tensor its name, `u32` dimension count, `u64` dimensions (`ne[0]` is the row
//! length), `u32` ggml type and `u64` offset. Data starts at the header's end rounded up to
//! `general.alignment` (default 32), and tensors follow each other, each padded to the
//! alignment. A tensor takes `ceil(elements / block) × block bytes` (DOMAIN.md §1.5).
//!
//! Every length read from the file is checked against a cap ([`MAX_STRING_BYTES`],
//! [`MAX_ARRAY_LEN`], [`MAX_TENSORS`], [`MAX_KVS`], [`MAX_HEADER_BYTES`]) and against the bytes
//! at hand before it is used; values of large arrays (the tokenizer's) are skipped, not stored.
//! Spans are byte ranges from the start of the file.
//!
//! `header.rs` reads the bytes, `types.rs` holds ggml's element and file types, and `model.rs`
//! turns one header, or a split file's shards, into a model.

mod header;
mod model;
mod types;

use serde::Serialize;

use crate::span::Span;

pub use header::parse;
pub use model::model;
pub use types::GgmlType;

/// The most bytes of metadata and tensor infos read: 64 MiB (the largest tokenizers take under
/// 10 MiB).
pub const MAX_HEADER_BYTES: u64 = 64 << 20;
/// The longest string value (chat templates are tens of kB).
pub const MAX_STRING_BYTES: u64 = 16 << 20;
/// The longest key or tensor name.
pub const MAX_NAME_BYTES: u64 = 64 << 10;
/// The most elements of an array value (vocabularies have a few hundred thousand).
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// The most tensors in one file.
pub const MAX_TENSORS: u64 = 1 << 20;
/// The most key/values in one file.
pub const MAX_KVS: u64 = 1 << 16;
/// The most dimensions a tensor has (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

const DEFAULT_ALIGNMENT: u64 = 32;

/// A metadata value. Arrays keep their element type and length only.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
    Array { element: &'static str, len: u64 },
}

/// One metadata key/value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Kv {
    pub key: String,
    pub value: Value,
    #[serde(skip)]
    pub span: Span,
}

/// One tensor info.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tensor {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: GgmlType,
    /// Dimensions, row length first.
    pub ne: Vec<u64>,
    pub elements: u64,
    pub bytes: u64,
    /// Offset in the data section.
    pub offset: u64,
    #[serde(skip)]
    pub span: Span,
}

/// A parsed GGUF header.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Gguf {
    pub version: u32,
    pub alignment: u64,
    /// Bytes of the header (magic to the last tensor info): what was read.
    pub header_len: u64,
    /// Where the data section starts.
    pub data_offset: u64,
    pub kvs: Vec<Kv>,
    pub tensors: Vec<Tensor>,
}

impl Gguf {
    pub fn get(&self, key: &str) -> Option<&Kv> {
        self.kvs.iter().find(|kv| kv.key == key)
    }

    pub fn text(&self, key: &str) -> Option<&str> {
        match &self.get(key)?.value {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    fn unsigned(&self, key: &str) -> Option<u64> {
        match self.get(key)?.value {
            Value::Uint(n) => Some(n),
            Value::Int(n) => u64::try_from(n).ok(),
            _ => None,
        }
    }
}
