//! Compiles `grammar/vram.pest` into the table that `src/syntax/peg.rs` runs.
//!
//! The grammar file stays the language's one definition. pest's own grammar reader (`pest_meta`,
//! the library `pest_derive` uses) parses, validates and optimizes it here, at build time, exactly
//! as the derive would; instead of generating one Rust function per rule, this script writes the
//! optimized rules as data: a `Rule` enum in pest's order (`EOI` first, then the grammar's rules
//! in file order) and a flat array of operations. The interpreter that runs them is a few hundred
//! lines, where the generated parser was about 60 KB of the web page's module.

use std::fmt::Write as _;
use std::path::Path;

use pest_meta::ast::RuleType;
use pest_meta::optimizer::{OptimizedExpr, OptimizedRule};

const GRAMMAR: &str = "../../grammar/vram.pest";

fn main() {
    println!("cargo::rerun-if-changed={GRAMMAR}");
    println!("cargo::rerun-if-changed=build.rs");
    let source = std::fs::read_to_string(GRAMMAR).expect("grammar/vram.pest is readable");
    let (_, rules) = match pest_meta::parse_and_optimize(&source) {
        Ok(parsed) => parsed,
        Err(errors) => {
            let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
            panic!("grammar/vram.pest does not compile:\n{}", messages.join("\n"));
        }
    };
    let table = Table::build(&rules);
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(Path::new(&out).join("grammar.rs"), table.render(&rules))
        .expect("OUT_DIR is writable");
}

/// The operations of every rule body, flattened; a list operation points into `lists`.
#[derive(Default)]
struct Table {
    ops: Vec<String>,
    lists: Vec<usize>,
    /// Per rule in enum order (`EOI` first): its kind and the index of its body in `ops`.
    bodies: Vec<(&'static str, usize)>,
}

impl Table {
    fn build(rules: &[OptimizedRule]) -> Self {
        let names: Vec<&str> = rules.iter().map(|rule| rule.name.as_str()).collect();
        for required in ["WHITESPACE", "COMMENT"] {
            assert!(
                names.contains(&required),
                "the interpreter's `skip` expects a {required} rule"
            );
        }
        let mut table = Table::default();
        // pest's built-in EOI is a normal rule whose body is the end-of-input test.
        let eoi = table.push("Op::Eoi".to_string());
        table.bodies.push(("Normal", eoi));
        for rule in rules {
            let kind = match (rule.name.as_str(), &rule.ty) {
                // pest makes the trivia rules atomic whatever their marker.
                ("WHITESPACE" | "COMMENT", _) => "Trivia",
                (_, RuleType::Normal) => "Normal",
                (_, RuleType::Silent) => "Silent",
                (_, RuleType::Atomic) => "Atomic",
                (_, RuleType::CompoundAtomic) => "CompoundAtomic",
                (_, RuleType::NonAtomic) => {
                    panic!(
                        "rule {}: the interpreter does not run non-atomic (`!{{}}`) rules",
                        rule.name
                    )
                }
            };
            let body = table.expr(&rule.expr, &names);
            table.bodies.push((kind, body));
        }
        table
    }

    fn push(&mut self, op: String) -> usize {
        self.ops.push(op);
        self.ops.len() - 1
    }

    fn list(&mut self, items: Vec<usize>) -> (usize, usize) {
        let start = self.lists.len();
        let len = items.len();
        self.lists.extend(items);
        (start, len)
    }

    fn expr(&mut self, expr: &OptimizedExpr, names: &[&str]) -> usize {
        let op = match expr {
            OptimizedExpr::Str(text) => format!("Op::Str({text:?})"),
            OptimizedExpr::Range(start, end) => {
                let (start, end) = (single_char(start), single_char(end));
                format!("Op::Range({start:?}, {end:?})")
            }
            OptimizedExpr::Ident(name) => return self.ident(name, names),
            OptimizedExpr::PosPred(inner) => format!("Op::PosPred({})", self.expr(inner, names)),
            OptimizedExpr::NegPred(inner) => format!("Op::NegPred({})", self.expr(inner, names)),
            OptimizedExpr::Opt(inner) => format!("Op::Opt({})", self.expr(inner, names)),
            OptimizedExpr::Rep(inner) => format!("Op::Rep({})", self.expr(inner, names)),
            OptimizedExpr::Seq(..) => {
                let items = flatten(expr, true).iter().map(|e| self.expr(e, names)).collect();
                let (start, len) = self.list(items);
                format!("Op::Seq({start}, {len})")
            }
            OptimizedExpr::Choice(..) => {
                let items = flatten(expr, false).iter().map(|e| self.expr(e, names)).collect();
                let (start, len) = self.list(items);
                format!("Op::Choice({start}, {len})")
            }
            other => panic!("grammar/vram.pest uses {other:?}, which the interpreter does not run"),
        };
        self.push(op)
    }

    /// A reference to a rule, or one of pest's built-ins expanded to what pest matches for it.
    fn ident(&mut self, name: &str, names: &[&str]) -> usize {
        if names.contains(&name) || name == "EOI" {
            return self.push(format!("Op::Call(Rule::{name})"));
        }
        let ranges: &[(char, char)] = match name {
            "SOI" => return self.push("Op::Soi".to_string()),
            "NEWLINE" => {
                let items = ["\n", "\r\n", "\r"].map(|s| self.push(format!("Op::Str({s:?})")));
                let (start, len) = self.list(items.to_vec());
                return self.push(format!("Op::Choice({start}, {len})"));
            }
            "ASCII_DIGIT" => &[('0', '9')],
            "ASCII_ALPHA" => &[('a', 'z'), ('A', 'Z')],
            "ASCII_ALPHANUMERIC" => &[('a', 'z'), ('A', 'Z'), ('0', '9')],
            other => panic!("grammar/vram.pest uses the built-in {other}, not yet interpreted"),
        };
        let items: Vec<usize> =
            ranges.iter().map(|(a, b)| self.push(format!("Op::Range({a:?}, {b:?})"))).collect();
        if let [one] = items[..] {
            return one;
        }
        let (start, len) = self.list(items);
        self.push(format!("Op::Choice({start}, {len})"))
    }

    fn render(&self, rules: &[OptimizedRule]) -> String {
        let mut out = String::new();
        out.push_str(
            "// Generated by crates/core/build.rs from grammar/vram.pest. Do not edit.\n\n",
        );
        out.push_str("/// The grammar's rules, in pest's order: `EOI`, then the file's rules.\n");
        out.push_str("#[allow(non_camel_case_types, clippy::upper_case_acronyms)]\n");
        out.push_str("#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]\n");
        out.push_str("pub(super) enum Rule {\n    EOI,\n");
        for rule in rules {
            let _ = writeln!(out, "    {},", rule.name);
        }
        out.push_str("}\n\n");
        let _ = writeln!(out, "const RULE_COUNT: usize = {};", self.bodies.len());
        out.push_str(
            "/// Per rule, in enum order: its kind and the operation its body starts at.\n",
        );
        let _ = writeln!(out, "static BODIES: [(Kind, u16); RULE_COUNT] = [");
        for (kind, body) in &self.bodies {
            let _ = writeln!(out, "    (Kind::{kind}, {body}),");
        }
        out.push_str("];\n\n");
        let _ = writeln!(out, "static OPS: [Op; {}] = [", self.ops.len());
        for op in &self.ops {
            let _ = writeln!(out, "    {op},");
        }
        out.push_str("];\n\n");
        let _ = writeln!(out, "static LISTS: [u16; {}] = [", self.lists.len());
        for chunk in self.lists.chunks(16) {
            let items: Vec<String> = chunk.iter().map(ToString::to_string).collect();
            let _ = writeln!(out, "    {},", items.join(", "));
        }
        out.push_str("];\n");
        assert!(self.ops.len() < usize::from(u16::MAX), "the grammar's table outgrew u16 indices");
        out
    }
}

/// The operands of a chain of `~` (or `|`), which pest_meta nests to the right.
fn flatten(expr: &OptimizedExpr, sequence: bool) -> Vec<&OptimizedExpr> {
    let mut items = Vec::new();
    let mut current = expr;
    loop {
        match (current, sequence) {
            (OptimizedExpr::Seq(lhs, rhs), true) | (OptimizedExpr::Choice(lhs, rhs), false) => {
                items.push(&**lhs);
                current = rhs;
            }
            _ => {
                items.push(current);
                return items;
            }
        }
    }
}

fn single_char(text: &str) -> char {
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => c,
        _ => panic!("a range bound is one character, got {text:?}"),
    }
}
