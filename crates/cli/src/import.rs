//! `vram import PATH`: a model from the files people already have (config.json, safetensors
//! or GGUF headers, or a checkpoint folder), printed as a `model` block or as JSON with the
//! bytes that were read.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use vram_core::diagnostic::{Diagnostic, Severity};
use vram_core::import::{ImportedModel, Problem, name_of};
use vram_core::span::LineCol;

use crate::Colors;
use crate::args::ImportFormat;
use vram_files::read::{self, FileRead, LoadError, Loaded};

const EXIT_OK: u8 = 0;
const EXIT_INPUT_ERRORS: u8 = 2;

#[derive(Serialize)]
struct Report<'a> {
    vram_version: &'static str,
    path: String,
    /// What was read: the headers only, never the tensors.
    read: ReadSummary<'a>,
    model: Option<&'a ImportedModel>,
    /// The model as a `.vram` block.
    vram: Option<String>,
    diagnostics: Vec<Located>,
    /// A file system error, when there was one.
    error: Option<String>,
}

#[derive(Serialize)]
struct ReadSummary<'a> {
    bytes_read: u64,
    file_size: u64,
    files: Vec<&'a FileRead>,
}

/// A diagnostic with the file it is about; `start`/`end` are byte offsets into that file, and
/// `line`/`column` are given for JSON files.
#[derive(Serialize)]
struct Located {
    file: String,
    code: &'static str,
    severity: Severity,
    message: String,
    start: u32,
    end: u32,
    at: Option<LineCol>,
    help: Vec<String>,
}

pub(crate) fn run(path: &Path, format: ImportFormat, name: Option<&str>, colors: Colors) -> u8 {
    let mut files: Vec<FileRead> = Vec::new();
    let mut problems: Vec<(FileRead, Diagnostic)> = Vec::new();
    let mut error = None;
    let mut model = None;
    match read::load(path) {
        Ok(Loaded { checkpoint, files: read }) => {
            match checkpoint.import() {
                Ok(imported) => model = Some(imported),
                Err(found) => problems.extend(found.into_iter().map(|p| locate(&read, p))),
            }
            files = read;
        }
        Err(LoadError::Io(message)) => error = Some(message),
        Err(LoadError::Invalid { file, diagnostics }) => {
            problems.extend(diagnostics.into_iter().map(|d| (file.clone(), d)));
            files.push(file);
        }
    }
    let found_name = default_name(path);
    if let Some(model) = &mut model
        && model.title.is_none()
    {
        model.title = Some(found_name.clone());
    }
    let name = name.map_or(found_name, str::to_string);
    let text = model.as_ref().map(|m| m.to_vram(&name_of(&name)));
    let code = if model.is_some() { EXIT_OK } else { EXIT_INPUT_ERRORS };
    match format {
        ImportFormat::Vram => {
            if let Some(message) = &error {
                eprintln!("error: {message}");
            }
            for (file, diagnostic) in &problems {
                eprint!("{}", render(file, diagnostic, colors));
            }
            if let Some(text) = &text {
                out!("{text}");
            }
        }
        ImportFormat::Json => {
            let report = Report {
                vram_version: vram_core::VERSION,
                path: path.display().to_string(),
                read: ReadSummary {
                    bytes_read: files.iter().map(|f| f.bytes_read).sum(),
                    file_size: files.iter().map(|f| f.file_size).sum(),
                    files: files.iter().collect(),
                },
                model: model.as_ref(),
                vram: text,
                diagnostics: problems.iter().map(|(file, d)| located(file, d)).collect(),
                error,
            };
            outln!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
        }
    }
    code
}

/// The file a checkpoint problem is about, by the name the checkpoint used for it.
fn locate(files: &[FileRead], problem: Problem) -> (FileRead, Diagnostic) {
    let file = files.iter().find(|f| f.name == problem.file).cloned().unwrap_or_else(|| FileRead {
        path: problem.file.clone().into(),
        name: problem.file.clone(),
        bytes_read: 0,
        file_size: 0,
        text: None,
    });
    (file, problem.diagnostic)
}

fn located(file: &FileRead, d: &Diagnostic) -> Located {
    Located {
        file: file.path.display().to_string(),
        code: d.code,
        severity: d.severity,
        message: d.message.clone(),
        start: d.primary.start,
        end: d.primary.end,
        at: file.text.as_deref().map(|text| LineCol::of(text, d.primary.start)),
        help: d.help.clone(),
    }
}

/// A JSON file's diagnostic with its source line; a binary header's with its byte range.
fn render(file: &FileRead, diagnostic: &Diagnostic, colors: Colors) -> String {
    let name = file.path.display().to_string();
    if let Some(text) = &file.text {
        return vram_render::render(std::slice::from_ref(diagnostic), &name, text, colors.stderr);
    }
    let severity = match diagnostic.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let mut out = format!("{severity}[{}]: {}\n", diagnostic.code, diagnostic.message);
    let span = diagnostic.primary;
    let _ = writeln!(out, "  --> {name}: header bytes {}..{}", span.start, span.end);
    for label in &diagnostic.labels {
        let (start, end) = (label.span.start, label.span.end);
        let _ = writeln!(out, "  = {}: header bytes {start}..{end}", label.message);
    }
    for help in &diagnostic.help {
        let _ = writeln!(out, "  = help: {help}");
    }
    out.push('\n');
    out
}

/// The model's name: the checkpoint folder's for a file with a generic name (`config.json`,
/// `model.safetensors`, an index), else the file's stem (without a GGUF split suffix).
fn default_name(path: &Path) -> String {
    let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name_of_path = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    if path.is_dir() {
        return name_of_path(&absolute).unwrap_or_else(|| "imported".to_string());
    }
    let file = name_of_path(&absolute).unwrap_or_default();
    let generic = file == "config.json"
        || file == "model.safetensors"
        || file.ends_with(".safetensors.index.json");
    if generic && let Some(folder) = absolute.parent().and_then(name_of_path) {
        return folder;
    }
    let stem = absolute
        .file_stem()
        .map_or_else(|| "imported".to_string(), |s| s.to_string_lossy().into_owned());
    match stem.rsplit_once("-of-").and_then(|(rest, _)| rest.rsplit_once('-')) {
        Some((prefix, part)) if part.len() == 5 && part.bytes().all(|b| b.is_ascii_digit()) => {
            prefix.to_string()
        }
        _ => stem,
    }
}
