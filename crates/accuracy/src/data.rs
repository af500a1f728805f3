//! The points of `measured-peaks.json`, read as the file states them.
//!
//! Conditions are kept as the file's own strings; [`crate::express`] interprets them. Fields the
//! harness does not read (quotes, sources, the compiler's architecture notes) are left out, and
//! a field missing from a point reads as not stated.

use serde::Deserialize;
use serde_json::Value;

/// One published measurement with its conditions.
#[derive(Clone, Debug, Deserialize)]
pub struct Point {
    pub id: String,
    pub source_id: String,
    /// `llm_inference`, `training_lora`, `diffusion_inference`, ...
    pub workload: String,
    pub model: String,
    /// The architecture as the data recalls it (its `arch_source` asks to verify it): read only
    /// for a model the harness has no config.json for ([`crate::models::from_fields`]).
    #[serde(default)]
    pub param_count: Option<Value>,
    #[serde(default)]
    pub layers: Option<Value>,
    #[serde(default)]
    pub hidden_size: Option<Value>,
    #[serde(default)]
    pub attention_heads: Option<Value>,
    #[serde(default)]
    pub kv_heads: Option<Value>,
    #[serde(default)]
    pub vocab_size: Option<Value>,
    #[serde(default)]
    pub arch_notes: Option<String>,
    pub framework: String,
    #[serde(default)]
    pub framework_version: Option<String>,
    pub weight_precision: Option<String>,
    pub quantization: Option<String>,
    pub compute_dtype: Option<String>,
    pub kv_cache_dtype: Option<String>,
    pub optimizer: Option<String>,
    pub finetune_method: Option<String>,
    pub batch_size: Option<u64>,
    pub grad_accum: Option<u64>,
    /// A number, or a string such as `2048 (dataset packed)`.
    pub seq_len: Option<Value>,
    pub input_tokens: Option<String>,
    pub output_tokens: Option<u64>,
    /// The image or video conditions of a diffusion point (`1024x1024, 50 steps`).
    #[serde(default)]
    pub image_or_video: Option<String>,
    pub num_gpus: Option<u32>,
    pub gpu_type: String,
    pub parallelism: Option<String>,
    pub zero_stage: Option<u32>,
    pub activation_checkpointing: Option<bool>,
    pub offload: Option<String>,
    pub other_settings: Option<String>,
    pub measurement_method: String,
    pub measurement_scope: Option<String>,
    /// `peak`, `component`, `oom` or `max_fit_boundary`.
    pub measured_kind: String,
    pub value: Option<f64>,
    pub unit: String,
    pub value_gib: Option<f64>,
    pub components_included: Option<String>,
    pub quality: String,
}

impl Point {
    /// `seq_len` as a count of tokens: the number itself, or the number a string starts with.
    pub fn seq_len_tokens(&self) -> Option<u64> {
        match self.seq_len.as_ref()? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => leading_number(s),
            _ => None,
        }
    }

    /// An architecture field as a count: a number, or the number a string starts with.
    pub fn count(field: Option<&Value>) -> Option<u64> {
        match field? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => leading_number(s),
            _ => None,
        }
    }

    /// All the free-text condition fields, lower-cased and joined, for keyword rules that may
    /// find a setting in any of them (a ZeRO stage is sometimes only in the method's text).
    pub fn all_text(&self) -> String {
        [
            Some(self.framework.as_str()),
            self.framework_version.as_deref(),
            self.finetune_method.as_deref(),
            self.parallelism.as_deref(),
            self.offload.as_deref(),
            self.other_settings.as_deref(),
            self.components_included.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" | ")
        .to_lowercase()
    }
}

/// The whole number a text starts with, after an optional `~`: `~20 (prompt ...)` is 20.
pub fn leading_number(text: &str) -> Option<u64> {
    let digits: String = text
        .trim_start()
        .trim_start_matches('~')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Reads the data set.
pub fn parse(text: &str) -> Result<Vec<Point>, serde_json::Error> {
    serde_json::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_numbers() {
        assert_eq!(leading_number("~20 (same short prompt)"), Some(20));
        assert_eq!(leading_number("2048 (dataset packed)"), Some(2048));
        assert_eq!(leading_number("not stated"), None);
    }
}
