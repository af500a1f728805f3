//! `bitsandbytes "0.41.1"`: the bitsandbytes release a run with a 4-bit base used, and what
//! follows from it.
//!
//! Before 0.43.2 `MatMul4Bit.forward` kept its input on the autograd context
//! (`ctx.tensors = (A, B)`) although its backward never reads it, since bitsandbytes computes no
//! gradient for the frozen 4-bit weight. bitsandbytes PR #1270 ("fix QLoRA mem bug: delete
//! useless buffered activation", commit 9e75374, July 2024, first released in 0.43.2) keeps
//! `(None, B)` instead. The input is a plain attribute of the context, not a saved tensor, so it
//! lives as long as the graph does, whatever else would have freed it.

use super::fields::Fields;

/// A bitsandbytes release: major, minor and patch.
type Release = (u32, u32, u32);

/// The first release whose `MatMul4Bit` drops its input (PR #1270).
const DROPS_INPUTS: Release = (0, 43, 2);

/// `"0.41.1"`, `"0.42"` (patch 0): the numbers lead, anything after a `+` or a letter is
/// ignored.
fn parse(text: &str) -> Option<Release> {
    let mut parts = text.trim().split('.');
    let mut number = |required: bool| -> Option<u32> {
        match parts.next() {
            Some(part) => {
                let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            }
            None if required => None,
            None => Some(0),
        }
    };
    Some((number(true)?, number(true)?, number(false)?))
}

/// Whether the release written in the training section's `bitsandbytes` field keeps each 4-bit
/// layer's input through the step; `false` when none is written (a current release).
pub(super) fn keeps_inputs(fields: &Fields<'_>) -> bool {
    fields
        .quoted(
            "bitsandbytes",
            parse,
            "`bitsandbytes` takes a bitsandbytes release in quotes, such as \"0.41.1\"",
            "write the release's numbers: `bitsandbytes \"0.43.1\"`",
        )
        .is_some_and(|release| release < DROPS_INPUTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_read_three_numbers() {
        assert_eq!(parse("0.41.1"), Some((0, 41, 1)));
        assert_eq!(parse("0.42"), Some((0, 42, 0)));
        assert_eq!(parse("0.43.2.dev0"), Some((0, 43, 2)));
        assert_eq!(parse("1"), None);
        assert_eq!(parse("new"), None);
    }

    #[test]
    fn inputs_are_dropped_from_0_43_2() {
        let keeps = |t: &str| parse(t).is_some_and(|r| r < DROPS_INPUTS);
        assert!(keeps("0.41.1"));
        assert!(keeps("0.43.1"));
        assert!(!keeps("0.43.2"));
        assert!(!keeps("0.45.0"));
        // 0.100 is a later release than 0.43, not 0.10.
        assert!(!keeps("0.100.0"));
    }
}
