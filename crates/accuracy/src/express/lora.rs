//! LoRA's rank and target modules in a point's words: `r=64`, `rank 4`, a list of module names
//! (`on q_proj,v_proj`), "all linear" and its spellings, the short names (`q`, `v`), and each
//! tool's default targets where the point names none.

use super::Cx;
use crate::gaps::assume;
use crate::models::Family;

/// `r=64`, `rank 4`, or kohya's `network_dim 32`.
pub(super) fn rank(lower: &str) -> Option<u64> {
    let keys = ["r=", "rank ", "rank=", "r = ", "rank: ", "r: "];
    let kohya = ["network_dim ", "network_dim=", "network_dim: ", "network_dim_"];
    let stated = keys.iter().chain(&kohya).find_map(|key| {
        let start = lower.find(key)? + key.len();
        crate::data::leading_number(&lower[start..])
    });
    // `r 64` and `r64`: the word `r` (or `r` and its digits) alone.
    stated.or_else(|| {
        let words: Vec<&str> = lower.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        words.windows(2).find_map(|w| (w[0] == "r").then(|| w[1].parse().ok()).flatten()).or_else(
            || {
                words.iter().find_map(|w| {
                    let digits = w.strip_prefix('r')?;
                    digits
                        .chars()
                        .all(|c| c.is_ascii_digit())
                        .then(|| digits.parse().ok())
                        .flatten()
                })
            },
        )
    })
}

/// A stated LoRA dropout probability (`dropout 0.05`, `lora_dropout=0.1`, `dropout: 0.05`), as
/// the decimal the source wrote; `None` when none is stated or it is not a number in [0, 1).
pub(super) fn dropout(lower: &str) -> Option<String> {
    let start = lower.find("dropout")? + "dropout".len();
    let rest = lower[start..].trim_start_matches([' ', '=', ':', '_', '\'', '"']);
    let number: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let value: f64 = number.trim_end_matches('.').parse().ok()?;
    (0.0..1.0).contains(&value).then(|| number.trim_end_matches('.').to_string())
}

/// The module names after ` on `: `on c_attn,c_proj,w1,w2 (no embedding training)`.
pub(super) fn modules(text: &str) -> Option<Vec<String>> {
    let listed = || {
        let start = text.find(" on ")? + 4;
        let list = text[start..].split(" (").next()?;
        let names: Vec<String> = list.split(',').map(|m| m.trim().to_string()).collect();
        let valid = names.iter().all(|m| {
            !m.is_empty() && m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        });
        valid.then_some(names)
    };
    listed().or_else(|| named_modules(text))
}

/// The targets a tool adapts when the source states a rank but no modules: Unsloth's notebooks
/// and LLaMA-Factory (`lora_target` defaults to `all` since 0.8) adapt every projection; PEFT
/// itself adapts its per-architecture defaults (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`:
/// `q_proj` and `v_proj` for Llama-style models, `c_attn` for Qwen v1, `q` and `v` for T5).
pub(super) fn default_targets(cx: &mut Cx<'_>, family: Family) -> Vec<String> {
    let framework = cx.point.framework.to_lowercase();
    let every = ["unsloth", "llama-factory", "llamafactory", "llama factory"]
        .iter()
        .find(|tool| framework.contains(**tool));
    let (names, why): (&[&str], String) = match (every, family) {
        (Some(tool), Family::Llama) => (
            &LLAMA_PROJECTIONS,
            format!("LoRA targets not stated: every projection ({tool}'s default)"),
        ),
        (_, Family::QwenV1) => {
            (&["c_attn"], "LoRA targets not stated: PEFT's default for Qwen v1, c_attn".into())
        }
        (_, Family::T5) => {
            (&["q", "v"], "LoRA targets not stated: PEFT's default for T5, q and v".into())
        }
        (_, Family::Llama) => (
            &["q_proj", "v_proj"],
            "LoRA targets not stated: PEFT's default for Llama-style models, q_proj and v_proj"
                .into(),
        ),
    };
    cx.assume(assume::RUNTIME_DEFAULT, why);
    names.iter().map(ToString::to_string).collect()
}

/// Llama-style projection names, the targets PEFT's `all-linear` adapts in such a model.
const LLAMA_PROJECTIONS: [&str; 7] =
    ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// Module names written anywhere in the text (`target_modules=["q_proj", "v_proj"]`), or every
/// projection for PEFT's `all-linear`.
fn named_modules(text: &str) -> Option<Vec<String>> {
    let lower = text.to_lowercase();
    if adapts_every_linear(&lower) {
        return Some(LLAMA_PROJECTIONS.iter().map(ToString::to_string).collect());
    }
    // Other families' module names, unambiguous in free text (`dense` alone is not).
    let others = [
        "query_key_value",
        "qkv_proj",
        "wqkv",
        "out_proj",
        "gate_up_proj",
        "dense_h_to_4h",
        "dense_4h_to_h",
        "c_attn",
        "c_fc",
    ];
    let words: Vec<&str> =
        lower.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
    let mut names: Vec<String> = Vec::new();
    for word in &words {
        let known = LLAMA_PROJECTIONS.contains(word) || others.contains(word);
        if known && !names.iter().any(|n| n == word) {
            names.push((*word).to_string());
        }
    }
    if names.is_empty() {
        names = short_projection_names(&words);
    }
    (!names.is_empty()).then_some(names)
}

/// PEFT's `all-linear` in the other tools' words: Axolotl's `lora_target_linear`,
/// LLaMA-Factory's `lora_target: all`, "target all", "all linear layers".
fn adapts_every_linear(lower: &str) -> bool {
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .filter(|w| !w.is_empty())
        .collect();
    ["all-linear", "all_linear", "all linear", "lora_target_linear"]
        .iter()
        .any(|w| lower.contains(w))
        || words.windows(2).any(|pair| {
            matches!(pair[0], "target" | "targets" | "lora_target" | "target_modules")
                && pair[1] == "all"
                || pair[0] == "all"
                    && matches!(pair[1], "layers" | "modules" | "projections" | "linears" | "matrices")
        })
        // `LoRA rank 8 all`: the word right after the rank.
        || words.windows(3).any(|w| {
            matches!(w[0], "r" | "rank") && w[1].parse::<u64>().is_ok() && w[2] == "all"
        })
}

/// Projections written by their short names, as Unsloth's notebooks and many tables do
/// (`q,k,v,o,gate,up,down`): taken as such only when at least two of them are listed, since a
/// lone letter in free text means nothing ([`models::lora_targets`] maps them per family).
fn short_projection_names(words: &[&str]) -> Vec<String> {
    const SHORT: [&str; 7] = ["q", "k", "v", "o", "gate", "up", "down"];
    let found: Vec<String> = SHORT
        .iter()
        .filter(|short| words.contains(short))
        .map(|short| (*short).to_string())
        .collect();
    if found.len() >= 2 { found } else { Vec::new() }
}
