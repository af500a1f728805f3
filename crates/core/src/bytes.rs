//! Byte counts: a `u64` newtype with checked arithmetic and exact, float-free formatting.

use std::fmt;

use serde::Serialize;

use crate::ratio::Ratio;

#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
pub const TIB: u64 = 1 << 40;

impl Bytes {
    pub const ZERO: Bytes = Bytes(0);

    #[allow(
        clippy::trivially_copy_pass_by_ref,
        reason = "serde's skip_serializing_if passes a reference"
    )]
    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }

    pub fn checked_add(self, other: Bytes) -> Option<Bytes> {
        self.0.checked_add(other.0).map(Bytes)
    }

    pub fn checked_mul(self, factor: u64) -> Option<Bytes> {
        self.0.checked_mul(factor).map(Bytes)
    }

    /// `ceil(count × per_element)`: storage for `count` elements of a format that may pack
    /// several elements per byte.
    pub fn for_elements(count: u64, per_element: Ratio) -> Option<Bytes> {
        let exact = Ratio::int(i128::from(count)).checked_mul(per_element)?;
        u64::try_from(exact.ceil()).ok().map(Bytes)
    }

    /// Rounds `ratio` up to whole bytes, if it is a non-negative value that fits in `u64`.
    pub fn from_ratio_ceil(ratio: Ratio) -> Option<Bytes> {
        if ratio.is_negative() {
            return None;
        }
        u64::try_from(ratio.ceil()).ok().map(Bytes)
    }

    /// A short human form with a binary unit and two decimals, computed in integers:
    /// `14.96 GiB`, `512.00 MiB`, `900 B`.
    pub fn human(self) -> String {
        let (unit, name) = match self.0 {
            n if n >= TIB => (TIB, "TiB"),
            n if n >= GIB => (GIB, "GiB"),
            n if n >= MIB => (MIB, "MiB"),
            n if n >= KIB => (KIB, "KiB"),
            n => return format!("{n} B"),
        };
        // Round half up to hundredths: (n * 100 + unit / 2) / unit, in u128 to avoid overflow.
        let hundredths = (u128::from(self.0) * 100 + u128::from(unit) / 2) / u128::from(unit);
        format!("{}.{:02} {name}", hundredths / 100, hundredths % 100)
    }
}

impl fmt::Display for Bytes {
    /// The exact count with thousands separators: `16,060,522,496 B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::with_capacity(26);
        write_thousands(&mut text, self.0);
        write!(f, "{text} B")
    }
}

/// `8030261248` → `8,030,261,248`.
pub fn group_thousands(value: u64) -> String {
    let mut out = String::with_capacity(26);
    write_thousands(&mut out, value);
    out
}

/// Appends `value` with thousands separators to `out`, without allocating.
pub fn write_thousands(out: &mut String, value: u64) {
    let mut digits = [0u8; 20];
    let mut n = value;
    let mut len = 0;
    loop {
        // `n % 10` is below 10, so the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let digit = (n % 10) as u8;
        digits[len] = b'0' + digit;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in (0..len).rev() {
        out.push(char::from(digits[i]));
        if i > 0 && i % 3 == 0 {
            out.push(',');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_rounds_in_integers() {
        assert_eq!(Bytes(16_060_522_496).human(), "14.96 GiB");
        assert_eq!(Bytes(512 * MIB).human(), "512.00 MiB");
        assert_eq!(Bytes(900).human(), "900 B");
        assert_eq!(Bytes(u64::MAX).human(), "16777216.00 TiB");
    }

    #[test]
    fn display_groups_thousands() {
        assert_eq!(Bytes(8_030_261_248).to_string(), "8,030,261,248 B");
        assert_eq!(Bytes(999).to_string(), "999 B");
        assert_eq!(group_thousands(1000), "1,000");
    }

    #[test]
    fn packed_formats_round_up() {
        let half = Ratio::new(1, 2).unwrap();
        assert_eq!(Bytes::for_elements(3, half), Some(Bytes(2)));
        assert_eq!(Bytes::for_elements(u64::MAX, Ratio::int(2)), None);
    }
}
