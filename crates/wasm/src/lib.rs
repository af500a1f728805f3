//! vram-wasm: the calculator's WebAssembly adapter, a thin typed facade over `vram-core`.
//!
//! Five exports, each taking and returning typed values whose TypeScript declarations tsify
//! generates into the `.d.ts` (no bare `JsValue` in a signature):
//!
//! - `version()`: the core's version;
//! - `evaluate(source, options?)`: the budget and the diagnostics, positions in UTF-16 units;
//! - `catalog()`: the built-in devices and models;
//! - `verdicts(source, check)`: the check's verdict on every catalog device;
//! - `fitMap(source, request)`: where a check fits over contexts × sessions, per device.
//!
//! Nothing a user types makes an export throw: mistakes in the text are diagnostics, mistakes in
//! a request are an `error` field, and a panic hook prints any bug to the console. The work is
//! done in [`api`] over plain Rust values, which are tested natively as well as in wasm.

pub mod api;
pub mod budget;

use tsify::{Ts, Tsify};
use wasm_bindgen::prelude::*;

use api::{Catalog, EvaluateOptions, Evaluation, FitMapRequest, FitMapResult, Status, Verdicts};

/// Installs the panic hook, so that a bug shows its message in the console rather than only
/// `unreachable executed`.
#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

/// The version of vram-core inside this module.
#[wasm_bindgen]
pub fn version() -> String {
    vram_core::VERSION.to_string()
}

/// Parses, checks and evaluates `source` against the built-in catalog.
#[wasm_bindgen]
pub fn evaluate(source: &str, options: Option<Ts<EvaluateOptions>>) -> Ts<Evaluation> {
    let (options, problem) = match options.map(|o| o.to_rust()) {
        None => (EvaluateOptions::default(), None),
        Some(Ok(options)) => (options, None),
        Some(Err(error)) => (EvaluateOptions::default(), Some(format!("options: {error}"))),
    };
    let mut evaluation = api::evaluate(source, &options);
    if let Some(problem) = problem {
        evaluation.diagnostics.push(api::internal(source, &problem));
    }
    evaluation.into_ts().unwrap_or_else(|error| {
        // A byte count beyond 2^53 cannot be a JavaScript number: say so instead of rounding.
        let fallback = Evaluation {
            status: Status::InputErrors,
            budget: budget::Budget {
                schema_version: vram_core::budget::SCHEMA_VERSION,
                checks: Vec::new(),
                queries: Vec::new(),
            },
            diagnostics: vec![api::internal(
                source,
                &format!("the budget cannot be shown in JavaScript numbers: {error}"),
            )],
            ..evaluation
        };
        fallback.into_ts().unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
    })
}

/// The built-in devices and models.
#[wasm_bindgen]
pub fn catalog() -> Ts<Catalog> {
    api::catalog().into_ts().unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
}

/// The verdict of `check` (its id, or its workload's name) on every catalog device.
#[wasm_bindgen]
pub fn verdicts(source: &str, check: &str) -> Ts<Verdicts> {
    api::verdicts(source, check).into_ts().unwrap_or_else(|error| {
        Verdicts { check: None, devices: Vec::new(), error: Some(error.to_string()) }
            .into_ts()
            .unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
    })
}

/// Where a check fits over a grid of contexts and sessions, on each requested device.
#[wasm_bindgen(js_name = fitMap)]
pub fn fit_map(source: &str, request: &Ts<FitMapRequest>) -> Ts<FitMapResult> {
    let result = match request.to_rust() {
        Ok(request) => api::fit_map(source, &request),
        Err(error) => FitMapResult {
            check: None,
            maps: Vec::new(),
            evaluations: 0,
            error: Some(format!("request: {error}")),
        },
    };
    result.into_ts().unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
}
