//! Checking `device`, `machine`, `model` and `headroom` blocks.

use super::Scope;
use super::fields::{Fields, Repeat};
use super::quantity::Dim;
use crate::ast::{BlockDeclaration, DeclarationKind, Value};
use crate::bytes::{Bytes, TIB};
use crate::diagnostic::Diagnostic;
use crate::hir::{Arch, Device, Headroom, HeadroomRule, Machine};
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
        ("reserved", Repeat::Once),
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
    // The driver's share of the framebuffer: less than the memory it is part of.
    let reserved = match (fields.get("reserved"), memory) {
        (Some(field), Some(memory)) => fields.bytes_of(field, 0, memory.0 - 1, "850 MiB"),
        (Some(field), None) => fields.bytes_of(field, 0, MAX_DEVICE, "850 MiB"),
        (None, _) => Some(Bytes::ZERO),
    };
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
    let device = match (memory, reserved, arch) {
        (Some(memory), Some(reserved), Some(arch)) if diagnostics.is_empty() => Some(Device {
            name: decl.name.name.clone(),
            title: decl.title.as_ref().map(|t| t.value.clone()),
            memory,
            memory_reported,
            reserved,
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

pub(super) fn headroom(decl: &BlockDeclaration) -> (Option<Headroom>, Vec<Diagnostic>) {
    const KNOWN: &[(&str, Repeat)] =
        &[("keep", Repeat::Once), ("at_least", Repeat::Once), ("arch", Repeat::Many)];
    const ARCH_KNOWN: &[(&str, Repeat)] = &[("keep", Repeat::Once), ("at_least", Repeat::Once)];
    let what = format!("headroom `{}`", decl.name.name);
    let fields = Fields::new(&what, &decl.body, KNOWN);
    let mut diagnostics = Vec::new();
    let general = rule(&fields, &mut diagnostics);
    let mut per_arch = crate::table::Table::new();
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
            per_arch.insert(arch.name().to_owned(), arch_rule);
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
