//! The check pass: syntax tree to checked declarations ([`crate::hir::Program`]).
//!
//! It resolves names (across the file and the built-in catalog), checks units, fields and
//! ranges, and collects every error rather than stopping at the first. A declaration with an
//! error is left out of the program, and so are the checks that use it, so one mistake is
//! reported once, not again by everything downstream.

mod bitsandbytes_release;
mod block_swap;
mod controlnet;
mod decls;
mod diffusion;
mod fields;
mod imported;
mod method;
mod model;
mod quantity;
mod query;
mod scene;
mod target;
mod torch_release;
mod training;
mod workload;

use crate::ast::{Declaration, DeclarationKind, Expr, File, Ident};
use crate::diagnostic::Diagnostic;
use crate::hir::{Layered, Program};
use crate::span::Span;
use crate::table::{NameSet, Table};

pub use fields::{edit_distance, suggest};

/// Where a name was declared.
#[derive(Clone, Copy, Debug)]
struct Declared {
    kind: DeclarationKind,
    /// `None` for catalog entries, whose spans point into another text.
    span: Option<Span>,
}

/// All names visible to a file: its own declarations over the catalog's.
pub(crate) struct Scope<'a> {
    names: Table<Declared>,
    base: &'a Program,
    program_models_without_shape: NameSet,
    /// Models with neither a shape nor a `largest_module`: sequential offload cannot size the
    /// module it has on the device.
    program_models_without_largest_module: NameSet,
    /// Models that declare no top-level blocks: block-level group offloading holds them whole.
    program_models_without_blocks: NameSet,
    /// Models without `attention_qkv`: fused q/k/v projections cannot be sized.
    program_models_without_attention_qkv: NameSet,
    /// Models with an encoder stack, whose workloads give the encoder's `source` length.
    program_encoder_decoder_models: NameSet,
    /// Models with a decoder-only shape, whose workloads have no `source` to give.
    program_decoder_models: NameSet,
    /// Models whose attention transformers computes eagerly whatever is asked: T5's relative
    /// position bias is added to the scores, and `T5Attention` has no fused (SDPA or flash) path.
    program_eager_attention_models: NameSet,
    /// Models with a shape and no experts, for which `cpu_moe_layers` does nothing.
    program_dense_models: NameSet,
}

impl Scope<'_> {
    /// What `name` refers to: the file's own declaration, else the base program's entry.
    fn lookup(&self, name: &str) -> Option<Declared> {
        if let Some(declared) = self.names.get(name) {
            return Some(*declared);
        }
        let base = self.base;
        let kind = if base.devices.contains_key(name) {
            DeclarationKind::Device
        } else if base.machines.contains_key(name) {
            DeclarationKind::Machine
        } else if base.models.contains_key(name) {
            DeclarationKind::Model
        } else if base.workloads.contains_key(name) {
            DeclarationKind::Workload
        } else if base.headrooms.contains_key(name) {
            DeclarationKind::Headroom
        } else {
            return None;
        };
        Some(Declared { kind, span: None })
    }

    /// Every visible name of one of `kinds`, for suggestions.
    fn names_of(&self, kinds: &[DeclarationKind]) -> Vec<&str> {
        let base = self.base;
        let mut names: Vec<&str> = self
            .names
            .iter()
            .filter(|(_, d)| kinds.contains(&d.kind))
            .map(|(n, _)| n.as_str())
            .collect();
        for kind in kinds {
            let keys: Vec<&str> = match kind {
                DeclarationKind::Device => base.devices.keys().map(String::as_str).collect(),
                DeclarationKind::Machine => base.machines.keys().map(String::as_str).collect(),
                DeclarationKind::Model => base.models.keys().map(String::as_str).collect(),
                DeclarationKind::Workload => base.workloads.keys().map(String::as_str).collect(),
                DeclarationKind::Headroom => base.headrooms.keys().map(String::as_str).collect(),
            };
            names.extend(keys);
        }
        names
    }

    /// Checks that `ident` names a declaration of one of `kinds`.
    fn expect(
        &self,
        ident: &Ident,
        kinds: &[DeclarationKind],
    ) -> Result<DeclarationKind, Diagnostic> {
        let wanted = kinds.iter().map(|k| k.keyword()).collect::<Vec<_>>().join(" or ");
        match self.lookup(&ident.name) {
            Some(declared) if kinds.contains(&declared.kind) => Ok(declared.kind),
            Some(declared) => {
                let mut diagnostic = Diagnostic::error(
                    "E022",
                    ident.span,
                    format!("`{}` is a {}, not a {wanted}", ident.name, declared.kind.keyword()),
                );
                if let Some(span) = declared.span {
                    diagnostic = diagnostic.with_label(
                        span,
                        format!("the {} is declared here", declared.kind.keyword()),
                    );
                }
                Err(diagnostic)
            }
            None => {
                let candidates = self.names_of(kinds);
                let mut diagnostic = Diagnostic::error(
                    "E020",
                    ident.span,
                    format!("no {wanted} is named `{}`", ident.name),
                );
                diagnostic = match suggest(&ident.name, &candidates) {
                    Some(near) => diagnostic.with_help(format!("did you mean `{near}`?")),
                    None if kinds.contains(&DeclarationKind::Device) => diagnostic
                        .with_help("`vram catalog` lists the built-in devices and machines"),
                    None => diagnostic.with_help(format!(
                        "declare it: `{} {} {{ ... }}`",
                        kinds[0].keyword(),
                        ident.name
                    )),
                };
                Err(diagnostic)
            }
        }
    }
}

/// Checks `file` against the names already in `base` (the built-in catalog), returning the
/// file's checked declarations layered over `base`, and every diagnostic. `from_catalog` marks
/// the catalog's own check.
pub fn check<'a>(
    file: &File,
    base: &'a Program,
    from_catalog: bool,
) -> (Layered<'a>, Vec<Diagnostic>) {
    check_with_imports(file, base, from_catalog, &crate::import::Imports::new())
}

/// [`check`], with the models a front end imported for the file's `from "path"`s.
pub fn check_with_imports<'a>(
    file: &File,
    base: &'a Program,
    from_catalog: bool,
    imports: &crate::import::Imports,
) -> (Layered<'a>, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let mut program = Program::default();

    // Names first, so declarations may refer to ones that come later in the file.
    let mut names: Table<Declared> = Table::new();
    let base_scope = Scope {
        names: Table::new(),
        base,
        program_models_without_shape: NameSet::default(),
        program_models_without_largest_module: NameSet::default(),
        program_models_without_blocks: NameSet::default(),
        program_models_without_attention_qkv: NameSet::default(),
        program_encoder_decoder_models: NameSet::default(),
        program_decoder_models: NameSet::default(),
        program_eager_attention_models: NameSet::default(),
        program_dense_models: NameSet::default(),
    };
    let mut own: Table<&Ident> = Table::new();
    for declaration in &file.declarations {
        let Declaration::Block(decl) = declaration else { continue };
        if let Some(first) = own.get(decl.name.name.as_str()) {
            diagnostics.push(
                Diagnostic::error(
                    "E021",
                    decl.name.span,
                    format!("`{}` is declared twice", decl.name.name),
                )
                .with_label(first.span, "first declared here")
                .with_help("give each declaration its own name"),
            );
            continue;
        }
        own.insert(decl.name.name.clone(), &decl.name);
        if let Some(previous) = base_scope.lookup(&decl.name.name) {
            diagnostics.push(
                Diagnostic::warning(
                    "W001",
                    decl.name.span,
                    format!(
                        "`{}` replaces the catalog's {} of the same name",
                        decl.name.name,
                        previous.kind.keyword()
                    ),
                )
                .with_help("rename it to keep the catalog entry visible"),
            );
        }
        names.insert(
            decl.name.name.clone(),
            Declared { kind: decl.kind, span: Some(decl.name.span) },
        );
    }

    let mut scope = Scope {
        names,
        base,
        program_models_without_shape: NameSet::default(),
        program_models_without_largest_module: NameSet::default(),
        program_models_without_blocks: NameSet::default(),
        program_models_without_attention_qkv: NameSet::default(),
        program_encoder_decoder_models: NameSet::default(),
        program_decoder_models: NameSet::default(),
        program_eager_attention_models: NameSet::default(),
        program_dense_models: NameSet::default(),
    };

    // Models first: workloads need to know whether their model has a shape.
    let mut failed = NameSet::default();
    let blocks = file.declarations.iter().filter_map(|d| match d {
        Declaration::Block(decl) => Some(decl),
        Declaration::Check(_) | Declaration::Find(_) => None,
    });
    let mut seen = NameSet::default();
    let blocks: Vec<_> = blocks.filter(|decl| seen.insert(decl.name.name.clone())).collect();
    for decl in blocks.iter().filter(|d| d.kind == DeclarationKind::Model) {
        let (model, found) = model::model(decl, imports);
        diagnostics.extend(found);
        match model {
            Some(model) => {
                program.models.insert(model.name.clone(), model);
            }
            None => {
                failed.insert(decl.name.name.clone());
            }
        }
    }
    // The program's models, and the catalog's it does not redeclare, that lack something.
    let lacking = |lacks: fn(&crate::hir::Model) -> bool| -> NameSet {
        program
            .models
            .values()
            .chain(base.models.values().filter(|m| !program.models.contains_key(&m.name)))
            .filter(|m| lacks(m))
            .map(|m| m.name.clone())
            .collect()
    };
    scope.program_models_without_shape = lacking(|m| m.shape.is_none());
    scope.program_models_without_largest_module = lacking(|m| !m.sizes_its_largest_module());
    scope.program_models_without_blocks = lacking(|m| m.blocks.is_none());
    scope.program_models_without_attention_qkv = lacking(|m| m.attention_qkv.is_none());
    // A model that failed its own check is in neither set, so its workloads get no second error.
    for model in program
        .models
        .values()
        .chain(base.models.values().filter(|m| !program.models.contains_key(&m.name)))
    {
        let encoder = model.shape.as_ref().and_then(|s| s.encoder.as_ref());
        if encoder.is_some_and(|e| e.relative_buckets > 0) {
            scope.program_eager_attention_models.insert(model.name.clone());
        }
        if model.shape.as_ref().is_some_and(|s| s.moe.is_none()) {
            scope.program_dense_models.insert(model.name.clone());
        }
        match model.shape.as_ref().map(|s| s.encoder.is_some()) {
            Some(true) => scope.program_encoder_decoder_models.insert(model.name.clone()),
            Some(false) => scope.program_decoder_models.insert(model.name.clone()),
            None => false,
        };
    }
    for decl in blocks.iter().filter(|d| d.kind != DeclarationKind::Model) {
        let name = decl.name.name.clone();
        let ok = match decl.kind {
            DeclarationKind::Device => {
                let (device, found) = decls::device(decl, from_catalog);
                diagnostics.extend(found);
                device.map(|d| program.devices.insert(name.clone(), d)).is_some()
            }
            DeclarationKind::Machine => {
                let (machine, found) = decls::machine(decl, &scope);
                diagnostics.extend(found);
                machine.map(|m| program.machines.insert(name.clone(), m)).is_some()
            }
            DeclarationKind::Headroom => {
                let (headroom, found) = decls::headroom(decl);
                diagnostics.extend(found);
                headroom.map(|h| program.headrooms.insert(name.clone(), h)).is_some()
            }
            DeclarationKind::Workload => {
                let (workload, found) = workload::workload(decl, &scope);
                diagnostics.extend(found);
                workload.map(|w| program.workloads.insert(name.clone(), w)).is_some()
            }
            DeclarationKind::Model => true,
        };
        if !ok {
            failed.insert(name);
        }
    }

    let mut program = Layered { own: program, base };
    let mut ids = NameSet::default();
    for declaration in &file.declarations {
        let Declaration::Check(check) = declaration else { continue };
        let (spec, found) = target::check(check, &scope, &program, &failed);
        diagnostics.extend(found);
        if let Some(mut spec) = spec {
            let base_id = spec.id.clone();
            let mut n = 2;
            while !ids.insert(spec.id.clone()) {
                spec.id = format!("{base_id} #{n}");
                n += 1;
            }
            program.own.checks.push(spec);
        }
    }
    for declaration in &file.declarations {
        let Declaration::Find(find) = declaration else { continue };
        let (spec, found) = query::query(find, &scope, &program, &failed);
        diagnostics.extend(found);
        program.own.queries.extend(spec);
    }
    Diagnostic::sort_by_position(&mut diagnostics);
    (program, diagnostics)
}

/// Prints an expression in canonical form: `3840 * 2160 * 4 B`. Used as a component's formula
/// and by `vram fmt`.
pub fn format_expr(expr: &Expr) -> String {
    match expr {
        Expr::Number { raw, .. } => raw.clone(),
        Expr::Neg { operand, .. } => format!("-{}", format_expr(operand)),
        Expr::Binary { op, lhs, rhs, .. } => {
            format!("{} {} {}", format_expr(lhs), op.symbol(), format_expr(rhs))
        }
        Expr::Unit { operand, unit, .. } => {
            let operand = format_expr(operand);
            if unit.text() == "%" {
                format!("{operand} %")
            } else {
                format!("{operand} {}", unit.text())
            }
        }
        Expr::Group { inner, .. } => format!("({})", format_expr(inner)),
    }
}
