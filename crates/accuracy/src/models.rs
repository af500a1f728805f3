//! The model each point names, as an entry of `models.vram` or of the built-in catalog.
//!
//! One row per `model` wording in the data set. A model the language cannot describe, or whose
//! config.json was not found, maps to the gaps that say so; its points are then unexpressed.

use crate::gaps::{Gap, data, feature};

/// How LoRA target module names map onto the language's targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `q_proj k_proj v_proj o_proj gate_proj up_proj down_proj`.
    Llama,
    /// Qwen v1: `c_attn` (fused q, k, v), `c_proj` (attention output, and by PEFT's suffix
    /// match also the MLP's down projection), `w1`, `w2` (the two MLP input projections).
    QwenV1,
}

/// A model the generated source can name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub name: &'static str,
    pub family: Family,
}

fn declared(name: &'static str, family: Family) -> Model {
    Model { name, family }
}

fn no_config(model: &str) -> Gap {
    Gap::data(data::MODEL_CONFIG, format!("{model}: no copy of its config.json found"))
}

/// The model for a `model` wording; `Err` lists why it cannot be used, `Ok(None)` means the
/// wording is not in this table.
pub fn model(wording: &str) -> Option<Result<Model, Vec<Gap>>> {
    use Family::{Llama, QwenV1};
    let encoder_decoder = |what: &str| {
        Err(vec![Gap::feature(feature::ENCODER_DECODER, format!("{wording} is {what}"))])
    };
    Some(match wording.trim() {
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
        "bigscience/T0_3B" => encoder_decoder("a T5 v1.1 encoder-decoder"),
        "bigscience/mt0-xxl" => encoder_decoder("an mT5-XXL encoder-decoder"),
        "t5-3b" => encoder_decoder("a T5 encoder-decoder"),
        _ => return None,
    })
}

/// The language's LoRA targets for a list of module names, and whether the list adapts a fused
/// projection the language counts as separate ones (Qwen's `c_attn`).
pub fn lora_targets(
    family: Family,
    modules: &[String],
) -> Result<(Vec<&'static str>, bool), String> {
    let mut targets: Vec<&'static str> = Vec::new();
    let mut fused = false;
    for module in modules {
        let adds: &[&'static str] = match (family, module.as_str()) {
            (Family::Llama, "q_proj") => &["q"],
            (Family::Llama, "k_proj") => &["k"],
            (Family::Llama, "v_proj") => &["v"],
            (Family::Llama, "o_proj") => &["o"],
            (Family::Llama, "gate_proj") | (Family::QwenV1, "w2") => &["gate"],
            (Family::Llama, "up_proj") | (Family::QwenV1, "w1") => &["up"],
            (Family::Llama, "down_proj") => &["down"],
            (Family::QwenV1, "c_attn") => {
                fused = true;
                &["q", "k", "v"]
            }
            (Family::QwenV1, "c_proj") => &["o", "down"],
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
    fn models_vram_checks_alone() {
        let outcome = vram_core::evaluate(crate::MODELS_VRAM);
        let problems: Vec<_> = outcome.diagnostics.iter().collect();
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn qwen_targets() {
        let modules: Vec<String> =
            ["c_attn", "c_proj", "w1", "w2"].iter().map(ToString::to_string).collect();
        let (targets, fused) = lora_targets(Family::QwenV1, &modules).unwrap();
        assert_eq!(targets, ["q", "k", "v", "o", "gate", "up", "down"]);
        assert!(fused);
    }
}
