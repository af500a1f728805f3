//! Exact rational numbers for the language's arithmetic.
//!
//! `1.5 GiB`, `70.6 billion` and `10 %` are all exact here: no float ever touches a budget, so
//! the same input gives bit-identical results on every target. Every operation is checked and
//! reports overflow as `None`; the caller turns that into a diagnostic.

use std::cmp::Ordering;
use std::fmt;

/// `num / den` in lowest terms, with `den > 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ratio {
    num: i128,
    den: i128,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    // Byte counts and their factors fit in 64 bits, where division is a single instruction
    // and the binary method needs none; 128-bit remainders are library calls.
    if let (Ok(x), Ok(y)) = (u64::try_from(a.unsigned_abs()), u64::try_from(b.unsigned_abs())) {
        return i128::from(gcd_u64(x, y));
    }
    a = a.abs();
    b = b.abs();
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `a / g` for a divisor `g` of `a` (a gcd, at least 1). Byte counts and their factors fit in
/// 64 bits, where division is one instruction, natively and in wasm; 128-bit division is a
/// library routine, and division by 1 needs none.
fn divide_exact(a: i128, g: i128) -> i128 {
    if g == 1 {
        return a;
    }
    match (i64::try_from(a), i64::try_from(g)) {
        (Ok(a), Ok(g)) => i128::from(a / g),
        _ => a / g,
    }
}

/// Stein's binary greatest common divisor.
fn gcd_u64(mut a: u64, mut b: u64) -> u64 {
    if a == 0 || b == 0 {
        return a | b;
    }
    let shift = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

impl Ratio {
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };
    pub const ONE: Ratio = Ratio { num: 1, den: 1 };

    /// `num / den`, reduced; `None` if `den` is zero or the reduction overflows.
    pub fn new(num: i128, den: i128) -> Option<Ratio> {
        if den == 0 {
            return None;
        }
        let g = gcd(num, den);
        let (mut num, mut den) = (divide_exact(num, g), divide_exact(den, g));
        if den < 0 {
            num = num.checked_neg()?;
            den = den.checked_neg()?;
        }
        Some(Ratio { num, den })
    }

    pub fn int(value: i128) -> Ratio {
        Ratio { num: value, den: 1 }
    }

    pub fn numer(self) -> i128 {
        self.num
    }

    pub fn denom(self) -> i128 {
        self.den
    }

    pub fn is_integer(self) -> bool {
        self.den == 1
    }

    pub fn is_negative(self) -> bool {
        self.num < 0
    }

    pub fn checked_add(self, other: Ratio) -> Option<Ratio> {
        if self.den == 1 && other.den == 1 {
            return Some(Ratio { num: self.num.checked_add(other.num)?, den: 1 });
        }
        let g = gcd(self.den, other.den);
        let lhs = self.num.checked_mul(other.den / g)?;
        let rhs = other.num.checked_mul(self.den / g)?;
        Ratio::new(lhs.checked_add(rhs)?, (self.den / g).checked_mul(other.den)?)
    }

    pub fn checked_sub(self, other: Ratio) -> Option<Ratio> {
        self.checked_add(other.checked_neg()?)
    }

    pub fn checked_neg(self) -> Option<Ratio> {
        Some(Ratio { num: self.num.checked_neg()?, den: self.den })
    }

    pub fn checked_mul(self, other: Ratio) -> Option<Ratio> {
        if self.den == 1 && other.den == 1 {
            // Integers: the common case in budgets, and i128 division is slow.
            return Some(Ratio { num: self.num.checked_mul(other.num)?, den: 1 });
        }
        // Cross-reduce first so that products of already-reduced values stay small.
        let g1 = gcd(self.num, other.den).max(1);
        let g2 = gcd(other.num, self.den).max(1);
        let num = divide_exact(self.num, g1).checked_mul(divide_exact(other.num, g2))?;
        let den = divide_exact(self.den, g2).checked_mul(divide_exact(other.den, g1))?;
        Ratio::new(num, den)
    }

    pub fn checked_div(self, other: Ratio) -> Option<Ratio> {
        if other.num == 0 {
            return None;
        }
        self.checked_mul(Ratio::new(other.den, other.num)?)
    }

    /// `10^exp` for `exp` in `0..=38`.
    pub fn pow10(exp: u32) -> Option<Ratio> {
        10i128.checked_pow(exp).map(Ratio::int)
    }

    /// Rounds toward positive infinity.
    pub fn ceil(self) -> i128 {
        if self.den == 1 {
            // Most byte counts are whole already, and i128 division is a software routine in
            // wasm: skip it.
            return self.num;
        }
        let q = self.num.div_euclid(self.den);
        if self.num.rem_euclid(self.den) == 0 { q } else { q + 1 }
    }

    /// Rounds toward negative infinity.
    pub fn floor(self) -> i128 {
        if self.den == 1 {
            return self.num;
        }
        self.num.div_euclid(self.den)
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ratio {
    fn cmp(&self, other: &Self) -> Ordering {
        // Both denominators are positive, so cross-multiplication keeps the order. Widen through
        // the subtraction's sign to avoid overflow on huge values.
        match (self.num.checked_mul(other.den), other.num.checked_mul(self.den)) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => self.floor().cmp(&other.floor()).then_with(|| {
                let a = Ratio { num: self.num.rem_euclid(self.den), den: self.den };
                let b = Ratio { num: other.num.rem_euclid(other.den), den: other.den };
                a.cmp(&b)
            }),
        }
    }
}

impl fmt::Display for Ratio {
    /// Integers print plainly; other values print as a decimal when the denominator has only
    /// factors 2 and 5, otherwise as `num/den`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            return write!(f, "{}", self.num);
        }
        let mut den = self.den;
        let mut digits = 0u32;
        while den % 10 == 0 || den % 2 == 0 || den % 5 == 0 {
            den /= if den % 10 == 0 {
                10
            } else if den % 2 == 0 {
                2
            } else {
                5
            };
            digits += 1;
            if digits > 30 {
                break;
            }
        }
        if den != 1 || digits > 30 {
            return write!(f, "{}/{}", self.num, self.den);
        }
        // Scale to an integer over 10^k with the fewest digits that represent it exactly.
        for k in 1..=digits * 2 {
            let Some(scale) = 10i128.checked_pow(k) else { break };
            if scale % self.den == 0 {
                let Some(scaled) = self.num.checked_mul(scale / self.den) else { break };
                let sign = if scaled < 0 { "-" } else { "" };
                let scaled = scaled.unsigned_abs();
                let scale = scale.unsigned_abs();
                let frac = format!("{:0width$}", scaled % scale, width = k as usize);
                return write!(f, "{sign}{}.{}", scaled / scale, frac.trim_end_matches('0'));
            }
        }
        write!(f, "{}/{}", self.num, self.den)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(num: i128, den: i128) -> Ratio {
        Ratio::new(num, den).unwrap()
    }

    #[test]
    fn arithmetic_is_exact_and_reduced() {
        assert_eq!(r(1, 10).checked_add(r(2, 10)), Some(r(3, 10)));
        assert_eq!(r(3, 2).checked_mul(Ratio::int(1 << 30)), Some(Ratio::int(1_610_612_736)));
        assert_eq!(r(1, 3).checked_div(r(2, 3)), Some(r(1, 2)));
        assert_eq!(r(1, 3).checked_div(Ratio::ZERO), None);
        assert_eq!(Ratio::int(i128::MAX).checked_add(Ratio::ONE), None);
        assert_eq!(r(-4, -6), r(2, 3));
        // Past 64 bits the reduction takes the 128-bit division.
        let big = i128::from(u64::MAX) * 6;
        assert_eq!(r(big, 4), r(i128::from(u64::MAX) * 3, 2));
        assert_eq!(r(big, 4).numer(), i128::from(u64::MAX) * 3);
        assert_eq!(r(3, 2).checked_mul(r(big, 9)), Some(Ratio::int(i128::from(u64::MAX))));
        assert_eq!(r(7, 2).ceil(), 4);
        assert_eq!(r(-7, 2).floor(), -4);
        assert_eq!(Ratio::int(-7).ceil(), -7);
    }

    #[test]
    fn the_64_bit_gcd_agrees_with_euclid() {
        fn euclid(mut a: u64, mut b: u64) -> u64 {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        }
        let values = [0, 1, 2, 3, 6, 9, 10, 12, 100, 1 << 20, 3 << 40, 85_899_345_920, u64::MAX];
        for a in values {
            for b in values {
                assert_eq!(gcd_u64(a, b), euclid(a, b), "gcd({a}, {b})");
            }
        }
        assert_eq!(gcd(-12, 18), 6);
        assert_eq!(gcd(i128::from(u64::MAX) + 1, 1 << 40), 1 << 40);
    }

    #[test]
    fn rounding_goes_the_right_way_for_negative_values() {
        assert_eq!(r(7, 2).ceil(), 4);
        assert_eq!(r(7, 2).floor(), 3);
        assert_eq!(r(-7, 2).ceil(), -3);
        assert_eq!(r(-7, 2).floor(), -4);
        assert_eq!(Ratio::int(5).ceil(), 5);
    }

    #[test]
    fn display_prefers_decimals() {
        assert_eq!(r(3, 2).to_string(), "1.5");
        assert_eq!(r(-1, 8).to_string(), "-0.125");
        assert_eq!(r(1, 3).to_string(), "1/3");
        assert_eq!(Ratio::int(42).to_string(), "42");
    }

    #[test]
    fn ordering_compares_values() {
        assert!(r(1, 3) < r(1, 2));
        assert!(r(-1, 2) < Ratio::ZERO);
        assert!(Ratio::int(i128::MAX) > r(i128::MAX - 1, 2));
    }
}
