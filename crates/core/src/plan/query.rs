//! Answers to `find` queries: each one a search by the [`Planner`], stated with its evidence.

use super::machines;
use super::search::Boundary;
use super::suggest::{
    check_line, devices_detail, machine_detail, max_detail, report, verdict_words,
};
use super::{Knob, PRECISION_WARNING, Planner, Stop};
use crate::budget::{MachineAnswer, QueryAnswer, QueryKind};
use crate::bytes::group_thousands;
use crate::diagnostic::Diagnostic;
use crate::hir::{Goal, Layered, QuerySpec};

/// Answers every query of `program`, in file order. A precision change found adds warning
/// `W004`; a byte count past 64 bits adds `E032`.
pub fn answer_all(program: &Layered<'_>, diagnostics: &mut Vec<Diagnostic>) -> Vec<QueryAnswer> {
    let mut answers = Vec::new();
    for query in program.queries() {
        let Some(mut planner) = Planner::new(program, &query.check) else { continue };
        match answer(&mut planner, program, query) {
            Ok(answer) => {
                if answer.kind == QueryKind::Precision && answer.warning.is_some() {
                    diagnostics.push(
                        Diagnostic::warning(
                            "W004",
                            query.span,
                            format!("`{}` fits only with `{}`", query.check.workload, answer.answer),
                        )
                        .with_help(PRECISION_WARNING),
                    );
                }
                answers.push(answer);
            }
            Err(Stop::Overflow) => diagnostics.push(
                Diagnostic::error(
                    "E032",
                    query.span,
                    format!("the search of `{}` overflows 64-bit byte counts", query.text),
                )
                .with_help("some quantity is far beyond any real device; check the units and counts"),
            ),
            Err(Stop::Unsupported) => answers.push(QueryAnswer {
                query: query.text.clone(),
                workload: query.check.workload.clone(),
                kind: kind(&query.goal),
                answer: "cannot run".to_string(),
                value: None,
                split: None,
                machines: Vec::new(),
                detail: "the device cannot run this workload whatever its memory (see the capability check)".to_string(),
                warning: None,
            }),
        }
    }
    answers
}

fn kind(goal: &Goal) -> QueryKind {
    match goal {
        Goal::Max(Knob::Sessions) => QueryKind::MaxSessions,
        Goal::Max(Knob::Context) => QueryKind::MaxContext,
        Goal::Max(Knob::Batch) => QueryKind::MaxBatch,
        Goal::Max(Knob::GpuLayers) => QueryKind::MaxGpuLayers,
        Goal::MinDevices(_) => QueryKind::MinDevices,
        Goal::Machines => QueryKind::Machines,
        Goal::Precision => QueryKind::Precision,
    }
}

fn answer(
    planner: &mut Planner<'_>,
    program: &Layered<'_>,
    query: &QuerySpec,
) -> Result<QueryAnswer, Stop> {
    let mut out = QueryAnswer {
        query: query.text.clone(),
        workload: query.check.workload.clone(),
        kind: kind(&query.goal),
        answer: "nothing fits".to_string(),
        value: None,
        split: None,
        machines: Vec::new(),
        detail: String::new(),
        warning: None,
    };
    match &query.goal {
        Goal::Max(knob) => {
            let Some(found) = planner.find_max(*knob)? else { return Ok(out) };
            out.detail = max_detail(&found, planner);
            match found.boundary {
                Boundary::Largest(x) | Boundary::Limit(x) => {
                    out.answer = super::suggest::change_for(planner, *knob, x);
                    out.value = Some(x);
                }
                Boundary::NoneFits => {}
            }
            if let Boundary::Limit(x) = found.boundary {
                out.answer = format!("{} (the largest the language accepts)", group_thousands(x));
            }
        }
        Goal::MinDevices(device) => {
            if let Some(found) = planner.min_devices(device)? {
                out.answer = check_line(&query.check.workload, found.count, device, found.split);
                out.value = Some(found.count);
                out.split = Some(found.split);
                out.detail = devices_detail(&found);
            } else {
                let most = planner.device_splits().last().map_or(1, |s| s.devices());
                out.detail = format!("not even {most} x {device}, the most the planner tries");
            }
        }
        Goal::Machines => {
            let fits = machines::fitting(planner, program, usize::MAX)?;
            out.answer = match fits.len() {
                0 => "no catalog machine fits".to_string(),
                1 => "1 machine".to_string(),
                n => format!("{n} machines"),
            };
            out.value = Some(fits.len() as u64);
            out.detail = fits.first().map_or_else(
                || format!("{} machines tried", machines::all(program).len()),
                |first| format!("smallest: {}", machine_detail(first)),
            );
            out.machines = fits
                .into_iter()
                .map(|fit| MachineAnswer {
                    machine: fit.name,
                    title: fit.title,
                    gpus: fit.gpus,
                    gpu_memory: fit.gpu_memory,
                    split: report(fit.split),
                    verdict: fit.verdict,
                })
                .collect();
        }
        Goal::Precision => {
            let declared = planner.declared_verdict()?;
            let weights = planner
                .workload()
                .inference
                .as_ref()
                .map(|i| i.weights.name().into_owned())
                .unwrap_or_default();
            if declared.fits() {
                out.answer = format!("weights {weights} (as declared)");
                out.detail = format!("weights {weights} as declared: {}", verdict_words(&declared));
            } else if let Some(found) = planner.find_precision()? {
                out.answer = super::suggest::precision_change(&found);
                out.detail = format!(
                    "{} (declared: weights {}): {}; as declared: {}",
                    out.answer,
                    found.declared,
                    verdict_words(&found.at),
                    verdict_words(&declared)
                );
                out.warning = Some(PRECISION_WARNING.to_string());
            } else {
                out.detail = format!(
                    "weights {weights} as declared: {}; no smaller format the devices run fits",
                    verdict_words(&declared)
                );
            }
        }
    }
    Ok(out)
}
