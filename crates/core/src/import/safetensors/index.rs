//! `model.safetensors.index.json`: which shard holds each tensor, held against the shards.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::{Header, Tensor};
use crate::diagnostic::Diagnostic;
use crate::import::cap_diagnostics;
use crate::import::json::{Doc, Object, kind, value_kind};
use crate::span::Span;

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Index {
    /// `metadata.total_size`: the sum of the tensors' bytes, by the writer's count.
    pub total_size: Option<u64>,
    /// Tensor name → shard file name.
    pub weight_map: BTreeMap<String, String>,
    /// Where each `weight_map` entry is in the index.
    #[serde(skip)]
    pub spans: BTreeMap<String, Span>,
}

impl Index {
    /// The shard file names, in order.
    pub fn shards(&self) -> Vec<&str> {
        let set: BTreeSet<&str> = self.weight_map.values().map(String::as_str).collect();
        set.into_iter().collect()
    }
}

/// Reads `model.safetensors.index.json`.
pub fn parse_index(bytes: &[u8]) -> Result<Index, Vec<Diagnostic>> {
    let text = crate::import::json_text(bytes, "the index")?;
    let doc = Doc { text, base: 0 };
    let root = doc.root("the index").map_err(|d| vec![d])?;
    let mut index = Index::default();
    if let Some(raw) = root.get("metadata") {
        let metadata = doc.object(raw, "`metadata`").map_err(|d| vec![d])?;
        if let Some((value, raw)) = metadata.value("total_size") {
            match value.as_u64() {
                Some(n) => index.total_size = Some(n),
                None => {
                    return Err(vec![Diagnostic::error(
                        "I111",
                        doc.span_of(raw),
                        format!("`total_size` must be a byte count, found {}", value_kind(&value)),
                    )]);
                }
            }
        }
    }
    let Some(raw) = root.get("weight_map") else {
        return Err(vec![
            Diagnostic::error("I111", Span::new(0, 1), "the index has no `weight_map`").with_help(
                "`model.safetensors.index.json` maps each tensor name to its shard file",
            ),
        ]);
    };
    let map: Object<'_> = doc.object(raw, "`weight_map`").map_err(|d| vec![d])?;
    let mut diagnostics = Vec::new();
    for (name, raw) in &map.entries {
        let span = doc.span_of(raw);
        match serde_json::from_str::<Value>(raw.get()) {
            Ok(Value::String(file)) => {
                if let Some(first) = index.spans.insert(name.clone(), span) {
                    diagnostics.push(
                        Diagnostic::error("I114", span, format!("`{name}` is mapped twice"))
                            .with_label(first, "first here"),
                    );
                }
                index.weight_map.insert(name.clone(), file);
            }
            _ => diagnostics.push(Diagnostic::error(
                "I111",
                span,
                format!("the shard of `{name}` must be a file name, found {}", kind(raw)),
            )),
        }
    }
    if diagnostics.is_empty() { Ok(index) } else { Err(cap_diagnostics(diagnostics)) }
}

/// The tensors of a sharded checkpoint, checked against its index: every tensor the index maps
/// is in the shard it names, every shard tensor is mapped, no tensor is in two shards.
/// `shards` are `(file name, header)`; diagnostics point into the index.
pub fn combine(index: &Index, shards: &[(String, Header)]) -> Result<Vec<Tensor>, Vec<Diagnostic>> {
    let mut diagnostics = Vec::new();
    let files: BTreeSet<&str> = shards.iter().map(|(name, _)| name.as_str()).collect();
    let mut found: BTreeMap<&str, &str> = BTreeMap::new();
    let mut tensors = Vec::new();
    for (file, header) in shards {
        for tensor in &header.tensors {
            if let Some(other) = found.insert(&tensor.name, file) {
                diagnostics.push(Diagnostic::error(
                    "I114",
                    Span::new(0, 0),
                    format!("`{}` is in both {other} and {file}", tensor.name),
                ));
                continue;
            }
            match index.weight_map.get(&tensor.name) {
                Some(mapped) if mapped == file => tensors.push(tensor.clone()),
                Some(mapped) => diagnostics.push(Diagnostic::error(
                    "I115",
                    index.spans.get(&tensor.name).copied().unwrap_or_default(),
                    format!("the index puts `{}` in {mapped}, but it is in {file}", tensor.name),
                )),
                None => diagnostics.push(
                    Diagnostic::error(
                        "I115",
                        Span::new(0, 1),
                        format!("`{}` is in {file} but not in the index", tensor.name),
                    )
                    .with_help("the index and the shards come from different checkpoints"),
                ),
            }
        }
    }
    for (name, file) in &index.weight_map {
        let span = index.spans.get(name).copied().unwrap_or_default();
        if !files.contains(file.as_str()) {
            diagnostics.push(Diagnostic::error(
                "I115",
                span,
                format!("the index puts `{name}` in {file}, which was not read"),
            ));
        } else if !found.contains_key(name.as_str()) {
            diagnostics.push(Diagnostic::error(
                "I115",
                span,
                format!("the index puts `{name}` in {file}, but that shard has no such tensor"),
            ));
        }
    }
    if diagnostics.is_empty() { Ok(tensors) } else { Err(cap_diagnostics(diagnostics)) }
}
