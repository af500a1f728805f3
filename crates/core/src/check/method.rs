//! The `method` of a `training` section: full training, LoRA (with DoRA and saved modules),
//! freeze tuning, prefix tuning and prompt tuning.

use super::fields::{Fields, Repeat};
use super::quantity::Dim;
use crate::ast::{Block, Field, Value};
use crate::diagnostic::Diagnostic;
use crate::hir::{LoraTarget, Method, Saved};
use crate::precision::Precision;
use crate::ratio::Ratio;

/// The LoRA targets diffusers' training scripts give a denoiser: the attention projections
/// (`to_q`, `to_k`, `to_v`, `to_out.0`).
const DENOISER_TARGETS: [LoraTarget; 4] =
    [LoraTarget::Q, LoraTarget::K, LoraTarget::V, LoraTarget::O];

/// What a denoiser's LoRA can adapt: the attention projections and each block's feed-forward
/// (`up`: `ff.net.0.proj`, `down`: `ff.net.2`), as kohya's networks and diffusers' longer
/// `--lora_layers` lists do.
const DENOISER_ADAPTABLE: [LoraTarget; 6] =
    [LoraTarget::Q, LoraTarget::K, LoraTarget::V, LoraTarget::O, LoraTarget::Up, LoraTarget::Down];

/// The `method` field: `full`, `lora { … }`, `freeze { … }`, `prefix { … }` or `prompt { … }`.
pub(super) fn method(
    field: &Field,
    fields: &Fields<'_>,
    denoiser: bool,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Method> {
    let [Value::Word(word)] = field.values.as_slice() else {
        fields.push(Diagnostic::error(
            "E013",
            field.span,
            "`method` is `full`, `lora { rank 16 }`, `freeze { layers 2 }`, `prefix { tokens 20 }` or `prompt { tokens 20 }`",
        ));
        return None;
    };
    let kind = fields.word_in(field, word, &["full", "lora", "freeze", "prefix", "prompt"])?;
    if kind != "lora" && denoiser && kind != "full" {
        fields.push(
            Diagnostic::error(
                "E013",
                field.span,
                format!(
                    "`method {kind}` is modelled for a language model's layers, not a denoiser's"
                ),
            )
            .with_help("train the denoiser in full or with LoRA: `method lora { rank 16 }`"),
        );
        return None;
    }
    let empty = Block::default();
    let block = field.block.as_ref().unwrap_or(&empty);
    match kind {
        "full" => {
            if let Some(block) = &field.block {
                fields.push(Diagnostic::error("E013", block.span, "`method full` takes no block"));
            }
            Some(Method::Full)
        }
        "lora" => lora(field, block, denoiser, diagnostics),
        "freeze" => freeze(block, diagnostics),
        "prefix" => prefix(field, block, diagnostics),
        _ => prompt(field, block, diagnostics),
    }
}

/// `method lora { rank …, targets …, dtype …, modules_to_save …, dropout …, dora …,
/// fused_qkv … }`.
fn lora(
    field: &Field,
    block: &Block,
    denoiser: bool,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Method> {
    const KNOWN: &[(&str, Repeat)] = &[
        ("rank", Repeat::Once),
        ("targets", Repeat::Once),
        ("dtype", Repeat::Once),
        ("modules_to_save", Repeat::Once),
        ("dropout", Repeat::Once),
        ("dora", Repeat::Once),
        ("fused_qkv", Repeat::Once),
    ];
    let inner = Fields::new("a LoRA method", block, KNOWN);
    let rank = inner.whole("rank", Dim::Count, 1, 65_536, "16");
    if !inner.has("rank") {
        inner.push(
            Diagnostic::error("E011", field.span, "LoRA needs a rank")
                .with_help("write `method lora { rank 16 }`"),
        );
    }
    let mut targets = Vec::new();
    let adaptable: &[LoraTarget] = if denoiser { &DENOISER_ADAPTABLE } else { &LoraTarget::ALL };
    // A denoiser's feed-forward has no gate; a language model also takes T5's module names.
    let t5: &[(&str, LoraTarget)] = if denoiser { &[] } else { &LoraTarget::T5_NAMES };
    let names: Vec<&str> = adaptable
        .iter()
        .map(|t| t.name())
        .chain(t5.iter().map(|(name, _)| *name))
        .chain(["all"])
        .collect();
    if let Some(targets_field) = inner.get("targets") {
        for word in inner.words(targets_field) {
            match inner.word_in(targets_field, word, &names) {
                Some("all") => targets.extend(adaptable),
                Some(name) => {
                    targets.extend(adaptable.iter().filter(|t| t.name() == name));
                    targets.extend(t5.iter().filter(|(n, _)| *n == name).map(|(_, t)| *t));
                }
                None => {}
            }
        }
    } else if denoiser {
        // diffusers' LoRA training scripts adapt every attention projection
        // (`target_modules=["to_k", "to_q", "to_v", "to_out.0"]`).
        targets.extend(DENOISER_TARGETS);
    } else {
        // PEFT's default for Llama-style models adapts the attention query and value.
        targets.extend([LoraTarget::Q, LoraTarget::V]);
    }
    targets.sort_unstable();
    targets.dedup();
    let dtype = inner.precision("dtype");
    let save = match (denoiser, inner.get("modules_to_save")) {
        (true, Some(save_field)) => {
            inner.push(Diagnostic::error(
                "E013",
                save_field.key.span,
                "`modules_to_save` names a language model's embeddings and head; a denoiser has neither",
            ));
            Vec::new()
        }
        (false, Some(save_field)) => end_modules(&inner, save_field),
        (_, None) => Vec::new(),
    };
    let dropout = lora_dropout(&inner);
    let dora_field = inner.get("dora");
    let dora = dora_field.and_then(|field| inner.choice_of(field, &["true", "false"]));
    let dora = dora.map(|(word, _)| word == "true");
    if let (true, Some(true), Some(dora_field)) = (denoiser, dora, dora_field) {
        // A denoiser's adapted layers include convolutions and attention projections of
        // several widths (DoRA's conv layers norm over a whole kernel): not modelled.
        inner.push(
            Diagnostic::error(
                "E013",
                dora_field.span,
                "`dora` is modelled for a language model's linear layers, not a denoiser's",
            )
            .with_help("drop `dora true` to estimate plain LoRA on the denoiser"),
        );
    }
    let fused_qkv = inner.boolean("fused_qkv");
    let found = inner.finish();
    let ok = found.is_empty();
    diagnostics.extend(found);
    ok.then_some(Method::Lora {
        rank: rank?,
        targets,
        dtype: dtype.unwrap_or(Precision::Fp32),
        save,
        dropout: dropout.unwrap_or(Ratio::ZERO),
        dora: dora.unwrap_or(false),
        fused_qkv: fused_qkv.unwrap_or(false),
    })
}

/// PEFT's `lora_dropout`, a plain probability below 1 (`LoraConfig`'s default is 0).
fn lora_dropout(inner: &Fields<'_>) -> Option<Ratio> {
    let field = inner.get("dropout")?;
    let (value, span) = inner.quantity(field, Dim::Count, "0.05")?;
    if value.is_negative() || value >= Ratio::ONE {
        inner.push(
            Diagnostic::error(
                "E007",
                span,
                format!("`dropout` is {value}; it must be from 0 to below 1"),
            )
            .with_help("PEFT's `lora_dropout`, such as `dropout 0.05`"),
        );
        return None;
    }
    Some(value)
}

/// The end modules a method's field names: the input embedding and the output head.
fn end_modules<'a>(inner: &Fields<'a>, field: &'a Field) -> Vec<Saved> {
    let mut modules = Vec::new();
    for word in inner.words(field) {
        match inner.word_in(field, word, &["embeddings", "head"]) {
            Some("embeddings") => modules.push(Saved::Embeddings),
            Some(_) => modules.push(Saved::Head),
            None => {}
        }
    }
    modules.sort_unstable();
    modules.dedup();
    modules
}

/// `method freeze { layers 2, extra_modules embeddings head }`: LLaMA-Factory's freeze tuning,
/// whose `freeze_trainable_layers` default trains the last 2 layers.
fn freeze(block: &Block, diagnostics: &mut Vec<Diagnostic>) -> Option<Method> {
    const KNOWN: &[(&str, Repeat)] = &[("layers", Repeat::Once), ("extra_modules", Repeat::Once)];
    let inner = Fields::new("a freeze method", block, KNOWN);
    let layers = inner.whole("layers", Dim::Count, 1, 1_000_000, "2");
    let layers = if inner.has("layers") { layers } else { Some(2) };
    let extra = inner.get("extra_modules").map(|f| end_modules(&inner, f)).unwrap_or_default();
    let found = inner.finish();
    let ok = found.is_empty();
    diagnostics.extend(found);
    ok.then_some(Method::Freeze { layers: layers?, extra })
}

/// A prompt-learning method's block: its `tokens` (PEFT's `num_virtual_tokens`, required) and
/// the width its optional field `width_key` gives; `None` when a field is wrong or missing.
fn virtual_tokens(
    field: &Field,
    block: &Block,
    method: &str,
    width_key: &'static str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<(u64, Option<u64>)> {
    let known = [("tokens", Repeat::Once), (width_key, Repeat::Once)];
    let what = format!("a {method} method");
    let inner = Fields::new(&what, block, &known);
    let tokens = inner.whole("tokens", Dim::Count, 1, 1_000_000, "20");
    if !inner.has("tokens") {
        inner.push(
            Diagnostic::error(
                "E011",
                field.span,
                format!("{method} tuning needs its number of virtual tokens"),
            )
            .with_help(format!(
                "write `method {method} {{ tokens 20 }}` (PEFT's `num_virtual_tokens`)"
            )),
        );
    }
    let width = inner.whole(width_key, Dim::Count, 1, 1_000_000, "512");
    let found = inner.finish();
    let ok = found.is_empty();
    diagnostics.extend(found);
    ok.then_some((tokens?, width))
}

/// `method prefix { tokens 20, projection 512 }`: PEFT's prefix tuning (P-tuning v2), with
/// `projection` the width of the reparametrizing MLP when `prefix_projection` is on.
fn prefix(field: &Field, block: &Block, diagnostics: &mut Vec<Diagnostic>) -> Option<Method> {
    let (tokens, projection) = virtual_tokens(field, block, "prefix", "projection", diagnostics)?;
    Some(Method::Prefix { tokens, projection })
}

/// `method prompt { tokens 20, encoder 4096 }`: PEFT's prompt tuning, or with `encoder` the
/// width of P-tuning's MLP prompt encoder.
fn prompt(field: &Field, block: &Block, diagnostics: &mut Vec<Diagnostic>) -> Option<Method> {
    let (tokens, encoder) = virtual_tokens(field, block, "prompt", "encoder", diagnostics)?;
    Some(Method::Prompt { tokens, encoder })
}
