//! Human names for grammar rules, and the conversion of syntax errors into diagnostics.
//!
//! The match in [`rule_name`] has no wildcard arm: adding a rule to the grammar fails to compile
//! until the rule has a name a user can read.

use super::peg::{Rule, SyntaxError};
use crate::diagnostic::Diagnostic;
use crate::span::Span;

/// What a user should read for `rule` in "expected ..." messages.
pub(super) fn rule_name(rule: Rule) -> &'static str {
    match rule {
        Rule::EOI => "the end of the file",
        Rule::WHITESPACE => "a space",
        Rule::COMMENT => "a comment",
        Rule::terminator => "the end of the line",
        // Pest names the whole-file rule when nothing at all matched at the top level.
        Rule::file | Rule::declaration | Rule::block_declaration | Rule::declaration_kind => {
            "a declaration (device, machine, model, workload, headroom or check)"
        }
        Rule::check => "a check such as `check chat on l4`",
        Rule::keyword_check => "`check`",
        Rule::keyword_on => "`on`",
        Rule::co_resident => "another workload such as `+ embedder`",
        Rule::find => "a query such as `find max sessions for chat on l4`",
        Rule::find_goal => {
            "what to find: `max sessions`, `min gpus of l4`, `machines in catalog`, `precision`"
        }
        Rule::find_max => "`max` and a parameter such as `sessions`",
        Rule::find_min => "`min gpus of` and a device",
        Rule::find_in => "`machines in catalog`",
        Rule::keyword_find => "`find`",
        Rule::keyword_for => "`for`",
        Rule::keyword_max => "`max`",
        Rule::keyword_min => "`min`",
        Rule::keyword_of => "`of`",
        Rule::keyword_in => "`in`",
        Rule::target => "a device, a machine, or a count such as `2 x h100-sxm-80gb`",
        Rule::split => "a split such as `split tensor 2`",
        Rule::keyword_split => "`split`",
        Rule::stage_layers => "layers per pipeline stage such as `layers 24 56`",
        Rule::keyword_layers => "`layers`",
        Rule::headroom_choice => "a headroom rule such as `headroom strict`",
        Rule::keyword_headroom => "`headroom`",
        Rule::block => "a block `{ ... }`",
        Rule::field => "a field such as `layers 32`",
        Rule::value => "a value",
        Rule::count_of => "a count such as `8 x h100-sxm-80gb`",
        Rule::times => "`x`",
        Rule::word => "a word",
        Rule::title => "a title in double quotes",
        Rule::string => "a string in double quotes",
        Rule::string_content => "the text of a string",
        Rule::name => "a name",
        Rule::name_char => "a letter, digit, `_` or `-`",
        Rule::expr => "a quantity such as `24 GiB`",
        Rule::primary => "a number or `(`",
        Rule::group => "`(`",
        Rule::neg | Rule::prefix | Rule::sub => "`-`",
        Rule::postfix => "a unit",
        Rule::infix => "an operator (`+ - * /`)",
        Rule::add => "`+`",
        Rule::mul => "`*`",
        Rule::div => "`/`",
        Rule::number => "a number",
        Rule::unit => "a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, tokens, %, billion...)",
    }
}

/// Converts a syntax error on a chunk starting at byte `offset` into our diagnostic.
pub(super) fn syntax_diagnostic(error: &SyntaxError, text: &str, offset: usize) -> Diagnostic {
    let start = error.pos;
    let found = describe_found(text, start);
    // At a line's end, "or the end of the line" is not a choice: it is what was found.
    let at_line_end = matches!(found.as_str(), "the end of the line" | "the end of the file");
    let expected = group_expected(&error.positives, at_line_end);
    let message = if expected.is_empty() {
        let unexpected: Vec<&str> = error.negatives.iter().map(|rule| rule_name(*rule)).collect();
        format!("unexpected {}", unexpected.join(" or "))
    } else {
        format!("expected {}, found {found}", join_or(&expected))
    };
    // Point at the offending token (at least one character) so the caret is visible.
    let end = next_token_end(text, start);
    if text[start.min(text.len())..].trim().is_empty()
        && let Some(open) = unclosed_brace(text)
    {
        return Diagnostic::error(
            "E001",
            Span::new(open + offset, open + offset + 1),
            "this `{` is never closed: the file ends inside its block",
        )
        .with_help("add the missing `}`");
    }
    let mut diagnostic =
        Diagnostic::error("E001", Span::new(start + offset, end + offset), message);
    if let Some(help) = help_for(text, start) {
        diagnostic = diagnostic.with_help(help);
    }
    diagnostic
}

/// Names the expected rules, folding the long lists pest gives after a value into phrases.
fn group_expected(positives: &[Rule], at_line_end: bool) -> Vec<&'static str> {
    let continues_value = |rule: &&Rule| {
        matches!(rule, Rule::add | Rule::sub | Rule::mul | Rule::div | Rule::unit | Rule::times)
    };
    let starts_value = |rule: &&Rule| {
        matches!(
            rule,
            Rule::block | Rule::name | Rule::word | Rule::expr | Rule::string | Rule::count_of
        )
    };
    let operators = positives.iter().any(|r| continues_value(&r));
    let values = positives.iter().filter(starts_value).count() >= 2;
    let mut expected = match (operators, values, at_line_end) {
        (true, true, false) => vec!["another value, an operator, a unit, or the end of the line"],
        (true, true, true) => vec!["another value, an operator or a unit"],
        (true, false, _) => vec!["an operator or a unit"],
        (false, true, false) => vec!["a value, a block, or the end of the line"],
        (false, true, true) => vec!["a value or a block"],
        (false, false, _) => Vec::new(),
    };
    for rule in positives {
        if continues_value(&rule) || (values && starts_value(&rule)) {
            continue;
        }
        let name = rule_name(*rule);
        if !expected.contains(&name) {
            expected.push(name);
        }
    }
    expected
}

/// The last `{` that is not closed, skipping strings and comments.
fn unclosed_brace(text: &str) -> Option<usize> {
    let mut open = Vec::new();
    for (offset, byte) in super::scan(text) {
        match byte {
            b'{' => open.push(offset),
            b'}' => {
                open.pop();
            }
            _ => {}
        }
    }
    open.pop()
}

fn join_or(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn describe_found(text: &str, pos: usize) -> String {
    let rest = text.get(pos..).unwrap_or("");
    match rest.chars().next() {
        None => "the end of the file".to_string(),
        Some('\n' | '\r') => "the end of the line".to_string(),
        Some(_) => {
            let token = &rest[..next_token_end(text, pos) - pos];
            format!("`{token}`")
        }
    }
}

/// The end of the token starting at `pos`: a run of name characters, or one character.
fn next_token_end(text: &str, pos: usize) -> usize {
    let rest = text.get(pos..).unwrap_or("");
    let word: usize = rest
        .char_indices()
        .take_while(|(_, c)| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .map(|(i, c)| i + c.len_utf8())
        .last()
        .unwrap_or(0);
    if word > 0 {
        return pos + word;
    }
    match rest.chars().next() {
        Some('\n' | '\r') | None => pos,
        Some(c) => pos + c.len_utf8(),
    }
}

/// A hint for common slips, judged from the text at the error.
fn help_for(text: &str, pos: usize) -> Option<String> {
    let rest = text.get(pos..).unwrap_or("");
    if rest.starts_with('=') || rest.starts_with(':') {
        return Some("fields are written `key value`, without `=` or `:`".to_string());
    }
    if rest.starts_with('"') {
        return Some(
            "a title comes right after the name: `model llama3-8b \"Llama 3 8B\" {`".into(),
        );
    }
    let before = text.get(..pos).unwrap_or("").trim_end();
    if before.ends_with('{') && rest.starts_with('}') {
        return None;
    }
    let word: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    let keywords = ["device", "machine", "model", "workload", "headroom", "check"];
    if let Some(keyword) = crate::check::suggest(&word, &keywords).filter(|k| *k != word) {
        return Some(format!("did you mean `{keyword}`?"));
    }
    if rest.starts_with(['\n', '\r']) && rest.trim_start().starts_with('{') {
        return Some("a block opens on the line of its declaration: `model m {`".to_string());
    }
    None
}
