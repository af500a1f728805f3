//! Hugging Face `config.json` to an [`ImportedModel`]: the decoder's shape, mixture of experts,
//! multi-head latent attention, sliding windows, tied embeddings, the stored dtype and
//! `quantization_config`.
//!
//! Families read: Llama, Mistral, Mixtral, Qwen2/2.5/3 (dense and MoE), Gemma 2/3 (including
//! the `text_config` of multimodal checkpoints, with `Gemma3TextConfig`'s defaults for absent
//! keys), Phi-3, DeepSeek-V2/V3, gpt-oss, and the T5 and mT5 encoder-decoders; other decoders whose config uses the same key names
//! read the same way. What the language cannot say (rope scaling, vision towers, biases besides
//! q/k/v) becomes a note.

use serde_json::Value;
use serde_json::value::RawValue;

use super::json::{Doc, Object, value_kind};
use super::model::{EncoderDecoder, ImportedModel, Mla, Mlp, Moe, Quantization};
use crate::diagnostic::Diagnostic;
use crate::span::Span;

/// `Gemma3TextConfig`'s defaults (transformers `configuration_gemma3.py`), for the keys that
/// Gemma 3 checkpoints leave out of `text_config` (gemma-3-4b-it has no head counts or vocab).
const GEMMA3_TEXT_DEFAULTS: &[(&str, u64)] = &[
    ("vocab_size", 262_208),
    ("hidden_size", 2304),
    ("intermediate_size", 9216),
    ("num_hidden_layers", 26),
    ("num_attention_heads", 8),
    ("num_key_value_heads", 4),
    ("head_dim", 256),
    ("max_position_embeddings", 131_072),
    ("sliding_window", 4096),
    ("sliding_window_pattern", 6),
];

/// Model types read as T5 encoder-decoders (transformers `T5Config`, `MT5Config`: one relative
/// position table per stack). UMT5, whose every layer has its own table, is not among them.
const T5_TYPES: &[&str] = &["t5", "mt5"];

/// Model types whose MLP has two matrices (no gate).
const PLAIN_MLP: &[&str] =
    &["gpt2", "gpt_neox", "gptj", "phi", "opt", "falcon", "starcoder2", "bloom", "gpt_bigcode"];

/// Model types whose gate and up projections are one fused matrix, split after it: Phi-3 and
/// Phi-4 (`Phi3MLP.gate_up_proj`), GLM and GLM-4 (`gate_up_proj`), ChatGLM (`dense_h_to_4h`).
const FUSED_GATE_UP: &[&str] = &["phi3", "glm", "glm4", "chatglm"];

/// Reads `config.json`. Errors: `I102` (over [`super::MAX_JSON_BYTES`]), `I103` (not JSON),
/// `I111` (a shape key missing or of the wrong type).
pub fn parse(bytes: &[u8]) -> Result<ImportedModel, Vec<Diagnostic>> {
    let text = super::json_text(bytes, "config.json")?;
    let doc = Doc { text, base: 0 };
    let root = doc.root("config.json").map_err(|d| vec![d])?;
    let mut reader =
        Reader { doc, diagnostics: Vec::new(), notes: Vec::new(), defaulted: Vec::new() };
    let model = reader.model(&root);
    if reader.diagnostics.is_empty() { Ok(model) } else { Err(reader.diagnostics) }
}

struct Reader<'a> {
    doc: Doc<'a>,
    diagnostics: Vec<Diagnostic>,
    notes: Vec<String>,
    /// Keys that took a config class default, with the value.
    defaulted: Vec<(&'static str, u64)>,
}

impl<'a> Reader<'a> {
    fn model(&mut self, root: &Object<'a>) -> ImportedModel {
        // Multimodal checkpoints (Gemma 3, Llama 4, Mistral 3) nest the language model.
        let nested = root.get("text_config").and_then(|raw| self.object(raw, "`text_config`"));
        let cfg = nested.as_ref().unwrap_or(root);
        let model_type = self.text(cfg, "model_type").or_else(|| self.text(root, "model_type"));
        let model_type = model_type.unwrap_or_default();
        let defaults: &[(&str, u64)] =
            if model_type == "gemma3_text" || (model_type == "gemma3" && nested.is_none()) {
                GEMMA3_TEXT_DEFAULTS
            } else {
                &[]
            };
        let architecture = Self::architecture(root, &model_type);
        let gemma = model_type.starts_with("gemma");

        let t5 = T5_TYPES.contains(&model_type.as_str());
        let layers = self.shape(cfg, &["num_hidden_layers", "n_layer", "num_layers"], defaults);
        let encoder_decoder = if t5 { self.t5_stacks(cfg, layers) } else { None };
        let layers = if t5 { None } else { layers };
        let hidden = self.shape(cfg, &["hidden_size", "n_embd", "d_model"], defaults);
        let mut ffn = self.shape(
            cfg,
            &["intermediate_size", "n_inner", "ffn_dim", "d_ff", "ffn_hidden_size"],
            defaults,
        );
        let heads = self.shape(cfg, &["num_attention_heads", "n_head", "num_heads"], defaults);
        let kv_heads = self.shape(
            cfg,
            &["num_key_value_heads", "num_kv_heads", "multi_query_group_num"],
            defaults,
        );
        // ChatGLM names the head width `kv_channels`.
        let head_dim = self.shape(cfg, &["head_dim", "d_kv", "kv_channels"], defaults);
        let vocab = self.shape(cfg, &["vocab_size", "padded_vocab_size"], defaults);
        let context = self.shape(
            cfg,
            &["max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"],
            defaults,
        );

        // Qwen v1's remote code builds its MLP's two input projections `w1` and `w2` as
        // `Linear(hidden, intermediate_size // 2)` (modeling_qwen.py `QWenMLP`): its
        // `intermediate_size` is both halves of the gated MLP.
        if model_type == "qwen"
            && let Some(both) = ffn
        {
            self.notes.push(format!(
                "Qwen v1: intermediate_size {both} is w1 and w2 together: ffn {}",
                both / 2
            ));
            ffn = Some(both / 2);
        }
        let moe = self.moe(cfg, ffn);
        if ffn.is_none()
            && let Some(expert_ffn) = moe.as_ref().and_then(|m| m.expert_ffn)
        {
            self.notes.push(format!(
                "no intermediate_size: ffn is the experts' {expert_ffn} (every layer is MoE)"
            ));
            ffn = Some(expert_ffn);
        }
        let stacked = encoder_decoder.as_ref().map(|s| s.encoder_layers);
        for (value, key, meaning) in [
            (layers.or(stacked), "num_hidden_layers", "the number of decoder layers"),
            (hidden, "hidden_size", "the model width"),
            (ffn, "intermediate_size", "the MLP width"),
            (heads, "num_attention_heads", "the attention heads"),
            (vocab, "vocab_size", "the vocabulary size"),
        ] {
            // A key present with the wrong type was reported already.
            if value.is_none() && cfg.get(key).is_none() {
                self.missing(cfg, key, meaning);
            }
        }
        let kv_heads = kv_heads.or_else(|| {
            heads.inspect(|_| {
                self.notes.push(
                    "no num_key_value_heads: multi-head attention, kv_heads = heads".to_string(),
                );
            })
        });

        let tied = self
            .flag(cfg, "tie_word_embeddings")
            .or_else(|| self.flag(root, "tie_word_embeddings"));
        // T5Config keeps PretrainedConfig's default, a tied head (T5 1.0 rescales it).
        let tied_by_default = gemma || t5;
        let tied_embeddings = tied.unwrap_or_else(|| {
            self.notes.push(format!(
                "no tie_word_embeddings: {} (the {} default)",
                if tied_by_default { "tied" } else { "untied" },
                if gemma {
                    "Gemma"
                } else if t5 {
                    "T5Config"
                } else {
                    "Llama-style"
                }
            ));
            tied_by_default
        });
        let qkv_bias = self.qkv_bias(cfg, &model_type);
        if self.flag(cfg, "mlp_bias") == Some(true) {
            self.notes.push("mlp_bias: MLP biases are not represented".to_string());
        }
        let mla = self.mla(cfg);
        let (sliding_window, global_every) =
            if t5 { (None, None) } else { self.window(cfg, &model_type, layers, defaults) };
        let mlp = if t5 {
            self.t5_mlp(cfg)
        } else if PLAIN_MLP.contains(&model_type.as_str()) {
            Mlp::Plain
        } else if FUSED_GATE_UP.contains(&model_type.as_str()) {
            Mlp::GatedFused
        } else {
            Mlp::Gated
        };
        // T5Config's dropout_rate defaults to 0.1; training runs with it unless a script sets 0.
        let dropout = t5
            && match cfg.value("dropout_rate") {
                Some((Value::Number(rate), _)) => rate.as_f64().is_some_and(|r| r > 0.0),
                _ => true,
            };
        let quantization = root
            .get("quantization_config")
            .or_else(|| cfg.get("quantization_config"))
            .and_then(|raw| self.quantization(raw));
        let declared_dtype = self.dtype(root, cfg);
        self.other_notes(root, cfg, &model_type);
        if !self.defaulted.is_empty() {
            let list: Vec<String> =
                self.defaulted.iter().map(|(key, value)| format!("{key} {value}")).collect();
            self.notes.insert(
                0,
                format!("absent from config.json, Gemma3TextConfig defaults: {}", list.join(", ")),
            );
        }
        let title = self.text(root, "_name_or_path").filter(|t| !t.trim().is_empty());
        // T5's `wo`, one hidden × ffn matrix per layer of both stacks, stays in fp32 under an
        // fp16 load (`T5PreTrainedModel._keep_in_fp32_modules`).
        let mut encoder_decoder = encoder_decoder;
        if let (Some(stacks), Some(hidden), Some(ffn)) = (encoder_decoder.as_mut(), hidden, ffn) {
            stacks.keep_in_fp32 = (stacks.encoder_layers.checked_add(stacks.decoder_layers))
                .and_then(|n| n.checked_mul(hidden))
                .and_then(|n| n.checked_mul(ffn));
        }
        ImportedModel {
            source: "config.json".to_string(),
            title,
            architecture,
            params: None,
            layers,
            hidden,
            ffn,
            heads,
            kv_heads,
            head_dim,
            vocab,
            tied_embeddings,
            qkv_bias,
            mlp,
            moe,
            mla,
            sliding_window,
            global_every,
            context_length: context,
            quantization,
            declared_dtype,
            weights: None,
            notes: std::mem::take(&mut self.notes),
            encoder_decoder,
            dropout,
        }
    }

    /// A T5 encoder-decoder's stacks (transformers `T5Config`): `num_layers` encoder layers,
    /// `num_decoder_layers` decoder layers (default: as many), and the relative-position buckets
    /// (`relative_attention_num_buckets`, default 32).
    fn t5_stacks(&mut self, cfg: &Object<'a>, encoder: Option<u64>) -> Option<EncoderDecoder> {
        let encoder_layers = encoder?;
        let decoder_layers = self.count(cfg, "num_decoder_layers").unwrap_or_else(|| {
            self.notes.push(
                "no num_decoder_layers: as many as num_layers (the T5Config default)".to_string(),
            );
            encoder_layers
        });
        let relative_buckets = self.count(cfg, "relative_attention_num_buckets").or_else(|| {
            self.notes
                .push("no relative_attention_num_buckets: 32 (the T5Config default)".to_string());
            Some(32)
        });
        Some(EncoderDecoder {
            encoder_layers,
            decoder_layers,
            relative_buckets,
            keep_in_fp32: None,
        })
    }

    /// T5's feed-forward (`T5Config.feed_forward_proj`, default `relu`): `gated-gelu` (T5 1.1,
    /// mT5, Flan-T5: wi_0, wi_1, wo) is gated, `relu` (T5 1.0: wi, wo) plain.
    fn t5_mlp(&mut self, cfg: &Object<'a>) -> Mlp {
        match self.text(cfg, "feed_forward_proj") {
            Some(kind) if kind.starts_with("gated-") => Mlp::Gated,
            Some(_) => Mlp::Plain,
            None => {
                self.notes.push(
                    "no feed_forward_proj: relu, two matrices (the T5Config default)".to_string(),
                );
                Mlp::Plain
            }
        }
    }

    fn architecture(root: &Object<'a>, model_type: &str) -> Option<String> {
        let class = match root.value("architectures") {
            Some((Value::Array(names), _)) => {
                names.first().and_then(Value::as_str).map(str::to_string)
            }
            _ => None,
        };
        match (class, model_type) {
            (Some(class), "") => Some(class),
            (Some(class), kind) => Some(format!("{class} ({kind})")),
            (None, "") => None,
            (None, kind) => Some(kind.to_string()),
        }
    }

    /// The first of `keys` present, else a config class default.
    fn shape(
        &mut self,
        cfg: &Object<'a>,
        keys: &[&'static str],
        defaults: &[(&'static str, u64)],
    ) -> Option<u64> {
        for key in keys {
            if let Some(value) = self.count(cfg, key) {
                return Some(value);
            }
        }
        let (key, value) = defaults.iter().find(|(key, _)| keys.contains(key))?;
        if cfg.get(key).is_none() {
            self.defaulted.push((key, *value));
            return Some(*value);
        }
        None
    }

    fn moe(&mut self, cfg: &Object<'a>, ffn: Option<u64>) -> Option<Moe> {
        let experts = self.first(
            cfg,
            &["num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"],
        )?;
        if experts == 0 {
            return None;
        }
        let experts_active = self.first(
            cfg,
            &["num_experts_per_tok", "experts_per_token", "moe_top_k", "num_experts_per_token"],
        );
        let expert_ffn = self.count(cfg, "moe_intermediate_size").or(ffn);
        let (shared_experts, shared_expert_ffn) =
            if let Some(n) = self.first(cfg, &["n_shared_experts", "num_shared_experts"]) {
                (n, None)
            } else {
                match self.count(cfg, "shared_expert_intermediate_size") {
                    Some(size) if size > 0 => (1, Some(size).filter(|s| Some(*s) != expert_ffn)),
                    _ => (0, None),
                }
            };
        let mut dense_layers = self.count(cfg, "first_k_dense_replace").unwrap_or(0);
        if let Some(only) = self.counts(cfg, "mlp_only_layers")
            && !only.is_empty()
        {
            let prefix = only.iter().enumerate().all(|(i, &layer)| layer == i as u64);
            if prefix && dense_layers == 0 {
                dense_layers = only.len() as u64;
            } else {
                self.notes.push(format!(
                    "mlp_only_layers {only:?} are dense; only a leading run of dense layers can be \
                     represented, so they count as MoE layers"
                ));
            }
        }
        for key in ["decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step"] {
            if let Some(step) = self.count(cfg, key)
                && step > 1
            {
                self.notes.push(format!(
                    "{key} {step}: only every {step}th layer is MoE, but every layer after \
                     dense_layers is counted as MoE (an overestimate)"
                ));
            }
        }
        Some(Moe {
            experts,
            experts_active,
            expert_ffn,
            shared_experts,
            shared_expert_ffn,
            dense_layers,
        })
    }

    fn mla(&mut self, cfg: &Object<'a>) -> Option<Mla> {
        let kv_lora_rank = self.count(cfg, "kv_lora_rank").filter(|&r| r > 0)?;
        let q_lora_rank = self.count(cfg, "q_lora_rank").filter(|&r| r > 0);
        let mut required = |key: &str, meaning: &str| {
            let value = self.count(cfg, key);
            if value.is_none() {
                self.missing(cfg, key, meaning);
            }
            value
        };
        let rope = required("qk_rope_head_dim", "the rotary part of an MLA key");
        let nope = required("qk_nope_head_dim", "the non-rotary part of an MLA key");
        let value = required("v_head_dim", "an MLA value head's size");
        Some(Mla {
            kv_lora_rank,
            q_lora_rank,
            qk_rope_dim: rope?,
            qk_nope_dim: nope?,
            v_head_dim: value?,
        })
    }

    fn qkv_bias(&mut self, cfg: &Object<'a>, model_type: &str) -> bool {
        // Qwen2 and Qwen2-MoE always have q/k/v biases; their configs do not say so.
        let qwen2 = model_type.starts_with("qwen2");
        let attention_bias = self.flag(cfg, "attention_bias") == Some(true);
        // ChatGLM and GLM-4 say `add_qkv_bias`; Qwen v1's fused `c_attn` keeps nn.Linear's
        // bias (its `no_bias` drops the others').
        let explicit = self.flag(cfg, "qkv_bias") == Some(true)
            || self.flag(cfg, "add_qkv_bias") == Some(true)
            || model_type == "qwen";
        if attention_bias && !qwen2 {
            self.notes.push(
                "attention_bias: q, k and v biases are represented; the output projection's is not"
                    .to_string(),
            );
        }
        qwen2 || attention_bias || explicit
    }

    /// The sliding window and how often a layer attends globally.
    fn window(
        &mut self,
        cfg: &Object<'a>,
        model_type: &str,
        layers: Option<u64>,
        defaults: &[(&'static str, u64)],
    ) -> (Option<u64>, Option<u64>) {
        let window = self.shape(cfg, &["sliding_window"], defaults);
        if self.flag(cfg, "use_sliding_window") == Some(false) {
            if let Some(window) = window {
                self.notes.push(format!(
                    "sliding_window {window} is not used (use_sliding_window is false): full attention"
                ));
            }
            return (None, None);
        }
        let Some(window) = window.filter(|&w| w > 0) else { return (None, None) };
        if self.flag(cfg, "use_sliding_window") == Some(true) {
            self.notes.push(format!(
                "use_sliding_window with max_window_layers is not represented: every layer counts as \
                 full attention (sliding_window {window} left out, an overestimate)"
            ));
            return (None, None);
        }
        if let Some(types) = self.texts(cfg, "layer_types") {
            return self.layer_types(&types, window, layers);
        }
        let every = match model_type {
            "gemma2" => Some(2),
            "gemma3" | "gemma3_text" | "cohere2" => {
                let default = if model_type == "cohere2" { 4 } else { 6 };
                Some(self.shape(cfg, &["sliding_window_pattern"], defaults).unwrap_or(default))
            }
            _ => None,
        };
        (Some(window), every)
    }

    /// `layer_types` (`sliding_attention` / `full_attention` per layer) as a window and a
    /// period; a pattern that is not "every Nth layer is global" is left out, with a note.
    fn layer_types(
        &mut self,
        types: &[String],
        window: u64,
        layers: Option<u64>,
    ) -> (Option<u64>, Option<u64>) {
        let full = |t: &String| t == "full_attention";
        let local = |t: &String| t == "sliding_attention";
        if let Some(other) = types.iter().find(|t| !full(t) && !local(t)) {
            self.notes.push(format!(
                "layer_types has `{other}`, which is not represented: every layer counts as full attention"
            ));
            return (None, None);
        }
        if layers.is_some_and(|n| n != types.len() as u64) {
            self.notes.push(format!(
                "layer_types lists {} layers, not num_hidden_layers; the window is left out",
                types.len()
            ));
            return (None, None);
        }
        match types.iter().position(full) {
            None => (Some(window), None),
            Some(_) if !types.iter().any(local) => (None, None),
            Some(first) => {
                let period = first + 1;
                let regular =
                    types.iter().enumerate().all(|(i, t)| full(t) == ((i + 1) % period == 0));
                if regular {
                    (Some(window), Some(period as u64))
                } else {
                    self.notes.push(format!(
                        "layer_types mixes {} local and {} global layers irregularly; the window is \
                         left out (every layer counts as global, an overestimate)",
                        types.iter().filter(|t| local(t)).count(),
                        types.iter().filter(|t| full(t)).count()
                    ));
                    (None, None)
                }
            }
        }
    }

    fn quantization(&mut self, raw: &'a RawValue) -> Option<Quantization> {
        let q = self.object(raw, "`quantization_config`")?;
        let method = self.text(&q, "quant_method").unwrap_or_default();
        let group = |size: Option<u64>, raw_size: Option<i64>| match raw_size {
            Some(-1) => None,
            _ => Some(size.unwrap_or(128)),
        };
        let found = match method.as_str() {
            "gptq" => {
                let raw_group = q.value("group_size").and_then(|(v, _)| v.as_i64());
                Quantization::Gptq {
                    bits: self.count(&q, "bits").unwrap_or(4),
                    group: group(raw_group.and_then(|g| u64::try_from(g).ok()), raw_group),
                    desc_act: self.flag(&q, "desc_act").unwrap_or(false),
                }
            }
            "awq" => {
                let raw_group = ["group_size", "q_group_size"]
                    .iter()
                    .find_map(|key| q.value(key).and_then(|(v, _)| v.as_i64()));
                Quantization::Awq {
                    bits: self.first(&q, &["bits", "w_bit"]).unwrap_or(4),
                    group: group(raw_group.and_then(|g| u64::try_from(g).ok()), raw_group),
                }
            }
            "fp8" | "fbgemm_fp8" => {
                let block =
                    self.counts(&q, "weight_block_size").and_then(|b| <[u64; 2]>::try_from(b).ok());
                Quantization::Fp8 { block }
            }
            "mxfp4" => Quantization::Mxfp4,
            "bitsandbytes" => {
                if self.flag(&q, "load_in_4bit") == Some(true) {
                    Quantization::Bnb4 {
                        kind: self
                            .text(&q, "bnb_4bit_quant_type")
                            .unwrap_or_else(|| "fp4".to_string()),
                        double_quant: self.flag(&q, "bnb_4bit_use_double_quant").unwrap_or(false),
                    }
                } else {
                    Quantization::Bnb8
                }
            }
            other => {
                self.notes.push(format!(
                    "quantization_config quant_method `{other}` is not known: its format is named but \
                     not sized"
                ));
                Quantization::Other {
                    name: if other.is_empty() { "unknown".to_string() } else { other.to_string() },
                }
            }
        };
        if let Some(kept) = self.texts(&q, "modules_to_not_convert").filter(|k| !k.is_empty()) {
            self.notes.push(format!("kept unquantized: {}", kept.join(", ")));
        }
        Some(found)
    }

    fn dtype(&mut self, root: &Object<'a>, cfg: &Object<'a>) -> Option<String> {
        let name = self
            .text(root, "torch_dtype")
            .or_else(|| self.text(root, "dtype"))
            .or_else(|| self.text(cfg, "torch_dtype"))?;
        match name.as_str() {
            "bfloat16" => Some("bf16".to_string()),
            "float16" => Some("fp16".to_string()),
            "float32" => Some("fp32".to_string()),
            other => {
                self.notes
                    .push(format!("torch_dtype `{other}` is not a weight precision; left out"));
                None
            }
        }
    }

    fn other_notes(&mut self, root: &Object<'a>, cfg: &Object<'a>, model_type: &str) {
        if let Some(scaling) = cfg
            .get("rope_scaling")
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok().filter(Value::is_object))
        {
            let kind = scaling
                .get("rope_type")
                .or_else(|| scaling.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("unnamed");
            let factor = scaling.get("factor").map(ToString::to_string).unwrap_or_default();
            self.notes.push(format!(
                "rope_scaling {kind} (factor {factor}) is not represented: it moves positions, not memory"
            ));
        }
        if let Some((Value::Object(vision), _)) = root.value("vision_config") {
            let kind = vision.get("model_type").and_then(Value::as_str).unwrap_or("a vision tower");
            self.notes.push(format!(
                "vision_config ({kind}) is not represented: only the language model is imported"
            ));
        }
        if let Some(mtp) = self.count(cfg, "num_nextn_predict_layers").filter(|&n| n > 0) {
            self.notes.push(format!(
                "{mtp} multi-token-prediction layer(s) in the checkpoint are not counted (most \
                 runtimes do not load them)"
            ));
        }
        if model_type == "gpt_oss" {
            self.notes.push(
                "attention sinks, router and expert biases are not represented (under 0.1 % of the \
                 weights)"
                    .to_string(),
            );
        }
    }

    // Typed getters: a value of the wrong type is an `I111` diagnostic; absent or null is None.

    fn count(&mut self, object: &Object<'a>, key: &str) -> Option<u64> {
        let (value, raw) = object.value(key)?;
        let found = value.as_u64();
        if found.is_none() {
            self.wrong(raw, key, "a whole number", &value);
        }
        found
    }

    fn first(&mut self, object: &Object<'a>, keys: &[&str]) -> Option<u64> {
        keys.iter().find_map(|key| self.count(object, key))
    }

    fn counts(&mut self, object: &Object<'a>, key: &str) -> Option<Vec<u64>> {
        let (value, raw) = object.value(key)?;
        let found = value.as_array().and_then(|items| items.iter().map(Value::as_u64).collect());
        if found.is_none() {
            self.wrong(raw, key, "an array of whole numbers", &value);
        }
        found
    }

    fn flag(&mut self, object: &Object<'a>, key: &str) -> Option<bool> {
        let (value, raw) = object.value(key)?;
        let found = value.as_bool();
        if found.is_none() {
            self.wrong(raw, key, "true or false", &value);
        }
        found
    }

    fn text(&mut self, object: &Object<'a>, key: &str) -> Option<String> {
        let (value, raw) = object.value(key)?;
        match value {
            Value::String(text) => Some(text),
            other => {
                self.wrong(raw, key, "a string", &other);
                None
            }
        }
    }

    fn texts(&mut self, object: &Object<'a>, key: &str) -> Option<Vec<String>> {
        let (value, raw) = object.value(key)?;
        let found = value
            .as_array()
            .and_then(|items| items.iter().map(|v| v.as_str().map(str::to_string)).collect());
        if found.is_none() {
            self.wrong(raw, key, "an array of strings", &value);
        }
        found
    }

    fn object(&mut self, raw: &'a RawValue, what: &str) -> Option<Object<'a>> {
        match self.doc.object(raw, what) {
            Ok(object) => Some(object),
            Err(diagnostic) => {
                self.diagnostics.push(diagnostic);
                None
            }
        }
    }

    fn wrong(&mut self, raw: &RawValue, key: &str, expected: &str, found: &Value) {
        self.diagnostics.push(Diagnostic::error(
            "I111",
            self.doc.span_of(raw),
            format!("`{key}` must be {expected}, found {}", value_kind(found)),
        ));
    }

    fn missing(&mut self, object: &Object<'a>, key: &str, meaning: &str) {
        let start = object.span.start as usize;
        self.diagnostics.push(
            Diagnostic::error(
                "I111",
                Span::new(start, start + 1),
                format!("config.json has no `{key}` ({meaning})"),
            )
            .with_help(
                "a decoder's config.json gives num_hidden_layers, hidden_size, intermediate_size, \
                 num_attention_heads and vocab_size",
            ),
        );
    }
}
