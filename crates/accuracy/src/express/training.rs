//! The `training { ... }` section of a point: method, weights, optimizer, micro-batch, sequence,
//! activation checkpointing, and how model states are sharded and offloaded.

use std::fmt::Write as _;

use super::Cx;
use super::conditions::{Distribution, Offload, transformers_version};
use super::lora::{default_targets, modules, rank};
use crate::data::{Checkpointing, number_after};
use crate::gaps::{Gap, assume, data, feature};
use crate::models::{self, Family};

/// Qwen's finetune.py `LoraArguments.lora_target_modules` default.
const QWEN_FINETUNE_TARGETS: [&str; 4] = ["c_attn", "c_proj", "w1", "w2"];

/// A training setup the language does not model, if the point names one: FP8 training
/// (Transformer Engine's or torchao's float8 linear layers keep FP8 copies and scales beside the
/// 16-bit weights) or context parallelism (the sequence split over GPUs).
fn unmodelled_setup(point: &crate::data::Point) -> Option<(&'static str, String)> {
    let text = crate::data::lower_joined([
        Some(point.framework.as_str()),
        point.other_settings.as_deref(),
        point.compute_dtype.as_deref(),
        point.parallelism.as_deref(),
    ]);
    let fp8 = [
        "transformer engine",
        "transformer_engine",
        "fp8_autocast",
        "float8 training",
        "fp8 training",
        // torchao's float8 training: `convert_to_float8_training` swaps in `Float8Linear`.
        "convert_to_float8_training",
        "float8linear",
    ]
    .iter()
    .any(|word| text.contains(word))
        || (text.contains("fp8") && names_te_module(&text))
        // Accelerate's or a trainer's FP8 mixed precision (`--mixed_precision fp8`), which
        // trains through Transformer Engine or MS-AMP.
        || point.setting(&["mixed_precision"]).is_some_and(|value| value.starts_with("fp8"));
    if fp8 {
        return Some((feature::FP8_TRAINING, text));
    }
    let compact = text.replace(['-', '_'], " ");
    if ["context parallel", "ring attention", "ulysses", "sequence sharding"]
        .iter()
        .any(|word| compact.contains(word))
    {
        return Some((feature::CONTEXT_PARALLEL, text));
    }
    None
}

/// Whether the point splits one model's layers over its GPUs with accelerate's `device_map` in
/// one process ("naive model parallelism"): a pipeline of one micro-batch at a time
/// (`pipeline_schedule sequential`), not 1F1B.
fn device_map_split(point: &crate::data::Point) -> bool {
    let text = crate::data::lower_joined([
        Some(point.framework.as_str()),
        point.other_settings.as_deref(),
        point.parallelism.as_deref(),
    ]);
    point.num_gpus.is_some_and(|n| n > 1) && super::conditions::names_device_map(&text)
}

/// Whether `text` calls into Transformer Engine's PyTorch module by its usual alias (`te.Linear`,
/// `te.fp8_autocast`): `te.` starting a word, not the end of one ("rate.", "cute.").
fn names_te_module(text: &str) -> bool {
    text.match_indices("te.").any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + 3..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && after.is_some_and(char::is_alphabetic)
    })
}

/// Whether the point splits the sequence over the tensor ranks (Megatron's sequence
/// parallelism) on a tensor-parallel run.
fn sequence_parallel(point: &crate::data::Point) -> bool {
    let text = point.all_text().replace(['-', '_'], " ");
    let compact = text.replace(' ', "");
    text.contains("sequence parallel")
        && !text.contains("no sequence parallel")
        && !["sequenceparallel=false", "sequenceparallel:false", "sequenceparallelfalse"]
            .iter()
            .any(|off| compact.contains(off))
}

/// A training config's keys for the sequence length: axolotl's `sequence_len`, TRL's
/// `max_seq_length` and `max_length`, LLaMA-Factory's `cutoff_len`, Hugging Face scripts'
/// `model_max_length`.
const SEQUENCE_KEYS: [&str; 6] = [
    "sequence_len",
    "max_seq_length",
    "max_seq_len",
    "cutoff_len",
    "model_max_length",
    "max_length",
];

/// The sequence length a training config states, where every sample has it: packed to it
/// (axolotl's `sample_packing`, TRL's and LLaMA-Factory's `packing`) or padded to it
/// (`pad_to_sequence_len`, `padding="max_length"`). Otherwise the config's length is only a cap
/// on samples that may be far shorter (an unpacked alpaca batch is padded to its longest).
fn config_sequence(point: &crate::data::Point) -> Option<u64> {
    let text = point.all_text().replace([' ', '"', '\''], "");
    let unpacked = ["notpacked", "nopacking", "unpacked", "packing:false", "packing=false"]
        .iter()
        .any(|w| text.contains(w));
    let every_sample = ["packing:true", "packing=true", "packed", "pad_to_sequence_len:true"]
        .iter()
        .any(|w| text.contains(w))
        || text.contains("padding=max_length")
        || text.contains("padding:max_length");
    (every_sample && !unpacked)
        .then(|| point.setting_count(&SEQUENCE_KEYS))
        .flatten()
        .filter(|n| *n > 0)
}

/// `gradient_checkpointing: true` (or `false`, or Unsloth's `"unsloth"`) among the settings.
fn config_checkpointing(point: &crate::data::Point) -> Option<Checkpointing> {
    let value = point.setting(&["gradient_checkpointing", "use_gradient_checkpointing"])?;
    let value = value.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_lowercase();
    match value.as_str() {
        "unsloth" => Some(Checkpointing::FullOffloaded),
        "true" | "yes" | "on" | "1" => Some(Checkpointing::Full),
        "false" | "no" | "off" | "0" => Some(Checkpointing::Off),
        _ => None,
    }
}

/// The method's text with the LoRA rank and targets a config states among the settings
/// (axolotl's `lora_r` and `lora_target_linear: true`, LLaMA-Factory's `lora_rank` and
/// `lora_target: all`), where the text itself names none.
fn with_config_lora(point: &crate::data::Point, text: String) -> String {
    let lower = text.to_lowercase();
    let mut text = text;
    if rank(&lower).is_none()
        && let Some(r) = point.setting_count(&["lora_r", "lora_rank"]).filter(|r| *r > 0)
    {
        let _ = write!(text, " (r={r})");
    }
    if modules(&text).is_none() {
        let linear = point.setting(&["lora_target_linear"]).is_some_and(|v| v.starts_with("true"));
        let all = point
            .setting(&["lora_target"])
            .is_some_and(|v| v.trim_matches(|c: char| !c.is_ascii_alphanumeric()) == "all");
        if linear || all {
            text.push_str(" (all-linear)");
        }
    }
    text
}

/// The section's lines, or `None` when a gap stops it.
/// `family` is `None` when the model is unknown: the conditions are still read for their gaps.
pub(super) fn body(
    cx: &mut Cx<'_>,
    family: Option<Family>,
    distribution: &Distribution,
) -> Option<String> {
    if let Some((label, what)) = unmodelled_setup(cx.point) {
        cx.gap(Gap::feature(label, what));
        return None;
    }
    let method = method(cx, family, distribution);
    let weights = cx.weight_format();
    let activations = weights.and_then(|weights| mixed_precision(cx, weights));
    let optimizer = optimizer(cx);
    let states = method.as_ref().map(|m| states(cx, m, weights, distribution));
    let point = cx.point;
    let micro_batch = point
        .batch_size
        .or_else(|| {
            point
                .setting_count(&["micro_batch_size", "per_device_train_batch_size"])
                .filter(|n| *n > 0)
        })
        .or_else(|| cx.smallest_or_gap(Gap::data(data::BATCH, "batch_size: none")));
    let (sequence, source) = if family == Some(Family::T5) {
        let (source, target) = seq2seq_lengths(cx);
        (target, source.map(Some))
    } else {
        let sequence = point
            .seq_len_tokens()
            .or_else(|| config_sequence(point))
            .or_else(|| cx.smallest_or_gap(Gap::data(data::SEQUENCE, "seq_len: none")));
        (sequence, Some(None))
    };
    let checkpointing =
        point.activation_checkpointing.or_else(|| config_checkpointing(point)).or_else(|| {
            hf_trainer(point).then(|| {
                cx.assume(
                    assume::RUNTIME_DEFAULT,
                    "activation checkpointing not stated: the Trainer's default, off \
                 (TrainingArguments.gradient_checkpointing = False)",
                );
                Checkpointing::Off
            })
        });
    if checkpointing.is_none() {
        cx.gap(Gap::data(data::CHECKPOINTING, "activation_checkpointing: none"));
    }
    let checkpointing =
        checkpointing.and_then(|checkpointing| torchtitan_selective(cx, checkpointing));
    let objective = super::preference::objective(cx);
    let (method, weights, optimizer, states, micro_batch, sequence, checkpointing) =
        (method?, weights?, optimizer?, states?, micro_batch?, sequence?, checkpointing?);
    let objective = objective?;
    let source = source?;

    let mut out = String::from("  training {\n");
    out.push_str(&method.lines);
    let _ = writeln!(out, "    weights       {weights}");
    if let Some(activations) = activations {
        let why = if weights == "fp32" {
            "mixed precision (autocast)"
        } else {
            "the stated compute type"
        };
        let _ = writeln!(out, "    activations   {activations}  # {why}");
    }
    out.push_str(&states);
    let _ = writeln!(out, "    optimizer     {optimizer}");
    out.push_str(&galore(cx));
    let _ = writeln!(out, "    micro_batch   {micro_batch}");
    if let Some(source) = source {
        let _ = writeln!(out, "    source        {source} tokens  # the encoder's input");
    }
    let _ = writeln!(out, "    sequence      {sequence} tokens");
    let offloaded = checkpointing == Checkpointing::FullOffloaded;
    let checkpointing = match checkpointing {
        Checkpointing::Off => "none",
        Checkpointing::Full | Checkpointing::FullOffloaded => "full",
        Checkpointing::Selective => "selective",
        Checkpointing::SelectiveOp => "selective-op",
    };
    let _ = writeln!(out, "    checkpointing {checkpointing}");
    if device_map_split(cx.point) {
        out.push_str(
            "    pipeline_schedule sequential  # accelerate's device_map: one micro-batch at a time\n",
        );
    }
    if sequence_parallel(cx.point) {
        // Megatron's `--sequence-parallel` (and NeMo's): norms and residuals split over the
        // tensor ranks too.
        out.push_str("    sequence_parallel true\n");
    }
    out.push_str(&levers(cx, offloaded));
    out.push_str(&objective);
    out.push_str(&cx.gradient_lifetime().unwrap_or_default());
    out.push_str(&cx.pytorch_release_line().unwrap_or_default());
    if ["nf4", "nf4-dq", "fp4", "fp4-dq"].contains(&weights) {
        out.push_str(&cx.bitsandbytes_release_line().unwrap_or_default());
    }
    if cx.eager_attention() {
        out.push_str("    attention     eager\n");
    } else if cx.pytorch_release().is_some_and(|release| release < (2, 0)) {
        // A 1.x release defaults to eager attention; the point ran a fused kernel of its own.
        out.push_str("    attention     fused  # a fused kernel beside PyTorch 1.x\n");
    }
    if let Some(loss) = sixteen_bit_loss(cx, family, distribution) {
        let _ = writeln!(out, "    loss          {loss}  # 16-bit logits, no autocast");
    }
    out.push_str("  }\n");
    Some(out)
}

/// An encoder-decoder's two lengths: the encoder's source (`input_tokens`, else `seq_len`,
/// which seq2seq scripts use for the source: `max_source_length`) and the decoder's target
/// (`output_tokens`). A missing one is a gap.
fn seq2seq_lengths(cx: &mut Cx<'_>) -> (Option<u64>, Option<u64>) {
    let point = cx.point;
    let stated = point.input_tokens.as_deref().and_then(crate::data::leading_number);
    let source = stated.or_else(|| point.seq_len_tokens()).filter(|n| *n > 0);
    let target = point.output_tokens.filter(|n| *n > 0);
    if source.is_some() && target.is_some() {
        return (source, target);
    }
    let smallest = cx.smallest_or_gap(Gap::data(
        data::SEQUENCE,
        "an encoder-decoder: source (input_tokens or seq_len) and target (output_tokens) lengths",
    ));
    (source.or(smallest), target.or(smallest))
}

/// The precision of a cross-entropy computed on 16-bit logits with nothing autocasting it:
/// - Qwen v1's remote code does not upcast its logits, and DeepSpeed casts the module instead of
///   autocasting, so the loss runs in the compute type (without DeepSpeed the Trainer autocasts,
///   and autocast runs the log-softmax in fp32, the language's default);
/// - a loop of its own that takes the logits of a transformers model from 4.46 on (whose
///   forward no longer calls `.float()` on them: it upcasts only inside its own loss, given
///   labels) and trains in pure 16-bit (no autocast) runs its `CrossEntropyLoss` in 16-bit.
fn sixteen_bit_loss(
    cx: &mut Cx<'_>,
    family: Option<Family>,
    distribution: &Distribution,
) -> Option<&'static str> {
    let compute = cx.point.compute_dtype.clone().unwrap_or_default().to_lowercase();
    let loss = if compute.starts_with("fp16") {
        "fp16"
    } else if compute.starts_with("bf16") {
        "bf16"
    } else {
        return None;
    };
    if family == Some(Family::QwenV1)
        && distribution.deepspeed
        && ["fp16", "bf16"].contains(&compute.as_str())
    {
        cx.assume(assume::LOSS_16_BIT, format!("{}, compute {compute}", cx.point.model));
        return Some(loss);
    }
    let text = cx.point.all_text();
    let own_loop = ["outside the hf model", "outside the model"].iter().any(|w| text.contains(w));
    let unupcast = transformers_version(cx.point).is_some_and(|version| version >= (4, 46));
    let pure = ["pure bf16", "pure fp16", "no autocast", "amp_training false"]
        .iter()
        .any(|w| compute.contains(w));
    if own_loop && unupcast && pure && !distribution.deepspeed {
        cx.assume(assume::LOSS_16_BIT_LOOP, format!("{}, compute {compute}", cx.point.model));
        return Some(loss);
    }
    None
}

/// The method's lines and what the rest of the section needs to know about it.
struct MethodLines {
    lines: String,
    lora: bool,
    /// PEFT `modules_to_save`: whole modules trained next to the adapters.
    saved: bool,
}

/// `method full`, or `method lora { ... }` with the rank, targets and saved modules the source
/// states.
fn method(
    cx: &mut Cx<'_>,
    family: Option<Family>,
    distribution: &Distribution,
) -> Option<MethodLines> {
    let point = cx.point;
    let full =
        || MethodLines { lines: "    method        full\n".to_string(), lora: false, saved: false };
    let Some(text) = point.finetune_method.clone() else {
        if point.workload == "training_full" {
            return Some(full());
        }
        cx.gap(Gap::data(data::LORA_SETUP, "finetune_method: none"));
        return None;
    };
    // A config's keys among the settings may give what the method's words leave out.
    let text = with_config_lora(point, text);
    let lower = text.to_lowercase();
    // DoRA (PEFT `use_dora`) and QDoRA: LoRA whose adapted matrices also train a magnitude.
    let dora = lower.contains("dora");
    if !lower.contains("lora") && !dora {
        match frozen_model_method(cx, &text) {
            FrozenModel::Method(lines) => return Some(lines),
            FrozenModel::Incomplete => return None,
            FrozenModel::Other => {}
        }
        // GaLore trains every parameter; its projection is the optimizer's (`galore`).
        // Pre-training trains every parameter as a full fine-tune does.
        if ["full", "galore", "pretrain", "pre-train", "from scratch"]
            .iter()
            .any(|w| lower.contains(w))
        {
            return Some(full());
        }
        cx.unreadable("finetune_method", &text);
        return None;
    }
    // Qwen's "LoRA (emb)": finetune.py sets modules_to_save = ["wte", "lm_head"] for base models.
    let saved = lower.contains("modules_to_save")
        || lower.contains("lora (emb)")
        || lower.contains("trainable wte");
    let rank = rank(&lower);
    let qwen_script = point.framework.to_lowercase().contains("qwen finetune.py");
    let modules = modules(&text).or_else(|| {
        (family == Some(Family::QwenV1) && qwen_script).then(|| {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                "LoRA targets: Qwen finetune.py default c_attn c_proj w1 w2",
            );
            QWEN_FINETUNE_TARGETS.iter().map(ToString::to_string).collect()
        })
    });
    let modules = match (modules, rank, family) {
        (None, Some(_), Some(family)) => Some(default_targets(cx, family)),
        (modules, ..) => modules,
    };
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
    let torchtune = is_torchtune(point);
    let stated_dtype = stated_adapter_dtype(point);
    if stated_dtype.is_some() {
        // Stated: nothing to assume.
    } else if torchtune && !distribution.deepspeed {
        cx.assume(
            assume::SCRIPT_SETTING,
            "LoRA adapters in bf16: torchtune's recipes build the whole model, adapters \
             included, in the config's dtype (bf16)",
        );
    } else if !distribution.deepspeed {
        cx.assume(assume::LORA_DTYPE, format!("{text:?} states no adapter precision"));
    }
    if fused {
        cx.assume(assume::FUSED_QKV_LORA, format!("rank {rank} on {}", modules.join(", ")));
    }
    if qwen_script && !saved && !point.model.to_lowercase().contains("chat") {
        // finetune.py trains wte and lm_head whenever the model path does not name a chat
        // model; the README's table keeps "LoRA" and "LoRA (emb)" apart and labels these rows
        // "LoRA (multinode)", defining LoRA as having "no trainable embedding and output layer".
        cx.assume(
            assume::SOURCE_LABEL,
            format!(
                "{} {text:?}: the README's row is LoRA, which it defines as without trainable \
                 embedding and output layer; counted without saved modules",
                point.model
            ),
        );
    }
    let fused_qkv = fused_qkv_projection(point, &modules)
        && targets.iter().any(|t| ["q", "k", "v"].contains(t));
    let targets = if targets.len() == 7 { "all".to_string() } else { targets.join(" ") };
    let mut lines = format!("    method lora {{\n      rank    {rank}\n      targets {targets}\n");
    if saved {
        lines.push_str("      modules_to_save embeddings head\n");
    }
    if dora {
        lines.push_str("      dora    true\n");
    }
    if let Some(dtype) = stated_dtype {
        let _ = writeln!(lines, "      dtype   {dtype}  # stated");
    } else if torchtune && !distribution.deepspeed {
        lines.push_str("      dtype   bf16  # torchtune: the model's dtype\n");
    }
    if let Some(p) =
        super::lora::dropout(&lower).filter(|p| !p.trim_start_matches(['0', '.']).is_empty())
    {
        let _ = writeln!(lines, "      dropout {p}  # stated");
    } else if qwen_script {
        cx.assume(
            assume::SCRIPT_SETTING,
            "LoRA dropout 0.05: LoraArguments.lora_dropout in Qwen's finetune.py \
             (QwenLM/Qwen 00dceeb), which its finetune scripts do not override",
        );
        lines.push_str("      dropout 0.05  # Qwen finetune.py LoraArguments\n");
    }
    if fused_qkv {
        lines.push_str("      fused_qkv true\n");
    }
    lines.push_str("    }\n");
    Some(MethodLines { lines, lora: true, saved })
}

/// Whether q, k and v are one projection whose input the adapters share: a fused module named
/// in the list (Qwen v1's `c_attn`, `query_key_value`, `qkv_proj`, `Wqkv`), or litgpt, whose
/// `LoRAQKVLinear` adapts its fused `attn` projection for every enabled q, k and v.
fn fused_qkv_projection(point: &crate::data::Point, modules: &[String]) -> bool {
    let framework = point.framework.to_lowercase();
    framework.contains("litgpt")
        || framework.contains("lit-gpt")
        || modules.iter().any(|m| {
            ["c_attn", "query_key_value", "qkv_proj", "wqkv"].contains(&m.to_lowercase().as_str())
        })
}

/// What a method's wording says of the methods that train beside a frozen model.
enum FrozenModel {
    Method(MethodLines),
    /// It names one of them without what it needs (its gap is recorded).
    Incomplete,
    /// It names neither.
    Other,
}

/// Freeze tuning and prefix tuning (P-tuning v2), in the words sources use for them.
fn frozen_model_method(cx: &mut Cx<'_>, text: &str) -> FrozenModel {
    let lower = text.to_lowercase();
    let squashed: String = lower.chars().filter(char::is_ascii_alphanumeric).collect();
    let lines =
        |lines: String| FrozenModel::Method(MethodLines { lines, lora: false, saved: false });
    if lower.contains("freeze") || lower.contains("partial") || squashed.contains("lastlayers") {
        let layers = number_before(&lower, "layer").unwrap_or_else(|| {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                "freeze tuning of the last 2 layers: LLaMA-Factory's freeze_trainable_layers default",
            );
            2
        });
        let mut extra = Vec::new();
        if lower.contains("embed") {
            extra.push("embeddings");
        }
        if lower.contains("lm_head") || lower.contains("head") {
            extra.push("head");
        }
        let mut out = format!("    method freeze {{\n      layers {layers}\n");
        if !extra.is_empty() {
            let _ = writeln!(out, "      extra_modules {}", extra.join(" "));
        }
        out.push_str("    }\n");
        return lines(out);
    }
    let p_tuning_v2 = squashed.contains("ptuningv2");
    let p_tuning = squashed.contains("ptuning") && !p_tuning_v2;
    if p_tuning || lower.contains("prompt tuning") || lower.contains("soft prompt") {
        let Some(tokens) = virtual_tokens(&lower) else {
            cx.gap(Gap::data(data::LORA_SETUP, format!("{text}: the number of virtual tokens")));
            return FrozenModel::Incomplete;
        };
        let mut out = format!("    method prompt {{\n      tokens  {tokens}\n");
        if p_tuning {
            // PEFT's PromptEncoderConfig: an MLP whose width, `encoder_hidden_size`, defaults
            // to the model's hidden size.
            let Some(width) = number_after(&lower, "encoder_hidden_size").or(cx.point.hidden_size)
            else {
                cx.gap(Gap::data(data::LORA_SETUP, format!("{text}: the prompt encoder's width")));
                return FrozenModel::Incomplete;
            };
            let _ = writeln!(out, "      encoder {width}");
        }
        out.push_str("    }\n");
        return lines(out);
    }
    if !(lower.contains("prefix") || p_tuning_v2) {
        return FrozenModel::Other;
    }
    let tokens =
        virtual_tokens(&lower).or_else(|| number_after(&lower, "pre_seq_len")).or_else(|| {
            let chatglm = cx.point.model.to_lowercase().contains("chatglm")
                || cx.point.framework.to_lowercase().contains("chatglm");
            (p_tuning_v2 && chatglm).then(|| {
                cx.assume(
                    assume::SCRIPT_SETTING,
                    "128 prefix tokens: PRE_SEQ_LEN=128 in ChatGLM's ptuning/train.sh",
                );
                128
            })
        });
    let Some(tokens) = tokens else {
        cx.gap(Gap::data(data::LORA_SETUP, format!("{text}: the prefix length")));
        return FrozenModel::Incomplete;
    };
    let mut out = format!("    method prefix {{\n      tokens {tokens}\n");
    if !lower.contains("no projection")
        && let Some(width) = number_after(&lower, "projection")
    {
        let _ = writeln!(out, "      projection {width}");
    }
    out.push_str("    }\n");
    lines(out)
}

/// The number of virtual tokens a prompt-learning wording states (`30 virtual tokens`,
/// `num_virtual_tokens=20`).
fn virtual_tokens(lower: &str) -> Option<u64> {
    number_before(lower, "token").or_else(|| number_after(lower, "num_virtual_tokens"))
}

/// The whole number that ends just before `word` (`last 2 layers`, `128 virtual tokens`).
fn number_before(text: &str, word: &str) -> Option<u64> {
    let at = text.find(word)?;
    let head = text[..at].trim_end();
    let head = head.strip_suffix("virtual").unwrap_or(head).trim_end();
    let digits: String = head
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// The sharding, offload and precision lines of the model states.
fn states(
    cx: &mut Cx<'_>,
    method: &MethodLines,
    weights: Option<&'static str>,
    distribution: &Distribution,
) -> String {
    let mut out = String::new();
    if let Some(sharding) = distribution.sharding {
        let _ = writeln!(out, "    sharding      {sharding}");
    }
    if distribution.deepspeed {
        let stage = distribution.sharding.unwrap_or("zero");
        let compute = cx.point.compute_dtype.clone().unwrap_or_else(|| "not stated".into());
        cx.assume(assume::DEEPSPEED_STATES, format!("{stage}, compute {compute}"));
        if method.lora {
            cx.assume(assume::DEEPSPEED_ADAPTERS, format!("{stage}, compute {compute}"));
        }
    }
    let sixteen_bit = weights.is_some_and(|w| matches!(w, "bf16" | "fp16"));
    let quantized = weights.is_some_and(|w| !matches!(w, "bf16" | "fp16" | "fp32"));
    if quantized && is_torchtune(cx.point) {
        // torchtune quantizes its LoRA layers itself; nothing casts the rest to fp32.
        cx.assume(
            assume::SCRIPT_SETTING,
            "unquantized bf16: torchtune's QLoRA models keep embeddings and norms in the \
             config's dtype (no PEFT k-bit preparation)",
        );
        out.push_str("    unquantized   bf16\n");
    } else if quantized && is_unsloth(cx.point) {
        cx.assume(
            assume::SCRIPT_SETTING,
            "unquantized bf16: Unsloth's own prepare_model_for_kbit_training \
             (unsloth/models/_utils.py) casts only the LoRA parameters to fp32 and leaves the \
             embedding, head and norms in their 16-bit type",
        );
        out.push_str("    unquantized   bf16\n");
    } else if quantized && quantizes_in_its_own_code(cx.point) {
        cx.assume(
            assume::SCRIPT_SETTING,
            "unquantized bf16: litgpt (precision bf16-true) quantizes the linear layers itself \
             (Lightning's BitsandbytesPrecision) and keeps the rest in bf16 (no PEFT k-bit \
             preparation)",
        );
        out.push_str("    unquantized   bf16\n");
    } else if quantized && states_no_upcast(cx.point) {
        // Stated: a preparation of its own that leaves the unquantized parts 16-bit
        // (fms-acceleration's accelerated-peft-bnb plugin).
        out.push_str("    unquantized   bf16  # stated: no fp32 upcast\n");
    }
    if !method.lora && sixteen_bit && !distribution.deepspeed && is_torchtune(cx.point) {
        cx.assume(
            assume::SCRIPT_SETTING,
            "master none, gradients bf16: torchtune's full_finetune recipes train the model in \
             the config's dtype (bf16) with no fp32 copy, so gradients and moments are bf16",
        );
        out.push_str("    master        none  # torchtune: pure bf16\n");
        out.push_str("    gradients     bf16\n");
    } else if let Some(kind) = weights.filter(|_| {
        !method.lora
            && sixteen_bit
            && !distribution.deepspeed
            && distribution.sharding.is_none()
            && trains_loaded_type(cx.point)
    }) {
        // A model loaded in a 16-bit type and trained by the Trainer (or by plain PyTorch in
        // "pure" 16-bit) has no fp32 copy: autocast computes in the weights' own type, their
        // gradients take it, and torch AdamW's moments too (`zeros_like`).
        cx.assume(
            assume::RUNTIME_DEFAULT,
            format!(
                "master none, gradients {kind}: a {kind} model trained without DeepSpeed or FSDP \
                 keeps no fp32 copy (the Trainer does not upcast a model it is given)"
            ),
        );
        let _ = writeln!(out, "    master        none  # pure {kind}: the model's own type");
        let _ = writeln!(out, "    gradients     {kind}");
    }
    if method.saved {
        if distribution.deepspeed {
            // DeepSpeed's optimizer keeps an fp32 master copy of every trained parameter.
            out.push_str("    master        fp32  # DeepSpeed's fp32 copy of the saved modules\n");
        } else if weights.is_some_and(|w| matches!(w, "bf16" | "fp16")) {
            // Pure 16-bit training: the Trainer keeps no master copy, and torch AdamW's moments
            // take the saved modules' own 16-bit type (`zeros_like`).
            let point = cx.point;
            let detail = if point.framework.to_lowercase().contains("qwen finetune.py") {
                "master none: Qwen's finetune_lora_single_gpu.sh runs finetune.py with --bf16 and \
                 no --deepspeed, which loads the model in bf16 and trains the saved modules (wte, \
                 lm_head) in bf16 with torch AdamW, moments in bf16"
            } else {
                "master none: 16-bit weights trained without DeepSpeed keep no master copy"
            };
            cx.assume(assume::SCRIPT_SETTING, detail);
            out.push_str("    master        none  # pure 16-bit training, no master copy\n");
        }
    }
    if let Some(sharding @ ("zero1" | "zero2")) = distribution.sharding
        && cx.point.framework.to_lowercase().contains("qwen finetune.py")
    {
        cx.assume(
            assume::SCRIPT_SETTING,
            format!(
                "{sharding}: reduce_bucket_size 2e8 in Qwen's finetune/ds_config_zero2.json \
                 (QwenLM/Qwen af22d5e), which finetune_lora_ds.sh and \
                 finetune_qlora_single_gpu.sh pass to --deepspeed"
            ),
        );
        out.push_str("    bucket_elements 200_000_000  # Qwen ds_config_zero2.json\n");
    }
    if distribution.megatron_optimizer {
        // Megatron reduces gradients from its contiguous fp32 grad buffer (the gradients
        // themselves): no separate buckets beside them.
        out.push_str(
            "    bucket_elements 1  # Megatron's distributed optimizer: no reduce buckets\n",
        );
    }
    let offload = match &distribution.offload {
        Offload::None => None,
        Offload::Optimizer(text) => Some(("optimizer", text)),
        Offload::Parameters(text) => Some(("parameters", text)),
    };
    if let Some((word, _)) = offload {
        let _ = writeln!(out, "    offload       {word}");
    }
    out
}

/// The adapters' precision a point states: "LoRA weights in bf16", "adapters bf16", "adapter
/// dtype fp32".
fn stated_adapter_dtype(point: &crate::data::Point) -> Option<&'static str> {
    let text = format!(
        "{} {}",
        point.finetune_method.as_deref().unwrap_or_default(),
        point.other_settings.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    (0..words.len()).find_map(|at| {
        let w = &words[at..];
        let next = w.get(1).copied().unwrap_or_default();
        let subject = matches!(w[0], "adapters" | "adapter" | "lora")
            && (matches!(next, "weights" | "dtype" | "in" | "are") || w[0] != "lora");
        if !subject {
            return None;
        }
        w[1..].iter().take(3).find_map(|word| match *word {
            "bf16" | "bfloat16" => Some("bf16"),
            "fp16" | "float16" => Some("fp16"),
            "fp32" | "float32" => Some("fp32"),
            _ => None,
        })
    })
}

/// torchtitan's "selective" checkpointing: its model configs' `selective_ac_option = "op"` (the
/// op-level policy) unless a layer frequency is stated ("every 2nd layer", `selective_ac_option
/// 2`), which checkpoints whole layers and is not modelled. Other frameworks' "selective" is
/// attention-only recomputation (Megatron, torchtune).
fn torchtitan_selective(cx: &mut Cx<'_>, checkpointing: Checkpointing) -> Option<Checkpointing> {
    let point = cx.point;
    if checkpointing != Checkpointing::Selective
        || !point.framework.to_lowercase().contains("torchtitan")
    {
        return Some(checkpointing);
    }
    let text = point.all_text();
    let layer_frequency = point.setting_count(&["selective_ac_option"]).is_some()
        || ["every 2", "every other layer", "every second layer", "layer frequency"]
            .iter()
            .any(|phrase| text.contains(phrase));
    if layer_frequency {
        cx.unreadable(
            "activation_checkpointing",
            "torchtitan's layer-frequency selective checkpointing",
        );
        return None;
    }
    cx.assume(
        assume::RUNTIME_DEFAULT,
        "torchtitan's selective checkpointing: its train configs' selective_ac_option \"op\" \
         (every other matrix product's output and the attention output saved)",
    );
    Some(Checkpointing::SelectiveOp)
}

/// The memory levers a point's settings name (torchtune's recipe flags and their wordings):
/// `optimizer_in_bwd`, `CEWithChunkedOutputLoss`, activation offloading and `torch.compile`;
/// and those a framework always pulls: Unsloth's fused loss, Liger's fused linear loss.
/// `offloaded`: the checkpointed layer inputs go to the host (Unsloth's checkpointing).
fn levers(cx: &mut Cx<'_>, offloaded: bool) -> String {
    let point = cx.point;
    let text = format!(
        "{} {}",
        point.other_settings.as_deref().unwrap_or_default(),
        point.optimizer.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| super::conditions::named_on(&text, w));
    let mut out = String::new();
    let accumulates = point.grad_accum.is_some_and(|n| n > 1);
    if says(&["optimizer_in_bwd", "optimizer in backward", "optimizer step into backward"])
        && !accumulates
    {
        out.push_str("    step_in_backward true  # optimizer_in_bwd\n");
    }
    if says(&["cewithchunkedoutputloss", "chunked cross", "chunked ce", "chunked output loss"]) {
        cx.assume(
            assume::RUNTIME_DEFAULT,
            "chunked cross-entropy in 8 chunks: torchtune CEWithChunkedOutputLoss \
             num_output_chunks = 8",
        );
        out.push_str("    loss_chunks   8  # CEWithChunkedOutputLoss\n");
    }
    if offloaded {
        out.push_str("    offload_activations true  # Unsloth's checkpointing\n");
    } else if says(&["activation offloading", "activation_offloading", "offload activations"]) {
        out.push_str("    offload_activations true\n");
    }
    if let Some(fused) = fused_loss(cx) {
        let _ = writeln!(out, "    fused_loss    {fused}");
    }
    if says(&["torch.compile", "compile=true", "compile: true", "compile enabled", "+ compile"]) {
        cx.assume(assume::COMPILED_LAYERS, "compile named in the settings");
        out.push_str("    compile       true\n");
    }
    out
}

/// How a framework fuses the cross-entropy: Unsloth patches every model it loads with its own
/// loss, over the logits until 2024.11 and fused with the head from then on ("Logits are empty
/// from 2024.11 onwards", unsloth_zoo); Liger Kernel (`use_liger_kernel`, `liger`) fuses the
/// head and the loss. An Unsloth release the point does not date is taken as a current one.
fn fused_loss(cx: &mut Cx<'_>) -> Option<&'static str> {
    let point = cx.point;
    let text = format!(
        "{} {} {}",
        point.framework,
        point.framework_version.as_deref().unwrap_or_default(),
        point.other_settings.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    if text.contains("liger") {
        return Some("linear");
    }
    if !text.contains("unsloth") {
        return None;
    }
    let dated = || super::conditions::dated_from(point, 2024, 11);
    match unsloth_release(&text).map(|release| release >= (2024, 11)).or_else(dated) {
        Some(false) => Some("logits"),
        Some(true) => Some("linear"),
        None => {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                "Unsloth release not stated: a current one, whose loss is fused with the head \
                 (unsloth_zoo, from 2024.11)",
            );
            Some("linear")
        }
    }
}

/// Whether the point trains with Unsloth.
/// Tools that quantize a model's linear layers in their own code and train the rest in bf16,
/// with no PEFT `prepare_model_for_kbit_training` (which casts it to fp32): litgpt (lit-gpt)
/// under `bf16-true`.
fn quantizes_in_its_own_code(point: &crate::data::Point) -> bool {
    let framework = point.framework.to_lowercase();
    ["litgpt", "lit-gpt"].iter().any(|w| framework.contains(w))
}

/// Whether the settings state that nothing cast the unquantized parameters of a quantized base
/// to fp32 ("no fp32 upcast", "no k-bit preparation", "without prepare_model_for_kbit_training").
fn states_no_upcast(point: &crate::data::Point) -> bool {
    let text = format!(
        "{} {}",
        point.other_settings.as_deref().unwrap_or_default(),
        point.quantization.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    ["no fp32 upcast", "no k-bit preparation", "without prepare_model_for_kbit_training"]
        .iter()
        .any(|w| text.contains(w))
}

fn is_unsloth(point: &crate::data::Point) -> bool {
    point.framework.to_lowercase().contains("unsloth")
}

/// The year and month of an Unsloth release named in `text` (`unsloth 2024.8`,
/// `unsloth==2025.3.19`): Unsloth numbers its releases by date.
fn unsloth_release(text: &str) -> Option<(u32, u32)> {
    text.match_indices("unsloth").find_map(|(at, name)| {
        let version = text[at + name.len()..].trim_start_matches([' ', '=', 'v', ':']);
        let mut parts = version.split('.');
        let year: u32 = parts.next()?.parse().ok()?;
        let month: String = parts.next()?.chars().take_while(char::is_ascii_digit).collect();
        let month: u32 = month.parse().ok()?;
        ((2023..2100).contains(&year) && (1..=12).contains(&month)).then_some((year, month))
    })
}

/// Whether the point trains with one of torchtune's recipes.
fn is_torchtune(point: &crate::data::Point) -> bool {
    point.framework.to_lowercase().contains("torchtune")
}

/// Mixed precision with fp32 weights (PyTorch AMP): the 16-bit type autocast computes in, which
/// the language writes as `activations` beside `weights fp32`. Beside quantized weights, the
/// stated compute type (bitsandbytes' `bnb_4bit_compute_dtype`, torchtune's `dtype`) when it is
/// bf16: the language's default there is fp16, the same bytes but another type, which decides
/// whether adapters of the model's type need a copy of their input.
fn mixed_precision(cx: &mut Cx<'_>, weights: &str) -> Option<&'static str> {
    let compute = cx.point.compute_dtype.clone().unwrap_or_default().to_lowercase();
    let quantized = !matches!(weights, "fp32" | "bf16" | "fp16");
    if quantized && compute.trim() == "bf16" {
        return Some("bf16");
    }
    // fp32 weights computing in a 16-bit type run under autocast (AMP), whether or not the
    // point says "mixed": the only other way, casting the model, changes the weights' type.
    let sixteen =
        ["fp16", "bf16", "float16", "bfloat16", "half"].iter().any(|w| compute.contains(w));
    if weights != "fp32" || !(compute.contains("mixed") || sixteen) {
        return None;
    }
    if compute.contains("bf16") || compute.contains("bfloat16") {
        Some("bf16")
    } else if compute.contains("fp16") || compute.contains("float16") || compute.contains("half") {
        Some("fp16")
    } else {
        cx.unreadable("compute_dtype", &compute);
        None
    }
}

/// The optimizer word, or the gap that stops it.
pub(super) fn optimizer(cx: &mut Cx<'_>) -> Option<&'static str> {
    // "not stated (the benchmark notebooks use adamw_8bit)" is read by the optimizer it names;
    // one that names none ("not stated (TrainingArguments default)") is not stated, and the
    // framework's own default decides.
    let names_one = |lower: &str| {
        ["adam", "sgd", "adafactor", "lion", "lamb", "8bit", "8-bit", "galore", "schedule", "muon"]
            .iter()
            .chain(&["came", "sophia", "adan", "prodigy", "rmsprop", "adagrad"])
            .any(|word| lower.contains(word))
    };
    let stated = cx.point.optimizer.clone().filter(|text| {
        let lower = text.trim().to_lowercase();
        let unstated =
            super::conditions::says_unstated(&lower) || lower == "unknown" || lower.is_empty();
        !unstated || names_one(&lower)
    });
    let Some(text) = stated else {
        if hf_trainer(cx.point) {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                "optimizer not stated: the Trainer's default AdamW (optim adamw_torch, fp32 states)",
            );
            return Some("adamw");
        }
        cx.gap(Gap::data(data::OPTIMIZER, "optimizer: none"));
        return None;
    };
    let lower = without_negated(&text.to_lowercase());
    // bitsandbytes' paged optimizers keep their states in unified memory, outside the allocator.
    let paged = lower.contains("paged");
    let eight_bit = lower.contains("8bit") || lower.contains("8-bit");
    let schedule_free =
        ["schedule-free", "schedule_free", "schedulefree"].iter().any(|word| lower.contains(word));
    let lamb = lower.contains("lamb") && !lower.contains("lambda");
    // Adam's relatives that keep other states: BAdam steps one block of layers at a time,
    // Adam-mini keeps one second moment per block.
    let adam_relative =
        ["badam", "adam-mini", "adam_mini", "adammini"].iter().any(|word| lower.contains(word));
    // bitsandbytes' one-state 8-bit optimizers (Lion8bit, RMSprop8bit, Adagrad8bit, SGD8bit).
    let one_state = [
        ("lion", "lion-8bit"),
        ("rmsprop", "rmsprop-8bit"),
        ("adagrad", "adagrad-8bit"),
        ("sgd", "sgd-momentum-8bit"),
    ]
    .into_iter()
    .find(|(word, _)| lower.contains(word))
    .map(|(_, name)| name);
    if eight_bit && !(lower.contains("adam") || lamb) {
        match (one_state, paged) {
            (Some(name), false) => Some(name),
            (Some("lion-8bit"), true) => {
                Some("lion-8bit\n    paged_optimizer true  # bitsandbytes paged: unified memory")
            }
            // bitsandbytes pages only its AdamW, Adam, Lion and their 8-bit forms.
            _ => {
                cx.unreadable("optimizer", &text);
                None
            }
        }
    } else if adam_relative {
        cx.unreadable("optimizer", &text);
        None
    } else if eight_bit {
        // bitsandbytes Adam8bit, AdamW8bit and LAMB8bit keep the same two 8-bit states.
        if lamb {
            cx.assume(assume::EQUIVALENT_OPTIMIZER, text.clone());
        }
        Some(if paged {
            "adamw-8bit\n    paged_optimizer true  # bitsandbytes paged: unified memory"
        } else {
            "adamw-8bit"
        })
    } else if schedule_free {
        Some("adamw-schedule-free")
    } else if lower.contains("adam") && paged {
        Some("adamw\n    paged_optimizer true  # bitsandbytes paged: unified memory")
    } else if lower.contains("adam") && lower.contains("fused") {
        // A fused kernel steps each tensor in place: no whole-model temporaries.
        Some("adamw\n    foreach       false  # a fused kernel (adamw_torch_fused)")
    } else if lower.contains("lion") {
        Some(if paged {
            "lion\n    paged_optimizer true  # bitsandbytes paged: unified memory"
        } else {
            "lion"
        })
    } else if lamb {
        Some("lamb")
    } else if lower.contains("sophia") {
        Some("sophia")
    } else if lower.contains("adan") {
        Some("adan")
    } else if lower.contains("prodigy") {
        Some("prodigy")
    } else if lower.contains("rmsprop") {
        Some("rmsprop")
    } else if lower.contains("adagrad") {
        Some("adagrad")
    } else if lower.contains("adafactor") && lower.contains("galore") {
        // GaLore's Adafactor is not modelled (the core keeps GaLore to AdamW's moments).
        cx.unreadable("optimizer", &text);
        None
    } else if lower.contains("adafactor") {
        Some("adafactor")
    } else if lower.contains("adam") && cx.legacy_trainer_adamw() {
        // transformers' own AdamW steps one tensor at a time: no multi-tensor temporaries.
        Some(
            "adamw\n    foreach       false  # transformers' legacy AdamW (adamw_hf), a per-tensor loop",
        )
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

/// GaLore's lines when the method or the optimizer names it (transformers' `galore_adamw`,
/// `galore_adamw_8bit`, their `_layerwise` forms): the rank stated, else the Trainer's default
/// (`optim_args` rank 128); a layerwise optimizer steps each parameter in the backward pass.
fn galore(cx: &mut Cx<'_>) -> String {
    let point = cx.point;
    let text = format!(
        "{} {} {}",
        point.optimizer.as_deref().unwrap_or_default(),
        point.finetune_method.as_deref().unwrap_or_default(),
        point.other_settings.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    if !text.contains("galore") {
        return String::new();
    }
    let rank = rank(&text).unwrap_or_else(|| {
        cx.assume(
            assume::RUNTIME_DEFAULT,
            "GaLore rank not stated: transformers' default optim_args rank 128",
        );
        128
    });
    let mut lines = format!("    galore_rank   {rank}\n");
    if text.contains("layerwise") || text.contains("layer-wise") || text.contains("per-layer") {
        lines.push_str("    step_in_backward true  # GaLore's layerwise optimizer\n");
    }
    lines
}

/// Whether the point trains with transformers' `Trainer` (or TRL's, which inherits its
/// `TrainingArguments`), whose defaults stand for settings the source leaves out.
/// Whether the tool trains the model in the type it was loaded in: the Trainer and the tools
/// built on it, or a source that says its training is pure 16-bit.
fn trains_loaded_type(point: &crate::data::Point) -> bool {
    let text = format!(
        "{} {} {}",
        point.all_text(),
        point.compute_dtype.as_deref().unwrap_or_default().to_lowercase(),
        point.weight_precision.as_deref().unwrap_or_default().to_lowercase()
    );
    let pure = ["pure bf16", "pure fp16", "pure 16", "bf16-true", "true bf16", "no master"]
        .iter()
        .any(|w| text.contains(w));
    let framework = point.framework.to_lowercase();
    let trainer = hf_trainer(point)
        || ["axolotl", "llama-factory", "llamafactory", "unsloth", "swift", "galore"]
            .iter()
            .any(|w| framework.contains(w));
    pure || trainer
}

/// `text` without the words a `without`, `no` or `not` denies: "adamw without --use_8bit_bnb"
/// names AdamW, not its 8-bit form.
pub(super) fn without_negated(text: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut denied = false;
    for word in text.split_whitespace() {
        if denied {
            denied = false;
            continue;
        }
        denied = matches!(word, "without" | "no" | "not");
        if !denied {
            kept.push(word);
        }
    }
    kept.join(" ")
}

fn hf_trainer(point: &crate::data::Point) -> bool {
    let framework = point.framework.to_lowercase();
    ["trainer", "trl", "sfttrainer"].iter().any(|w| framework.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Point;

    #[test]
    fn settings_turned_off_in_their_own_words_are_off() {
        use super::super::conditions::named_on;
        assert!(named_on("torch.compile enabled", "torch.compile"));
        assert!(named_on("optimizer_in_bwd true, compile", "optimizer_in_bwd"));
        for off in [
            "no torch.compile",
            "without torch.compile",
            "torch.compile: false",
            "torch.compile off",
        ] {
            assert!(!named_on(off, "torch.compile"), "{off}");
        }
        assert!(!named_on("optimizer_in_bwd=false", "optimizer_in_bwd"));
        assert!(!named_on("optimizer_in_bwd 0", "optimizer_in_bwd"));
        assert!(named_on("optimizer_in_bwd 1", "optimizer_in_bwd"));
        assert!(!named_on("activation offloading: off", "activation offloading"));
        assert!(!named_on("neither torch.compile nor float8", "torch.compile"));
        assert!(!named_on("neither float8 nor torch.compile", "torch.compile"));
        // "no" only as a word: "piano torch.compile" is on.
        assert!(named_on("piano torch.compile", "torch.compile"));
    }

    /// A Llama 3 8B fine-tuning point with `fields` (a JSON object) over the defaults.
    fn point(fields: &str) -> Point {
        let defaults = serde_json::json!({
            "id": "T-001", "source_id": "T", "workload": "training_lora",
            "model": "meta-llama/Meta-Llama-3-8B", "framework": "transformers Trainer + PEFT",
            "weight_precision": "bf16", "compute_dtype": "bf16", "optimizer": "adamw_torch",
            "finetune_method": "LoRA r=16 on q_proj,v_proj", "batch_size": 1, "seq_len": 512,
            "activation_checkpointing": true, "num_gpus": 1, "gpu_type": "A100 80GB",
            "measurement_method": "torch.cuda.max_memory_allocated", "measured_kind": "peak",
            "value": 20, "unit": "GB", "quality": "B"
        });
        super::super::test_point(defaults, fields)
    }

    fn workload(fields: &str) -> String {
        let expressed = super::super::express(&point(fields)).expect("expressible");
        expressed.source.split("workload point").nth(1).expect("a workload").to_string()
    }

    /// A stated LoRA dropout is read; litgpt's q and v share its fused projection's input; a
    /// 4-bit base names its bitsandbytes release, stated or implied by the date.
    #[test]
    fn lora_dropout_fusion_and_the_bitsandbytes_release() {
        let litgpt = workload(
            r#"{"framework": "litgpt finetune lora", "framework_version": "bitsandbytes 0.41.1",
                "workload": "training_qlora", "weight_precision": "nf4",
                "quantization": "bitsandbytes NF4", "activation_checkpointing": false,
                "finetune_method": "LoRA r=8 alpha=16 dropout 0.05 on q_proj,v_proj"}"#,
        );
        assert!(litgpt.contains("dropout 0.05  # stated"), "{litgpt}");
        assert!(litgpt.contains("fused_qkv true"), "{litgpt}");
        assert!(litgpt.contains("bitsandbytes  \"0.41.1\""), "{litgpt}");
        // PEFT's separate q_proj and v_proj; a date before July 2024 implies an older release;
        // `lora_dropout=0.0` is no dropout.
        let peft = workload(
            r#"{"framework_version": "transformers 4.38 (March 2024)", "weight_precision": "nf4",
                "quantization": "bitsandbytes NF4", "workload": "training_qlora",
                "finetune_method": "LoRA r=8, lora_dropout=0.0 on q_proj,v_proj"}"#,
        );
        assert!(!peft.contains("fused_qkv") && !peft.contains("dropout"), "{peft}");
        assert!(peft.contains("bitsandbytes  \"0.43.1\""), "{peft}");
        // A later date, or a 16-bit base, names none.
        let later = workload(
            r#"{"framework_version": "transformers 4.46 (October 2024)", "weight_precision": "nf4",
                "quantization": "bitsandbytes NF4", "workload": "training_qlora"}"#,
        );
        assert!(!later.contains("bitsandbytes"), "{later}");
        // PEFT's k-bit preparation casts the unquantized parts to fp32 unless the source says
        // its own preparation does not.
        assert!(!later.contains("unquantized"), "{later}");
        let own = workload(
            r#"{"weight_precision": "nf4", "quantization": "bitsandbytes NF4",
                "workload": "training_qlora",
                "other_settings": "plugin's own preparation (no fp32 upcast of non-quantized params)"}"#,
        );
        assert!(own.contains("unquantized   bf16"), "{own}");
        assert!(!workload(r#"{"framework_version": "2023-10"}"#).contains("bitsandbytes"));
    }

    #[test]
    fn sequence_parallelism_in_its_wordings() {
        let named = |settings: &str| {
            sequence_parallel(&crate::data::Point {
                other_settings: Some(settings.to_owned()),
                ..crate::data::Point::default()
            })
        };
        assert!(named("TP 8, --sequence-parallel"));
        assert!(named("tensor parallel 4 with sequence parallelism"));
        assert!(!named("sequence_parallel=False"));
        assert!(!named("no sequence parallelism"));
        assert!(!named("tensor parallel 4"));
    }

    /// A training config's keys among the settings give what the fields leave out; its length
    /// only where every sample has it.
    #[test]
    fn a_configs_keys_among_the_settings() {
        let config = |settings: &str| {
            let fields = format!(
                r#"{{"finetune_method": "qlora", "batch_size": null, "seq_len": null,
                    "activation_checkpointing": null, "other_settings": "{settings}"}}"#
            );
            super::super::express(&point(&fields))
        };
        let axolotl = config(
            "lora_r: 32; lora_target_linear: true; sequence_len: 4096; sample_packing: true; \
             micro_batch_size: 2; gradient_checkpointing: true",
        )
        .expect("expressible")
        .source;
        for expected in ["rank    32", "targets all", "micro_batch   2", "sequence      4096"] {
            assert!(axolotl.contains(expected), "{expected}: {axolotl}");
        }
        // Unpacked, the configured length is a cap: the samples' own lengths are not stated.
        let unpacked = config(
            "lora_r: 32; lora_target_linear: true; sequence_len: 4096; sample_packing: false; \
             micro_batch_size: 2; gradient_checkpointing: true",
        )
        .expect_err("the sequence is not stated");
        assert_eq!(unpacked[0].label, crate::gaps::data::SEQUENCE);
    }

    #[test]
    fn setups_the_language_does_not_model_are_feature_gaps() {
        let gap = |fields: &str| match super::super::express(&point(fields)) {
            Ok(_) => panic!("expressed: {fields}"),
            Err(gaps) => gaps[0].label.to_string(),
        };
        assert_eq!(
            gap(r#"{"other_settings": "fp8 training with Transformer Engine"}"#),
            crate::gaps::feature::FP8_TRAINING
        );
        for setting in [
            "model layers swapped for te.Linear, fp8 recipe DelayedScaling",
            "accelerate launch --mixed_precision fp8",
            "torchao convert_to_float8_training on the linear layers",
        ] {
            let fields = format!(r#"{{"other_settings": "{setting}"}}"#);
            assert_eq!(gap(&fields), crate::gaps::feature::FP8_TRAINING, "{setting}");
        }
        // "te." ending a word is not Transformer Engine's module: an fp8 KV cache noted beside
        // a learning rate trains as usual.
        let unrelated = workload(
            r#"{"other_settings": "kv cache fp8 in eval only; constant learning rate. warmup 10"}"#,
        );
        assert!(unrelated.contains("training {"), "{unrelated}");
        // One model's layers over two GPUs by accelerate's device_map: a sequential pipeline.
        let naive = workload(
            r#"{"num_gpus": 2, "parallelism": "naive model parallel: device_map='auto' splits the layers over 2 GPUs"}"#,
        );
        assert!(naive.contains("pipeline_schedule sequential"), "{naive}");
        assert_eq!(
            gap(r#"{"num_gpus": 8, "parallelism": "FSDP 2, context parallel 4"}"#),
            crate::gaps::feature::CONTEXT_PARALLEL
        );
        assert_eq!(
            gap(r#"{"optimizer": "BAdam (block coordinate descent)"}"#),
            crate::gaps::data::UNREADABLE
        );
        // An offload named with the parallelism.
        let fsdp = workload(
            r#"{"workload": "training_full", "finetune_method": "full", "num_gpus": 4,
                "parallelism": "FSDP FULL_SHARD with cpu_offload"}"#,
        );
        assert!(fsdp.contains("offload       parameters"), "{fsdp}");
        // DeepSpeed's stage in words, its config's offload keys and FSDP among the settings.
        let full = |extra: &str| {
            workload(&format!(
                r#"{{"workload": "training_full", "finetune_method": "full", "num_gpus": 4, {extra}}}"#
            ))
        };
        let stage2 = full(r#""parallelism": "DeepSpeed ZeRO stage 2""#);
        assert!(stage2.contains("sharding      zero2"), "{stage2}");
        let offloaded = full(
            r#""other_settings": "zero3_offload.json (offload_optimizer cpu, offload_param cpu)""#,
        );
        assert!(offloaded.contains("sharding      zero3"), "{offloaded}");
        assert!(offloaded.contains("offload       parameters"), "{offloaded}");
        let fsdp = full(r#""other_settings": "FSDP: full_shard auto_wrap""#);
        assert!(fsdp.contains("sharding      fsdp-full"), "{fsdp}");
        // FSDP's strategies by name.
        let no_shard = full(r#""parallelism": "FSDP with ShardingStrategy.NO_SHARD over 4 GPUs""#);
        assert!(!no_shard.contains("sharding"), "{no_shard}");
        let grad_op = full(r#""parallelism": "FSDP SHARD_GRAD_OP""#);
        assert!(grad_op.contains("sharding      zero2"), "{grad_op}");
        // Offloads stated as off, in the offload field, the parallelism or a config's keys.
        for off in [
            r#""zero_stage": 3, "offload": "none (offload_optimizer_device: none, offload_param_device: none)""#,
            r#""parallelism": "FSDP FULL_SHARD", "offload": "none (fsdp_offload_params disabled)""#,
            r#""parallelism": "FSDP FULL_SHARD, no cpu_offload""#,
            r#""zero_stage": 3, "other_settings": "offload_optimizer_device: none, offload_param_device: none""#,
        ] {
            let states = full(off);
            assert!(!states.contains("offload       "), "{off}: {states}");
        }
        let optimizer_only = full(
            r#""zero_stage": 2, "other_settings": "offload_optimizer_device: cpu, offload_param_device: none""#,
        );
        assert!(optimizer_only.contains("offload       optimizer"), "{optimizer_only}");
    }

    #[test]
    fn freeze_and_prefix_tuning_read_their_sizes() {
        let freeze = workload(
            r#"{"workload": "training_full", "finetune_method": "freeze (last 4 layers + lm_head)"}"#,
        );
        assert!(
            freeze.contains("method freeze {\n      layers 4\n      extra_modules head"),
            "{freeze}"
        );
        let default = workload(r#"{"workload": "training_full", "finetune_method": "freeze"}"#);
        assert!(default.contains("layers 2\n"), "{default}");
        let prefix = workload(
            r#"{"workload": "training_full", "finetune_method": "prefix tuning, 30 virtual tokens"}"#,
        );
        assert!(prefix.contains("method prefix {\n      tokens 30\n"), "{prefix}");
        let glm = workload(
            r#"{"workload": "training_full", "finetune_method": "P-Tuning v2 (pre_seq_len=64, prefix_projection 4096)"}"#,
        );
        assert!(glm.contains("tokens 64\n      projection 4096"), "{glm}");
        let prompt = workload(
            r#"{"workload": "training_full", "finetune_method": "prompt tuning (num_virtual_tokens=8)"}"#,
        );
        assert!(prompt.contains("method prompt {\n      tokens  8\n    }"), "{prompt}");
        let p_tuning = workload(
            r#"{"workload": "training_full", "finetune_method": "P-tuning, 20 virtual tokens",
                "hidden_size": 4096}"#,
        );
        assert!(p_tuning.contains("tokens  20\n      encoder 4096"), "{p_tuning}");
        // Without its length a prefix is not expressed.
        let unstated = super::super::express(&point(
            r#"{"workload": "training_full", "finetune_method": "prefix tuning"}"#,
        ));
        assert!(unstated.is_err());
    }

    #[test]
    fn preference_objectives_in_their_wordings() {
        let dpo = workload(
            r#"{"framework": "TRL DPOTrainer + PEFT", "finetune_method": "DPO, LoRA r=16 on q_proj,v_proj"}"#,
        );
        assert!(dpo.contains("objective     dpo\n"), "{dpo}");
        assert!(!dpo.contains("reference"), "TRL's default reference is the core's: {dpo}");
        let precomputed = workload(
            r#"{"framework": "trl", "finetune_method": "LoRA r=8 on q_proj,v_proj",
                "other_settings": "DPOTrainer, precompute_ref_log_probs=True"}"#,
        );
        assert!(precomputed.contains("reference     precomputed"), "{precomputed}");
        let orpo = workload(r#"{"framework": "TRL ORPOTrainer"}"#);
        assert!(orpo.contains("objective     orpo\n"), "{orpo}");
        // Supervised fine-tuning says nothing, and neither does a word that merely contains
        // an objective's letters.
        let sft = workload(r#"{"other_settings": "lora_dropout 0.05, adpositions"}"#);
        assert!(!sft.contains("objective"), "{sft}");
        // ms-swift runs DPO through its `rlhf` command, and lists it beside `sft`.
        let swift = workload(
            r#"{"framework": "ms-swift (swift rlhf)", "finetune_method": "DPO + LoRA rank 8",
                "other_settings": "swift rlhf --rlhf_type dpo --train_type lora"}"#,
        );
        assert!(
            swift.contains(
                "objective     dpo
"
            ),
            "{swift}"
        );
        let swift_sft = workload(
            r#"{"framework": "ms-swift (swift sft / swift rlhf)", "finetune_method": "LoRA rank 8"}"#,
        );
        assert!(!swift_sft.contains("objective"), "{swift_sft}");
        // Online RL and KTO are gaps, not silently supervised runs.
        for framework in ["TRL GRPOTrainer", "OpenRLHF PPO", "TRL KTOTrainer"] {
            let fields = format!(r#"{{"framework": "{framework}"}}"#);
            let gaps = super::super::express(&point(&fields)).expect_err(framework);
            assert!(gaps.iter().any(|g| g.kind == crate::gaps::GapKind::Feature), "{gaps:?}");
        }
    }

    #[test]
    fn an_optimizer_not_stated_is_the_one_its_note_names_or_the_default() {
        let guessed = workload(r#"{"optimizer": "not stated (TrainingArguments default)"}"#);
        assert!(guessed.contains("optimizer     adamw\n"), "{guessed}");
        let denied =
            workload(r#"{"optimizer": "AdamW (--optimizer adamw without --use_8bit_bnb)"}"#);
        assert!(denied.contains("optimizer     adamw\n"), "{denied}");
        let noted = workload(r#"{"optimizer": "not stated (the notebooks use adamw_8bit)"}"#);
        assert!(noted.contains("optimizer     adamw-8bit"), "{noted}");
        let elsewhere = super::super::express(&point(
            r#"{"framework": "torchtitan", "optimizer": "not stated (see the config)"}"#,
        ));
        assert!(elsewhere.is_err(), "outside the Trainer an unstated optimizer is a gap");
    }

    #[test]
    fn a_stated_adapter_precision_is_the_adapters_dtype() {
        for method in [
            "LoRA r=8 on q_proj,v_proj; LoRA weights in bf16",
            "LoRA r=8 on q_proj,v_proj, adapters bf16",
        ] {
            let fields = format!(r#"{{"finetune_method": "{method}"}}"#);
            let stated = workload(&fields);
            assert!(stated.contains("dtype   bf16  # stated"), "{method}: {stated}");
        }
        let unstated = workload(r#"{"finetune_method": "LoRA r=16 on q_proj,v_proj"}"#);
        assert!(!unstated.contains("dtype"), "{unstated}");
    }

    #[test]
    fn galore_projects_full_training_at_its_rank() {
        let galore = workload(
            r#"{"workload": "training_full", "finetune_method": "full fine-tune",
                "optimizer": "galore_adamw_8bit_layerwise (rank=64)"}"#,
        );
        assert!(galore.contains("method        full") && galore.contains("galore_rank   64"));
        assert!(
            galore.contains("optimizer     adamw-8bit") && galore.contains("step_in_backward true")
        );
        let method = workload(
            r#"{"workload": "training_full", "finetune_method": "GaLore", "optimizer": "adamw_torch"}"#,
        );
        assert!(method.contains("galore_rank   128") && !method.contains("step_in_backward"));
    }

    #[test]
    fn dora_and_qdora_are_lora_with_magnitudes() {
        let dora = workload(r#"{"finetune_method": "DoRA r=16 on q_proj,v_proj"}"#);
        assert!(dora.contains("method lora") && dora.contains("dora    true"), "{dora}");
        let qdora = workload(
            r#"{"finetune_method": "QDoRA r=8 on q_proj,v_proj", "weight_precision": "nf4",
                "quantization": "bitsandbytes NF4", "workload": "training_qlora"}"#,
        );
        assert!(qdora.contains("rank    8") && qdora.contains("dora    true"), "{qdora}");
        let lora = workload("{}");
        assert!(!lora.contains("dora"), "{lora}");
    }

    #[test]
    fn unsloth_offloads_its_checkpoints_and_fuses_its_loss_by_release() {
        let unsloth = |version: &str, checkpointing: &str| {
            workload(&format!(
                r#"{{"framework": "Unsloth + TRL SFTTrainer", "framework_version": "{version}",
                    "activation_checkpointing": "{checkpointing}"}}"#
            ))
        };
        let old = unsloth("unsloth 2024.8, PyTorch 2.3", "unsloth");
        assert!(old.contains("checkpointing full"), "{old}");
        assert!(old.contains("offload_activations true"), "{old}");
        assert!(old.contains("fused_loss    logits"), "{old}");
        // A quantized base: Unsloth's k-bit preparation leaves the unquantized parts 16-bit.
        let quantized = workload(
            r#"{"framework": "Unsloth", "weight_precision": "nf4", "quantization": "bitsandbytes nf4",
                "workload": "training_qlora"}"#,
        );
        assert!(quantized.contains("unquantized   bf16"), "{quantized}");
        // From 2024.11 the head and the loss are one kernel; plain checkpointing stays on device.
        let new = unsloth("unsloth==2025.3.19", "true");
        assert!(new.contains("fused_loss    linear") && !new.contains("offload_activations"));
        // A date stands in for the release.
        let dated = unsloth("PyTorch 2.4 (August 2024)", "true");
        assert!(dated.contains("fused_loss    logits"), "{dated}");
        // Liger's fused linear cross-entropy, by its flag.
        let liger = workload(r#"{"other_settings": "use_liger_kernel: true"}"#);
        assert!(liger.contains("fused_loss    linear"), "{liger}");
        assert!(!workload("{}").contains("fused_loss"));
        assert_eq!(unsloth_release("unsloth (qlora) with unsloth 2024.10.7"), Some((2024, 10)));
        assert_eq!(unsloth_release("unsloth"), None);
    }

    #[test]
    fn gradients_live_as_the_loop_and_its_pytorch_keep_them() {
        // PyTorch 2 and one micro-batch per step: the language's default, set_to_none.
        let modern = workload(r#"{"framework_version": "transformers 4.44, PyTorch 2.4"}"#);
        assert!(!modern.contains("zero_grad") && !modern.contains("gradient_accumulation"));
        // Accumulated gradients are held whatever the PyTorch.
        let accumulated = workload(r#"{"grad_accum": 4, "framework_version": "PyTorch 1.13"}"#);
        assert!(accumulated.contains("gradient_accumulation 4"), "{accumulated}");
        assert!(!accumulated.contains("zero_grad"));
        // A stated release is written as it is: it sets the foreach step's intermediates.
        assert!(modern.contains("torch         \"2.4\""), "{modern}");
        assert!(!workload("{}").contains("torch "));
        // Under a 1.x release the attention the point ran is written out either way.
        let accumulated_attention = accumulated.contains("attention     eager")
            || accumulated.contains("attention     fused");
        assert!(accumulated_attention, "{accumulated}");
        // PyTorch 1.x zeroes in place: by its version, its year or an old transformers.
        for version in ["PyTorch 1.13", "Jan 2022", "early 2023", "transformers v4.20.0"] {
            let old = workload(&format!(r#"{{"framework_version": "{version}"}}"#));
            assert!(old.contains("zero_grad     zeros"), "{version}: {old}");
        }
    }

    #[test]
    fn paged_and_fused_optimizers_are_read_from_their_names() {
        let paged =
            workload(r#"{"optimizer": "paged_adamw_8bit", "framework_version": "PyTorch 2.4"}"#);
        assert!(paged.contains("optimizer     adamw-8bit\n    paged_optimizer true"), "{paged}");
        let paged32 =
            workload(r#"{"optimizer": "paged_adamw_32bit", "framework_version": "PyTorch 2.4"}"#);
        assert!(paged32.contains("optimizer     adamw\n    paged_optimizer true"), "{paged32}");
        let fused =
            workload(r#"{"optimizer": "adamw_torch_fused", "framework_version": "PyTorch 2.4"}"#);
        assert!(fused.contains("optimizer     adamw\n    foreach       false"), "{fused}");
        let lion =
            workload(r#"{"optimizer": "Lion (lucidrains)", "framework_version": "PyTorch 2.4"}"#);
        assert!(lion.contains("optimizer     lion"), "{lion}");
        for (wording, optimizer) in [
            ("SophiaG", "sophia"),
            ("Adan (sail-sg)", "adan"),
            ("prodigyopt Prodigy", "prodigy"),
            ("AdamWScheduleFree", "adamw-schedule-free"),
            ("apex FusedLAMB", "lamb"),
            ("RMSprop", "rmsprop"),
            ("Adagrad", "adagrad"),
        ] {
            let text = workload(&format!(r#"{{"optimizer": "{wording}"}}"#));
            assert!(text.contains(&format!("optimizer     {optimizer}\n")), "{wording}: {text}");
        }
        // bitsandbytes' one-state 8-bit optimizers, paged Lion among them.
        for (wording, optimizer) in [
            ("Lion8bit", "lion-8bit"),
            ("bnb.optim.RMSprop8bit", "rmsprop-8bit"),
            ("Adagrad8bit", "adagrad-8bit"),
            ("SGD8bit (momentum 0.9)", "sgd-momentum-8bit"),
        ] {
            let text = workload(&format!(r#"{{"optimizer": "{wording}"}}"#));
            assert!(text.contains(&format!("optimizer     {optimizer}\n")), "{wording}: {text}");
        }
        let paged = workload(r#"{"optimizer": "PagedLion8bit"}"#);
        assert!(paged.contains("optimizer     lion-8bit\n    paged_optimizer true"), "{paged}");
        // bitsandbytes pages no 8-bit RMSprop.
        assert!(super::super::express(&point(r#"{"optimizer": "paged RMSprop8bit"}"#)).is_err());
        let plain = workload(r#"{"optimizer": "adamw_torch", "framework_version": "PyTorch 2.4"}"#);
        assert!(!plain.contains("paged_optimizer") && !plain.contains("foreach"), "{plain}");
    }

    #[test]
    fn a_quantized_base_takes_its_stated_bf16_compute_type() {
        let qlora = workload(
            r#"{"weight_precision": "nf4", "quantization": "bitsandbytes NF4", "workload": "training_qlora",
                "framework_version": "PyTorch 2.4"}"#,
        );
        assert!(qlora.contains("activations   bf16  # the stated compute type"), "{qlora}");
        let fp16 = workload(
            r#"{"weight_precision": "nf4", "quantization": "bitsandbytes NF4", "workload": "training_qlora",
                "compute_dtype": "fp16", "framework_version": "PyTorch 2.4"}"#,
        );
        assert!(!fp16.contains("activations"), "{fp16}");
    }

    #[test]
    fn lora_text() {
        let text = "LoRA r=64 alpha=16 on c_attn,c_proj,w1,w2 (no embedding training)";
        assert_eq!(rank(&text.to_lowercase()), Some(64));
        assert_eq!(modules(text).unwrap(), ["c_attn", "c_proj", "w1", "w2"]);
        assert_eq!(modules("Q-LoRA r=64 on GPTQ-Int4 base, fp16, DeepSpeed ZeRO-2"), None);
        assert_eq!(rank("qlora rank 4 on to_k"), Some(4));
        let peft = "LoRA r=16, alpha=32, target_modules=['q_proj', 'v_proj'], dropout 0.05";
        assert_eq!(modules(peft).unwrap(), ["q_proj", "v_proj"]);
        assert_eq!(modules("QLoRA rank=8, all-linear").unwrap().len(), 7);
        assert_eq!(modules("LoRA r=32 alpha=16 lora_target_linear").unwrap().len(), 7);
        assert_eq!(modules("LoRA rank 8, lora_target: all").unwrap().len(), 7);
        assert_eq!(
            modules("QLoRA r=16 on q,k,v,o,gate,up,down").unwrap(),
            ["q", "k", "v", "o", "gate", "up", "down"]
        );
        assert_eq!(modules("LoRA (r=8) for q and v only").unwrap(), ["q", "v"]);
        assert_eq!(modules("LoRA r=8, dropout 0.1, v2 recipe"), None);
        assert_eq!(rank("qlora rank=8, all-linear"), Some(8));
        assert_eq!(rank("qlora r 64 all linear"), Some(64));
        assert_eq!(rank("lora r16, alpha 32"), Some(16));
        assert_eq!(rank("lora on every projection"), None);
        assert_eq!(modules("LoRA rank 8 all").unwrap().len(), 7);
        assert_eq!(modules("LoRA r=16 on all modules").unwrap().len(), 7);
        assert_eq!(modules("LoRA rank 8 all-in-one recipe"), None);
    }
}
