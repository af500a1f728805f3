//! The terminal table: one block per check, one section per device (or run of identical
//! devices), components with their category, headroom and verdict.

use std::fmt::Write;

use vram_core::budget::{Budget, Verdict};
use vram_render::Color;

use super::{check_heading, device_groups, group_label, verdict_text};

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

struct Paint(Color);

impl Paint {
    fn wrap(&self, style: &str, text: &str) -> String {
        match self.0 {
            Color::Ansi => format!("{style}{text}{RESET}"),
            Color::Never => text.to_string(),
        }
    }
}

pub(crate) fn file(name: &str, budget: &Budget, color: Color) -> String {
    let paint = Paint(color);
    let mut out = String::new();
    let _ = writeln!(out, "{}", paint.wrap(BOLD, name));
    if super::is_empty(budget) && budget.queries.is_empty() {
        let _ = writeln!(out, "  no checks evaluated");
    }
    for check in &budget.checks {
        let verdict = match &check.verdict {
            Verdict::Fits { .. } => paint.wrap(GREEN, "FITS"),
            Verdict::Over { .. } => paint.wrap(RED, "DOES NOT FIT"),
            Verdict::Unsupported { .. } => paint.wrap(RED, "CANNOT RUN"),
        };
        let split = check.split;
        let _ = writeln!(out, "\n  check {}  {verdict}", paint.wrap(BOLD, &check_heading(check)));
        if split.tensor * split.pipeline * split.data > 1 {
            let _ = writeln!(
                out,
                "  split: tensor {}, pipeline {}, data {}",
                split.tensor, split.pipeline, split.data
            );
        }
        for note in &check.notes {
            let _ = writeln!(out, "  note: {note}");
        }
        for group in device_groups(&check.devices) {
            let device = &group[0];
            let _ = writeln!(
                out,
                "\n    {} · {} · {} ({})",
                group_label(group),
                device.device_title,
                device.capacity.bytes.human(),
                device.capacity.provenance.name(),
            );
            for component in &device.components {
                let _ = writeln!(
                    out,
                    "      {:<15} {:<42} {:>12}  {}",
                    component.category.name(),
                    component.name,
                    component.bytes.human(),
                    paint.wrap(DIM, component.provenance.name()),
                );
            }
            let band = format!(
                "used (expected {} to {})",
                device.band.low.human(),
                device.band.high.human()
            );
            let _ = writeln!(out, "      {band:<58} {:>12}", device.used.human());
            if device.releasable.0 > 0 {
                let label = "less the releasable cache (returned before out of memory)";
                let _ = writeln!(out, "      {label:<58} {:>12}", device.releasable.human());
            }
            let _ = writeln!(out, "      {:<58} {:>12}", "headroom", device.headroom.bytes.human());
            let _ = writeln!(out, "      {:<58} {:>12}", "required", device.required.human());
            let _ = writeln!(out, "      {:<58} {:>12}", "capacity", device.capacity.bytes.human());
            if device.capacity.reserved.0 > 0 {
                let label =
                    format!("usable (the driver keeps {})", device.capacity.reserved.human());
                let _ = writeln!(out, "      {label:<58} {:>12}", device.capacity.usable.human());
            }
            if let Some(pool) = &device.kv_pool {
                let _ = writeln!(out, "      {}", super::pool_text(pool));
            }
            let text = verdict_text(&device.verdict);
            let style = if device.verdict.fits() { GREEN } else { RED };
            let _ = writeln!(out, "      {}", paint.wrap(style, &text));
        }
        if let Some(host) = &check.host {
            for (what, line) in [("host RAM", &host.ram), ("disk", &host.disk)] {
                let capacity = line
                    .capacity
                    .map_or("not declared".to_string(), vram_core::bytes::Bytes::human);
                let _ = writeln!(out, "\n    {what} · {capacity}");
                for component in &line.components {
                    let _ = writeln!(
                        out,
                        "      {:<58} {:>12}  {}",
                        component.name,
                        component.bytes.human(),
                        paint.wrap(DIM, component.provenance.name()),
                    );
                }
                let _ = writeln!(out, "      {:<58} {:>12}", "required", line.required.human());
                if let Some(verdict) = &line.verdict {
                    let style = if verdict.fits() { GREEN } else { RED };
                    let _ = writeln!(
                        out,
                        "      {}",
                        paint.wrap(style, &super::host_verdict_text(verdict))
                    );
                }
            }
        }
        if !check.suggestions.is_empty() {
            let _ = writeln!(out, "\n    {}", paint.wrap(BOLD, "what would fit"));
            for suggestion in &check.suggestions {
                let _ = writeln!(out, "      {}", suggestion.change);
                let _ = writeln!(out, "        {}", paint.wrap(DIM, &suggestion.detail));
                if let Some(warning) = &suggestion.warning {
                    let _ = writeln!(out, "        warning: {warning}");
                }
            }
        }
    }
    for query in &budget.queries {
        let _ = writeln!(out, "\n  {}", paint.wrap(BOLD, &query.query));
        let _ = writeln!(out, "    answer: {}", query.answer);
        let _ = writeln!(out, "    {}", paint.wrap(DIM, &query.detail));
        for machine in &query.machines {
            let _ = writeln!(
                out,
                "      {:<28} {:>2} GPUs {:>12}  {}",
                machine.machine,
                machine.gpus,
                machine.gpu_memory.human(),
                verdict_text(&machine.verdict)
            );
        }
        if let Some(warning) = &query.warning {
            let _ = writeln!(out, "    warning: {warning}");
        }
    }
    out.push('\n');
    out
}
