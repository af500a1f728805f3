//! Values across the wasm boundary as JSON text: `serde_json` on this side, `JSON.parse` and
//! `JSON.stringify` on the other.
//!
//! Byte counts are JavaScript numbers, exact up to 2^53: a larger integer makes the conversion
//! fail (the export then says so) rather than arrive rounded.

use std::io;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::ser::{CompactFormatter, Formatter};
use tsify::{Ts, Tsify};
use wasm_bindgen::JsValue;

/// The largest integer a JavaScript number holds exactly.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// `value` as JSON text whose integers are all exact JavaScript numbers.
pub fn to_json<T: Serialize>(value: &T) -> Result<String, String> {
    let mut out = Vec::with_capacity(4096);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, SafeNumbers);
    value.serialize(&mut serializer).map_err(|error| error.to_string())?;
    String::from_utf8(out).map_err(|error| error.to_string())
}

/// `value` as a JavaScript value, through `JSON.parse`.
pub fn to_js<T: Serialize + Tsify>(value: &T) -> Result<Ts<T>, String> {
    let text = to_json(value)?;
    js_sys::JSON::parse(&text)
        .map(Ts::new_unchecked)
        .map_err(|_| "JSON.parse refused the value".to_string())
}

/// A JavaScript value as `T`, through `JSON.stringify`.
pub fn from_js<T: DeserializeOwned>(value: &JsValue) -> Result<T, String> {
    let text = js_sys::JSON::stringify(value)
        .ok()
        .and_then(|text| text.as_string())
        .ok_or_else(|| "not a JSON value".to_string())?;
    serde_json::from_str(&text).map_err(|error| error.to_string())
}

/// serde_json's compact output, refusing integers that a JavaScript number would round.
struct SafeNumbers;

fn unsafe_number(value: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{value} is beyond 2^53"))
}

impl Formatter for SafeNumbers {
    fn write_u64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: u64) -> io::Result<()> {
        if value > MAX_SAFE_INTEGER {
            return Err(unsafe_number(value));
        }
        CompactFormatter.write_u64(writer, value)
    }

    fn write_i64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: i64) -> io::Result<()> {
        if value.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(unsafe_number(value));
        }
        CompactFormatter.write_i64(writer, value)
    }

    fn write_u128<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: u128) -> io::Result<()> {
        if value > u128::from(MAX_SAFE_INTEGER) {
            return Err(unsafe_number(value));
        }
        CompactFormatter.write_u128(writer, value)
    }

    fn write_i128<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: i128) -> io::Result<()> {
        if value.unsigned_abs() > u128::from(MAX_SAFE_INTEGER) {
            return Err(unsafe_number(value));
        }
        CompactFormatter.write_i128(writer, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_beyond_2_pow_53_are_refused() {
        assert_eq!(to_json(&[MAX_SAFE_INTEGER]).unwrap(), "[9007199254740991]");
        assert!(to_json(&[MAX_SAFE_INTEGER + 1]).unwrap_err().contains("2^53"));
        assert!(to_json(&(-(1i64 << 60))).is_err());
        assert_eq!(to_json(&(-5i64, 1.5f64, "x")).unwrap(), r#"[-5,1.5,"x"]"#);
    }
}
