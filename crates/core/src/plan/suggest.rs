//! Suggestions on an over-budget check: each one computed by a search over the evaluator, and
//! stated with its evidence (the verdict at the suggestion and one step beyond).
//!
//! In order: the largest sessions at the declared context, the largest context at the declared
//! sessions, the largest batch, for llama.cpp the fewest layers whose experts stay in host
//! memory (a mixture of experts) and the most layers on the devices, the fewest devices of the check's kind and their split, a
//! diffusion pipeline's memory option (a tiled decode, models offloaded in turn, a trained
//! denoiser's blocks swapped to the host), a training
//! step's memory levers (checkpointing, 8-bit moments, a step in the backward pass, a chunked
//! loss, the optimizer on the host), a smaller precision (with the quality warning), and up to three catalog machines. A check whose
//! device cannot run it (capability, not capacity) gets the precisions the device does run
//! and the machines.

use std::fmt::Write as _;

use super::machines::{self, MachineFit};
use super::search::Boundary;
use super::{Knob, MaxAnswer, PRECISION_WARNING, Planner, Stop};
use crate::budget::{SplitReport, Suggestion, SuggestionKind, Verdict};
use crate::bytes::group_thousands;
use crate::hir::{CheckSpec, Layered, Split};

/// How many machines a suggestion lists; `find machines` lists them all.
const MACHINES: usize = 3;

/// The suggestions for `spec`, whose budget is over. Empty when nothing the planner can change
/// makes it fit.
pub fn suggestions(program: &Layered<'_>, spec: &CheckSpec) -> Result<Vec<Suggestion>, Stop> {
    let Some(mut planner) = Planner::new(program, spec) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for knob in [Knob::Sessions, Knob::Context, Knob::Batch] {
        out.extend(smaller(&mut planner, knob)?);
    }
    // Experts leave the devices before whole layers do: a token reads only its experts.
    out.extend(experts_to_host(&mut planner)?);
    out.extend(smaller(&mut planner, Knob::GpuLayers)?);
    // More devices of the same kind, when the check is on one kind and not on a machine.
    let first = spec.devices.first().cloned();
    if let Some(device) =
        first.filter(|d| spec.machine.is_none() && spec.devices.iter().all(|x| x == d))
        && let Some(answer) = planner.min_devices(&device)?
        && answer.count > spec.devices.len() as u64
    {
        out.push(Suggestion {
            kind: SuggestionKind::Devices,
            change: check_line(&spec.workload, answer.count, &device, answer.split),
            detail: devices_detail(&answer),
            value: Some(answer.count),
            split: Some(answer.split),
            warning: None,
        });
    }
    if let Some(answer) = planner.find_pipeline_option()? {
        out.push(option_suggestion(SuggestionKind::Pipeline, answer.change, &answer.at));
    }
    if let Some(answer) = planner.find_training_option()? {
        out.push(option_suggestion(SuggestionKind::Training, answer.change, &answer.at));
    }
    if let Some(answer) = planner.find_pool_option()? {
        out.push(option_suggestion(SuggestionKind::Runtime, answer.change, &answer.at));
    }
    if let Some(answer) = planner.find_precision()? {
        out.push(precision_suggestion(&answer));
    }
    for fit in machines::fitting(&mut planner, program, MACHINES)? {
        out.push(machine_suggestion(&spec.workload, &fit));
    }
    Ok(out)
}

/// The largest value of `knob` that fits, when it is below the declared one.
fn smaller(planner: &mut Planner<'_>, knob: Knob) -> Result<Option<Suggestion>, Stop> {
    let Some(answer) = planner.find_max(knob)? else { return Ok(None) };
    let Boundary::Largest(value) = answer.boundary else { return Ok(None) };
    if value >= answer.declared {
        return Ok(None);
    }
    Ok(Some(Suggestion {
        kind: match knob {
            Knob::Sessions => SuggestionKind::Sessions,
            Knob::Context => SuggestionKind::Context,
            Knob::Batch => SuggestionKind::Batch,
            Knob::GpuLayers => SuggestionKind::GpuLayers,
        },
        change: change_for(planner, knob, value),
        detail: max_detail(&answer, planner),
        value: Some(value),
        split: None,
        warning: None,
    }))
}

/// The fewest layers whose routed experts llama.cpp keeps in host memory for the check to fit.
fn experts_to_host(planner: &mut Planner<'_>) -> Result<Option<Suggestion>, Stop> {
    let Some(answer) = planner.find_cpu_moe()? else { return Ok(None) };
    let change = format!("cpu_moe_layers {}", answer.layers);
    Ok(Some(Suggestion {
        kind: SuggestionKind::Experts,
        detail: format!(
            "{change}: {}; cpu_moe_layers {}: {}",
            verdict_words(&answer.at),
            answer.layers - 1,
            verdict_words(&answer.below)
        ),
        change,
        value: Some(answer.layers),
        split: None,
        warning: None,
    }))
}

/// A set of settings written into the workload (a pipeline's memory options, a training
/// step's levers), with the verdict they reach.
fn option_suggestion(kind: SuggestionKind, change: String, at: &Verdict) -> Suggestion {
    Suggestion {
        kind,
        detail: format!("{change}: {}", verdict_words(at)),
        change,
        value: None,
        split: None,
        warning: None,
    }
}

/// The suggestions for `spec`, whose device cannot run it (capability, not capacity): a weight
/// format the devices run that fits, and catalog machines that fit. Sessions, context and more
/// devices of the same kind cannot help.
pub fn runnable(program: &Layered<'_>, spec: &CheckSpec) -> Result<Vec<Suggestion>, Stop> {
    let Some(mut planner) = Planner::new(program, spec) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    if let Some(answer) = planner.find_precision()? {
        out.push(precision_suggestion(&answer));
    }
    for fit in machines::fitting(&mut planner, program, MACHINES)? {
        out.push(machine_suggestion(&spec.workload, &fit));
    }
    Ok(out)
}

fn precision_suggestion(answer: &super::PrecisionAnswer) -> Suggestion {
    Suggestion {
        kind: SuggestionKind::Precision,
        change: precision_change(answer),
        detail: format!(
            "{} (declared: weights {}): {}",
            precision_change(answer),
            answer.declared,
            verdict_words(&answer.at)
        ),
        value: None,
        split: None,
        warning: Some(PRECISION_WARNING.to_string()),
    }
}

fn machine_suggestion(workload: &str, fit: &MachineFit) -> Suggestion {
    Suggestion {
        kind: SuggestionKind::Machine,
        change: machine_line(workload, &fit.name, report(fit.split)),
        detail: machine_detail(fit),
        value: Some(fit.gpus),
        split: Some(report(fit.split)),
        warning: None,
    }
}

/// `weights fp8`, or `weights bf16; kv_cache fp8`.
pub fn precision_change(answer: &super::PrecisionAnswer) -> String {
    match &answer.kv_cache {
        Some(kv) => format!("weights {}; kv_cache {kv}", answer.weights),
        None => format!("weights {}", answer.weights),
    }
}

/// `sessions 23`, `context 12288 tokens`, `micro_batch 2`.
pub fn change_for(planner: &Planner<'_>, knob: Knob, value: u64) -> String {
    let w = planner.workload();
    match knob {
        Knob::Sessions => format!("sessions {value}"),
        Knob::Context if w.inference.is_some() => format!("context {value} tokens"),
        Knob::Context => format!("sequence {value} tokens"),
        Knob::Batch if w.training.is_some() => format!("micro_batch {value}"),
        Knob::Batch => format!("batch {value}"),
        Knob::GpuLayers => format!("gpu_layers {value}"),
    }
}

/// `23 sessions fit (1.20 GiB free beyond headroom); 24 are over by 310.00 MiB`.
pub fn max_detail(answer: &MaxAnswer, planner: &Planner<'_>) -> String {
    let what = |v: u64| quantity(answer.knob, v);
    let context = match answer.knob {
        Knob::Sessions => planner
            .declared(Knob::Context)
            .map(|c| format!(" at {} tokens", group_thousands(c)))
            .unwrap_or_default(),
        Knob::Context => planner
            .declared(Knob::Sessions)
            .or_else(|| planner.declared(Knob::Batch))
            .map(|s| {
                format!(
                    " with {} {}",
                    group_thousands(s),
                    if planner.workload().inference.is_some() { "sessions" } else { "per batch" }
                )
            })
            .unwrap_or_default(),
        Knob::Batch => String::new(),
        Knob::GpuLayers => planner
            .declared(Knob::Context)
            .map(|c| format!(" at {} tokens", group_thousands(c)))
            .unwrap_or_default(),
    };
    match (answer.boundary, &answer.at, &answer.beyond) {
        (Boundary::Largest(x), Some(at), Some(beyond)) => format!(
            "{}{context}: {}; {}: {}",
            what(x),
            verdict_words(at),
            what(x + 1),
            verdict_words(beyond)
        ),
        (Boundary::Limit(x), Some(at), _) => {
            format!(
                "{}{context}: {} (the largest value the language accepts)",
                what(x),
                verdict_words(at)
            )
        }
        (_, _, Some(beyond)) => format!("not even {}{context}: {}", what(1), verdict_words(beyond)),
        _ => String::new(),
    }
}

fn quantity(knob: Knob, value: u64) -> String {
    match knob {
        Knob::Sessions if value == 1 => "1 session".to_string(),
        Knob::Context => format!("{} tokens", group_thousands(value)),
        Knob::Batch => format!("batch {}", group_thousands(value)),
        Knob::GpuLayers => format!("gpu_layers {value}"),
        Knob::Sessions => format!("{} {}", group_thousands(value), knob.unit()),
    }
}

pub(crate) fn devices_detail(answer: &super::DevicesAnswer) -> String {
    let mut text = format!(
        "{} x {} ({}): {}",
        answer.count,
        answer.device,
        split_words(answer.split),
        verdict_words(&answer.at)
    );
    if let Some((count, split, verdict)) = &answer.fewer {
        let _ = write!(
            text,
            "; {count} x {} ({}): {}",
            answer.device,
            split_words(*split),
            verdict_words(verdict)
        );
    }
    text
}

pub(crate) fn machine_detail(fit: &MachineFit) -> String {
    format!(
        "{} ({} GPU{}, {} of GPU memory; {}): {}",
        fit.title,
        fit.gpus,
        if fit.gpus == 1 { "" } else { "s" },
        fit.gpu_memory.human(),
        split_words(report(fit.split)),
        verdict_words(&fit.verdict)
    )
}

pub(crate) fn report(split: Split) -> SplitReport {
    SplitReport { tensor: split.tensor, pipeline: split.pipeline, data: split.data }
}

/// `check chat on 2 x l4 split tensor 2`.
pub fn check_line(workload: &str, count: u64, device: &str, split: SplitReport) -> String {
    if count == 1 {
        return format!("check {workload} on {device}");
    }
    let mut line = format!("check {workload} on {count} x {device} split");
    for (name, degree) in
        [("tensor", split.tensor), ("pipeline", split.pipeline), ("data", split.data)]
    {
        if degree > 1 {
            let _ = write!(line, " {name} {degree}");
        }
    }
    line
}

/// `check chat on dgx-h100 split tensor 8`.
pub fn machine_line(workload: &str, machine: &str, split: SplitReport) -> String {
    let mut line = format!("check {workload} on {machine}");
    if split.tensor * split.pipeline * split.data > 1 {
        line.push_str(" split");
        for (name, degree) in
            [("tensor", split.tensor), ("pipeline", split.pipeline), ("data", split.data)]
        {
            if degree > 1 {
                let _ = write!(line, " {name} {degree}");
            }
        }
    }
    line
}

/// `tensor 2` or `tensor 8, pipeline 2`, or `one device`.
pub fn split_words(split: SplitReport) -> String {
    let parts: Vec<String> =
        [("tensor", split.tensor), ("pipeline", split.pipeline), ("data", split.data)]
            .into_iter()
            .filter(|(_, d)| *d > 1)
            .map(|(n, d)| format!("{n} {d}"))
            .collect();
    if parts.is_empty() { "one device".to_string() } else { parts.join(", ") }
}

/// `fits, 1.20 GiB free beyond headroom` or `over by 310.00 MiB`.
pub fn verdict_words(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Fits { free } => format!("fits, {} free beyond headroom", free.human()),
        Verdict::Over { over } => format!("over by {}", over.human()),
        Verdict::Unsupported { reason } => format!("cannot run ({reason})"),
    }
}
