//! What the exports compute, as plain Rust over plain data, so that it is tested natively too.
//! `lib.rs` only moves these values across the wasm boundary.

use serde::{Deserialize, Serialize};
use tsify::Tsify;
use vram_core::eval::grid::{self, Grid};

use crate::budget::Bytes;

/// The result of `evaluate`: the budget and every diagnostic, as data.
///
/// The budget is the core's own value, serialized as the CLI serializes it; its TypeScript
/// declaration is the mirror in [`crate::budget`], which a test holds to the same JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct Evaluation {
    pub vram_version: String,
    pub status: Status,
    #[tsify(type = "Budget")]
    pub budget: vram_core::budget::Budget,
    /// In source order; positions in UTF-16 code units, as browser editors count.
    pub diagnostics: Vec<Diagnostic>,
}

/// Options of `evaluate`; every field may be left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Tsify)]
#[serde(default, deny_unknown_fields)]
pub struct EvaluateOptions {
    /// Evaluate against the source only, without the built-in catalog of devices and models.
    #[tsify(optional)]
    pub without_catalog: bool,
}

/// What the outcome means: the CLI's exit codes 0, 1 and 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Tsify)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Fits,
    DoesNotFit,
    InputErrors,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Tsify)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// A place in the source: 1-based line and column, and the 0-based offset from the start of
/// the text, both counted in UTF-16 code units (what `String.prototype.length` counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Tsify)]
pub struct Position {
    pub line: u32,
    pub column: u32,
    pub offset: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
pub struct Label {
    pub start: Position,
    pub end: Position,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
pub struct Diagnostic {
    /// A stable code such as `E012` (docs/diagnostics.md).
    pub code: String,
    pub severity: Severity,
    pub message: String,
    pub start: Position,
    pub end: Position,
    pub labels: Vec<Label>,
    pub help: Vec<String>,
}

/// The position of byte `offset` of `source`, in UTF-16 units (clamped to the text).
pub fn position(source: &str, offset: u32) -> Position {
    let mut offset = (offset as usize).min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let count = |text: &str| u32::try_from(text.encode_utf16().count()).unwrap_or(u32::MAX);
    let lines = before.bytes().filter(|&b| b == b'\n').count() + 1;
    Position {
        line: u32::try_from(lines).unwrap_or(u32::MAX),
        column: count(&before[line_start..]) + 1,
        offset: count(before),
    }
}

fn diagnostic(source: &str, d: &vram_core::diagnostic::Diagnostic) -> Diagnostic {
    Diagnostic {
        code: d.code.to_string(),
        severity: match d.severity {
            vram_core::diagnostic::Severity::Error => Severity::Error,
            vram_core::diagnostic::Severity::Warning => Severity::Warning,
        },
        message: d.message.clone(),
        start: position(source, d.primary.start),
        end: position(source, d.primary.end),
        labels: d
            .labels
            .iter()
            .map(|l| Label {
                start: position(source, l.span.start),
                end: position(source, l.span.end),
                message: l.message.clone(),
            })
            .collect(),
        help: d.help.clone(),
    }
}

/// Parses, checks and evaluates `source` against the built-in catalog.
pub fn evaluate(source: &str, options: &EvaluateOptions) -> Evaluation {
    let outcome = if options.without_catalog {
        vram_core::evaluate_with(source, &vram_core::hir::Program::default())
    } else {
        vram_core::evaluate(source)
    };
    let diagnostics: Vec<Diagnostic> =
        outcome.diagnostics.iter().map(|d| diagnostic(source, d)).collect();
    let status = outcome.status();
    Evaluation {
        vram_version: vram_core::VERSION.to_string(),
        status: match status {
            vram_core::Status::Fits => Status::Fits,
            vram_core::Status::DoesNotFit => Status::DoesNotFit,
            vram_core::Status::InputErrors => Status::InputErrors,
        },
        budget: outcome.budget,
        diagnostics,
    }
}

/// An error of the adapter itself (not of the user's text), as a diagnostic at the start.
pub fn internal(source: &str, message: &str) -> Diagnostic {
    Diagnostic {
        code: "X001".to_string(),
        severity: Severity::Error,
        message: message.to_string(),
        start: position(source, 0),
        end: position(source, 0),
        labels: Vec::new(),
        help: vec!["this is a bug in vram-wasm; please report it with the input".to_string()],
    }
}

/// The built-in devices and models.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
pub struct Catalog {
    pub devices: Vec<CatalogDevice>,
    pub models: Vec<CatalogModel>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
pub struct CatalogDevice {
    pub name: String,
    pub title: String,
    pub memory: Bytes,
    /// True when `memory` is what the driver reports; false for a marketed size.
    pub memory_reported: bool,
    pub arch: String,
    /// Precisions with hardware support (`fp16`, `bf16`, `fp8`, `fp4`).
    pub precisions: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct CatalogModel {
    pub name: String,
    pub title: String,
    pub parameters: Option<u64>,
}

pub fn catalog() -> Catalog {
    let program = vram_core::catalog::builtin();
    Catalog {
        devices: program
            .devices
            .values()
            .map(|d| CatalogDevice {
                name: d.name.clone(),
                title: d.display_name().to_string(),
                memory: d.memory.0,
                memory_reported: d.memory_reported,
                arch: d.arch.name().to_string(),
                precisions: d.features.iter().map(|f| f.name().to_string()).collect(),
            })
            .collect(),
        models: program
            .models
            .values()
            .map(|m| CatalogModel {
                name: m.name.clone(),
                title: m.title.clone().unwrap_or_else(|| m.name.clone()),
                parameters: m
                    .params
                    .or_else(|| m.shape.as_ref().and_then(vram_core::eval::parameter_count)),
            })
            .collect(),
    }
}

/// What `fitMap` is asked: one check of the source, on some devices, over a grid.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct FitMapRequest {
    /// A check id (`WORKLOAD on TARGET`) or the name of a workload that one check uses.
    pub check: String,
    /// Device names from the file or the catalog; the check's split is kept on each.
    pub devices: Vec<String>,
    /// Strictly increasing context lengths in tokens (the rows).
    pub contexts: Vec<u64>,
    /// Strictly increasing session counts (the columns).
    pub sessions: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct FitMapResult {
    /// The check's id, or null when the request could not be served (see `error`).
    pub check: Option<String>,
    pub maps: Vec<DeviceMap>,
    /// Full evaluations all the maps took together.
    pub evaluations: u32,
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct DeviceMap {
    pub device: String,
    /// Per context (row): how many session values, from the smallest, fit.
    pub boundary: Vec<u32>,
    /// Why the device cannot run the workload at all, if it cannot.
    pub unsupported: Option<String>,
}

pub fn fit_map(source: &str, request: &FitMapRequest) -> FitMapResult {
    let failed = |error: String| FitMapResult {
        check: None,
        maps: Vec::new(),
        evaluations: 0,
        error: Some(error),
    };
    if request.devices.len() > 256 {
        return failed("at most 256 devices per fit map".to_string());
    }
    let (program, _) = grid::program(source);
    let grid = match Grid::new(&program, &request.check) {
        Ok(grid) => grid,
        Err(error) => return failed(error.to_string()),
    };
    let mut maps = Vec::with_capacity(request.devices.len());
    let mut evaluations = 0u32;
    for device in &request.devices {
        match grid.fit_map(device, &request.contexts, &request.sessions) {
            Ok(map) => {
                evaluations = evaluations.saturating_add(map.evaluations);
                maps.push(DeviceMap {
                    device: map.device,
                    boundary: map.boundary,
                    unsupported: map.unsupported,
                });
            }
            Err(error) => return failed(error.to_string()),
        }
    }
    FitMapResult { check: Some(grid.check().id.clone()), maps, evaluations, error: None }
}

/// The verdict of one check on every catalog device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct Verdicts {
    pub check: Option<String>,
    pub devices: Vec<DeviceVerdict>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
pub struct DeviceVerdict {
    pub device: String,
    pub title: String,
    /// How many such devices the check uses (its split is kept).
    pub count: u32,
    pub capacity: Bytes,
    /// The worst device's used memory plus headroom.
    pub required: Bytes,
    #[tsify(type = "Verdict")]
    pub verdict: vram_core::budget::Verdict,
}

pub fn verdicts(source: &str, check: &str) -> Verdicts {
    let (program, _) = grid::program(source);
    let grid = match Grid::new(&program, check) {
        Ok(grid) => grid,
        Err(error) => {
            return Verdicts { check: None, devices: Vec::new(), error: Some(error.to_string()) };
        }
    };
    let mut devices = Vec::new();
    for device in vram_core::catalog::builtin().devices.values() {
        let Ok(budget) = grid.on_device(&device.name) else { continue };
        let required = budget.devices.iter().map(|d| d.required.0).max().unwrap_or(0);
        devices.push(DeviceVerdict {
            device: device.name.clone(),
            title: device.display_name().to_string(),
            count: u32::try_from(budget.devices.len()).unwrap_or(u32::MAX),
            capacity: device.memory.0,
            required,
            verdict: budget.verdict.clone(),
        });
    }
    Verdicts { check: Some(grid.check().id.clone()), devices, error: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_utf16_units() {
        // `µ` is one UTF-16 unit (two bytes), `😀` two units (four bytes).
        let source = "ab\nµ😀x\n";
        assert_eq!(position(source, 0), Position { line: 1, column: 1, offset: 0 });
        assert_eq!(position(source, 3), Position { line: 2, column: 1, offset: 3 });
        assert_eq!(position(source, 5), Position { line: 2, column: 2, offset: 4 });
        assert_eq!(position(source, 9), Position { line: 2, column: 4, offset: 6 });
        // Inside a character: clamped back to its start; past the end: the end.
        assert_eq!(position(source, 6), Position { line: 2, column: 2, offset: 4 });
        assert_eq!(position(source, 99), Position { line: 3, column: 1, offset: 8 });
    }

    #[test]
    fn a_mistake_is_a_diagnostic_at_its_line() {
        let source = "workload w {\n  model nope\n  components { x 1 GiB persistent }\n}\n";
        let evaluation = evaluate(source, &EvaluateOptions::default());
        assert_eq!(evaluation.status, Status::InputErrors);
        let first = &evaluation.diagnostics[0];
        assert_eq!(first.severity, Severity::Error);
        assert_eq!(first.start.line, 2, "{evaluation:?}");
        assert!(first.message.contains("nope"), "{evaluation:?}");
        // Without the catalog, the catalog's model is unknown too.
        let alone = evaluate(
            "workload w {\n  model llama3.1-8b\n  components { x 1 GiB persistent }\n}\n",
            &EvaluateOptions { without_catalog: true },
        );
        assert!(alone.diagnostics.iter().any(|d| d.code == "E020"), "{alone:?}");
    }

    #[test]
    fn fit_maps_and_verdicts_report_mistakes_as_data() {
        let source = "workload w { model llama3.1-8b\n inference { weights bf16\n context 8192 tokens } }\ncheck w on l4\n";
        let request = |check: &str, device: &str| FitMapRequest {
            check: check.into(),
            devices: vec![device.into()],
            contexts: vec![1024, 8192],
            sessions: vec![1, 4, 16],
        };
        assert!(fit_map(source, &request("nope", "l4")).error.is_some());
        assert!(fit_map(source, &request("w", "nope")).error.is_some());
        let ok = fit_map(source, &request("w", "l4"));
        assert_eq!(ok.error, None);
        assert_eq!(ok.maps[0].boundary.len(), 2);
        let all = verdicts(source, "w");
        assert_eq!(all.devices.len(), catalog().devices.len());
        assert!(all.devices.iter().any(|d| d.verdict.fits()));
        assert!(all.devices.iter().any(|d| !d.verdict.fits()));
    }
}
