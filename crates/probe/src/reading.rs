//! A value read from the hardware, or why it could not be read. Never a 0 for "unknown".

use serde::{Deserialize, Serialize};

/// A reading: the value, or the reason it is unavailable. In JSON it is the value itself, or
/// `{"unavailable": "reason"}`, so a consumer cannot mistake a missing figure for a zero.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reading<T> {
    Known(T),
    Unavailable { unavailable: String },
}

impl<T> Reading<T> {
    pub fn unavailable(reason: impl std::fmt::Display) -> Self {
        Reading::Unavailable { unavailable: reason.to_string() }
    }

    pub fn known(&self) -> Option<&T> {
        match self {
            Reading::Known(value) => Some(value),
            Reading::Unavailable { .. } => None,
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Reading::Known(value) => Reading::Known(f(value)),
            Reading::Unavailable { unavailable } => Reading::Unavailable { unavailable },
        }
    }
}

impl<T: Copy> Reading<T> {
    pub fn value(&self) -> Option<T> {
        self.known().copied()
    }
}

impl<T, E: std::fmt::Display> From<Result<T, E>> for Reading<T> {
    fn from(result: Result<T, E>) -> Self {
        match result {
            Ok(value) => Reading::Known(value),
            Err(error) => Reading::unavailable(error.to_string()),
        }
    }
}

/// Formats bytes for people: `79.65 GiB`. JSON keeps exact bytes.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    #[expect(clippy::cast_precision_loss, reason = "display only; JSON keeps exact bytes")]
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.2} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_is_not_zero_in_json() {
        let r: Reading<u64> = Reading::unavailable("not supported");
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"unavailable":"not supported"}"#);
        let k: Reading<u64> = Reading::Known(0);
        assert_eq!(serde_json::to_string(&k).unwrap(), "0");
        let back: Reading<u64> = serde_json::from_str(r#"{"unavailable":"x"}"#).unwrap();
        assert_eq!(back.value(), None);
    }

    #[test]
    fn bytes_for_people() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(85_520_809_984), "79.65 GiB");
    }
}
