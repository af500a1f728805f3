//! Checking `check` lines: the workload, the devices it runs on, and how it is split.

use super::Scope;
use super::quantity::{self, Dim};
use crate::ast::{Check, DeclarationKind, Target};
use crate::diagnostic::Diagnostic;
use crate::hir::{CheckSpec, Layered, Split};
use crate::table::NameSet;

/// The most devices one check may span.
const MAX_DEVICES: u64 = 4096;

pub(super) fn check(
    check: &Check,
    scope: &Scope<'_>,
    program: &Layered<'_>,
    failed: &NameSet,
) -> (Option<CheckSpec>, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let mut ok = true;
    let mut refer = |ident: &crate::ast::Ident,
                     kinds: &[DeclarationKind],
                     diagnostics: &mut Vec<Diagnostic>| {
        match scope.expect(ident, kinds) {
            Ok(kind) => Some(kind),
            Err(diagnostic) => {
                diagnostics.push(diagnostic);
                ok = false;
                None
            }
        }
    };
    refer(&check.workload, &[DeclarationKind::Workload], &mut diagnostics);
    for other in &check.also {
        refer(other, &[DeclarationKind::Workload], &mut diagnostics);
    }
    if let Some(headroom) = &check.headroom {
        refer(headroom, &[DeclarationKind::Headroom], &mut diagnostics);
    }

    let (target, machine, devices) = match &check.target {
        Target::Named(name) => match refer(
            name,
            &[DeclarationKind::Device, DeclarationKind::Machine],
            &mut diagnostics,
        ) {
            Some(DeclarationKind::Machine) => {
                let devices = program.machine(&name.name).map(|m| {
                    m.gpus
                        .iter()
                        .flat_map(|(count, device)| {
                            std::iter::repeat_n(device.clone(), *count as usize)
                        })
                        .collect()
                });
                (name.name.clone(), Some(name.name.clone()), devices.unwrap_or_default())
            }
            _ => (name.name.clone(), None, vec![name.name.clone()]),
        },
        Target::Count(count) => {
            let kind = refer(&count.name, &[DeclarationKind::Device], &mut diagnostics);
            let n = match quantity::evaluate(&count.count) {
                Ok(q) if q.dim == Dim::Count && q.value.is_integer() => {
                    match u64::try_from(q.value.numer()) {
                        Ok(n) if (1..=MAX_DEVICES).contains(&n) => Some(n),
                        _ => {
                            diagnostics.push(Diagnostic::error(
                                "E007",
                                count.count.span(),
                                format!(
                                    "a check runs on 1 to {MAX_DEVICES} devices, not {}",
                                    q.value
                                ),
                            ));
                            None
                        }
                    }
                }
                Ok(q) if q.dim == Dim::Count => {
                    diagnostics.push(Diagnostic::error(
                        "E006",
                        count.count.span(),
                        format!("a device count must be whole, not {}", q.value),
                    ));
                    None
                }
                Ok(q) => {
                    diagnostics.push(Diagnostic::error(
                        "E005",
                        count.count.span(),
                        format!("a device count is a plain number, not {}", q.dim),
                    ));
                    None
                }
                Err(diagnostic) => {
                    diagnostics.push(diagnostic);
                    None
                }
            };
            if let (Some(n), Some(_)) = (n, kind) {
                let device = count.name.name.clone();
                (format!("{n} x {device}"), None, vec![device; usize::try_from(n).unwrap_or(1)])
            } else {
                ok = false;
                (String::new(), None, Vec::new())
            }
        }
    };

    let split = split(check, devices.len() as u64, &mut diagnostics);
    if split.is_none() {
        ok = false;
    }
    let sharing = std::iter::once(&check.workload).chain(&check.also);
    for workload in sharing.filter_map(|w| program.workload(&w.name)) {
        let Some(split) = split else { break };
        let sequential = workload
            .training
            .as_ref()
            .is_some_and(|t| t.pipeline_schedule == crate::hir::PipelineSchedule::Sequential);
        if sequential && split.pipeline == 1 {
            diagnostics.push(
                Diagnostic::warning(
                    "W005",
                    check.span,
                    format!(
                        "`pipeline_schedule sequential` of `{}` has no effect without \
                         `split pipeline N`",
                        workload.name
                    ),
                )
                .with_help(
                    "split the layers over the devices (`split pipeline 2`), or remove the setting",
                ),
            );
        }
        let shape =
            workload.model.as_ref().and_then(|m| program.model(m)).and_then(|m| m.shape.as_ref());
        if let Some(shape) = shape {
            let tensor = u64::from(split.tensor);
            if shape.heads % tensor != 0 {
                ok = false;
                diagnostics.push(
                    Diagnostic::error(
                        "E031",
                        check.span,
                        format!(
                            "{} attention heads do not divide over tensor parallel {tensor}",
                            shape.heads
                        ),
                    )
                    .with_help("choose a tensor degree that divides the number of heads"),
                );
            }
            if u64::from(split.pipeline) > shape.layers {
                ok = false;
                diagnostics.push(Diagnostic::error(
                    "E031",
                    check.span,
                    format!(
                        "{} layers cannot fill {} pipeline stages",
                        shape.layers, split.pipeline
                    ),
                ));
            }
        }
    }
    let stage_layers = stage_layers(check, split, program, &mut diagnostics);
    if !check.stage_layers.is_empty() && stage_layers.is_none() {
        ok = false;
    }
    let depends_on_failed = failed.contains(&check.workload.name)
        || check.also.iter().any(|w| failed.contains(&w.name))
        || check.also.iter().any(|w| {
            program
                .workload(&w.name)
                .is_none_or(|w| w.model.as_ref().is_some_and(|m| failed.contains(m)))
        })
        || devices.iter().any(|d| failed.contains(d))
        || machine.as_ref().is_some_and(|m| failed.contains(m))
        || check.headroom.as_ref().is_some_and(|h| failed.contains(&h.name))
        || program
            .workload(&check.workload.name)
            .is_none_or(|w| w.model.as_ref().is_some_and(|m| failed.contains(m)));
    let spec = match (ok && !depends_on_failed, split) {
        (true, Some(split)) => Some(CheckSpec {
            id: format!(
                "{} on {target}",
                std::iter::once(&check.workload)
                    .chain(&check.also)
                    .map(|w| w.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
            title: check.title.as_ref().map(|t| t.value.clone()),
            workload: check.workload.name.clone(),
            also: check.also.iter().map(|w| w.name.clone()).collect(),
            target,
            machine,
            devices,
            split,
            stage_layers,
            headroom: check.headroom.as_ref().map(|h| h.name.clone()),
            span: check.span,
        }),
        _ => None,
    };
    (spec, diagnostics)
}

fn split(check: &Check, devices: u64, diagnostics: &mut Vec<Diagnostic>) -> Option<Split> {
    let mut split = Split::NONE;
    let mut seen: Vec<&str> = Vec::new();
    let mut ok = true;
    for part in &check.split {
        let name = part.strategy.name.as_str();
        if seen.contains(&name) {
            diagnostics.push(Diagnostic::error(
                "E012",
                part.strategy.span,
                format!("`{name}` is given twice in the split"),
            ));
            ok = false;
            continue;
        }
        seen.push(name);
        let degree = match quantity::evaluate(&part.degree) {
            Ok(q) if q.dim == Dim::Count && q.value.is_integer() => {
                u32::try_from(q.value.numer()).ok().filter(|d| (1..=4096).contains(d))
            }
            Ok(_) => None,
            Err(diagnostic) => {
                diagnostics.push(diagnostic);
                ok = false;
                continue;
            }
        };
        let Some(degree) = degree else {
            diagnostics.push(Diagnostic::error(
                "E007",
                part.degree.span(),
                "a split degree is a whole number from 1 to 4096",
            ));
            ok = false;
            continue;
        };
        match name {
            "tensor" => split.tensor = degree,
            "pipeline" => split.pipeline = degree,
            "data" => split.data = degree,
            _ => {
                let mut diagnostic = Diagnostic::error(
                    "E015",
                    part.strategy.span,
                    format!("`{name}` is not a way to split work"),
                );
                diagnostic = match super::suggest(name, &["tensor", "pipeline", "data"]) {
                    Some(near) => diagnostic.with_help(format!("did you mean `{near}`?")),
                    None => diagnostic.with_help("split by `tensor`, `pipeline` or `data`"),
                };
                diagnostics.push(diagnostic);
                ok = false;
            }
        }
    }
    if !ok {
        return None;
    }
    if devices == 0 {
        return None;
    }
    if split.devices() != devices {
        let message = if check.split.is_empty() {
            format!("{devices} devices are not one pooled memory: say how the work is split")
        } else {
            format!("the split covers {} devices, but the target has {devices}", split.devices())
        };
        diagnostics.push(
            Diagnostic::error("E030", check.span, message)
                .with_help(format!("for example `split tensor {devices}` (weights divided) or `split data {devices}` (full replicas)")),
        );
        return None;
    }
    Some(split)
}

/// The declared layers per pipeline stage (`split pipeline 2 layers 24 56`): whole, one per
/// stage, adding up to the model's layers. `None` when none are declared or they are wrong.
fn stage_layers(
    check: &Check,
    split: Option<Split>,
    program: &Layered<'_>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Vec<u64>> {
    if check.stage_layers.is_empty() {
        return None;
    }
    let mut layers = Vec::new();
    for expr in &check.stage_layers {
        match quantity::evaluate(expr) {
            Ok(q)
                if q.dim == Dim::Count
                    && q.value.is_integer()
                    && q.value >= crate::ratio::Ratio::ONE
                    && q.value <= crate::ratio::Ratio::int(1 << 20) =>
            {
                layers.push(u64::try_from(q.value.numer()).unwrap_or(1));
            }
            Ok(_) => {
                diagnostics.push(Diagnostic::error(
                    "E007",
                    expr.span(),
                    "the layers of a pipeline stage are a whole number from 1 to 1,048,576",
                ));
                return None;
            }
            Err(diagnostic) => {
                diagnostics.push(diagnostic);
                return None;
            }
        }
    }
    let split = split?;
    let span =
        check.stage_layers[0].span().to(check.stage_layers[check.stage_layers.len() - 1].span());
    if layers.len() as u64 != u64::from(split.pipeline) {
        diagnostics.push(
            Diagnostic::error(
                "E030",
                span,
                format!(
                    "`layers` lists {} stages, but the split has {} pipeline stages",
                    layers.len(),
                    split.pipeline
                ),
            )
            .with_help("give one layer count per pipeline stage, in stage order"),
        );
        return None;
    }
    let workload = program.workload(&check.workload.name);
    let shape = workload
        .and_then(|w| w.model.as_ref())
        .and_then(|m| program.model(m))
        .and_then(|m| m.shape.as_ref());
    let total: u64 = layers.iter().sum();
    // Under llama.cpp's partial offload the stages divide the layers on the devices.
    let offload = workload
        .and_then(|w| w.inference.as_ref())
        .zip(shape)
        .and_then(|(inference, shape)| crate::eval::offload::Offload::of(inference, shape));
    if let Some(shape) = shape {
        let on_devices = offload.map_or(shape.layers, |o| o.device_layers(shape));
        if total != on_devices {
            let (what, help) = match offload {
                Some(_) => (
                    format!("`gpu_layers` puts {on_devices} layers on the devices"),
                    "the layers of the stages must add up to the layers on the devices",
                ),
                None => (
                    format!("the model has {}", shape.layers),
                    "the layers of the stages must add up to the model's layers",
                ),
            };
            diagnostics.push(
                Diagnostic::error(
                    "E031",
                    span,
                    format!("the stages hold {total} layers, but {what}"),
                )
                .with_help(help),
            );
            return None;
        }
    }
    Some(layers)
}
