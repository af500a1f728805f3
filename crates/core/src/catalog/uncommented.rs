//! Comments removed from `.vram` text at compile time, so that the built-in catalog is parsed
//! (and shipped in the web page's module) without them.

/// `$text` (a constant `&'static str`) without its comments, as a `&'static str` constant.
macro_rules! uncommented {
    ($text:expr) => {{
        use $crate::catalog::uncommented::{bytes, length};
        const TEXT: &str = $text;
        const BYTES: [u8; length(TEXT)] = bytes(TEXT);
        match core::str::from_utf8(&BYTES) {
            Ok(text) => text,
            Err(_) => panic!("removing comments split a character"),
        }
    }};
}
pub(crate) use uncommented;

/// Copies the bytes of `text` that are not part of a comment into `out`, as far as it reaches,
/// and returns how many there are. A comment runs from a `#` outside a string to the line
/// break, which is kept; a string runs from `"` to the next `"` not escaped by `\` (the
/// grammar's `string` rule). One loop over bytes because it runs in `const` evaluation, where
/// closures and iterators are not available: the two functions below call it with an array to
/// fill, or with none to count.
const fn scan(text: &str, out: &mut [u8]) -> usize {
    let text = text.as_bytes();
    let (mut at, mut kept) = (0, 0);
    let (mut in_string, mut in_comment) = (false, false);
    while at < text.len() {
        let byte = text[at];
        if in_comment && !matches!(byte, b'\n' | b'\r') {
            at += 1;
            continue;
        }
        in_comment = false;
        if in_string {
            match byte {
                b'"' => in_string = false,
                // The escaped character is kept as it is, whatever it is.
                b'\\' if at + 1 < text.len() => {
                    if kept < out.len() {
                        out[kept] = byte;
                    }
                    kept += 1;
                    at += 1;
                }
                _ => {}
            }
        } else if byte == b'#' {
            in_comment = true;
            at += 1;
            continue;
        } else if byte == b'"' {
            in_string = true;
        }
        if kept < out.len() {
            out[kept] = text[at];
        }
        kept += 1;
        at += 1;
    }
    kept
}

/// How many bytes of `text` are not comments.
pub(super) const fn length(text: &str) -> usize {
    scan(text, &mut [])
}

/// The bytes of `text` that are not comments; `N` is [`length`] of it.
pub(super) const fn bytes<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0; N];
    scan(text, &mut out);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn comments_go_and_strings_and_line_breaks_stay() {
        const SOURCE: &str =
            "# head\ndevice d \"a # b \\\" # c\" { # tail\r\n  memory 1 GiB#x\n}\n#";
        const EMPTY: &str = "";
        assert_eq!(uncommented!(SOURCE), "\ndevice d \"a # b \\\" # c\" { \r\n  memory 1 GiB\n}\n");
        assert_eq!(uncommented!(EMPTY), "");
    }
}
