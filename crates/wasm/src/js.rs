//! Values across the wasm boundary: results as JSON text (`serde_json` here, one `JSON.parse`
//! there), requests read field by field from the JavaScript object. Requests are small, and
//! reading them directly keeps serde_json's parser and float formatting out of the calculator's
//! module (the importers' module has them anyway).
//!
//! Byte counts are JavaScript numbers, exact up to 2^53: a larger integer makes the conversion
//! fail (the export then says so) rather than arrive rounded.

use std::io;

use js_sys::{Array, Object, Reflect};
use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};
use tsify::{Ts, Tsify};
use wasm_bindgen::{JsCast, JsValue};

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

/// A plain JavaScript object whose keys are all among `known` (a request's fields), else what is
/// wrong with it, in serde's words (`unknown field`, `invalid type`).
pub fn object(value: &JsValue, known: &[&str]) -> Result<Object, String> {
    if !value.is_object() || Array::is_array(value) {
        return Err(format!("invalid type: {}, expected an object", kind(value)));
    }
    let object: Object = value.clone().unchecked_into();
    for key in Object::keys(&object) {
        let key = key.as_string().unwrap_or_default();
        if !known.contains(&key.as_str()) {
            return Err(format!("unknown field `{key}`, expected one of `{}`", known.join("`, `")));
        }
    }
    Ok(object)
}

/// The field `name` of `object` (`undefined` when it is missing).
pub fn field(object: &Object, name: &str) -> JsValue {
    Reflect::get(object, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

/// A required string field.
pub fn string(object: &Object, name: &str) -> Result<String, String> {
    let value = field(object, name);
    if value.is_undefined() {
        return Err(format!("missing field `{name}`"));
    }
    value
        .as_string()
        .ok_or_else(|| format!("`{name}`: invalid type: {}, expected a string", kind(&value)))
}

/// An optional boolean field (`false` when missing).
pub fn flag(object: &Object, name: &str) -> Result<bool, String> {
    let value = field(object, name);
    if value.is_undefined() {
        return Ok(false);
    }
    value
        .as_bool()
        .ok_or_else(|| format!("`{name}`: invalid type: {}, expected a boolean", kind(&value)))
}

/// A required array field, each element read by `element`.
pub fn list<T>(
    object: &Object,
    name: &str,
    element: impl Fn(&JsValue) -> Option<T>,
    expected: &str,
) -> Result<Vec<T>, String> {
    let value = field(object, name);
    if value.is_undefined() {
        return Err(format!("missing field `{name}`"));
    }
    if !Array::is_array(&value) {
        return Err(format!("`{name}`: invalid type: {}, expected an array", kind(&value)));
    }
    let array: Array = value.unchecked_into();
    array
        .iter()
        .enumerate()
        .map(|(index, item)| {
            element(&item).ok_or_else(|| {
                format!("`{name}[{index}]`: invalid value: {}, expected {expected}", kind(&item))
            })
        })
        .collect()
}

/// A whole number from 0 to 2^53 - 1, as JavaScript holds it exactly.
pub fn whole_number(value: &JsValue) -> Option<u64> {
    let number = value.as_f64()?;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "checked to be a whole number within 0..=2^53 - 1 first"
    )]
    let whole = (number.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER as f64).contains(&number))
        .then_some(number as u64);
    whole
}

/// How a JavaScript value reads in an error message.
fn kind(value: &JsValue) -> String {
    if value.is_null() {
        "null".into()
    } else if value.is_undefined() {
        "undefined".into()
    } else if let Some(text) = value.as_string() {
        format!("string {text:?}")
    } else if value.as_f64().is_some() {
        // JavaScript's own text for the number: no float formatting in this module.
        let text = js_sys::JSON::stringify(value).ok().and_then(|t| t.as_string());
        format!("number {}", text.unwrap_or_default())
    } else if Array::is_array(value) {
        "array".into()
    } else if value.as_bool().is_some() {
        "boolean".into()
    } else {
        "object".into()
    }
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
