//! The model each point names, as an entry of `models.vram` or of the built-in catalog.
//!
//! One row per `model` wording in the data set. A model the language cannot describe, or whose
//! config.json was not found, maps to the gaps that say so; its points are then unexpressed.
//! A wording the table does not list (a data set the harness has not seen) is first matched
//! against the usual spellings of the models the harness declares ([`recognise`]), then, as a
//! last resort, declared from the architecture fields the point itself gives ([`from_fields`]),
//! an assumption the expression records.

use crate::gaps::{Gap, data};

/// How LoRA target module names map onto the language's targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `q_proj k_proj v_proj o_proj gate_proj up_proj down_proj`.
    Llama,
    /// Qwen v1: `c_attn` (fused q, k, v), `c_proj` (attention output, and by PEFT's suffix
    /// match also the MLP's down projection), `w1`, `w2` (the two MLP input projections).
    QwenV1,
    /// T5 encoder-decoders: `q k v o wi wo` (`wi_0 wi_1` gated); its workloads give the
    /// encoder's `source` length beside the decoder's.
    T5,
}

/// A model the generated source can name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub name: String,
    pub family: Family,
    /// A `model` declaration to put in the source, for a model declared from the point's fields.
    pub declaration: Option<String>,
}

fn declared(name: &str, family: Family) -> Model {
    Model { name: name.to_owned(), family, declaration: None }
}

fn no_config(model: &str) -> Gap {
    Gap::data(data::MODEL_CONFIG, format!("{model}: no copy of its config.json found"))
}

/// The model for a `model` wording; `Err` lists why it cannot be used, `Ok(None)` means the
/// wording is not in this table.
pub fn model(wording: &str) -> Option<Result<Model, Vec<Gap>>> {
    // A name the table holds, followed by the source's own note in parentheses ("Qwen/Qwen-7B-Chat
    // (ms-swift model_type qwen-7b-chat)"), is that name.
    let head = wording.trim().split(" (").next().unwrap_or_default();
    declared_model(wording.trim())
        .or_else(|| (head != wording.trim()).then(|| declared_model(head)).flatten())
        .or_else(|| recognise(wording).map(Ok))
}

/// The models this table declares by their exact wording.
fn declared_model(wording: &str) -> Option<Result<Model, Vec<Gap>>> {
    use Family::{Llama, QwenV1, T5};
    Some(match wording {
        "Qwen/Qwen-1_8B-Chat"
        | "Qwen/Qwen-1_8B(-Chat)"
        | "Qwen/Qwen-1_8B (base)"
        | "Qwen/Qwen-1_8B"
        | "Qwen/Qwen-1_8B-Chat-Int4" => Ok(declared("qwen-1.8b", QwenV1)),
        "Qwen/Qwen-7B-Chat"
        | "Qwen/Qwen-7B(-Chat)"
        | "Qwen/Qwen-7B (base)"
        | "Qwen/Qwen-7B"
        | "Qwen/Qwen-7B-Chat-Int4" => Ok(declared("qwen-7b", QwenV1)),
        "Qwen/Qwen-14B-Chat"
        | "Qwen/Qwen-14B(-Chat)"
        | "Qwen/Qwen-14B (base)"
        | "Qwen/Qwen-14B-Chat-Int4" => Ok(declared("qwen-14b", QwenV1)),
        "Qwen/Qwen-72B-Chat" | "Qwen/Qwen-72B(-Chat)" | "Qwen/Qwen-72B-Chat-Int4" => {
            Ok(declared("qwen-72b", QwenV1))
        }
        "meta-llama/Meta-Llama-3-8B" => Ok(declared("llama3-8b", Llama)),
        // A Llama-3-8B fine-tune: the data's architecture fields were read from its GGUF
        // metadata (llama.cpp print_meta), which match Llama 3 8B's config.json.
        "llama-3-Korean-Bllossom-8B (Llama-3-8B architecture) GGUF Q4_K_M" => {
            Ok(declared("llama3-8b", Llama))
        }
        "Llama 3.1 8B" => Ok(declared("llama3.1-8b", Llama)),
        "Llama 3.1 70B" => Ok(declared("llama3.1-70b", Llama)),
        "Llama 3.1 405B" | "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8" => {
            Ok(declared("llama3.1-405b", Llama))
        }
        "meta-llama/Llama-2-7b-chat-hf" => Ok(declared("llama2-7b", Llama)),
        "google/gemma-7b (Ollama gemma:7b)" => Ok(declared("gemma-7b", Llama)),
        "Yi-34B-200K (GGUF)" => Ok(declared("yi-34b-200k", Llama)),
        "Yi-6B-200K (GGUF)" => Err(vec![no_config(
            "01-ai/Yi-6B-200K (only Yi-6B's was found; the data's shape fields are recalled, not read)",
        )]),
        // StarCoder fine-tuned: StarCoder's config (models.vram names where it was read).
        "bigcode/octocoder" => Ok(declared("octocoder", Llama)),
        "mistral-small-2409-22b (custom Ollama tag 'DEFAULT/mistral-small-2409-22b')" => {
            Err(vec![no_config("mistralai/Mistral-Small-Instruct-2409")])
        }
        "bigscience/bloomz-7b1" => Err(vec![no_config("bigscience/bloomz-7b1")]),
        "google-bert/bert-large-uncased" => Ok(declared("bert-large-uncased", Llama)),
        "bigscience/T0_3B" => Ok(declared("t5-v1.1-xl", T5)),
        "bigscience/mt0-xxl" => Ok(declared("mt5-xxl", T5)),
        "t5-3b" => Ok(declared("t5-3b", T5)),
        _ => return None,
    })
}

/// Spellings of the models the harness declares or the catalog holds, compressed as
/// [`compressed`] writes them, with the model each names: `meta-llama/Llama-3.1-8B-Instruct`
/// and `Meta-Llama-3.1-8B` are both `llama3.18b...`. A few releases share another's shape in
/// every field the language reads (layers, widths, heads, vocabulary) and name it: Llama 3 and
/// 3.3 70B (Llama 3.1 70B's), Qwen2 (Qwen2.5's sizes 0.5B, 7B and 72B), Qwen2.5-Coder (Qwen2.5's).
///
/// The first spelling a wording contains wins, so a name that contains another's comes first
/// (`codellama7b` before `llama7b`, the R1 distills before `deepseekr1`).
const SPELLINGS: [(&str, &str); 136] = [
    // DeepSeek-R1's distills keep their base models' shapes: Llama 3.1 8B (its config.json,
    // ahmedghosaini/crag-meta, models/DeepSeek-R1-Distill-Llama-8B/config.json @ 07bf4be7),
    // Llama 3.3 70B (= 3.1 70B's), Qwen2.5-Math 7B (= Qwen2.5 7B's: 28 layers, 3584, 18944,
    // 28/4 heads, vocab 152064, untied; the config quoted in leandromet/nlp_project_cuda,
    // deepseek_install_run_Qwen_7B.md @ 9767c2d1), Qwen2.5 14B and 32B (the 32B's shape gives
    // the 32,763,876,352 parameters the Hub reports for the distill).
    ("r1distillqwen1.5b", "r1-distill-qwen-1.5b"),
    ("r1distillllama8b", "llama3.1-8b"),
    ("r1distillllama70b", "llama3.1-70b"),
    ("r1distillqwen7b", "qwen2.5-7b"),
    ("r1distillqwen14b", "qwen2.5-14b"),
    ("r1distillqwen32b", "qwen2.5-32b"),
    // DeepSeek-R1's config.json differs from V3's only in transformers_version
    // (ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/model_configs/,
    // deepseek-ai--DeepSeek-R1_config.json and deepseek-ai--DeepSeek-V3_config.json @ 095f58a5);
    // R1-0528 is a later checkpoint of R1.
    // DeepSeek's R1-0528 distill into Qwen3 8B keeps Qwen3 8B's shape (its model card: the
    // chain of thought "distilled from DeepSeek-R1-0528 to post-train Qwen3 8B Base").
    ("deepseekr10528qwen38b", "qwen3-8b"),
    // Ollama's `deepseek-r1:<size>` tags are the distills (its library page: 1.5b, 7b, 14b
    // and 32b on Qwen2.5, 8b and 70b on Llama; `8b` was later re-pointed at the 0528 Qwen3 8B
    // distill, so that tag names no one shape and is left to the point's own fields).
    ("deepseekr11.5b", "r1-distill-qwen-1.5b"),
    ("deepseekr17b", "qwen2.5-7b"),
    ("deepseekr114b", "qwen2.5-14b"),
    ("deepseekr132b", "qwen2.5-32b"),
    ("deepseekr170b", "llama3.1-70b"),
    ("deepseekr10528", "deepseek-v3"),
    ("deepseekr1", "deepseek-v3"),
    // Code Llama 7B and 13B are Llama 2's shapes with 16 more tokens (vocab 32016: 0.1 % of the
    // embeddings); LLaMA 1 7B and 13B are Llama 2's exactly (huggyllama/llama-7b config.json,
    // tangafua/LLM_Key_Distribution_System_backend, llama-7b-hf/config.json @ c86e932f).
    ("codellama34b", "codellama-34b"),
    ("codellama7b", "llama2-7b"),
    ("codellama13b", "llama2-13b"),
    ("llama7b", "llama2-7b"),
    ("llama13b", "llama2-13b"),
    ("llama30b", "llama-30b"),
    ("llama33b", "llama-30b"),
    ("llama65b", "llama-65b"),
    ("tinyllama1.1b", "tinyllama-1.1b-chat"),
    ("qwen2.53b", "qwen2.5-3b"),
    ("phi4mini", "phi-4-mini"),
    ("phi4", "phi4"),
    ("phi2", "phi-2"),
    ("phi3medium", "phi-3-medium-4k"),
    ("phi3small", "phi-3-small-8k"),
    // Phi-3.5-mini-instruct's config.json has Phi-3-mini's shape (mlc-ai/mlc-llm,
    // python/mlc_llm/model/model_preset.py, "phi-3_5" @ 79d603f0).
    ("phi3.5mini", "phi3-mini"),
    ("phi3.5moe", "phi-3.5-moe"),
    ("mistralsmall24b", "mistral-small-24b-2501"),
    ("gemma2b", "gemma-2b"),
    ("gemma7b", "gemma-7b"),
    ("gemma227b", "gemma-2-27b"),
    ("gemma31b", "gemma-3-1b"),
    ("gemma34b", "gemma-3-4b"),
    ("gemma312b", "gemma-3-12b"),
    ("gemma327b", "gemma-3-27b"),
    ("qwen30.6b", "qwen3-0.6b"),
    ("qwen31.7b", "qwen3-1.7b"),
    ("qwen34b", "qwen3-4b"),
    ("qwen3235ba22b", "qwen3-235b-a22b"),
    ("qwen257ba14b", "qwen2-57b-a14b"),
    ("qwen1.5moea2.7b", "qwen1.5-moe-a2.7b"),
    ("qwen1.50.5b", "qwen1.5-0.5b"),
    ("qwen1.51.8b", "qwen1.5-1.8b"),
    ("qwen1.54b", "qwen1.5-4b"),
    ("qwen1.57b", "qwen1.5-7b"),
    ("qwen1.514b", "qwen1.5-14b"),
    ("qwen1.532b", "qwen1.5-32b"),
    ("qwen1.572b", "qwen1.5-72b"),
    ("qwen1.5110b", "qwen1.5-110b"),
    ("deepseekllm7b", "deepseek-llm-7b"),
    ("deepseekllm67b", "deepseek-llm-67b"),
    ("deepseekcoder1.3b", "deepseek-coder-1.3b"),
    ("deepseekcoder6.7b", "deepseek-coder-6.7b"),
    ("deepseekcoder33b", "deepseek-coder-33b"),
    // Yi 6B and 9B have Yi 1.5's shapes (Girafboy/pytorchKQI, llms/01-ai/Yi-6B and Yi-9B
    // config.json @ 4adb1daa); Yi 34B has Yi-34B-200K's.
    ("opt1.3b", "opt-1.3b"),
    ("opt2.7b", "opt-2.7b"),
    ("opt6.7b", "opt-6.7b"),
    ("opt13b", "opt-13b"),
    ("opt30b", "opt-30b"),
    ("gptj6b", "gpt-j-6b"),
    ("gptneox20b", "gpt-neox-20b"),
    ("pythia12b", "pythia-12b"),
    ("mpt30b", "mpt-30b"),
    ("gpt2large", "gpt2-large"),
    ("gpt2xl", "gpt2-xl"),
    ("gpt2", "gpt2"),
    ("bloom176b", "bloom-176b"),
    ("bloom3b", "bloom-3b"),
    ("yi1.56b", "yi-1.5-6b"),
    ("yi1.59b", "yi-1.5-9b"),
    ("yi1.534b", "yi-1.5-34b"),
    ("yi6b", "yi-1.5-6b"),
    ("yi9b", "yi-1.5-9b"),
    ("llama370b", "llama3.1-70b"),
    ("llama3.370b", "llama3.1-70b"),
    ("qwen20.5b", "qwen2.5-0.5b"),
    ("qwen27b", "qwen2.5-7b"),
    ("qwen272b", "qwen2.5-72b"),
    ("qwen2.5coder7b", "qwen2.5-7b"),
    ("qwen2.5coder14b", "qwen2.5-14b"),
    ("qwen2.5coder32b", "qwen2.5-32b"),
    // QwQ-32B's config.json is Qwen2.5 32B's shape (64 layers, 5120, 27648, 40/8 heads, vocab
    // 152064, untied; a public model report quoting the file and its 771 tensors,
    // 32,763,876,352 parameters; code index id 63012281180).
    ("qwq32b", "qwen2.5-32b"),
    // Qwen2.5-Math 7B has Qwen2.5 7B's shape (the config quoted above, for R1's 7B distill);
    // the 1.5B is the shape its R1 distill keeps.
    ("qwen2.5math7b", "qwen2.5-7b"),
    ("qwen2.5math1.5b", "r1-distill-qwen-1.5b"),
    // Vicuna v1.5 "is fine-tuned from Llama 2" (its model card, as vendored in public
    // repositories: code index id 879603434), at 7B and 13B.
    ("vicuna7bv1.5", "llama2-7b"),
    ("vicuna13bv1.5", "llama2-13b"),
    ("llama3.18b", "llama3.1-8b"),
    ("llama3.170b", "llama3.1-70b"),
    ("llama3.1405b", "llama3.1-405b"),
    ("llama3.21b", "llama3.2-1b"),
    ("llama3.23b", "llama3.2-3b"),
    ("llama38b", "llama3-8b"),
    ("llama27b", "llama2-7b"),
    ("llama213b", "llama2-13b"),
    ("llama270b", "llama2-70b"),
    ("mistral7b", "mistral-7b"),
    ("mistralnemo12b", "mistral-nemo-12b"),
    ("mistralnemobase2407", "mistral-nemo-12b"),
    ("mistralnemoinstruct2407", "mistral-nemo-12b"),
    ("mixtral8x7b", "mixtral-8x7b"),
    ("mixtral8x22b", "mixtral-8x22b"),
    ("qwen2.50.5b", "qwen2.5-0.5b"),
    ("qwen2.51.5b", "qwen2.5-1.5b"),
    // Qwen2-1.5B's config.json has Qwen2.5-1.5B's shape (Girafboy/pytorchKQI,
    // llms/Qwen/Qwen2-1.5B/config.json @ 4adb1daa).
    ("qwen21.5b", "qwen2.5-1.5b"),
    ("qwen2.57b", "qwen2.5-7b"),
    // THUDM's GLM family in the catalog: GLM-4-9B's base and chat releases share one shape (the
    // 1M-context chat model has twice the KV groups); ChatGLM2-6B's config.json gives every
    // field the language reads as ChatGLM3-6B's does (28 layers, 4096, 13696, 32 heads and 2
    // KV groups of 128, vocab 65024: the config transformers printed in a public training log,
    // code index id 48975231924), only its seq_length differs.
    ("glm49bchat1m", "glm-4-9b-chat-1m"),
    ("glm49b", "glm-4-9b-chat"),
    ("chatglm36b", "chatglm3-6b"),
    ("chatglm26b", "chatglm3-6b"),
    ("qwen2.514b", "qwen2.5-14b"),
    ("qwen2.532b", "qwen2.5-32b"),
    ("qwen2.572b", "qwen2.5-72b"),
    ("gemma22b", "gemma2-2b"),
    ("gemma29b", "gemma2-9b"),
    ("phi3mini", "phi3-mini"),
    ("qwen330ba3b", "qwen3-30b-a3b"),
    ("qwen38b", "qwen3-8b"),
    ("qwen314b", "qwen3-14b"),
    ("qwen332b", "qwen3-32b"),
    ("deepseekv3", "deepseek-v3"),
    ("deepseekv2lite", "deepseek-v2-lite"),
    // DeepSeek-Coder-V2-Lite's config.json has DeepSeek-V2-Lite's shape (Girafboy/pytorchKQI,
    // llms/deepseek-ai/DeepSeek-Coder-V2-Lite-Base/config.json @ 4adb1daa).
    ("deepseekcoderv2lite", "deepseek-v2-lite"),
    ("gptoss20b", "gpt-oss-20b"),
    ("gptoss120b", "gpt-oss-120b"),
    ("yi34b200k", "yi-34b-200k"),
    ("yi34b", "yi-34b-200k"),
    ("octocoder", "octocoder"),
    // Encoders: DistilBERT before BERT, whose spelling its name contains.
    ("distilbertbaseuncased", "distilbert-base-uncased"),
    ("bertbaseuncased", "bert-base-uncased"),
    ("bertbasecased", "bert-base-cased"),
    ("bertlargeuncased", "bert-large-uncased"),
    ("robertabase", "roberta-base"),
];

/// A wording lower-cased, without its organisation (`meta-llama/`) and without `-`, `_`, spaces
/// and the colon of an Ollama tag (`llama3.1:8b`), so that spellings of one name compare equal.
fn compressed(wording: &str) -> String {
    let name = wording.rsplit('/').next().unwrap_or(wording);
    name.to_lowercase().chars().filter(|c| !matches!(c, '-' | '_' | ' ' | ':')).collect()
}

/// Other models whose names contain a spelling: Phi-4-multimodal is not Phi-4, an R1 distill
/// without a spelling of its own is not R1, CodeQwen1.5 7B (a 92,416-token vocabulary) is not
/// Qwen1.5 7B, RecurrentGemma is not Gemma, GPT-2 Medium and DistilGPT2 are not GPT-2,
/// XLM-RoBERTa (a 250,002-token vocabulary) is not RoBERTa. A wording that names one matches no
/// spelling it contains and is left to its own fields.
const OTHER_MODELS: [&str; 8] = [
    "phi4multimodal",
    "xlmrobertabase",
    "deepseekr1distill",
    "codeqwen1.57b",
    "recurrentgemma2b",
    "recurrentgemma9b",
    "gpt2medium",
    "distilgpt2",
];

/// The weight format a model's name gives (a quantized upload's suffix or an Ollama tag), as the
/// word the precision field would hold: a GGUF type (`Q4_K_M`, `q8_0`, `IQ4_XS`), `GPTQ` with
/// its bits, `AWQ`, `FP8`, bitsandbytes' `bnb-4bit`; `None` when the name gives none.
pub fn format_in_name(wording: &str) -> Option<String> {
    let name = wording.rsplit('/').next().unwrap_or(wording).to_lowercase();
    let words: Vec<&str> = name.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
    // GGUF types as llama-quantize spells them: q4_k_m, q8_0, iq4_xs, and fp16/f16 in a tag.
    let gguf = words.iter().find(|w| {
        let w = w.trim_end_matches("_gguf");
        (w.starts_with('q') || w.starts_with("iq"))
            && w.chars()
                .nth(if w.starts_with("iq") { 2 } else { 1 })
                .is_some_and(|c| c.is_ascii_digit())
            && (w.contains('_') || w.len() == 2)
    });
    if let Some(gguf) = gguf {
        return Some(format!("GGUF {}", gguf.to_uppercase()));
    }
    // A 16-bit GGUF file or Ollama tag (`:8b-instruct-fp16`, `-f16.gguf`).
    let packaged = wording.contains(':') || name.contains("gguf");
    if packaged && words.iter().any(|w| matches!(*w, "fp16" | "f16")) {
        return Some("fp16".to_owned());
    }
    if name.contains("gptq") {
        let bits = if name.contains("int8") || name.contains("8bit") { "int8" } else { "int4" };
        return Some(format!("GPTQ {bits}"));
    }
    if name.contains("awq") {
        return Some("AWQ".to_owned());
    }
    if words.contains(&"fp8") {
        return Some("FP8".to_owned());
    }
    if name.contains("bnb-4bit") || name.contains("bnb_4bit") {
        return Some("bitsandbytes 4-bit (nf4)".to_owned());
    }
    None
}

/// Whether a model wording names a vision-language model (LLaVA, Qwen2-VL, Llama 3.2 Vision,
/// Pixtral, PaliGemma, InternVL, MiniCPM-V, ...): its language model's shape alone leaves out
/// the vision encoder and the image tokens.
pub fn vision_language(wording: &str) -> bool {
    let lower = wording.rsplit('/').next().unwrap_or(wording).to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    let text = compressed(wording);
    let families = [
        "llava",
        "pixtral",
        "paligemma",
        "internvl",
        "idefics",
        "molmo",
        "florence",
        "cogvlm",
        "qwenvl",
        "smolvlm",
        "janus",
        "fuyu",
        "kosmos",
        "blip",
        "minicpmv",
        "glm4v",
        "deepseekvl",
        "llama3.2vision",
        "llama3.211bvision",
        "llama3.290bvision",
    ];
    words.iter().any(|w| matches!(*w, "vl" | "vision" | "vlm"))
        || words
            .iter()
            .any(|w| w.strip_suffix("vl").is_some_and(|rest| rest.ends_with(char::is_numeric)))
        || families.iter().any(|family| text.contains(family))
}

/// A model the harness declares, named by one of its usual spellings; suffixes such as
/// `-Instruct`, `-hf` or `-AWQ` are left to the other fields. The size must not run on into
/// more digits (`qwen2.57b` is not `qwen2.572b`); a context suffix is not a size
/// (`Phi-3-mini-4k-instruct`, `-128k`).
pub fn recognise(wording: &str) -> Option<Model> {
    let text = compressed(wording);
    let another = |spelling: &str| {
        OTHER_MODELS.iter().any(|other| {
            other.len() > spelling.len() && other.contains(spelling) && text.contains(other)
        })
    };
    let found = |spellings: &[(&str, &str)], family: Family| {
        spellings.iter().find_map(|(spelling, name)| {
            let at = text.find(spelling)?;
            let rest = &text[at + spelling.len()..];
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let context_suffix = digits > 0 && rest[digits..].starts_with('k');
            let runs_on = rest.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.')
                && !context_suffix;
            (!runs_on && !another(spelling)).then(|| declared(name, family))
        })
    };
    found(&T5_SPELLINGS, Family::T5).or_else(|| found(&SPELLINGS, Family::Llama))
}

/// Spellings of the T5 encoder-decoders the harness declares: T0 3B and Flan-T5 XL have T5 1.1
/// XL's shape, mT0 XXL mT5 XXL's (their model cards name the model each was fine-tuned from).
const T5_SPELLINGS: [(&str, &str); 6] = [
    ("t03b", "t5-v1.1-xl"),
    ("flant5xl", "t5-v1.1-xl"),
    ("t5v11xl", "t5-v1.1-xl"),
    ("mt0xxl", "mt5-xxl"),
    ("mt5xxl", "mt5-xxl"),
    ("t53b", "t5-3b"),
];

/// The architecture a point states for itself.
#[derive(Clone, Debug)]
pub struct Fields {
    pub layers: Option<u64>,
    pub hidden: Option<u64>,
    pub heads: Option<u64>,
    pub kv_heads: Option<u64>,
    pub vocab: Option<u64>,
    /// `param_count` as written (`7.7B`, `~12B`, `560M`).
    pub params: Option<String>,
    /// `arch_notes`, where a mixture of experts says how many experts and how many per token.
    pub notes: Option<String>,
}

/// A decoder-only model declared from `fields`, for a model with no config.json in the
/// harness: Llama-style (gated MLP, RMSNorm, no biases, untied embeddings) unless its name is
/// of a family with a plain MLP or a tied head, its feed-forward width the one that makes the
/// stated parameter count (rounded up to a multiple of 64).
/// `Err` says which field is missing or why the count does not fit the shape.
pub fn from_fields(wording: &str, fields: &Fields) -> Result<Model, String> {
    let need =
        |value: Option<u64>, what: &str| value.filter(|v| *v > 0).ok_or(format!("no {what}"));
    let layers = need(fields.layers, "layers")?;
    let hidden = need(fields.hidden, "hidden_size")?;
    let heads = need(fields.heads, "attention_heads")?;
    let kv_heads = fields.kv_heads.filter(|k| *k > 0).unwrap_or(heads);
    let vocab = need(fields.vocab, "vocab_size")?;
    let text = fields.params.as_deref().unwrap_or_default();
    let params = parameter_count(text).ok_or(format!("param_count {text:?} is not a count"))?;
    // Bounds far above any model, so that the products below stay well inside u64.
    if layers > 1_000 || hidden > 1 << 20 || heads > 4_096 || vocab > 1 << 24 {
        return Err(format!("{layers} layers of {hidden} with {heads} heads and {vocab} tokens"));
    }
    if hidden % heads != 0 || heads % kv_heads != 0 {
        return Err(format!(
            "{heads} heads ({kv_heads} for keys and values) do not divide {hidden}"
        ));
    }
    let head_dim = hidden / heads;
    let name_words = wording.to_lowercase();
    let plain = PLAIN_MLP.iter().any(|family| name_words.contains(family));
    let tied = TIED_EMBEDDINGS.iter().any(|family| name_words.contains(family));
    let notes = fields.notes.as_deref().map(str::to_lowercase).unwrap_or_default();
    let moe = if notes.contains("moe") || notes.contains("expert") {
        Some(mixture(&notes, &name_words)?)
    } else {
        None
    };
    let fused = !plain
        && moe.is_none()
        && (FUSED_GATE_UP.iter().any(|family| name_words.contains(family))
            || ["gate_up_proj", "dense_h_to_4h"].iter().any(|m| notes.contains(m)));
    let attention = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim;
    let embeddings = if tied { 1 } else { 2 } * vocab * hidden;
    // A mixture's router: one row of `hidden` weights per expert in every layer.
    let router = moe.map_or(0, |(experts, _)| layers * experts * hidden);
    let fixed = embeddings + layers * (attention + 2 * hidden) + hidden + router;
    let mlp = params.checked_sub(fixed).filter(|m| *m > 0).ok_or(format!(
        "{params} parameters do not cover the embeddings and attention of the stated shape"
    ))?;
    let matrices = if plain { 2 } else { 3 };
    let experts = moe.map_or(1, |(experts, _)| experts);
    let ffn = (mlp / (matrices * hidden * layers * experts)).div_ceil(64) * 64;
    // Experts are often narrower than the model (Qwen3-30B-A3B's 768 against 2048).
    let narrowest = if moe.is_some() { hidden / 8 } else { hidden / 2 };
    if !(narrowest..=8 * hidden).contains(&ffn) {
        return Err(format!(
            "the feed-forward width it implies, {ffn}, is implausible for {hidden}"
        ));
    }
    let compressed = compressed(wording);
    let runs: Vec<&str> =
        compressed.split(|c: char| !c.is_ascii_alphanumeric()).filter(|r| !r.is_empty()).collect();
    let name = format!("data-{}", runs.join("-"));
    let experts_lines = moe.map_or(String::new(), |(experts, active)| {
        format!("  experts  {experts}\n  experts_active {active}\n")
    });
    let declaration = format!(
        "# {wording}: declared from the point's own fields (layers, hidden_size, heads, \
         vocab_size, param_count {text}{}); ffn solved from the parameter count\n\
         model {name} {{\n  layers   {layers}\n  hidden   {hidden}\n  ffn      {ffn}\n  \
         heads    {heads}\n  kv_heads {kv_heads}\n  head_dim {head_dim}\n  vocab    {vocab}\n{}{}{}}}\n",
        if moe.is_some() { ", experts from arch_notes" } else { "" },
        if plain {
            "  mlp      plain\n"
        } else if fused {
            "  mlp      gated_fused\n"
        } else {
            ""
        },
        if tied { "  tied_embeddings true\n" } else { "" },
        experts_lines,
    );
    Ok(Model { name, family: Family::Llama, declaration: Some(declaration) })
}

/// A mixture of experts as its notes (or its name, `8x7B`) give it: the experts and how many
/// each token takes. Shared experts, dense first layers and latent attention make a shape the
/// fields cannot give, and so does a count the notes leave out.
fn mixture(notes: &str, name: &str) -> Result<(u64, u64), String> {
    if ["shared", "dense layer", "first_k_dense", "mla", "latent", "mamba", "hybrid"]
        .iter()
        .any(|w| notes.contains(w))
    {
        return Err(format!(
            "a mixture of experts whose notes say more than its fields give: {notes:?}"
        ));
    }
    let words: Vec<&str> = notes
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let number = |word: &str| word.parse::<u64>().ok().filter(|n| (1..=1024).contains(n));
    // `8 experts`, `64 routed experts`, `num_experts 8`, `num_local_experts: 8`.
    let before = |keys: &[&str]| {
        words.windows(2).find_map(|w| keys.contains(&w[1]).then(|| number(w[0])).flatten()).or_else(
            || {
                words.windows(3).find_map(|w| {
                    (keys.contains(&w[2]) && w[1] == "routed").then(|| number(w[0])).flatten()
                })
            },
        )
    };
    let after = |keys: &[&str]| {
        words.windows(2).find_map(|w| keys.contains(&w[0]).then(|| number(w[1])).flatten())
    };
    let from_name = || {
        let at = name.find(|c: char| c.is_ascii_digit())?;
        let digits: String = name[at..].chars().take_while(char::is_ascii_digit).collect();
        name[at + digits.len()..].starts_with('x').then(|| number(&digits)).flatten()
    };
    let experts = before(&["experts", "expert"])
        .or_else(|| after(&["num_experts", "num_local_experts", "n_routed_experts", "experts"]))
        .or_else(from_name);
    // `2 active`, `top-2`, `2 per token`, `num_experts_per_tok 2`.
    let active = before(&["active"])
        .or_else(|| after(&["top", "experts_per_tok", "num_experts_per_tok", "moe_topk"]))
        .or_else(|| {
            words
                .windows(3)
                .find_map(|w| (w[1] == "per" && w[2] == "token").then(|| number(w[0])).flatten())
        });
    match (experts, active) {
        (Some(experts), Some(active)) if active <= experts => Ok((experts, active)),
        _ => Err(format!(
            "a mixture of experts whose notes do not give its experts and how many are active: {notes:?}"
        )),
    }
}

/// Families, by a word of the model's name, whose MLP is one up and one down projection with
/// no gate (GPT-2, BLOOM, Falcon, OPT, Pythia and GPT-NeoX, GPT-J, StarCoder).
const PLAIN_MLP: [&str; 8] =
    ["gpt2", "bloom", "falcon", "opt-", "pythia", "gpt-neox", "gpt-j", "starcoder"];

/// Families whose output head shares the embedding matrix (`tie_word_embeddings`): GPT-2,
/// BLOOM, OPT, Gemma.
const TIED_EMBEDDINGS: [&str; 4] = ["gpt2", "bloom", "opt-", "gemma"];

/// Families whose gate and up projections are one fused matrix (`mlp gated_fused`): ChatGLM and
/// GLM-4 (`dense_h_to_4h`, `gate_up_proj`), Phi-3 and Phi-4 (`gate_up_proj`).
const FUSED_GATE_UP: [&str; 5] = ["glm", "phi-3", "phi3", "phi-4", "phi4"];

/// A parameter count as the data writes it: the first number followed by `B` (billions) or `M`
/// (millions), `~` and spaces allowed. `None` for a mixture written `8x7B`, whose total the
/// text does not give.
fn parameter_count(text: &str) -> Option<u64> {
    let lower = text.to_lowercase();
    let bytes = lower.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if !bytes[at].is_ascii_digit() {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && (bytes[at].is_ascii_digit() || bytes[at] == b'.') {
            at += 1;
        }
        let number: f64 = lower[start..at].parse().ok()?;
        let rest = lower[at..].trim_start();
        if rest.starts_with('x') {
            return None;
        }
        let scale = match rest.chars().next() {
            Some('b') => 1e9,
            Some('m') => 1e6,
            _ => continue,
        };
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a count of parameters, well inside u64"
        )]
        return Some((number * scale).round() as u64);
    }
    None
}

/// The language's LoRA targets for a list of module names, and whether the list adapts a fused
/// projection the language counts as separate ones (Qwen's `c_attn`, `query_key_value`).
pub fn lora_targets(
    family: Family,
    modules: &[String],
) -> Result<(Vec<&'static str>, bool), String> {
    let mut targets: Vec<&'static str> = Vec::new();
    let mut fused = false;
    for module in modules {
        let adds: &[&'static str] = match (family, module.as_str()) {
            // T5 (modeling_t5.py): T5Attention's q, k, v, o; T5DenseActDense's wi, wo and
            // T5DenseGatedActDense's wi_0, wi_1, wo.
            // Short names (`q,k,v,o,gate,up,down`, Unsloth's and many tables' wording) are a
            // Llama-style model's projections too.
            (Family::Llama, "q_proj") | (Family::T5 | Family::Llama, "q") => &["q"],
            (Family::Llama, "k_proj") | (Family::T5 | Family::Llama, "k") => &["k"],
            (Family::Llama, "v_proj") | (Family::T5 | Family::Llama, "v") => &["v"],
            // torchtune (and Meta's own code, Mixtral's experts) name the attention output
            // `output_proj` and the MLP's gate, down and up projections `w1`, `w2`, `w3`.
            (Family::Llama, "o_proj" | "output_proj" | "o")
            | (Family::T5, "o")
            | (_, "dense" | "out_proj") => &["o"],
            (Family::Llama, "gate_proj" | "w1" | "gate")
            | (Family::QwenV1, "w2")
            | (Family::T5, "wi_0") => &["gate"],
            (Family::Llama, "up_proj" | "w3" | "up")
            | (Family::QwenV1, "w1")
            | (Family::T5, "wi" | "wi_1")
            | (_, "dense_h_to_4h" | "fc1" | "c_fc") => &["up"],
            (Family::Llama, "down_proj" | "w2" | "down")
            | (Family::T5, "wo")
            | (_, "dense_4h_to_h" | "fc2") => &["down"],
            // Fused q, k and v: Qwen v1's `c_attn`, and other families' names for the same
            // matrices (BLOOM, Falcon, GPT-NeoX `query_key_value`; Phi-3 `qkv_proj`; MPT
            // `Wqkv`); likewise the attention output (`dense`, `out_proj`), a fused gate and up
            // (Phi-3 `gate_up_proj`) and a plain MLP's two matrices (`dense_h_to_4h` and
            // `dense_4h_to_h`, `fc1` and `fc2`, `c_fc`) above.
            (_, "c_attn" | "query_key_value" | "qkv_proj" | "wqkv") => {
                fused = true;
                &["q", "k", "v"]
            }
            (Family::QwenV1, "c_proj") => &["o", "down"],
            (_, "gate_up_proj") => {
                fused = true;
                &["gate", "up"]
            }
            _ => return Err(format!("module `{module}` has no LoRA target in the language")),
        };
        for target in adds {
            if !targets.contains(target) {
                targets.push(target);
            }
        }
    }
    let order = ["q", "k", "v", "o", "gate", "up", "down"];
    targets.sort_by_key(|t| order.iter().position(|o| o == t));
    Ok((targets, fused))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usual_spellings_name_the_declared_models() {
        let name = |wording: &str| recognise(wording).map(|m| m.name);
        assert_eq!(name("meta-llama/Llama-3.1-8B-Instruct").as_deref(), Some("llama3.1-8b"));
        assert_eq!(name("meta-llama/Meta-Llama-3-8B").as_deref(), Some("llama3-8b"));
        assert_eq!(name("Qwen/Qwen2.5-72B-Instruct-AWQ").as_deref(), Some("qwen2.5-72b"));
        assert_eq!(name("Qwen2.5-7B").as_deref(), Some("qwen2.5-7b"));
        assert_eq!(name("mistralai/Mistral-7B-Instruct-v0.3").as_deref(), Some("mistral-7b"));
        // A context length after the name is not a larger size.
        assert_eq!(name("microsoft/Phi-3-mini-4k-instruct").as_deref(), Some("phi3-mini"));
        assert_eq!(name("microsoft/Phi-3-mini-128k-instruct").as_deref(), Some("phi3-mini"));
        assert_eq!(name("Llama-3.1-405B-FP8").as_deref(), Some("llama3.1-405b"));
        assert_eq!(name("Qwen2.5-3B").as_deref(), Some("qwen2.5-3b"));
        assert_eq!(name("microsoft/phi-4").as_deref(), Some("phi4"));
        assert_eq!(name("Qwen/QwQ-32B-AWQ").as_deref(), Some("qwen2.5-32b"));
        assert_eq!(name("openai/gpt-oss-120b").as_deref(), Some("gpt-oss-120b"));
        assert_eq!(name("microsoft/Phi-4-mini-instruct").as_deref(), Some("phi-4-mini"));
        assert_eq!(name("microsoft/Phi-4-multimodal-instruct"), None);
        assert_eq!(name("google/gemma-3-12b-it").as_deref(), Some("gemma-3-12b"));
        assert_eq!(name("google/gemma-2-27b-it").as_deref(), Some("gemma-2-27b"));
        assert_eq!(name("google/recurrentgemma-2b"), None);
        assert_eq!(name("Qwen/Qwen3-4B-Instruct-2507").as_deref(), Some("qwen3-4b"));
        assert_eq!(name("Qwen/Qwen1.5-72B-Chat").as_deref(), Some("qwen1.5-72b"));
        assert_eq!(name("Qwen/CodeQwen1.5-7B"), None);
        assert_eq!(name("facebook/opt-6.7b").as_deref(), Some("opt-6.7b"));
        assert_eq!(name("openai-community/gpt2-xl").as_deref(), Some("gpt2-xl"));
        assert_eq!(name("gpt2").as_deref(), Some("gpt2"));
        assert_eq!(name("distilgpt2"), None);
        assert_eq!(name("EleutherAI/gpt-neox-20b").as_deref(), Some("gpt-neox-20b"));
        assert_eq!(name("01-ai/Yi-34B-Chat").as_deref(), Some("yi-34b-200k"));
        assert_eq!(
            name("deepseek-ai/deepseek-coder-6.7b-instruct").as_deref(),
            Some("deepseek-coder-6.7b")
        );
        assert_eq!(name("deepseek-ai/DeepSeek-R1-0528").as_deref(), Some("deepseek-v3"));
        assert_eq!(name("deepseek-ai/DeepSeek-R1-0528-Qwen3-8B").as_deref(), Some("qwen3-8b"));
        // Ollama's tags: the colon parts name and size.
        assert_eq!(name("llama3.1:8b").as_deref(), Some("llama3.1-8b"));
        assert_eq!(name("llama3.1:8b-instruct-q4_K_M").as_deref(), Some("llama3.1-8b"));
        assert_eq!(name("qwen2.5:14b").as_deref(), Some("qwen2.5-14b"));
        assert_eq!(name("deepseek-r1:14b").as_deref(), Some("qwen2.5-14b"));
        assert_eq!(name("deepseek-r1:70b").as_deref(), Some("llama3.1-70b"));
        assert_eq!(name("deepseek-r1:1.5b").as_deref(), Some("r1-distill-qwen-1.5b"));
        assert_eq!(name("deepseek-r1:8b"), None);
        assert_eq!(name("DeepSeek-R1").as_deref(), Some("deepseek-v3"));
        assert_eq!(
            name("deepseek-ai/DeepSeek-R1-Distill-Llama-8B").as_deref(),
            Some("llama3.1-8b")
        );
        assert_eq!(
            name("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B").as_deref(),
            Some("qwen2.5-32b")
        );
        assert_eq!(
            name("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B").as_deref(),
            Some("r1-distill-qwen-1.5b")
        );
        assert_eq!(name("deepseek-ai/DeepSeek-R1-Distill-Qwen-3B"), None);
        assert_eq!(name("codellama/CodeLlama-7b-hf").as_deref(), Some("llama2-7b"));
        assert_eq!(name("huggyllama/llama-13b").as_deref(), Some("llama2-13b"));
        assert_eq!(name("lmsys/vicuna-13b-v1.5").as_deref(), Some("llama2-13b"));
        assert_eq!(name("Qwen/Qwen2.5-Math-7B-Instruct").as_deref(), Some("qwen2.5-7b"));
        assert_eq!(name("Qwen/Qwen2-72B-Instruct").as_deref(), Some("qwen2.5-72b"));
        assert_eq!(name("Qwen/Qwen2-7B").as_deref(), Some("qwen2.5-7b"));
        assert_eq!(name("meta-llama/Llama-3.3-70B-Instruct").as_deref(), Some("llama3.1-70b"));
        assert_eq!(name("tiiuae/falcon-7b"), None);
        assert_eq!(name("google-bert/bert-base-uncased").as_deref(), Some("bert-base-uncased"));
        assert_eq!(name("bert-base-cased").as_deref(), Some("bert-base-cased"));
        assert_eq!(
            name("distilbert/distilbert-base-uncased").as_deref(),
            Some("distilbert-base-uncased")
        );
        assert_eq!(
            name("cardiffnlp/twitter-roberta-base-sentiment").as_deref(),
            Some("roberta-base")
        );
        assert_eq!(name("FacebookAI/xlm-roberta-base"), None);
    }

    #[test]
    fn weight_formats_named_by_the_model() {
        let named = |wording: &str| format_in_name(wording);
        assert_eq!(named("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf").as_deref(), Some("GGUF Q4_K_M"));
        assert_eq!(named("llama3.1:8b-instruct-q8_0").as_deref(), Some("GGUF Q8_0"));
        assert_eq!(named("bartowski/Qwen2.5-7B-Instruct-IQ4_XS").as_deref(), Some("GGUF IQ4_XS"));
        assert_eq!(named("TheBloke/Mistral-7B-Instruct-v0.2-GPTQ").as_deref(), Some("GPTQ int4"));
        assert_eq!(named("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8").as_deref(), Some("GPTQ int8"));
        assert_eq!(named("Qwen/Qwen2.5-7B-Instruct-AWQ").as_deref(), Some("AWQ"));
        assert_eq!(named("Qwen/Qwen3-8B-FP8").as_deref(), Some("FP8"));
        assert_eq!(named("llama3.1:8b-instruct-fp16").as_deref(), Some("fp16"));
        assert_eq!(named("Meta-Llama-3-8B-Instruct-f16.gguf").as_deref(), Some("fp16"));
        // Sizes, versions and plain names are no format.
        for plain in ["meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-72B", "Qwen/QwQ-32B", "qwen2.5:7b"] {
            assert_eq!(named(plain), None, "{plain}");
        }
    }

    #[test]
    fn vision_language_models_by_their_names() {
        for vlm in [
            "meta-llama/Llama-3.2-11B-Vision-Instruct",
            "Qwen/Qwen2.5-VL-7B-Instruct",
            "Qwen/Qwen2-VL-2B",
            "llava-hf/llava-1.5-7b-hf",
            "mistralai/Pixtral-12B-2409",
            "google/paligemma-3b-pt-224",
            "OpenGVLab/InternVL2-8B",
            "microsoft/Phi-3-vision-128k-instruct",
            "openbmb/MiniCPM-V-2_6",
            "deepseek-ai/deepseek-vl2-small",
        ] {
            assert!(vision_language(vlm), "{vlm}");
        }
        for text in [
            "meta-llama/Llama-3.1-8B",
            "Qwen/Qwen2.5-7B-Instruct",
            "mistralai/Mistral-7B-v0.1",
            "google/gemma-2-9b",
            "EleutherAI/gpt-neox-20b",
        ] {
            assert!(!vision_language(text), "{text}");
        }
    }

    #[test]
    fn a_model_without_a_config_is_declared_from_its_own_fields() {
        // Qwen-7B's shape (config.json: 32 layers, 4096 hidden, 32 heads, vocab 151,936,
        // intermediate_size 22,016 / 2 = 11,008 per gated matrix) and its stated 7.7B.
        let fields = Fields {
            layers: Some(32),
            hidden: Some(4096),
            heads: Some(32),
            kv_heads: Some(32),
            vocab: Some(151_936),
            params: Some("7.7B".to_owned()),
            notes: None,
        };
        let model = from_fields("Qwen/Qwen-7B (v1, GGUF)", &fields).expect("a full shape");
        assert_eq!(model.name, "data-qwen7b-v1-gguf");
        let declaration = model.declaration.expect("a declaration");
        // (7.7e9 - 2 × 151,936 × 4,096 - 32 × (4 × 4,096² + 2 × 4,096) - 4,096) / (3 × 4,096 ×
        // 32) = 10,963.6, rounded up to a multiple of 64: 11,008.
        assert!(declaration.contains("ffn      11008"), "{declaration}");
        let outcome = vram_core::evaluate(&declaration);
        assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:?}", outcome.diagnostics);
        let missing = Fields { vocab: None, ..fields.clone() };
        assert_eq!(from_fields("x", &missing).err().as_deref(), Some("no vocab_size"));
        assert_eq!(parameter_count("transformer ~12B (23.8 GB bf16)"), Some(12_000_000_000));
        assert_eq!(parameter_count("560M"), Some(560_000_000));
        assert_eq!(parameter_count("8x7B"), None);
        // BLOOM: a plain MLP (4h = 16,384) and a tied head. (7.07e9 - 250,880 × 4,096 - 30 ×
        // (4 × 4,096² + 2 × 4,096) - 4,096) / (2 × 4,096 × 30) = 16,393.5, rounded up: 16,448.
        let bloom = Fields {
            layers: Some(30),
            hidden: Some(4096),
            heads: Some(32),
            kv_heads: Some(32),
            vocab: Some(250_880),
            params: Some("7.07B".to_owned()),
            notes: None,
        };
        let declaration = from_fields("bigscience/bloomz-7b1", &bloom)
            .expect("a full shape")
            .declaration
            .expect("a declaration");
        assert!(declaration.contains("ffn      16448"), "{declaration}");
        assert!(declaration.contains("mlp      plain") && declaration.contains("tied_embeddings"));
        let outcome = vram_core::evaluate(&declaration);
        assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:?}", outcome.diagnostics);
        // GLM-4's fused dense_h_to_4h, named by the family or by the notes.
        let glm = Fields {
            layers: Some(40),
            kv_heads: Some(2),
            vocab: Some(151_552),
            params: Some("9.40B".to_owned()),
            ..fields.clone()
        };
        let by_name = from_fields("THUDM/glm-4-9b-chat", &glm).expect("a full shape");
        assert!(by_name.declaration.expect("declared").contains("mlp      gated_fused"));
        let noted = Fields { notes: Some("dense_h_to_4h 27392 wide".to_owned()), ..glm.clone() };
        let by_notes = from_fields("some/fork", &noted).expect("a full shape");
        assert!(by_notes.declaration.expect("declared").contains("mlp      gated_fused"));
        let llama = from_fields("some/fork", &glm).expect("a full shape");
        assert!(!llama.declaration.expect("declared").contains("mlp "));
    }

    /// Mixtral 8x7B's shape (config.json: 32 layers, 4096 hidden, 32 heads, 8 for keys and
    /// values, vocab 32,000, 8 experts of width 14,336, 2 per token) and its 46.7B:
    /// (46.7e9 − 2 × 32,000 × 4,096 − 32 × (2 × 4,096² + 2 × 4,096 × 1,024 + 2 × 4,096) − 4,096
    /// − 32 × 8 × 4,096) ÷ (3 × 4,096 × 32 × 8) = 14,327.5, rounded up to 14,336.
    #[test]
    fn a_mixture_of_experts_is_declared_from_its_notes() {
        let fields = Fields {
            layers: Some(32),
            hidden: Some(4096),
            heads: Some(32),
            kv_heads: Some(8),
            vocab: Some(32_000),
            params: Some("46.7B".to_owned()),
            notes: Some("MoE, 8 experts, top-2 routing".to_owned()),
        };
        let declaration = from_fields("some/sparse-8x7b-fork", &fields)
            .expect("a full shape")
            .declaration
            .expect("a declaration");
        assert!(declaration.contains("ffn      14336"), "{declaration}");
        assert!(declaration.contains("experts  8\n  experts_active 2"), "{declaration}");
        let outcome = vram_core::evaluate(&declaration);
        assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:?}", outcome.diagnostics);
        assert_eq!(mixture("num_local_experts: 16, num_experts_per_tok: 4", ""), Ok((16, 4)));
        assert_eq!(mixture("moe with 2 active", "mixtral-8x22b"), Ok((8, 2)));
        assert_eq!(mixture("64 routed experts, 6 per token", ""), Ok((64, 6)));
        assert!(mixture("MoE 64 experts 6 active 2 shared, MLA", "").is_err());
        assert!(mixture("a mixture of experts", "").is_err());
    }

    #[test]
    fn models_vram_checks_alone() {
        let outcome = vram_core::evaluate(crate::MODELS_VRAM);
        let problems: Vec<_> = outcome.diagnostics.iter().collect();
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn other_families_module_names() {
        let names = |list: &[&str]| list.iter().map(ToString::to_string).collect::<Vec<_>>();
        let (targets, fused) =
            lora_targets(Family::Llama, &names(&["query_key_value", "dense", "dense_4h_to_h"]))
                .expect("known names");
        assert_eq!(targets, ["q", "k", "v", "o", "down"]);
        assert!(fused);
        assert!(lora_targets(Family::Llama, &names(&["lm_head"])).is_err());
    }

    #[test]
    fn t5_spellings_and_module_names() {
        let name = |wording: &str| recognise(wording).map(|m| (m.name, m.family));
        let xl = Some(("t5-v1.1-xl".to_owned(), Family::T5));
        assert_eq!(name("google/flan-t5-xl"), xl);
        assert_eq!(name("bigscience/T0_3B"), xl);
        assert_eq!(name("google/t5-v1_1-xl"), xl);
        assert_eq!(name("google/mt5-xxl"), Some(("mt5-xxl".to_owned(), Family::T5)));
        assert_eq!(name("google-t5/t5-3b"), Some(("t5-3b".to_owned(), Family::T5)));
        assert_eq!(name("google/flan-t5-xxl"), None);
        let modules: Vec<String> =
            ["q", "v", "wi_0", "wi_1", "wo"].iter().map(ToString::to_string).collect();
        let (targets, fused) = lora_targets(Family::T5, &modules).unwrap();
        assert_eq!(targets, ["q", "v", "gate", "up", "down"]);
        assert!(!fused);
    }

    #[test]
    fn qwen_targets() {
        let modules: Vec<String> =
            ["c_attn", "c_proj", "w1", "w2"].iter().map(ToString::to_string).collect();
        let (targets, fused) = lora_targets(Family::QwenV1, &modules).unwrap();
        assert_eq!(targets, ["q", "k", "v", "o", "gate", "up", "down"]);
        assert!(fused);
        // GPT-2's `c_attn` is a fused q, k, v too, whatever the family.
        let gpt2 = lora_targets(Family::Llama, &["c_attn".to_string()]).unwrap();
        assert_eq!(gpt2, (vec!["q", "k", "v"], true));
    }

    /// A declared name followed by the source's note in parentheses is that name.
    #[test]
    fn a_declared_name_with_a_note() {
        let named = |wording: &str| model(wording).and_then(Result::ok).map(|m| (m.name, m.family));
        let qwen = Some(("qwen-7b".to_string(), Family::QwenV1));
        assert_eq!(named("Qwen/Qwen-7B-Chat (ms-swift model_type qwen-7b-chat)"), qwen);
        assert_eq!(named("Qwen/Qwen-7B (base)"), qwen);
        assert_eq!(named("Qwen/Qwen-7B-Chat"), qwen);
    }
}
