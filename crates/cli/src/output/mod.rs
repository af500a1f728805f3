//! `vram check`: evaluate files and print their budgets as a table, Markdown or JSON.

pub(crate) mod json;
mod markdown;
mod table;

use std::path::PathBuf;

use vram_core::Status;
use vram_core::budget::{Budget, DeviceBudget};

use crate::args::Format;
use crate::{Colors, exit_code, input};

pub(crate) fn check(
    paths: &[PathBuf],
    format: Format,
    catalog: Option<&std::path::Path>,
    colors: Colors,
) -> u8 {
    let mut worst = Status::Fits;
    let user_catalog = match catalog {
        Some(path) => {
            let Some(input) = input::read(path) else { return exit_code(Status::InputErrors) };
            let (program, diagnostics) = vram_core::catalog::with_user(&input.text);
            if !diagnostics.is_empty() {
                eprint!(
                    "{}",
                    vram_render::render(&diagnostics, &input.name, &input.text, colors.stderr)
                );
            }
            if diagnostics.iter().any(vram_core::diagnostic::Diagnostic::is_error) {
                return exit_code(Status::InputErrors);
            }
            Some(program)
        }
        None => None,
    };
    let mut reports = Vec::new();
    for path in paths {
        let Some(input) = input::read(path) else {
            worst = Status::InputErrors;
            continue;
        };
        let outcome = match &user_catalog {
            Some(catalog) => input::evaluate_over(&input, catalog),
            None => input::evaluate(&input),
        };
        if !outcome.diagnostics.is_empty() {
            eprint!(
                "{}",
                vram_render::render(&outcome.diagnostics, &input.name, &input.text, colors.stderr)
            );
        }
        worst = worse(worst, outcome.status());
        match format {
            Format::Table => out!("{}", table::file(&input.name, &outcome.budget, colors.stdout)),
            Format::Markdown => out!("{}", markdown::file(&input.name, &outcome.budget)),
            Format::Json => reports.push(json::FileReport::new(&input, &outcome)),
        }
    }
    if format == Format::Json {
        outln!("{}", json::document(reports));
    }
    exit_code(worst)
}

fn worse(a: Status, b: Status) -> Status {
    let rank = |s: Status| match s {
        Status::Fits => 0,
        Status::DoesNotFit => 1,
        Status::InputErrors => 2,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// Runs of consecutive devices with identical budgets, shown once as "GPUs 0-7 (each)".
pub(crate) fn device_groups(devices: &[DeviceBudget]) -> Vec<&[DeviceBudget]> {
    let mut groups = Vec::new();
    let mut start = 0;
    for i in 1..=devices.len() {
        let same = i < devices.len() && {
            let (a, b) = (&devices[start], &devices[i]);
            a.device == b.device
                && a.components == b.components
                && a.verdict == b.verdict
                && a.headroom == b.headroom
        };
        if !same {
            groups.push(&devices[start..i]);
            start = i;
        }
    }
    groups
}

/// `GPU 0` or `GPUs 0-7 (each)`.
pub(crate) fn group_label(group: &[DeviceBudget]) -> String {
    match group {
        [one] => format!("GPU {}", one.index),
        [first, .., last] => format!("GPUs {}-{} (each)", first.index, last.index),
        [] => String::new(),
    }
}

pub(crate) fn verdict_text(verdict: &vram_core::budget::Verdict) -> String {
    use vram_core::budget::Verdict;
    match verdict {
        Verdict::Fits { free } => format!("fits, {} free beyond headroom", free.human()),
        Verdict::Over { over } => format!("does not fit: over by {}", over.human()),
        Verdict::Unsupported { reason } => format!("cannot run: {reason}"),
    }
}

/// A host line's verdict: host lines keep no headroom.
pub(crate) fn host_verdict_text(verdict: &vram_core::budget::Verdict) -> String {
    use vram_core::budget::Verdict;
    match verdict {
        Verdict::Fits { free } => format!("fits, {} free", free.human()),
        Verdict::Over { over } => format!("does not fit: over by {}", over.human()),
        Verdict::Unsupported { reason } => format!("cannot run: {reason}"),
    }
}

/// `KV pool (90 % of the device): 451,200 tokens; the sessions need 393,216`.
/// `the driver keeps 850.00 MiB: 79.17 GiB usable`, for a device whose reserve is known.
pub(crate) fn usable_text(capacity: &vram_core::budget::Capacity) -> Option<String> {
    (capacity.reserved.0 > 0).then(|| {
        format!(
            "the driver keeps {}: {} usable",
            capacity.reserved.human(),
            capacity.usable.human()
        )
    })
}

pub(crate) fn pool_text(pool: &vram_core::budget::KvPool) -> String {
    use vram_core::bytes::group_thousands;
    format!(
        "KV pool ({}): {} tokens; the sessions need {}",
        pool.fraction,
        group_thousands(pool.tokens),
        group_thousands(pool.needed_tokens)
    )
}

/// The check's heading: its title when it has one, then its id.
pub(crate) fn check_heading(check: &vram_core::budget::CheckBudget) -> String {
    match &check.title {
        Some(title) => format!("{title} ({})", check.id),
        None => check.id.clone(),
    }
}

pub(crate) fn is_empty(budget: &Budget) -> bool {
    budget.checks.is_empty()
}
