//! Every resource limit on user input is hit by a generated input, and each answers with a
//! diagnostic that names the limit, never a panic or a stack overflow. The inputs are generated
//! here rather than committed (a megabyte of `(` is no fixture). Each runs on a thread with a
//! small stack, so a recursive rule that escaped a limit fails here rather than on a user's page.

use vram_core::limits::{MAX_DIGITS, MAX_EXPRESSION_TERMS, MAX_NESTING, MAX_SOURCE_BYTES};

/// Stack for the hostile inputs: a quarter of a test thread's default, so a recursion that
/// depends on the input's size overflows long before the input is large.
const SMALL_STACK: usize = 512 << 10;

/// Evaluates and formats `source` on a small stack, returning the error codes with their messages.
fn errors(source: String) -> Vec<(String, String)> {
    std::thread::Builder::new()
        .stack_size(SMALL_STACK)
        .spawn(move || {
            let outcome = vram_core::evaluate(&source);
            // The formatter and the import scan walk the tree too.
            let _ = vram_core::format::format(&source);
            let _ = vram_core::import_paths(&source);
            outcome
                .diagnostics
                .iter()
                .filter(|d| d.is_error())
                .map(|d| {
                    assert!(d.primary.end as usize <= source.len());
                    (d.code.to_string(), d.message.clone())
                })
                .collect()
        })
        .expect("thread starts")
        .join()
        .expect("no panic")
}

/// Asserts that `source` is reported once with `code`, in a message that names `limit`.
fn assert_limit(source: String, code: &str, limit: &str) {
    let errors = errors(source);
    assert!(
        errors.iter().any(|(c, m)| c == code && m.contains(limit)),
        "expected {code} naming {limit:?}, got {errors:?}"
    );
}

const PARAMS_FIELD: &str = "model m {\n  params ";

#[test]
fn input_size() {
    let mut source = String::from("# padding\n");
    while source.len() <= MAX_SOURCE_BYTES {
        source.push_str("model m { params 7 billion }\n");
    }
    assert_limit(source, "E002", &MAX_SOURCE_BYTES.to_string());
    // Just under the limit, size is no problem: one declaration and a long comment.
    let mut source = String::from("model m { params 7 billion }\n# ");
    source.push_str(&"padding ".repeat((MAX_SOURCE_BYTES - source.len() - 1) / 8));
    source.push('\n');
    assert!(source.len() <= MAX_SOURCE_BYTES);
    assert_eq!(errors(source), Vec::<(String, String)>::new());
}

#[test]
fn nesting_of_parentheses_and_blocks() {
    for (open, close) in [("(", ")"), ("{", "}")] {
        for depth in [MAX_NESTING + 1, 100_000] {
            let source = format!(
                "{PARAMS_FIELD}{}7{} billion\n}}\n",
                open.repeat(depth),
                close.repeat(depth)
            );
            assert_limit(source, "E002", &MAX_NESTING.to_string());
        }
    }
    // At the limit, nesting is fine.
    let depth = MAX_NESTING - 1;
    let source = format!("{PARAMS_FIELD}{}7{} billion\n}}\n", "(".repeat(depth), ")".repeat(depth));
    assert_eq!(errors(source), Vec::<(String, String)>::new());
}

#[test]
fn nesting_after_a_comment_ended_by_a_carriage_return() {
    // `\r` ends a line for the grammar, so the text after it is code, not comment: the nesting
    // count must see these parentheses too (found by hand while building the corpus).
    let source = format!(
        "model m {{\n  layers 32 # c\r  params {}7{} billion\n}}\n",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    assert_limit(source, "E002", &MAX_NESTING.to_string());
}

#[test]
fn long_expressions() {
    // Deep enough that a recursion per term would overflow the small stack.
    let n = 20_000;
    let sum = format!("{PARAMS_FIELD}{}1 billion\n}}\n", "1 + ".repeat(n));
    let negations = format!("{PARAMS_FIELD}{}7 billion\n}}\n", "- ".repeat(n));
    let units = format!("{PARAMS_FIELD}7{}\n}}\n", " billion".repeat(n));
    for source in [sum, negations, units] {
        assert_limit(source, "E002", &MAX_EXPRESSION_TERMS.to_string());
    }
    // A long but reasonable expression is fine.
    let source = format!("{PARAMS_FIELD}{}1 billion\n}}\n", "1 billion + ".repeat(60));
    assert_eq!(errors(source), Vec::<(String, String)>::new());
}

#[test]
fn number_ranges() {
    let digits = "9".repeat(MAX_DIGITS + 1);
    assert_limit(format!("{PARAMS_FIELD}{digits}\n}}\n"), "E003", &MAX_DIGITS.to_string());
    assert_limit(format!("{PARAMS_FIELD}1e99\n}}\n"), "E003", "exponent");
    assert_limit(format!("{PARAMS_FIELD}10e29\n}}\n"), "E007", "");
}

#[test]
fn many_declarations_evaluate_in_bounded_time() {
    // Thousands of checks of one workload: the planner's suggestions and the checks are per
    // check, so this must stay linear (a quadratic pass would time the test out).
    let mut source = String::from(
        "workload w {\n  model llama3.1-8b\n  inference {\n    weights bf16\n    context 8192 tokens\n  }\n}\n",
    );
    for _ in 0..2_000 {
        source.push_str("check w on l4\n");
    }
    assert_eq!(errors(source), Vec::<(String, String)>::new());
}
