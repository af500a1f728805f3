//! The `inference { ... }` section of a point: weights, KV cache, context, sessions and the
//! forward step.
//!
//! Context is the longest request, prompt plus output. When the source gives only the generated
//! tokens and calls the prompt "not stated", the prompt is counted as 0 tokens and the prefill
//! step as one token per sequence (an assumption the point carries); a prompt described as
//! long but not counted is missing data.

use std::fmt::Write as _;

use super::Cx;
use super::conditions::Runtime;
use crate::data::{leading_number, number_after};
use crate::gaps::{Gap, assume, data, feature};
use crate::models::Family;
use crate::target::Selector;

/// vLLM's default `max_num_seqs` in its V0 engine (`SchedulerConfig`, v0.5-v0.6), on every GPU.
const VLLM_MAX_NUM_SEQS: u64 = 256;

/// The section's lines, or `None` when a gap stops it.
pub(super) fn body(
    cx: &mut Cx<'_>,
    runtime: Runtime,
    selector: Option<Selector>,
    family: Option<Family>,
) -> Option<String> {
    if let Some(extra) = beside_the_model(cx.point) {
        cx.gap(Gap::feature(feature::BESIDE_THE_MODEL, extra));
        return None;
    }
    if let Some(what) = unmodelled_generation(cx.point).filter(|_| runtime == Runtime::PyTorch) {
        cx.gap(Gap::feature(feature::GENERATE_OPTIONS, what));
        return None;
    }
    if held_on_host(cx.point, runtime) {
        let settings = cx.point.other_settings.clone().unwrap_or_default();
        cx.gap(Gap::feature(feature::HELD_ON_HOST, settings));
        return None;
    }
    let weights = weights(cx, runtime, selector);
    let kv_cache = kv_cache(cx, runtime);
    let sessions = sessions(cx, runtime, selector);
    // Read the context even when the sessions are missing, so that its gaps are listed too.
    let encoder_decoder = family == Some(Family::T5);
    let shape = context(cx, runtime, selector, sessions.unwrap_or(1), encoder_decoder);
    let (weights, kv_cache, sessions, (context, prefill, source)) =
        (weights?, kv_cache?, sessions?, shape?);

    let mut out = String::from("  inference {\n");
    let _ = writeln!(out, "    weights  {weights}");
    if weights == "mxfp4" && cx.point.model.to_lowercase().contains("gpt-oss") {
        // gpt-oss's checkpoints (and the GGUFs made from them) store only the MoE experts in
        // MXFP4; attention, router, embedding and head stay 16-bit (its model card).
        out.push_str("    quantized_matrices mlp  # gpt-oss: only the experts are MXFP4\n");
    }
    if super::conditions::is_meta_fp8(cx.point) {
        out.push_str("    quantized_matrices mlp  # Meta FP8: feed-forward matrices only\n");
        out.push_str("    unquantized_layers 1    # nor the first and last layers\n");
    }
    if let KvCache::Type(kv) = kv_cache {
        let _ = writeln!(out, "    kv_cache {kv}");
    }
    if runtime == Runtime::LlamaCpp {
        // ggml keeps hidden states and attention scores in F32 whatever the weight format.
        out.push_str("    activations fp32  # llama.cpp computes in F32\n");
    }
    if let Some(source) = source {
        let _ = writeln!(out, "    source   {source} tokens  # the encoder's input");
    }
    let _ = writeln!(out, "    context  {context} tokens");
    let _ = writeln!(out, "    sessions {sessions}");
    if runtime == Runtime::LlamaCpp {
        if let Some(layers) = ggml_gpu_layers(cx.point) {
            let _ =
                writeln!(out, "    gpu_layers {layers}  # llama.cpp -ngl: the rest in host memory");
        }
        match ggml_cpu_moe(cx.point) {
            Some(CpuMoe::First(layers)) => {
                let _ = writeln!(out, "    cpu_moe_layers {layers}  # llama.cpp --n-cpu-moe");
            }
            Some(CpuMoe::Every) => {
                out.push_str("    cpu_moe_layers 999  # every layer's experts (--cpu-moe)\n");
            }
            Some(CpuMoe::Unread(pattern)) => cx.unreadable("override-tensor", &pattern),
            None => {}
        }
    }
    if let Some(prefill) = prefill {
        let _ = writeln!(out, "    prefill_chunk {prefill} tokens");
    }
    if let Some(percent) = stated_memory_fraction(cx, runtime) {
        let _ = writeln!(out, "    memory_fraction {percent} %");
    }
    if let Some(seqs) = stated_max_num_seqs(cx.point).filter(|_| runtime == Runtime::Vllm) {
        let _ = writeln!(out, "    max_sequences {seqs}  # --max-num-seqs");
    } else if runtime == Runtime::Vllm && !vllm_v1(cx) {
        // This data set's engines are V0 (v0.5-v0.6), whose max_num_seqs defaulted to 256 on
        // every GPU; the language's default is V1's (the default engine from 0.8), 1024 on large
        // GPUs, which a point on 0.8 or later keeps.
        let _ = writeln!(
            out,
            "    max_sequences {VLLM_MAX_NUM_SEQS}  # vLLM V0 engine default max_num_seqs"
        );
    }
    if logits_for_every_position(cx, runtime) {
        out.push_str(
            "    logits   all  # transformers before 4.45 returns logits for every position\n",
        );
    }
    if cx.eager_attention() {
        out.push_str("    attention eager\n");
    }
    if let Some(positions) = rope_tables(cx, runtime) {
        let _ = writeln!(
            out,
            "    rope_tables {positions} tokens  # transformers before 4.40: per-layer tables"
        );
    }
    // transformers' BitsAndBytesConfig default; serving engines compute in the model's type.
    let transformers = runtime == Runtime::PyTorch;
    if let Some(compute) = bnb_4bit_compute(cx, weights).filter(|_| transformers) {
        let _ = writeln!(out, "    compute  {compute}  # bnb_4bit_compute_dtype");
    }
    if runtime == Runtime::PyTorch && family == Some(Family::QwenV1) {
        cx.assume(
            assume::TUPLE_CACHE,
            "Qwen v1 remote code (modeling_qwen.py) returns `present` as a tuple of per-layer \
             (key, value) tensors grown by torch.cat; the S05 generate points grow by about 2x \
             the KV bytes per sequence, the whole previous cache alive beside the new one",
        );
        out.push_str("    cache_layout tuple  # Qwen v1 remote code: legacy tuple caches\n");
    } else if runtime == Runtime::PyTorch && glm_remote_code(cx.point) {
        cx.assume(
            assume::TUPLE_CACHE,
            "THUDM's ChatGLM and GLM-4 remote code (modeling_chatglm.py) grows each layer's \
             cache by torch.cat while decoding and returns the layers as a tuple (`presents = \
             presents + (kv_cache,)`), so a step ends with the previous cache alive beside the \
             new one",
        );
        out.push_str("    cache_layout tuple  # ChatGLM / GLM-4 remote code: tuple caches\n");
    } else if runtime == Runtime::PyTorch && legacy_tuple_cache(cx.point) {
        cx.assume(
            assume::TUPLE_CACHE,
            "transformers before 4.36 (December 2023) returns past_key_values as per-layer \
             (key, value) tuples grown by torch.cat, so a step ends with the previous cache \
             alive beside the new one; 4.36 brought DynamicCache (Llama, Mistral and others)",
        );
        out.push_str("    cache_layout tuple  # transformers before 4.36: legacy tuple caches\n");
    }
    out.push_str("  }\n");
    Some(out)
}

/// `max_position_embeddings` of the Qwen2 releases (0.5B, 1.5B, 7B, 57B-A14B and 72B, base and
/// instruct, and their GPTQ and AWQ uploads): 32768 in every config.json (Girafboy/pytorchKQI,
/// llms/Qwen/Qwen2-*/config.json @ 4adb1daa).
const QWEN2_POSITIONS: u64 = 32_768;

/// The rotary tables transformers' modelling code kept in every attention layer, for a run on a
/// stated transformers before 4.40: `Qwen2RotaryEmbedding` (copied from Mistral's) built cos and
/// sin for `max_position_embeddings` positions in each `Qwen2Attention`
/// (`_set_cos_sin_cache`); Mistral's still did in April 2024 (transformers issue #30043, on the
/// rotary classes of Mistral and Llama diverging). Only models whose config.json the harness has
/// read carry the count: the Qwen2 releases.
fn rope_tables(cx: &mut Cx<'_>, runtime: Runtime) -> Option<u64> {
    if runtime != Runtime::PyTorch {
        return None;
    }
    let version = super::conditions::transformers_version(cx.point)?;
    let name = cx.point.model.rsplit('/').next().unwrap_or_default().to_lowercase();
    let qwen2 = name.starts_with("qwen2-") && !name.starts_with("qwen2-vl");
    if version >= (4, 40) || !qwen2 {
        return None;
    }
    cx.assume(
        assume::RUNTIME_DEFAULT,
        format!(
            "rope_tables {QWEN2_POSITIONS} tokens: transformers {}.{} builds Qwen2's rotary cos \
             and sin tables for max_position_embeddings ({QWEN2_POSITIONS}, its config.json) in \
             every attention layer, in the load dtype",
            version.0, version.1
        ),
    );
    Some(QWEN2_POSITIONS)
}

/// Whether transformers' `generate` kept the legacy tuple cache: a stated version before 4.36,
/// or, none stated, a run dated before 2024. Architectures that moved to `Cache` classes later
/// than Llama's (GPT-2, BLOOM, Falcon, ...) kept tuples longer; a version after 4.36 is read
/// as `DynamicCache` for all of them.
///
/// A run that generates one token has no decode step: its prefill makes the cache from nothing,
/// and no previous copy is ever alive.
fn legacy_tuple_cache(point: &crate::data::Point) -> bool {
    let decodes = point.output_tokens.is_none_or(|tokens| tokens > 1);
    if !point.framework.to_lowercase().contains("transformers") || !decodes {
        return false;
    }
    match super::conditions::transformers_version(point) {
        Some(version) => version < (4, 36),
        None => super::conditions::dated_from(point, 2024, 1) == Some(false),
    }
}

/// bitsandbytes 4-bit layers compute in `bnb_4bit_compute_dtype`, which transformers'
/// `BitsAndBytesConfig` leaves at float32 unless it is set; a stated compute type is the
/// language's default already (the activations').
fn bnb_4bit_compute(cx: &mut Cx<'_>, weights: &str) -> Option<&'static str> {
    let stored = vram_core::precision::Precision::from_name(weights);
    if !stored.is_some_and(vram_core::precision::Precision::is_bitsandbytes_4bit) {
        return None;
    }
    let stated = cx.point.compute_dtype.clone().unwrap_or_default().to_lowercase();
    if !(stated.is_empty() || stated.contains("default")) {
        return None;
    }
    cx.assume(
        assume::RUNTIME_DEFAULT,
        "bnb_4bit_compute_dtype: transformers' BitsAndBytesConfig default float32",
    );
    Some("fp32")
}

/// The weight format; for a component that does not depend on it (the KV cache or the forward
/// step of a llama.cpp run, whose cache and activation types are given explicitly), a format the
/// source does not state is replaced by a stand-in rather than stopping the point.
fn weights(cx: &mut Cx<'_>, runtime: Runtime, selector: Option<Selector>) -> Option<&'static str> {
    let independent = runtime == Runtime::LlamaCpp
        && matches!(selector, Some(Selector::KvCache | Selector::Intermediates));
    if !independent {
        return cx.weight_format();
    }
    if cx.read_weight_format().is_ok() {
        return cx.weight_format();
    }
    let stated = cx.point.weight_precision.clone().unwrap_or_else(|| "not stated".to_string());
    cx.assume(
        assume::STAND_IN,
        format!("weights ({stated}) written as int4: the compared component does not read them"),
    );
    Some("int4")
}

/// The KV cache type a point states.
enum KvCache {
    /// Not stated: the language's default, the weights' 16-bit type, which is what transformers
    /// and vLLM's `auto` use.
    Default,
    Type(&'static str),
}

/// The KV cache type, or `None` when a gap stops it.
fn kv_cache(cx: &mut Cx<'_>, runtime: Runtime) -> Option<KvCache> {
    if runtime == Runtime::Lmdeploy
        && let Some(kv) = lmdeploy_quant_policy(cx.point)
    {
        return Some(KvCache::Type(kv));
    }
    let Some(stated) = cx.point.kv_cache_dtype.clone().or_else(|| settings_kv_type(cx.point))
    else {
        if runtime == Runtime::LlamaCpp {
            cx.assume(assume::RUNTIME_DEFAULT, "KV type not stated: llama.cpp's default f16");
            return Some(KvCache::Type("fp16"));
        }
        return Some(KvCache::Default);
    };
    let lower = stated.to_lowercase();
    if lower.starts_with("bf16") || lower.starts_with("bfloat16") {
        Some(KvCache::Type("bf16"))
    } else if lower.starts_with("f16") || lower.starts_with("fp16") || lower.starts_with("float16")
    {
        Some(KvCache::Type("fp16"))
    } else if lower.starts_with("auto")
        || lower.contains("same as")
        || lower.contains("model dtype")
    {
        // vLLM's `kv_cache_dtype auto` and similar: the model's own type, the language's default.
        Some(KvCache::Default)
    } else if lower.starts_with("fp8") || lower.starts_with("float8") {
        Some(KvCache::Type("fp8"))
    } else if lower.contains("use_cache_quantization") {
        // Qwen's int8 cache: uint8 values with an fp32 scale and zero point per token and head.
        Some(KvCache::Type("int8-token"))
    } else if lower.contains("hqq") && lower.contains("int4") {
        // transformers' QuantizedCache on the HQQ backend: 4-bit values in groups of 64 with a
        // scale and zero each, beside a residual of recent tokens in 16-bit, as quanto's.
        cx.assume(
            assume::EQUIVALENT_FORMAT,
            format!("{stated:?}: written as quanto's int4 cache (groups of 64, a zero point each)"),
        );
        Some(KvCache::Type("quanto-int4"))
    } else if lower.contains("quanto") && lower.contains("int4") {
        // transformers' QuantoQuantizedCache (nbits 4, q_group_size 64, residual_length 128 by
        // default) on the `quanto` package it required then, 0.2.0: an int8 zero point per group.
        Some(KvCache::Type("quanto-int4"))
    } else if lower.contains("quanto") && lower.contains("int2") {
        Some(KvCache::Type("quanto-int2"))
    } else if lower.starts_with("not stated") {
        // As when the field is missing: the runtime's default type.
        if runtime == Runtime::LlamaCpp {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                format!("KV type {stated:?}: llama.cpp's default f16"),
            );
            Some(KvCache::Type("fp16"))
        } else {
            cx.assume(assume::RUNTIME_DEFAULT, format!("KV type {stated:?}: the model's own type"));
            Some(KvCache::Default)
        }
    } else if let Some(ggml) = GGML_KV_TYPES.iter().find(|t| lower.starts_with(**t)) {
        Some(KvCache::Type(ggml))
    } else if lower.contains("kv_cache_quantization") {
        // torchao's generate.py `--kv_cache_quantization`: int8 values with scales per token and
        // head in its own AffineQuantizedKVCache, which no language type states.
        cx.gap(Gap::feature(feature::TORCHAO_KV_CACHE, stated));
        None
    } else {
        cx.unreadable("kv_cache_dtype", &stated);
        None
    }
}

/// LMDeploy's quantized cache, from its `quant_policy` (8 or 4, in the settings or the KV type)
/// or a KV type of `int8` / `int4` under it: `lmdeploy-int8` or `lmdeploy-int4`.
fn lmdeploy_quant_policy(point: &crate::data::Point) -> Option<&'static str> {
    let kv = point.kv_cache_dtype.as_deref().unwrap_or_default().to_lowercase();
    let settings = point.other_settings.as_deref().unwrap_or_default().to_lowercase();
    let both = format!("{kv} {settings}").replace('-', "_");
    match crate::data::number_after(&both, "quant_policy") {
        Some(8) => return Some("lmdeploy-int8"),
        Some(4) => return Some("lmdeploy-int4"),
        _ => {}
    }
    let says = |bits: &str| {
        kv.starts_with(&format!("int{bits}"))
            || kv.starts_with(&format!("kv int{bits}"))
            || kv.starts_with(&format!("kv{bits}"))
            || kv.contains(&format!("{bits}bit"))
            || kv.contains(&format!("{bits}-bit"))
    };
    if says("8") {
        Some("lmdeploy-int8")
    } else if says("4") {
        Some("lmdeploy-int4")
    } else {
        None
    }
}

/// llama.cpp cache types (`--cache-type-k`, `--cache-type-v`) the language takes.
pub(super) const GGML_KV_TYPES: [&str; 6] = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"];

/// Concurrent sequences: the batch size, or the runtime's default when the source leaves it out.
fn sessions(cx: &mut Cx<'_>, runtime: Runtime, selector: Option<Selector>) -> Option<u64> {
    // Ollama allocates its parallel contexts at load, however many requests then arrive; a
    // batch of several requests says that many were served at once.
    if runtime == Runtime::LlamaCpp && super::ollama::is_ollama(cx.point) {
        if let Some(slots) = ggml_parallel(cx.point) {
            return Some(slots);
        }
        if let Some(batch) = cx.point.batch_size.filter(|b| *b > 1) {
            return Some(batch);
        }
        return Some(super::ollama::default_parallel(cx));
    }
    if let Some(batch) = cx.point.batch_size {
        // transformers' beam search expands every prompt to its beams before the prefill
        // (`_expand_inputs_for_generation`): each beam is a sequence with its own cache. A
        // sampled generation expands it to its `num_return_sequences` the same way.
        let expanded = beams(cx.point).or_else(|| return_sequences(cx.point));
        return match expanded.filter(|_| runtime == Runtime::PyTorch) {
            Some(beams) => Some(batch.saturating_mul(beams)),
            None => Some(batch),
        };
    }
    match runtime {
        Runtime::Vllm => {
            if cx.verdict {
                // vLLM starts when its pool holds one sequence of the full context (its check
                // that `max_model_len` fits the KV cache's tokens) and schedules fewer
                // sequences at once when the pool is short: whether the server fits asks for one.
                cx.assume(
                    assume::RUNTIME_DEFAULT,
                    "sessions 1: vLLM starts when its KV pool holds one max_model_len sequence",
                );
                return Some(1);
            }
            if let Some(seqs) = stated_max_num_seqs(cx.point) {
                return Some(seqs);
            }
            cx.assume(
                assume::RUNTIME_DEFAULT,
                format!("sessions: vLLM max_num_seqs {VLLM_MAX_NUM_SEQS}"),
            );
            Some(VLLM_MAX_NUM_SEQS)
        }
        Runtime::LlamaCpp => {
            if let Some(slots) = ggml_parallel(cx.point) {
                return Some(slots);
            }
            cx.assume(
                assume::RUNTIME_DEFAULT,
                "sessions: llama.cpp serves one sequence (n_parallel 1)",
            );
            Some(1)
        }
        Runtime::PyTorch | Runtime::Diffusers if weights_only(selector) => {
            cx.assume(
                assume::STAND_IN,
                "batch not stated: 1 (the compared weights do not read it)",
            );
            Some(1)
        }
        Runtime::Sglang | Runtime::Tgi | Runtime::TensorrtLlm | Runtime::Lmdeploy
            if !cx.out_of_memory =>
        {
            cx.assume(
                assume::STAND_IN,
                "sessions not stated: 1 (a pooling server's share of the GPU and its pool do not \
                 depend on them)",
            );
            Some(1)
        }
        Runtime::PyTorch
        | Runtime::Diffusers
        | Runtime::Sglang
        | Runtime::Tgi
        | Runtime::TensorrtLlm
        | Runtime::Lmdeploy => cx.smallest_or_gap(Gap::data(data::BATCH, "batch_size: none")),
    }
}

/// What a serving run holds beside the model it names, if its settings say so: a draft model or
/// extra decoding heads for speculative decoding, or the adapter slots of multi-LoRA serving
/// (vLLM's `--enable-lora` preallocates `max_loras` adapters of `max_lora_rank` in every
/// layer). Counting the named model alone would leave them out without saying so.
fn beside_the_model(point: &crate::data::Point) -> Option<String> {
    let settings = [point.other_settings.as_deref(), Some(point.framework.as_str())]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
        .replace('-', "_");
    [
        ("speculative", "speculative decoding (a draft model or heads)"),
        ("assistant_model", "assisted generation (a draft model)"),
        ("draft model", "a draft model"),
        ("draft_model", "a draft model"),
        ("medusa", "Medusa heads"),
        ("eagle", "EAGLE draft heads"),
        ("enable_lora", "multi-LoRA serving (preallocated adapter slots)"),
    ]
    .into_iter()
    .find(|(key, _)| settings.contains(key))
    .map(|(_, what)| format!("{what} beside {}", point.model))
}

/// A transformers `generate()` or loading option that changes the peak in a way the language
/// does not model, if the settings name one: no KV cache (every step reruns the whole
/// sequence), a quantized KV cache (`QuantizedCache`: a window of recent tokens at full
/// precision beside the quantized rest), layers kept on the host (`max_memory`, `offload`
/// in a device map) or the scores of every generated token kept (`output_scores`).
fn unmodelled_generation(point: &crate::data::Point) -> Option<String> {
    let settings = point.other_settings.as_deref().unwrap_or_default().to_lowercase();
    let compact: String = settings.chars().filter(|c| !c.is_whitespace()).collect();
    let found = if compact.contains("use_cache=false") || settings.contains("use_cache false") {
        "generation without a KV cache (use_cache=False)"
    } else if settings.contains("cache_implementation") && settings.contains("quantized") {
        "transformers' quantized KV cache (QuantizedCache)"
    } else if settings.contains("max_memory")
        || settings.contains("offload_folder")
        || (settings.contains("offload") && !settings.contains("no offload"))
    {
        "layers offloaded to the host by accelerate's device map"
    } else if compact.contains("output_scores=true") || compact.contains("output_logits=true") {
        "every generated token's scores kept (output_scores)"
    } else {
        return None;
    };
    Some(format!("{found}: {settings}"))
}

/// A serving engine told to keep part of the model in host memory: vLLM's `--cpu-offload-gb`
/// (that many GB of weights, streamed in for every forward pass) or llama.cpp's KV cache
/// ([`kv_on_host`]).
fn held_on_host(point: &crate::data::Point, runtime: Runtime) -> bool {
    match runtime {
        Runtime::Vllm => {
            let flags = point.other_settings.as_deref().unwrap_or_default().to_lowercase();
            number_after(&flags.replace('-', "_"), "cpu_offload_gb").is_some_and(|gb| gb > 0)
        }
        Runtime::LlamaCpp => kv_on_host(point),
        _ => false,
    }
}

/// llama.cpp told to keep its KV cache in host memory (`--no-kv-offload`, `-nkvo`,
/// `no_kv_offload`, `offload_kqv=False` in its Python binding).
fn kv_on_host(point: &crate::data::Point) -> bool {
    let settings = point.other_settings.as_deref().unwrap_or_default().to_lowercase();
    let flags = settings.replace('-', "_");
    let compact: String = settings.chars().filter(|c| !c.is_whitespace()).collect();
    flags.contains("no_kv_offload")
        || flags
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| w == "_nkvo" || w == "nkvo")
        || compact.contains("offload_kqv=false")
}

/// The context and, where the source fixes it, the tokens of the largest forward step; for an
/// encoder-decoder, the decoder's generated tokens and the encoder's source (the prompt).
fn context(
    cx: &mut Cx<'_>,
    runtime: Runtime,
    selector: Option<Selector>,
    sessions: u64,
    encoder_decoder: bool,
) -> Option<(u64, Option<u64>, Option<u64>)> {
    let point = cx.point;
    let settings = point.other_settings.clone().unwrap_or_default();
    let prompt = prompt_tokens(cx)?;
    if encoder_decoder {
        let (source, output) = (Some(prompt).filter(|p| *p > 0), point.output_tokens);
        let (Some(source), Some(output)) = (source, output.filter(|o| *o > 0)) else {
            cx.gap(Gap::data(
                data::CONTEXT,
                "an encoder-decoder: the source (input_tokens) and the generated tokens \
                 (output_tokens)",
            ));
            return None;
        };
        return Some((output, Some(source.saturating_mul(sessions)), Some(source)));
    }
    // llama.cpp sizes its KV cache and its worst-case graph for the whole context window at
    // load, whatever the requests then hold: a stated window wins over prompt and output.
    let ollama = runtime == Runtime::LlamaCpp && super::ollama::is_ollama(point);
    let window = match ggml_context(&settings).filter(|_| runtime == Runtime::LlamaCpp) {
        Some(tokens) => Some(tokens),
        // Ollama loads the model with its default window whatever the prompts hold.
        None if ollama && point.seq_len_tokens().is_none() => {
            Some(super::ollama::default_context(cx)?)
        }
        None => None,
    };
    let context = if let Some(tokens) = point.seq_len_tokens() {
        tokens
    } else if let Some(tokens) = window {
        // Its parallel slots share the window (`-c 16384 -np 4`: 4,096 cells each); Ollama
        // gives every parallel request its own `num_ctx` (and asks llama.cpp for `num_ctx ×
        // num_parallel` cells).
        if ollama { tokens } else { tokens / sessions.max(1) }
    } else if let Some(output) = point.output_tokens {
        prompt.saturating_add(output)
    } else if let Some(tokens) = server_context(&settings) {
        tokens
    } else if prompt > 0 {
        cx.assume(
            assume::PROMPT_ONLY,
            format!("{prompt} prompt tokens, no generated tokens stated"),
        );
        prompt
    } else if weights_only(selector) {
        cx.assume(
            assume::STAND_IN,
            "context not stated: 1 token (the compared weights do not read it)",
        );
        1
    } else if runtime.pools() {
        // The server takes its share of the GPU whatever the context; the context only moves
        // the profiled step's activations between the pool and the rest.
        cx.assume(
            assume::STAND_IN,
            format!(
                "context not stated: {POOL_STAND_IN_CONTEXT} tokens for a pooling server, whose \
                 share of the GPU does not depend on it"
            ),
        );
        POOL_STAND_IN_CONTEXT
    } else {
        cx.smallest_or_gap(Gap::data(data::CONTEXT, "seq_len, output_tokens: none"))?
    };
    // transformers' static cache allocates every layer's keys and values for `max_cache_len`
    // tokens when generation starts, however few the prompt and output fill.
    let context = match static_cache_len(point).filter(|_| runtime == Runtime::PyTorch) {
        Some(tokens) if tokens > context => {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                format!("a static cache of max_cache_len {tokens} tokens, allocated whole"),
            );
            tokens
        }
        _ => context,
    };
    let prefill = match runtime {
        // Hugging Face generate() runs the prompt of every sequence in one forward step.
        Runtime::PyTorch | Runtime::Diffusers => Some(prompt.max(1).saturating_mul(sessions)),
        // llama.cpp's physical batch, when the source gives it.
        Runtime::LlamaCpp => ggml_ubatch(point, &settings),
        // A stated step size (`--max-num-batched-tokens`) is the profile step's, whichever
        // engine; with chunked prefill turned on, V0 no longer steps a whole window.
        Runtime::Vllm => number_after(&settings.replace('-', "_"), "max_num_batched_tokens")
            .or_else(|| {
                if chunked_prefill(&settings) { None } else { vllm_v0_profile_tokens(cx, context) }
            }),
        // SGLang's chunked prefill and TGI's warm-up prefill, when the source sets them; else
        // the language's defaults for the runtime.
        Runtime::Sglang => number_after(&settings.replace('-', "_"), "chunked_prefill_size"),
        Runtime::Tgi => number_after(&settings.replace('-', "_"), "max_batch_prefill_tokens"),
        Runtime::TensorrtLlm => number_after(&settings.replace('-', "_"), "max_num_tokens"),
        Runtime::Lmdeploy => number_after(&settings.replace('-', "_"), "max_prefill_token_num"),
    };
    Some((context, prefill, None))
}

/// Whether vLLM's chunked prefill is turned on (`--enable-chunked-prefill`, not `=False`).
fn chunked_prefill(settings: &str) -> bool {
    let flags = settings.to_lowercase().replace('-', "_").replace(' ', "");
    flags.contains("enable_chunked_prefill")
        && !flags.contains("enable_chunked_prefill=false")
        && !flags.contains("enable_chunked_prefill:false")
}

/// The `max_cache_len` of a transformers static cache the settings state
/// (`cache_implementation="static"`, `StaticCache(max_cache_len=4096)`).
fn static_cache_len(point: &crate::data::Point) -> Option<u64> {
    let text = point.all_text();
    let compact = text.replace([' ', '"', '\''], "");
    let is_static = compact.contains("cache_implementation=static")
        || compact.contains("cache_implementation:static")
        || compact.contains("staticcache");
    is_static.then(|| number_after(&text.replace('-', "_"), "max_cache_len")).flatten()
}

/// The context a server is started with: vLLM's `--max-model-len`, TGI's `--max-total-tokens`,
/// SGLang's `--context-length`, LMDeploy's `--session-len`, TensorRT-LLM's `--max_seq_len`.
fn server_context(settings: &str) -> Option<u64> {
    let flags = settings.to_lowercase().replace('-', "_");
    ["max_model_len", "max_total_tokens", "context_length", "session_len", "max_seq_len"]
        .iter()
        .find_map(|key| number_after(&flags, key))
}

/// The context a pooling server's point is given when it states none: vLLM's largest default
/// step (`max_num_batched_tokens` 8192 on large GPUs) and Llama 3's window.
const POOL_STAND_IN_CONTEXT: u64 = 8192;

/// The beams of a beam search the settings state (`num_beams=4`, `4 beams`), when more than one.
fn beams(point: &crate::data::Point) -> Option<u64> {
    let written = point.setting_count(&["num_beams"]);
    written
        .or_else(|| {
            let text = point.all_text().replace(['(', ')'], " ");
            let words: Vec<&str> = text.split_whitespace().collect();
            words.windows(2).find_map(|w| (w[1] == "beams").then(|| leading_number(w[0])).flatten())
        })
        .filter(|n| *n > 1)
}

/// vLLM's `--max-num-seqs` (`max_num_seqs=64`), when stated.
fn stated_max_num_seqs(point: &crate::data::Point) -> Option<u64> {
    let settings = point.other_settings.as_deref().unwrap_or_default().to_lowercase();
    number_after(&settings.replace('-', "_"), "max_num_seqs").filter(|n| (1..=65_536).contains(n))
}

/// The sequences a sampled generation returns per prompt (`num_return_sequences=4`), when more
/// than one.
fn return_sequences(point: &crate::data::Point) -> Option<u64> {
    point.setting_count(&["num_return_sequences"]).filter(|n| *n > 1)
}

/// The parallel slots a llama.cpp server (`-np 4`, `--parallel 4`, `n_parallel 4`) or Ollama
/// (`OLLAMA_NUM_PARALLEL=4`) runs with, when stated.
fn ggml_parallel(point: &crate::data::Point) -> Option<u64> {
    point
        .setting_count(&["np", "parallel", "n_parallel", "ollama_num_parallel", "num_parallel"])
        .filter(|n| (1..=4096).contains(n))
}

/// The layers a llama.cpp or Ollama run puts on the GPU, when stated: `-ngl 40`,
/// `--n-gpu-layers 40`, Ollama's `num_gpu 40`, or the load log's `offloaded 40/81 layers to
/// GPU` (`40 of 81 layers` in prose), all counting the output layer as one more after the
/// repeating ones.
pub(super) fn ggml_gpu_layers(point: &crate::data::Point) -> Option<u64> {
    let stated =
        point.setting_count(&["ngl", "n_gpu_layers", "gpu_layers", "num_gpu", "ollama_num_gpu"]);
    stated.or_else(|| {
        let text = point.all_text();
        let words: Vec<&str> = text.split_whitespace().collect();
        let slashed = words.windows(2).find_map(|w| {
            let (on_gpu, _of) = w[0].split_once('/')?;
            w[1].starts_with("layers").then(|| leading_number(on_gpu)).flatten()
        });
        slashed.or_else(|| {
            words.windows(4).find_map(|w| {
                let of_layers = w[1] == "of" && w[3].starts_with("layers");
                of_layers
                    .then(|| leading_number(w[0]))
                    .flatten()
                    .filter(|_| leading_number(w[2]).is_some())
            })
        })
    })
}

/// Which layers' routed experts a llama.cpp run keeps in host memory.
enum CpuMoe {
    /// The first this many (`--n-cpu-moe 20`).
    First(u64),
    /// Every layer's (`--cpu-moe`, or `-ot exps=CPU` with no layer named).
    Every,
    /// An `--override-tensor` rule that names layers, which the harness does not read.
    Unread(String),
}

/// The routed experts a llama.cpp run keeps in host memory, when stated.
fn ggml_cpu_moe(point: &crate::data::Point) -> Option<CpuMoe> {
    let first = point.setting_count(&["n_cpu_moe", "ncmoe"]);
    if let Some(layers) = first {
        return Some(CpuMoe::First(layers));
    }
    let text = point.all_text();
    if text.contains("--cpu-moe") || text.contains("-cmoe") {
        return Some(CpuMoe::Every);
    }
    // `-ot ".ffn_.*_exps.=CPU"`: a tensor-name pattern, then the buffer its tensors go to.
    let rule = ["--override-tensor", "-ot"].iter().find_map(|flag| {
        let at = text.find(&format!("{flag} "))? + flag.len() + 1;
        text[at..].split_whitespace().next().map(|w| w.trim_matches(['"', '\'']).to_string())
    })?;
    if !rule.contains("exps") {
        return None;
    }
    if rule.contains("blk") {
        return Some(CpuMoe::Unread(rule));
    }
    rule.ends_with("=cpu").then_some(CpuMoe::Every)
}

/// The KV cache type a command line or environment states when the field does not: vLLM's and
/// SGLang's `--kv-cache-dtype fp8`, llama.cpp's `--cache-type-k q8_0` (`-ctk`), Ollama's
/// `OLLAMA_KV_CACHE_TYPE=q8_0`.
pub(super) fn settings_kv_type(point: &crate::data::Point) -> Option<String> {
    point
        .setting(&["kv_cache_dtype", "cache_type_k", "ctk", "ollama_kv_cache_type"])
        .filter(|value| !value.is_empty())
}

/// llama.cpp's physical batch as a run states it: `n_ubatch` (its log), `-ub` /
/// `--ubatch-size`, koboldcpp's `--blasbatchsize` (which sets both batches), or a logical batch
/// (`-b`, `--batch-size`, `n_batch`) below the physical batch's default 512, which caps it.
fn ggml_ubatch(point: &crate::data::Point, settings: &str) -> Option<u64> {
    number_after(settings, "n_ubatch")
        .or_else(|| point.setting_count(&["ub", "ubatch_size", "blasbatchsize"]))
        .or_else(|| {
            number_after(settings, "n_batch")
                .or_else(|| point.setting_count(&["b", "batch_size"]))
                .filter(|batch| *batch < 512)
        })
}

/// The context window a llama.cpp or Ollama run states (`n_ctx 4096`, `-c 8192`, `num_ctx`,
/// `--ctx-size`), or a front end over llama.cpp (koboldcpp's `--contextsize`, LM Studio's
/// "context length").
fn ggml_context(settings: &str) -> Option<u64> {
    let lower = settings.to_lowercase().replace('-', "_");
    [
        "n_ctx",
        "num_ctx",
        "ctx_size",
        "contextsize",
        "context size",
        "context window",
        "context length",
        // Also Ollama's server-wide default, `OLLAMA_CONTEXT_LENGTH=8192`.
        "context_length",
    ]
    .iter()
    .find_map(|key| number_after(&lower, key))
    .or_else(|| {
        let words: Vec<&str> = lower.split_whitespace().collect();
        words.windows(2).find_map(|w| (w[0] == "_c").then(|| leading_number(w[1])).flatten())
    })
}

/// Whether the compared components are the weights (and memory outside the allocator), which
/// no context or batch changes.
fn weights_only(selector: Option<Selector>) -> bool {
    matches!(selector, Some(Selector::Weights | Selector::WeightsAndOutside))
}

/// Prompt tokens: stated, approximate (`~20`), or not stated (0, with an assumption).
fn prompt_tokens(cx: &mut Cx<'_>) -> Option<u64> {
    let Some(stated) = cx.point.input_tokens.clone() else {
        if cx.point.seq_len_tokens().is_some()
            && cx.point.framework.to_lowercase().contains("transformers")
        {
            cx.assume(assume::PROMPT_NOT_STATED, "seq_len given, prompt not stated");
        }
        return Some(0);
    };
    let lower = stated.to_lowercase();
    if lower.starts_with("long") {
        cx.gap(Gap::data(data::PROMPT_LENGTH, stated));
        None
    } else if lower.starts_with("not stated") {
        // A note's estimate ("not stated (~20: the chat template)") is the nearer reading.
        let estimate = lower.find('~').and_then(|at| leading_number(&lower[at + 1..]));
        if let Some(tokens) = estimate {
            cx.assume(assume::PROMPT_APPROXIMATE, stated);
            Some(tokens)
        } else {
            cx.assume(assume::PROMPT_NOT_STATED, stated);
            Some(0)
        }
    } else if let Some(tokens) = leading_number(&stated) {
        if lower.trim_start().starts_with('~') {
            cx.assume(assume::PROMPT_APPROXIMATE, stated);
        }
        Some(tokens)
    } else {
        cx.unreadable("input_tokens", &stated);
        None
    }
}

/// Transformers computed the logits of every prompt position, in fp32, until `generate` passed
/// `num_logits_to_keep` (v4.45, released in September 2024); the harness says so unless the
/// source states a later version or, stating none, a date from October 2024 on. THUDM's own
/// ChatGLM and GLM-4 code never did: its `prepare_inputs_for_generation` passes
/// `return_last_logit=True`, and the model keeps the last position's hidden state before the
/// output layer.
fn logits_for_every_position(cx: &Cx<'_>, runtime: Runtime) -> bool {
    let point = cx.point;
    let model = point.model.to_lowercase();
    if model.contains("chatglm") || model.contains("glm-4") {
        return false;
    }
    let transformers = point.framework.to_lowercase().contains("transformers");
    let before = match super::conditions::transformers_version(point) {
        Some(version) => version < (4, 45),
        None => super::conditions::dated_from(point, 2024, 10) != Some(true),
    };
    runtime == Runtime::PyTorch && transformers && before
}

/// THUDM's own ChatGLM and GLM-4 code (`trust_remote_code`), not transformers' native `Glm`
/// models (the `-hf` checkpoints), which use its caches.
fn glm_remote_code(point: &crate::data::Point) -> bool {
    let model = point.model.to_lowercase();
    (model.contains("chatglm") || model.contains("glm-4")) && !model.ends_with("-hf")
}

/// Whether `text` names a version `major.minor` or later, as `v4.46` or `4.46.1`.
fn states_version_at_least(text: &str, major: u64, minor: u64) -> bool {
    versions(text).any(|(a, b)| a == major && b >= minor)
}

/// Every `major.minor` written in `text` (`4.46.1` gives (4, 46)), in order.
fn versions(text: &str) -> impl Iterator<Item = (u64, u64)> + '_ {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.')).filter_map(|word| {
        let mut parts = word.split('.');
        let a = parts.next()?.parse::<u64>().ok()?;
        let b = parts.next()?.parse::<u64>().ok()?;
        Some((a, b))
    })
}

/// The tokens of vLLM V0's profile step: without chunked prefill, which V0 turns on by default
/// only past 32K tokens of context (`EngineArgs.create_engine_config`, `use_long_context`), its
/// `SchedulerConfig` sets `max_num_batched_tokens` to `max(max_model_len, 2048)`
/// (`_DEFAULT_MAX_NUM_BATCHED_TOKENS`). V1 and long contexts keep the language's default.
fn vllm_v0_profile_tokens(cx: &mut Cx<'_>, context: u64) -> Option<u64> {
    if vllm_v1(cx) || context > 32_768 {
        return None;
    }
    let tokens = context.max(2048);
    cx.assume(
        assume::RUNTIME_DEFAULT,
        format!(
            "vLLM V0 profile step: max_num_batched_tokens = max(max_model_len, 2048) = {tokens} \
             (SchedulerConfig without chunked prefill)"
        ),
    );
    Some(tokens)
}

/// Whether the point ran vLLM's V1 engine: it says so, or names vLLM 0.8 or later, where V1
/// became the default.
fn vllm_v1(cx: &Cx<'_>) -> bool {
    let point = cx.point;
    let text = format!("{} {}", point.framework, point.framework_version.as_deref().unwrap_or(""))
        .to_lowercase();
    text.contains("v1 engine") || states_version_at_least(&text, 0, 8)
}

/// The share of the device a pooling server was told to take, in percent: vLLM's
/// `gpu_memory_utilization`, SGLang's `mem_fraction_static` or TGI's `cuda_memory_fraction`
/// (times its 95 % wiggle room), written with underscores or as the flag's hyphens.
fn stated_memory_fraction(cx: &mut Cx<'_>, runtime: Runtime) -> Option<u64> {
    let keys: &[&str] = match runtime {
        Runtime::Vllm => &["gpu_memory_utilization"],
        Runtime::Sglang => &["mem_fraction_static"],
        Runtime::Tgi => &["cuda_memory_fraction"],
        // The KV cache config's `free_gpu_memory_fraction`, spelled
        // `--kv_cache_free_gpu_mem_fraction` by the C++ benchmarks and the Triton backend.
        Runtime::TensorrtLlm => &["free_gpu_memory_fraction", "free_gpu_mem_fraction"],
        Runtime::Lmdeploy => &["cache_max_entry_count"],
        _ => return None,
    };
    let text = format!(
        "{} {} {}",
        cx.point.other_settings.as_deref().unwrap_or_default(),
        cx.point.framework,
        cx.point.framework_version.as_deref().unwrap_or_default()
    )
    .to_lowercase()
    .replace('-', "_");
    let wiggle = if runtime == Runtime::Tgi { tgi_wiggle_room(cx) } else { 100 };
    let found = keys.iter().find_map(|key| text.find(key).map(|at| at + key.len()));
    let stated = found.and_then(|end| {
        let rest = text[end..].trim_start_matches([' ', '(', '=', ':']);
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        rest[..end].parse::<f64>().ok().filter(|f| *f > 0.0 && *f <= 1.0)
    });
    let Some(fraction) = stated else {
        // vLLM's default `gpu_memory_utilization` rose to 0.92 in v0.22 (DOMAIN.md §3.6).
        if runtime == Runtime::Vllm && states_version_at_least(&text, 0, 22) {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                "gpu_memory_utilization not stated: vLLM's default from v0.22, 0.92",
            );
            return Some(92);
        }
        // TGI's own default, 1.0 of the device, times the wiggle room of the stated release.
        return (runtime == Runtime::Tgi && wiggle != 95).then(|| {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                format!(
                    "TGI_WIGGLE_ROOM {wiggle} % in the stated release: memory_fraction {wiggle} %"
                ),
            );
            wiggle
        });
    };
    // Whole percents: the language's unit, and the precision these settings are written in.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "0 < f <= 1")]
    let percent = (fraction * f64::from(u32::try_from(wiggle).unwrap_or(100))).round() as u64;
    cx.assume(
        assume::SCRIPT_SETTING,
        format!("{} {fraction}: memory_fraction {percent} %", keys[0]),
    );
    Some(percent)
}

/// text-generation-inference's `TGI_WIGGLE_ROOM` default, in percent, by the release the point
/// names (`server/text_generation_server/models/globals.py`): 95 through 2.3 and in 3.0, 90 in
/// 2.4, 93 in 3.1 and 3.2, 90 from 3.3; 95, the language's default, when no release is named.
fn tgi_wiggle_room(cx: &Cx<'_>) -> u64 {
    let text = format!(
        "{} {}",
        cx.point.framework,
        cx.point.framework_version.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    match versions(&text).find(|(major, _)| (2..=3).contains(major)) {
        Some((2, 4..) | (3, 3..)) => 90,
        Some((3, 1 | 2)) => 93,
        _ => 95,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a vLLM server starts asks for one sequence of its full context; a peak of the
    /// same server is its default batch's.
    #[test]
    fn a_vllm_verdict_asks_for_one_sequence() {
        let point = |kind: &str| {
            crate::express::test_point(
                serde_json::json!({
                    "id": "V-1", "source_id": "V", "workload": "llm_inference",
                    "model": "meta-llama/Llama-3.1-70B-Instruct", "framework": "vLLM 0.6.3",
                    "weight_precision": "bf16", "num_gpus": 2, "gpu_type": "A100 80GB",
                    "parallelism": "tensor parallel 2", "other_settings": "--max-model-len 131072",
                    "measurement_method": "nvidia-smi", "measured_kind": kind, "value": 70,
                    "unit": "GB", "quality": "A"
                }),
                "{}",
            )
        };
        let source =
            |kind: &str| crate::express::express(&point(kind)).expect("expressible").source;
        assert!(source("does not fit").contains("sessions 1"), "{}", source("does not fit"));
        assert!(source("peak").contains("sessions 256"), "{}", source("peak"));
    }

    /// transformers before 4.45 returns every prompt position's logits; THUDM's ChatGLM and
    /// GLM-4 code keeps only the last.
    #[test]
    fn logits_of_every_position_before_transformers_4_45() {
        let source = |model: &str| {
            let point = crate::express::test_point(
                serde_json::json!({
                    "id": "H-1", "source_id": "H", "workload": "llm_inference", "model": model,
                    "param_count": "9.4B",
                    "layers": 40, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 2,
                    "vocab_size": 151_552, "framework": "transformers 4.40 generate",
                    "weight_precision": "bf16", "batch_size": 1, "input_tokens": 1000,
                    "output_tokens": 100, "num_gpus": 1, "gpu_type": "A100 80GB",
                    "measurement_method": "torch.cuda.max_memory_allocated()",
                    "measured_kind": "peak", "value": 20, "unit": "GiB", "quality": "B"
                }),
                "{}",
            );
            crate::express::express(&point).expect("expressible").source
        };
        assert!(source("org/some-9b").contains("logits   all"));
        assert!(!source("THUDM/glm-4-9b-chat").contains("logits   all"));
        assert!(!source("THUDM/chatglm3-6b").contains("logits   all"));
    }

    /// transformers before 4.40 built Qwen2's rotary tables in every layer; later versions and
    /// other families (whose config the harness has not read for it) get none.
    #[test]
    fn qwen2_rotary_tables_before_transformers_4_40() {
        let source = |model: &str, framework: &str| {
            let point = crate::express::test_point(
                serde_json::json!({
                    "id": "Q-1", "source_id": "Q", "workload": "llm_inference", "model": model,
                    "framework": framework, "weight_precision": "bf16", "batch_size": 1,
                    "input_tokens": 1, "output_tokens": 2048, "num_gpus": 1,
                    "gpu_type": "A100 80GB",
                    "measurement_method": "torch.cuda.max_memory_allocated()",
                    "measured_kind": "peak", "value": 3.4, "unit": "GiB", "quality": "B"
                }),
                "{}",
            );
            crate::express::express(&point).expect("expressible").source
        };
        let tables = "rope_tables 32768 tokens";
        assert!(
            source("Qwen/Qwen2-1.5B-Instruct", "transformers 4.38.2 generate").contains(tables)
        );
        assert!(
            !source("Qwen/Qwen2-1.5B-Instruct", "transformers 4.45.0 generate").contains(tables)
        );
        assert!(!source("Qwen/Qwen2.5-1.5B-Instruct", "transformers 4.38.2").contains(tables));
        assert!(!source("Qwen/Qwen2-1.5B-Instruct", "vLLM 0.4.3").contains(tables));
    }

    #[test]
    fn chunked_prefill_and_static_caches_in_their_wordings() {
        assert!(chunked_prefill("--max-model-len 16384 --enable-chunked-prefill"));
        assert!(chunked_prefill("enable_chunked_prefill=True"));
        assert!(!chunked_prefill("enable_chunked_prefill=False"));
        assert!(!chunked_prefill("--max-model-len 16384"));
        let point = |settings: &str| crate::data::Point {
            other_settings: Some(settings.to_owned()),
            ..crate::data::Point::default()
        };
        let static_len = |settings: &str| static_cache_len(&point(settings));
        assert_eq!(static_len("cache_implementation='static', max_cache_len 4096"), Some(4096));
        assert_eq!(static_len("StaticCache(max_cache_len=8192)"), Some(8192));
        // A length with no static cache is not one.
        assert_eq!(static_len("max_cache_len 4096"), None);
    }

    /// A point whose other settings are `settings`.
    fn with_settings(settings: &str) -> crate::data::Point {
        crate::data::Point {
            other_settings: Some(settings.into()),
            ..crate::data::Point::default()
        }
    }

    #[test]
    fn llama_cpp_gpu_layers_in_their_wordings() {
        for (settings, layers) in [
            ("-ngl 40 -c 8192", Some(40)),
            ("--n-gpu-layers 24", Some(24)),
            (r#"{"num_gpu": 20}"#, Some(20)),
            ("load log: offloaded 28/33 layers to GPU", Some(28)),
            ("28 of 33 layers offloaded to the GPU", Some(28)),
            ("a 32 layers model", None),
            ("2 of the layers", None),
        ] {
            assert_eq!(ggml_gpu_layers(&with_settings(settings)), layers, "{settings}");
        }
    }

    #[test]
    fn pooling_servers_read_their_own_memory_settings() {
        let point = |framework: &str, settings: &str| crate::data::Point {
            framework: framework.to_owned(),
            other_settings: Some(settings.to_owned()),
            ..crate::data::Point::default()
        };
        let fraction =
            |p: &crate::data::Point, runtime| stated_memory_fraction(&mut Cx::new(p), runtime);
        let sglang = point("SGLang 0.3", "--mem-fraction-static 0.85, chunked prefill");
        assert_eq!(fraction(&sglang, Runtime::Sglang), Some(85));
        let tgi = point("TGI 2.0", "cuda_memory_fraction=0.8");
        assert_eq!(fraction(&tgi, Runtime::Tgi), Some(76));
        assert_eq!(
            fraction(&point("TGI 3.3.4", "cuda_memory_fraction 0.5"), Runtime::Tgi),
            Some(45)
        );
        // No fraction stated: the release's wiggle room, unless it is the language's 95 %.
        assert_eq!(fraction(&point("text-generation-inference 3.1.0", ""), Runtime::Tgi), Some(93));
        assert_eq!(fraction(&point("TGI 2.0.4", ""), Runtime::Tgi), None);
        assert_eq!(fraction(&point("TGI", ""), Runtime::Tgi), None);
        // vLLM's default rose to 0.92 in v0.22.
        assert_eq!(fraction(&point("vLLM 0.22.1", ""), Runtime::Vllm), Some(92));
        assert_eq!(fraction(&point("vLLM 0.6.3", ""), Runtime::Vllm), None);
        let trt = point("TensorRT-LLM 0.12", "kv_cache_config free_gpu_memory_fraction=0.85");
        assert_eq!(fraction(&trt, Runtime::TensorrtLlm), Some(85));
        let lmdeploy = point("LMDeploy 0.6 (TurboMind)", "--cache-max-entry-count 0.5");
        assert_eq!(fraction(&lmdeploy, Runtime::Lmdeploy), Some(50));
        let vllm = point("vLLM", "gpu_memory_utilization 0.95");
        assert_eq!(fraction(&vllm, Runtime::Vllm), Some(95));
        assert_eq!(fraction(&vllm, Runtime::Sglang), None);
        assert_eq!(fraction(&point("vLLM", "gpu_memory_utilization 95"), Runtime::Vllm), None);
    }

    #[test]
    fn versions() {
        assert!(!states_version_at_least("~v4.41 (May 2024)", 4, 45));
        assert!(states_version_at_least("transformers 4.46.1", 4, 45));
        assert!(!states_version_at_least("PyTorch 2.0.1, CUDA 11.4", 4, 45));
        assert!(states_version_at_least("vllm 0.10.1", 0, 8));
        assert!(!states_version_at_least("vllm 0.6.3, cuda 12.1", 0, 8));
    }

    #[test]
    fn settings_numbers() {
        let vllm = "gpu_memory_utilization 0.90; default max_model_len (8192) used";
        assert_eq!(number_after(vllm, "max_model_len"), Some(8192));
        assert_eq!(number_after("n_ctx 512, n_batch 512, n_ubatch 512", "n_ubatch"), Some(512));
        let ubatch = |settings: &str| {
            let point = crate::data::Point {
                framework: "llama.cpp".to_owned(),
                other_settings: Some(settings.to_owned()),
                ..crate::data::Point::default()
            };
            ggml_ubatch(&point, &settings.to_lowercase())
        };
        assert_eq!(ubatch("-c 8192 -ub 1024 -ngl 99"), Some(1024));
        assert_eq!(ubatch("koboldcpp --contextsize 16384 --blasbatchsize 2048"), Some(2048));
        assert_eq!(ubatch("-b 256"), Some(256));
        assert_eq!(ubatch("-b 4096"), None);
    }

    #[test]
    fn models_beside_the_named_one_are_read_from_the_settings() {
        let point = |settings: &str| {
            crate::express::test_point(
                serde_json::json!({
                    "id": "S-1", "source_id": "S", "workload": "llm_inference",
                    "model": "meta-llama/Meta-Llama-3-8B-Instruct", "framework": "vLLM 0.6.3",
                    "measured_kind": "peak", "value": 20, "unit": "GB",
                    "measurement_method": "nvidia-smi"
                }),
                &serde_json::json!({ "other_settings": settings }).to_string(),
            )
        };
        for settings in [
            "--speculative-model meta-llama/Llama-3.2-1B --num-speculative-tokens 5",
            "assistant_model=Llama-3.2-1B",
            "--enable-lora --max-loras 4",
            "EAGLE-2 heads",
        ] {
            assert!(beside_the_model(&point(settings)).is_some(), "{settings}");
        }
        assert!(beside_the_model(&point("--max-model-len 8192")).is_none());
    }

    #[test]
    fn generate_options_the_language_does_not_model() {
        for settings in [
            "use_cache=False",
            "cache_implementation='quantized', cache_config={'nbits': 4}",
            "device_map='auto', max_memory={0: '10GiB', 'cpu': '64GiB'}",
            "output_scores = True, return_dict_in_generate=True",
        ] {
            assert!(unmodelled_generation(&with_settings(settings)).is_some(), "{settings}");
        }
        for settings in ["use_cache=True", "cache_implementation='static'", "num_beams=4"] {
            assert!(unmodelled_generation(&with_settings(settings)).is_none(), "{settings}");
        }
    }

    #[test]
    fn a_servers_context_in_its_own_flag() {
        assert_eq!(server_context("--max-model-len 16384 --enforce-eager"), Some(16384));
        assert_eq!(server_context("--max-total-tokens 4096 --quantize awq"), Some(4096));
        assert_eq!(server_context("--context-length 8192 --tp 2"), Some(8192));
        assert_eq!(server_context("--session-len 32768"), Some(32768));
        assert_eq!(server_context("max_seq_len=2048"), Some(2048));
        assert_eq!(server_context("--gpu-memory-utilization 0.9"), None);
    }

    #[test]
    fn a_stated_max_num_seqs_is_read() {
        assert_eq!(
            stated_max_num_seqs(&with_settings("--max-model-len 8192 --max-num-seqs 64")),
            Some(64)
        );
        assert_eq!(stated_max_num_seqs(&with_settings("max_num_seqs=32")), Some(32));
        assert_eq!(stated_max_num_seqs(&with_settings("--max-model-len 8192")), None);
    }

    #[test]
    fn a_kv_cache_kept_on_the_host_is_read_from_the_flags() {
        for settings in ["-c 8192 -ngl 99 --no-kv-offload", "-nkvo -ngl 99", "offload_kqv=False"] {
            assert!(kv_on_host(&with_settings(settings)), "{settings}");
        }
        assert!(!kv_on_host(&with_settings("-c 8192 -ngl 99 -fa")));
    }

    #[test]
    fn context_windows_in_each_front_ends_words() {
        for (settings, tokens) in [
            ("n_ctx 4096, n-gpu-layers 33", 4096),
            ("-c 8192 -ngl 99", 8192),
            ("--ctx-size 16384", 16384),
            ("PARAMETER num_ctx 32768", 32768),
            ("--contextsize 8192 --gpulayers 99", 8192),
            ("context length 4096, GPU offload max", 4096),
        ] {
            assert_eq!(ggml_context(settings), Some(tokens), "{settings}");
        }
        assert_eq!(ggml_context("--gpulayers 99"), None);
    }
}
