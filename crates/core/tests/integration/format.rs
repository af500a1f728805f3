//! `vram fmt` keeps the meaning and is idempotent, on every example and every malformed input
//! that parses.

use std::path::PathBuf;

fn fixtures() -> Vec<PathBuf> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut paths = Vec::new();
    for dir in ["examples", "tests/errors", "crates/core/src/catalog"] {
        for entry in std::fs::read_dir(format!("{root}/{dir}")).expect("fixture folder") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "vram") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    assert!(paths.len() > 30, "fixtures missing: {}", paths.len());
    paths
}

/// The syntax tree's debug form without byte offsets, which formatting is allowed to move.
pub(crate) fn shape(source: &str) -> String {
    let (file, _) = vram_core::syntax::parse(source);
    let debug = format!("{file:?}");
    let mut out = String::with_capacity(debug.len());
    let mut rest = debug.as_str();
    while let Some(at) = rest.find("Span { start: ") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('}').map_or(rest.len(), |n| at + n + 1);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn formatting_keeps_the_tree_and_is_idempotent() {
    let mut formatted_count = 0;
    for path in fixtures() {
        let source = std::fs::read_to_string(&path).expect("readable");
        let Ok(once) = vram_core::format::format(&source) else { continue };
        formatted_count += 1;
        assert_eq!(shape(&once), shape(&source), "{}: formatting changed the tree", path.display());
        let twice = vram_core::format::format(&once).expect("formatted text parses");
        assert_eq!(twice, once, "{}: formatting is not idempotent", path.display());
        let comments = |text: &str| text.lines().filter(|l| l.contains('#')).count();
        assert_eq!(comments(&once), comments(&source), "{}: a comment was lost", path.display());
    }
    assert!(formatted_count >= 30);
}

#[test]
fn examples_are_already_formatted() {
    let canonical = |p: &PathBuf| !p.to_string_lossy().contains("tests/errors");
    for path in fixtures().into_iter().filter(canonical) {
        let source = std::fs::read_to_string(&path).expect("readable");
        let formatted = vram_core::format::format(&source).expect("examples parse");
        assert_eq!(
            formatted,
            source,
            "{} is not in canonical layout; run `vram fmt`",
            path.display()
        );
    }
}

#[test]
fn files_with_syntax_errors_are_left_alone() {
    let errors = vram_core::format::format("model m {\n  layers 32\n").expect_err("unclosed block");
    assert_eq!(errors[0].code, "E001");
}

#[test]
fn value_columns_line_up_only_in_rows_of_one_shape() {
    let source = "workload w {\n  scene {\n    buffer geometry 1.8 GiB\n    acceleration bvh 900 MiB\n  }\n  diffusion {\n    text_encoders t5-xxl-encoder clip-l-text\n    resolution 1024 x 1024\n    cfg false\n  }\n}\n";
    let formatted = vram_core::format::format(source).expect("parses");
    assert!(formatted.contains("    buffer       geometry 1.8 GiB\n"), "{formatted}");
    assert!(formatted.contains("    acceleration bvh      900 MiB\n"), "{formatted}");
    assert!(formatted.contains("    resolution    1024 x 1024\n"), "{formatted}");
    assert!(formatted.contains("    text_encoders t5-xxl-encoder clip-l-text\n"), "{formatted}");
}

/// Found by the `evaluate` fuzz target: the grammar ends a comment (and a line) at a lone `\r`,
/// while the formatter read the comment up to the next `\n`, swallowing the `}` after it into
/// the comment it printed, so its output did not parse.
#[test]
fn a_lone_carriage_return_ends_a_comment_as_in_the_grammar() {
    let source = "model my{\nrs 15e10\n  h#\rad#\rads}\n";
    let once = vram_core::format::format(source).expect("parses");
    assert_eq!(once, "model my {\n  rs 15e10\n  h   #\n  ad  #\n  ads\n}\n");
    assert_eq!(shape(&once), shape(source), "formatting changed the tree");
    assert_eq!(vram_core::format::format(&once).expect("parses"), once);
    let crlf = "model my {\r\n  layers 32  # note\r\n}\r\n";
    assert_eq!(
        vram_core::format::format(crlf).expect("parses"),
        "model my {\n  layers 32  # note\n}\n"
    );
}

/// Found by the `evaluate` fuzz target: a unit spelling followed by `-` is not a unit (the
/// grammar's unit ends before a name character), so `5bytes- -3` is three values, `5`, `bytes`
/// and `-3`; printed a space apart, `5 bytes -3` is one expression, `5 bytes - 3`. The formatter
/// refuses such a file rather than change what it says.
#[test]
fn a_unit_word_kept_apart_from_its_number_is_not_joined_to_it() {
    let source = "model m {\n  params 5bytes- -3\n}\n";
    let (file, _) = vram_core::syntax::parse(source);
    let vram_core::ast::Declaration::Block(decl) = &file.declarations[0] else { panic!() };
    assert_eq!(decl.body.fields[0].values.len(), 3, "the grammar reads three values");
    let errors = vram_core::format::format(source).expect_err("refused");
    assert_eq!(errors[0].code, "E013");
    assert_eq!(errors[0].primary.start, 20, "at `bytes`");
    // A unit against its number is one value and formats as before.
    let joined = vram_core::format::format("model m {\n  params 5bytes - -3\n}\n").expect("parses");
    assert_eq!(joined, "model m {\n  params 5 bytes - -3\n}\n");
}
