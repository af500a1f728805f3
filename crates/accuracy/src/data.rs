//! The points of `measured-peaks.json`, read as the file states them.
//!
//! Conditions are kept as the file's own strings; [`crate::express`] interprets them. Fields the
//! harness does not read (quotes, sources, the compiler's architecture notes) are left out, and
//! a field missing from a point reads as not stated.

use serde::Deserialize;
use serde_json::Value;

/// One published measurement with its conditions. Every field is read leniently (a number
/// written as a string, a string where a number was expected, a missing field): another data
/// set's quirks make a condition unreadable, never the whole file ([`parse`]).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Point {
    #[serde(default, deserialize_with = "text")]
    pub id: String,
    #[serde(default, deserialize_with = "text")]
    pub source_id: String,
    /// `llm_inference`, `training_lora`, `diffusion_inference`, ...
    #[serde(default, deserialize_with = "text")]
    pub workload: String,
    #[serde(default, deserialize_with = "text")]
    pub model: String,
    /// The architecture as the data recalls it (its `arch_source` asks to verify it): read only
    /// for a model the harness has no config.json for ([`crate::models::from_fields`]).
    #[serde(default, deserialize_with = "optional_text")]
    pub param_count: Option<String>,
    #[serde(default, deserialize_with = "count")]
    pub layers: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub hidden_size: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub attention_heads: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub kv_heads: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub vocab_size: Option<u64>,
    #[serde(default, deserialize_with = "optional_text")]
    pub arch_notes: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub framework: String,
    #[serde(default, deserialize_with = "optional_text")]
    pub framework_version: Option<String>,
    #[serde(default, deserialize_with = "optional_text")]
    pub weight_precision: Option<String>,
    #[serde(default, deserialize_with = "optional_text")]
    pub quantization: Option<String>,
    #[serde(default, deserialize_with = "optional_text")]
    pub compute_dtype: Option<String>,
    #[serde(default, deserialize_with = "optional_text")]
    pub kv_cache_dtype: Option<String>,
    #[serde(default, deserialize_with = "optional_text")]
    pub optimizer: Option<String>,
    #[serde(default, deserialize_with = "optional_text")]
    pub finetune_method: Option<String>,
    #[serde(default, deserialize_with = "count")]
    pub batch_size: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub grad_accum: Option<u64>,
    /// A number, or a string such as `2048 (dataset packed)`.
    pub seq_len: Option<Value>,
    #[serde(default, deserialize_with = "optional_text")]
    pub input_tokens: Option<String>,
    #[serde(default, deserialize_with = "count")]
    pub output_tokens: Option<u64>,
    /// The image or video conditions of a diffusion point (`1024x1024, 50 steps`).
    #[serde(default, deserialize_with = "optional_text")]
    pub image_or_video: Option<String>,
    #[serde(default, deserialize_with = "small_count")]
    pub num_gpus: Option<u32>,
    #[serde(default, deserialize_with = "text")]
    pub gpu_type: String,
    #[serde(default, deserialize_with = "optional_text")]
    pub parallelism: Option<String>,
    #[serde(default, deserialize_with = "zero_stage")]
    pub zero_stage: Option<u32>,
    #[serde(default, deserialize_with = "checkpointing")]
    pub activation_checkpointing: Option<Checkpointing>,
    #[serde(default, deserialize_with = "optional_text")]
    pub offload: Option<String>,
    #[serde(default, deserialize_with = "optional_text")]
    pub other_settings: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub measurement_method: String,
    #[serde(default, deserialize_with = "optional_text")]
    pub measurement_scope: Option<String>,
    /// `peak`, `component`, `oom` or `max_fit_boundary`.
    #[serde(default, deserialize_with = "text")]
    pub measured_kind: String,
    #[serde(default, deserialize_with = "number")]
    pub value: Option<f64>,
    #[serde(default, deserialize_with = "text")]
    pub unit: String,
    #[serde(default, deserialize_with = "number")]
    pub value_gib: Option<f64>,
    /// What the source says of its unit ("decimal GB (bytes / 1e9)", "printed as 'G'").
    #[serde(default, deserialize_with = "optional_text")]
    pub unit_note: Option<String>,
    #[serde(default, deserialize_with = "optional_text")]
    pub components_included: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub quality: String,
}

impl Point {
    /// `seq_len` as a count of tokens: the number itself, or the number a string starts with.
    pub fn seq_len_tokens(&self) -> Option<u64> {
        Self::count(self.seq_len.as_ref()).filter(|n| *n > 0)
    }

    /// A field as a count: a number, or the number a string starts with.
    fn count(field: Option<&Value>) -> Option<u64> {
        match field? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => leading_number(s),
            _ => None,
        }
    }

    /// The word after a command-line flag or a `key=value` setting in the free-text fields
    /// (`-np 4`, `--kv-cache-dtype fp8`, `OLLAMA_NUM_PARALLEL=4`) for the first of `keys` found,
    /// keys written without leading dashes and with underscores for inner ones; empty for a flag
    /// that ends the text (`-fa`).
    pub fn setting(&self, keys: &[&str]) -> Option<String> {
        let text = self.all_text().replace(['=', ':'], " ");
        let words: Vec<&str> =
            text.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).collect();
        // JSON options (`{"num_gpu": 20}`) quote their keys and values.
        let bare = |word: &str| {
            word.trim_matches(|c| matches!(c, '"' | '\'' | '{' | '}' | '(' | ')')).to_string()
        };
        words.iter().enumerate().find_map(|(at, word)| {
            let key = bare(word).trim_start_matches('-').replace('-', "_");
            keys.contains(&key.as_str())
                .then(|| words.get(at + 1).map_or_else(String::new, |next| bare(next)))
        })
    }

    /// The count a [`Point::setting`] states (`-np 4`, `micro_batch_size: 2`): the number its
    /// value starts with.
    pub fn setting_count(&self, keys: &[&str]) -> Option<u64> {
        self.setting(keys).and_then(|value| leading_number(&value))
    }

    /// All the free-text condition fields, lower-cased and joined, for keyword rules that may
    /// find a setting in any of them (a ZeRO stage is sometimes only in the method's text).
    pub fn all_text(&self) -> String {
        lower_joined([
            Some(self.framework.as_str()),
            self.framework_version.as_deref(),
            self.finetune_method.as_deref(),
            self.parallelism.as_deref(),
            self.offload.as_deref(),
            self.other_settings.as_deref(),
            self.components_included.as_deref(),
        ])
    }
}

/// The fields that are present, joined by ` | ` and lower-cased: the text keyword rules read.
pub(crate) fn lower_joined<'a>(fields: impl IntoIterator<Item = Option<&'a str>>) -> String {
    fields.into_iter().flatten().collect::<Vec<_>>().join(" | ").to_lowercase()
}

/// The whole number a text starts with, after an optional `~`: `~20 (prompt ...)` is 20.
pub fn leading_number(text: &str) -> Option<u64> {
    let text = text.trim_start().trim_start_matches('~');
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let number: u64 = digits.parse().ok()?;
    // `8k`, `32K`: a context written in thousands, binary where the number is a power of two
    // (8k = 8,192, as context windows are named), decimal otherwise (100k = 100,000).
    let mut rest = text[digits.len()..].chars();
    let thousands = matches!(rest.next(), Some('k' | 'K'))
        && !rest.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !thousands {
        return Some(number);
    }
    number.checked_mul(if number.is_power_of_two() { 1024 } else { 1000 })
}

/// The number written after `key` in a text: `n_ubatch 512`, `max_model_len (8192)`,
/// `pre_seq_len=128`.
pub fn number_after(text: &str, key: &str) -> Option<u64> {
    let start = text.find(key)? + key.len();
    let rest = text[start..].trim_start_matches([' ', '(', '=', ':', '"', '\'']);
    leading_number(rest)
}

/// The decimal written after `key` in a text, as [`number_after`] finds it: `guidance_scale=0.0`,
/// `CFG: 4.` (a sentence's full stop is not part of it).
pub fn decimal_after(text: &str, key: &str) -> Option<f64> {
    let start = text.find(key)? + key.len();
    let rest = text[start..].trim_start_matches([' ', '(', '=', ':']);
    let number: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    number.trim_end_matches('.').parse().ok()
}

/// Reads the data set: an array of points, or an object holding one under `points`. Entries
/// that are not objects are not points and are left out.
pub fn parse(text: &str) -> Result<Vec<Point>, serde_json::Error> {
    let value: Value = serde_json::from_str(text)?;
    let points = match value {
        Value::Object(mut fields) => fields.remove("points").unwrap_or(Value::Object(fields)),
        other => other,
    };
    let entries = match points {
        Value::Array(entries) => entries,
        other => vec![other],
    };
    entries.into_iter().filter(Value::is_object).map(serde_json::from_value).collect()
}

/// A text field: a string as written, a number or a flag as its JSON text, nothing as empty.
fn text<'de, D: serde::Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    Ok(optional_text(de)?.unwrap_or_default())
}

fn optional_text<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(de)? {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    })
}

/// A count: a whole number, or the number a string starts with (`"4 (per device)"`); a count
/// that is not one, or is 0, reads as not stated.
fn count<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    Ok(Point::count(Some(&Value::deserialize(de)?)).filter(|n| *n > 0))
}

fn small_count<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u32>, D::Error> {
    Ok(count(de)?.and_then(|n| u32::try_from(n).ok()))
}

/// A ZeRO stage: a number, or the digit after `zero` or `stage` in a wording (`ZeRO-3`,
/// `stage 2 (DeepSpeed)`); 0 and anything else read as not stated.
fn zero_stage<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u32>, D::Error> {
    let value = Value::deserialize(de)?;
    let Value::String(text) = &value else {
        return Ok(Point::count(Some(&value))
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0));
    };
    let lower = text.to_lowercase();
    let after = ["zero", "stage"].iter().find_map(|word| {
        let rest = &lower[lower.find(word)? + word.len()..];
        rest.trim_start_matches([' ', '-', '_', ':']).chars().next()?.to_digit(10)
    });
    Ok(after
        .or_else(|| leading_number(&lower).and_then(|n| u32::try_from(n).ok()))
        .filter(|n| (1..=3).contains(n)))
}

/// Which activations a training run recomputes in the backward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpointing {
    Off,
    /// Every layer's activations but its input (`gradient_checkpointing=True`).
    Full,
    /// Only the attention core's (Megatron's and torchtune's "selective").
    Selective,
    /// torchtitan's op-level selective checkpointing (`selective_ac_option = "op"`).
    SelectiveOp,
    /// Every layer's but its input, which goes to host memory until the backward pass needs it
    /// (Unsloth's `use_gradient_checkpointing="unsloth"`).
    FullOffloaded,
}

/// Checkpointing: `true`/`false`, or a wording whose first word says yes or no (`yes (full)`,
/// `enabled, every layer`, Unsloth's `use_gradient_checkpointing="unsloth"`), or that names
/// selective recomputation; anything else reads as not stated.
fn checkpointing<'de, D: serde::Deserializer<'de>>(
    de: D,
) -> Result<Option<Checkpointing>, D::Error> {
    Ok(match Value::deserialize(de)? {
        Value::Bool(true) => Some(Checkpointing::Full),
        Value::Bool(false) => Some(Checkpointing::Off),
        Value::String(s) => {
            let lower = s.trim().to_lowercase();
            let first = lower.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or("");
            match first {
                _ if lower.contains("selective") && op_level(&lower) => {
                    Some(Checkpointing::SelectiveOp)
                }
                _ if lower.contains("selective") => Some(Checkpointing::Selective),
                _ if lower.contains("unsloth") => Some(Checkpointing::FullOffloaded),
                "true" | "yes" | "on" | "enabled" | "full" => Some(Checkpointing::Full),
                "false" | "no" | "off" | "disabled" | "none" => Some(Checkpointing::Off),
                _ => None,
            }
        }
        _ => None,
    })
}

/// Whether a selective checkpointing wording names torchtitan's op-level policy ("op-level
/// SAC", `selective_ac_option 'op'`, "selective (op)").
fn op_level(lower: &str) -> bool {
    let words: Vec<&str> =
        lower.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).collect();
    words.iter().any(|w| matches!(*w, "op" | "op-level" | "per-op" | "ops"))
        || lower.contains("op level")
}

/// A measured value: a number, or the number a string starts with (`"14.6 GB"`).
fn number<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<f64>, D::Error> {
    Ok(match Value::deserialize(de)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => {
            let t = s.trim().trim_start_matches('~');
            let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
            t[..end].parse().ok()
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_data_sets_quirks_are_read_not_fatal() {
        let points = parse(
            r#"[{"id": "X-1", "workload": "llm_inference", "model": "m", "framework": "vLLM",
                 "batch_size": "4 (per device)", "num_gpus": "2", "output_tokens": null,
                 "activation_checkpointing": "not stated", "value": "14.6", "unit": "GB",
                 "gpu_type": 80, "measurement_method": null, "measured_kind": "peak",
                 "quality": "B", "zero_stage": "ZeRO-3"}]"#,
        )
        .expect("parses");
        let point = &points[0];
        assert_eq!(point.batch_size, Some(4));
        assert_eq!(point.num_gpus, Some(2));
        assert_eq!(point.activation_checkpointing, None);
        assert_eq!(point.value, Some(14.6));
        assert_eq!(point.gpu_type, "80");
        assert_eq!(point.measurement_method, "");
        assert_eq!(point.zero_stage, Some(3));
        assert_eq!(point.source_id, "");
        let wrapped = parse(r#"{"version": 2, "points": [{"id": "Y-1"}]}"#).expect("parses");
        assert_eq!(wrapped[0].id, "Y-1");
    }

    #[test]
    fn zero_stages_in_their_wordings() {
        let read = |value: &str| {
            let text = format!(r#"[{{"id": "Z", "zero_stage": {value}}}]"#);
            parse(&text).expect("parses")[0].zero_stage
        };
        assert_eq!(read("2"), Some(2));
        assert_eq!(read(r#""ZeRO-3""#), Some(3));
        assert_eq!(read(r#""stage 1 (DeepSpeed)""#), Some(1));
        assert_eq!(read(r#""2""#), Some(2));
        assert_eq!(read("0"), None);
        assert_eq!(read(r#""none""#), None);
        assert_eq!(read(r#""ZeRO++""#), None);
    }

    #[test]
    fn checkpointing_flags_in_their_wordings() {
        let read = |value: &str| {
            let text = format!(r#"[{{"id": "F", "activation_checkpointing": {value}}}]"#);
            parse(&text).expect("parses")[0].activation_checkpointing
        };
        assert_eq!(read("true"), Some(Checkpointing::Full));
        assert_eq!(read(r#""yes (full)""#), Some(Checkpointing::Full));
        assert_eq!(read(r#""unsloth""#), Some(Checkpointing::FullOffloaded));
        assert_eq!(
            read(r#""use_gradient_checkpointing=unsloth""#),
            Some(Checkpointing::FullOffloaded)
        );
        assert_eq!(read(r#""Disabled""#), Some(Checkpointing::Off));
        assert_eq!(read("false"), Some(Checkpointing::Off));
        assert_eq!(read(r#""selective (attention only)""#), Some(Checkpointing::Selective));
        assert_eq!(
            read(r#""selective (torchtitan op-level SAC, selective_ac_option 'op')""#),
            Some(Checkpointing::SelectiveOp)
        );
        assert_eq!(read(r#""selective, op""#), Some(Checkpointing::SelectiveOp));
        assert_eq!(read(r#""selective (operator fusion off)""#), Some(Checkpointing::Selective));
        assert_eq!(read(r#""not stated""#), None);
        assert_eq!(read(r#""maybe""#), None);
    }

    #[test]
    fn leading_numbers() {
        assert_eq!(leading_number("~20 (same short prompt)"), Some(20));
        assert_eq!(leading_number("2048 (dataset packed)"), Some(2048));
        assert_eq!(leading_number("not stated"), None);
        assert_eq!(leading_number("8k"), Some(8192));
        let point = Point {
            other_settings: Some(
                "-c 16384 -np 4 --cache-type-k q8_0, OLLAMA_NUM_PARALLEL=2 -fa".into(),
            ),
            ..Point::default()
        };
        assert_eq!(point.setting(&["np"]).as_deref(), Some("4"));
        assert_eq!(point.setting(&["cache_type_k"]).as_deref(), Some("q8_0"));
        assert_eq!(point.setting(&["ollama_num_parallel"]).as_deref(), Some("2"));
        assert_eq!(point.setting(&["fa"]).as_deref(), Some(""));
        assert_eq!(point.setting(&["num_beams"]), None);
        let options = Point {
            other_settings: Some(r#"Ollama API options {"num_gpu": 20, "num_ctx": 8192}"#.into()),
            ..Point::default()
        };
        assert_eq!(options.setting(&["num_gpu"]).as_deref(), Some("20"));
        assert_eq!(options.setting(&["num_ctx"]).as_deref(), Some("8192"));
        assert_eq!(number_after(r#"{"num_ctx": 8192}"#, "num_ctx"), Some(8192));
        assert_eq!(leading_number("128K tokens"), Some(131_072));
        assert_eq!(leading_number("100k"), Some(100_000));
        assert_eq!(leading_number("4 kB"), Some(4));
        assert_eq!(leading_number("2kv"), Some(2));
    }
}
