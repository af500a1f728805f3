//! `vram fmt`: one canonical layout, so workload files diff cleanly.
//!
//! The layout: one field per line, two-space indentation, single spaces between values,
//! arithmetic spaced as `3840 * 2160 * 4 B`, a blank line between block declarations, at most one
//! blank line anywhere. Comments are kept where they were: a comment on its own line stays on its
//! own line before the next item, a comment after an item stays at the end of that item's line.
//! Formatting never changes the syntax tree (a test parses both and compares); a file it cannot
//! print without changing the tree is refused with a diagnostic, as one that does not parse.

use std::fmt::Write as _;

use crate::ast::{
    Block, BlockDeclaration, Check, Declaration, Field, Find, FindGoal, Target, Value,
};
use crate::check::format_expr;
use crate::diagnostic::Diagnostic;
use crate::span::Span;

const INDENT: &str = "  ";

/// Formats `source`, or returns its syntax errors (a file that does not parse is left alone).
pub fn format(source: &str) -> Result<String, Vec<Diagnostic>> {
    // The grammar ends a line at `\n`, `\r\n` or a lone `\r`; the printer looks for `\n`, so a
    // lone `\r` becomes `\n` first: one byte for one, so every span stays where it was.
    let source = &*lone_carriage_returns_as_newlines(source);
    let (file, diagnostics) = crate::syntax::parse(source);
    let errors: Vec<Diagnostic> = diagnostics.into_iter().filter(Diagnostic::is_error).collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    let unprintable: Vec<Diagnostic> = file
        .declarations
        .iter()
        .filter_map(|d| match d {
            Declaration::Block(decl) => Some(&decl.body),
            Declaration::Check(_) | Declaration::Find(_) => None,
        })
        .flat_map(units_apart)
        .collect();
    if !unprintable.is_empty() {
        return Err(unprintable);
    }
    let mut printer =
        Printer { source, comments: comments(source), next_comment: 0, out: String::new() };
    let mut previous: Option<&Declaration> = None;
    for declaration in &file.declarations {
        let span = declaration.span();
        if let Some(previous) = previous {
            let blank = matches!(previous, Declaration::Block(_))
                || matches!(declaration, Declaration::Block(_))
                || printer.blank_line_between(previous.span().end, span.start);
            if blank {
                printer.out.push('\n');
            }
        }
        printer.leading_comments(span.start, 0);
        match declaration {
            Declaration::Block(decl) => printer.block_declaration(decl),
            Declaration::Check(check) => printer.check(check),
            Declaration::Find(find) => printer.find(find),
        }
        previous = Some(declaration);
    }
    printer.leading_comments(u32::MAX, 0);
    Ok(printer.out)
}

/// Words that spell a unit but were parsed as values of their own, after a number: the grammar
/// reads a unit only when no `-` follows it (`5bytes- -3` is `5`, `bytes`, `-3`), so printing
/// the values a space apart (`5 bytes -3`) would make the word the number's unit and join the
/// values into one expression. Such a file is refused rather than changed.
fn units_apart(block: &Block) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    for field in &block.fields {
        for pair in field.values.windows(2) {
            if let [Value::Expr(_), Value::Word(word)] = pair
                && crate::ast::Unit::from_text(&word.name).is_some()
            {
                found.push(
                    Diagnostic::error(
                        "E013",
                        word.span,
                        format!(
                            "`{}` is a value of its own here, but printed after the number before \
                             it, it would read as that number's unit",
                            word.name
                        ),
                    )
                    .with_help("put the unit against its number (`5 bytes`) or remove the word"),
                );
            }
        }
        if let Some(inner) = &field.block {
            found.extend(units_apart(inner));
        }
    }
    found
}

fn lone_carriage_returns_as_newlines(source: &str) -> std::borrow::Cow<'_, str> {
    let bytes = source.as_bytes();
    let lone = |i: usize| bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n');
    if !(0..bytes.len()).any(lone) {
        return source.into();
    }
    let normalized: Vec<u8> =
        (0..bytes.len()).map(|i| if lone(i) { b'\n' } else { bytes[i] }).collect();
    // Only one ASCII byte was replaced by another, so the text is still UTF-8.
    String::from_utf8(normalized).map_or_else(|_| source.into(), Into::into)
}

/// A comment: its byte range, and whether code precedes it on its line.
#[derive(Debug)]
struct Comment {
    span: Span,
    trailing: bool,
}

impl Comment {
    /// Whether this comment trails the line of an item that ended at `previous_end`.
    fn trailing_of_previous(&self, previous_end: Option<u32>, source: &str) -> bool {
        previous_end.is_some_and(|end| {
            self.trailing
                && !source.get(end as usize..self.span.start as usize).unwrap_or("").contains('\n')
        })
    }
}

/// Finds every comment in `source`, skipping `#` inside strings.
fn comments(source: &str) -> Vec<Comment> {
    let mut found = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut line_has_code = false;
    let mut chars = source.char_indices().peekable();
    while let Some((offset, c)) = chars.next() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' | '\n' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '#' => {
                let end = source[offset..].find('\n').map_or(source.len(), |n| offset + n);
                found.push(Comment { span: Span::new(offset, end), trailing: line_has_code });
                while chars.peek().is_some_and(|(o, _)| *o < end) {
                    chars.next();
                }
            }
            '\n' => line_has_code = false,
            '"' => {
                in_string = true;
                line_has_code = true;
            }
            c if !c.is_whitespace() => line_has_code = true,
            _ => {}
        }
    }
    found
}

struct Printer<'s> {
    source: &'s str,
    comments: Vec<Comment>,
    next_comment: usize,
    out: String,
}

impl Printer<'_> {
    fn blank_line_between(&self, end: u32, start: u32) -> bool {
        let between = self.source.get(end as usize..start as usize).unwrap_or("");
        // Ignore comment text: a blank line is two newlines with only spaces between them.
        between.lines().skip(1).any(|line| line.trim().is_empty())
            && between.matches('\n').count() >= 2
    }

    /// Prints the own-line comments that start before `offset`.
    fn leading_comments(&mut self, offset: u32, depth: usize) {
        let mut last_end = None;
        while let Some(comment) = self.comments.get(self.next_comment) {
            if comment.span.start >= offset {
                break;
            }
            let text = comment.span.text(self.source).trim_end();
            if comment.trailing && self.out.ends_with('\n') && !self.out.is_empty() {
                // A trailing comment whose line we already ended: keep it on that line.
                self.out.pop();
                self.out.push_str("  ");
                self.out.push_str(text);
                self.out.push('\n');
            } else {
                let blank_before = self.comment_after_blank_line(comment.span.start);
                if blank_before
                    && !self.out.is_empty()
                    && !self.out.ends_with("\n\n")
                    && !self.out.ends_with("{\n")
                {
                    self.out.push('\n');
                }
                self.out.push_str(&INDENT.repeat(depth));
                self.out.push_str(text);
                self.out.push('\n');
            }
            last_end = Some(comment.span.end);
            self.next_comment += 1;
        }
        if let Some(end) = last_end
            && offset != u32::MAX
            && self.blank_line_between(end, offset)
            && !self.out.ends_with("\n\n")
        {
            self.out.push('\n');
        }
    }

    fn comment_after_blank_line(&self, start: u32) -> bool {
        let before = self.source.get(..start as usize).unwrap_or("");
        let mut lines = before.rsplit('\n').skip(1);
        lines.next().is_some_and(|line| line.trim().is_empty())
    }

    /// Ends the current line, taking any comment that trails it in the source (after `end`).
    fn end_line(&mut self, end: u32) {
        if let Some(comment) = self.take_trailing(end) {
            self.out.push_str("  ");
            self.out.push_str(&comment);
        }
        self.out.push('\n');
    }

    /// The comment that ends the source line of an item ending at `end`, if the item is the
    /// last one on that line.
    fn take_trailing(&mut self, end: u32) -> Option<String> {
        let end = end as usize;
        let line_end = self.source[end..].find('\n').map_or(self.source.len(), |n| end + n);
        let comment = self.comments.get(self.next_comment)?;
        let start = comment.span.start as usize;
        let between = self.source.get(end..start).unwrap_or("");
        // Only the last item on a line takes the comment that ends it.
        let last_on_line =
            between.chars().all(|c| c.is_whitespace() || matches!(c, ';' | '{' | '}'));
        if !(comment.trailing && start < line_end && start >= end && last_on_line) {
            return None;
        }
        let text = comment.span.text(self.source).trim_end().to_string();
        self.next_comment += 1;
        Some(text)
    }

    fn block_declaration(&mut self, decl: &BlockDeclaration) {
        self.out.push_str(decl.kind.keyword());
        self.out.push(' ');
        self.out.push_str(&decl.name.name);
        if let Some(title) = &decl.title {
            self.out.push(' ');
            self.out.push_str(&quote(&title.value));
        }
        self.block(&decl.body, 0);
    }

    fn block(&mut self, block: &Block, depth: usize) {
        if block.fields.is_empty() && !self.has_comment_before(block.span.end) {
            self.out.push_str(" {}");
            self.end_line(block.span.end);
            return;
        }
        self.out.push_str(" {");
        self.end_line(block.span.start + 1);
        let mut previous_end = None;
        let mut run: Vec<&Field> = Vec::new();
        for field in &block.fields {
            let blank =
                previous_end.is_some_and(|end| self.blank_line_between(end, field.span.start));
            let comment_between = self.has_comment_before(field.span.start)
                && !self.comments[self.next_comment]
                    .trailing_of_previous(previous_end, self.source);
            if blank || comment_between || field.block.is_some() {
                self.run(&run, depth + 1);
                run.clear();
            }
            if blank && !self.out.ends_with("\n\n") {
                self.out.push('\n');
            }
            if field.block.is_some() {
                self.leading_comments(field.span.start, depth + 1);
                self.field(field, depth + 1);
            } else {
                if run.is_empty() {
                    self.leading_comments(field.span.start, depth + 1);
                }
                run.push(field);
            }
            previous_end = Some(field.span.end);
        }
        self.run(&run, depth + 1);
        self.leading_comments(block.span.end.saturating_sub(1), depth + 1);
        self.out.push_str(&INDENT.repeat(depth));
        self.out.push('}');
        self.end_line(block.span.end);
    }

    /// Prints consecutive one-line fields as a table: keys padded to the widest key, trailing
    /// comments lined up after the widest line. Value columns are padded too, but only when
    /// every row has the same number of cells: rows of one shape read as a table
    /// (`buffer geometry 1.8 GiB` over `acceleration bvh 900 MiB`), while padding the first
    /// value of `resolution 1024 x 1024` to the width of an unrelated list of text encoders
    /// would tear the expression apart.
    fn run(&mut self, fields: &[&Field], depth: usize) {
        let rows: Vec<Vec<String>> = fields
            .iter()
            .map(|f| {
                std::iter::once(f.key.name.clone()).chain(f.values.iter().map(value_text)).collect()
            })
            .collect();
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        let uniform = rows.iter().all(|row| row.len() == columns);
        let aligned = if uniform { columns } else { 1 };
        let mut widths = vec![0; columns];
        for row in &rows {
            // The last cell of a row is never padded, so it does not widen its column.
            for (j, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)).take(aligned)
            {
                widths[j] = widths[j].max(cell.chars().count());
            }
        }
        let lines: Vec<String> = rows
            .iter()
            .map(|row| {
                let mut line = INDENT.repeat(depth);
                for (j, cell) in row.iter().enumerate() {
                    if j + 1 < row.len() {
                        let _ = write!(line, "{cell:<width$} ", width = widths[j]);
                    } else {
                        line.push_str(cell);
                    }
                }
                line
            })
            .collect();
        let comments: Vec<Option<String>> =
            fields.iter().map(|f| self.take_trailing(f.span.end)).collect();
        let width = lines
            .iter()
            .zip(&comments)
            .filter(|(_, c)| c.is_some())
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0);
        for (line, comment) in lines.into_iter().zip(comments) {
            match comment {
                Some(comment) => {
                    let padding = width - line.chars().count() + 2;
                    self.out.push_str(&line);
                    self.out.push_str(&" ".repeat(padding));
                    self.out.push_str(&comment);
                }
                None => self.out.push_str(&line),
            }
            self.out.push('\n');
        }
    }

    fn has_comment_before(&self, offset: u32) -> bool {
        self.comments.get(self.next_comment).is_some_and(|c| c.span.start < offset)
    }

    fn field(&mut self, field: &Field, depth: usize) {
        self.out.push_str(&INDENT.repeat(depth));
        self.out.push_str(&field.key.name);
        for value in &field.values {
            self.out.push(' ');
            self.out.push_str(&value_text(value));
        }
        match &field.block {
            Some(block) => self.block(block, depth),
            None => self.end_line(field.span.end),
        }
    }

    fn check(&mut self, check: &Check) {
        self.out.push_str("check ");
        if let Some(title) = &check.title {
            self.out.push_str(&quote(&title.value));
            self.out.push(' ');
        }
        self.out.push_str(&check.workload.name);
        for other in &check.also {
            self.out.push_str(" + ");
            self.out.push_str(&other.name);
        }
        self.out.push_str(" on ");
        self.out.push_str(&target_text(&check.target));
        self.out.push_str(&split_text(&check.split, &check.stage_layers, check.headroom.as_ref()));
        self.end_line(check.span.end);
    }

    fn find(&mut self, find: &Find) {
        self.out.push_str(&find_text(find));
        self.end_line(find.span.end);
    }
}

/// `2 x h100-sxm-80gb` or `l4`.
fn target_text(target: &Target) -> String {
    match target {
        Target::Count(count) => format!("{} x {}", format_expr(&count.count), count.name.name),
        Target::Named(name) => name.name.clone(),
    }
}

/// ` split tensor 2 headroom strict`, or nothing.
fn split_text(
    split: &[crate::ast::SplitPart],
    stage_layers: &[crate::ast::Expr],
    headroom: Option<&crate::ast::Ident>,
) -> String {
    let mut out = String::new();
    if !split.is_empty() {
        out.push_str(" split");
        for part in split {
            let _ = write!(out, " {} {}", part.strategy.name, format_expr(&part.degree));
        }
    }
    if !stage_layers.is_empty() {
        out.push_str(" layers");
        for layers in stage_layers {
            let _ = write!(out, " {}", format_expr(layers));
        }
    }
    if let Some(headroom) = headroom {
        out.push_str(" headroom ");
        out.push_str(&headroom.name);
    }
    out
}

/// A `find` query in canonical form; also its id in the budget.
pub fn find_text(find: &Find) -> String {
    let goal = match &find.goal {
        FindGoal::Max(what) => format!("max {}", what.name),
        FindGoal::Min { what, of } => format!("min {} of {}", what.name, of.name),
        FindGoal::In { what, collection } => format!("{} in {}", what.name, collection.name),
        FindGoal::Word(word) => word.name.clone(),
    };
    let mut out = format!("find {goal} for {}", find.workload.name);
    if let Some(target) = &find.target {
        out.push_str(" on ");
        out.push_str(&target_text(target));
    }
    out.push_str(&split_text(&find.split, &find.stage_layers, find.headroom.as_ref()));
    out
}

fn value_text(value: &Value) -> String {
    match value {
        Value::Expr(expr) => format_expr(expr),
        Value::Word(word) => word.name.clone(),
        Value::Text(text) => quote(&text.value),
        Value::Count(count) => format!("{} x {}", format_expr(&count.count), count.name.name),
    }
}

fn quote(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}
