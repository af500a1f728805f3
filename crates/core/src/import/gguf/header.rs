//! Reading a GGUF header from the bytes at hand, asking for more when it continues past them.

use std::collections::BTreeMap;

use super::types::GgmlType;
use super::{
    DEFAULT_ALIGNMENT, Gguf, Kv, MAX_ARRAY_LEN, MAX_DIMS, MAX_HEADER_BYTES, MAX_KVS,
    MAX_NAME_BYTES, MAX_STRING_BYTES, MAX_TENSORS, Tensor, Value,
};
use crate::diagnostic::Diagnostic;
use crate::import::Parsed;
use crate::span::Span;

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
}
