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

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::model::{DtypeTotals, ImportedModel, Mla, Moe, Weights};
use super::{Parsed, Problem};
use crate::diagnostic::Diagnostic;
use crate::span::Span;

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

/// A ggml element type: `block` elements take `type_size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub type_size: u64,
}

/// gguf-py `GGMLQuantizationType` and `GGML_QUANT_SIZES` (llama.cpp `gguf-py/gguf/constants.py`).
const GGML_TYPES: [GgmlType; 34] = {
    const fn t(id: u32, name: &'static str, block: u64, type_size: u64) -> GgmlType {
        GgmlType { id, name, block, type_size }
    }
    [
        t(0, "F32", 1, 4),
        t(1, "F16", 1, 2),
        t(2, "Q4_0", 32, 18),
        t(3, "Q4_1", 32, 20),
        t(6, "Q5_0", 32, 22),
        t(7, "Q5_1", 32, 24),
        t(8, "Q8_0", 32, 34),
        t(9, "Q8_1", 32, 40),
        t(10, "Q2_K", 256, 84),
        t(11, "Q3_K", 256, 110),
        t(12, "Q4_K", 256, 144),
        t(13, "Q5_K", 256, 176),
        t(14, "Q6_K", 256, 210),
        t(15, "Q8_K", 256, 292),
        t(16, "IQ2_XXS", 256, 66),
        t(17, "IQ2_XS", 256, 74),
        t(18, "IQ3_XXS", 256, 98),
        t(19, "IQ1_S", 256, 50),
        t(20, "IQ4_NL", 32, 18),
        t(21, "IQ3_S", 256, 110),
        t(22, "IQ2_S", 256, 82),
        t(23, "IQ4_XS", 256, 136),
        t(24, "I8", 1, 1),
        t(25, "I16", 1, 2),
        t(26, "I32", 1, 4),
        t(27, "I64", 1, 8),
        t(28, "F64", 1, 8),
        t(29, "IQ1_M", 256, 56),
        t(30, "BF16", 1, 2),
        t(34, "TQ1_0", 256, 54),
        t(35, "TQ2_0", 256, 66),
        t(39, "MXFP4", 32, 17),
        t(40, "NVFP4", 64, 36),
        t(41, "Q1_0", 128, 18),
    ]
};

impl GgmlType {
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().copied().find(|t| t.id == id)
    }

    fn from_name(name: &str) -> Option<GgmlType> {
        GGML_TYPES.iter().copied().find(|t| t.name == name)
    }
}

/// `llama_ftype` values of `general.file_type` (gguf-py `LlamaFileType`).
const FILE_TYPES: [(u64, &str); 37] = [
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (4, "Q4_1_SOME_F16"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (33, "Q4_0_4_4"),
    (34, "Q4_0_4_8"),
    (35, "Q4_0_8_8"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4_MOE"),
];

/// File types after the table above (gguf-py at llama.cpp `0024aa7`).
const FILE_TYPES_LATER: [(u64, &str); 2] = [(39, "NVFP4"), (40, "Q1_0")];

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

/// Why reading stopped: more bytes are needed, or the header is malformed.
enum Stop {
    More(u64),
    Bad(Diagnostic),
}

impl From<Diagnostic> for Stop {
    fn from(diagnostic: Diagnostic) -> Self {
        Stop::Bad(diagnostic)
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    file_len: Option<u64>,
    /// Whether `bytes` is the whole file (so running out is truncation, not a request).
    complete: bool,
}

impl<'a> Cursor<'a> {
    fn at(&self) -> u64 {
        u64::try_from(self.pos).unwrap_or(u64::MAX)
    }

    /// The next `n` bytes, which are `what`.
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], Stop> {
        let start = self.at();
        let here = Span::new(self.pos, self.pos);
        let Some(end) = start.checked_add(n).filter(|&end| end <= MAX_HEADER_BYTES) else {
            return Err(Stop::Bad(
                Diagnostic::error(
                    "I102",
                    here,
                    format!(
                        "{what} would end past byte {MAX_HEADER_BYTES}: the metadata and tensor infos \
                         are over the limit of {MAX_HEADER_BYTES} bytes"
                    ),
                )
                .with_help("real GGUF headers take a few MiB"),
            ));
        };
        if let Some(len) = self.file_len
            && end > len
        {
            return Err(Stop::Bad(truncated(here, what, len)));
        }
        let available = u64::try_from(self.bytes.len()).unwrap_or(u64::MAX);
        if end > available {
            if self.complete {
                return Err(Stop::Bad(truncated(here, what, available)));
            }
            return Err(Stop::More(end));
        }
        let end = usize::try_from(end).unwrap_or(usize::MAX);
        let slice = self.bytes.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], Stop> {
        let bytes = self.take(N as u64, what)?;
        Ok(bytes.try_into().unwrap_or([0; N]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, Stop> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, Stop> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A length-prefixed string of at most `cap` bytes.
    fn string(&mut self, cap: u64, what: &str) -> Result<String, Stop> {
        let start = self.pos;
        let len = self.u64(what)?;
        if len > cap {
            return Err(Stop::Bad(
                Diagnostic::error(
                    "I108",
                    Span::new(start, self.pos),
                    format!("{what} is {len} bytes long, over the limit of {cap}"),
                )
                .with_help("the length is corrupt, or the file is not GGUF"),
            ));
        }
        let bytes = self.take(len, what)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// A value of GGUF value type `kind`, for key `key`.
    fn value(&mut self, kind: u32, key: &str, kind_span: Span) -> Result<Value, Stop> {
        let what = format!("the value of `{key}`");
        Ok(match kind {
            0 => Value::Uint(u64::from(self.array::<1>(&what)?[0])),
            1 => Value::Int(i64::from(i8::from_le_bytes(self.array(&what)?))),
            2 => Value::Uint(u64::from(u16::from_le_bytes(self.array(&what)?))),
            3 => Value::Int(i64::from(i16::from_le_bytes(self.array(&what)?))),
            4 => Value::Uint(u64::from(self.u32(&what)?)),
            5 => Value::Int(i64::from(i32::from_le_bytes(self.array(&what)?))),
            6 => Value::Float(f64::from(f32::from_le_bytes(self.array(&what)?))),
            7 => Value::Bool(self.array::<1>(&what)?[0] != 0),
            8 => Value::Text(self.string(MAX_STRING_BYTES, &what)?),
            9 => self.array_value(key)?,
            10 => Value::Uint(self.u64(&what)?),
            11 => Value::Int(i64::from_le_bytes(self.array(&what)?)),
            12 => Value::Float(f64::from_le_bytes(self.array(&what)?)),
            other => return Err(Stop::Bad(unknown_value_type(kind_span, other, key))),
        })
    }

    /// An array: its element type and length are kept, its elements skipped.
    fn array_value(&mut self, key: &str) -> Result<Value, Stop> {
        let type_start = self.pos;
        let element = self.u32(&format!("the element type of `{key}`"))?;
        let type_span = Span::new(type_start, self.pos);
        let len_start = self.pos;
        let len = self.u64(&format!("the length of `{key}`"))?;
        if len > MAX_ARRAY_LEN {
            return Err(Stop::Bad(
                Diagnostic::error(
                    "I108",
                    Span::new(len_start, self.pos),
                    format!(
                        "the array `{key}` has {len} elements, over the limit of {MAX_ARRAY_LEN}"
                    ),
                )
                .with_help("the length is corrupt, or the file is not GGUF"),
            ));
        }
        let what = format!("the elements of `{key}`");
        let name = match element {
            8 => {
                for _ in 0..len {
                    self.string(MAX_STRING_BYTES, &what)?;
                }
                "STRING"
            }
            9 => {
                return Err(Stop::Bad(
                    Diagnostic::error("I105", type_span, format!("`{key}` is an array of arrays"))
                        .with_help("llama.cpp does not read nested arrays either"),
                ));
            }
            other => {
                let Some((name, size)) = fixed_size(other) else {
                    return Err(Stop::Bad(unknown_value_type(type_span, other, key)));
                };
                // `len` is at most 2^24 and `size` at most 8: no overflow.
                self.take(len * size, &what)?;
                name
            }
        };
        Ok(Value::Array { element: name, len })
    }
}

fn fixed_size(kind: u32) -> Option<(&'static str, u64)> {
    Some(match kind {
        0 => ("UINT8", 1),
        1 => ("INT8", 1),
        2 => ("UINT16", 2),
        3 => ("INT16", 2),
        4 => ("UINT32", 4),
        5 => ("INT32", 4),
        6 => ("FLOAT32", 4),
        7 => ("BOOL", 1),
        10 => ("UINT64", 8),
        11 => ("INT64", 8),
        12 => ("FLOAT64", 8),
        _ => return None,
    })
}

fn unknown_value_type(span: Span, kind: u32, key: &str) -> Diagnostic {
    Diagnostic::error("I105", span, format!("`{key}` has the unknown value type {kind}"))
        .with_help("GGUF value types are 0 to 12")
}

fn truncated(span: Span, what: &str, len: u64) -> Diagnostic {
    Diagnostic::error("I101", span, format!("the file ends (at byte {len}) inside {what}"))
        .with_help("the file is truncated")
}

/// Reads a GGUF header from `bytes`, the start of a file of `file_len` bytes (`None`: `bytes` is
/// the whole input). Asks for more bytes (never more than [`MAX_HEADER_BYTES`]) when the header
/// continues past them; a front end can start with 1 MiB and double.
pub fn parse(bytes: &[u8], file_len: Option<u64>) -> Parsed<Gguf> {
    let available = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    let complete = file_len.is_none_or(|len| available >= len);
    let mut cursor = Cursor { bytes, pos: 0, file_len, complete };
    match read(&mut cursor) {
        Ok(gguf) => match check_layout(&gguf, file_len) {
            Ok(()) => Parsed::Done(gguf),
            Err(diagnostic) => Parsed::Failed(vec![diagnostic]),
        },
        Err(Stop::More(needed)) => Parsed::NeedMore(needed),
        Err(Stop::Bad(diagnostic)) => Parsed::Failed(vec![diagnostic]),
    }
}

fn read(cursor: &mut Cursor<'_>) -> Result<Gguf, Stop> {
    let magic = cursor.array::<4>("the magic number")?;
    if &magic != b"GGUF" {
        return Err(Stop::Bad(
            Diagnostic::error(
                "I106",
                Span::new(0, 4),
                format!("not a GGUF file: it starts with {magic:02x?}, not `GGUF`"),
            )
            .with_help("GGUF files start with the bytes 47 47 55 46"),
        ));
    }
    let version = cursor.u32("the version")?;
    if version != 2 && version != 3 {
        let why = match version {
            1 => "GGUF v1 (32-bit counts) is not supported".to_string(),
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
                format!("a big-endian GGUF v{} is not supported", v.swap_bytes())
            }
            v => format!("GGUF version {v} is not supported"),
        };
        return Err(Stop::Bad(
            Diagnostic::error("I107", Span::new(4, 8), why)
                .with_help("versions 2 and 3, little-endian, are read"),
        ));
    }
    let count_start = cursor.pos;
    let tensor_count = cursor.u64("the tensor count")?;
    if tensor_count > MAX_TENSORS {
        return Err(Stop::Bad(Diagnostic::error(
            "I109",
            Span::new(count_start, cursor.pos),
            format!("the header declares {tensor_count} tensors, over the limit of {MAX_TENSORS}"),
        )));
    }
    let kv_start = cursor.pos;
    let kv_count = cursor.u64("the key/value count")?;
    if kv_count > MAX_KVS {
        return Err(Stop::Bad(Diagnostic::error(
            "I109",
            Span::new(kv_start, cursor.pos),
            format!("the header declares {kv_count} metadata keys, over the limit of {MAX_KVS}"),
        )));
    }

    let mut kvs: Vec<Kv> = Vec::new();
    let mut keys: BTreeMap<String, Span> = BTreeMap::new();
    for _ in 0..kv_count {
        let start = cursor.pos;
        let key = cursor.string(MAX_NAME_BYTES, "a metadata key")?;
        let kind_start = cursor.pos;
        let kind = cursor.u32(&format!("the value type of `{key}`"))?;
        let value = cursor.value(kind, &key, Span::new(kind_start, cursor.pos))?;
        let span = Span::new(start, cursor.pos);
        if let Some(first) = keys.insert(key.clone(), span) {
            return Err(Stop::Bad(
                Diagnostic::error("I114", span, format!("the metadata key `{key}` appears twice"))
                    .with_label(first, "first here"),
            ));
        }
        kvs.push(Kv { key, value, span });
    }
    let alignment = alignment(&kvs)?;

    let mut tensors: Vec<Tensor> = Vec::new();
    let mut names: BTreeMap<String, Span> = BTreeMap::new();
    for _ in 0..tensor_count {
        let tensor = tensor_info(cursor)?;
        if let Some(first) = names.insert(tensor.name.clone(), tensor.span) {
            return Err(Stop::Bad(
                Diagnostic::error(
                    "I114",
                    tensor.span,
                    format!("the tensor `{}` appears twice", tensor.name),
                )
                .with_label(first, "first here"),
            ));
        }
        tensors.push(tensor);
    }
    let header_len = cursor.at();
    let data_offset = header_len.div_ceil(alignment).checked_mul(alignment).ok_or_else(|| {
        Stop::Bad(Diagnostic::error("I110", Span::default(), "the data offset overflows"))
    })?;
    Ok(Gguf { version, alignment, header_len, data_offset, kvs, tensors })
}

/// `general.alignment`: a power of two, default 32.
fn alignment(kvs: &[Kv]) -> Result<u64, Stop> {
    let Some(kv) = kvs.iter().find(|kv| kv.key == "general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match kv.value {
        Value::Uint(n) if n.is_power_of_two() && n <= 1 << 30 => Ok(n),
        _ => Err(Stop::Bad(
            Diagnostic::error(
                "I111",
                kv.span,
                "`general.alignment` must be a power of two of at most 2^30 bytes",
            )
            .with_help("the default is 32"),
        )),
    }
}

fn tensor_info(cursor: &mut Cursor<'_>) -> Result<Tensor, Stop> {
    let start = cursor.pos;
    let name = cursor.string(MAX_NAME_BYTES, "a tensor name")?;
    let dims_start = cursor.pos;
    let n_dims = cursor.u32(&format!("the dimension count of `{name}`"))?;
    if n_dims > MAX_DIMS {
        return Err(Stop::Bad(Diagnostic::error(
            "I110",
            Span::new(dims_start, cursor.pos),
            format!("`{name}` has {n_dims} dimensions; ggml tensors have at most {MAX_DIMS}"),
        )));
    }
    let mut ne = Vec::with_capacity(MAX_DIMS as usize);
    for _ in 0..n_dims {
        ne.push(cursor.u64(&format!("the dimensions of `{name}`"))?);
    }
    let ne_span = Span::new(dims_start, cursor.pos);
    let type_start = cursor.pos;
    let id = cursor.u32(&format!("the type of `{name}`"))?;
    let type_span = Span::new(type_start, cursor.pos);
    let offset = cursor.u64(&format!("the offset of `{name}`"))?;
    let span = Span::new(start, cursor.pos);
    let kind = GgmlType::from_id(id).ok_or_else(|| {
        Diagnostic::error("I105", type_span, format!("`{name}` has the unknown ggml type {id}"))
            .with_help("known types are those of gguf-py's GGMLQuantizationType")
    })?;
    let invalid = |why: String| Stop::Bad(Diagnostic::error("I110", ne_span, why));
    if let Some(&dim) = ne.iter().find(|&&d| d > i64::MAX as u64) {
        return Err(invalid(format!("`{name}` has a dimension of {dim}, over 2^63 - 1")));
    }
    let elements = ne
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| invalid(format!("the element count of `{name}` overflows 64 bits")))?;
    let row = ne.first().copied().unwrap_or(1);
    if row % kind.block != 0 {
        return Err(invalid(format!(
            "`{name}` has rows of {row} elements, not a multiple of the {} block of {}",
            kind.name, kind.block
        )));
    }
    let bytes = (elements / kind.block)
        .checked_mul(kind.type_size)
        .ok_or_else(|| invalid(format!("the byte count of `{name}` overflows 64 bits")))?;
    Ok(Tensor { name, kind, ne, elements, bytes, offset, span })
}

/// Tensors must follow each other in the data section, each at a multiple of the alignment
/// and padded to it (llama.cpp rejects anything else), and the last must end inside the file.
fn check_layout(gguf: &Gguf, file_len: Option<u64>) -> Result<(), Diagnostic> {
    let mut expected = 0u64;
    let mut data_end = 0u64;
    let overflow = |tensor: &Tensor| {
        Diagnostic::error("I110", tensor.span, format!("`{}` ends past 2^64 bytes", tensor.name))
    };
    for tensor in &gguf.tensors {
        if tensor.offset % gguf.alignment != 0 || tensor.offset != expected {
            let why = if tensor.offset % gguf.alignment != 0 {
                format!("is not a multiple of the alignment ({})", gguf.alignment)
            } else if tensor.offset < expected {
                format!("overlaps the previous tensor, which ends at {expected} (padded)")
            } else {
                format!("leaves a gap after the previous tensor, which ends at {expected} (padded)")
            };
            return Err(Diagnostic::error(
                "I112",
                tensor.span,
                format!(
                    "`{}` starts at byte {} of the data section, which {why}",
                    tensor.name, tensor.offset
                ),
            )
            .with_help(
                "tensors follow each other in the data section, each padded to the alignment",
            ));
        }
        data_end = tensor.offset.checked_add(tensor.bytes).ok_or_else(|| overflow(tensor))?;
        let padded = tensor.bytes.div_ceil(gguf.alignment).checked_mul(gguf.alignment);
        expected =
            padded.and_then(|p| tensor.offset.checked_add(p)).ok_or_else(|| overflow(tensor))?;
    }
    if let Some(len) = file_len
        && let Some(last) = gguf.tensors.last()
    {
        let end = gguf.data_offset.checked_add(data_end).ok_or_else(|| overflow(last))?;
        if end > len {
            return Err(Diagnostic::error(
                "I104",
                last.span,
                format!("the tensors end at byte {end} of the file, but the file has {len} bytes"),
            )
            .with_help("the file is truncated, or the header does not describe it"));
        }
    }
    Ok(())
}

/// The model of a GGUF file, or of the shards of a split GGUF (`split.no`, `split.count`;
/// the model's metadata is in the first shard). `shards` are `(file name, header)`.
pub fn model(shards: &[(String, Gguf)]) -> Result<ImportedModel, Vec<Problem>> {
    let main = check_split(shards)?;
    let (file, gguf) = &shards[main];
    let problem = |span: Span, message: String| Problem {
        file: file.clone(),
        diagnostic: Diagnostic::error("I111", span, message),
    };
    let Some(arch) = gguf.text("general.architecture").map(str::to_string) else {
        let span = gguf.get("general.architecture").map_or(Span::new(0, 4), |kv| kv.span);
        return Err(vec![problem(
            span,
            "no `general.architecture` (a string) in the metadata".to_string(),
        )]);
    };
    let tensors: Vec<&Tensor> = shards.iter().flat_map(|(_, g)| &g.tensors).collect();
    let mut reader = Reader { gguf, arch: &arch, file, problems: Vec::new(), notes: Vec::new() };
    let mut model = reader.shape(&tensors);
    let (weights, notes) =
        weights(gguf, &tensors).map_err(|d| vec![Problem { file: file.clone(), diagnostic: d }])?;
    model.params = Some(weights.params);
    model.weights = Some(weights);
    model.notes.splice(0..0, notes);
    if !reader.problems.is_empty() {
        return Err(reader.problems);
    }
    model.source = if shards.len() > 1 {
        format!("GGUF v{} ({} split shards)", gguf.version, shards.len())
    } else {
        format!("GGUF v{}", gguf.version)
    };
    Ok(model)
}

/// Checks the shards of a split GGUF against each other, and returns the index of the first.
fn check_split(shards: &[(String, Gguf)]) -> Result<usize, Vec<Problem>> {
    let Some((_, first)) = shards.first() else {
        return Err(vec![Problem {
            file: "checkpoint".to_string(),
            diagnostic: Diagnostic::error("I115", Span::default(), "no GGUF file to read"),
        }]);
    };
    let count = first.unsigned("split.count");
    if shards.len() == 1 && count.is_none_or(|c| c <= 1) {
        return Ok(0);
    }
    let mut problems = Vec::new();
    let mut problem = |file: &str, message: String| {
        problems.push(Problem {
            file: file.to_string(),
            diagnostic: Diagnostic::error("I115", Span::default(), message),
        });
    };
    let expected = u64::try_from(shards.len()).unwrap_or(u64::MAX);
    let mut seen = BTreeSet::new();
    let mut main = 0;
    let mut tensors = 0u64;
    for (index, (file, gguf)) in shards.iter().enumerate() {
        tensors = tensors.saturating_add(u64::try_from(gguf.tensors.len()).unwrap_or(u64::MAX));
        match (gguf.unsigned("split.count"), gguf.unsigned("split.no")) {
            (Some(count), Some(no)) if count == expected => {
                if !seen.insert(no) || no >= count {
                    problem(file, format!("split.no {no} is repeated or out of range"));
                }
                if no == 0 {
                    main = index;
                }
            }
            (Some(count), Some(_)) => problem(
                file,
                format!("split.count is {count}, but {} shards were given", shards.len()),
            ),
            _ => problem(
                file,
                "is not a shard of a split GGUF (no split.count and split.no)".to_string(),
            ),
        }
    }
    let declared = shards[main].1.unsigned("split.tensors.count");
    if let Some(declared) = declared
        && declared != tensors
    {
        problem(
            &shards[main].0,
            format!("split.tensors.count is {declared}, but the shards hold {tensors} tensors"),
        );
    }
    let mut names = BTreeSet::new();
    for (file, gguf) in shards {
        for tensor in &gguf.tensors {
            if !names.insert(tensor.name.as_str()) {
                problems.push(Problem {
                    file: file.clone(),
                    diagnostic: Diagnostic::error(
                        "I114",
                        tensor.span,
                        format!("the tensor `{}` is in two shards", tensor.name),
                    ),
                });
            }
        }
    }
    if problems.is_empty() { Ok(main) } else { Err(problems) }
}

struct Reader<'a> {
    gguf: &'a Gguf,
    arch: &'a str,
    file: &'a str,
    problems: Vec<Problem>,
    notes: Vec<String>,
}

impl Reader<'_> {
    /// `{arch}.{suffix}` as a count: absent is `None`, a per-layer array is a note, another type
    /// is `I111`.
    fn count(&mut self, suffix: &str) -> Option<u64> {
        let key = format!("{}.{suffix}", self.arch);
        let kv = self.gguf.get(&key)?;
        match kv.value {
            Value::Uint(n) => Some(n),
            Value::Int(n) if n >= 0 => u64::try_from(n).ok(),
            Value::Array { len, .. } => {
                self.notes.push(format!("{key} is per layer ({len} values): not represented"));
                None
            }
            _ => {
                self.problems.push(Problem {
                    file: self.file.to_string(),
                    diagnostic: Diagnostic::error(
                        "I111",
                        kv.span,
                        format!("`{key}` must be a non-negative integer"),
                    ),
                });
                None
            }
        }
    }

    fn shape(&mut self, tensors: &[&Tensor]) -> ImportedModel {
        let has = |name: &str| tensors.iter().any(|t| t.name == name);
        let layers = self.count("block_count");
        let hidden = self.count("embedding_length");
        let mut ffn = self.count("feed_forward_length");
        let heads = self.count("attention.head_count");
        let kv_heads = self.count("attention.head_count_kv").or(heads);
        let key_length = self.count("attention.key_length");
        let value_length = self.count("attention.value_length");
        let vocab = self.count("vocab_size").or_else(|| {
            match self.gguf.get("tokenizer.ggml.tokens").map(|kv| &kv.value) {
                Some(Value::Array { len, .. }) => Some(*len),
                _ => tensors
                    .iter()
                    .find(|t| t.name == "token_embd.weight")
                    .and_then(|t| t.ne.get(1).copied()),
            }
        });
        let context = self.count("context_length");

        let experts = self.count("expert_count").filter(|&e| e > 0);
        let moe = experts.map(|experts| {
            let expert_ffn = self.count("expert_feed_forward_length").or(ffn);
            let shared_ffn = self.count("expert_shared_feed_forward_length").filter(|&s| s > 0);
            let shared = self.count("expert_shared_count").unwrap_or_else(|| {
                u64::from(shared_ffn.is_some() || has("blk.0.ffn_up_shexp.weight"))
            });
            Moe {
                experts,
                experts_active: self.count("expert_used_count"),
                expert_ffn,
                shared_experts: shared,
                shared_expert_ffn: shared_ffn.filter(|s| Some(*s) != expert_ffn),
                dense_layers: self.count("leading_dense_block_count").unwrap_or(0),
            }
        });
        if ffn.is_none_or(|f| f == 0) {
            ffn = moe.as_ref().and_then(|m| m.expert_ffn);
        }

        let mla =
            self.count("attention.kv_lora_rank").filter(|&r| r > 0).and_then(|kv_lora_rank| {
                let rope = self.count("rope.dimension_count")?;
                let key = self.count("attention.key_length_mla").or(key_length)?;
                let value = self.count("attention.value_length_mla").or(value_length)?;
                Some(Mla {
                    kv_lora_rank,
                    q_lora_rank: self.count("attention.q_lora_rank").filter(|&r| r > 0),
                    qk_rope_dim: rope,
                    qk_nope_dim: key.saturating_sub(rope),
                    v_head_dim: value,
                })
            });
        if mla.is_none()
            && let (Some(k), Some(v)) = (key_length, value_length)
            && k != v
        {
            self.notes.push(format!(
                "value heads are {v} wide, key heads {k}: head_dim is the key width"
            ));
        }

        let window = self.count("attention.sliding_window").filter(|&w| w > 0);
        let global_every = window.and_then(|_| {
            self.count("attention.sliding_window_pattern").or(match self.arch {
                "gemma2" | "gpt-oss" => Some(2),
                "gemma3" => Some(6),
                "cohere2" => Some(4),
                _ => None,
            })
        });
        self.rope_note();

        let tied = has("token_embd.weight") && !has("output.weight");
        let qkv_bias = has("blk.0.attn_q.bias") || has("blk.0.attn_qkv.bias");
        ImportedModel {
            source: String::new(),
            title: self.gguf.text("general.name").map(str::to_string),
            architecture: Some(self.arch.to_string()),
            layers,
            hidden,
            ffn,
            heads,
            kv_heads,
            head_dim: if mla.is_some() { None } else { key_length },
            vocab,
            tied_embeddings: tied,
            qkv_bias,
            moe,
            mla,
            sliding_window: window,
            global_every,
            context_length: context,
            notes: std::mem::take(&mut self.notes),
            ..ImportedModel::default()
        }
    }

    fn rope_note(&mut self) {
        let prefix = format!("{}.rope.", self.arch);
        let fields: Vec<String> = self
            .gguf
            .kvs
            .iter()
            .filter(|kv| {
                kv.key.starts_with(&prefix) && kv.key != format!("{prefix}dimension_count")
            })
            .map(|kv| match &kv.value {
                Value::Uint(n) => format!("{} {n}", &kv.key[prefix.len()..]),
                Value::Int(n) => format!("{} {n}", &kv.key[prefix.len()..]),
                Value::Float(f) => format!("{} {f}", &kv.key[prefix.len()..]),
                Value::Text(t) => format!("{} {t}", &kv.key[prefix.len()..]),
                Value::Bool(b) => format!("{} {b}", &kv.key[prefix.len()..]),
                Value::Array { len, .. } => format!("{} ({len} values)", &kv.key[prefix.len()..]),
            })
            .collect();
        if !fields.is_empty() {
            self.notes.push(format!(
                "rope {} is not represented: it moves positions, not memory",
                fields.join(", ")
            ));
        }
    }
}

/// Totals per ggml type, the parameter count (every tensor's elements) and the preset.
fn weights(main: &Gguf, tensors: &[&Tensor]) -> Result<(Weights, Vec<String>), Diagnostic> {
    let overflow =
        || Diagnostic::error("I110", Span::default(), "the file's totals overflow 64 bits");
    let mut weights = Weights::default();
    for tensor in tensors {
        weights.params = weights.params.checked_add(tensor.elements).ok_or_else(overflow)?;
        weights.bytes = weights.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
        weights.tensors += 1;
        let totals = weights
            .by_dtype
            .entry(tensor.kind.name.to_string())
            .or_insert_with(DtypeTotals::default);
        totals.tensors += 1;
        totals.elements = totals.elements.checked_add(tensor.elements).ok_or_else(overflow)?;
        totals.bytes = totals.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
    }
    let mut notes = Vec::new();
    let preset = preset(main, tensors, &mut notes);
    weights.format = match preset.as_str() {
        "F32" => "fp32".to_string(),
        "F16" => "fp16".to_string(),
        "BF16" => "bf16".to_string(),
        other => other.to_ascii_lowercase(),
    };
    Ok((weights, notes))
}

/// The llama.cpp preset: `general.file_type` when the file has it, else guessed from the type
/// that holds most of the matrices' bytes.
fn preset(gguf: &Gguf, tensors: &[&Tensor], notes: &mut Vec<String>) -> String {
    if let Some(file_type) = gguf.unsigned("general.file_type") {
        if let Some((_, name)) =
            FILE_TYPES.iter().chain(&FILE_TYPES_LATER).find(|(id, _)| *id == file_type)
        {
            // A preset is named after the type most of its tensors get (Q4_K_M: Q4_K).
            let base = ["_S", "_M", "_L", "_MOE"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            if GgmlType::from_name(base).is_some() && !tensors.iter().any(|t| t.kind.name == base) {
                notes.push(format!(
                    "general.file_type says {name}, but no tensor is stored as {base}"
                ));
            }
            return (*name).to_string();
        }
        notes.push(format!("general.file_type {file_type} is not a known preset"));
    }
    let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
    for tensor in tensors.iter().filter(|t| t.ne.len() >= 2) {
        let total = by_type.entry(tensor.kind.name).or_insert(0);
        *total = total.saturating_add(tensor.bytes);
    }
    let Some((dominant, _)) =
        by_type.into_iter().max_by_key(|(name, bytes)| (*bytes, std::cmp::Reverse(*name)))
    else {
        return "F32".to_string();
    };
    let more_bits = |base: &str| {
        let high = GgmlType::from_name("Q6_K");
        tensors.iter().any(|t| {
            (t.name.ends_with("attn_v.weight") || t.name.contains("ffn_down"))
                && Some(t.kind) == high
        }) && base != "Q6_K"
    };
    let guess = match dominant {
        "Q4_K" if more_bits("Q4_K") => "Q4_K_M",
        "Q4_K" => "Q4_K_S",
        "Q5_K" if more_bits("Q5_K") => "Q5_K_M",
        "Q5_K" => "Q5_K_S",
        "Q3_K" => "Q3_K_M",
        "MXFP4" => "MXFP4_MOE",
        other => other,
    };
    notes
        .push(format!("no general.file_type: the preset {guess} is guessed from the tensor types"));
    guess.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_past_the_header_cap_is_i102_before_any_allocation() {
        let bytes = [0u8; 16];
        let mut cursor = Cursor { bytes: &bytes, pos: 0, file_len: None, complete: false };
        let Err(Stop::Bad(diagnostic)) = cursor.take(MAX_HEADER_BYTES + 1, "a value") else {
            panic!("a read past the cap must fail");
        };
        assert_eq!(diagnostic.code, "I102");
        // Within the cap, a partial buffer asks for more; a complete one is truncated.
        assert!(matches!(cursor.take(1 << 20, "a value"), Err(Stop::More(n)) if n == 1 << 20));
        let mut complete = Cursor { bytes: &bytes, pos: 0, file_len: Some(16), complete: true };
        assert!(matches!(complete.take(17, "a value"), Err(Stop::Bad(d)) if d.code == "I101"));
    }

    #[test]
    fn type_sizes_follow_gguf_py() {
        let size = |name: &str| GgmlType::from_name(name).map(|t| (t.block, t.type_size));
        assert_eq!(size("Q4_K"), Some((256, 144)));
        assert_eq!(size("Q6_K"), Some((256, 210)));
        assert_eq!(size("MXFP4"), Some((32, 17)));
        assert_eq!(size("IQ4_XS"), Some((256, 136)));
        assert_eq!(GgmlType::from_id(39).map(|t| t.name), Some("MXFP4"));
        assert_eq!(GgmlType::from_id(4), None, "Q4_2 was removed");
    }
}
