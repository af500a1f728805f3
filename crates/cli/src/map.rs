//! `vram map`: where a check fits, as a grid of context × sessions on one device, drawn in the
//! terminal. The same fit map the web page draws as a heat map (`vram_core::eval::grid`).

use std::fmt::Write as _;
use std::path::Path;

use vram_core::eval::grid::{self, FitMap, Grid};

use crate::{Colors, input};

/// Contexts tried by default: 1 Ki to 128 Ki tokens, doubling.
const CONTEXTS: [u64; 8] = [1024, 2048, 4096, 8192, 16_384, 32_768, 65_536, 131_072];
/// Session counts tried by default, doubling from 1 to 256.
const SESSIONS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

pub(crate) struct Request<'a> {
    pub(crate) file: &'a Path,
    pub(crate) check: Option<&'a str>,
    pub(crate) device: Option<&'a str>,
    pub(crate) contexts: &'a [u64],
    pub(crate) sessions: &'a [u64],
}

pub(crate) fn run(request: &Request<'_>, colors: Colors) -> u8 {
    let Some(input) = input::read(request.file) else { return 2 };
    let (program, diagnostics) = grid::program(&input.text);
    if diagnostics.iter().any(vram_core::diagnostic::Diagnostic::is_error) {
        eprint!("{}", vram_render::render(&diagnostics, &input.name, &input.text, colors.stderr));
        return 2;
    }
    let checks = program.checks();
    let check = match (request.check, checks) {
        (Some(id), _) => id.to_string(),
        (None, [only]) => only.id.clone(),
        (None, []) => {
            eprintln!("error: {} has no check to map", input.name);
            return 2;
        }
        (None, several) => {
            let ids: Vec<&str> = several.iter().map(|c| c.id.as_str()).collect();
            eprintln!("error: choose a check with --check: {}", ids.join(", "));
            return 2;
        }
    };
    let grid = match Grid::new(&program, &check) {
        Ok(grid) => grid,
        Err(error) => {
            eprintln!("error: {error}");
            return 2;
        }
    };
    let device = if let Some(device) = request.device {
        device.to_string()
    } else if let Some(device) = grid.check().devices.first() {
        device.clone()
    } else {
        eprintln!("error: check `{check}` names no device; give --device");
        return 2;
    };
    let contexts = if request.contexts.is_empty() { &CONTEXTS[..] } else { request.contexts };
    let sessions = if request.sessions.is_empty() { &SESSIONS[..] } else { request.sessions };
    match grid.fit_map(&device, contexts, sessions) {
        Ok(map) => {
            out!("{}", draw(&check, &map, grid.written()));
            0
        }
        Err(error) => {
            eprintln!("error: {error}");
            2
        }
    }
}

/// The map as text: one row per context, one column per session count, `█` where the check
/// fits (headroom kept) and `·` where it does not; the largest session count that fits at the
/// end of each row.
fn draw(check: &str, map: &FitMap, (context, sessions): (u64, u64)) -> String {
    let mut out = String::new();
    let split = if map.device.is_empty() { String::new() } else { format!(" on {}", map.device) };
    let _ = writeln!(
        out,
        "fit map of `{check}`{split} (written: {context} tokens × {sessions} sessions)"
    );
    if let Some(reason) = &map.unsupported {
        let _ = writeln!(out, "  unsupported: {reason}");
        return out;
    }
    let width = map.sessions.iter().map(|s| s.to_string().len()).max().unwrap_or(1).max(1);
    let _ = write!(out, "{:>12} │", "context");
    for s in &map.sessions {
        let _ = write!(out, " {s:>width$}");
    }
    let _ = writeln!(out, " │ most sessions");
    for (row, &tokens) in map.contexts.iter().enumerate() {
        let _ = write!(out, "{:>12} │", format!("{tokens} tok"));
        for column in 0..map.sessions.len() {
            let mark = if map.fits(row, column) { "█" } else { "·" };
            let _ = write!(out, " {mark:>width$}");
        }
        let most = map.boundary[row]
            .checked_sub(1)
            .map_or_else(|| "none".to_string(), |i| map.sessions[i as usize].to_string());
        let _ = writeln!(out, " │ {most}");
    }
    let _ = writeln!(out, "{} evaluations; █ fits with headroom, · does not", map.evaluations);
    out
}
