//! vram-wasm: the calculator's WebAssembly adapter, a thin typed facade over `vram-core`.
//!
//! Five functions and a class, each taking and returning values whose TypeScript declarations
//! tsify generates into the `.d.ts` (no bare `JsValue` in a signature):
//!
//! - `version()`: the core's version;
//! - `evaluate(source, options?)`: the budget and the diagnostics, positions in UTF-16 units;
//! - `catalog()`: the built-in devices and models;
//! - `verdicts(source, check)`: the check's verdict on every catalog device;
//! - `fitMap(source, request)`: where a check fits over contexts × sessions, per device;
//! - `Importer`: model files dropped on the page, read header first, as a `model` block.
//!
//! The page loads the calculator (feature `calc`) at once and the importers (feature `import`)
//! as a second module when a file is first dropped; `cargo xtask web` builds each alone.
//!
//! Values cross the boundary as JSON text (see [`js`]): one `JSON.parse` in the browser is
//! smaller and faster than building objects field by field from wasm, and the budget is the
//! very text the CLI prints.
//!
//! Nothing a user types or drops makes an export throw: mistakes in the text are diagnostics,
//! mistakes in a request are an `error` field, and a panic hook prints any bug to the console.
//! The work is done in [`api`] and [`import`] over plain Rust values, which are tested natively
//! as well as in wasm.

pub mod api;
pub mod budget;
pub mod import;
pub mod js;

use tsify::Ts;
use wasm_bindgen::prelude::*;

#[cfg(feature = "calc")]
use api::{Catalog, EvaluateOptions, Evaluation, FitMapRequest, FitMapResult, Status, Verdicts};
#[cfg(feature = "import")]
use import::{Imported, ReadStep};

/// Installs the panic hook, so that a bug shows its message in the console rather than only
/// `unreachable executed`.
#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

/// The version of vram-core inside this module.
#[cfg(feature = "calc")]
#[wasm_bindgen]
pub fn version() -> String {
    vram_core::VERSION.to_string()
}

/// Parses, checks and evaluates `source` against the built-in catalog.
#[cfg(feature = "calc")]
#[wasm_bindgen]
pub fn evaluate(source: &str, options: Option<Ts<EvaluateOptions>>) -> Ts<Evaluation> {
    let (options, problem) = match options.map(|o| evaluate_options(&o.js_value())) {
        None => (EvaluateOptions::default(), None),
        Some(Ok(options)) => (options, None),
        Some(Err(error)) => (EvaluateOptions::default(), Some(format!("options: {error}"))),
    };
    let mut evaluation = api::evaluate(source, &options);
    if let Some(problem) = problem {
        evaluation.diagnostics.push(api::internal(source, &problem));
    }
    js::to_js(&evaluation).unwrap_or_else(|error| {
        // A byte count beyond 2^53 cannot be a JavaScript number: say so instead of rounding.
        let fallback = Evaluation {
            status: Status::InputErrors,
            budget: vram_core::budget::Budget {
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
        js::to_js(&fallback).unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
    })
}

/// The built-in devices and models.
#[cfg(feature = "calc")]
#[wasm_bindgen]
pub fn catalog() -> Ts<Catalog> {
    js::to_js(&api::catalog()).unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
}

/// The verdict of `check` (its id, or its workload's name) on every catalog device.
#[cfg(feature = "calc")]
#[wasm_bindgen]
pub fn verdicts(source: &str, check: &str) -> Ts<Verdicts> {
    js::to_js(&api::verdicts(source, check)).unwrap_or_else(|error| {
        let failed = Verdicts { check: None, devices: Vec::new(), error: Some(error) };
        js::to_js(&failed).unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
    })
}

/// Where a check fits over a grid of contexts and sessions, on each requested device.
#[cfg(feature = "calc")]
#[wasm_bindgen(js_name = fitMap)]
pub fn fit_map(source: &str, request: &Ts<FitMapRequest>) -> Ts<FitMapResult> {
    let result = match fit_map_request(&request.js_value()) {
        Ok(request) => api::fit_map(source, &request),
        Err(error) => FitMapResult {
            check: None,
            maps: Vec::new(),
            evaluations: 0,
            error: Some(format!("request: {error}")),
        },
    };
    js::to_js(&result).unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
}

#[cfg(feature = "calc")]
fn evaluate_options(value: &JsValue) -> Result<EvaluateOptions, String> {
    let object = js::object(value, &["without_catalog"])?;
    Ok(EvaluateOptions { without_catalog: js::flag(&object, "without_catalog")? })
}

#[cfg(feature = "calc")]
fn fit_map_request(value: &JsValue) -> Result<FitMapRequest, String> {
    let object = js::object(value, &["check", "devices", "contexts", "sessions"])?;
    Ok(FitMapRequest {
        check: js::string(&object, "check")?,
        devices: js::list(&object, "devices", JsValue::as_string, "a string")?,
        contexts: js::list(&object, "contexts", js::whole_number, "a whole number")?,
        sessions: js::list(&object, "sessions", js::whole_number, "a whole number")?,
    })
}

/// Model files of one drop (a config.json, safetensors or GGUF files), read header first:
/// `read` each file's first bytes until the step needs no more, then `finish`.
#[cfg(feature = "import")]
#[wasm_bindgen(js_name = Importer)]
#[derive(Debug, Default)]
pub struct JsImporter(import::Importer);

#[cfg(feature = "import")]
#[wasm_bindgen(js_class = Importer)]
impl JsImporter {
    #[wasm_bindgen(constructor)]
    pub fn new() -> JsImporter {
        JsImporter::default()
    }

    /// Reads `bytes`, the start of the file `name` of `fileLength` bytes; the step says how many
    /// bytes from the start to pass next (`need`), if any.
    pub fn read(
        &mut self,
        name: &str,
        bytes: &[u8],
        #[wasm_bindgen(js_name = fileLength)] file_length: f64,
    ) -> Ts<ReadStep> {
        // A JavaScript file size is a whole number below 2^53; anything else reads as empty.
        let file_length = if file_length.is_finite() && file_length >= 0.0 {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "checked above; saturates"
            )]
            let length = file_length as u64;
            length
        } else {
            0
        };
        js::to_js(&self.0.read(name, bytes, file_length))
            .unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
    }

    /// The model of the files read, as a `model` block named unlike any of `taken` (the model
    /// names the source and the catalog already use).
    #[allow(clippy::needless_pass_by_value, reason = "wasm-bindgen passes arrays by value")]
    pub fn finish(&self, taken: Vec<String>) -> Ts<Imported> {
        js::to_js(&self.0.finish(&taken)).unwrap_or_else(|_| Ts::new_unchecked(JsValue::NULL))
    }
}
