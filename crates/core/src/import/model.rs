//! What an importer produces: a model's shape in the language's terms, the stored weights when
//! a checkpoint's headers were read, and notes on what was not represented; and its text as a
//! `model` block in the canonical layout of [`crate::format::format`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

/// A model read from a checkpoint's files. Every field maps to a key of the language's `model`
/// block (docs/language.md); `None` means the files did not say.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ImportedModel {
    /// What the model was read from, for the block's first comment (`config.json`,
    /// `safetensors headers (2 shards)`, `GGUF v3`).
    pub source: String,
    /// A title for the block (`general.name`, `_name_or_path`).
    pub title: Option<String>,
    /// The architecture as the files name it (`LlamaForCausalLM` and `llama`, GGUF `llama`).
    pub architecture: Option<String>,
    /// The parameter count read from the tensors' shapes (packed formats count unpacked weights).
    pub params: Option<u64>,
    pub layers: Option<u64>,
    pub hidden: Option<u64>,
    pub ffn: Option<u64>,
    pub heads: Option<u64>,
    pub kv_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub vocab: Option<u64>,
    pub tied_embeddings: bool,
    pub qkv_bias: bool,
    pub mlp: Mlp,
    pub moe: Option<Moe>,
    pub mla: Option<Mla>,
    /// Tokens a local (sliding-window) attention layer sees.
    pub sliding_window: Option<u64>,
    /// Every Nth layer attends globally; `None` with a window means every layer is local.
    pub global_every: Option<u64>,
    /// The longest context the model was trained for (not a model field: a workload's
    /// `context` is chosen by the user; it goes into a comment).
    pub context_length: Option<u64>,
    /// `quantization_config` of config.json.
    pub quantization: Option<Quantization>,
    /// The dtype config.json declares for the stored weights (`torch_dtype`), as a precision.
    pub declared_dtype: Option<String>,
    /// The stored weights, when their headers were read.
    pub weights: Option<Weights>,
    /// What was assumed, ignored or not represented, one sentence each.
    pub notes: Vec<String>,
    /// An encoder-decoder's stacks (T5, mT5); `layers` is then `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoder_decoder: Option<EncoderDecoder>,
    /// Dropout is active in training (`dropout_rate` above 0), as read for encoder-decoders.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dropout: bool,
}

/// An encoder-decoder's stacks (`encoder_layers`, `decoder_layers`, `relative_buckets`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EncoderDecoder {
    pub encoder_layers: u64,
    pub decoder_layers: u64,
    /// T5's `relative_attention_num_buckets`.
    pub relative_buckets: Option<u64>,
    /// Parameters transformers keeps in fp32 under an fp16 load or bitsandbytes
    /// (`T5PreTrainedModel._keep_in_fp32_modules = ["wo"]`: one d_model × d_ff per layer).
    pub keep_in_fp32: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mlp {
    /// Gate, up and down projections (SwiGLU, GeGLU).
    #[default]
    Gated,
    /// Gate and up fused in one projection (Phi-3's `gate_up_proj`, GLM's `dense_h_to_4h`).
    #[serde(rename = "gated_fused")]
    GatedFused,
    /// Two matrices (GPT-2 style).
    Plain,
}

/// Mixture-of-experts fields (`experts`, `experts_active`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Moe {
    pub experts: u64,
    pub experts_active: Option<u64>,
    pub expert_ffn: Option<u64>,
    pub shared_experts: u64,
    pub shared_expert_ffn: Option<u64>,
    pub dense_layers: u64,
}

/// Multi-head latent attention dimensions (DeepSeek-V2/V3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Mla {
    pub kv_lora_rank: u64,
    /// `None`: a full query projection (DeepSeek-V2-Lite).
    pub q_lora_rank: Option<u64>,
    pub qk_rope_dim: u64,
    pub qk_nope_dim: u64,
    pub v_head_dim: u64,
}

/// A checkpoint's `quantization_config`, as far as it decides the stored format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "method", rename_all = "lowercase")]
pub enum Quantization {
    /// AutoGPTQ: `bits`-bit weights with a scale and zero per `group` inputs (`None`: one group
    /// per column, `group_size -1`).
    Gptq { bits: u64, group: Option<u64>, desc_act: bool },
    /// AutoAWQ.
    Awq { bits: u64, group: Option<u64> },
    /// FP8 weights; `block` is `weight_block_size` when scales are per block.
    Fp8 { block: Option<[u64; 2]> },
    /// OCP MXFP4 (gpt-oss): 4-bit values with an 8-bit scale per 32.
    Mxfp4,
    /// bitsandbytes 4-bit (`nf4` or `fp4`), optionally double-quantized.
    Bnb4 { kind: String, double_quant: bool },
    /// bitsandbytes LLM.int8.
    Bnb8,
    /// A method the importer does not know.
    Other { name: String },
}

impl Quantization {
    /// The language's name for the format (`gptq-int4-g32`, `fp8-block`, `nf4-dq`).
    pub fn format_name(&self) -> String {
        let grouped = |base: String, group: Option<u64>| match group {
            Some(128) | None => base,
            Some(g) => format!("{base}-g{g}"),
        };
        match self {
            Quantization::Gptq { bits, group, .. } => grouped(format!("gptq-int{bits}"), *group),
            Quantization::Awq { bits, group } => grouped(format!("awq-int{bits}"), *group),
            Quantization::Fp8 { block: Some(_) } => "fp8-block".to_string(),
            Quantization::Fp8 { block: None } => "fp8".to_string(),
            Quantization::Mxfp4 => "mxfp4".to_string(),
            Quantization::Bnb4 { kind, double_quant } => {
                if *double_quant {
                    format!("{kind}-dq")
                } else {
                    kind.clone()
                }
            }
            Quantization::Bnb8 => "int8-bnb".to_string(),
            Quantization::Other { name } => name_of(name),
        }
    }
}

/// The stored weights of a checkpoint, read from its headers: exact bytes, never estimated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Weights {
    /// The format the weights are in, in the language's words (`bf16`, `gptq-int4-g32`,
    /// `q4_k_m`).
    pub format: String,
    /// Sum of every tensor's bytes (GGUF: without alignment padding).
    pub bytes: u64,
    /// Parameters: elements, with packed formats counted as the weights they hold.
    pub params: u64,
    pub tensors: u64,
    /// Totals per stored dtype (safetensors `BF16`, ggml `Q4_K`).
    pub by_dtype: BTreeMap<String, DtypeTotals>,
    /// Tensors recognised as a quantization method's storage (`qweight`, `*_blocks`, ...),
    /// with their scales and zero points.
    pub quantized: Option<Quantized>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DtypeTotals {
    pub tensors: u64,
    pub elements: u64,
    pub bytes: u64,
}

/// The tensors that store quantized weights, recognised by name and dtype.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Quantized {
    /// `gptq`, `awq`, `fp8`, `mxfp4`, `bitsandbytes`.
    pub method: String,
    /// Packed weight tensors (`qweight`, `*_blocks`, FP8 `weight`).
    pub weight_tensors: u64,
    /// Scale, zero-point and index tensors (`scales`, `qzeros`, `g_idx`, `weight_scale_inv`).
    pub overhead_tensors: u64,
    /// Bytes of both.
    pub bytes: u64,
}

impl ImportedModel {
    /// The format of the stored weights: read from the headers when they were, else what
    /// config.json declares (`quantization_config`, then `torch_dtype`).
    pub fn weights_format(&self) -> Option<String> {
        if let Some(weights) = &self.weights {
            return Some(weights.format.clone());
        }
        self.quantization.as_ref().map(Quantization::format_name).or(self.declared_dtype.clone())
    }

    /// The model as a `.vram` `model` block named `name` (made a valid name if it is not one),
    /// in the canonical layout (`vram fmt` leaves it unchanged), with the notes as comments
    /// above it. Fields are grouped: shape, mixture of experts, attention, window, weights.
    pub fn to_vram(&self, name: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# {}", comment(&format!("Imported from {}.", self.source)));
        if let Some(context) = self.context_length {
            let _ = writeln!(
                out,
                "# Trained context: {context} tokens (set a workload's `context` within it)."
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "# {}", comment(note));
        }
        out.push_str("model ");
        out.push_str(&name_of(name));
        if let Some(title) = &self.title {
            let _ = write!(out, " \"{}\"", string_content(title));
        }
        let groups: Vec<Vec<(&str, String)>> =
            self.field_groups().into_iter().filter(|g| !g.is_empty()).collect();
        if groups.is_empty() {
            out.push_str(" {}\n");
            return out;
        }
        out.push_str(" {\n");
        for (index, group) in groups.iter().enumerate() {
            if index > 0 {
                out.push('\n');
            }
            let width = group.iter().map(|(key, _)| key.len()).max().unwrap_or(0);
            for (key, value) in group {
                let _ = writeln!(out, "  {key:<width$} {value}");
            }
        }
        out.push_str("}\n");
        out
    }

    fn field_groups(&self) -> Vec<Vec<(&'static str, String)>> {
        let count = |value: u64| value.to_string();
        let mut shape = Vec::new();
        if let Some(params) = self.params {
            shape.push(("params", grouped(params)));
        }
        if let Some(stacks) = &self.encoder_decoder {
            shape.push(("encoder_layers", count(stacks.encoder_layers)));
            shape.push(("decoder_layers", count(stacks.decoder_layers)));
        }
        let fields = [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", if self.mla.is_some() { None } else { self.head_dim }),
            ("vocab", self.vocab),
        ];
        shape.extend(fields.into_iter().filter_map(|(key, value)| Some((key, count(value?)))));
        if self.tied_embeddings {
            shape.push(("tied_embeddings", "true".to_string()));
        }
        match self.mlp {
            Mlp::Plain => shape.push(("mlp", "plain".to_string())),
            Mlp::GatedFused => shape.push(("mlp", "gated_fused".to_string())),
            Mlp::Gated => {}
        }
        if self.qkv_bias {
            shape.push(("qkv_bias", "true".to_string()));
        }
        if let Some(buckets) = self.encoder_decoder.as_ref().and_then(|s| s.relative_buckets) {
            shape.push(("relative_buckets", count(buckets)));
        }
        if let Some(kept) = self.encoder_decoder.as_ref().and_then(|s| s.keep_in_fp32) {
            shape.push(("keep_in_fp32", count(kept)));
        }
        if self.dropout {
            shape.push(("dropout", "true".to_string()));
        }

        let mut moe = Vec::new();
        if let Some(m) = &self.moe {
            moe.push(("experts", count(m.experts)));
            if let Some(active) = m.experts_active {
                moe.push(("experts_active", count(active)));
            }
            if let Some(ffn) = m.expert_ffn {
                moe.push(("expert_ffn", count(ffn)));
            }
            if m.shared_experts > 0 {
                moe.push(("shared_experts", count(m.shared_experts)));
                if let Some(ffn) = m.shared_expert_ffn {
                    moe.push(("shared_expert_ffn", count(ffn)));
                }
            }
            if m.dense_layers > 0 {
                moe.push(("dense_layers", count(m.dense_layers)));
            }
        }

        let mut attention = Vec::new();
        if let Some(mla) = &self.mla {
            attention.push(("attention", "mla".to_string()));
            attention.push(("kv_lora_rank", count(mla.kv_lora_rank)));
            if let Some(q) = mla.q_lora_rank {
                attention.push(("q_lora_rank", count(q)));
            }
            attention.push(("qk_rope_dim", count(mla.qk_rope_dim)));
            attention.push(("qk_nope_dim", count(mla.qk_nope_dim)));
            attention.push(("v_head_dim", count(mla.v_head_dim)));
        }

        let mut window = Vec::new();
        if let Some(tokens) = self.sliding_window {
            window.push(("sliding_window", format!("{tokens} tokens")));
            if let Some(every) = self.global_every {
                window.push(("global_every", count(every)));
            }
        }

        let mut stored = Vec::new();
        if let Some(weights) = &self.weights {
            stored.push(("weights_bytes", format!("{} B", grouped(weights.bytes))));
        }
        if let Some(format) = self.weights_format() {
            stored.push(("weights_format", name_of(&format)));
        }
        vec![shape, moe, attention, window, stored]
    }
}

/// `8_030_261_248`: digits in groups of three, for counts of 10,000 and more.
fn grouped(value: u64) -> String {
    let digits = value.to_string();
    if digits.len() <= 4 {
        return digits;
    }
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push('_');
        }
        out.push(digit);
    }
    out
}

/// `text` as the inside of a `.vram` string: no line breaks or other control characters,
/// `"` and `\` escaped, at most 120 characters.
fn string_content(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().filter(|c| !c.is_control()).take(120) {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `text` on one comment line: control characters become spaces.
fn comment(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// `text` made into a `.vram` name: lower-case letters, digits and `_`, with `-` or `.` only
/// between them; a leading digit gets an `m-` prefix; nothing usable gives `imported`.
pub fn name_of(text: &str) -> String {
    let mut out = String::new();
    let mut separator = None;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            if let Some(s) = separator.take()
                && !out.is_empty()
            {
                out.push(s);
            }
            out.push(c.to_ascii_lowercase());
        } else if separator.is_none() {
            separator = Some(if c == '.' { '.' } else { '-' });
        }
    }
    match out.chars().next() {
        None => "imported".to_string(),
        Some(c) if c.is_ascii_digit() => format!("m-{out}"),
        Some(_) => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_titles_and_numbers_are_valid_language() {
        assert_eq!(name_of("Meta-Llama-3.1-8B"), "meta-llama-3.1-8b");
        assert_eq!(name_of("gpt-oss-20b (MXFP4)"), "gpt-oss-20b-mxfp4");
        assert_eq!(name_of("7B--model__x"), "m-7b-model__x");
        assert_eq!(name_of("--"), "imported");
        assert_eq!(name_of("q4_k_m"), "q4_k_m");
        assert_eq!(string_content("a \"b\"\n\\c"), "a \\\"b\\\"\\\\c");
        assert_eq!(grouped(8_030_261_248), "8_030_261_248");
        assert_eq!(grouped(128_256), "128_256");
        assert_eq!(grouped(9999), "9999");
    }
}
