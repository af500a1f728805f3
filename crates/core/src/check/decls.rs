//! Checking `device`, `machine`, `model` and `headroom` blocks.

use std::collections::BTreeMap;

use super::Scope;
use super::fields::{Fields, Repeat};
use super::quantity::Dim;
use crate::ast::{BlockDeclaration, DeclarationKind, Value};
use crate::bytes::{Bytes, TIB};
use crate::diagnostic::Diagnostic;
use crate::hir::{Arch, Device, Headroom, HeadroomRule, Machine, Mlp, Model, Shape};
use crate::precision::Feature;
use crate::ratio::Ratio;

/// The largest plausible device: 16 TiB (ten times anything shipping).
const MAX_DEVICE: u64 = 16 * TIB;

pub(super) fn device(
    decl: &BlockDeclaration,
    from_catalog: bool,
) -> (Option<Device>, Vec<Diagnostic>) {
    const KNOWN: &[(&str, Repeat)] = &[
        ("memory", Repeat::Once),
        ("arch", Repeat::Once),
        ("compute", Repeat::Once),
        ("precisions", Repeat::Once),
        ("vendor", Repeat::Once),
    ];
    let what = format!("device `{}`", decl.name.name);
    let fields = Fields::new(&what, &decl.body, KNOWN);
    let mut memory = None;
    let mut memory_reported = true;
    match fields.get("memory") {
        Some(field) => {
            // `memory 141 GB marketed`: an optional trailing word says the size is not measured.
            let mut field = field.clone();
            if let [.., Value::Word(word)] = field.values.as_slice()
                && (word.name == "marketed" || word.name == "reported")
            {
                memory_reported = word.name == "reported";
                field.values.pop();
            }
            memory = fields.bytes_of(&field, 1, MAX_DEVICE, "81559 MiB");
        }
        None => fields.missing("memory", "memory 81559 MiB"),
    }
    let arch_names: Vec<&str> = Arch::ALL.iter().map(Arch::name).collect();
    let arch = match fields.choice("arch", &arch_names) {
        Some((name, _)) => Arch::from_name(name),
        None if !fields.has("arch") => {
            fields.missing("arch", "arch hopper");
            None
        }
        None => None,
    };
    let compute = fields.get("compute").and_then(|field| {
        let (value, span) = fields.quantity(field, Dim::Count, "9.0")?;
        if value < Ratio::ONE || value > Ratio::int(99) {
            fields.push(Diagnostic::error(
                "E007",
                span,
                "compute capability is between 1.0 and 99.x",
            ));
            return None;
        }
        Some(value)
    });
    let mut features = Vec::new();
    match fields.get("precisions") {
        Some(field) => {
            const NAMES: [&str; 7] = ["fp32", "tf32", "fp16", "bf16", "fp8", "fp4", "int8"];
            for word in fields.words(field) {
                match fields.word_in(field, word, &NAMES) {
                    Some("fp16") => features.push(Feature::Fp16),
                    Some("bf16") => features.push(Feature::Bf16),
                    Some("fp8") => features.push(Feature::Fp8),
                    Some("fp4") => features.push(Feature::Fp4),
                    _ => {}
                }
            }
        }
        None => fields.missing("precisions", "precisions fp32 fp16 bf16"),
    }
    fields.choice("vendor", &["nvidia", "amd", "intel"]);
    let diagnostics = fields.finish();
    let device = match (memory, arch) {
        (Some(memory), Some(arch)) if diagnostics.is_empty() => Some(Device {
            name: decl.name.name.clone(),
            title: decl.title.as_ref().map(|t| t.value.clone()),
            memory,
            memory_reported,
            arch,
            compute,
            features,
            from_catalog,
            span: decl.span,
        }),
        _ => None,
    };
    (device, diagnostics)
}

pub(super) fn machine(
    decl: &BlockDeclaration,
    scope: &Scope,
) -> (Option<Machine>, Vec<Diagnostic>) {
    const KNOWN: &[(&str, Repeat)] =
        &[("gpus", Repeat::Many), ("host_ram", Repeat::Once), ("disk", Repeat::Once)];
    let what = format!("machine `{}`", decl.name.name);
    let fields = Fields::new(&what, &decl.body, KNOWN);
    let mut gpus = Vec::new();
    let lines = fields.all("gpus");
    if lines.is_empty() {
        fields.missing("gpus", "gpus 8 x h100-sxm-80gb");
    }
    for field in lines {
        let [Value::Count(count)] = field.values.as_slice() else {
            fields.push(
                Diagnostic::error("E013", field.values_span(), "`gpus` takes a count of devices")
                    .with_help("write `gpus 8 x h100-sxm-80gb`"),
            );
            continue;
        };
        let n = match super::quantity::evaluate(&count.count) {
            Ok(q) if q.dim == Dim::Count => {
                fields.check_whole("gpus", q.value, count.count.span(), 1, 4096)
            }
            Ok(q) => {
                fields.push(Diagnostic::error(
                    "E005",
                    count.count.span(),
                    format!("a GPU count is a plain number, not {}", q.dim),
                ));
                None
            }
            Err(diagnostic) => {
                fields.push(diagnostic);
                None
            }
        };
        if let Err(diagnostic) = scope.expect(&count.name, &[DeclarationKind::Device]) {
            fields.push(diagnostic);
        } else if let Some(n) = n {
            gpus.push((u32::try_from(n).unwrap_or(u32::MAX), count.name.name.clone()));
        }
    }
    let host_ram = fields.bytes("host_ram", 1, 1 << 60, "512 GiB");
    let disk = fields.bytes("disk", 1, 1 << 60, "4 TB");
    let diagnostics = fields.finish();
    let machine = diagnostics.is_empty().then(|| Machine {
        name: decl.name.name.clone(),
        title: decl.title.as_ref().map(|t| t.value.clone()),
        gpus,
        host_ram,
        disk,
        span: decl.span,
    });
    (machine, diagnostics)
}

pub(super) fn model(decl: &BlockDeclaration) -> (Option<Model>, Vec<Diagnostic>) {
    const SHAPE: [&str; 5] = ["layers", "hidden", "ffn", "heads", "vocab"];
    const KNOWN: &[(&str, Repeat)] = &[
        ("params", Repeat::Once),
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
    ];
    let what = format!("model `{}`", decl.name.name);
    let fields = Fields::new(&what, &decl.body, KNOWN);
    let params = fields.whole("params", Dim::Count, 1, 1_000_000_000_000_000, "7 billion");
    let has_shape = SHAPE.iter().any(|key| decl.body.fields.iter().any(|f| f.key.name == *key));
    let mut shape = None;
    if has_shape {
        let layers = fields.whole("layers", Dim::Count, 1, 10_000, "32");
        let hidden = fields.whole("hidden", Dim::Count, 1, 1 << 20, "4096");
        let ffn = fields.whole("ffn", Dim::Count, 1, 1 << 24, "14336");
        let heads = fields.whole("heads", Dim::Count, 1, 1 << 14, "32");
        let kv_heads = fields.whole("kv_heads", Dim::Count, 1, 1 << 14, "8");
        let head_dim = fields.whole("head_dim", Dim::Count, 1, 1 << 16, "128");
        let vocab = fields.whole("vocab", Dim::Count, 1, 100_000_000, "128256");
        let tied = fields.boolean("tied_embeddings").unwrap_or(false);
        let qkv_bias = fields.boolean("qkv_bias").unwrap_or(false);
        let mlp = match fields.choice("mlp", &["gated", "plain"]) {
            Some(("plain", _)) => Mlp::Plain,
            _ => Mlp::Gated,
        };
        for (key, value, example) in [
            ("layers", layers, "layers 32"),
            ("hidden", hidden, "hidden 4096"),
            ("ffn", ffn, "ffn 14336"),
            ("heads", heads, "heads 32"),
            ("vocab", vocab, "vocab 128256"),
        ] {
            if value.is_none() {
                fields.missing(key, example);
            }
        }
        if let (Some(layers), Some(hidden), Some(ffn), Some(heads), Some(vocab)) =
            (layers, hidden, ffn, heads, vocab)
        {
            let kv_heads = kv_heads.unwrap_or(heads);
            if heads % kv_heads != 0 {
                let span = decl
                    .body
                    .fields
                    .iter()
                    .find(|f| f.key.name == "kv_heads")
                    .map_or(decl.name.span, |f| f.span);
                fields.push(
                    Diagnostic::error(
                        "E014",
                        span,
                        format!("{heads} heads cannot be grouped over {kv_heads} kv_heads"),
                    )
                    .with_help("kv_heads must divide heads (grouped-query attention)"),
                );
            }
            let head_dim = match head_dim {
                Some(d) => Some(d),
                None if hidden % heads == 0 => Some(hidden / heads),
                None => {
                    fields.push(
                        Diagnostic::error("E011", decl.name.span, format!("hidden {hidden} is not a multiple of heads {heads}, so head_dim must be given"))
                            .with_help("add `head_dim 128` (from the model's config.json)"),
                    );
                    None
                }
            };
            if let Some(head_dim) = head_dim {
                shape = Some(Shape {
                    layers,
                    hidden,
                    ffn,
                    heads,
                    kv_heads,
                    head_dim,
                    vocab,
                    tied_embeddings: tied,
                    qkv_bias,
                    mlp,
                });
            }
        }
    } else if !fields.has("params") {
        fields.push(
            Diagnostic::error("E011", decl.name.span, format!("model `{}` has neither a shape nor a parameter count", decl.name.name))
                .with_help("give `params 7 billion`, or the shape: layers, hidden, ffn, heads, kv_heads, vocab"),
        );
    }
    let mut diagnostics = fields.finish();
    if let (Some(declared), Some(shape)) = (params, &shape)
        && let Some(derived) = crate::eval::llm::parameter_count(shape)
    {
        let differs = declared.abs_diff(derived).saturating_mul(20) > derived;
        if differs {
            let span = decl
                .body
                .fields
                .iter()
                .find(|f| f.key.name == "params")
                .map_or(decl.name.span, |f| f.span);
            diagnostics.push(
                Diagnostic::warning(
                    "W002",
                    span,
                    format!("`params` is {declared}, but the shape gives {derived}"),
                )
                .with_help(
                    "the declared count is used for the weights; check the shape or the count",
                ),
            );
        }
    }
    let ok = !diagnostics.iter().any(Diagnostic::is_error);
    let model = ok.then(|| Model {
        name: decl.name.name.clone(),
        title: decl.title.as_ref().map(|t| t.value.clone()),
        shape,
        params,
        span: decl.span,
    });
    (model, diagnostics)
}

pub(super) fn headroom(decl: &BlockDeclaration) -> (Option<Headroom>, Vec<Diagnostic>) {
    const KNOWN: &[(&str, Repeat)] =
        &[("keep", Repeat::Once), ("at_least", Repeat::Once), ("arch", Repeat::Many)];
    const ARCH_KNOWN: &[(&str, Repeat)] = &[("keep", Repeat::Once), ("at_least", Repeat::Once)];
    let what = format!("headroom `{}`", decl.name.name);
    let fields = Fields::new(&what, &decl.body, KNOWN);
    let mut diagnostics = Vec::new();
    let general = rule(&fields, &mut diagnostics);
    let mut per_arch = BTreeMap::new();
    let arch_names: Vec<&str> = Arch::ALL.iter().map(Arch::name).collect();
    for field in fields.all("arch") {
        let arch = if let [Value::Word(word)] = field.values.as_slice() {
            fields.word_in(field, word, &arch_names).and_then(Arch::from_name)
        } else {
            fields.push(Diagnostic::error("E013", field.span, "write `arch hopper { keep 5 % }`"));
            None
        };
        let Some(block) = &field.block else {
            fields.push(
                Diagnostic::error("E013", field.span, "`arch` needs a block with its own rule")
                    .with_help("write `arch hopper { keep 5 % }`"),
            );
            continue;
        };
        let inner = Fields::new("an architecture rule", block, ARCH_KNOWN);
        let arch_rule = rule(&inner, &mut diagnostics);
        diagnostics.extend(inner.finish());
        if let Some(arch) = arch {
            per_arch.insert(arch, arch_rule);
        }
    }
    diagnostics.extend(fields.finish());
    let ok = !diagnostics.iter().any(Diagnostic::is_error);
    let headroom = ok.then(|| Headroom { name: decl.name.name.clone(), general, per_arch });
    (headroom, diagnostics)
}

fn rule(fields: &Fields<'_>, diagnostics: &mut Vec<Diagnostic>) -> HeadroomRule {
    let keep = fields.get("keep").and_then(|field| {
        let (value, span) = fields.quantity(field, Dim::Percent, "10 %")?;
        if value.is_negative() || value >= Ratio::ONE {
            fields.push(Diagnostic::error(
                "E007",
                span,
                format!("`keep` is {}; it must be from 0 % to below 100 %", percent(value)),
            ));
            return None;
        }
        if value < Ratio::new(5, 100).unwrap_or(Ratio::ZERO) {
            diagnostics.push(
                Diagnostic::warning(
                    "W003",
                    span,
                    format!(
                        "keeping {} free leaves little room for fragmentation and spikes",
                        percent(value)
                    ),
                )
                .with_help("measured peaks vary run to run; 5-10 % is usual"),
            );
        }
        Some(value)
    });
    let at_least = fields.bytes("at_least", 0, MAX_DEVICE, "2 GiB");
    HeadroomRule { keep: keep.unwrap_or(Ratio::ZERO), at_least: at_least.unwrap_or(Bytes(0)) }
}

fn percent(value: Ratio) -> String {
    let scaled = value.checked_mul(Ratio::int(100)).unwrap_or(value);
    format!("{scaled} %")
}
