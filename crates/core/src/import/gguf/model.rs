//! The model a GGUF header describes: shape from the metadata, exact weights from the tensor
//! infos, and the llama.cpp preset the tensor types make.

use std::collections::{BTreeMap, BTreeSet};

use super::types::{FILE_TYPES, FILE_TYPES_LATER, GgmlType};
use super::{Gguf, Tensor, Value};
use crate::diagnostic::Diagnostic;
use crate::import::Problem;
use crate::import::model::{DtypeTotals, ImportedModel, Mla, Moe, Weights};
use crate::span::Span;

/// The model of a GGUF file, or of the shards of a split GGUF (`split.no`, `split.count`;
/// the model's metadata is in the first shard). `shards` are `(file name, header)`.
pub fn model(shards: &[(String, Gguf)]) -> Result<ImportedModel, Vec<Problem>> {
    let main = check_split(shards)?;
    let (file, gguf) = &shards[main];
    let problem = |span: Span, message: String| Problem {
        file: file.clone(),
        diagnostic: Diagnostic::error("I111", span, message),
    };
    let Some(arch) = gguf.text("general.architecture").map(str::to_string) else {
        let span = gguf.get("general.architecture").map_or(Span::new(0, 4), |kv| kv.span);
        return Err(vec![problem(
            span,
            "no `general.architecture` (a string) in the metadata".to_string(),
        )]);
    };
    let tensors: Vec<&Tensor> = shards.iter().flat_map(|(_, g)| &g.tensors).collect();
    let mut reader = Reader { gguf, arch: &arch, file, problems: Vec::new(), notes: Vec::new() };
    let mut model = reader.shape(&tensors);
    let (weights, notes) =
        weights(gguf, &tensors).map_err(|d| vec![Problem { file: file.clone(), diagnostic: d }])?;
    model.params = Some(weights.params);
    model.weights = Some(weights);
    model.notes.splice(0..0, notes);
    if !reader.problems.is_empty() {
        return Err(reader.problems);
    }
    model.source = if shards.len() > 1 {
        format!("GGUF v{} ({} split shards)", gguf.version, shards.len())
    } else {
        format!("GGUF v{}", gguf.version)
    };
    Ok(model)
}

/// Checks the shards of a split GGUF against each other, and returns the index of the first.
fn check_split(shards: &[(String, Gguf)]) -> Result<usize, Vec<Problem>> {
    let Some((_, first)) = shards.first() else {
        return Err(vec![Problem {
            file: "checkpoint".to_string(),
            diagnostic: Diagnostic::error("I115", Span::default(), "no GGUF file to read"),
        }]);
    };
    let count = first.unsigned("split.count");
    if shards.len() == 1 && count.is_none_or(|c| c <= 1) {
        return Ok(0);
    }
    let mut problems = Vec::new();
    let mut problem = |file: &str, message: String| {
        problems.push(Problem {
            file: file.to_string(),
            diagnostic: Diagnostic::error("I115", Span::default(), message),
        });
    };
    let expected = u64::try_from(shards.len()).unwrap_or(u64::MAX);
    let mut seen = BTreeSet::new();
    let mut main = 0;
    let mut tensors = 0u64;
    for (index, (file, gguf)) in shards.iter().enumerate() {
        tensors = tensors.saturating_add(u64::try_from(gguf.tensors.len()).unwrap_or(u64::MAX));
        match (gguf.unsigned("split.count"), gguf.unsigned("split.no")) {
            (Some(count), Some(no)) if count == expected => {
                if !seen.insert(no) || no >= count {
                    problem(file, format!("split.no {no} is repeated or out of range"));
                }
                if no == 0 {
                    main = index;
                }
            }
            (Some(count), Some(_)) => problem(
                file,
                format!("split.count is {count}, but {} shards were given", shards.len()),
            ),
            _ => problem(
                file,
                "is not a shard of a split GGUF (no split.count and split.no)".to_string(),
            ),
        }
    }
    let declared = shards[main].1.unsigned("split.tensors.count");
    if let Some(declared) = declared
        && declared != tensors
    {
        problem(
            &shards[main].0,
            format!("split.tensors.count is {declared}, but the shards hold {tensors} tensors"),
        );
    }
    let mut names = BTreeSet::new();
    for (file, gguf) in shards {
        for tensor in &gguf.tensors {
            if !names.insert(tensor.name.as_str()) {
                problems.push(Problem {
                    file: file.clone(),
                    diagnostic: Diagnostic::error(
                        "I114",
                        tensor.span,
                        format!("the tensor `{}` is in two shards", tensor.name),
                    ),
                });
            }
        }
    }
    if problems.is_empty() { Ok(main) } else { Err(problems) }
}

struct Reader<'a> {
    gguf: &'a Gguf,
    arch: &'a str,
    file: &'a str,
    problems: Vec<Problem>,
    notes: Vec<String>,
}

impl Reader<'_> {
    /// `{arch}.{suffix}` as a count: absent is `None`, a per-layer array is a note, another type
    /// is `I111`.
    fn count(&mut self, suffix: &str) -> Option<u64> {
        let key = format!("{}.{suffix}", self.arch);
        let kv = self.gguf.get(&key)?;
        match kv.value {
            Value::Uint(n) => Some(n),
            Value::Int(n) if n >= 0 => u64::try_from(n).ok(),
            Value::Array { len, .. } => {
                self.notes.push(format!("{key} is per layer ({len} values): not represented"));
                None
            }
            _ => {
                self.problems.push(Problem {
                    file: self.file.to_string(),
                    diagnostic: Diagnostic::error(
                        "I111",
                        kv.span,
                        format!("`{key}` must be a non-negative integer"),
                    ),
                });
                None
            }
        }
    }

    fn shape(&mut self, tensors: &[&Tensor]) -> ImportedModel {
        let has = |name: &str| tensors.iter().any(|t| t.name == name);
        let layers = self.count("block_count");
        let hidden = self.count("embedding_length");
        let mut ffn = self.count("feed_forward_length");
        let heads = self.count("attention.head_count");
        let kv_heads = self.count("attention.head_count_kv").or(heads);
        let key_length = self.count("attention.key_length");
        let value_length = self.count("attention.value_length");
        let vocab = self.count("vocab_size").or_else(|| {
            match self.gguf.get("tokenizer.ggml.tokens").map(|kv| &kv.value) {
                Some(Value::Array { len, .. }) => Some(*len),
                _ => tensors
                    .iter()
                    .find(|t| t.name == "token_embd.weight")
                    .and_then(|t| t.ne.get(1).copied()),
            }
        });
        let context = self.count("context_length");

        let experts = self.count("expert_count").filter(|&e| e > 0);
        let moe = experts.map(|experts| {
            let expert_ffn = self.count("expert_feed_forward_length").or(ffn);
            let shared_ffn = self.count("expert_shared_feed_forward_length").filter(|&s| s > 0);
            let shared = self.count("expert_shared_count").unwrap_or_else(|| {
                u64::from(shared_ffn.is_some() || has("blk.0.ffn_up_shexp.weight"))
            });
            Moe {
                experts,
                experts_active: self.count("expert_used_count"),
                expert_ffn,
                shared_experts: shared,
                shared_expert_ffn: shared_ffn.filter(|s| Some(*s) != expert_ffn),
                dense_layers: self.count("leading_dense_block_count").unwrap_or(0),
            }
        });
        if ffn.is_none_or(|f| f == 0) {
            ffn = moe.as_ref().and_then(|m| m.expert_ffn);
        }

        let mla =
            self.count("attention.kv_lora_rank").filter(|&r| r > 0).and_then(|kv_lora_rank| {
                let rope = self.count("rope.dimension_count")?;
                let key = self.count("attention.key_length_mla").or(key_length)?;
                let value = self.count("attention.value_length_mla").or(value_length)?;
                Some(Mla {
                    kv_lora_rank,
                    q_lora_rank: self.count("attention.q_lora_rank").filter(|&r| r > 0),
                    qk_rope_dim: rope,
                    qk_nope_dim: key.saturating_sub(rope),
                    v_head_dim: value,
                })
            });
        if mla.is_none()
            && let (Some(k), Some(v)) = (key_length, value_length)
            && k != v
        {
            self.notes.push(format!(
                "value heads are {v} wide, key heads {k}: head_dim is the key width"
            ));
        }

        let window = self.count("attention.sliding_window").filter(|&w| w > 0);
        let global_every = window.and_then(|_| {
            self.count("attention.sliding_window_pattern").or(match self.arch {
                "gemma2" | "gpt-oss" => Some(2),
                "gemma3" => Some(6),
                "cohere2" => Some(4),
                _ => None,
            })
        });
        self.rope_note();

        let tied = has("token_embd.weight") && !has("output.weight");
        let qkv_bias = has("blk.0.attn_q.bias") || has("blk.0.attn_qkv.bias");
        ImportedModel {
            source: String::new(),
            title: self.gguf.text("general.name").map(str::to_string),
            architecture: Some(self.arch.to_string()),
            layers,
            hidden,
            ffn,
            heads,
            kv_heads,
            head_dim: if mla.is_some() { None } else { key_length },
            vocab,
            tied_embeddings: tied,
            qkv_bias,
            moe,
            mla,
            sliding_window: window,
            global_every,
            context_length: context,
            notes: std::mem::take(&mut self.notes),
            ..ImportedModel::default()
        }
    }

    fn rope_note(&mut self) {
        let prefix = format!("{}.rope.", self.arch);
        let fields: Vec<String> = self
            .gguf
            .kvs
            .iter()
            .filter(|kv| {
                kv.key.starts_with(&prefix) && kv.key != format!("{prefix}dimension_count")
            })
            .map(|kv| match &kv.value {
                Value::Uint(n) => format!("{} {n}", &kv.key[prefix.len()..]),
                Value::Int(n) => format!("{} {n}", &kv.key[prefix.len()..]),
                Value::Float(f) => format!("{} {f}", &kv.key[prefix.len()..]),
                Value::Text(t) => format!("{} {t}", &kv.key[prefix.len()..]),
                Value::Bool(b) => format!("{} {b}", &kv.key[prefix.len()..]),
                Value::Array { len, .. } => format!("{} ({len} values)", &kv.key[prefix.len()..]),
            })
            .collect();
        if !fields.is_empty() {
            self.notes.push(format!(
                "rope {} is not represented: it moves positions, not memory",
                fields.join(", ")
            ));
        }
    }
}

/// Totals per ggml type, the parameter count (every tensor's elements) and the preset.
fn weights(main: &Gguf, tensors: &[&Tensor]) -> Result<(Weights, Vec<String>), Diagnostic> {
    let overflow =
        || Diagnostic::error("I110", Span::default(), "the file's totals overflow 64 bits");
    let mut weights = Weights::default();
    for tensor in tensors {
        weights.params = weights.params.checked_add(tensor.elements).ok_or_else(overflow)?;
        weights.bytes = weights.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
        weights.tensors += 1;
        let totals = weights
            .by_dtype
            .entry(tensor.kind.name.to_string())
            .or_insert_with(DtypeTotals::default);
        totals.tensors += 1;
        totals.elements = totals.elements.checked_add(tensor.elements).ok_or_else(overflow)?;
        totals.bytes = totals.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
    }
    let mut notes = Vec::new();
    let preset = preset(main, tensors, &mut notes);
    weights.format = match preset.as_str() {
        "F32" => "fp32".to_string(),
        "F16" => "fp16".to_string(),
        "BF16" => "bf16".to_string(),
        other => other.to_ascii_lowercase(),
    };
    Ok((weights, notes))
}

/// The llama.cpp preset: `general.file_type` when the file has it, else guessed from the type
/// that holds most of the matrices' bytes.
fn preset(gguf: &Gguf, tensors: &[&Tensor], notes: &mut Vec<String>) -> String {
    if let Some(file_type) = gguf.unsigned("general.file_type") {
        if let Some((_, name)) =
            FILE_TYPES.iter().chain(&FILE_TYPES_LATER).find(|(id, _)| *id == file_type)
        {
            // A preset is named after the type most of its tensors get (Q4_K_M: Q4_K).
            let base = ["_S", "_M", "_L", "_MOE"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            if GgmlType::from_name(base).is_some() && !tensors.iter().any(|t| t.kind.name == base) {
                notes.push(format!(
                    "general.file_type says {name}, but no tensor is stored as {base}"
                ));
            }
            return (*name).to_string();
        }
        notes.push(format!("general.file_type {file_type} is not a known preset"));
    }
    let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
    for tensor in tensors.iter().filter(|t| t.ne.len() >= 2) {
        let total = by_type.entry(tensor.kind.name).or_insert(0);
        *total = total.saturating_add(tensor.bytes);
    }
    let Some((dominant, _)) =
        by_type.into_iter().max_by_key(|(name, bytes)| (*bytes, std::cmp::Reverse(*name)))
    else {
        return "F32".to_string();
    };
    let more_bits = |base: &str| {
        let high = GgmlType::from_name("Q6_K");
        tensors.iter().any(|t| {
            (t.name.ends_with("attn_v.weight") || t.name.contains("ffn_down"))
                && Some(t.kind) == high
        }) && base != "Q6_K"
    };
    let guess = match dominant {
        "Q4_K" if more_bits("Q4_K") => "Q4_K_M",
        "Q4_K" => "Q4_K_S",
        "Q5_K" if more_bits("Q5_K") => "Q5_K_M",
        "Q5_K" => "Q5_K_S",
        "Q3_K" => "Q3_K_M",
        "MXFP4" => "MXFP4_MOE",
        other => other,
    };
    notes
        .push(format!("no general.file_type: the preset {guess} is guessed from the tensor types"));
    guess.to_string()
}
