//! `from "path"` in a model block: the imported model's fields, merged under the block's own.
//!
//! The front end read the file (the core does no IO) and passed what it found. The imported
//! model is rendered as a `model` block and parsed, so it goes through exactly the checks a
//! written block does; fields the user wrote win over imported ones. Imported fields have no
//! text of their own in the user's file, so they point at the path.

use crate::ast::{Block, BlockDeclaration, Declaration, Expr, Field, Value};
use crate::diagnostic::Diagnostic;
use crate::import::Imports;
use crate::span::Span;

/// The block to check for `decl`: its own fields over the imported ones, or the diagnostics
/// that stop the import. `None` when the block has no `from`.
pub(super) fn merged(
    decl: &BlockDeclaration,
    imports: &Imports,
) -> Option<Result<BlockDeclaration, Vec<Diagnostic>>> {
    let from = decl.body.fields.iter().find(|f| f.key.name == "from")?;
    let [Value::Text(path)] = from.values.as_slice() else {
        return Some(Err(vec![
            Diagnostic::error(
                "E013",
                from.span,
                "`from` takes the path of a model file in double quotes",
            )
            .with_help("write `from \"models/qwen/config.json\"`"),
        ]));
    };
    let imported = match imports.get(&path.value) {
        None => {
            return Some(Err(vec![
                Diagnostic::error("E023", path.span, format!("the model file `{}` was not read", path.value))
                    .with_help("`vram check` reads it relative to the .vram file; the web page needs the file dropped on it"),
            ]));
        }
        Some(Err(problems)) => {
            return Some(Err(problems
                .iter()
                .map(|p| Diagnostic {
                    message: format!("{}: {}", p.file, p.diagnostic.message),
                    primary: path.span,
                    labels: Vec::new(),
                    ..p.diagnostic.clone()
                })
                .collect()));
        }
        Some(Ok(imported)) => imported,
    };
    let text = imported.to_vram(&decl.name.name);
    let (file, diagnostics) = crate::syntax::parse(&text);
    let block = file.declarations.into_iter().find_map(|d| match d {
        Declaration::Block(block) => Some(block),
        Declaration::Check(_) | Declaration::Find(_) => None,
    });
    let Some(block) = block.filter(|_| diagnostics.is_empty()) else {
        return Some(Err(vec![Diagnostic::error(
            "E023",
            path.span,
            format!("the model read from `{}` could not be expressed as a model block", path.value),
        )]));
    };
    let own: Vec<&str> = decl.body.fields.iter().map(|f| f.key.name.as_str()).collect();
    let mut fields: Vec<Field> =
        decl.body.fields.iter().filter(|f| f.key.name != "from").cloned().collect();
    fields.extend(
        block.body.fields.into_iter().filter(|f| !own.contains(&f.key.name.as_str())).map(
            |mut f| {
                respan_field(&mut f, path.span);
                f
            },
        ),
    );
    Some(Ok(BlockDeclaration { body: Block { fields, span: decl.body.span }, ..decl.clone() }))
}

fn respan_field(field: &mut Field, span: Span) {
    field.key.span = span;
    field.span = span;
    for value in &mut field.values {
        match value {
            Value::Expr(expr) => respan_expr(expr, span),
            Value::Word(word) => word.span = span,
            Value::Text(text) => text.span = span,
            Value::Count(count) => {
                count.span = span;
                count.name.span = span;
                respan_expr(&mut count.count, span);
            }
        }
    }
    if let Some(block) = &mut field.block {
        block.span = span;
        for inner in &mut block.fields {
            respan_field(inner, span);
        }
    }
}

fn respan_expr(expr: &mut Expr, to: Span) {
    match expr {
        Expr::Number { span, .. } => *span = to,
        Expr::Neg { operand, span }
        | Expr::Unit { operand, span, .. }
        | Expr::Group { inner: operand, span } => {
            *span = to;
            respan_expr(operand, to);
        }
        Expr::Binary { lhs, rhs, span, .. } => {
            *span = to;
            respan_expr(lhs, to);
            respan_expr(rhs, to);
        }
    }
}
