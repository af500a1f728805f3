//! Checking `model` blocks: the decoder shape, mixture-of-experts, latent attention, sliding
//! windows, and the stored weights an importer read from a checkpoint.

use super::fields::{Fields, Repeat};
use super::quantity::Dim;
use crate::ast::BlockDeclaration;
use crate::diagnostic::Diagnostic;
use crate::hir::{
    AttentionKind, Biases, Blocks, EncoderDecoder, Mla, Mlp, Model, Moe, Norm, Output, Shape,
    Stored, Window,
};
use crate::quant::WeightFormat;

const KNOWN: &[(&str, Repeat)] = &[
    ("params", Repeat::Once),
    ("keep_in_fp32", Repeat::Once),
    ("layerwise_skip", Repeat::Once),
    ("outside_linear", Repeat::Once),
    ("largest_module", Repeat::Once),
    ("buffers", Repeat::Once),
    ("largest_block", Repeat::Once),
    ("outside_blocks", Repeat::Once),
    ("attention_qkv", Repeat::Once),
    ("layers", Repeat::Once),
    ("hidden", Repeat::Once),
    ("ffn", Repeat::Once),
    ("heads", Repeat::Once),
    ("kv_heads", Repeat::Once),
    ("head_dim", Repeat::Once),
    ("vocab", Repeat::Once),
    ("tied_embeddings", Repeat::Once),
    ("qkv_bias", Repeat::Once),
    ("mlp", Repeat::Once),
    ("experts", Repeat::Once),
    ("experts_active", Repeat::Once),
    ("expert_ffn", Repeat::Once),
    ("shared_experts", Repeat::Once),
    ("shared_expert_ffn", Repeat::Once),
    ("dense_layers", Repeat::Once),
    ("attention", Repeat::Once),
    ("kv_lora_rank", Repeat::Once),
    ("q_lora_rank", Repeat::Once),
    ("qk_rope_dim", Repeat::Once),
    ("qk_nope_dim", Repeat::Once),
    ("v_head_dim", Repeat::Once),
    ("sliding_window", Repeat::Once),
    ("global_every", Repeat::Once),
    ("weights_bytes", Repeat::Once),
    ("weights_format", Repeat::Once),
    ("from", Repeat::Once),
    ("biases", Repeat::Once),
    ("norm", Repeat::Once),
    ("positions", Repeat::Once),
    ("output", Repeat::Once),
    ("dropout", Repeat::Once),
    ("encoder_layers", Repeat::Once),
    ("decoder_layers", Repeat::Once),
    ("relative_buckets", Repeat::Once),
];

/// The fields that make a model a shape rather than a bare parameter count.
const SHAPE: [&str; 7] =
    ["layers", "encoder_layers", "decoder_layers", "hidden", "ffn", "heads", "vocab"];

pub(super) fn model(
    decl: &BlockDeclaration,
    imports: &crate::import::Imports,
) -> (Option<Model>, Vec<Diagnostic>) {
    let merged;
    let decl = match super::imported::merged(decl, imports) {
        None => decl,
        Some(Ok(block)) => {
            merged = block;
            &merged
        }
        Some(Err(diagnostics)) => return (None, diagnostics),
    };
    let what = format!("model `{}`", decl.name.name);
    let fields = Fields::new(&what, &decl.body, KNOWN);
    let params = fields.whole("params", Dim::Count, 1, 1_000_000_000_000_000, "7 billion");
    let shape = if SHAPE.iter().any(|key| fields.has(key)) {
        shape(decl, &fields)
    } else {
        if !fields.has("params") {
            fields.push(
                Diagnostic::error(
                    "E011",
                    decl.name.span,
                    format!("model `{}` has neither a shape nor a parameter count", decl.name.name),
                )
                .with_help("give `params 7 billion`, or the shape: layers, hidden, ffn, heads, kv_heads, vocab"),
            );
        }
        None
    };
    let keep_in_fp32 =
        fields.whole("keep_in_fp32", Dim::Count, 1, 1_000_000_000_000_000, "1 billion");
    let layerwise_skip =
        fields.whole("layerwise_skip", Dim::Count, 1, 1_000_000_000_000_000, "3 billion");
    let outside_linear =
        fields.whole("outside_linear", Dim::Count, 1, 1_000_000_000_000_000, "131_799_040");
    let largest_module =
        fields.whole("largest_module", Dim::Count, 1, 1_000_000_000_000_000, "56_641_536");
    let buffers = fields.whole("buffers", Dim::Count, 1, 1_000_000_000_000_000, "56_623_104");
    let blocks = blocks(&fields, decl);
    let attention_qkv =
        fields.whole("attention_qkv", Dim::Count, 1, 1_000_000_000_000_000, "1_189_472_256");
    let stored = stored(&fields);
    let mut diagnostics = fields.finish();
    if let (Some(declared), Some(shape)) = (params, &shape)
        && let Some(derived) = crate::eval::parameter_count(shape)
        && declared.abs_diff(derived).saturating_mul(20) > derived
    {
        let span = field_span(decl, "params");
        diagnostics.push(
            Diagnostic::warning(
                "W002",
                span,
                format!("`params` is {declared}, but the shape gives {derived}"),
            )
            .with_help("the shape decides the weights; check the shape or the count"),
        );
    }
    let ok = !diagnostics.iter().any(Diagnostic::is_error);
    let shape = shape.map(|shape| Shape { keep_in_fp32: keep_in_fp32.unwrap_or(0), ..shape });
    let model = ok.then(|| Model {
        name: decl.name.name.clone(),
        title: decl.title.as_ref().map(|t| t.value.clone()),
        shape,
        params,
        keep_in_fp32,
        layerwise_skip,
        outside_linear,
        largest_module,
        buffers,
        blocks,
        attention_qkv,
        stored,
        span: decl.span,
    });
    (model, diagnostics)
}

fn field_span(decl: &BlockDeclaration, key: &str) -> crate::span::Span {
    decl.body.fields.iter().find(|f| f.key.name == key).map_or(decl.name.span, |f| f.span)
}

fn count(fields: &Fields<'_>, key: &str, max: u64, example: &str) -> Option<u64> {
    fields.whole(key, Dim::Count, 1, max, example)
}

fn shape(decl: &BlockDeclaration, fields: &Fields<'_>) -> Option<Shape> {
    let encoder = encoder_decoder(decl, fields);
    let layers = match &encoder {
        Some(Ok((encoder, decoder_layers))) => Some(encoder.encoder_layers + decoder_layers),
        Some(Err(())) => None,
        None => count(fields, "layers", 10_000, "32"),
    };
    let hidden = count(fields, "hidden", 1 << 20, "4096");
    let ffn = count(fields, "ffn", 1 << 24, "14336");
    let heads = count(fields, "heads", 1 << 14, "32");
    let kv_heads = count(fields, "kv_heads", 1 << 14, "8");
    let head_dim = count(fields, "head_dim", 1 << 16, "128");
    let vocab = count(fields, "vocab", 100_000_000, "128256");
    let tied_embeddings = fields.boolean("tied_embeddings").unwrap_or(false);
    let biases = match (fields.boolean("biases"), fields.boolean("qkv_bias")) {
        (Some(true), _) => Biases::All,
        (_, Some(true)) => Biases::Qkv,
        _ => Biases::None,
    };
    let norm = match fields.choice("norm", &["rmsnorm", "layernorm"]) {
        Some(("layernorm", _)) => Norm::Layer,
        _ => Norm::Rms,
    };
    let positions = fields.whole("positions", Dim::Count, 1, 10_000_000, "512").unwrap_or(0);
    let output = match fields.choice("output", &["lm", "none"]) {
        Some(("none", _)) => Output::None,
        _ => Output::Lm,
    };
    let dropout = fields.boolean("dropout").unwrap_or(false);
    let mlp = match fields.choice("mlp", &["gated", "gated_fused", "plain"]) {
        Some(("plain", _)) => Mlp::Plain,
        Some(("gated_fused", _)) => Mlp::GatedFused,
        _ => Mlp::Gated,
    };
    let layers_missing = if encoder.is_none() { layers } else { Some(0) };
    for (key, value, example) in [
        ("layers", layers_missing, "layers 32"),
        ("hidden", hidden, "hidden 4096"),
        ("ffn", ffn, "ffn 14336"),
        ("heads", heads, "heads 32"),
        ("vocab", vocab, "vocab 128256"),
    ] {
        if value.is_none() {
            fields.missing(key, example);
        }
    }
    let moe = moe(fields, ffn);
    let attention = attention(fields);
    let window = window(fields);
    let (layers, hidden, ffn, heads, vocab) = (layers?, hidden?, ffn?, heads?, vocab?);
    let encoder = encoder.map(|found| found.map(|(encoder, _)| encoder)).transpose().ok()?;
    let kv_heads = kv_heads.unwrap_or(heads);
    if heads % kv_heads != 0 {
        fields.push(
            Diagnostic::error(
                "E014",
                field_span(decl, "kv_heads"),
                format!("{heads} heads cannot be grouped over {kv_heads} kv_heads"),
            )
            .with_help("kv_heads must divide heads (grouped-query attention)"),
        );
        return None;
    }
    let head_dim = match head_dim {
        Some(d) => d,
        None if hidden % heads == 0 => hidden / heads,
        None => {
            fields.push(
                Diagnostic::error(
                    "E011",
                    decl.name.span,
                    format!("hidden {hidden} is not a multiple of heads {heads}, so head_dim must be given"),
                )
                .with_help("add `head_dim 128` (from the model's config.json)"),
            );
            return None;
        }
    };
    if let Some(moe) = &moe
        && moe.dense_layers > layers
    {
        fields.push(Diagnostic::error(
            "E014",
            field_span(decl, "dense_layers"),
            format!("{} dense layers in a model of {layers} layers", moe.dense_layers),
        ));
        return None;
    }
    if let (Some(_), AttentionKind::Mla(_)) = (&encoder, attention.as_ref()?) {
        fields.push(
            Diagnostic::error(
                "E014",
                field_span(decl, "attention"),
                "latent attention in an encoder-decoder model: its cross-attention is not modelled",
            )
            .with_help(
                "remove `attention mla`, or the encoder (`encoder_layers`, `decoder_layers`)",
            ),
        );
        return None;
    }
    Some(Shape {
        layers,
        hidden,
        ffn,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tied_embeddings,
        biases,
        norm,
        positions,
        output,
        dropout,
        mlp,
        attention: attention?,
        moe,
        window,
        encoder,
        keep_in_fp32: 0,
    })
}

/// `encoder_layers 24` and `decoder_layers 24` (T5's `num_layers` and `num_decoder_layers`,
/// BART's `encoder_layers` and `decoder_layers`): an encoder-decoder model, with its
/// relative-position buckets. `None`: decoder-only; `Err` after an error.
#[allow(clippy::type_complexity, reason = "found, or not, or reported")]
fn encoder_decoder(
    decl: &BlockDeclaration,
    fields: &Fields<'_>,
) -> Option<Result<(EncoderDecoder, u64), ()>> {
    let key_span = |key: &str| {
        decl.body.fields.iter().find(|f| f.key.name == key).map_or(decl.name.span, |f| f.key.span)
    };
    let stack = ["encoder_layers", "decoder_layers"].into_iter().find(|key| fields.has(key));
    let Some(stack) = stack else {
        if fields.has("relative_buckets") {
            fields.push(
                Diagnostic::error(
                    "E014",
                    key_span("relative_buckets"),
                    "`relative_buckets` belongs to an encoder-decoder model",
                )
                .with_help("give `encoder_layers` and `decoder_layers` (T5's num_layers and num_decoder_layers)"),
            );
        }
        return None;
    };
    if fields.has("layers") {
        fields.push(
            Diagnostic::error(
                "E014",
                key_span("layers"),
                "`layers` with `encoder_layers` or `decoder_layers`: say each stack's layers once",
            )
            .with_label(key_span(stack), "an encoder-decoder model")
            .with_help("remove `layers`; give `encoder_layers` and `decoder_layers`"),
        );
        return Some(Err(()));
    }
    let encoder_layers = count(fields, "encoder_layers", 10_000, "24");
    let decoder_layers = count(fields, "decoder_layers", 10_000, "24");
    for (key, value, example) in [
        ("encoder_layers", encoder_layers, "encoder_layers 24"),
        ("decoder_layers", decoder_layers, "decoder_layers 24"),
    ] {
        if value.is_none() {
            fields.missing(key, example);
        }
    }
    let relative_buckets =
        fields.whole("relative_buckets", Dim::Count, 1, 1 << 16, "32").unwrap_or(0);
    match (encoder_layers, decoder_layers) {
        (Some(encoder_layers), Some(decoder_layers)) => {
            Some(Ok((EncoderDecoder { encoder_layers, relative_buckets }, decoder_layers)))
        }
        _ => Some(Err(())),
    }
}

/// `experts 8; experts_active 2; expert_ffn 14336`: a mixture of experts, or `None`.
fn moe(fields: &Fields<'_>, ffn: Option<u64>) -> Option<Moe> {
    let keys =
        ["experts_active", "expert_ffn", "shared_experts", "shared_expert_ffn", "dense_layers"];
    if !fields.has("experts") {
        for key in keys {
            if let Some(field) = fields.get(key) {
                fields.push(
                    Diagnostic::error(
                        "E014",
                        field.key.span,
                        format!("`{key}` describes experts, but the model has no `experts`"),
                    )
                    .with_help("add `experts N` (the routed experts per MoE layer)"),
                );
            }
        }
        return None;
    }
    let experts = count(fields, "experts", 4096, "8")?;
    let active = match count(fields, "experts_active", 4096, "2") {
        Some(active) if active > experts => {
            fields.push(Diagnostic::error(
                "E014",
                fields.get("experts_active").map_or_else(Default::default, |f| f.span),
                format!("{active} active experts out of {experts}"),
            ));
            return None;
        }
        Some(active) => active,
        None => {
            fields.missing("experts_active", "experts_active 2");
            return None;
        }
    };
    let expert_ffn = count(fields, "expert_ffn", 1 << 24, "14336").or(ffn)?;
    let shared = fields.whole("shared_experts", Dim::Count, 0, 4096, "1").unwrap_or(0);
    let shared_ffn = count(fields, "shared_expert_ffn", 1 << 24, "2048").unwrap_or(expert_ffn);
    let dense_layers = fields.whole("dense_layers", Dim::Count, 0, 10_000, "3").unwrap_or(0);
    Some(Moe { experts, active, expert_ffn, shared, shared_ffn, dense_layers })
}

/// `attention mla` with its dimensions, or standard attention. `None` after an error.
fn attention(fields: &Fields<'_>) -> Option<AttentionKind> {
    let mla_keys = ["kv_lora_rank", "q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim"];
    match fields.choice("attention", &["standard", "mla"]) {
        Some(("mla", _)) => {
            let kv_lora_rank = count(fields, "kv_lora_rank", 1 << 16, "512");
            let q_lora_rank = count(fields, "q_lora_rank", 1 << 16, "1536");
            let rope_dim = count(fields, "qk_rope_dim", 1 << 12, "64");
            let nope_dim = count(fields, "qk_nope_dim", 1 << 12, "128");
            let v_head_dim = count(fields, "v_head_dim", 1 << 12, "128");
            for (key, value, example) in [
                ("kv_lora_rank", kv_lora_rank, "kv_lora_rank 512"),
                ("qk_rope_dim", rope_dim, "qk_rope_dim 64"),
                ("qk_nope_dim", nope_dim, "qk_nope_dim 128"),
                ("v_head_dim", v_head_dim, "v_head_dim 128"),
            ] {
                if value.is_none() {
                    fields.missing(key, example);
                }
            }
            Some(AttentionKind::Mla(Mla {
                kv_lora_rank: kv_lora_rank?,
                q_lora_rank,
                rope_dim: rope_dim?,
                nope_dim: nope_dim?,
                v_head_dim: v_head_dim?,
            }))
        }
        None if fields.has("attention") => None,
        _ => Some(standard(fields, &mla_keys)),
    }
}

fn standard(fields: &Fields<'_>, mla_keys: &[&str]) -> AttentionKind {
    for key in mla_keys {
        if let Some(field) = fields.get(key) {
            fields.push(
                Diagnostic::error(
                    "E014",
                    field.key.span,
                    format!("`{key}` belongs to latent attention"),
                )
                .with_help("add `attention mla` to the model"),
            );
        }
    }
    AttentionKind::Standard
}

fn window(fields: &Fields<'_>) -> Option<Window> {
    let tokens = fields.whole("sliding_window", Dim::Tokens, 1, 100_000_000, "4096 tokens");
    let global_every = count(fields, "global_every", 10_000, "6");
    match (tokens, global_every) {
        (Some(tokens), global_every) => Some(Window { tokens, global_every }),
        (None, Some(_)) if !fields.has("sliding_window") => {
            fields.push(Diagnostic::error(
                "E014",
                fields.get("global_every").map_or_else(Default::default, |f| f.span),
                "`global_every` needs a `sliding_window` for the other layers",
            ));
            None
        }
        _ => None,
    }
}

/// `weights_bytes` and `weights_format`, written by importers from a checkpoint's headers.
fn stored(fields: &Fields<'_>) -> Option<Stored> {
    let bytes = fields.bytes("weights_bytes", 1, 1 << 50, "16060522496 B");
    let format = fields.get("weights_format").and_then(|field| {
        let [crate::ast::Value::Word(word)] = field.values.as_slice() else {
            fields.push(Diagnostic::error(
                "E013",
                field.span,
                "`weights_format` takes a precision or a preset such as `q4_k_m`",
            ));
            return None;
        };
        let format = WeightFormat::from_name(&word.name);
        if format.is_none() {
            fields.push(
                Diagnostic::error(
                    "E015",
                    word.span,
                    format!("`{}` is not a weight format", word.name),
                )
                .with_help("bf16, fp8, gptq-int4, awq-int4-g64, q4_k_m, ..."),
            );
        }
        format
    });
    match (bytes, format) {
        (Some(bytes), Some(format)) => Some(Stored { bytes, format }),
        (Some(_), None) if !fields.has("weights_format") => {
            fields.missing("weights_format", "weights_format bf16");
            None
        }
        _ => None,
    }
}

/// `largest_block` and `outside_blocks`, which block-level group offloading needs together.
fn blocks(fields: &Fields<'_>, decl: &BlockDeclaration) -> Option<Blocks> {
    const MAX: u64 = 1_000_000_000_000_000;
    let largest = fields.whole("largest_block", Dim::Count, 1, MAX, "339_831_552");
    let outside = fields.whole("outside_blocks", Dim::Count, 0, MAX, "67_146_816");
    match (largest, outside) {
        (Some(largest), Some(outside)) => Some(Blocks { largest, outside }),
        (None, None) => None,
        (given, _) => {
            let (has, lacks) = if given.is_some() {
                ("largest_block", "outside_blocks")
            } else {
                ("outside_blocks", "largest_block")
            };
            if fields.has(lacks) {
                return None;
            }
            fields.push(
                Diagnostic::error(
                    "E011",
                    field_span(decl, has),
                    format!("`{has}` needs `{lacks}` beside it"),
                )
                .with_help(
                    "block-level group offloading holds the largest block and everything outside \
                     the block lists: give both",
                ),
            );
            None
        }
    }
}
