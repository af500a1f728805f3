//! `vram explain`: every component of a check with its formula, numbers substituted, and the
//! source of each assumption.

use std::fmt::Write;
use std::path::Path;

use vram_core::budget::CheckBudget;

use crate::output::{check_heading, device_groups, group_label, verdict_text};
use crate::{Colors, exit_code, input};

pub(crate) fn run(path: &Path, selector: Option<&str>, colors: Colors) -> u8 {
    let Some(input) = input::read(path) else { return 2 };
    let outcome = input::evaluate(&input);
    if !outcome.diagnostics.is_empty() {
        eprint!(
            "{}",
            vram_render::render(&outcome.diagnostics, &input.name, &input.text, colors.stderr)
        );
    }
    let checks: Vec<&CheckBudget> = match selector {
        None => outcome.budget.checks.iter().collect(),
        Some(selector) => match outcome.budget.check(selector) {
            Ok(check) => vec![check],
            Err(message) => {
                eprintln!("error: {message}");
                return 2;
            }
        },
    };
    for check in checks {
        out!("{}", explain(check));
    }
    exit_code(outcome.status())
}

fn explain(check: &CheckBudget) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "check {}: {}", check_heading(check), verdict_text(&check.verdict));
    let s = check.split;
    let _ = writeln!(out, "split: tensor {} × pipeline {} × data {}", s.tensor, s.pipeline, s.data);
    for note in &check.notes {
        let _ = writeln!(out, "note: {note}");
    }
    for group in device_groups(&check.devices) {
        let device = &group[0];
        let _ =
            writeln!(out, "\n{} · {} ({})", group_label(group), device.device_title, device.role);
        let _ = write!(
            out,
            "  capacity {} = {} ({})",
            device.capacity.bytes.human(),
            device.capacity.bytes,
            device.capacity.provenance.name()
        );
        match crate::output::usable_text(&device.capacity) {
            Some(usable) => {
                let _ = writeln!(out, "; {usable} = {}", device.capacity.usable);
            }
            None => out.push('\n'),
        }
        for c in &device.components {
            let _ = writeln!(
                out,
                "\n  {} [{}, {}]: {}",
                c.name,
                c.category.name(),
                c.provenance.name(),
                c.bytes.human()
            );
            let _ = writeln!(out, "    = {}", c.formula);
            if let Some(source) = &c.source {
                let _ = writeln!(out, "    source: {source}");
            }
        }
        let _ = writeln!(out, "\n  used     {} = {}", device.used.human(), device.used);
        let _ = writeln!(
            out,
            "  band     {} to {} (from each component's provenance)",
            device.band.low.human(),
            device.band.high.human()
        );
        if device.releasable.0 > 0 {
            let _ = writeln!(
                out,
                "  less     {} of releasable cache (unused segments the allocator returns before \
                 it reports out of memory)",
                device.releasable.human()
            );
        }
        let _ = writeln!(
            out,
            "  headroom {} = {}",
            device.headroom.bytes.human(),
            device.headroom.rule
        );
        let _ = writeln!(
            out,
            "  required {} = {} of {}",
            device.required.human(),
            device.required,
            device.capacity.usable
        );
        if let Some(pool) = &device.kv_pool {
            let _ = writeln!(out, "  {}", crate::output::pool_text(pool));
        }
        let _ = writeln!(out, "  {}", verdict_text(&device.verdict));
    }
    out.push('\n');
    out
}
