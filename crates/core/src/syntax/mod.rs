//! Text to syntax tree: the grammar's interpreter, error recovery, and lowering into
//! [`crate::ast`].
//!
//! Parsing first tries the whole file. When that fails, the file is cut into its top-level
//! declarations and each is parsed on its own, so one typo does not hide the errors after it,
//! and the declarations that do parse still reach the checker.

mod lower;
mod names;
mod peg;
#[cfg(test)]
mod tests;

use crate::ast::File;
use crate::diagnostic::Diagnostic;
use crate::limits::{MAX_NESTING, MAX_SOURCE_BYTES};
use crate::span::Span;

pub(crate) use lower::literal_diagnostic;

/// Parses `source` into a syntax tree and the diagnostics found on the way. The tree holds every
/// declaration that could be read, even when others could not.
pub fn parse(source: &str) -> (File, Vec<Diagnostic>) {
    if let Some(diagnostic) = check_limits(source) {
        return (File::default(), vec![diagnostic]);
    }
    match parse_chunk(source, 0) {
        Ok(result) => result,
        Err(first_error) => {
            let mut file = File::default();
            let mut diagnostics = Vec::new();
            let chunks = split_declarations(source);
            for (start, end) in chunks {
                match parse_chunk(&source[start..end], start) {
                    Ok((chunk_file, chunk_diagnostics)) => {
                        file.declarations.extend(chunk_file.declarations);
                        diagnostics.extend(chunk_diagnostics);
                    }
                    Err(error) => diagnostics.push(error),
                }
            }
            if !diagnostics.iter().any(Diagnostic::is_error) {
                // The chunks parse alone but not together (for example two declarations on one
                // line): report the whole-file error.
                diagnostics.push(first_error);
            }
            (file, diagnostics)
        }
    }
}

/// Parses one piece of the source whose first byte is at `offset` in the whole text.
fn parse_chunk(text: &str, offset: usize) -> Result<(File, Vec<Diagnostic>), Diagnostic> {
    match peg::parse(peg::Rule::file, text) {
        Ok(tree) => Ok(lower::lower_file(tree.root(), offset)),
        Err(error) => Err(names::syntax_diagnostic(&error, text, offset)),
    }
}

fn check_limits(source: &str) -> Option<Diagnostic> {
    if source.len() > MAX_SOURCE_BYTES {
        return Some(
            Diagnostic::error(
                "E002",
                Span::new(0, 0),
                format!(
                    "the input is {} bytes; the limit is {MAX_SOURCE_BYTES} bytes",
                    source.len()
                ),
            )
            .with_help("split the workloads into several files"),
        );
    }
    let mut depth = 0usize;
    for (offset, token) in scan(source) {
        match token {
            b'{' | b'(' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(
                        Diagnostic::error(
                            "E002",
                            Span::new(offset, offset + 1),
                            format!("nesting is deeper than the limit of {MAX_NESTING} levels"),
                        )
                        .with_help("blocks and parentheses nest at most 64 deep"),
                    );
                }
            }
            b'}' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The structural bytes of `source` (`{ } ( ) \n \r`) with their offsets, skipping strings and
/// comments. A `\r` ends a comment or a string as `\n` does, because the grammar's line ends
/// include a lone `\r`: what follows it is code, and its brackets count.
fn scan(source: &str) -> impl Iterator<Item = (usize, u8)> + '_ {
    let bytes = source.as_bytes();
    let mut in_string = false;
    let mut in_comment = false;
    let mut escaped = false;
    bytes.iter().enumerate().filter_map(move |(offset, &byte)| {
        if byte == b'\n' || byte == b'\r' {
            in_comment = false;
            in_string = false;
            return Some((offset, byte));
        }
        if in_comment {
            return None;
        }
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            return None;
        }
        match byte {
            b'#' => in_comment = true,
            b'"' => in_string = true,
            b'{' | b'}' | b'(' | b')' => return Some((offset, byte)),
            _ => {}
        }
        None
    })
}

/// Cuts the source into top-level declarations: each starts at a line that begins, at brace
/// depth zero, with a letter. Used only to recover after a syntax error.
fn split_declarations(source: &str) -> Vec<(usize, usize)> {
    let mut starts = Vec::new();
    let mut depth = 0usize;
    let mut line_start = 0usize;
    let mut structure = scan(source).peekable();
    loop {
        let at_top = depth == 0;
        if at_top && source[line_start..].chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            starts.push(line_start);
        }
        // Walk the structural bytes to the end of this line.
        let mut line_end = None;
        while let Some(&(offset, byte)) = structure.peek() {
            structure.next();
            match byte {
                b'{' => depth += 1,
                b'}' => depth = depth.saturating_sub(1),
                b'\n' => {
                    line_end = Some(offset);
                    break;
                }
                _ => {}
            }
        }
        match line_end {
            Some(end) => line_start = end + 1,
            None => break,
        }
    }
    if starts.first() != Some(&0) {
        // Whatever precedes the first declaration is parsed too, so garbage there is reported.
        starts.insert(0, 0);
    }
    let mut chunks = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(source.len());
        chunks.push((start, end));
    }
    chunks
}
