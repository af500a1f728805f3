//! Importers: a model's shape and its stored weights, read from the files people already have
//! (Hugging Face `config.json`, safetensors headers, GGUF headers), as an [`ImportedModel`] that
//! renders as a `model` block ([`ImportedModel::to_vram`]).
//!
//! The importers do no IO: they take the bytes a front end read (the CLI reads files, the web
//! page reads `Blob.slice`s) and return data or diagnostics (codes `I1xx`, spans as byte ranges
//! into the bytes given). Binary headers have a length that is only known once they are read,
//! so [`safetensors::parse_header`] and [`gguf::parse`] take the start of a file and its length,
//! and answer [`Parsed::NeedMore`] with how many bytes from the start they need; the front end
//! reads that many and calls again. Tensor data is never read.
//!
//! Untrusted lengths are checked against caps and against the bytes at hand before anything is
//! allocated for them: a hostile header gives a diagnostic, never a panic or a huge allocation.
//!
//! A front end reads and parses each file, then hands the pieces to [`Checkpoint::import`],
//! which combines shards, counts the weights and fills in the model.

pub mod config_json;
pub mod gguf;
mod json;
mod model;
pub mod safetensors;

use serde::Serialize;

use crate::diagnostic::Diagnostic;
use crate::span::Span;

pub use model::{
    DtypeTotals, ImportedModel, Mla, Mlp, Moe, Quantization, Quantized, Weights, name_of,
};

/// What a front end read for each `from "path"` of a file's models, keyed by the path as
/// written: the imported model, or the problems found reading it.
pub type Imports = crate::table::Table<Result<ImportedModel, Vec<Problem>>>;

/// The largest JSON file read whole (config.json, `model.safetensors.index.json`): 64 MiB.
/// Real ones are a few kB (configs) to a few MB (the index of a model with 100,000 tensors).
pub const MAX_JSON_BYTES: u64 = 64 << 20;

/// At most this many diagnostics are reported for one file; a hostile header could otherwise
/// produce one per entry.
const MAX_DIAGNOSTICS: usize = 20;

/// The outcome of reading a header from the start of a file.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed<T> {
    /// The header was complete in the bytes given.
    Done(T),
    /// The header continues past the bytes given: call again with at least this many bytes
    /// from the start of the file. Never more than the format's header cap.
    NeedMore(u64),
    /// The header is malformed (or the file ends inside it).
    Failed(Vec<Diagnostic>),
}

impl<T> Parsed<T> {
    fn failed(diagnostic: Diagnostic) -> Self {
        Parsed::Failed(vec![diagnostic])
    }
}

/// A diagnostic about one file of a checkpoint, named as the front end named it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub file: String,
    pub diagnostic: Diagnostic,
}

impl Problem {
    fn new(file: &str, diagnostic: Diagnostic) -> Self {
        Problem { file: file.to_string(), diagnostic }
    }
}

/// The parsed files of one checkpoint, as a front end found them: any of a config.json, a
/// safetensors index with its shards (or one safetensors file), or GGUF files (one, or the
/// shards of a split).
#[derive(Clone, Debug, Default)]
pub struct Checkpoint {
    /// `config.json`, already read by [`config_json::parse`].
    pub config: Option<ImportedModel>,
    /// `(file name, index)` of `model.safetensors.index.json`.
    pub index: Option<(String, safetensors::Index)>,
    /// `(file name, header)` of each safetensors file; the names are the ones the index uses.
    pub safetensors: Vec<(String, safetensors::Header)>,
    /// `(file name, header)` of each GGUF file.
    pub gguf: Vec<(String, gguf::Gguf)>,
}

impl Checkpoint {
    /// The model: config.json's shape (or the GGUF metadata's), with the stored weights from
    /// the headers (`weights_bytes`, `weights_format`, the parameter count).
    pub fn import(&self) -> Result<ImportedModel, Vec<Problem>> {
        if !self.gguf.is_empty() {
            let mut model = gguf::model(&self.gguf)?;
            if let Some(config) = &self.config {
                model.notes.push(format!(
                    "config.json ({}) was not used: the GGUF metadata gives the shape",
                    config.architecture.as_deref().unwrap_or("unknown architecture")
                ));
            }
            return Ok(model);
        }
        let tensors = if let Some((name, index)) = &self.index {
            safetensors::combine(index, &self.safetensors).map_err(|found| {
                found.into_iter().map(|d| Problem::new(name, d)).collect::<Vec<_>>()
            })?
        } else {
            unindexed(&self.safetensors)?
        };
        let mut model = self.config.clone().unwrap_or_else(|| ImportedModel {
            notes: vec![
                "no config.json: the model's shape is unknown, only its weights".to_string(),
            ],
            ..ImportedModel::default()
        });
        if self.safetensors.is_empty() {
            if self.config.is_none() {
                return Err(vec![Problem::new(
                    "checkpoint",
                    Diagnostic::error(
                        "I115",
                        Span::default(),
                        "no config.json, safetensors or GGUF file to read",
                    ),
                )]);
            }
            return Ok(model);
        }
        let file = self.safetensors.first().map_or("checkpoint", |(name, _)| name.as_str());
        let (weights, notes) = safetensors::weights(&tensors, model.quantization.as_ref())
            .map_err(|d| vec![Problem::new(file, d)])?;
        if let Some((_, index)) = &self.index
            && let Some(total) = index.total_size
            && total != weights.bytes
        {
            model.notes.push(format!(
                "the index's total_size is {total} bytes; the shards' headers add up to {}",
                weights.bytes
            ));
        }
        let shards = self.safetensors.len();
        let read = if shards == 1 {
            "safetensors header".to_string()
        } else {
            format!("safetensors headers ({shards} shards)")
        };
        model.source =
            if self.config.is_some() { format!("{} and its {read}", model.source) } else { read };
        model.params = Some(weights.params);
        model.notes.extend(notes);
        model.weights = Some(weights);
        Ok(model)
    }
}

/// The tensors of safetensors files without an index; a name in two files is `I114`.
fn unindexed(
    files: &[(String, safetensors::Header)],
) -> Result<Vec<safetensors::Tensor>, Vec<Problem>> {
    let mut seen: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
    let mut problems = Vec::new();
    let mut tensors = Vec::new();
    for (file, header) in files {
        for tensor in &header.tensors {
            match seen.insert(&tensor.name, file) {
                Some(other) => problems.push(Problem::new(
                    file,
                    Diagnostic::error(
                        "I114",
                        tensor.span,
                        format!("`{}` is also in {other}", tensor.name),
                    )
                    .with_help("without an index, each tensor must be in one file only"),
                )),
                None => tensors.push(tensor.clone()),
            }
        }
    }
    problems.truncate(MAX_DIAGNOSTICS);
    if problems.is_empty() { Ok(tensors) } else { Err(problems) }
}

/// `bytes` as JSON text, or `I102` (too large) / `I103` (not UTF-8). `what` names the file.
fn json_text<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str, Vec<Diagnostic>> {
    let length = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if length > MAX_JSON_BYTES {
        return Err(vec![Diagnostic::error(
            "I102",
            Span::new(0, 0),
            format!("{what} has {length} bytes, over the limit of {MAX_JSON_BYTES}"),
        )]);
    }
    std::str::from_utf8(bytes).map_err(|error| {
        let at = error.valid_up_to();
        vec![Diagnostic::error("I103", Span::new(at, at + 1), format!("{what} is not UTF-8 text"))]
    })
}

/// Keeps the first [`MAX_DIAGNOSTICS`], saying that there were more.
fn cap_diagnostics(mut diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    if diagnostics.len() > MAX_DIAGNOSTICS {
        diagnostics.truncate(MAX_DIAGNOSTICS);
        if let Some(last) = diagnostics.last_mut() {
            last.help.push("further problems in this file are not shown".to_string());
        }
    }
    diagnostics
}
