//! The `training { ... }` section of a point: method, weights, optimizer, micro-batch, sequence
//! and activation checkpointing.

use std::fmt::Write as _;

use super::Cx;
use crate::gaps::{Gap, assume, data, feature};
use crate::models::{self, Family};

/// Qwen's finetune.py `LoraArguments.lora_target_modules` default.
const QWEN_FINETUNE_TARGETS: [&str; 4] = ["c_attn", "c_proj", "w1", "w2"];

/// The section's lines, or `None` when a gap stops it.
/// `family` is `None` when the model is unknown: the conditions are still read for their gaps.
pub(super) fn body(cx: &mut Cx<'_>, family: Option<Family>) -> Option<String> {
    let method = method(cx, family);
    let weights = cx.weight_format();
    if let Some(weights) = weights {
        mixed_precision(cx, weights);
    }
    let optimizer = optimizer(cx);
    let point = cx.point;
    let micro_batch = point.batch_size;
    if micro_batch.is_none() {
        cx.gap(Gap::data(data::BATCH, "batch_size: none"));
    }
    let sequence = point.seq_len_tokens();
    if sequence.is_none() {
        cx.gap(Gap::data(data::SEQUENCE, "seq_len: none"));
    }
    let checkpointing = point.activation_checkpointing;
    if checkpointing.is_none() {
        cx.gap(Gap::data(data::CHECKPOINTING, "activation_checkpointing: none"));
    }
    let (method, weights, optimizer, micro_batch, sequence, checkpointing) =
        (method?, weights?, optimizer?, micro_batch?, sequence?, checkpointing?);

    let mut out = String::from("  training {\n");
    out.push_str(&method);
    let _ = writeln!(out, "    weights       {weights}");
    let _ = writeln!(out, "    optimizer     {optimizer}");
    let _ = writeln!(out, "    micro_batch   {micro_batch}");
    let _ = writeln!(out, "    sequence      {sequence} tokens");
    let _ = writeln!(out, "    checkpointing {}", if checkpointing { "full" } else { "none" });
    if cx.eager_attention() {
        out.push_str("    attention     eager\n");
    }
    out.push_str("  }\n");
    Some(out)
}

/// `method full`, or `method lora { ... }` with the rank and targets the source states.
fn method(cx: &mut Cx<'_>, family: Option<Family>) -> Option<String> {
    let point = cx.point;
    let Some(text) = point.finetune_method.clone() else {
        if point.workload == "training_full" {
            return Some("    method        full\n".to_string());
        }
        cx.gap(Gap::data(data::LORA_SETUP, "finetune_method: none"));
        return None;
    };
    let lower = text.to_lowercase();
    if lower.contains("modules_to_save")
        || lower.contains("lora (emb)")
        || lower.contains("trainable wte")
    {
        cx.gap(Gap::feature(feature::MODULES_TO_SAVE, text));
        return None;
    }
    if !lower.contains("lora") {
        if lower.contains("full") {
            return Some("    method        full\n".to_string());
        }
        cx.unreadable("finetune_method", &text);
        return None;
    }
    let rank = rank(&lower);
    let modules = modules(&text).or_else(|| {
        let qwen_script = point.framework.to_lowercase().contains("qwen finetune.py");
        (family == Some(Family::QwenV1) && qwen_script).then(|| {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                "LoRA targets: Qwen finetune.py default c_attn c_proj w1 w2",
            );
            QWEN_FINETUNE_TARGETS.iter().map(ToString::to_string).collect()
        })
    });
    let (Some(rank), Some(modules)) = (rank, modules) else {
        cx.gap(Gap::data(data::LORA_SETUP, text));
        return None;
    };
    // Without a model the module names cannot be mapped; its gap is already listed.
    let family = family?;
    let (targets, fused) = match models::lora_targets(family, &modules) {
        Ok(found) => found,
        Err(why) => {
            cx.unreadable("finetune_method", &format!("{text}: {why}"));
            return None;
        }
    };
    cx.assume(assume::LORA_DTYPE, format!("{text:?} states no adapter precision"));
    if fused {
        cx.assume(assume::FUSED_QKV_LORA, format!("rank {rank} on {}", modules.join(", ")));
    }
    let targets = if targets.len() == 7 { "all".to_string() } else { targets.join(" ") };
    Some(format!("    method lora {{\n      rank    {rank}\n      targets {targets}\n    }}\n"))
}

/// `r=64` or `rank 4`.
fn rank(lower: &str) -> Option<u64> {
    ["r=", "rank "].iter().find_map(|key| {
        let start = lower.find(key)? + key.len();
        crate::data::leading_number(&lower[start..])
    })
}

/// The module names after ` on `: `on c_attn,c_proj,w1,w2 (no embedding training)`.
fn modules(text: &str) -> Option<Vec<String>> {
    let start = text.find(" on ")? + 4;
    let list = text[start..].split(" (").next()?;
    let names: Vec<String> = list.split(',').map(|m| m.trim().to_string()).collect();
    let valid = names.iter().all(|m| {
        !m.is_empty() && m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    });
    valid.then_some(names)
}

/// Mixed precision with fp32 weights (PyTorch AMP) keeps no 16-bit copy of the weights, which
/// the language's `weights` + `master` pair cannot say.
fn mixed_precision(cx: &mut Cx<'_>, weights: &str) {
    let compute = cx.point.compute_dtype.clone().unwrap_or_default();
    if weights == "fp32" && compute.to_lowercase().contains("mixed") {
        cx.gap(Gap::feature(feature::AMP_FP32_WEIGHTS, compute));
    }
}

/// The optimizer word, or the gap that stops it.
fn optimizer(cx: &mut Cx<'_>) -> Option<&'static str> {
    let Some(text) = cx.point.optimizer.clone() else {
        cx.gap(Gap::data(data::OPTIMIZER, "optimizer: none"));
        return None;
    };
    let lower = text.to_lowercase();
    if lower.contains("8bit") {
        cx.gap(Gap::feature(feature::ADAM_8BIT, text));
        None
    } else if lower.contains("adafactor") {
        cx.gap(Gap::feature(feature::ADAFACTOR, text));
        None
    } else if lower.contains("adam") {
        Some("adamw")
    } else if lower.contains("sgd") && lower.contains("momentum") {
        Some("sgd-momentum")
    } else if lower.contains("sgd") {
        Some("sgd")
    } else {
        cx.unreadable("optimizer", &text);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_text() {
        let text = "LoRA r=64 alpha=16 on c_attn,c_proj,w1,w2 (no embedding training)";
        assert_eq!(rank(&text.to_lowercase()), Some(64));
        assert_eq!(modules(text).unwrap(), ["c_attn", "c_proj", "w1", "w2"]);
        assert_eq!(modules("Q-LoRA r=64 on GPTQ-Int4 base, fp16, DeepSpeed ZeRO-2"), None);
        assert_eq!(rank("qlora rank 4 on to_k"), Some(4));
    }
}
