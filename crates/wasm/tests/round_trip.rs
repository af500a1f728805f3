//! The TypeScript-typed mirror of the budget against the core's JSON: for every example, the
//! core's budget goes through the mirror and back to the very same JSON. A field the core adds,
//! renames or drops fails here, so the generated `.d.ts` cannot drift from the CLI's output.

use vram_wasm::budget::{Budget, mirror};

#[test]
fn every_example_round_trips_through_the_typed_mirror() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let source = std::fs::read_to_string(&path).unwrap();
        let core = vram_core::evaluate(&source).budget;
        let typed: Budget = mirror(&core).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            serde_json::to_string_pretty(&typed).unwrap(),
            serde_json::to_string_pretty(&core).unwrap(),
            "{}",
            path.display()
        );
        assert!(!typed.checks.is_empty(), "{}", path.display());
        count += 1;
    }
    assert!(count >= 10);
}

/// The wasm32 tests (`tests/wasm.rs`) embed the examples with `include_str!`, so they list
/// them by name: every file of examples/ is in that list.
#[test]
fn the_wasm_tests_embed_every_example() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let listed = include_str!("wasm.rs");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let embedded = format!("include_str!(\"../../../examples/{name}\")");
        assert!(listed.contains(&embedded), "tests/wasm.rs does not embed examples/{name}");
    }
}

#[test]
fn an_unknown_field_is_refused() {
    let mut json = serde_json::to_value(
        vram_core::evaluate(include_str!("../../../examples/llama3.1-8b-chat.vram")).budget,
    )
    .unwrap();
    json["checks"][0]["devices"][0]["new_field"] = serde_json::json!(1);
    assert!(mirror::<Budget>(&json).is_err());
}

#[test]
fn bands_with_a_basis_round_trip_too() {
    // The core on another branch gives every band the basis of its width; the mirror takes
    // both shapes, unchanged.
    let mut json = serde_json::to_value(
        vram_core::evaluate(include_str!("../../../examples/llama3.1-8b-chat.vram")).budget,
    )
    .unwrap();
    json["checks"][0]["devices"][0]["band"]["basis"] = serde_json::json!("inference");
    let typed: Budget = mirror(&json).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), json);
    json["checks"][0]["devices"][0]["band"]["basis"] = serde_json::json!("guesswork");
    assert!(mirror::<Budget>(&json).is_err());
}
