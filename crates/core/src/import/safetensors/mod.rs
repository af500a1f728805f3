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
//!
//! `header.rs` reads one file's header, `index.rs` a sharded checkpoint's index, and
//! `weights.rs` counts the stored weights by role (quantized packs, scales, plain tensors).

mod header;
mod index;
mod weights;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::span::Span;

pub use header::parse_header;
pub use index::{Index, combine, parse_index};
pub use weights::weights;

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
