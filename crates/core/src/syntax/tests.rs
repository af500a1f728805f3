//! The interpreter against pest's own generated parser for the same grammar file: the same
//! tree for every text that parses, the same error (position, expected and unexpected rules) for
//! every text that does not. The texts are every `.vram` file of the repository and, for each,
//! mutants that cut, repeat and insert pieces at seeded random places, so the errors come from
//! everywhere in the grammar.
#![allow(
    clippy::disallowed_methods,
    reason = "the tests read the repository's .vram files, so that a new one is covered too; the library stays IO-free"
)]

use std::path::{Path, PathBuf};

use pest::Parser as _;

use super::peg;

#[derive(pest_derive::Parser)]
#[grammar = "../../grammar/vram.pest"]
struct Reference;

/// A parse as both parsers can state it: each matched rule as (name, start, end) in pre-order,
/// or the error's position with the expected and unexpected rules' names.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Tree(Vec<(String, usize, usize)>),
    Error { pos: usize, positives: Vec<String>, negatives: Vec<String> },
}

fn reference(text: &str) -> Outcome {
    match Reference::parse(Rule::file, text) {
        Ok(pairs) => Outcome::Tree(
            pairs
                .flatten()
                .map(|pair| {
                    let span = pair.as_span();
                    (format!("{:?}", pair.as_rule()), span.start(), span.end())
                })
                .collect(),
        ),
        Err(error) => {
            let pest::error::InputLocation::Pos(pos) = error.location else {
                panic!("pest reports parsing errors at a position")
            };
            let pest::error::ErrorVariant::ParsingError { positives, negatives } = error.variant
            else {
                panic!("no call limit is set, so the error is a parsing error")
            };
            let names = |rules: Vec<Rule>| rules.iter().map(|r| format!("{r:?}")).collect();
            Outcome::Error { pos, positives: names(positives), negatives: names(negatives) }
        }
    }
}

fn interpreted(text: &str) -> Outcome {
    match peg::parse(peg::Rule::file, text) {
        Ok(tree) => {
            let mut nodes = Vec::new();
            let mut stack = vec![tree.root()];
            while let Some(pair) = stack.pop() {
                nodes.push((format!("{:?}", pair.as_rule()), pair.start(), pair.end()));
                let children: Vec<_> = pair.into_inner().collect();
                stack.extend(children.into_iter().rev());
            }
            Outcome::Tree(nodes)
        }
        Err(error) => {
            let names = |rules: &[peg::Rule]| rules.iter().map(|r| format!("{r:?}")).collect();
            Outcome::Error {
                pos: error.pos,
                positives: names(&error.positives),
                negatives: names(&error.negatives),
            }
        }
    }
}

/// Every `.vram` file under the repository's `examples/`, `tests/` and `crates/`.
fn repository_texts() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    let mut folders: Vec<PathBuf> = ["examples", "tests", "crates"].map(|f| root.join(f)).into();
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with("target") && !path.ends_with("node_modules") {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "vram") {
                let text = std::fs::read_to_string(&path).expect("a .vram file is UTF-8");
                files.push((path, text));
            }
        }
    }
    files.sort();
    files
}

/// A small seeded generator (xorshift64*), so every run tests the same mutants.
struct Seeded(u64);

impl Seeded {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let value = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33;
        usize::try_from(value).expect("33 bits fit") % n.max(1)
    }
}

/// Pieces that matter to the grammar, inserted at random places.
const PIECES: [&str; 32] = [
    "{",
    "}",
    "(",
    ")",
    "\"",
    "#",
    "\\\n",
    "\n",
    "\r",
    "\r\n",
    ";",
    " ",
    "\t",
    "x ",
    "×",
    "-",
    "+",
    "*",
    "/",
    "1e",
    "2.5",
    "_",
    "GiB",
    "tokens",
    "%",
    "check ",
    "find max ",
    "on ",
    "split ",
    "layers ",
    "headroom ",
    "é",
];

fn mutant(text: &str, random: &mut Seeded) -> String {
    let boundaries: Vec<usize> =
        text.char_indices().map(|(i, _)| i).chain(std::iter::once(text.len())).collect();
    let at = |random: &mut Seeded| boundaries[random.below(boundaries.len())];
    let (a, b) = (at(random), at(random));
    let (from, to) = (a.min(b), a.max(b));
    let mut out = String::with_capacity(text.len() + 16);
    match random.below(4) {
        // Cut a short piece.
        0 => {
            let to = (from..=to).rev().find(|&i| i <= from + 12 && text.is_char_boundary(i));
            out.push_str(&text[..from]);
            out.push_str(&text[to.unwrap_or(from)..]);
        }
        // Insert a piece of the grammar.
        1 | 2 => {
            out.push_str(&text[..from]);
            out.push_str(PIECES[random.below(PIECES.len())]);
            out.push_str(&text[from..]);
        }
        // Repeat a stretch elsewhere.
        _ => {
            let end =
                (to..=text.len()).find(|&i| text.is_char_boundary(i) && i >= to.min(from + 40));
            let stretch = &text[from..end.unwrap_or(to)];
            let place = at(random);
            out.push_str(&text[..place]);
            out.push_str(stretch);
            out.push_str(&text[place..]);
        }
    }
    out
}

#[test]
fn the_interpreter_parses_as_pest_does() {
    let texts = repository_texts();
    assert!(texts.len() > 100, "found only {} .vram files", texts.len());
    let mut random = Seeded(0x5EED_0FC0_FFEE);
    let (mut trees, mut errors) = (0, 0);
    for (path, text) in &texts {
        let mut variants = vec![text.clone()];
        let mut current = text.clone();
        for _ in 0..24 {
            // Mutants of mutants reach past the first error.
            current = if random.below(3) == 0 { mutant(text, &mut random) } else { current };
            current = mutant(&current, &mut random);
            variants.push(current.clone());
        }
        for variant in &variants {
            let expected = reference(variant);
            match &expected {
                Outcome::Tree(_) => trees += 1,
                Outcome::Error { .. } => errors += 1,
            }
            assert_eq!(interpreted(variant), expected, "{} mutated to:\n{variant}", path.display());
        }
    }
    // Both kinds of outcome must be well represented for the comparison to mean anything.
    assert!(trees > 500 && errors > 1000, "{trees} trees and {errors} errors compared");
    if let Some(folder) = std::env::var_os("VRAM_PARSE_CORPUS") {
        compare_corpus(Path::new(&folder));
    }
}

/// Compares every file of a folder too (the `evaluate` fuzz target's corpus, which is not
/// committed: `VRAM_PARSE_CORPUS=fuzz/corpus/evaluate`). Like the fuzz target, it skips what is
/// not UTF-8 and what the limits stop before parsing.
fn compare_corpus(folder: &Path) {
    let mut compared = 0;
    for entry in std::fs::read_dir(folder).expect("VRAM_PARSE_CORPUS is a folder").flatten() {
        let bytes = std::fs::read(entry.path()).expect("a corpus file is readable");
        let Ok(text) = std::str::from_utf8(&bytes) else { continue };
        if super::check_limits(text).is_none() {
            assert_eq!(interpreted(text), reference(text), "{}", entry.path().display());
            compared += 1;
        }
    }
    assert!(compared > 0, "nothing in {} to compare", folder.display());
}
