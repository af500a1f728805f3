//! Markdown: a table per device, for pull-request comments and reports.

use std::fmt::Write;

use vram_core::budget::Budget;

use super::{check_heading, device_groups, group_label, verdict_text};

pub(crate) fn file(name: &str, budget: &Budget) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## `{name}`\n");
    if super::is_empty(budget) && budget.queries.is_empty() {
        let _ = writeln!(out, "No checks evaluated.\n");
    }
    for check in &budget.checks {
        let _ = writeln!(out, "### {}\n", escape(&check_heading(check)));
        let _ = writeln!(out, "**{}**\n", verdict_text(&check.verdict));
        for note in &check.notes {
            let _ = writeln!(out, "- {}", escape(note));
        }
        for group in device_groups(&check.devices) {
            let device = &group[0];
            let usable = super::usable_text(&device.capacity)
                .map_or(String::new(), |usable| format!("; {usable}"));
            let _ = writeln!(
                out,
                "#### {}: {} ({}, {}{usable})\n",
                group_label(group),
                escape(&device.device_title),
                device.capacity.bytes.human(),
                device.capacity.provenance.name()
            );
            let _ = writeln!(out, "| category | component | bytes | provenance | formula |");
            let _ = writeln!(out, "|---|---|--:|---|---|");
            for c in &device.components {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} |",
                    c.category.name(),
                    escape(&c.name),
                    c.bytes.human(),
                    c.provenance.name(),
                    escape(&c.formula)
                );
            }
            let _ = writeln!(
                out,
                "| | **used** | **{}** | | expected {} to {} |",
                device.used.human(),
                device.band.low.human(),
                device.band.high.human()
            );
            if device.releasable.0 > 0 {
                let _ = writeln!(
                    out,
                    "| | less the releasable cache | −{} | | returned before out of memory |",
                    device.releasable.human()
                );
            }
            let _ = writeln!(
                out,
                "| | headroom | {} | | {} |",
                device.headroom.bytes.human(),
                escape(&device.headroom.rule)
            );
            let _ = writeln!(
                out,
                "| | **required** | **{}** | | of {} |",
                device.required.human(),
                device.capacity.usable.human()
            );
            if let Some(pool) = &device.kv_pool {
                let _ = writeln!(out, "\n{}", super::pool_text(pool));
            }
            let _ = writeln!(out, "\n{}\n", verdict_text(&device.verdict));
        }
        if let Some(host) = &check.host {
            for (what, line) in [("Host RAM", &host.ram), ("Disk", &host.disk)] {
                let capacity = line
                    .capacity
                    .map_or("not declared".to_string(), vram_core::bytes::Bytes::human);
                let _ = writeln!(out, "#### {what} ({capacity})\n");
                let _ = writeln!(out, "| component | bytes | provenance | formula |");
                let _ = writeln!(out, "|---|--:|---|---|");
                for c in &line.components {
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} |",
                        escape(&c.name),
                        c.bytes.human(),
                        c.provenance.name(),
                        escape(&c.formula)
                    );
                }
                let _ = writeln!(out, "| **required** | **{}** | | |", line.required.human());
                if let Some(verdict) = &line.verdict {
                    let _ = writeln!(out, "\n{}\n", super::host_verdict_text(verdict));
                } else {
                    out.push('\n');
                }
            }
        }
        if !check.suggestions.is_empty() {
            let _ = writeln!(out, "#### What would fit\n");
            for suggestion in &check.suggestions {
                let _ = write!(out, "- `{}`: {}", suggestion.change, escape(&suggestion.detail));
                if let Some(warning) = &suggestion.warning {
                    let _ = write!(out, " (**warning**: {})", escape(warning));
                }
                out.push('\n');
            }
            out.push('\n');
        }
    }
    if !budget.queries.is_empty() {
        let _ = writeln!(out, "### Queries\n");
        let _ = writeln!(out, "| query | answer | evidence |");
        let _ = writeln!(out, "|---|---|---|");
        for query in &budget.queries {
            let mut evidence = escape(&query.detail);
            if let Some(warning) = &query.warning {
                let _ = write!(evidence, " (**warning**: {})", escape(warning));
            }
            let _ = writeln!(out, "| `{}` | {} | {evidence} |", query.query, escape(&query.answer));
        }
        out.push('\n');
    }
    out
}

fn escape(text: &str) -> String {
    text.replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;")
}
